//! The infrastructure cluster of a Cluster (`Cluster.spec.infrastructureRef`), read and
//! written through the Cluster API contract only, for any kind (no allowlist of providers):
//!
//! - the kind's plural comes from discovery of the reference's group (every version: providers
//!   sharing `infrastructure.cluster.x-k8s.io` serve their kinds at different ones), its CRD
//!   (`<plural>.<group>`) must carry a `cluster.x-k8s.io/<contract>` label (`v1beta2`, else
//!   `v1beta1`); the newest version that label lists is the one read, as Cluster API resolves
//!   references (`sigs.k8s.io/cluster-api/internal/contract/version.go`,
//!   `GetLatestContractAndAPIVersionFromContract`);
//! - `spec.controlPlaneEndpoint` is read when that version's schema declares it
//!   ([`InfrastructureCluster::endpoint`]), and written by [`set_endpoint`] — a merge patch of
//!   that field alone — only while it is empty, so that providers whose admission forbids every
//!   other spec change (CAPO's `OpenStackCluster`) accept it, and a provider that owns its
//!   address (its endpoint already set) is never overwritten.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kamaji_api::cluster::ClusterView;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::Version;
use tracing::{debug, info};

use crate::error::{Error, KubeContext};

/// The Cluster API group whose contract labels a provider's CRD carries.
const CONTRACT_LABEL_PREFIX: &str = "cluster.x-k8s.io/";

/// The contracts whose labels are read, newest first (Cluster API v1.14 reads `v1beta2` and
/// its compatible `v1beta1`).
const CONTRACTS: [&str; 2] = ["v1beta2", "v1beta1"];

/// What the contract says about one infrastructure kind, cached per group and kind
/// ([`Kinds`]).
#[derive(Debug, Clone)]
pub struct InfrastructureKind {
    /// The resource at the version the contract label names.
    pub resource: ApiResource,
    /// That version's schema declares `spec.controlPlaneEndpoint`.
    pub endpoint_field: bool,
}

/// The infrastructure kinds resolved through discovery and their CRDs, by group and kind, with
/// when they were read; each trusted for a while (the manager's resync period).
#[derive(Debug)]
pub struct Kinds {
    resolved: Mutex<HashMap<(String, String), (Instant, InfrastructureKind)>>,
    trusted_for: Duration,
}

impl Kinds {
    /// An empty cache whose entries are trusted for `trusted_for`.
    #[must_use]
    pub fn new(trusted_for: Duration) -> Self {
        Self {
            resolved: Mutex::new(HashMap::new()),
            trusted_for,
        }
    }

    /// The kind cached under `key`, while it is trusted.
    fn get(&self, key: &(String, String)) -> Option<InfrastructureKind> {
        let (at, cached) = self.resolved.lock().ok()?.get(key).cloned()?;
        (at.elapsed() < self.trusted_for).then_some(cached)
    }

    /// Caches `kind` under `key`, read now.
    fn put(&self, key: (String, String), kind: InfrastructureKind) {
        if let Ok(mut m) = self.resolved.lock() {
            m.insert(key, (Instant::now(), kind));
        }
    }
}

/// The infrastructure cluster object of a Cluster, as far as kamaji-rs reads it.
#[derive(Debug, Clone)]
pub struct InfrastructureCluster {
    /// Its kind, e.g. `OpenStackCluster`.
    pub kind: String,
    /// Its name (in the Cluster's namespace).
    pub name: String,
    /// Its `spec.controlPlaneEndpoint` when valid (host non-empty, port non-zero), which the
    /// control plane then serves.
    pub endpoint: Option<(String, i32)>,
    /// The kind declares `spec.controlPlaneEndpoint` and the object's is empty: kamaji-rs
    /// writes the control plane's endpoint there ([`set_endpoint`]).
    pub writable: bool,
    resource: ApiResource,
}

/// The newest API version a CRD's contract labels name, `None` without a contract label.
#[must_use]
pub fn contract_version(crd: &CustomResourceDefinition) -> Option<String> {
    let labels = crd.metadata.labels.as_ref()?;
    CONTRACTS.iter().find_map(|contract| {
        labels
            .get(&format!("{CONTRACT_LABEL_PREFIX}{contract}"))
            .filter(|v| !v.is_empty())?
            .split('_')
            .max_by_key(|v| Version::parse(v).priority())
            .map(str::to_owned)
    })
}

