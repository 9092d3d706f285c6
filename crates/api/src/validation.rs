//! Admission-time validation: OpenAPI patterns and CEL `x-kubernetes-validations` rules that
//! the API server enforces on create and update, so invalid input is rejected before anything
//! is created (no webhook server).
//!
//! Every message names the field it is about. Rules that compare with `oldSelf` (transition
//! rules) sit on a parent that is always present (`spec`, or `spec.network`, which has a
//! default), because a transition rule only runs when both the old and the new value exist.
//!
//! CEL limits: every list the rules iterate has `maxItems` and every string `maxLength`, so
//! the API server's static cost estimate stays under its per-rule limit. Versions are compared
//! with `findAll('[0-9]+')` and `int()`, since CEL's semver library is not available in every
//! supported Kubernetes version; `isIP()`/`isCIDR()` need Kubernetes >= 1.31 (the management
//! cluster minimum is 1.34).

use schemars::Schema;
use serde_json::{Value, json};

/// Kubernetes version: semver `MAJOR.MINOR.PATCH` with optional pre-release and build
/// metadata, `v` prefix optional (`1.27.0`, `v1.30.2`, `v1.31.0-rc.1`).
pub const VERSION_PATTERN: &str = r"^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$";

/// One command-line flag of a control-plane component: `--name=value`, `--name`, `-v=4`, or
/// `name=value` (normalised to `--name=value` by the controller). A bare word is rejected.
pub const EXTRA_ARG_PATTERN: &str =
    r"^(--?[A-Za-z0-9][-A-Za-z0-9_.]*(=.*)?|[A-Za-z0-9][-A-Za-z0-9_.]*=.*)$";

/// CEL rule for one `certSANs` entry: an IP address, or a DNS name (optionally a `*.`
/// wildcard) made of labels of at most 63 characters. `host:port` and URLs fail both.
pub const CERT_SAN_RULE: &str = r"isIP(self) || self.matches('^(\\*\\.)?[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$')";

/// kube-apiserver flags that wire the control plane to its PKI, DataStore and the Cluster's
/// service network. The controller owns them; `spec.apiServer.extraArgs` may not set them
/// (case B12: rejected at admission rather than silently dropped).
pub const RESERVED_API_SERVER_FLAGS: &[&str] = &[
    "etcd-servers",
    "etcd-cafile",
    "etcd-certfile",
    "etcd-keyfile",
    "etcd-prefix",
    "client-ca-file",
    "tls-cert-file",
    "tls-private-key-file",
    "service-account-key-file",
    "service-account-signing-key-file",
    "kubelet-client-certificate",
    "kubelet-client-key",
    "proxy-client-cert-file",
    "proxy-client-key-file",
    "requestheader-client-ca-file",
    "service-cluster-ip-range",
];

/// kube-controller-manager flags owned by the controller (kubeconfigs, signing CA, service
/// account key, service network).
pub const RESERVED_CONTROLLER_MANAGER_FLAGS: &[&str] = &[
    "kubeconfig",
    "authentication-kubeconfig",
    "authorization-kubeconfig",
    "client-ca-file",
    "requestheader-client-ca-file",
    "cluster-signing-cert-file",
    "cluster-signing-key-file",
    "root-ca-file",
    "service-account-private-key-file",
    "service-cluster-ip-range",
];

/// kube-scheduler flags owned by the controller (its kubeconfigs).
pub const RESERVED_SCHEDULER_FLAGS: &[&str] = &[
    "kubeconfig",
    "authentication-kubeconfig",
    "authorization-kubeconfig",
];

/// Name of a flag given as `--name=value`, `--name`, `-name` or `name=value`; `None` for a
/// string that is not a flag in any of these forms.
#[must_use]
pub fn flag_name(arg: &str) -> Option<&str> {
    let (dashed, rest) = match arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) {
        Some(rest) => (true, rest),
        None => (false, arg),
    };
    let (name, has_value) = match rest.split_once('=') {
        Some((name, _)) => (name, true),
        None => (rest, false),
    };
    let valid_name = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    (valid_name && (dashed || has_value)).then_some(name)
}

fn rule(rule: impl Into<String>, message: impl Into<String>) -> Value {
    json!({"rule": rule.into(), "message": message.into()})
}

fn rule_at(rule: impl Into<String>, message: impl Into<String>, field_path: &str) -> Value {
    json!({"rule": rule.into(), "message": message.into(), "fieldPath": field_path})
}

fn push_rules(schema: &mut Schema, rules: impl IntoIterator<Item = Value>) {
    let entry = schema
        .ensure_object()
        .entry("x-kubernetes-validations")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(list) = entry {
        list.extend(rules);
    }
}

/// `int(<side>.version.findAll('[0-9]+')[i])`: the i-th numeric part of a version.
fn part(side: &str, i: usize) -> String {
    format!("int({side}.version.findAll('[0-9]+')[{i}])")
}

