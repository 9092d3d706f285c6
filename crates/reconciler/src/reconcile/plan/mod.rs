//! The **plan** step: everything a pass would write, as one value computed from the validated
//! spec and what was observed (pure; the only randomness is the key of something that must be
//! made anew: a root before initialization, a leaf that must be reissued).
//!
//! - [`pki`]: roots, the datastore client certificate, leaves and kubeconfigs, the v0.1 Secrets
//!   to move, the mounted-material hash;
//! - [`service`]: the control-plane Service;
//! - [`endpoint`]: the endpoint, from the Cluster, the ingress or gateway host, the service
//!   address or the Service;
//! - [`deployment`]: the control-plane Deployment;
//! - the rotations, each a state machine read back from its state Secret:
//!   [`sa_rotation`] (the service-account key), [`ca_rotation`] (the certificate
//!   authorities), [`encryption_rotation`] (the encryption key and the encrypted resources),
//!   on the core they share, [`rotation`];
//! - [`lifecycle`]: what a lifecycle operation waits for ([`kamaji_api::lifecycle`]);
//! - the tenant's kubeadm artifacts, once its API answers.
//!
//! Until the Service exists with its ClusterIP, the plan holds only the roots, the datastore
//! client and the Service: the serving certificate names the ClusterIP, and planning it before
//! would reissue it (and roll the pods) one pass later.

pub mod ca_rotation;
pub mod deployment;
pub mod encryption_rotation;
pub mod endpoint;
pub mod gateway;
pub mod ingress;
pub mod lifecycle;
pub mod pki;
pub mod rotation;
pub mod sa_rotation;
pub mod service;

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kamaji_api::conditions::{reasons, types};
use kamaji_api::meta::{CLUSTER_NAME_LABEL, KAMAJI_NAME_LABEL};
use kamaji_bootstrap::controlplane::{ControlPlaneSpec, DatastoreWiring, Layout};
use kamaji_bootstrap::kubeadm::{Addons, TenantArtifacts};
use kamaji_bootstrap::leaves::LeafSecret;
use kamaji_bootstrap::pki::KeyAlgorithm;
use kube::api::DynamicObject;
use serde::Serialize;
use sha2::{Digest, Sha256};

use self::endpoint::Endpoint;
use self::pki::RootSecrets;
use super::observe::Observed;
use super::status::Cond;
use super::validate::ValidSpec;
use crate::datastore::Resolved;
use crate::error::Error;

/// Annotation holding the hash of the desired object last applied by kamaji-rs.
pub const DESIRED_HASH_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/kamaji-rs-desired-hash";
/// Pod-template annotation holding the hash of the mounted key material and configuration.
pub const PKI_HASH_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/kamaji-rs-pki-hash";
/// Name of the API server container and Service port.
pub const API_SERVER_PORT_NAME: &str = "kube-apiserver";

/// The manager's settings the plan depends on.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Algorithm of new keys.
    pub algorithm: KeyAlgorithm,
    /// DNS domain of the management cluster (Service SANs).
    pub management_domain: String,
    /// Validity of new leaves and when leaves are reissued.
    pub leaf_policy: kamaji_bootstrap::pki::LeafPolicy,
    /// How long the old service-account key keeps verifying after a rotation's new key
    /// signs.
    pub service_account_overlap: std::time::Duration,
    /// The kine image (PostgreSQL and MySQL DataStores).
    pub kine_image: String,
    /// Now.
    pub now: SystemTime,
}

/// Everything one pass writes, in the order the apply step writes it.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The owner reference every object carries.
    pub owner: OwnerReference,
    /// The roots (stored, or new to be created if absent).
    pub roots: RootSecrets,
    /// The claim on the datastore schema, made before anything else is written there.
    pub schema_claim: SchemaClaim,
    /// `<cluster>-apiserver-etcd-client`.
    pub datastore_client: Secret,
    /// The service-account keys: which the API servers accept, and the next step of a
    /// requested rotation (written right after the roots).
    pub service_account: sa_rotation::ServiceAccountKeys,
    /// The certificate authorities: which the components trust, and the next step of a
    /// requested rotation (written right after the service-account keys).
    pub certificate_authorities: ca_rotation::CertificateAuthorities,
    /// The next step of a requested rotation of the encryption key (written after the
    /// certificate authorities; every Secret rewritten first when it drops the old key).
    pub encryption_keys: encryption_rotation::EncryptionKeys,
    /// The control-plane Service.
    pub service: Service,
    /// The API server's Ingress (`network.ingress`).
    pub ingress: Option<k8s_openapi::api::networking::v1::Ingress>,
    /// The API server's TLSRoute (`network.gateway`).
    pub tls_route: Option<crate::gateway_api::TlsRoute>,
    /// The rest, once the endpoint is known; `Err` says why it is not.
    pub control_plane: Result<ControlPlane, Cond>,
}

impl Plan {
    /// Whether the plan made a root (before initialization, when one was missing).
    #[must_use]
    pub fn generates_roots(&self) -> bool {
        let r = &self.roots;
        [&r.ca, &r.front_proxy_ca, &r.service_account]
            .iter()
            .any(|r| matches!(r, pki::Root::New(_)))
    }
}

/// Whether the stored Deployment's kube-apiserver reads an encryption configuration
/// (`--encryption-provider-config`): its key then encrypts stored Secrets.
fn encryption_in_use(deployment: Option<&Deployment>) -> bool {
    deployment
        .and_then(|d| d.spec.as_ref())
        .and_then(|s| s.template.spec.as_ref())
        .is_some_and(|p| {
            p.containers
                .iter()
                .filter(|c| c.name == kamaji_bootstrap::controlplane::Component::ApiServer.name())
                .flat_map(|c| c.args.iter().flatten())
                .any(|a| a.starts_with("--encryption-provider-config="))
        })
}

/// What needs the endpoint.
#[derive(Debug, Clone)]
pub struct ControlPlane {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// The leaves and kubeconfigs, in apply order.
    pub leaves: Vec<LeafSecret>,
    /// The Deployment.
    pub deployment: Deployment,
    /// How long until `spec.rollout.after` passes, while it is ahead.
    pub rollout_due: Option<std::time::Duration>,
    /// How long until the first leaf (or the datastore client) must be reissued
    /// ([`kamaji_bootstrap::leaves::LeafSecret::renew_at`]): nothing produces an event then.
    pub renewal_due: std::time::Duration,
    /// Secrets no pod needs any more, removed once every replica runs without them: those
    /// under v0.1 names (moved to new ones), and konnectivity's once it is turned off.
    pub legacy: Vec<Secret>,
    /// The tenant's kubeadm artifacts, when its API answered this pass.
    pub tenant: Option<TenantObjects>,
}

/// The kubeadm artifacts to apply in the tenant.
#[derive(Debug, Clone)]
pub struct TenantObjects {
    /// The objects, in apply order; the last is `kube-public/cluster-info`, annotated with
    /// [`TenantObjects::hash`] ([`kamaji_api::meta::TENANT_ARTIFACTS_HASH_ANNOTATION`]): it is
    /// applied after every other object and after the objects of removed addons are deleted,
    /// so a tenant whose cluster-info carries the hash holds the whole set.
    pub objects: Vec<DynamicObject>,
    /// The hash of the set (objects without that annotation, and the removed identities):
    /// a tenant whose cluster-info carries it is not written again.
    pub hash: String,
    /// The `cluster-info` kubeconfig the tenant must hold.
    pub cluster_info: Option<String>,
    /// Objects of the addons `spec.addons` leaves out (apiVersion, kind, namespace and name
    /// only): removed from the tenant where kamaji-rs applied them, kept where a user did.
    pub removed: Vec<DynamicObject>,
    /// What the pass installs, for the `TenantBootstrapped` message.
    pub summary: String,
}

/// A stable hash of any serialisable value (hex SHA-256 of its JSON), e.g. of a desired object.
#[must_use]
pub fn desired_hash<T: Serialize>(value: &T) -> String {
    let json = serde_json::to_vec(value).unwrap_or_default();
    hex::encode(Sha256::digest(json))
}

/// Labels every control-plane object carries.
#[must_use]
pub fn common_labels(spec: &ValidSpec) -> BTreeMap<String, String> {
    BTreeMap::from([
        (KAMAJI_NAME_LABEL.to_owned(), spec.names.pod_label_value()),
        (
            CLUSTER_NAME_LABEL.to_owned(),
            spec.names.cluster_label_value(),
        ),
    ])
}

fn meta(spec: &ValidSpec, name: String, owner: &OwnerReference) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(spec.namespace.clone()),
        labels: Some(common_labels(spec)),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}

/// Metadata of an exposure object (Ingress, TLSRoute): named like the Service, the common
/// labels with the user's `extra_labels` (ours win on a clash) and `extra_annotations` over
/// `annotations`.
fn exposure_meta(
    spec: &ValidSpec,
    owner: &OwnerReference,
    extra_labels: Option<&BTreeMap<String, String>>,
    mut annotations: BTreeMap<String, String>,
    extra_annotations: Option<&BTreeMap<String, String>>,
) -> ObjectMeta {
    let mut m = meta(spec, spec.names.service(), owner);
    let labels = m.labels.get_or_insert_with(BTreeMap::new);
    for (k, v) in extra_labels.into_iter().flatten() {
        labels.entry(k.clone()).or_insert_with(|| v.clone());
    }
    annotations.extend(extra_annotations.cloned().unwrap_or_default());
    m.annotations = Some(annotations).filter(|a| !a.is_empty());
    m
}

fn owned(mut secret: Secret, owner: &OwnerReference) -> Secret {
    secret.metadata.owner_references = Some(vec![owner.clone()]);
    secret
}

/// Each of `secrets` [`owned`] by `owner`.
fn owned_all(secrets: Vec<Secret>, owner: &OwnerReference) -> Vec<Secret> {
    secrets.into_iter().map(|s| owned(s, owner)).collect()
}

/// What one pass plans from: the validated spec, what was observed, the DataStore, the owner
/// reference every object carries and the manager's settings.
struct Pass<'a> {
    spec: &'a ValidSpec,
    observed: &'a Observed,
    datastore: &'a Resolved,
    owner: &'a OwnerReference,
    settings: &'a Settings,
}

