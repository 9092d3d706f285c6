//! Fixtures: the base fixture F0 of shared/cases/ and clusterctl's variable substitution.

use std::collections::HashMap;

use anyhow::{Context as _, Result, bail};

/// The base fixture F0 of shared/cases/: a Cluster (v1beta1, as the cases write it) and a
/// KamajiControlPlane (v1alpha1) with the same name, LoadBalancer, datastore `default`, the
/// tools' Kubernetes version; each setter changes one thing a case varies.
#[derive(Debug, Clone)]
pub struct F0 {
    ns: String,
    name: String,
    replicas: i32,
    services: String,
    pods: String,
    domain: String,
    datastore: String,
    network: String,
    spec: String,
    version: String,
    infrastructure: Option<(String, String)>,
    labels: Vec<(String, String)>,
}

impl F0 {
    /// F0 for `ns/name` with 2 replicas.
    #[must_use]
    pub fn new(ns: &str, name: &str) -> Self {
        Self {
            ns: ns.into(),
            name: name.into(),
            replicas: 2,
            services: "10.96.0.0/12".into(),
            pods: "10.244.0.0/16".into(),
            domain: "cluster.local".into(),
            datastore: "default".into(),
            network: "serviceType: LoadBalancer".into(),
            spec: String::new(),
            version: kamaji_testenv::KUBERNETES_VERSION.into(),
            infrastructure: None,
            labels: Vec::new(),
        }
    }
    /// A label on both the Cluster and the KamajiControlPlane.
    #[must_use]
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.push((key.into(), value.into()));
        self
    }
    /// `Cluster.spec.infrastructureRef`: an object of `kind` at `api_version` with the
    /// Cluster's name.
    #[must_use]
    pub fn infrastructure(mut self, api_version: &str, kind: &str) -> Self {
        self.infrastructure = Some((api_version.into(), kind.into()));
        self
    }
    /// `spec.version`.
    #[must_use]
    pub fn version(mut self, version: &str) -> Self {
        version.clone_into(&mut self.version);
        self
    }
    /// `spec.replicas`.
    #[must_use]
    pub fn replicas(mut self, n: i32) -> Self {
        self.replicas = n;
        self
    }
    /// `Cluster.spec.clusterNetwork.services.cidrBlocks[0]`.
    #[must_use]
    pub fn services(mut self, cidr: &str) -> Self {
        cidr.clone_into(&mut self.services);
        self
    }
    /// `Cluster.spec.clusterNetwork.pods.cidrBlocks[0]`.
    #[must_use]
    pub fn pods(mut self, cidr: &str) -> Self {
        cidr.clone_into(&mut self.pods);
        self
    }
    /// `Cluster.spec.clusterNetwork.serviceDomain`.
    #[must_use]
    pub fn domain(mut self, domain: &str) -> Self {
        domain.clone_into(&mut self.domain);
        self
    }
    /// `spec.dataStoreName`.
    #[must_use]
    pub fn datastore(mut self, name: &str) -> Self {
        name.clone_into(&mut self.datastore);
        self
    }
    /// `spec.network`, as a YAML flow mapping body (e.g. `serviceType: ClusterIP, ...`).
    #[must_use]
    pub fn network(mut self, body: &str) -> Self {
        body.clone_into(&mut self.network);
        self
    }
    /// Further `spec` fields, as YAML lines indented by two spaces.
    #[must_use]
    pub fn spec(mut self, lines: &str) -> Self {
        lines.clone_into(&mut self.spec);
        self
    }
    /// The two objects as a YAML stream.
    #[must_use]
    pub fn yaml(&self) -> String {
        let Self {
            ns,
            name,
            replicas,
            services,
            pods,
            domain,
            datastore,
            network,
            spec,
            version,
            infrastructure,
            labels,
        } = self;
        let labels = labels
            .iter()
            .map(|(k, v)| format!("{k}: {v:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let infrastructure = infrastructure
            .as_ref()
            .map(|(api_version, kind)| {
                format!(
                    "\n  infrastructureRef: {{apiVersion: {api_version}, kind: {kind}, name: {name}}}"
                )
            })
            .unwrap_or_default();
        format!(
            r"
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {{name: {name}, namespace: {ns}, labels: {{{labels}}}}}
spec:
  clusterNetwork:
    services: {{cidrBlocks: [{services}]}}
    pods: {{cidrBlocks: [{pods}]}}
    serviceDomain: {domain}
  controlPlaneRef:
    apiVersion: controlplane.cluster.x-k8s.io/v1alpha1
    kind: KamajiControlPlane
    name: {name}{infrastructure}
---
apiVersion: controlplane.cluster.x-k8s.io/v1alpha1
kind: KamajiControlPlane
metadata: {{name: {name}, namespace: {ns}, labels: {{{labels}}}}}
spec:
  version: {version}
  replicas: {replicas}
  dataStoreName: {datastore}
  network: {{{network}}}
{spec}"
        )
    }
}

/// F0 for `ns/name` with `replicas`.
#[must_use]
pub fn f0(ns: &str, name: &str, replicas: i32) -> String {
    F0::new(ns, name).replicas(replicas).yaml()
}

/// Substitutes clusterctl-style variables: `${VAR}` and `${VAR:=default}`, taking values from
/// `vars`, else the default; an unset variable without default is an error naming it. As in
/// clusterctl (`yamlprocessor.SimpleProcessor`), an empty default (`${VAR:=}`) is none.
pub fn substitute<S: std::hash::BuildHasher>(
    text: &str,
    vars: &HashMap<String, String, S>,
) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').context("unterminated ${")?;
        let expr = &after[..end];
        let (name, default) = match expr.split_once(":=") {
            Some((n, d)) => (n, Some(d)),
            None => (expr, None),
        };
        match vars
            .get(name)
            .map(String::as_str)
            .or(default.filter(|d| !d.is_empty()))
        {
            Some(v) => out.push_str(v),
            None => bail!("variable {name} is not set and has no default"),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_are_substituted_as_clusterctl_does() {
        let vars = HashMap::from([("SET".to_owned(), "v".to_owned())]);
        assert_eq!(
            substitute("${SET} ${UNSET:=d} ${OPT:=\"\"}", &vars).unwrap(),
            "v d \"\""
        );
        // clusterctl refuses an empty default as unset; so does this.
        let err = substitute("--watch-filter=${EMPTY:=}", &vars).unwrap_err();
        assert!(err.to_string().contains("EMPTY"), "{err}");
        assert!(substitute("${MISSING}", &vars).is_err());
    }

    #[test]
    fn the_shipped_manifests_substitute_with_no_variable_set() {
        let root = kamaji_testenv::workspace_root();
        for dir in ["config/manager", "config/rbac"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let path = entry.unwrap().path();
                let text = std::fs::read_to_string(&path).unwrap();
                substitute(&text, &HashMap::new())
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
        }
    }
}