fn version_rules() -> Vec<Value> {
    let parsed = "self.version.findAll('[0-9]+').size() < 3 || \
                  oldSelf.version.findAll('[0-9]+').size() < 3";
    let (n0, n1, n2) = (part("self", 0), part("self", 1), part("self", 2));
    let (o0, o1, o2) = (part("oldSelf", 0), part("oldSelf", 1), part("oldSelf", 2));
    vec![
        rule_at(
            format!(
                "self.version == oldSelf.version || {parsed} || {n0} > {o0} || \
                 ({n0} == {o0} && ({n1} > {o1} || ({n1} == {o1} && {n2} >= {o2})))"
            ),
            "spec.version cannot be downgraded",
            ".version",
        ),
        rule_at(
            format!("self.version == oldSelf.version || {parsed} || {n0} == {o0}"),
            "spec.version cannot change the major version",
            ".version",
        ),
        rule_at(
            format!(
                "self.version == oldSelf.version || {parsed} || {n0} != {o0} || {n1} <= {o1} + 1"
            ),
            "spec.version cannot skip a minor version: upgrade one minor version at a time",
            ".version",
        ),
    ]
}

fn immutable_once_set(field: &str) -> Value {
    rule_at(
        format!("!has(oldSelf.{field}) || (has(self.{field}) && self.{field} == oldSelf.{field})"),
        format!("spec.{field} is immutable once set"),
        &format!(".{field}"),
    )
}

/// Rules rejecting reserved flags in the components' `extraArgs`. `base` is the CEL path of
/// the object holding `apiServer`/`controllerManager`/`scheduler`; `prefix` the user-facing
/// path for messages.
fn reserved_flag_rules(base: &str, prefix: &str) -> Vec<Value> {
    [
        ("apiServer", RESERVED_API_SERVER_FLAGS),
        ("controllerManager", RESERVED_CONTROLLER_MANAGER_FLAGS),
        ("scheduler", RESERVED_SCHEDULER_FLAGS),
    ]
    .into_iter()
    .map(|(component, flags)| {
        let alternatives = flags.join("|");
        rule(
            format!(
                "!has({base}.{component}) || !has({base}.{component}.extraArgs) || \
                 {base}.{component}.extraArgs.all(a, !a.matches('^-{{0,2}}({alternatives})(=.*)?$'))"
            ),
            format!(
                "{prefix}{component}.extraArgs cannot set flags managed by kamaji-rs: {}",
                flags.join(", ")
            ),
        )
    })
    .collect()
}

/// Rules of `KamajiControlPlane.spec`: version upgrade policy, DataStore immutability,
/// reserved flags.
pub(crate) fn kamaji_control_plane_spec(schema: &mut Schema) {
    let mut rules = version_rules();
    rules.extend(
        ["dataStoreName", "dataStoreSchema", "dataStoreUsername"]
            .into_iter()
            .map(immutable_once_set),
    );
    rules.extend(reserved_flag_rules("self", "spec."));
    push_rules(schema, rules);
}

/// Rules of `KamajiControlPlaneTemplate.spec.template`: reserved flags.
pub(crate) fn kamaji_control_plane_template_resource(schema: &mut Schema) {
    push_rules(
        schema,
        reserved_flag_rules("self.spec", "spec.template.spec."),
    );
}

/// Rules of `network`: ingress/gateway exclusivity, LoadBalancer-only fields,
/// `loadBalancerClass` cannot be set or unset after creation.
pub(crate) fn network_component(schema: &mut Schema) {
    let lb = "(!has(self.serviceType) || self.serviceType == 'LoadBalancer')";
    push_rules(
        schema,
        [
            rule(
                "!(has(self.ingress) && has(self.gateway))",
                "network.ingress and network.gateway are mutually exclusive",
            ),
            rule(
                format!(
                    "!has(self.loadBalancerConfig) || !has(self.loadBalancerConfig.loadBalancerSourceRanges) || \
                     size(self.loadBalancerConfig.loadBalancerSourceRanges) == 0 || {lb}"
                ),
                "network.loadBalancerConfig.loadBalancerSourceRanges requires network.serviceType LoadBalancer",
            ),
            rule(
                format!(
                    "!has(self.loadBalancerConfig) || !has(self.loadBalancerConfig.loadBalancerClass) || {lb}"
                ),
                "network.loadBalancerConfig.loadBalancerClass requires network.serviceType LoadBalancer",
            ),
            rule(
                format!("!has(self.allocateLoadBalancerNodePorts) || {lb}"),
                "network.allocateLoadBalancerNodePorts requires network.serviceType LoadBalancer",
            ),
            rule(
                "(has(self.loadBalancerConfig) && has(self.loadBalancerConfig.loadBalancerClass)) == \
                 (has(oldSelf.loadBalancerConfig) && has(oldSelf.loadBalancerConfig.loadBalancerClass))",
                "network.loadBalancerConfig.loadBalancerClass cannot be set or unset after creation",
            ),
        ],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_names() {
        assert_eq!(
            flag_name("--max-requests-inflight=800"),
            Some("max-requests-inflight")
        );
        assert_eq!(flag_name("--allow-privileged"), Some("allow-privileged"));
        assert_eq!(flag_name("-v=4"), Some("v"));
        assert_eq!(flag_name("cloud-provider=external"), Some("cloud-provider"));
        assert_eq!(flag_name("cloud-provider"), None);
        assert_eq!(flag_name("--=x"), None);
        assert_eq!(flag_name("--a b"), None);
        assert_eq!(flag_name(""), None);
    }

    #[test]
    fn version_rules_compare_numeric_parts() {
        let rules = version_rules();
        assert_eq!(rules.len(), 3);
        let text = rules[0]["rule"].as_str().unwrap_or_default();
        assert!(text.contains("int(self.version.findAll('[0-9]+')[1])"));
    }
}