/// The plan of one pass, in numbered steps: each step's comment says why it comes where it
/// does. `Err(cond)` stops the pass with nothing written: a root is missing after
/// initialization.
///
/// # Errors
/// [`Error`] when stored key material is unusable or issuing fails.
pub fn plan(
    spec: &ValidSpec,
    observed: &Observed,
    datastore: &Resolved,
    owner: OwnerReference,
    settings: &Settings,
) -> Result<Result<Plan, Cond>, Error> {
    let pass = Pass {
        spec,
        observed,
        datastore,
        owner: &owner,
        settings,
    };
    // 1. The roots first: every other key, certificate and rotation is made from them.
    let mut roots = match owned_roots(&pass)? {
        Ok(roots) => roots,
        Err(cond) => return Ok(Err(cond)),
    };
    // 2. The service-account key rotation: it needs only the stored service-account root.
    let service_account = service_account_keys(&pass, &roots)?;
    // 3. The CA rotation, before any leaf: the CAs it promotes sign this pass's leaves (8).
    let certificate_authorities = certificate_authorities(&pass, &mut roots)?;
    // 4. The encryption key rotation, before the Deployment (8): its pods mount what it writes.
    let encryption_keys = encryption_keys(&pass, &mut roots)?;
    // 5. The SQL password's salt, made once: the datastore client (6) and the claim (9) use it.
    let password_salt = password_salt(&pass)?;
    // 6. The datastore client, before the Service: the API server needs it from its start.
    let datastore_client = datastore_client(&pass, &password_salt)?;
    // 7. What exposes the API server; its Service gives the endpoint the rest waits for (8).
    let service = service::service(spec, &owner, observed.service.as_ref());
    let ingress = ingress::ingress(spec, &owner);
    let tls_route = gateway::tls_route(spec, &owner);
    // 8. What needs the endpoint (leaves, Deployment, tenant), once the Service gives one.
    let made = Made {
        roots: &roots,
        datastore_client: &datastore_client,
        service_account: &service_account,
        authorities: &certificate_authorities,
    };
    let control_plane = endpoint_and_control_plane(&pass, &made)?;
    // 9. The claim on the datastore schema, written first by the apply step, with the salt (5).
    let schema_claim = schema_claim(spec, datastore, password_salt);
    Ok(Ok(Plan {
        owner,
        roots,
        schema_claim,
        datastore_client,
        service_account,
        certificate_authorities,
        encryption_keys,
        service,
        ingress,
        tls_route,
        control_plane,
    }))
}

/// The roots read back or made ([`pki::roots`]), a new one owned by the control plane.
fn owned_roots(pass: &Pass<'_>) -> Result<Result<RootSecrets, Cond>, Error> {
    let (observed, settings) = (pass.observed, pass.settings);
    let mut roots = match pki::roots(
        pass.spec,
        &observed.secrets,
        observed.initialized,
        encryption_in_use(observed.deployment.as_ref()),
        settings.algorithm,
        settings.now,
    )? {
        Ok(r) => r,
        Err(cond) => return Ok(Err(cond)),
    };
    for root in [
        &mut roots.ca,
        &mut roots.front_proxy_ca,
        &mut roots.service_account,
        &mut roots.encryption,
    ] {
        if let pki::Root::New(s) = root {
            s.metadata.owner_references = Some(vec![pass.owner.clone()]);
        }
    }
    Ok(Ok(roots))
}

/// The service-account keys ([`sa_rotation::plan`]) while the service-account root is stored
/// (a new one has nothing to rotate), their writes owned by the control plane.
fn service_account_keys(
    pass: &Pass<'_>,
    roots: &RootSecrets,
) -> Result<sa_rotation::ServiceAccountKeys, Error> {
    let (spec, observed) = (pass.spec, pass.observed);
    let pki::Root::Stored(sa) = &roots.service_account else {
        return Ok(sa_rotation::ServiceAccountKeys::default());
    };
    let mut keys = sa_rotation::plan(
        spec,
        &sa_rotation::Inputs {
            service_account: sa,
            state: observed.secrets.get(
                &spec
                    .names
                    .internal_secret(kamaji_api::names::InternalSecret::ServiceAccountRotation),
            ),
            request: spec.service_account_key_rotation.as_deref(),
            uid: &pass.owner.uid,
            pods: observed
                .control_plane_pods
                .as_ref()
                .map(|p| (p.service_account.as_slice(), p.rolled_out)),
            overlap: pass.settings.service_account_overlap,
            algorithm: pass.settings.algorithm,
            now: pass.settings.now,
        },
    )?;
    keys.writes = owned_all(std::mem::take(&mut keys.writes), pass.owner);
    Ok(keys)
}

/// The certificate authorities ([`ca_rotation::plan`]) while both CAs are stored, their
/// writes owned by the control plane. The CAs a rotation promotes sign this pass's leaves, and
/// their Secrets count in the mounted-material hash as they will be stored: `roots` takes them.
fn certificate_authorities(
    pass: &Pass<'_>,
    roots: &mut RootSecrets,
) -> Result<ca_rotation::CertificateAuthorities, Error> {
    let (spec, observed) = (pass.spec, pass.observed);
    let (pki::Root::Stored(ca), pki::Root::Stored(front_proxy_ca)) =
        (&roots.ca, &roots.front_proxy_ca)
    else {
        return Ok(ca_rotation::CertificateAuthorities::default());
    };
    let upgrading = lifecycle::upgrade_in_progress(spec, observed);
    let mut authorities = ca_rotation::plan(
        spec,
        &ca_rotation::Inputs {
            ca,
            front_proxy_ca,
            state: observed.secrets.get(
                &spec
                    .names
                    .internal_secret(kamaji_api::names::InternalSecret::CaRotation),
            ),
            request: spec.ca_rotation.as_deref(),
            uid: &pass.owner.uid,
            pods: observed
                .control_plane_pods
                .as_ref()
                .map(|p| (p.certificate_authorities.as_slice(), p.rolled_out)),
            machines: observed.worker_machines.as_deref(),
            held: observed.held_machine_sets.as_deref(),
            upgrading: upgrading.as_deref(),
            algorithm: pass.settings.algorithm,
            now: pass.settings.now,
        },
    )?;
    authorities.writes = owned_all(std::mem::take(&mut authorities.writes), pass.owner);
    if let Some((ca, front_proxy_ca)) = &authorities.signing {
        roots.material.ca = ca.clone();
        roots.material.front_proxy_ca = front_proxy_ca.clone();
        for write in &authorities.writes {
            for root in [&mut roots.ca, &mut roots.front_proxy_ca] {
                if let pki::Root::Stored(stored) = root
                    && stored.metadata.name == write.metadata.name
                {
                    stored.data.clone_from(&write.data);
                }
            }
        }
    }
    Ok(authorities)
}

/// The encryption keys ([`encryption_rotation::plan`]) while the encryption Secret is stored;
/// the Secret a step writes is the one this pass's pods mount (`roots` takes it).
fn encryption_keys(
    pass: &Pass<'_>,
    roots: &mut RootSecrets,
) -> Result<encryption_rotation::EncryptionKeys, Error> {
    let spec = pass.spec;
    let mut keys = match &roots.encryption {
        pki::Root::Stored(stored) => encryption_rotation::plan(&encryption_rotation::Inputs {
            stored,
            request: spec.encryption_key_rotation.as_deref(),
            resources: &spec.encrypted_resources,
            pods: pass
                .observed
                .control_plane_pods
                .as_ref()
                .map(|p| (p.encryption.as_slice(), p.rolled_out)),
        })?,
        pki::Root::New(_) => encryption_rotation::EncryptionKeys::default(),
    };
    keys.migrate_with = spec
        .names
        .internal_secret(kamaji_api::names::InternalSecret::SuperAdminKubeconfig);
    if let Some(write) = keys.write.take() {
        if let pki::Root::Stored(stored) = &mut roots.encryption {
            stored.data.clone_from(&write.data);
        }
        keys.write = Some(owned(write, pass.owner));
    }
    Ok(keys)
}

/// The salt of the tenant's SQL password ([`pki::password_salt`]); empty on etcd.
fn password_salt(pass: &Pass<'_>) -> Result<String, Error> {
    if pass.datastore.sql.is_none() {
        return Ok(String::new());
    }
    let kine = pass
        .spec
        .names
        .internal_secret(kamaji_api::names::InternalSecret::Kine);
    pki::password_salt(pass.observed.secrets.get(&kine))
}

/// `<cluster>-apiserver-etcd-client`: kine's configuration on PostgreSQL and MySQL, else the
/// etcd client certificate; owned by the control plane.
fn datastore_client(pass: &Pass<'_>, password_salt: &str) -> Result<Secret, Error> {
    let (spec, datastore, settings) = (pass.spec, pass.datastore, pass.settings);
    let secret = match &datastore.sql {
        Some(access) => pki::kine_secret(
            spec,
            datastore,
            access,
            &datastore_user(spec, datastore),
            password_salt,
        ),
        None => pki::datastore_client(
            spec,
            datastore,
            &pass.observed.secrets,
            settings.algorithm,
            settings.leaf_policy,
            settings.now,
        )?,
    };
    Ok(owned(secret, pass.owner))
}

/// What needs the endpoint ([`control_plane`]), once the observed Service has a cluster IP and
/// an endpoint is chosen; else why the pass waits (`EndpointReady=False`).
fn endpoint_and_control_plane(
    pass: &Pass<'_>,
    made: &Made<'_>,
) -> Result<Result<ControlPlane, Cond>, Error> {
    let service = pass.observed.service.as_ref();
    match (
        service.and_then(endpoint::cluster_ip),
        endpoint::choose(pass.spec, service),
    ) {
        (Some(ip), Some(endpoint)) => Ok(Ok(control_plane(pass, made, endpoint, ip)?)),
        _ => Ok(Err(Cond::no(
            types::ENDPOINT_READY,
            reasons::WAITING_FOR_ENDPOINT,
            endpoint::waiting_message(pass.spec),
        ))),
    }
}

/// Whether `service`, as stored, gives the control plane what [`plan`] waits for before the
/// rest of the plan: its cluster IP (a serving-certificate address) and the endpoint.
#[must_use]
pub fn endpoint_known(spec: &ValidSpec, service: &Service) -> bool {
    endpoint::cluster_ip(service).is_some() && endpoint::choose(spec, Some(service)).is_some()
}

/// The claim a control plane holds on its datastore schema (its etcd key prefix) on every
/// DataStore its API server writes to ([`crate::datastore::claim_schema`]).
#[derive(Debug, Clone)]
pub struct SchemaClaim {
    /// `spec.dataStoreSchema` or the derived one.
    pub schema: String,
    /// `namespace/name` of the control plane: stable across `clusterctl move`, which keeps
    /// the keys and the claim.
    pub holder: String,
    /// The control plane's DataStore, then each other DataStore of `spec.dataStoreOverrides`
    /// once (same CA, its own servers).
    pub datastores: Vec<Resolved>,
    /// The tenant's etcd user: its datastore client certificate's common name.
    pub user: String,
    /// The salt of the tenant's SQL password ([`pki::password_salt`]; empty on etcd).
    pub password_salt: String,
}

