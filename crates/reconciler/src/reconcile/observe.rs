//! The **observe** step: what exists for this control plane — its Secrets, Deployment and
//! Service in the management cluster, its DataStore, whether the status says it was
//! initialized, and whether its API answers through the endpoint.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kamaji_api::KamajiControlPlane;
use kamaji_api::conditions::{reasons, types};
use kamaji_api::meta::CLUSTER_NAME_LABEL;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, GroupVersionKind, ListParams};

use super::status::Cond;
use super::validate::ValidSpec;
use crate::context::Context;
use crate::datastore::{self, Override, Problem, Resolved};
use crate::error::{Error, KubeContext};
use crate::lean::Lean;
use crate::replicas::Replicas;
use crate::tenant;

/// What the observe step read.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The control plane's Secrets, by name: those labelled with its Cluster, and, once
    /// initialized, its roots looked up by name (a root restored without its labels).
    pub secrets: BTreeMap<String, Secret>,
    /// The control-plane Deployment.
    pub deployment: Option<Deployment>,
    /// The control-plane Service.
    pub service: Option<Service>,
    /// The status says the control plane was initialized (either contract flavour).
    pub initialized: bool,
    /// The tenant API answered `/readyz` through the endpoint with `<cluster>-kubeconfig`.
    pub reachable: bool,
    /// While a service-account key or CA rotation runs: the control-plane pods' fingerprints
    /// ([`super::plan::sa_rotation`], [`super::plan::ca_rotation`]).
    pub control_plane_pods: Option<ControlPlanePods>,
    /// While a CA rotation replaces workers: the Cluster's Machines.
    pub worker_machines: Option<Vec<super::plan::ca_rotation::WorkerMachine>>,
    /// While a CA rotation replaces workers: the Cluster's MachineSets whose scale-up Cluster
    /// API holds back, with its reason.
    pub held_machine_sets: Option<Vec<super::plan::ca_rotation::HeldMachineSet>>,
    /// The KamajiControlPlane's `status.version` as stored: the last version every replica
    /// ran (Cluster API's "upgrading" compares it with `spec.version`).
    pub status_version: Option<String>,
}

/// The fingerprints of every control-plane pod (terminating ones included), in pod order, and
/// whether the Deployment has rolled out.
#[derive(Debug, Clone, Default)]
pub struct ControlPlanePods {
    /// [`super::plan::sa_rotation::SERVICE_ACCOUNT_KEYS_ANNOTATION`] of each pod.
    pub service_account: Vec<Option<String>>,
    /// [`super::plan::ca_rotation::CERTIFICATE_AUTHORITIES_ANNOTATION`] of each pod.
    pub certificate_authorities: Vec<Option<String>>,
    /// [`super::plan::encryption_rotation::ENCRYPTION_KEYS_ANNOTATION`] of each pod.
    pub encryption: Vec<Option<String>>,
    /// The Deployment controller saw its spec; every replica is updated and available; no
    /// other pod counted.
    pub rolled_out: bool,
}

/// Whether the status says the control plane was initialized (either contract flavour).
#[must_use]
pub fn is_initialized(kcp: &KamajiControlPlane) -> bool {
    kcp.status.as_ref().is_some_and(|s| {
        s.initialization
            .as_ref()
            .and_then(|i| i.control_plane_initialized)
            .unwrap_or(false)
            || s.initialized.unwrap_or(false)
    })
}

