//! The key material of one pass (pure but for the keys of what must be made anew): the roots
//! read back or, before initialization, generated once; the datastore client certificate; the
//! leaves kept or reissued by kamaji-bootstrap; the v0.1 Secrets to move; and the hash of what
//! the pods mount.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kamaji_api::conditions::{reasons, types};
use kamaji_api::names::InternalSecret;
use kamaji_bootstrap::leaves::{self, LeafInputs, LeafSecret};
use kamaji_bootstrap::pki::{
    ApiServerNames, CA_COMMON_NAME, CertificateAuthority, FRONT_PROXY_CA_COMMON_NAME, KeyAlgorithm,
    LeafCertificate, LeafPolicy, LeafRole, LeafSpec, ServiceAccountKeyPair, ServiceNames,
    TenantRoots,
};
use kamaji_bootstrap::secrets::{self, SecretTarget};

use super::endpoint::Endpoint;
use crate::error::Error;
use crate::reconcile::status::Cond;
use crate::reconcile::validate::ValidSpec;

/// One root Secret: as stored, or made now to be created with create-if-absent.
#[derive(Debug, Clone)]
pub enum Root {
    /// The stored Secret (never regenerated).
    Stored(Secret),
    /// A new Secret; the apply step creates it only if no Secret of that name exists.
    New(Secret),
}

impl Root {
    /// The Secret.
    #[must_use]
    pub fn secret(&self) -> &Secret {
        match self {
            Self::Stored(s) | Self::New(s) => s,
        }
    }
}

/// The three roots and the key the tenant's Secrets are encrypted with at rest.
#[derive(Debug, Clone)]
pub struct RootSecrets {
    /// `<cluster>-ca`: the cluster CA.
    pub ca: Root,
    /// `<cluster>-proxy`: the front-proxy CA.
    pub front_proxy_ca: Root,
    /// `<cluster>-sa`: the service-account signing key.
    pub service_account: Root,
    /// `<cluster>-encryption.config` ([`encryption`]).
    pub encryption: Root,
    /// Their key material.
    pub material: TenantRoots,
}

/// Reads the roots back, or makes the missing ones before initialization. After
/// initialization a missing root is never made again (every joined node, kubeconfig and token
/// trusts the old one): `Err` carries `CertificatesAvailable=False` saying how to restore it.
///
/// # Errors
/// [`Error::Pki`] when a stored root is unusable or generation fails.
pub fn roots(
    spec: &ValidSpec,
    stored: &BTreeMap<String, Secret>,
    initialized: bool,
    encryption_in_use: bool,
    algorithm: KeyAlgorithm,
    now: SystemTime,
) -> Result<Result<RootSecrets, Cond>, Error> {
    let n = &spec.names;
    let ns = spec.namespace.as_str();
    let target = |name: &'static str, secret: String| (name, secret);
    let wanted = [
        target("the cluster CA", n.ca_secret()),
        target("the front-proxy CA", n.front_proxy_ca_secret()),
        target(
            "the service-account signing key",
            n.service_account_secret(),
        ),
    ];
    let missing: Vec<String> = wanted
        .iter()
        .filter(|(_, name)| !stored.contains_key(name))
        .map(|(what, name)| format!("Secret {ns}/{name} ({what})"))
        .collect();
    if initialized && !missing.is_empty() {
        return Ok(Err(roots_missing(&missing)));
    }
    let make = |name: &str, i: usize| -> Result<Root, Error> {
        if let Some(s) = stored.get(name) {
            return Ok(Root::Stored(s.clone()));
        }
        let t = SecretTarget {
            name,
            namespace: ns,
            cluster_name: &spec.cluster_name,
        };
        Ok(Root::New(match i {
            0 => secrets::ca_secret(
                t,
                &CertificateAuthority::generate(CA_COMMON_NAME, algorithm, now)?,
            ),
            1 => secrets::ca_secret(
                t,
                &CertificateAuthority::generate(FRONT_PROXY_CA_COMMON_NAME, algorithm, now)?,
            ),
            _ => secrets::service_account_secret(t, &ServiceAccountKeyPair::generate(algorithm)?),
        }))
    };
    let ca = make(&wanted[0].1, 0)?;
    let front_proxy_ca = make(&wanted[1].1, 1)?;
    let service_account = make(&wanted[2].1, 2)?;
    let material = TenantRoots {
        ca: ca_of(ca.secret())?,
        front_proxy_ca: ca_of(front_proxy_ca.secret())?,
        service_account: sa_of(service_account.secret())?,
    };
    let encryption = match encryption(spec, stored, encryption_in_use)? {
        Ok(e) => e,
        Err(cond) => return Ok(Err(cond)),
    };
    Ok(Ok(RootSecrets {
        ca,
        front_proxy_ca,
        service_account,
        encryption,
        material,
    }))
}