/// The tenant's user on `datastore`: on etcd its client certificate's common name (derived from
/// namespace and name); on PostgreSQL and MySQL `spec.dataStoreUsername`, else the same derived
/// name.
#[must_use]
pub fn datastore_user(spec: &ValidSpec, datastore: &Resolved) -> String {
    let derived = pki::datastore_common_name(&spec.namespace, &spec.names);
    match &datastore.sql {
        Some(access) => {
            crate::datastore::sql::tenant_user(access, spec.datastore_username.as_deref(), &derived)
        }
        None => derived,
    }
}

/// The [`SchemaClaim`] of `spec` on `datastore` and its overrides.
fn schema_claim(spec: &ValidSpec, datastore: &Resolved, password_salt: String) -> SchemaClaim {
    let mut datastores = vec![datastore.clone()];
    for o in &datastore.overrides {
        if datastores.iter().all(|d| d.name != o.datastore) {
            datastores.push(Resolved {
                name: o.datastore.clone(),
                endpoints: o.servers.clone(),
                overrides: Vec::new(),
                basic_auth: o.basic_auth.clone(),
                ..datastore.clone()
            });
        }
    }
    SchemaClaim {
        schema: spec.datastore_schema.clone(),
        holder: format!("{}/{}", spec.namespace, spec.names.kcp()),
        datastores,
        user: datastore_user(spec, datastore),
        password_salt,
    }
}

/// The datastore and endpoint wiring of the components.
#[must_use]
pub fn control_plane_spec(
    spec: &ValidSpec,
    datastore: &Resolved,
    endpoint: &Endpoint,
) -> ControlPlaneSpec {
    ControlPlaneSpec {
        cluster_name: spec.cluster_name.clone(),
        port: spec.port,
        network: spec.network.clone(),
        admission_plugins: spec.admission_plugins.clone(),
        kubelet_address_types: spec.kubelet_address_types.clone(),
        // `network.advertiseAddress`, else the endpoint chosen before the first Deployment
        // exists, so the flag never changes later by itself (a later change would roll every
        // pod right after initialization).
        advertise_address: spec
            .exposure
            .advertise_address
            .or_else(|| endpoint.host.parse().ok()),
        datastore: DatastoreWiring {
            servers: datastore.server_urls(),
            prefix: kamaji_api::names::etcd_prefix(&spec.datastore_schema),
            tls: datastore.sql.is_none(),
            overrides: datastore
                .overrides
                .iter()
                .map(|o| (o.resource.clone(), o.servers.clone()))
                .collect(),
        },
        egress_selector_config: spec
            .konnectivity
            .as_ref()
            .map(|_| kamaji_bootstrap::konnectivity::egress_selector_file()),
        encryption_provider_config: Some(Layout::default().encryption_file()),
        service_account_verify_file: None,
        ca_bundle_file: None,
        front_proxy_ca_bundle_file: None,
        layout: Layout::default(),
    }
}

/// What the plan's steps before the endpoint made, that the rest is made from.
struct Made<'a> {
    roots: &'a RootSecrets,
    datastore_client: &'a Secret,
    service_account: &'a sa_rotation::ServiceAccountKeys,
    authorities: &'a ca_rotation::CertificateAuthorities,
}

/// What needs the endpoint: the leaves, the Deployment, the Secrets no pod needs any more and,
/// once the tenant answers, its kubeadm artifacts.
fn control_plane(
    pass: &Pass<'_>,
    made: &Made<'_>,
    endpoint: Endpoint,
    service_ip: std::net::IpAddr,
) -> Result<ControlPlane, Error> {
    let (spec, observed, settings) = (pass.spec, pass.observed, pass.settings);
    let legacy = pki::legacy_secrets(spec, &observed.secrets, &pass.owner.uid);
    let leaves = owned_leaves(pass, made, &endpoint, service_ip, &legacy)?;
    let renewal_due = pki::renewal_due(
        &leaves,
        pass.datastore
            .sql
            .is_none()
            .then_some(made.datastore_client),
        settings.leaf_policy,
        settings.now,
    )?;
    let (deployment, rollout_due) = control_plane_deployment(pass, made, &endpoint, &leaves)?;
    let tenant = if observed.reachable {
        let trusted = made
            .authorities
            .ca_bundle
            .as_deref()
            .unwrap_or(made.roots.material.ca.cert_pem());
        Some(tenant_objects(spec, pass.datastore, trusted, &endpoint)?)
    } else {
        None
    };
    Ok(ControlPlane {
        endpoint,
        leaves,
        deployment,
        rollout_due,
        renewal_due,
        legacy: legacy
            .into_iter()
            .map(|(_, s)| s)
            .chain(unused_konnectivity_secret(spec, observed, &pass.owner.uid))
            .collect(),
        tenant,
    })
}

/// The leaves and kubeconfigs ([`pki::leaves`]), owned by the control plane.
fn owned_leaves(
    pass: &Pass<'_>,
    made: &Made<'_>,
    endpoint: &Endpoint,
    service_ip: std::net::IpAddr,
    legacy: &[(String, Secret)],
) -> Result<Vec<LeafSecret>, Error> {
    let leaves = pki::leaves(
        pass.spec,
        &pki::LeavesInputs {
            roots: &made.roots.material,
            endpoint,
            service_ip: Some(service_ip),
            stored: &pass.observed.secrets,
            legacy,
            authorities: made.authorities,
            settings: pass.settings,
        },
    )?;
    Ok(leaves
        .into_iter()
        .map(|mut l| {
            l.secret = owned(l.secret, pass.owner);
            l
        })
        .collect())
}

/// The control-plane Deployment: the components wired to the datastore, the endpoint and the
/// rotations' files, kine beside them on SQL, the pod template annotated with the mounted
/// material's hash and the rotations' fingerprints, and `spec.rollout.after`; with how long
/// until that instant passes, while it is ahead.
fn control_plane_deployment(
    pass: &Pass<'_>,
    made: &Made<'_>,
    endpoint: &Endpoint,
    leaves: &[LeafSecret],
) -> Result<(Deployment, Option<std::time::Duration>), Error> {
    let (spec, settings, authorities) = (pass.spec, pass.settings, made.authorities);
    let pki_hash = pki::mounted_hash(leaves, made.datastore_client, made.roots);
    let mut cp = control_plane_spec(spec, pass.datastore, endpoint);
    cp.service_account_verify_file = made
        .service_account
        .verify_extra
        .as_ref()
        .map(|_| cp.layout.service_account_verify_file());
    cp.ca_bundle_file = authorities
        .ca_bundle
        .as_ref()
        .map(|_| cp.layout.ca_rotation_file(ca_rotation::CA_BUNDLE));
    cp.front_proxy_ca_bundle_file = authorities.front_proxy_ca_bundle.as_ref().map(|_| {
        cp.layout
            .ca_rotation_file(ca_rotation::FRONT_PROXY_CA_BUNDLE)
    });
    let mut deployment = deployment::deployment(spec, &cp, pass.owner, &pki_hash);
    deployment::add_kine(&mut deployment, spec, pass.datastore, &settings.kine_image);
    annotate_fingerprints(&mut deployment, made)?;
    let rollout = deployment::rollout(
        spec.rollout_after,
        pass.observed.deployment.as_ref(),
        settings.now,
    );
    deployment::annotate_rollout(&mut deployment, &rollout);
    Ok((deployment, rollout.due_in))
}

/// Annotates the pod template with the fingerprints of the keys the pods run with (encryption,
/// service-account, certificate authorities), which the rotations read back from the pods.
fn annotate_fingerprints(deployment: &mut Deployment, made: &Made<'_>) -> Result<(), Error> {
    let encryption_keys = encryption_rotation::configuration_of(made.roots.encryption.secret())
        .map(|(config, _)| encryption_rotation::fingerprint(&config))?;
    for (key, fingerprint) in [
        (
            encryption_rotation::ENCRYPTION_KEYS_ANNOTATION,
            &Some(encryption_keys),
        ),
        (
            sa_rotation::SERVICE_ACCOUNT_KEYS_ANNOTATION,
            &made.service_account.fingerprint,
        ),
        (
            ca_rotation::CERTIFICATE_AUTHORITIES_ANNOTATION,
            &made.authorities.fingerprint,
        ),
    ] {
        if let Some(fingerprint) = fingerprint
            && let Some(t) = deployment.spec.as_mut().map(|s| &mut s.template)
        {
            t.metadata
                .get_or_insert_with(Default::default)
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(key.to_owned(), fingerprint.clone());
        }
    }
    Ok(())
}

/// konnectivity's Secret while konnectivity is off, when this control plane controls it.
fn unused_konnectivity_secret(spec: &ValidSpec, observed: &Observed, uid: &str) -> Option<Secret> {
    if spec.konnectivity.is_some() {
        return None;
    }
    observed
        .secrets
        .get(&spec.names.konnectivity_secret())
        .filter(|s| kamaji_bootstrap::secrets::controlled_by(s, uid))
        .cloned()
}

/// The tenant's kubeadm artifacts at `endpoint`, trusting `trusted_ca_pem`: the declared
/// objects (cluster-info last, carrying the set's hash), the objects of left-out addons to
/// remove, and what the set installs.
fn tenant_objects(
    spec: &ValidSpec,
    datastore: &Resolved,
    trusted_ca_pem: &str,
    endpoint: &Endpoint,
) -> Result<TenantObjects, Error> {
    let tenant = spec
        .tenant
        .at_endpoint(&endpoint.host, endpoint.port, datastore.server_urls())
        .map_err(|e| Error::Tenant(format!("{}: {}", e.field, e.reason)))?;
    let artifacts = TenantArtifacts::build(&tenant, trusted_ca_pem, spec.addons)?;
    let mut objects = declared_objects(spec, &artifacts, endpoint)?;
    let removed = removed_objects(spec, &tenant, trusted_ca_pem, &objects)?;
    let hash = desired_hash(&(&objects, &removed));
    cluster_info_last(&mut objects, &hash)?;
    Ok(TenantObjects {
        hash,
        removed,
        summary: tenant_summary(spec),
        cluster_info: artifacts
            .cluster_info
            .data
            .as_ref()
            .and_then(|d| {
                d.get(kamaji_bootstrap::kubeadm::cluster_info::CLUSTER_INFO_KUBECONFIG_KEY)
            })
            .cloned(),
        objects,
    })
}