/// The DataStore of the control plane, with the DataStores of its `spec.dataStoreOverrides`
/// in [`Resolved::overrides`], and its `DataStoreReady=True` condition; `Err` is the
/// `DataStoreReady=False` condition when one is missing, unsupported or invalid, or an
/// override's CA certificate is not the control plane's DataStore's (the message names the
/// entry).
pub async fn datastore(spec: &ValidSpec, ctx: &Context) -> Result<(Resolved, Cond), Cond> {
    let mut ds =
        match datastore::resolve(ctx.client(), ctx.datastores(), &spec.datastore_name).await {
            Ok(ds) => ds,
            Err(problem) => {
                let mut msg = problem.message();
                if spec.default_datastore {
                    msg.push_str(
                        " (spec.dataStoreName is empty, so the manager's default DataStore, its \
                     --default-datastore, is used)",
                    );
                }
                if let Problem::NotFound(name) = &problem {
                    msg.push_str(&missing_datastore_hint(name));
                }
                return Err(Cond::no(types::DATASTORE_READY, reason(&problem), msg));
            }
        };
    let mut message = if ds.sql.is_some() {
        format!(
            "DataStore {} ({}), database {}",
            ds.name,
            ds.driver.as_str(),
            spec.datastore_schema
        )
    } else {
        format!(
            "DataStore {} (etcd), prefix /{}",
            ds.name, spec.datastore_schema
        )
    };
    for (i, (resource, name)) in spec.datastore_overrides.iter().enumerate() {
        let field = format!("spec.dataStoreOverrides[{i}].dataStore");
        let other = if *name == ds.name {
            ds.clone()
        } else {
            datastore::resolve(ctx.client(), ctx.datastores(), name)
                .await
                .map_err(|p| {
                    Cond::no(
                        types::DATASTORE_READY,
                        reason(&p),
                        format!("{field}: {}", p.message()),
                    )
                })?
        };
        if !datastore::same_ca(&ds.ca_cert, &other.ca_cert) {
            return Err(Cond::no(
                types::DATASTORE_READY,
                reasons::DATASTORE_CA_MISMATCH,
                format!(
                    "{field}: DataStore {name} has another CA certificate than DataStore {} of \
                     the control plane: kube-apiserver reaches every etcd with one client \
                     certificate and CA, so DataStore {name} must use the same CA certificate \
                     (and its etcd trust client certificates issued by it)",
                    ds.name
                ),
            ));
        }
        let _ = write!(message, "; {resource} in DataStore {name}");
        ds.overrides.push(Override {
            resource: resource.clone(),
            datastore: name.clone(),
            servers: other.server_urls(),
            basic_auth: other.basic_auth.clone(),
        });
    }
    Ok((
        ds,
        Cond::yes(types::DATASTORE_READY, reasons::READY, message),
    ))
}

/// What to do about a DataStore that does not exist: create it, and where the install guide
/// shows how. Nothing of the control plane is created until it exists.
fn missing_datastore_hint(name: &str) -> String {
    format!(
        ": create a cluster-scoped DataStore (kamaji.clastix.io/v1alpha1) named {name}, with \
         driver etcd, PostgreSQL or MySQL, as in the install guide's step \"A datastore\" \
         (docs/install.md, examples/datastore-etcd.yaml in the kamaji-rs repository); nothing \
         of this control plane is created until it exists"
    )
}

/// The `DataStoreReady=False` reason of a DataStore problem.
fn reason(problem: &Problem) -> &'static str {
    match problem {
        Problem::NotFound(_) => reasons::DATASTORE_NOT_FOUND,
        Problem::DriverUnsupported(_) => reasons::DATASTORE_DRIVER_UNSUPPORTED,
        Problem::Invalid(_) => reasons::INVALID_SPEC,
    }
}

/// Reads the control plane's objects in the management cluster and probes its API.
///
/// # Errors
/// [`Error::Kube`] when a read fails.
pub async fn observe(
    kcp: &KamajiControlPlane,
    spec: &ValidSpec,
    ctx: &Context,
) -> Result<Observed, Error> {
    let ns = &spec.namespace;
    let initialized = is_initialized(kcp);
    let secrets = secrets(spec, ctx, initialized).await?;
    // Objects are read without `managedFields` ([`Lean`]): no step reads them.
    let deployment = Api::<Lean<Deployment>>::namespaced(ctx.client().clone(), ns)
        .get_opt(&spec.names.deployment())
        .await
        .ctx(|| "get Deployment".into())?
        .map(|d| d.0);
    let service = Api::<Lean<Service>>::namespaced(ctx.client().clone(), ns)
        .get_opt(&spec.names.service())
        .await
        .ctx(|| "get Service".into())?
        .map(|s| s.0);
    let reachable = reachable(spec, ctx, deployment.as_ref(), &secrets).await;
    let reads = RotationReads::of(spec, &secrets);
    let control_plane_pods = if reads.control_plane_pods {
        Some(pod_fingerprints(spec, ctx, deployment.as_ref()).await?)
    } else {
        None
    };
    let (worker_machines, held_machine_sets) = if reads.worker_machines {
        (
            Some(worker_machines(spec, ctx).await?),
            Some(held_machine_sets(spec, ctx).await?),
        )
    } else {
        (None, None)
    };
    Ok(Observed {
        secrets,
        deployment,
        service,
        initialized,
        reachable,
        control_plane_pods,
        worker_machines,
        held_machine_sets,
        status_version: kcp.status.as_ref().and_then(|s| s.version.clone()),
    })
}

