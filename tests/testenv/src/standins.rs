//! Stand-ins for CRDs of providers that kamaji-rs does not ship, so that manifests referencing
//! them (the CAPI quickstart's `OpenStackCluster`) apply in the local management cluster.

use anyhow::Result;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The YAML of a stand-in CRD in `infrastructure.cluster.x-k8s.io` that accepts any content:
/// `kind` (its plural and singular are the lower-cased kind with and without an `s`), one
/// served and stored `version`, a `cluster.x-k8s.io/<contract>: <version>` label for each CAPI
/// contract in `contracts` (so CAPI resolves references to it) and, with `status`, the status
/// subresource.
#[must_use]
pub fn infrastructure_crd_yaml(
    kind: &str,
    version: &str,
    contracts: &[&str],
    status: bool,
) -> String {
    let singular = kind.to_lowercase();
    let labels = contracts
        .iter()
        .map(|c| format!("cluster.x-k8s.io/{c}: {version}"))
        .collect::<Vec<_>>()
        .join(", ");
    let subresources = if status {
        "\n    subresources: {status: {}}"
    } else {
        ""
    };
    format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {singular}s.infrastructure.cluster.x-k8s.io
  labels: {{{labels}}}
spec:
  group: infrastructure.cluster.x-k8s.io
  names: {{kind: {kind}, listKind: {kind}List, plural: {singular}s, singular: {singular}}}
  scope: Namespaced
  versions:
  - name: {version}
    served: true
    storage: true{subresources}
    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
"
    )
}

/// The YAML of a stand-in infrastructure-cluster CRD shaped like a provider's: `kind`, one
/// served and stored `version` with the status subresource, a `cluster.x-k8s.io/<contract>:
/// <version>` label per contract, a `spec` that keeps any field and declares
/// `spec.controlPlaneEndpoint` (`host` string, `port` int32) when `endpoint_field` — as
/// infrastructure providers' cluster kinds do (CAPI infrastructure-cluster contract) — and a
/// `status` that keeps any field.
#[must_use]
pub fn infrastructure_cluster_crd_yaml(
    kind: &str,
    version: &str,
    contracts: &[&str],
    endpoint_field: bool,
) -> String {
    let endpoint = if endpoint_field {
        "controlPlaneEndpoint: {type: object, properties: {host: {type: string}, port: {type: integer, format: int32}}}"
    } else {
        "cloudName: {type: string}"
    };
    infrastructure_crd_yaml(kind, version, contracts, true).replace(
        "schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}",
        &format!(
            "schema: {{openAPIV3Schema: {{type: object, properties: {{\
             spec: {{type: object, x-kubernetes-preserve-unknown-fields: true, properties: {{{endpoint}}}}}, \
             status: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}}}}}"
        ),
    )
}

/// A `ValidatingAdmissionPolicy` (and its binding) that does to `<plural>` in
/// `infrastructure.cluster.x-k8s.io` what CAPO's `OpenStackCluster` webhook does: every change
/// of `spec` is refused except setting `spec.controlPlaneEndpoint` while it is unset.
#[must_use]
pub fn spec_immutable_but_endpoint_policy_yaml(plural: &str) -> String {
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {plural}-spec-immutable}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [infrastructure.cluster.x-k8s.io]
      apiVersions: ["*"]
      operations: [UPDATE]
      resources: [{plural}]
  validations:
  - expression: >-
      oldObject.spec.all(k, k == 'controlPlaneEndpoint' || (k in object.spec && object.spec[k] == oldObject.spec[k]))
      && object.spec.all(k, k == 'controlPlaneEndpoint' || k in oldObject.spec)
    message: spec is immutable except spec.controlPlaneEndpoint while it is unset
  - expression: >-
      !has(oldObject.spec.controlPlaneEndpoint) || !has(oldObject.spec.controlPlaneEndpoint.host)
      || oldObject.spec.controlPlaneEndpoint.host == ''
      || (has(object.spec.controlPlaneEndpoint) && object.spec.controlPlaneEndpoint == oldObject.spec.controlPlaneEndpoint)
    message: spec.controlPlaneEndpoint cannot change once set
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {plural}-spec-immutable}}
spec:
  policyName: {plural}-spec-immutable
  validationActions: [Deny]
"#
    )
}

/// A minimal `OpenStackCluster` CRD (`infrastructure.cluster.x-k8s.io/v1alpha6`, CAPI `v1beta1`
/// contract label, status subresource, `spec.controlPlaneEndpoint` declared as CAPO declares it,
/// any other content accepted), enough for CAPI to resolve the quickstart's
/// `infrastructureRef`; a test marks its object provisioned by patching status.
#[must_use]
pub fn openstack_cluster_crd_yaml() -> String {
    infrastructure_cluster_crd_yaml("OpenStackCluster", "v1alpha6", &["v1beta1"], true)
}

/// [`openstack_cluster_crd_yaml`], parsed.
///
/// # Errors
/// Never in practice (the YAML is fixed); a parse error otherwise.
pub fn openstack_cluster_crd() -> Result<CustomResourceDefinition> {
    Ok(serde_yaml::from_str(&openstack_cluster_crd_yaml())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openstack_stand_in_is_a_crd_capi_can_resolve() {
        let crd = openstack_cluster_crd().unwrap();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("openstackclusters.infrastructure.cluster.x-k8s.io")
        );
        assert_eq!(
            crd.metadata.labels.as_ref().unwrap()["cluster.x-k8s.io/v1beta1"],
            "v1alpha6"
        );
        assert_eq!(crd.spec.names.plural, "openstackclusters");
        assert_eq!(
            crd.spec.names.list_kind.as_deref(),
            Some("OpenStackClusterList")
        );
        let v = &crd.spec.versions[0];
        assert_eq!(
            (v.name.as_str(), v.served, v.storage),
            ("v1alpha6", true, true)
        );
        assert!(v.subresources.as_ref().unwrap().status.is_some());
        // The `spec` schema of a CRD's first version.
        let spec_of = |crd: &CustomResourceDefinition| {
            crd.spec.versions[0]
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .and_then(|s| s.properties.as_ref())
                .map(|p| p["spec"].clone())
                .unwrap()
        };
        let spec = spec_of(&crd);
        assert_eq!(spec.x_kubernetes_preserve_unknown_fields, Some(true));
        assert!(
            spec.properties
                .as_ref()
                .unwrap()
                .contains_key("controlPlaneEndpoint")
        );
        let plain: CustomResourceDefinition = serde_yaml::from_str(
            &infrastructure_cluster_crd_yaml("PlainCluster", "v1beta2", &["v1beta2"], false),
        )
        .unwrap();
        let plain_spec = spec_of(&plain);
        assert!(
            !plain_spec
                .properties
                .as_ref()
                .unwrap()
                .contains_key("controlPlaneEndpoint")
        );
        let policy = spec_immutable_but_endpoint_policy_yaml("openstackclusters");
        for doc in serde_yaml::Deserializer::from_str(&policy) {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
            assert!(
                v["kind"]
                    .as_str()
                    .unwrap()
                    .starts_with("ValidatingAdmissionPolicy")
            );
        }
        let template = serde_yaml::from_str::<CustomResourceDefinition>(&infrastructure_crd_yaml(
            "StandInMachineTemplate",
            "v1alpha1",
            &["v1beta1", "v1beta2"],
            false,
        ))
        .unwrap();
        assert!(template.spec.versions[0].subresources.is_none());
        assert_eq!(template.metadata.labels.unwrap().len(), 2);
    }
}