/// `CertificatesAvailable=False` for roots `missing` after initialization: how to restore
/// them.
fn roots_missing(missing: &[String]) -> Cond {
    Cond::no(
        types::CERTIFICATES_AVAILABLE,
        reasons::ROOT_KEY_MATERIAL_MISSING,
        format!(
            "{} missing, and the control plane is initialized: kamaji-rs does not generate a \
             new one, because every joined node, issued kubeconfig and service-account token \
             trusts the old one. Restore it from a backup (for example `kubectl apply` of the \
             saved Secret, keys tls.crt and tls.key) and the control plane continues \
             unchanged; nothing is rolled until then. To move to new key material, restore it \
             first, then request a rotation (annotations {} and {}).",
            missing.join(" and "),
            kamaji_api::meta::CA_ROTATION_ANNOTATION,
            kamaji_api::meta::SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION,
        ),
    )
}

/// The name of the first key of a tenant's encryption configuration.
pub const FIRST_ENCRYPTION_KEY: &str = "key-1";

/// The tenant's encryption Secret `<cluster>-encryption.config` (key
/// [`kamaji_bootstrap::encryption::CONFIGURATION_KEY`]): read back, or made once with a new
/// key, encrypting the Secrets and `spec.encryptionAtRest.resources` (nothing is stored yet,
/// so they need no change in steps). Once an API server has run with it (`encryption_in_use`: the Deployment passes
/// `--encryption-provider-config`) a missing one is never made again, since no other key
/// decrypts what is stored: `Err` carries `CertificatesAvailable=False` saying how to restore
/// it.
///
/// # Errors
/// [`Error::Pki`] when the stored configuration does not parse or generation fails.
pub fn encryption(
    spec: &ValidSpec,
    stored: &BTreeMap<String, Secret>,
    encryption_in_use: bool,
) -> Result<Result<Root, Cond>, Error> {
    use kamaji_bootstrap::encryption::{self, CONFIGURATION_KEY, Configuration, Key, Mode};
    let name = spec
        .names
        .internal_secret(kamaji_api::names::InternalSecret::Encryption);
    if let Some(s) = stored.get(&name) {
        let config = s
            .data
            .as_ref()
            .and_then(|d| d.get(CONFIGURATION_KEY))
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .ok_or_else(|| unusable(s, format!("{CONFIGURATION_KEY} missing")))?;
        encryption::keys_of(&config).map_err(|e| unusable(s, e))?;
        return Ok(Ok(Root::Stored(s.clone())));
    }
    if encryption_in_use {
        return Ok(Err(Cond::no(
            types::CERTIFICATES_AVAILABLE,
            reasons::ENCRYPTION_KEY_MISSING,
            format!(
                "Secret {}/{name} (the key the tenant's Secrets are encrypted with at rest) is \
                 missing, and the API servers have run with it: kamaji-rs does not generate a \
                 new one, because no other key decrypts the stored Secrets. Restore it from a \
                 backup (`kubectl apply` of the saved Secret, key {CONFIGURATION_KEY}); nothing \
                 is rolled until then.",
                spec.namespace
            ),
        )));
    }
    let config = Configuration {
        keys: vec![Key::generate(FIRST_ENCRYPTION_KEY)?],
        resources: spec
            .encrypted_resources
            .iter()
            .map(|r| (r.clone(), Mode::Encrypted))
            .collect(),
    }
    .render();
    Ok(Ok(Root::New(secrets::data_secret(
        SecretTarget {
            name: &name,
            namespace: &spec.namespace,
            cluster_name: &spec.cluster_name,
        },
        BTreeMap::from([(
            CONFIGURATION_KEY.to_owned(),
            ByteString(config.into_bytes()),
        )]),
    ))))
}