/// The control plane's Secrets, by name: those labelled with its Cluster, and, once
/// `initialized`, its roots read by name when the list lacks them (a root restored from a
/// backup without its labels is still the root).
async fn secrets(
    spec: &ValidSpec,
    ctx: &Context,
    initialized: bool,
) -> Result<BTreeMap<String, Secret>, Error> {
    let ns = &spec.namespace;
    let secrets_api = Api::<Lean<Secret>>::namespaced(ctx.client().clone(), ns);
    let lp = ListParams::default().labels(&format!(
        "{CLUSTER_NAME_LABEL}={}",
        spec.names.cluster_label_value()
    ));
    // A Secret without the label (a kubeconfig written by someone else, case B01) is not
    // listed here; the apply step looks for it in a list of the namespace, or reads it by
    // name, before it writes.
    let mut secrets: BTreeMap<String, Secret> = secrets_api
        .list(&lp)
        .await
        .ctx(|| format!("list Secrets of Cluster {ns}/{}", spec.cluster_name))?
        .items
        .into_iter()
        .map(|Lean(s)| (s.name_any(), s))
        .collect();
    if !initialized {
        return Ok(secrets);
    }
    let n = &spec.names;
    for name in [
        n.ca_secret(),
        n.front_proxy_ca_secret(),
        n.service_account_secret(),
    ] {
        if !secrets.contains_key(&name)
            && let Some(s) = secrets_api
                .get_opt(&name)
                .await
                .ctx(|| format!("get Secret {ns}/{name}"))?
        {
            secrets.insert(name, s.0);
        }
    }
    Ok(secrets)
}

/// Whether the tenant API answers `/readyz` through the endpoint with `<cluster>-kubeconfig`,
/// asked once a control-plane pod is available. A kubeconfig that does not load is reissued
/// by this pass; the tenant counts as unreachable until then. A new connection each time: one
/// kept from an earlier pass would hide an endpoint that refuses new connections.
async fn reachable(
    spec: &ValidSpec,
    ctx: &Context,
    deployment: Option<&Deployment>,
    secrets: &BTreeMap<String, Secret>,
) -> bool {
    if Replicas::of(deployment).available == 0 {
        return false;
    }
    let Some(kubeconfig) = secrets.get(&spec.names.kubeconfig_secret()) else {
        return false;
    };
    match ctx.tenant_clients().fresh(kubeconfig).await {
        Ok(client) => tenant::readyz(&client).await,
        Err(_) => false,
    }
}

/// What the observe step reads besides the Secrets, Deployment and Service while a rotation is
/// under way, as the control plane's Secrets (`secrets`, by name) say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotationReads {
    /// The control-plane pods' fingerprints ([`Observed::control_plane_pods`]): a
    /// service-account key, CA or encryption key rotation is under way.
    pub control_plane_pods: bool,
    /// The Cluster's Machines ([`Observed::worker_machines`]): a CA rotation replaces workers.
    pub worker_machines: bool,
}

impl RotationReads {
    /// What `secrets` call for.
    #[must_use]
    pub fn of(spec: &ValidSpec, secrets: &BTreeMap<String, Secret>) -> Self {
        let ca_state = secrets.get(
            &spec
                .names
                .internal_secret(kamaji_api::names::InternalSecret::CaRotation),
        );
        let (ca_rotating, replacing_workers) = super::plan::ca_rotation::under_way(ca_state);
        let encryption_rotating = super::plan::encryption_rotation::under_way(
            secrets.get(
                &spec
                    .names
                    .internal_secret(kamaji_api::names::InternalSecret::Encryption),
            ),
            spec.encryption_key_rotation.as_deref(),
            &spec.encrypted_resources,
        );
        Self {
            control_plane_pods: rotating(spec, secrets) || ca_rotating || encryption_rotating,
            worker_machines: replacing_workers,
        }
    }
}