/// The objects `spec` declares in the tenant: `artifacts` and konnectivity's agents, each
/// annotated as installed by kamaji-rs.
fn declared_objects(
    spec: &ValidSpec,
    artifacts: &TenantArtifacts,
    endpoint: &Endpoint,
) -> Result<Vec<DynamicObject>, Error> {
    let mut objects = crate::tenant::objects(artifacts)?;
    if let Some(k) = &spec.konnectivity {
        let agents = kamaji_bootstrap::konnectivity::agent_objects(
            &k.agent,
            &endpoint.host,
            k.server.port,
            endpoint.port,
        );
        for v in agents.to_values()? {
            objects.push(serde_json::from_value(v)?);
        }
    }
    for o in &mut objects {
        o.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(
                kamaji_api::meta::TENANT_INSTALLED_ANNOTATION.to_owned(),
                "true".to_owned(),
            );
    }
    Ok(objects)
}

/// The identity of a tenant object: apiVersion and kind, namespace, name.
type Identity = (Option<(String, String)>, Option<String>, Option<String>);

/// The [`Identity`] of `o`.
fn identity(o: &DynamicObject) -> Identity {
    (
        o.types.clone().map(|t| (t.api_version, t.kind)),
        o.metadata.namespace.clone(),
        o.metadata.name.clone(),
    )
}

/// The objects to remove from the tenant where kamaji-rs applied them (identities only):
/// every addon's objects less the `declared` ones (none rendered when every addon is
/// declared), and konnectivity's agents (all of them when it is off, the other workload kind
/// when it is on).
fn removed_objects(
    spec: &ValidSpec,
    tenant: &kamaji_bootstrap::kubeadm::Tenant,
    trusted_ca_pem: &str,
    declared: &[DynamicObject],
) -> Result<Vec<DynamicObject>, Error> {
    let all = if spec.addons == Addons::default() {
        Vec::new()
    } else {
        crate::tenant::objects(&TenantArtifacts::build(
            tenant,
            trusted_ca_pem,
            Addons::default(),
        )?)?
    };
    let declared: std::collections::BTreeSet<_> = declared.iter().map(identity).collect();
    let konnectivity_objects = kamaji_bootstrap::konnectivity::agent_identities()
        .into_iter()
        .map(|(api_version, kind, namespace, name)| DynamicObject {
            types: Some(kube::api::TypeMeta {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
            }),
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                namespace: namespace.map(str::to_owned),
                ..Default::default()
            },
            data: serde_json::Value::Null,
        });
    Ok(all
        .into_iter()
        .chain(konnectivity_objects)
        .filter(|o| !declared.contains(&identity(o)))
        .map(|o| DynamicObject {
            types: o.types,
            metadata: kube::api::ObjectMeta {
                name: o.metadata.name,
                namespace: o.metadata.namespace,
                ..Default::default()
            },
            data: serde_json::Value::Null,
        })
        .collect())
}

/// What the tenant's artifacts install, for the `TenantBootstrapped` message.
fn tenant_summary(spec: &ValidSpec) -> String {
    let mut summary = vec!["cluster-info, kubeadm-config, kubelet-config, join RBAC"];
    if spec.addons.kube_proxy {
        summary.push("kube-proxy");
    }
    if spec.addons.coredns {
        summary.push("CoreDNS");
    }
    if spec.konnectivity.is_some() {
        summary.push("konnectivity agents");
    }
    summary.join(", ")
}

