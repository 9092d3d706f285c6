//! The CRDs as installed: `KamajiControlPlane` and `KamajiControlPlaneTemplate` served as
//! `v1alpha1` and `v1alpha2` with one schema (storage `v1alpha2`, no conversion webhook),
//! labelled with both CAPI contract labels, and the `DataStore` CRD.
//!
//! `crdgen` writes [`render_all`] to config/crd/bases; a unit test fails when the committed
//! files differ from it.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::datastore::DataStore;
use crate::kcp::KamajiControlPlane;
use crate::meta::{
    CONTRACT_V1BETA1_LABEL, CONTRACT_V1BETA2_LABEL, CONTRACT_VERSIONS, SERVED_VERSIONS,
    STORAGE_VERSION,
};
use crate::template::KamajiControlPlaneTemplate;

/// Serve the single derived version under every name of [`SERVED_VERSIONS`] with the same
/// schema, store [`STORAGE_VERSION`], and stamp the contract labels.
fn multi_version(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let derived = crd.spec.versions.first().cloned();
    if let Some(derived) = derived {
        crd.spec.versions = SERVED_VERSIONS
            .iter()
            .map(|name| {
                let mut version = derived.clone();
                (*name).clone_into(&mut version.name);
                version.served = true;
                version.storage = *name == STORAGE_VERSION;
                version
            })
            .collect();
    }
    let labels = crd.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(
        CONTRACT_V1BETA2_LABEL.to_owned(),
        CONTRACT_VERSIONS.to_owned(),
    );
    labels.insert(
        CONTRACT_V1BETA1_LABEL.to_owned(),
        CONTRACT_VERSIONS.to_owned(),
    );
    crd
}

/// `kamajicontrolplanes.controlplane.cluster.x-k8s.io`.
#[must_use]
pub fn kamaji_control_plane() -> CustomResourceDefinition {
    multi_version(KamajiControlPlane::crd())
}

/// `kamajicontrolplanetemplates.controlplane.cluster.x-k8s.io`.
#[must_use]
pub fn kamaji_control_plane_template() -> CustomResourceDefinition {
    multi_version(KamajiControlPlaneTemplate::crd())
}

/// `datastores.kamaji.clastix.io`.
#[must_use]
pub fn datastore() -> CustomResourceDefinition {
    DataStore::crd()
}

/// Every CRD kamaji-rs installs.
#[must_use]
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        kamaji_control_plane(),
        kamaji_control_plane_template(),
        datastore(),
    ]
}

/// kubebuilder-style file name: `<group>_<plural>.yaml`.
#[must_use]
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// Every CRD as `(file name, YAML document)`.
pub fn render_all() -> Result<Vec<(String, String)>, serde_yaml::Error> {
    all()
        .iter()
        .map(|crd| Ok((file_name(crd), serde_yaml::to_string(crd)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn kcp_crd_serves_both_versions_with_one_schema() {
        let crd = kamaji_control_plane();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("kamajicontrolplanes.controlplane.cluster.x-k8s.io")
        );
        let versions: Vec<_> = crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage))
            .collect();
        assert_eq!(
            versions,
            vec![("v1alpha1", true, false), ("v1alpha2", true, true)]
        );
        assert_eq!(crd.spec.versions[0].schema, crd.spec.versions[1].schema);
        assert!(crd.spec.conversion.is_none());
        let labels = crd.metadata.labels.unwrap();
        assert_eq!(labels["cluster.x-k8s.io/v1beta2"], "v1alpha1_v1alpha2");
        assert_eq!(labels["cluster.x-k8s.io/v1beta1"], "v1alpha1_v1alpha2");
        let scale = crd.spec.versions[1]
            .subresources
            .as_ref()
            .unwrap()
            .scale
            .as_ref()
            .unwrap();
        assert_eq!(scale.spec_replicas_path, ".spec.replicas");
        assert_eq!(scale.status_replicas_path, ".status.replicas");
        assert_eq!(
            scale.label_selector_path.as_deref(),
            Some(".status.selector")
        );
        assert_eq!(crd.spec.names.short_names, Some(vec!["ktcp".to_owned()]));
        assert_eq!(
            crd.spec.names.categories,
            Some(vec!["cluster-api".to_owned(), "kamaji".to_owned()])
        );
    }

    #[test]
    fn status_has_no_v1beta2_subobject() {
        let crd = serde_json::to_value(kamaji_control_plane()).unwrap();
        let status = &crd["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"];
        assert!(status.get("v1beta2").is_none());
        for field in [
            "initialization",
            "initialized",
            "ready",
            "updatedReplicas",
            "unavailableReplicas",
            "upToDateReplicas",
            "versions",
            "conditions",
            "observedGeneration",
            "externalManagedControlPlane",
            "failureReason",
            "failureMessage",
            "selector",
            "version",
        ] {
            assert!(status.get(field).is_some(), "status.{field} missing");
        }
    }

    #[test]
    fn committed_crds_match_generated() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/crd/bases");
        let rendered = render_all().unwrap();
        let mut expected: Vec<String> = rendered.iter().map(|(name, _)| name.clone()).collect();
        expected.sort();
        let mut present: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| {
                std::path::Path::new(n)
                    .extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("yaml"))
            })
            .collect();
        present.sort();
        assert_eq!(
            present, expected,
            "config/crd/bases holds other files than crdgen writes: run `make crds`"
        );
        for (name, yaml) in rendered {
            let committed = std::fs::read_to_string(dir.join(&name)).unwrap();
            assert!(
                committed == yaml,
                "config/crd/bases/{name} is out of date: run `make crds`"
            );
        }
    }
}