/// [`crate::error::PkiError::UnusableRoot`]: the stored `secret` cannot be used, for `reason`.
fn unusable(secret: &Secret, reason: impl std::fmt::Display) -> Error {
    Error::Pki(crate::error::PkiError::unusable_root(secret, reason))
}

/// Reads a CA from its Secret (`tls.crt`, `tls.key`).
fn ca_of(secret: &Secret) -> Result<CertificateAuthority, Error> {
    let (crt, key) = secrets::tls_pair_of(secret)
        .ok_or_else(|| unusable(secret, "tls.crt or tls.key missing"))?;
    CertificateAuthority::from_pem(&crt, &key).map_err(|e| unusable(secret, e))
}

/// Reads the service-account key pair from `<cluster>-sa` (`tls.key` = private key).
fn sa_of(secret: &Secret) -> Result<ServiceAccountKeyPair, Error> {
    let (_, key) =
        secrets::tls_pair_of(secret).ok_or_else(|| unusable(secret, "tls.key missing"))?;
    ServiceAccountKeyPair::from_private_pem(&key).map_err(|e| unusable(secret, e))
}

/// The tenant's datastore client certificate (issued from the DataStore CA, kept while
/// valid) as `<cluster>-apiserver-etcd-client`, with the DataStore CA as `ca.crt`.
///
/// # Errors
/// [`Error`] when the DataStore CA does not load or issuing fails.
pub fn datastore_client(
    spec: &ValidSpec,
    ds: &crate::datastore::Resolved,
    stored: &BTreeMap<String, Secret>,
    algorithm: KeyAlgorithm,
    policy: LeafPolicy,
    now: SystemTime,
) -> Result<Secret, Error> {
    let name = spec.names.apiserver_etcd_client_secret();
    let (leaf, _) = leaves::datastore_client(
        &ds.ca_cert,
        &ds.ca_key,
        &datastore_common_name(&spec.namespace, &spec.names),
        stored.get(&name),
        algorithm,
        policy,
        now,
    )?;
    let mut secret = secrets::leaf_secret(
        SecretTarget {
            name: &name,
            namespace: &spec.namespace,
            cluster_name: &spec.cluster_name,
        },
        &leaf,
    );
    secret
        .data
        .get_or_insert_with(BTreeMap::new)
        .insert("ca.crt".into(), ByteString(ds.ca_cert.clone().into_bytes()));
    Ok(secret)
}

/// The key of kine's `--endpoint` (`KINE_ENDPOINT`) in `<cluster>-kine.config`.
pub const KINE_ENDPOINT_KEY: &str = "endpoint";

/// The key of the salt of the tenant's SQL password in `<cluster>-kine.config`
/// ([`crate::datastore::sql::tenant_password`]): 32 hex digits made when the Secret is first
/// made, so a control plane created again under the same name gets a new password.
pub const PASSWORD_SALT_KEY: &str = "password-salt";

/// The salt of the tenant's SQL password: the stored `<cluster>-kine.config`'s; empty when
/// that Secret predates salts (its password stays); a new random one when there is none.
///
/// # Errors
/// [`Error::Pki`] when no randomness is available.
pub fn password_salt(stored: Option<&Secret>) -> Result<String, Error> {
    if let Some(s) = stored {
        return Ok(s
            .data
            .as_ref()
            .and_then(|d| d.get(PASSWORD_SALT_KEY))
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .unwrap_or_default());
    }
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| {
        Error::Pki(crate::error::PkiError::UnusableRoot {
            name: PASSWORD_SALT_KEY.into(),
            reason: format!("no randomness: {e}"),
        })
    })?;
    Ok(hex::encode(salt))
}