/// Whether the schema of `version` in `crd` declares `spec.controlPlaneEndpoint`.
#[must_use]
pub fn declares_endpoint(crd: &CustomResourceDefinition, version: &str) -> bool {
    let property = |schema: &JSONSchemaProps, name: &str| -> Option<JSONSchemaProps> {
        schema.properties.as_ref()?.get(name).cloned()
    };
    crd.spec
        .versions
        .iter()
        .find(|v| v.name == version)
        .and_then(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref())
        .and_then(|root| property(root, "spec"))
        .and_then(|spec| property(&spec, "controlPlaneEndpoint"))
        .is_some()
}

/// `spec.controlPlaneEndpoint` of an infrastructure object when valid (CAPI `IsValid`).
#[must_use]
pub fn endpoint_of(object: &serde_json::Value) -> Option<(String, i32)> {
    let e = object.get("spec")?.get("controlPlaneEndpoint")?;
    let host = e.get("host")?.as_str().filter(|h| !h.is_empty())?;
    let port = e
        .get("port")?
        .as_i64()
        .and_then(|p| i32::try_from(p).ok())
        .filter(|p| *p != 0)?;
    Some((host.to_owned(), port))
}

/// Resolves the kind of `group`/`kind` through discovery and its CRD; `None` when the group,
/// the kind or its CRD does not exist (yet), or the CRD carries no contract label.
async fn resolve_kind(
    client: &kube::Client,
    kinds: &Kinds,
    group: &str,
    kind: &str,
) -> Result<Option<InfrastructureKind>, Error> {
    let key = (group.to_owned(), kind.to_owned());
    if let Some(cached) = kinds.get(&key) {
        return Ok(Some(cached));
    }
    let plural = match kube::discovery::group(client, group).await {
        // Every version, not only the group's preferred one: providers sharing the group serve
        // their kinds at different versions.
        Ok(g) => {
            let served = g
                .resources_by_stability()
                .into_iter()
                .find(|(r, _)| r.kind == kind);
            let Some((resource, _)) = served else {
                debug!(%group, %kind, "infrastructure kind not served (yet)");
                return Ok(None);
            };
            resource.plural
        }
        Err(kube::Error::Api(e)) if e.code == 404 => {
            debug!(%group, "infrastructure API group not served (yet)");
            return Ok(None);
        }
        Err(kube::Error::Discovery(e)) => {
            debug!(%group, "infrastructure API group not discovered: {e}");
            return Ok(None);
        }
        Err(source) => {
            return Err(Error::Kube {
                action: format!("discover API group {group}"),
                source,
            });
        }
    };
    let name = format!("{plural}.{group}");
    let Some(crd) = Api::<CustomResourceDefinition>::all(client.clone())
        .get_opt(&name)
        .await
        .ctx(|| format!("get CustomResourceDefinition {name}"))?
    else {
        debug!(crd = %name, "no CustomResourceDefinition for the infrastructure kind");
        return Ok(None);
    };
    let Some(version) = contract_version(&crd) else {
        debug!(crd = %name, "the infrastructure kind's CRD has no Cluster API contract label");
        return Ok(None);
    };
    let resolved = InfrastructureKind {
        endpoint_field: declares_endpoint(&crd, &version),
        resource: ApiResource {
            group: group.to_owned(),
            api_version: format!("{group}/{version}"),
            version,
            kind: kind.to_owned(),
            plural,
        },
    };
    kinds.put(key, resolved.clone());
    Ok(Some(resolved))
}

/// Reads the infrastructure cluster of `cluster`; `None` without an `infrastructureRef`, or
/// while its kind or the object does not exist.
///
/// # Errors
/// [`Error::Kube`] when discovery or a read fails for another reason than absence.
pub async fn observe(
    client: &kube::Client,
    kinds: &Kinds,
    cluster: &ClusterView,
) -> Result<Option<InfrastructureCluster>, Error> {
    let Some(reference) = cluster.infrastructure_ref.as_ref() else {
        return Ok(None);
    };
    let Some(kind) = resolve_kind(client, kinds, &reference.group, &reference.kind).await? else {
        return Ok(None);
    };
    let api =
        Api::<DynamicObject>::namespaced_with(client.clone(), &cluster.namespace, &kind.resource);
    let Some(object) = api.get_opt(&reference.name).await.ctx(|| {
        format!(
            "get {} {}/{}",
            reference.kind, cluster.namespace, reference.name
        )
    })?
    else {
        return Ok(None);
    };
    let endpoint = endpoint_of(&object.data);
    Ok(Some(InfrastructureCluster {
        kind: reference.kind.clone(),
        name: reference.name.clone(),
        writable: kind.endpoint_field && endpoint.is_none(),
        endpoint,
        resource: kind.resource,
    }))
}