/// Moves `kube-public/cluster-info` to the end of `objects` and annotates it with `hash`
/// ([`TenantObjects::objects`]).
fn cluster_info_last(objects: &mut Vec<DynamicObject>, hash: &str) -> Result<(), Error> {
    let at = objects
        .iter()
        .position(|o| {
            o.types.as_ref().is_some_and(|t| t.kind == "ConfigMap")
                && o.metadata.namespace.as_deref() == Some("kube-public")
                && o.metadata.name.as_deref() == Some("cluster-info")
        })
        .ok_or_else(|| Error::Tenant("the tenant objects lack cluster-info".into()))?;
    let mut cluster_info = objects.remove(at);
    cluster_info
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            kamaji_api::meta::TENANT_ARTIFACTS_HASH_ANNOTATION.to_owned(),
            hash.to_owned(),
        );
    objects.push(cluster_info);
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::reconcile::validate::selector_labels;

    /// The three roots, in the order the apply step writes them.
    pub(crate) fn three_roots(roots: &RootSecrets) -> [&pki::Root; 3] {
        [&roots.ca, &roots.front_proxy_ca, &roots.service_account]
    }
    use crate::reconcile::validate::tests::{fixture, valid};
    use kamaji_bootstrap::pki::CertificateAuthority;
    use kube::ResourceExt;

    /// The tenant objects of F0 with `patch`, behind `10.0.0.10:6443`.
    fn tenant_of(patch: serde_json::Value) -> TenantObjects {
        let roots = kamaji_bootstrap::pki::TenantRoots::generate(
            KeyAlgorithm::default(),
            SystemTime::now(),
        )
        .unwrap();
        let endpoint = Endpoint {
            host: "10.0.0.10".into(),
            port: 6443,
        };
        tenant_objects(
            &valid(&fixture(patch)),
            &datastore(),
            roots.ca.cert_pem(),
            &endpoint,
        )
        .unwrap()
    }

    /// Tenant object `kind` `name` of `t`, as JSON.
    fn find(t: &TenantObjects, kind: &str, name: &str) -> serde_json::Value {
        let o = t
            .objects
            .iter()
            .find(|o| o.types.as_ref().is_some_and(|ty| ty.kind == kind) && o.name_any() == name)
            .unwrap();
        serde_json::to_value(o).unwrap()
    }

    /// The owner reference of the builders' tests.
    pub(crate) fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "controlplane.cluster.x-k8s.io/v1alpha2".into(),
            kind: "KamajiControlPlane".into(),
            name: "demo".into(),
            uid: "f0-uid".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    pub(crate) fn datastore() -> Resolved {
        let ca = CertificateAuthority::generate(
            "datastore-ca",
            KeyAlgorithm::default(),
            SystemTime::now(),
        )
        .unwrap();
        Resolved {
            name: "default".into(),
            driver: kamaji_api::datastore::Driver::Etcd,
            sql: None,
            endpoints: vec!["10.0.0.2:2379".into()],
            ca_cert: ca.cert_pem().into(),
            ca_key: ca.key_pem().into(),
            overrides: Vec::new(),
            basic_auth: None,
        }
    }

    pub(crate) fn settings() -> Settings {
        Settings {
            algorithm: KeyAlgorithm::default(),
            management_domain: "cluster.local".into(),
            leaf_policy: kamaji_bootstrap::pki::LeafPolicy::default(),
            service_account_overlap: std::time::Duration::from_hours(25),
            kine_image: crate::context::DEFAULT_KINE_IMAGE.into(),
            now: SystemTime::now(),
        }
    }

    /// F0's Service as the API server stores it: ClusterIP allocated, load-balancer address
    /// `10.0.0.10` (shared/cases/README.md).
    pub(crate) fn stored_service(spec: &ValidSpec) -> Service {
        let mut s = service::service(spec, &owner(), None);
        s.spec.as_mut().unwrap().cluster_ip = Some("10.0.0.5".into());
        s.status = serde_json::from_value(
            serde_json::json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.10"}]}}),
        )
        .unwrap();
        s
    }

    pub(crate) fn observed(
        secrets: BTreeMap<String, Secret>,
        service: Option<Service>,
    ) -> Observed {
        Observed {
            secrets,
            deployment: None,
            service,
            initialized: false,
            reachable: false,
            control_plane_pods: None,
            worker_machines: None,
            held_machine_sets: None,
            status_version: None,
        }
    }

    /// The schema is claimed on the control plane's DataStore and once on each other
    /// DataStore of its overrides (their servers, the same CA), for `namespace/name`;
    /// `dataStoreSchema` when set; the etcd user is the client certificate's common name.
    #[test]
    fn the_schema_is_claimed_on_every_datastore_the_api_server_writes_to() {
        let spec = valid(&fixture(
            serde_json::json!({"dataStoreSchema": "custom_schema"}),
        ));
        let mut ds = datastore();
        for resource in ["/events", "coordination.k8s.io/leases"] {
            ds.overrides.push(crate::datastore::Override {
                resource: resource.into(),
                datastore: "events".into(),
                servers: vec!["https://10.0.0.3:2379".into()],
                basic_auth: Some(crate::datastore::UserPassword {
                    username: "events-admin".into(),
                    password: "secret".into(),
                }),
            });
        }
        ds.overrides.push(crate::datastore::Override {
            resource: "apps/deployments".into(),
            datastore: "default".into(),
            servers: ds.server_urls(),
            basic_auth: None,
        });
        let claim = schema_claim(&spec, &ds, String::new());
        assert_eq!(claim.schema, "custom_schema");
        assert_eq!(claim.holder, format!("{}/demo", spec.namespace));
        let at: Vec<(&str, Vec<String>)> = claim
            .datastores
            .iter()
            .map(|d| (d.name.as_str(), d.server_urls()))
            .collect();
        assert_eq!(
            at,
            [
                ("default", vec!["https://10.0.0.2:2379".to_owned()]),
                ("events", vec!["https://10.0.0.3:2379".to_owned()]),
            ]
        );
        assert!(claim.datastores.iter().all(|d| d.ca_cert == ds.ca_cert));
        // Each DataStore's own administrator.
        assert_eq!(
            claim
                .datastores
                .iter()
                .map(|d| d.basic_auth.as_ref().map(|b| b.username.as_str()))
                .collect::<Vec<_>>(),
            [None, Some("events-admin")]
        );
        // The etcd user is the common name of the client certificate the API server gets.
        let client = pki::datastore_client(
            &spec,
            &ds,
            &BTreeMap::new(),
            KeyAlgorithm::default(),
            kamaji_bootstrap::pki::LeafPolicy::default(),
            SystemTime::now(),
        )
        .unwrap();
        let (cert, _) = kamaji_bootstrap::secrets::tls_pair_of(&client).unwrap();
        let info = kamaji_bootstrap::pki::inspect::CertificateInfo::from_pem(&cert).unwrap();
        assert_eq!(info.common_name.as_deref(), Some(claim.user.as_str()));
        assert_ne!(claim.user, claim.schema);
    }

    #[test]
    fn f0_service_and_deployment() {
        let spec = valid(&fixture(serde_json::json!({})));
        let ds = datastore();
        let endpoint = Endpoint {
            host: "10.0.0.10".into(),
            port: 6443,
        };
        let cp = control_plane_spec(&spec, &ds, &endpoint);
        insta::assert_yaml_snapshot!("f0_service", service::service(&spec, &owner(), None));
        insta::assert_yaml_snapshot!(
            "f0_deployment",
            deployment::deployment(&spec, &cp, &owner(), "<pki-hash>")
        );
    }

    /// The tenant objects follow `spec.addons`: a declared addon is applied, an absent one is
    /// listed for removal (identities only), and the hash tells the two apart.
    #[test]
    fn addons_are_applied_as_declared_and_the_others_listed_for_removal() {
        let names = |objs: &[DynamicObject]| -> std::collections::BTreeSet<String> {
            objs.iter()
                .map(|o| {
                    let kind = o.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
                    format!("{kind}/{}", o.name_any())
                })
                .collect()
        };
        let of = |addons: serde_json::Value| tenant_of(serde_json::json!({"addons": addons}));
        let none = of(serde_json::Value::Null);
        let proxy = of(serde_json::json!({"kubeProxy": {}}));
        for n in [
            "DaemonSet/kube-proxy",
            "Deployment/coredns",
            "Service/kube-dns",
        ] {
            assert!(!names(&none.objects).contains(n), "{n} applied undeclared");
        }
        assert!(names(&none.removed).contains("DaemonSet/kube-proxy"));
        assert!(names(&none.removed).contains("Deployment/coredns"));
        assert!(names(&proxy.objects).contains("DaemonSet/kube-proxy"));
        assert!(!names(&proxy.removed).contains("DaemonSet/kube-proxy"));
        assert!(names(&proxy.removed).contains("Deployment/coredns"));
        // Join RBAC is never an addon's to remove.
        assert!(names(&none.objects).contains("ConfigMap/kubeadm-config"));
        assert!(none.removed.iter().all(|o| o.data.is_null()));
        // Everything applied is marked installed (only marked objects are ever removed).
        assert!(proxy.objects.iter().all(|o| {
            o.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(kamaji_api::meta::TENANT_INSTALLED_ANNOTATION))
        }));
        assert!(!none.summary.contains("kube-proxy"));
        assert!(proxy.summary.contains("kube-proxy"));
        assert_ne!(none.hash, proxy.hash);
    }

    /// `addons.konnectivity`: the server runs beside kube-apiserver (which sends its `cluster`
    /// egress through the shared socket) with the spec's settings, and the Service carries the
    /// server port; without it the pod has none of this.
    #[test]
    fn konnectivity_runs_its_server_beside_the_api_server_and_its_agents_in_the_tenant() {
        let on = serde_json::json!({"addons": {"konnectivity": {
            "server": {"port": 8132, "extraArgs": ["--keepalive-time=30s"],
                       "resources": {"requests": {"cpu": "50m"}},
                       "securityContext": {"readOnlyRootFilesystem": true}},
            "agent": {"mode": "Deployment", "replicas": 2, "hostNetwork": true,
                      "version": "v0.36.1", "extraArgs": ["--sync-interval=2s"]}}}});
        let spec = valid(&fixture(on));
        // A mirror's image and tag reach the sidecar.
        let mirrored = valid(&fixture(serde_json::json!({"addons": {"konnectivity": {
            "server": {"image": "mirror.example.com/kas/proxy-server", "version": "v0.36.2"}}}})));
        assert_eq!(
            mirrored.konnectivity.as_ref().unwrap().server.image,
            "mirror.example.com/kas/proxy-server:v0.36.2"
        );
        let endpoint = Endpoint {
            host: "10.0.0.10".into(),
            port: 6443,
        };
        let cp = control_plane_spec(&spec, &datastore(), &endpoint);
        let d = serde_json::to_value(deployment::deployment(&spec, &cp, &owner(), "h")).unwrap();
        let pod = &d["spec"]["template"]["spec"];
        let containers = pod["containers"].as_array().unwrap();
        let server = containers
            .iter()
            .find(|c| c["name"] == "konnectivity-server")
            .unwrap();
        assert_eq!(
            server["image"],
            "registry.k8s.io/kas-network-proxy/proxy-server:v0.36.0"
        );
        assert_eq!(server["resources"]["requests"]["cpu"], "50m");
        assert_eq!(server["securityContext"]["readOnlyRootFilesystem"], true);
        let args: Vec<&str> = server["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(args.contains(&"--keepalive-time=30s"));
        assert!(args.contains(&"--enable-lease-controller"));
        assert!(
            !args.iter().any(|a| a.starts_with("--server-count")),
            "the template must not change with the replica count"
        );
        let api = containers
            .iter()
            .find(|c| c["name"] == "kube-apiserver")
            .unwrap();
        assert!(api["args"].as_array().unwrap().contains(&serde_json::json!(
            "--egress-selector-config-file=/etc/kubernetes/konnectivity/egress-selector-configuration.yaml"
        )));
        let mounts = |c: &serde_json::Value| -> Vec<String> {
            c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["name"].as_str().unwrap().to_owned())
                .collect()
        };
        for c in [api, server] {
            assert!(mounts(c).contains(&"konnectivity-uds".to_owned()));
            assert!(mounts(c).contains(&"konnectivity".to_owned()));
        }
        assert!(
            pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["secret"]["secretName"] == "demo-konnectivity-server.kubeconfig")
        );
        let plain = valid(&fixture(serde_json::json!({})));
        let cp = control_plane_spec(&plain, &datastore(), &endpoint);
        let d = serde_json::to_value(deployment::deployment(&plain, &cp, &owner(), "h")).unwrap();
        assert!(!d.to_string().contains("konnectivity"));
        let svc = serde_json::to_value(service::service(&spec, &owner(), None)).unwrap();
        assert!(
            svc["spec"]["ports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "konnectivity" && p["port"] == 8132)
        );
    }

    /// `addons.konnectivity`'s agents in the tenant: the workload of the mode with the spec's
    /// settings, the server identity's binding; the other workload kind, and everything when
    /// konnectivity is off, listed for removal.
    #[test]
    fn konnectivity_agents_are_applied_in_the_tenant_as_declared_and_removed_without_it() {
        let t = tenant_of(serde_json::json!({"addons": {"konnectivity": {
            "agent": {"mode": "Deployment", "replicas": 2, "hostNetwork": true,
                      "image": "mirror.example.com/kas/proxy-agent",
                      "version": "v0.36.1", "extraArgs": ["--sync-interval=2s"]}}}}));
        let agents = find(&t, "Deployment", "konnectivity-agent");
        assert_eq!(agents["spec"]["replicas"], 2);
        let agent_pod = &agents["spec"]["template"]["spec"];
        assert_eq!(agent_pod["hostNetwork"], true);
        assert_eq!(
            agent_pod["containers"][0]["image"],
            "mirror.example.com/kas/proxy-agent:v0.36.1"
        );
        // `agent` given without tolerations keeps the default one; agents in the host network
        // claim their ports on the node.
        assert_eq!(agent_pod["tolerations"][0]["key"], "CriticalAddonsOnly");
        assert_eq!(agent_pod["containers"][0]["ports"][1]["hostPort"], 8134);
        let args = agent_pod["containers"][0]["args"].as_array().unwrap();
        assert!(args.contains(&serde_json::json!("--proxy-server-host=10.0.0.10")));
        assert!(args.contains(&serde_json::json!("--proxy-server-port=8132")));
        assert!(args.contains(&serde_json::json!("--sync-interval=2s")));
        find(&t, "ClusterRoleBinding", "system:konnectivity-server");
        find(&t, "RoleBinding", "system:konnectivity-server");
        find(&t, "RoleBinding", "konnectivity-agent");
        // The other workload kind is removed; with konnectivity off, everything of it is.
        let removed = |t: &TenantObjects| -> Vec<String> {
            t.removed
                .iter()
                .map(|o| format!("{}/{}", o.types.as_ref().unwrap().kind, o.name_any()))
                .collect()
        };
        assert!(removed(&t).contains(&"DaemonSet/konnectivity-agent".to_owned()));
        assert!(!removed(&t).contains(&"Deployment/konnectivity-agent".to_owned()));
        assert!(t.summary.contains("konnectivity"));
        let off = tenant_of(serde_json::json!({}));
        for o in [
            "ServiceAccount/konnectivity-agent",
            "ClusterRoleBinding/system:konnectivity-server",
            "DaemonSet/konnectivity-agent",
            "Deployment/konnectivity-agent",
        ] {
            assert!(removed(&off).contains(&o.to_owned()), "{o}");
        }
    }

    /// cluster-info comes last and carries the set's hash, which changes with any object of
    /// the set (here an addon added) but not with the annotation itself: a tenant whose
    /// cluster-info carries it was applied the whole set, so a restarted manager writes nothing.
    #[test]
    fn cluster_info_is_applied_last_and_names_the_set_applied() {
        let hash_of = |o: &DynamicObject| {
            o.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(kamaji_api::meta::TENANT_ARTIFACTS_HASH_ANNOTATION))
                .cloned()
        };
        let all = tenant_of(serde_json::json!({}));
        let last = all.objects.last().unwrap();
        assert_eq!(last.types.as_ref().unwrap().kind, "ConfigMap");
        assert_eq!(last.name_any(), "cluster-info");
        assert_eq!(hash_of(last).as_deref(), Some(all.hash.as_str()));
        assert!(
            all.objects[..all.objects.len() - 1]
                .iter()
                .all(|o| hash_of(o).is_none())
        );
        let with_proxy = tenant_of(serde_json::json!({"addons": {"kubeProxy": {}}}));
        assert_ne!(with_proxy.hash, all.hash);
        assert_eq!(
            hash_of(with_proxy.objects.last().unwrap()).as_deref(),
            Some(with_proxy.hash.as_str())
        );
    }

    /// `addons.kubeProxy.mode` is the published configuration's `mode`, and a patch of
    /// `/mode` after it still wins.
    #[test]
    fn the_kube_proxy_mode_is_published_and_a_patch_still_wins() {
        let mode = |kube_proxy: serde_json::Value| -> String {
            let t = tenant_of(serde_json::json!({"addons": {"kubeProxy": kube_proxy}}));
            let cm = find(&t, "ConfigMap", "kube-proxy");
            let conf: serde_yaml::Value =
                serde_yaml::from_str(cm["data"]["config.conf"].as_str().unwrap()).unwrap();
            conf["mode"].as_str().unwrap().to_owned()
        };
        assert_eq!(mode(serde_json::json!({})), "");
        assert_eq!(mode(serde_json::json!({"mode": "ipvs"})), "ipvs");
        assert_eq!(
            mode(
                serde_json::json!({"mode": "ipvs", "configurationJSONPatches": [
                {"op": "replace", "path": "/mode", "value": "nftables"}]})
            ),
            "nftables"
        );
    }

    /// CoreDNS's image override and its Service address: `addons.coreDNS.dnsServiceIPs` over
    /// `network.dnsServiceIPs`, each the kube-dns ClusterIP and the kubelets' `clusterDNS`.
    #[test]
    fn coredns_takes_its_image_and_address_from_the_spec() {
        let network = tenant_of(
            serde_json::json!({"network": {"dnsServiceIPs": ["10.96.0.20"]},
            "addons": {"coreDNS": {"imageRepository": "mirror.example.com/dns", "imageTag": "v9.9.9"}}}),
        );
        assert_eq!(
            find(&network, "Deployment", "coredns")["spec"]["template"]["spec"]["containers"][0]["image"],
            "mirror.example.com/dns:v9.9.9"
        );
        assert_eq!(
            find(&network, "Service", "kube-dns")["spec"]["clusterIP"],
            "10.96.0.20"
        );
        let kubelet = find(&network, "ConfigMap", "kubelet-config")["data"]["kubelet"].clone();
        assert!(
            kubelet.as_str().unwrap().contains("10.96.0.20"),
            "{kubelet}"
        );
        let own = tenant_of(
            serde_json::json!({"network": {"dnsServiceIPs": ["10.96.0.20"]},
            "addons": {"coreDNS": {"dnsServiceIPs": ["10.96.0.30"]}}}),
        );
        assert_eq!(
            find(&own, "Service", "kube-dns")["spec"]["clusterIP"],
            "10.96.0.30"
        );
    }

    /// `network.advertiseAddress` is kube-apiserver's `--advertise-address` and a serving
    /// name; without it the endpoint's IP is.
    #[test]
    fn the_advertise_address_is_the_flag_and_a_serving_name() {
        let endpoint = Endpoint {
            host: "10.0.0.10".into(),
            port: 6443,
        };
        let flag =
            |spec: &ValidSpec| control_plane_spec(spec, &datastore(), &endpoint).advertise_address;
        let set = valid(&fixture(
            serde_json::json!({"network": {"advertiseAddress": "192.0.2.44"}}),
        ));
        assert_eq!(flag(&set), Some("192.0.2.44".parse().unwrap()));
        assert!(set.exposure.cert_sans.contains(&"192.0.2.44".to_owned()));
        let unset = valid(&fixture(serde_json::json!({})));
        assert_eq!(flag(&unset), Some("10.0.0.10".parse().unwrap()));
    }

    /// A probe set whose 15 timings are `base + 0..15`, in the order liveness, readiness,
    /// startup and, within each, initialDelay, timeout, period, successThreshold (1 for
    /// liveness and startup, as corev1 requires), failureThreshold.
    fn probe_set(base: i32) -> serde_json::Value {
        let one = |k: i32, success: i32| {
            serde_json::json!({"initialDelaySeconds": base + k, "timeoutSeconds": base + k + 1,
                "periodSeconds": base + k + 2, "successThreshold": success,
                "failureThreshold": base + k + 4})
        };
        serde_json::json!({"liveness": one(0, 1), "readiness": one(5, base + 8),
            "startup": one(10, 1)})
    }

    /// A spec with every pod, component and Service field set to a distinct value: component
    /// probes for the API server (200…) and controller-manager (300…), `deployment.probes`
    /// (100…) for the scheduler, which has none of its own.
    fn full_spec() -> ValidSpec {
        let component = |image: &str, probes: Option<i32>, arg: &str| {
            let mut c = serde_json::json!({
                "containerImageName": image,
                "extraArgs": [arg],
                "extraVolumeMounts": [{"name": "cloud", "mountPath": format!("/etc/cloud/{image}")}],
                "resources": {"requests": {"cpu": format!("{}m", image.len())}},
            });
            if let Some(base) = probes {
                c["probes"] = probe_set(base);
            }
            c
        };
        valid(&fixture(serde_json::json!({
            "registry": "mirror.example.com/k8s",
            "admissionControllers": ["NodeRestriction", "AlwaysPullImages"],
            "dataStoreSchema": "custom_schema",
            "kubelet": {"preferredAddressTypes": ["Hostname", "InternalIP"]},
            "apiServer": component("my-apiserver", Some(200), "--v=2"),
            "controllerManager": component("my-controller-manager", Some(300), "--v=3"),
            "scheduler": component("my-scheduler-x", None, "--v=4"),
            "deployment": {
                "probes": probe_set(100),
                "additionalMetadata": {"labels": {"d": "l"}, "annotations": {"d": "a"}},
                "podAdditionalMetadata": {"labels": {"p": "l"}, "annotations": {"p": "a"}},
                "nodeSelector": {"pool": "control-planes"},
                "runtimeClassName": "gvisor",
                "serviceAccountName": "control-plane",
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 2, "topologyKey": "host", "whenUnsatisfiable": "ScheduleAnyway",
                     "labelSelector": {"matchLabels": {"own": "selector"}}}],
                "extraInitContainers": [{"name": "init", "image": "busybox"}],
                "extraContainers": [{"name": "sidecar", "image": "busybox"}],
                "extraVolumes": [{"name": "cloud", "secret": {"secretName": "cloud-config"}}],
                "strategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "100%"}},
            },
            "network": {
                "serviceType": "LoadBalancer",
                "serviceLabels": {"s": "l"},
                "serviceAnnotations": {"s": "a"},
                "allocateLoadBalancerNodePorts": false,
                "loadBalancerConfig": {"loadBalancerClass": "example.com/lb",
                    "loadBalancerSourceRanges": ["10.0.0.0/8"]},
                "additionalServicePorts": [{"name": "metrics", "port": 9443,
                    "targetPort": 9444, "protocol": "TCP", "appProtocol": "https"}],
            },
        })))
    }

    /// The Deployment built from [`full_spec`].
    fn full_deployment(spec: &ValidSpec) -> Deployment {
        let endpoint = Endpoint {
            host: "10.0.0.10".into(),
            port: 6443,
        };
        let cp = control_plane_spec(spec, &datastore(), &endpoint);
        deployment::deployment(spec, &cp, &owner(), "h")
    }

    /// Every `deployment` field reaches the Deployment or its pod template.
    #[test]
    fn every_pod_field_reaches_the_deployment() {
        let spec = full_spec();
        let d = full_deployment(&spec);
        let labels = d.metadata.labels.clone().unwrap();
        let annotations = d.metadata.annotations.clone().unwrap();
        assert_eq!(
            (labels["d"].as_str(), annotations["d"].as_str()),
            ("l", "a")
        );
        let ds = d.spec.clone().unwrap();
        let strategy = ds.strategy.unwrap().rolling_update.unwrap();
        assert_eq!(
            strategy.max_surge,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("100%".into()))
        );
        let template = ds.template;
        let pod_meta = template.metadata.unwrap();
        assert_eq!(pod_meta.labels.unwrap()["p"], "l");
        assert_eq!(pod_meta.annotations.unwrap()["p"], "a");
        let pod = template.spec.unwrap();
        assert_eq!(pod.node_selector.unwrap()["pool"], "control-planes");
        assert_eq!(pod.runtime_class_name.as_deref(), Some("gvisor"));
        assert_eq!(pod.service_account_name.as_deref(), Some("control-plane"));
        assert!(pod.affinity.unwrap().node_affinity.is_some());
        assert_eq!(
            pod.tolerations.unwrap()[0].key.as_deref(),
            Some("dedicated")
        );
        let tsc = pod.topology_spread_constraints.unwrap();
        assert_eq!(
            tsc[0].label_selector.as_ref().unwrap().match_labels,
            Some(selector_labels(&spec)),
            "a constraint without labelSelector counts the control plane's pods"
        );
        assert_eq!(
            tsc[1]
                .label_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["own"],
            "selector"
        );
        assert_eq!(pod.init_containers.unwrap()[0].name, "init");
        assert!(pod.containers.iter().any(|c| c.name == "sidecar"));
        assert!(pod.volumes.unwrap().iter().any(|v| v.name == "cloud"));
    }

    /// Every component field (image name, extra args and mounts, resources, each probe
    /// timing) and the registry, admission plugins, datastore schema and kubelet address
    /// types reach the component's container.
    #[test]
    fn every_component_field_reaches_its_container() {
        use k8s_openapi::api::core::v1::{Container, Probe};
        let spec = full_spec();
        let pod = full_deployment(&spec).spec.unwrap().template.spec.unwrap();
        let by_name =
            |n: &str| -> Container { pod.containers.iter().find(|c| c.name == n).unwrap().clone() };
        let timings = |p: Option<Probe>| {
            let p = p.unwrap();
            [
                p.initial_delay_seconds,
                p.timeout_seconds,
                p.period_seconds,
                p.success_threshold,
                p.failure_threshold,
            ]
        };
        for (name, image, base, arg) in [
            ("kube-apiserver", "my-apiserver", 200, "--v=2"),
            (
                "kube-controller-manager",
                "my-controller-manager",
                300,
                "--v=3",
            ),
            ("kube-scheduler", "my-scheduler-x", 100, "--v=4"),
        ] {
            let c = by_name(name);
            assert_eq!(
                c.image.as_deref(),
                Some(format!("mirror.example.com/k8s/{image}:v1.36.3").as_str())
            );
            assert!(c.args.as_ref().unwrap().contains(&arg.to_owned()), "{name}");
            assert!(
                c.volume_mounts
                    .as_ref()
                    .unwrap()
                    .iter()
                    .any(|m| m.mount_path == format!("/etc/cloud/{image}")),
                "{name}"
            );
            assert_eq!(
                c.resources.as_ref().unwrap().requests.as_ref().unwrap()["cpu"].0,
                format!("{}m", image.len())
            );
            let s = |k: i32| Some(base + k);
            assert_eq!(
                timings(c.liveness_probe.clone()),
                [s(0), s(1), s(2), Some(1), s(4)],
                "{name} liveness"
            );
            assert_eq!(
                timings(c.readiness_probe.clone()),
                [s(5), s(6), s(7), s(8), s(9)],
                "{name} readiness"
            );
            assert_eq!(
                timings(c.startup_probe.clone()),
                [s(10), s(11), s(12), Some(1), s(14)],
                "{name} startup"
            );
        }
        let api = by_name("kube-apiserver").args.unwrap();
        for flag in [
            "--enable-admission-plugins=NodeRestriction,AlwaysPullImages",
            "--etcd-prefix=/custom_schema",
            "--kubelet-preferred-address-types=Hostname,InternalIP",
        ] {
            assert!(api.contains(&flag.to_owned()), "{flag}: {api:?}");
        }
    }

    /// Every `network` field of the Service reaches it.
    #[test]
    fn every_service_field_reaches_the_service() {
        let spec = full_spec();
        let svc = service::service(&spec, &owner(), None);
        let m = &svc.metadata;
        assert_eq!(m.labels.as_ref().unwrap()["s"], "l");
        assert_eq!(m.annotations.as_ref().unwrap()["s"], "a");
        let ss = svc.spec.unwrap();
        assert_eq!(ss.allocate_load_balancer_node_ports, Some(false));
        assert_eq!(ss.load_balancer_class.as_deref(), Some("example.com/lb"));
        assert_eq!(
            ss.load_balancer_source_ranges,
            Some(vec!["10.0.0.0/8".to_owned()])
        );
        let extra = ss
            .ports
            .unwrap()
            .into_iter()
            .find(|p| p.name.as_deref() == Some("metrics"))
            .unwrap();
        assert_eq!(
            (
                extra.port,
                extra.protocol.as_deref(),
                extra.app_protocol.as_deref()
            ),
            (9443, Some("TCP"), Some("https"))
        );
        assert_eq!(
            extra.target_port,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(9444))
        );
    }

    #[test]
    fn identical_inputs_give_an_identical_desired_hash() {
        let spec = valid(&fixture(serde_json::json!({})));
        let ds = datastore();
        let endpoint = Endpoint {
            host: "10.0.0.10".into(),
            port: 6443,
        };
        let cp = control_plane_spec(&spec, &ds, &endpoint);
        let a = deployment::deployment(&spec, &cp, &owner(), "h");
        let b = deployment::deployment(&spec, &cp, &owner(), "h");
        assert_eq!(desired_hash(&a), desired_hash(&b));
        let other = deployment::deployment(&spec, &cp, &owner(), "h2");
        assert_ne!(
            desired_hash(&a),
            desired_hash(&other),
            "the key material rolls the pods"
        );
    }

    /// A PostgreSQL DataStore at `10.0.0.7:5432` with a CA.
    fn postgres_datastore() -> Resolved {
        use crate::datastore::sql::{Dialect, SqlAccess};
        let mut ds = datastore();
        ds.driver = kamaji_api::datastore::Driver::PostgreSQL;
        ds.endpoints = vec!["10.0.0.7:5432".into()];
        ds.ca_cert = String::new();
        ds.ca_key = String::new();
        ds.sql = Some(SqlAccess {
            dialect: Dialect::PostgreSql,
            admin: crate::datastore::UserPassword {
                username: "admin".into(),
                password: "secret".into(),
            },
            ca_cert: Some("-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n".into()),
            client: None,
        });
        ds
    }

    /// A PostgreSQL DataStore: the API server talks to kine on the pod's loopback without
    /// etcd certificates; kine gets its endpoint (database, user, derived password) from
    /// `<cluster>-kine.config` through the environment, the DataStore's CA as `--ca-file`, and
    /// `spec.kine`'s flags and resources; `spec.dataStoreUsername` names the user. On etcd
    /// that user name and `spec.kine` are refused naming them, and overrides on PostgreSQL.
    #[test]
    fn a_postgresql_datastore_runs_kine_beside_the_api_server() {
        let spec = valid(&fixture(serde_json::json!({
            "dataStoreSchema": "tenant_db",
            "dataStoreUsername": "tenant_user",
            "kine": {"extraArgs": ["--metrics-bind-address=127.0.0.1:2381", "--debug"],
                     "resources": {"limits": {"memory": "128Mi"}}},
        })));
        let ds = postgres_datastore();
        assert!(crate::reconcile::validate::against_datastore(&spec, &ds).is_empty());
        assert_eq!(datastore_user(&spec, &ds), "tenant_user");
        let first = plan(
            &spec,
            &observed(BTreeMap::new(), None),
            &ds,
            owner(),
            &settings(),
        )
        .unwrap()
        .unwrap();
        let kine = &first.datastore_client;
        assert_eq!(
            kine.name_any(),
            format!("{}-kine.config", spec.cluster_name)
        );
        let endpoint =
            String::from_utf8(kine.data.as_ref().unwrap()["endpoint"].0.clone()).unwrap();
        assert!(
            endpoint.starts_with("postgres://tenant_user:")
                && endpoint.ends_with("@10.0.0.7:5432/tenant_db?sslmode=verify-full"),
            "{endpoint}"
        );
        assert!(kine.data.as_ref().unwrap().contains_key("ca.crt"));
        let claim = &first.schema_claim;
        assert_eq!(
            (claim.schema.as_str(), claim.user.as_str()),
            ("tenant_db", "tenant_user")
        );

        let mut stored: BTreeMap<String, Secret> = three_roots(&first.roots)
            .into_iter()
            .chain(std::iter::once(&first.roots.encryption))
            .map(|r| (r.secret().name_any(), r.secret().clone()))
            .collect();
        stored.insert(kine.name_any(), kine.clone());
        let second = plan(
            &spec,
            &observed(stored, Some(stored_service(&spec))),
            &ds,
            owner(),
            &settings(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(second.datastore_client.data, kine.data, "kept");
        let d = serde_json::to_value(&second.control_plane.unwrap().deployment).unwrap();
        let containers = d["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        let args = |name: &str| -> Vec<String> {
            containers.iter().find(|c| c["name"] == name).unwrap()["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_owned())
                .collect()
        };
        let api = args("kube-apiserver");
        assert!(
            api.contains(&"--etcd-servers=http://127.0.0.1:2379".to_owned()),
            "{api:?}"
        );
        assert!(
            !api.iter().any(|a| a.starts_with("--etcd-certfile")),
            "{api:?}"
        );
        let kine_args = args("kine");
        assert_eq!(
            kine_args,
            [
                "--listen-address=127.0.0.1:2379",
                "--ca-file=/etc/kine/ca.crt",
                "--metrics-bind-address=127.0.0.1:2381",
                "--debug",
            ]
        );
        let kine_container = containers.iter().find(|c| c["name"] == "kine").unwrap();
        assert_eq!(kine_container["image"], "docker.io/rancher/kine:v0.17.5");
        assert_eq!(kine_container["resources"]["limits"]["memory"], "128Mi");
        assert_eq!(
            kine_container["env"][0]["valueFrom"]["secretKeyRef"],
            serde_json::json!({"name": format!("{}-kine.config", spec.cluster_name), "key": "endpoint", "optional": false})
        );
        assert!(
            !serde_json::to_string(&d).unwrap().contains(&endpoint),
            "the password stays in the Secret"
        );
        let volumes = d["spec"]["template"]["spec"]["volumes"].as_array().unwrap();
        assert!(volumes.iter().any(|v| v["name"] == "kine"));
        assert!(!volumes.iter().any(|v| v["name"] == "datastore"));
    }

    /// `spec.dataStoreUsername` and `spec.kine` on etcd, and overrides on PostgreSQL, are
    /// refused by name.
    /// The SQL password's salt is made once and kept; the same control plane created again
    /// (no kine Secret) gets a new one, so a new password; one from before salts keeps its
    /// password.
    #[test]
    fn the_sql_password_salt_is_made_once_and_new_for_a_control_plane_created_again() {
        let spec = valid(&fixture(serde_json::json!({})));
        let ds = postgres_datastore();
        let first = plan(
            &spec,
            &observed(BTreeMap::new(), None),
            &ds,
            owner(),
            &settings(),
        )
        .unwrap()
        .unwrap();
        let kine = &first.datastore_client;
        let mut stored = BTreeMap::from([(kine.name_any(), kine.clone())]);
        let second = plan(
            &spec,
            &observed(stored.clone(), None),
            &ds,
            owner(),
            &settings(),
        )
        .unwrap()
        .unwrap();
        let salt = |s: &Secret| {
            s.data
                .as_ref()
                .unwrap()
                .get(pki::PASSWORD_SALT_KEY)
                .cloned()
        };
        assert_eq!(salt(kine).unwrap().0.len(), 32);
        assert_eq!(second.datastore_client.data, kine.data, "kept");
        assert_eq!(second.schema_claim.password_salt.len(), 32);
        let again = plan(
            &spec,
            &observed(BTreeMap::new(), None),
            &ds,
            owner(),
            &settings(),
        )
        .unwrap()
        .unwrap();
        assert_ne!(salt(&again.datastore_client), salt(kine));
        assert_ne!(
            again.datastore_client.data.as_ref().unwrap()["endpoint"],
            kine.data.as_ref().unwrap()["endpoint"]
        );
        let mut legacy = kine.clone();
        legacy.data.as_mut().unwrap().remove(pki::PASSWORD_SALT_KEY);
        stored.insert(kine.name_any(), legacy);
        let old = plan(&spec, &observed(stored, None), &ds, owner(), &settings())
            .unwrap()
            .unwrap();
        assert!(salt(&old.datastore_client).is_none());
        assert_eq!(old.schema_claim.password_salt, "");
    }

    #[test]
    fn what_the_datastore_driver_cannot_do_is_refused_by_name() {
        let spec = valid(&fixture(serde_json::json!({
            "dataStoreUsername": "tenant_user",
            "kine": {"extraArgs": ["--debug"]},
        })));
        let mut ds = datastore();
        ds.sql = Some(crate::datastore::sql::SqlAccess {
            dialect: crate::datastore::sql::Dialect::MySql,
            admin: crate::datastore::UserPassword {
                username: "admin".into(),
                password: "secret".into(),
            },
            ca_cert: None,
            client: None,
        });
        assert!(crate::reconcile::validate::against_datastore(&spec, &ds).is_empty());
        let etcd = datastore();
        let fields: Vec<String> = crate::reconcile::validate::against_datastore(&spec, &etcd)
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(fields, ["spec.dataStoreUsername", "spec.kine"]);
        let with_override = valid(&fixture(serde_json::json!({
            "dataStoreOverrides": [{"resource": "/events", "dataStore": "other"}],
        })));
        let fields: Vec<String> =
            crate::reconcile::validate::against_datastore(&with_override, &ds)
                .into_iter()
                .map(|e| e.field)
                .collect();
        assert_eq!(fields, ["spec.dataStoreOverrides"]);
        // The servers' own names, the administrator and kine's listener are never a tenant's.
        let mut mysql = postgres_datastore();
        mysql.driver = kamaji_api::datastore::Driver::MySQL;
        let hostile = valid(&fixture(serde_json::json!({
            "dataStoreSchema": "mysql",
            "dataStoreUsername": "admin",
            "kine": {"extraArgs": ["--debug", "--listen-address=0.0.0.0:2379", "--endpoint=x"]},
        })));
        let fields: Vec<String> = crate::reconcile::validate::against_datastore(&hostile, &mysql)
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            [
                "spec.dataStoreSchema",
                "spec.dataStoreUsername",
                "spec.kine.extraArgs[1]",
                "spec.kine.extraArgs[2]"
            ]
        );
        // PostgreSQL reserves `pg_` role names.
        let reserved = valid(&fixture(
            serde_json::json!({"dataStoreUsername": "pg_owner"}),
        ));
        let errors =
            crate::reconcile::validate::against_datastore(&reserved, &postgres_datastore());
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.dataStoreUsername");
        assert!(errors[0].message.contains("reserves"), "{:?}", errors[0]);
    }

    /// Without the Service's ClusterIP the plan holds only roots, the datastore client and the
    /// Service; with it, everything; planned again from what the first plan stored, nothing
    /// changes (no key is regenerated, the Deployment's hash is the same).
    /// A new control plane's encryption configuration writes `encryptionAtRest.resources`
    /// encrypted from the start (nothing is stored yet), beside the Secrets; with them
    /// unchanged the next pass plans no change of the configuration.
    #[test]
    fn a_new_control_plane_encrypts_the_resources_asked_for_from_the_start() {
        use kamaji_bootstrap::encryption::{CONFIGURATION_KEY, Configuration, Mode};
        let spec = valid(&fixture(serde_json::json!({
            "encryptionAtRest": {"resources": ["configmaps", "secrets", "*.apps"]}
        })));
        assert_eq!(spec.encrypted_resources, ["configmaps", "*.apps"]);
        let ds = datastore();
        let first = plan(
            &spec,
            &observed(BTreeMap::new(), None),
            &ds,
            owner(),
            &settings(),
        )
        .unwrap()
        .unwrap();
        let secret = first.roots.encryption.secret().clone();
        let text =
            String::from_utf8(secret.data.as_ref().unwrap()[CONFIGURATION_KEY].0.clone()).unwrap();
        let config = Configuration::parse(&text).unwrap();
        assert_eq!(
            config.resources,
            [
                ("configmaps".to_owned(), Mode::Encrypted),
                ("*.apps".to_owned(), Mode::Encrypted)
            ]
        );
        let stored = BTreeMap::from([(secret.name_any(), secret)]);
        let second = plan(&spec, &observed(stored, None), &ds, owner(), &settings())
            .unwrap()
            .unwrap();
        assert!(second.encryption_keys.write.is_none());
        assert_eq!(
            second.encryption_keys.conditions[0].reason,
            reasons::CONFIGURED
        );
    }

    #[test]
    fn a_plan_over_its_own_result_changes_nothing() {
        let spec = valid(&fixture(serde_json::json!({})));
        let ds = datastore();
        let first = plan(
            &spec,
            &observed(BTreeMap::new(), None),
            &ds,
            owner(),
            &settings(),
        )
        .unwrap()
        .unwrap();
        assert!(
            three_roots(&first.roots)
                .into_iter()
                .all(|r| matches!(r, pki::Root::New(_)))
        );
        assert_eq!(
            first.control_plane.as_ref().unwrap_err().reason,
            reasons::WAITING_FOR_ENDPOINT
        );

        let mut stored: BTreeMap<String, Secret> = three_roots(&first.roots)
            .into_iter()
            .chain(std::iter::once(&first.roots.encryption))
            .map(|r| (r.secret().name_any(), r.secret().clone()))
            .collect();
        stored.insert(
            first.datastore_client.name_any(),
            first.datastore_client.clone(),
        );
        let svc = Some(stored_service(&spec));
        let second = plan(
            &spec,
            &observed(stored.clone(), svc.clone()),
            &ds,
            owner(),
            &settings(),
        )
        .unwrap()
        .unwrap();
        assert!(
            three_roots(&second.roots)
                .into_iter()
                .chain(std::iter::once(&second.roots.encryption))
                .all(|r| matches!(r, pki::Root::Stored(_)))
        );
        assert_eq!(
            second.datastore_client.data, first.datastore_client.data,
            "kept"
        );
        let cp = second.control_plane.unwrap();
        assert_eq!(cp.endpoint.host, "10.0.0.10");
        assert_eq!(cp.leaves.len(), 7);
        assert!(cp.leaves.iter().all(|l| l.changed));
        assert!(
            cp.leaves
                .iter()
                .all(|l| l.secret.owner_references()[0].uid == "f0-uid")
        );

        for l in &cp.leaves {
            stored.insert(l.secret.name_any(), l.secret.clone());
        }
        let third = plan(&spec, &observed(stored, svc), &ds, owner(), &settings())
            .unwrap()
            .unwrap();
        let again = third.control_plane.unwrap();
        assert!(again.leaves.iter().all(|l| !l.changed), "every leaf kept");
        assert_eq!(
            desired_hash(&again.deployment),
            desired_hash(&cp.deployment)
        );
    }

    /// The pass says when it must look again for renewal: at the earliest `notAfter − window`
    /// among the leaves and the datastore client, the older datastore client here.
    #[test]
    fn the_renewal_due_is_the_earliest_leaf_renewal_time() {
        use std::time::Duration;
        let spec = valid(&fixture(serde_json::json!({})));
        let ds = datastore();
        let whole = |t: SystemTime| {
            SystemTime::UNIX_EPOCH
                + Duration::from_secs(t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs())
        };
        let t0 = whole(SystemTime::now());
        let at = |now| Settings {
            leaf_policy: kamaji_bootstrap::pki::LeafPolicy::new(
                Duration::from_mins(10),
                Duration::from_secs(200),
            )
            .unwrap(),
            now,
            ..settings()
        };
        // The roots and the datastore client 100 s before the rest.
        let early = plan(
            &spec,
            &observed(BTreeMap::new(), None),
            &ds,
            owner(),
            &at(t0 - Duration::from_secs(100)),
        )
        .unwrap()
        .unwrap();
        let mut stored: BTreeMap<String, Secret> = three_roots(&early.roots)
            .into_iter()
            .map(|r| (r.secret().name_any(), r.secret().clone()))
            .collect();
        stored.insert(
            early.datastore_client.name_any(),
            early.datastore_client.clone(),
        );
        let svc = Some(stored_service(&spec));
        let cp = plan(&spec, &observed(stored, svc), &ds, owner(), &at(t0))
            .unwrap()
            .unwrap()
            .control_plane
            .unwrap();
        assert!(cp.leaves.iter().all(|l| l.changed), "the leaves are new");
        assert_eq!(
            cp.renewal_due,
            Duration::from_mins(5),
            "the datastore client's"
        );
    }

    /// A requested service-account key rotation: the pass stores the next key (owned) and the
    /// API server accepts it as a second key file, mounted from the rotation Secret with its
    /// public key only; planned again from what it stored, nothing changes.
    #[test]
    fn a_service_account_key_rotation_mounts_only_the_next_public_key_as_a_second_key_file() {
        let mut spec = valid(&fixture(serde_json::json!({})));
        spec.service_account_key_rotation = Some("r1".into());
        let ds = datastore();
        let first = plan(
            &spec,
            &observed(BTreeMap::new(), None),
            &ds,
            owner(),
            &settings(),
        )
        .unwrap()
        .unwrap();
        assert!(
            first.service_account.writes.is_empty(),
            "no rotation of a new key"
        );
        let mut stored: BTreeMap<String, Secret> = three_roots(&first.roots)
            .into_iter()
            .map(|r| {
                let mut s = r.secret().clone();
                s.metadata.owner_references = Some(vec![owner()]);
                (s.name_any(), s)
            })
            .collect();
        let svc = Some(stored_service(&spec));
        let second = plan(
            &spec,
            &observed(stored.clone(), svc.clone()),
            &ds,
            owner(),
            &settings(),
        )
        .unwrap()
        .unwrap();
        let keys = &second.service_account;
        assert_eq!(keys.writes.len(), 1);
        let state = &keys.writes[0];
        assert_eq!(state.name_any(), "demo-sa-rotation.keys");
        assert_eq!(state.owner_references()[0].uid, "f0-uid");
        let cp = second.control_plane.unwrap();
        let pod = cp.deployment.spec.clone().unwrap().template;
        let args = pod.spec.as_ref().unwrap().containers[0]
            .args
            .clone()
            .unwrap();
        let key_files: Vec<&String> = args
            .iter()
            .filter(|a| a.starts_with("--service-account-key-file="))
            .collect();
        assert_eq!(
            key_files,
            [
                "--service-account-key-file=/etc/kubernetes/pki/sa/tls.crt",
                "--service-account-key-file=/etc/kubernetes/pki/sa-rotation/verify.pub"
            ]
        );
        let volume = pod
            .spec
            .as_ref()
            .unwrap()
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == "sa-rotation")
            .unwrap()
            .secret
            .clone()
            .unwrap();
        let items: Vec<String> = volume.items.unwrap().into_iter().map(|i| i.key).collect();
        assert_eq!(
            items,
            ["verify.pub"],
            "the next private key never enters the pod"
        );
        assert_eq!(
            pod.metadata.unwrap().annotations.unwrap()
                [sa_rotation::SERVICE_ACCOUNT_KEYS_ANNOTATION],
            keys.fingerprint.clone().unwrap()
        );
        // The next pass, pods not yet rolled: nothing written, the same keys.
        stored.insert(state.name_any(), state.clone());
        let third = plan(&spec, &observed(stored, svc), &ds, owner(), &settings())
            .unwrap()
            .unwrap();
        assert!(third.service_account.writes.is_empty());
        assert_eq!(third.service_account.fingerprint, keys.fingerprint);
        assert_eq!(third.service_account.verify_extra, keys.verify_extra);
    }

    #[test]
    fn a_missing_root_after_initialization_is_never_planned_anew() {
        let spec = valid(&fixture(serde_json::json!({})));
        let mut o = observed(BTreeMap::new(), None);
        o.initialized = true;
        let stop = plan(&spec, &o, &datastore(), owner(), &settings())
            .unwrap()
            .unwrap_err();
        assert_eq!(stop.reason, reasons::ROOT_KEY_MATERIAL_MISSING);
        assert!(
            stop.message
                .contains("Secret tenant-a/demo-ca (the cluster CA)")
        );
    }
}