/// `<cluster>-kine.config` for a PostgreSQL or MySQL DataStore: kine's `--endpoint` with the
/// tenant's database, user and derived password ([`crate::datastore::sql`], salted with
/// `salt`, kept under [`PASSWORD_SALT_KEY`]) under [`KINE_ENDPOINT_KEY`], the DataStore's CA
/// as `ca.crt` and its client certificate as `tls.crt`/`tls.key` when set.
#[must_use]
pub fn kine_secret(
    spec: &ValidSpec,
    ds: &crate::datastore::Resolved,
    access: &crate::datastore::sql::SqlAccess,
    user: &str,
    salt: &str,
) -> Secret {
    use crate::datastore::sql;
    let holder = format!("{}/{}", spec.namespace, spec.names.kcp());
    let tenant = sql::TenantDatabase {
        database: &spec.datastore_schema,
        user,
        holder: &holder,
    };
    let password = sql::tenant_password(access, &ds.name, &tenant, salt);
    let mut data = BTreeMap::from([(
        KINE_ENDPOINT_KEY.to_owned(),
        ByteString(sql::kine_endpoint(access, &ds.endpoints, &tenant, &password).into_bytes()),
    )]);
    if !salt.is_empty() {
        data.insert(
            PASSWORD_SALT_KEY.into(),
            ByteString(salt.as_bytes().to_vec()),
        );
    }
    if let Some(ca) = &access.ca_cert {
        data.insert("ca.crt".into(), ByteString(ca.clone().into_bytes()));
    }
    if let Some(c) = &access.client {
        data.insert("tls.crt".into(), ByteString(c.cert.clone().into_bytes()));
        data.insert("tls.key".into(), ByteString(c.key.clone().into_bytes()));
    }
    secrets::data_secret(
        SecretTarget {
            name: &spec
                .names
                .internal_secret(kamaji_api::names::InternalSecret::Kine),
            namespace: &spec.namespace,
            cluster_name: &spec.cluster_name,
        },
        data,
    )
}

/// Common name of the tenant's datastore client certificate (its datastore user name).
#[must_use]
pub fn datastore_common_name(namespace: &str, names: &kamaji_api::names::ObjectNames) -> String {
    kamaji_api::names::datastore_username(namespace, &names.deployment())
}

/// Internal Secrets this control plane stored under their pre-v0.2 names (see
/// `ObjectNames::legacy_internal_secret`), with their new names: only those it controls
/// (`uid`), since an old name may now be another cluster's CAPI Secret.
#[must_use]
pub fn legacy_secrets(
    spec: &ValidSpec,
    stored: &BTreeMap<String, Secret>,
    uid: &str,
) -> Vec<(String, Secret)> {
    InternalSecret::ALL
        .iter()
        .filter_map(|which| {
            let old = spec.names.legacy_internal_secret(*which)?;
            let secret = stored
                .get(&old)
                .filter(|s| secrets::controlled_by(s, uid))?;
            Some((spec.names.internal_secret(*which), secret.clone()))
        })
        .collect()
}

/// What [`leaves()`] reads.
#[derive(Debug, Clone, Copy)]
pub struct LeavesInputs<'a> {
    /// The roots that sign.
    pub roots: &'a TenantRoots,
    /// The endpoint the serving certificate and the kubeconfigs name.
    pub endpoint: &'a Endpoint,
    /// The control-plane Service's ClusterIP.
    pub service_ip: Option<std::net::IpAddr>,
    /// The stored Secrets.
    pub stored: &'a BTreeMap<String, Secret>,
    /// The Secrets stored under v0.1 names, with their new names ([`legacy_secrets`]).
    pub legacy: &'a [(String, Secret)],
    /// The certificate authorities of a CA rotation: what the leaves trust and serve, and
    /// who issues the kubelet client certificate.
    pub authorities: &'a super::ca_rotation::CertificateAuthorities,
    /// The management cluster's DNS domain, the new keys' algorithm, the leaf policy, now.
    pub settings: &'a super::Settings,
}