/// Writes `host`/`port` into the infrastructure cluster's `spec.controlPlaneEndpoint` when
/// [`InfrastructureCluster::writable`]: a JSON merge patch of that field alone (nothing else of
/// the object is sent).
///
/// # Errors
/// [`Error::Kube`] when the patch is refused or fails.
pub async fn set_endpoint(
    client: &kube::Client,
    namespace: &str,
    infrastructure: &InfrastructureCluster,
    host: &str,
    port: u16,
) -> Result<(), Error> {
    if !infrastructure.writable {
        return Ok(());
    }
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &infrastructure.resource)
        .patch(
            &infrastructure.name,
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"spec": {"controlPlaneEndpoint": {"host": host, "port": port}}}),
            ),
        )
        .await
        .ctx(|| {
            format!(
                "set {} {namespace}/{} spec.controlPlaneEndpoint",
                infrastructure.kind, infrastructure.name
            )
        })?;
    info!(kind = %infrastructure.kind, name = %infrastructure.name, %host, port, "wrote the infrastructure cluster's spec.controlPlaneEndpoint");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::needless_pass_by_value)] // json! literals at every call
    fn crd(
        labels: serde_json::Value,
        spec_properties: serde_json::Value,
    ) -> CustomResourceDefinition {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "openstackclusters.infrastructure.cluster.x-k8s.io", "labels": labels},
            "spec": {
                "group": "infrastructure.cluster.x-k8s.io",
                "names": {"kind": "OpenStackCluster", "plural": "openstackclusters"},
                "scope": "Namespaced",
                "versions": [
                    {"name": "v1alpha7", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v1beta1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": spec_properties}}}}},
                ],
            },
        }))
        .unwrap()
    }

    #[test]
    fn the_newest_version_of_the_newest_contract() {
        let c = crd(
            serde_json::json!({"cluster.x-k8s.io/v1beta1": "v1alpha7_v1beta1_v1alpha6"}),
            serde_json::json!({}),
        );
        assert_eq!(contract_version(&c).as_deref(), Some("v1beta1"));
        let c = crd(
            serde_json::json!({"cluster.x-k8s.io/v1beta1": "v1alpha6", "cluster.x-k8s.io/v1beta2": "v1alpha7"}),
            serde_json::json!({}),
        );
        assert_eq!(contract_version(&c).as_deref(), Some("v1alpha7"));
        let c = crd(serde_json::json!({"app": "x"}), serde_json::json!({}));
        assert_eq!(contract_version(&c), None);
    }

    #[test]
    fn the_endpoint_field_is_read_from_the_schema_of_that_version() {
        let with = crd(
            serde_json::json!({}),
            serde_json::json!({"controlPlaneEndpoint": {"type": "object"}, "cloudName": {"type": "string"}}),
        );
        assert!(declares_endpoint(&with, "v1beta1"));
        assert!(!declares_endpoint(&with, "v1alpha7"));
        let without = crd(
            serde_json::json!({}),
            serde_json::json!({"cloudName": {"type": "string"}}),
        );
        assert!(!declares_endpoint(&without, "v1beta1"));
    }

    #[test]
    fn only_a_valid_endpoint_counts() {
        let e = |v: serde_json::Value| {
            endpoint_of(&serde_json::json!({"spec": {"controlPlaneEndpoint": v}}))
        };
        assert_eq!(
            e(serde_json::json!({"host": "10.0.0.1", "port": 6443})),
            Some(("10.0.0.1".into(), 6443))
        );
        assert_eq!(e(serde_json::json!({"host": "", "port": 6443})), None);
        assert_eq!(e(serde_json::json!({"host": "10.0.0.1", "port": 0})), None);
        assert_eq!(e(serde_json::json!({"host": "10.0.0.1"})), None);
        assert_eq!(endpoint_of(&serde_json::json!({"spec": {}})), None);
    }
}