/// The observation a second round of a pass starts from ([`super::Flow::Again`]), after a
/// round that found no Deployment (a new control plane) wrote `written` and the Service
/// `service`: this round's, with each written Secret that carries the Cluster's label (as the
/// labelled list would find it) and the Service as stored, so that the second round reads
/// nothing again: the Deployment is still the round's own to create, and the API is not
/// reached without it. `None` when the round found a Deployment, or when what it wrote starts
/// or ends a rotation (its reads change: [`RotationReads`]): the second round observes anew.
#[must_use]
pub fn after_own_writes(
    spec: &ValidSpec,
    observed: &Observed,
    written: Vec<Secret>,
    service: Service,
) -> Option<Box<Observed>> {
    if observed.deployment.is_some() {
        return None;
    }
    let before = RotationReads::of(spec, &observed.secrets);
    let mut next = observed.clone();
    let label = spec.names.cluster_label_value();
    for secret in written {
        if secret.labels().get(CLUSTER_NAME_LABEL) == Some(&label) {
            next.secrets.insert(secret.name_any(), secret);
        }
    }
    if RotationReads::of(spec, &next.secrets) != before {
        return None;
    }
    next.service = Some(service);
    Some(Box::new(next))
}

/// Cluster API's `Machine` (`cluster.x-k8s.io/v1beta2`).
fn machine_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta2",
        "Machine",
    ))
}

/// Cluster API's `MachineSet` (`cluster.x-k8s.io/v1beta2`).
fn machine_set_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta2",
        "MachineSet",
    ))
}

/// The Cluster's Machines (label `cluster.x-k8s.io/cluster-name`): name, creation time and
/// whether a MachineSet owns it.
async fn worker_machines(
    spec: &ValidSpec,
    ctx: &Context,
) -> Result<Vec<super::plan::ca_rotation::WorkerMachine>, Error> {
    use kube::api::DynamicObject;
    let resource = machine_resource();
    let selector = format!("{CLUSTER_NAME_LABEL}={}", spec.cluster_name);
    let list =
        Api::<DynamicObject>::namespaced_with(ctx.client().clone(), &spec.namespace, &resource)
            .list(&ListParams::default().labels(&selector))
            .await
            .ctx(|| format!("list Machines ({selector})"))?;
    Ok(list
        .items
        .iter()
        .map(|m| super::plan::ca_rotation::WorkerMachine {
            name: m.name_any(),
            created: m
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(std::time::SystemTime::UNIX_EPOCH, |t| t.0.into()),
            in_machine_set: m
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "MachineSet"),
        })
        .collect())
}

/// The Cluster's MachineSets (label `cluster.x-k8s.io/cluster-name`) whose scale-up Cluster API
/// holds back: their v1beta2 `ScalingUp` condition says "is blocked because", followed by
/// Cluster API's reasons (its preflight checks, missing templates), one per `* ` line.
async fn held_machine_sets(
    spec: &ValidSpec,
    ctx: &Context,
) -> Result<Vec<super::plan::ca_rotation::HeldMachineSet>, Error> {
    use kube::api::DynamicObject;
    let resource = machine_set_resource();
    let selector = format!("{CLUSTER_NAME_LABEL}={}", spec.cluster_name);
    let list =
        Api::<DynamicObject>::namespaced_with(ctx.client().clone(), &spec.namespace, &resource)
            .list(&ListParams::default().labels(&selector))
            .await
            .ctx(|| format!("list MachineSets ({selector})"))?;
    Ok(list
        .items
        .iter()
        .filter_map(|ms| {
            let message = ms
                .data
                .pointer("/status/conditions")?
                .as_array()?
                .iter()
                .find(|c| c["type"] == "ScalingUp" && c["status"] == "True")?
                .get("message")?
                .as_str()?;
            let (_, reasons) = message.split_once("is blocked because")?;
            Some(super::plan::ca_rotation::HeldMachineSet {
                name: ms.name_any(),
                machine_deployment: ms.labels().get("cluster.x-k8s.io/deployment-name").cloned(),
                reasons: reasons
                    .lines()
                    .filter_map(|l| l.trim().strip_prefix("* "))
                    .map(str::to_owned)
                    .collect(),
            })
        })
        .collect())
}

/// Whether a service-account key rotation is under way: its Secret holds a key.
fn rotating(spec: &ValidSpec, secrets: &BTreeMap<String, Secret>) -> bool {
    use super::plan::sa_rotation::{NEXT_KEY, VERIFY_KEY};
    secrets
        .get(
            &spec
                .names
                .internal_secret(kamaji_api::names::InternalSecret::ServiceAccountRotation),
        )
        .and_then(|s| s.data.as_ref())
        .is_some_and(|d| d.contains_key(NEXT_KEY) || d.contains_key(VERIFY_KEY))
}