/// The leaves for the endpoint: kept or reissued (kamaji-bootstrap's decision), a leaf stored
/// under its v0.1 name counting as stored under the new one.
///
/// # Errors
/// [`Error`] when a SAN is invalid or issuing fails.
pub fn leaves(spec: &ValidSpec, inputs: &LeavesInputs<'_>) -> Result<Vec<LeafSecret>, Error> {
    let LeavesInputs {
        roots,
        endpoint,
        service_ip,
        stored,
        legacy,
        authorities,
        settings,
    } = *inputs;
    let names = ApiServerNames {
        endpoint_host: endpoint.host.clone(),
        service: Some(ServiceNames {
            name: spec.names.service(),
            namespace: spec.namespace.clone(),
            cluster_domain: settings.management_domain.clone(),
            cluster_ip: service_ip,
        }),
        cert_sans: spec.exposure.cert_sans.clone(),
        external_hosts: spec
            .exposure
            .external
            .iter()
            .map(|(h, _)| h.clone())
            .collect(),
    };
    let api_server = LeafSpec::api_server(&names, &spec.network)
        .map_err(|e| Error::Pki(crate::error::PkiError::Validation(e)))?;
    let mut existing = stored.clone();
    for (new_name, old) in legacy {
        existing
            .entry(new_name.clone())
            .or_insert_with(|| old.clone());
    }
    let local = kamaji_bootstrap::kubeconfig::server_url("localhost", spec.port);
    let leaf_inputs = LeafInputs {
        names: &spec.names,
        namespace: &spec.namespace,
        cluster_name: &spec.cluster_name,
        roots,
        api_server: &api_server,
        local_url: local,
        endpoint_url: endpoint.url(),
        super_admin_url: service_ip.map_or_else(
            || endpoint.url(),
            |ip| kamaji_bootstrap::kubeconfig::server_url(&ip.to_string(), spec.port),
        ),
        konnectivity: spec.konnectivity.is_some(),
        trust_bundle: authorities.ca_bundle.as_deref(),
        serving_chain: authorities.serving_chain.as_deref(),
        kubelet_client_issuer: authorities.kubelet_client_issuer.as_ref(),
        algorithm: settings.algorithm,
        policy: settings.leaf_policy,
        now: settings.now,
    };
    Ok(leaves::plan(&leaf_inputs, &existing)?)
}

/// How long from `now` until the first of `leaves` or the datastore client (as planned this
/// pass) must be reissued under `policy`; zero when that instant has passed.
///
/// # Errors
/// [`Error`] when the datastore client Secret (etcd's; `None` for kine's) holds no parseable
/// certificate (it was built this pass, so this does not happen).
pub fn renewal_due(
    leaves: &[LeafSecret],
    datastore_client: Option<&Secret>,
    policy: LeafPolicy,
    now: SystemTime,
) -> Result<std::time::Duration, Error> {
    let client = match datastore_client {
        Some(secret) => {
            let (crt, key) = secrets::tls_pair_of(secret)
                .ok_or_else(|| unusable(secret, "tls.crt or tls.key missing"))?;
            let client = LeafCertificate::from_pem(LeafRole::DatastoreClient, &crt, &key);
            Some(leaves::renew_at(&client, policy)?)
        }
        None => None,
    };
    let first = leaves
        .iter()
        .map(|l| l.renew_at)
        .chain(client)
        .min()
        .unwrap_or(now);
    Ok(first.duration_since(now).unwrap_or_default())
}

/// Hash of every Secret the control-plane pods mount (roots, the leaves but the two
/// kubeconfigs only the provider and users use, the datastore client), for the pod-template
/// annotation: a reissued certificate changes it and rolls the pods.
#[must_use]
pub fn mounted_hash(
    leaves: &[LeafSecret],
    datastore_client: &Secret,
    roots: &RootSecrets,
) -> String {
    let mounted: BTreeMap<&String, &Secret> = leaves
        .iter()
        .filter(|l| !matches!(l.role, LeafRole::Admin | LeafRole::SuperAdmin))
        .filter_map(|l| l.secret.metadata.name.as_ref().map(|n| (n, &l.secret)))
        .collect();
    let list = mounted
        .values()
        .copied()
        .chain(std::iter::once(datastore_client))
        .chain(
            [
                &roots.ca,
                &roots.front_proxy_ca,
                &roots.service_account,
                &roots.encryption,
            ]
            .map(Root::secret),
        )
        .map(|s| (&s.metadata.name, &s.data))
        .collect::<Vec<_>>();
    super::desired_hash(&list)
}