/// Whether `d` has rolled out: the Deployment controller saw its spec, and every replica is
/// updated and available, with no other pod counted.
#[must_use]
pub fn rolled_out(d: &Deployment) -> bool {
    let s = d.status.clone().unwrap_or_default();
    let want = d.spec.as_ref().and_then(|s| s.replicas);
    s.observed_generation == d.metadata.generation
        && s.updated_replicas == want
        && s.available_replicas == want
        && s.replicas == want
}

/// The service-account keys' fingerprint of each control-plane pod, and whether the
/// Deployment has rolled out (the controller saw its spec; every replica updated and
/// available; no other pod counted).
async fn pod_fingerprints(
    spec: &ValidSpec,
    ctx: &Context,
    deployment: Option<&Deployment>,
) -> Result<ControlPlanePods, Error> {
    use super::plan::ca_rotation::CERTIFICATE_AUTHORITIES_ANNOTATION;
    use super::plan::sa_rotation::SERVICE_ACCOUNT_KEYS_ANNOTATION;
    let selector = super::validate::selector_labels(spec)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods = Api::<Pod>::namespaced(ctx.client().clone(), &spec.namespace)
        .list(&ListParams::default().labels(&selector))
        .await
        .ctx(|| format!("list control-plane Pods ({selector})"))?;
    let of = |key: &str| {
        pods.items
            .iter()
            .map(|p| p.annotations().get(key).cloned())
            .collect()
    };
    Ok(ControlPlanePods {
        service_account: of(SERVICE_ACCOUNT_KEYS_ANNOTATION),
        certificate_authorities: of(CERTIFICATE_AUTHORITIES_ANNOTATION),
        encryption: of(super::plan::encryption_rotation::ENCRYPTION_KEYS_ANNOTATION),
        rolled_out: deployment.is_some_and(rolled_out),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::validate::tests::{fixture, valid};

    fn secret(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                "resourceVersion": "1",
                "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>()},
            "data": data.iter().map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        }))
        .unwrap()
    }

    fn first_round() -> Observed {
        Observed {
            secrets: BTreeMap::new(),
            deployment: None,
            service: None,
            initialized: false,
            reachable: false,
            control_plane_pods: None,
            worker_machines: None,
            held_machine_sets: None,
            status_version: None,
        }
    }

    /// A new control plane's second round starts from the first round's observation with what
    /// it wrote: the labelled Secrets (an unlabelled one would not be listed) and the Service
    /// (the namespace's list goes with it: the apply step's test); it observes anew after a
    /// round that found a Deployment, or whose writes start a rotation (the pods must then be
    /// read).
    #[test]
    fn a_second_round_reads_again_only_what_the_first_round_did_not_write() {
        let spec = valid(&fixture(serde_json::json!({})));
        let label = spec.names.cluster_label_value();
        let labelled = [(CLUSTER_NAME_LABEL, label.as_str())];
        let ca = secret(&spec.names.ca_secret(), &labelled, &[("tls.crt", "Y2E=")]);
        let unlabelled = secret("unlabelled", &[], &[]);
        let service = Service {
            metadata: kube::api::ObjectMeta {
                name: Some(spec.names.service()),
                ..Default::default()
            },
            ..Service::default()
        };
        let next = after_own_writes(
            &spec,
            &first_round(),
            vec![ca.clone(), unlabelled],
            service.clone(),
        )
        .expect("a new control plane's second round reuses the first round's observation");
        assert_eq!(
            next.secrets.keys().collect::<Vec<_>>(),
            vec![&ca.name_any()]
        );
        assert_eq!(next.secrets[&ca.name_any()], ca);
        assert_eq!(next.service, Some(service.clone()));
        assert!(next.deployment.is_none() && !next.reachable);

        let mut with_deployment = first_round();
        with_deployment.deployment = Some(Deployment::default());
        assert!(
            after_own_writes(&spec, &with_deployment, vec![ca.clone()], service.clone()).is_none()
        );

        let rotation = spec
            .names
            .internal_secret(kamaji_api::names::InternalSecret::ServiceAccountRotation);
        let next_key = super::super::plan::sa_rotation::NEXT_KEY;
        let started = secret(&rotation, &labelled, &[(next_key, "a2V5")]);
        assert!(
            after_own_writes(&spec, &first_round(), vec![ca, started], service).is_none(),
            "a rotation the round started needs the pods read"
        );
    }
}
