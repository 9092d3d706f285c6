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

use std::collections::BTreeMap;

use schemars::Schema;
use serde_json::{Value, json};

use crate::kcp::Component;

/// Kubernetes version: semver `MAJOR.MINOR.PATCH` with optional pre-release and build
/// metadata, `v` prefix optional (`1.27.0`, `v1.30.2`, `v1.31.0-rc.1`).
pub const VERSION_PATTERN: &str = r"^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$";

/// A datastore identifier (`spec.dataStoreSchema`, `spec.dataStoreUsername`): a lowercase
/// letter or `_`, then lowercase letters, digits and `_` (at most 63 in all, the schema's
/// `maxLength`). It becomes an etcd key prefix (`/<schema>/`), and a PostgreSQL or MySQL
/// database and user name, where it is valid without quoting: no `/` to reach another tenant's
/// prefix, no quote, `;`, comment marker, space or non-ASCII letter to reach a SQL statement.
/// [`crate::names::datastore_schema`] derives names of this form.
pub const DATASTORE_IDENTIFIER_PATTERN: &str = r"^[a-z_][a-z0-9_]*$";

/// Major version of the Kubernetes releases kamaji-rs supports.
pub const SUPPORTED_MAJOR: u32 = 1;
/// Oldest supported minor of [`SUPPORTED_MAJOR`]: the oldest release whose kubeadm artifacts
/// (`kubeadm.k8s.io/v1beta3`, `kubelet-config-1.23`), removed flags ([`REMOVED_FLAGS`]) and
/// removed admission plugins
/// ([`crate::kcp::AdmissionController::removed_in_minor`]) kamaji-rs knows.
pub const MIN_SUPPORTED_MINOR: u32 = 23;
/// Newest supported minor of [`SUPPORTED_MAJOR`]: the release the test tools build
/// (tests/tools/build.sh). Raise it together with the tools, once the newer minor passes the
/// end-to-end tests and its removed flags and plugins are in the tables.
pub const MAX_SUPPORTED_MINOR: u32 = 36;

/// True when Kubernetes `major.minor` is one kamaji-rs supports: 1.23 to 1.36, any patch.
/// Admission refuses other versions (a CEL rule on `spec.version`, built from the same
/// constants); the controller checks again for objects stored before that rule existed.
#[must_use]
pub fn is_supported_version(major: u32, minor: u32) -> bool {
    major == SUPPORTED_MAJOR && (MIN_SUPPORTED_MINOR..=MAX_SUPPORTED_MINOR).contains(&minor)
}

/// The supported range in words: `v1.23.0 to v1.36.x`.
#[must_use]
pub fn supported_versions() -> String {
    format!(
        "v{SUPPORTED_MAJOR}.{MIN_SUPPORTED_MINOR}.0 to v{SUPPORTED_MAJOR}.{MAX_SUPPORTED_MINOR}.x"
    )
}

/// Admission message for a `spec.version` outside the supported range.
#[must_use]
pub fn unsupported_version_message() -> String {
    format!(
        "spec.version must be a Kubernetes version from {} (the versions kamaji-rs supports)",
        supported_versions()
    )
}

/// Flags removed from a control-plane component, with the minor version that removed them:
/// passing one to that version or a newer one makes the process exit with "unknown flag".
/// Admission refuses them for such a `spec.version` (CEL rules generated from this table) and
/// the controller checks again (`SpecValid=False`) for objects stored before those rules.
///
/// Sources: the Kubernetes changelogs of the named minors (kube-apiserver insecure serving and
/// `--kubelet-https` removal in 1.20–1.24, cloud-provider flags of kube-apiserver removed in
/// 1.33 (KEP-2395), kube-controller-manager and kube-scheduler insecure serving removed in
/// 1.24, `--pod-eviction-timeout` in 1.27, `--enable-taint-manager` in 1.29, scheduler policy
/// flags in 1.23).
pub const REMOVED_FLAGS: &[(Component, &str, u32)] = &[
    (Component::ApiServer, "insecure-port", 24),
    (Component::ApiServer, "insecure-bind-address", 24),
    (Component::ApiServer, "address", 24),
    (Component::ApiServer, "port", 24),
    (Component::ApiServer, "kubelet-https", 22),
    (Component::ApiServer, "target-ram-mb", 24),
    (Component::ApiServer, "deserialization-cache-size", 24),
    (Component::ApiServer, "service-account-api-audiences", 25),
    (Component::ApiServer, "master-service-namespace", 27),
    (Component::ApiServer, "cloud-provider", 33),
    (Component::ApiServer, "cloud-config", 33),
    (Component::ApiServer, "enable-logs-handler", 33),
    (Component::ControllerManager, "address", 24),
    (Component::ControllerManager, "port", 24),
    (
        Component::ControllerManager,
        "experimental-cluster-signing-duration",
        25,
    ),
    (Component::ControllerManager, "pod-eviction-timeout", 27),
    (Component::ControllerManager, "enable-taint-manager", 29),
    (
        Component::ControllerManager,
        "horizontal-pod-autoscaler-use-rest-clients",
        24,
    ),
    (Component::Scheduler, "address", 24),
    (Component::Scheduler, "port", 24),
    (Component::Scheduler, "policy-config-file", 23),
    (Component::Scheduler, "policy-configmap", 23),
    (Component::Scheduler, "policy-configmap-namespace", 23),
    (Component::Scheduler, "use-legacy-policy-config", 23),
    (Component::Scheduler, "algorithm-provider", 23),
    (
        Component::Scheduler,
        "hard-pod-affinity-symmetric-weight",
        23,
    ),
];

/// Why `flag` (as `--name`) cannot be given to `component` at `version`: the message of the
/// admission rule and of the controller's `SpecValid=False`.
#[must_use]
pub fn removed_flag_message(
    component: Component,
    flag: &str,
    removed_in_minor: u32,
    version: &str,
) -> String {
    format!(
        "{flag} was removed from {} in v1.{removed_in_minor}; version {version} would not start with it",
        component.name()
    )
}

/// Why admission plugin `plugin` cannot be enabled at `version`: the message of the admission
/// rule and of the controller's `SpecValid=False`.
#[must_use]
pub fn removed_admission_plugin_message(
    plugin: &str,
    removed_in_minor: u64,
    version: &str,
) -> String {
    format!(
        "admission plugin {plugin} was removed in v1.{removed_in_minor}; version {version} would not start with it"
    )
}

/// One command-line flag of a control-plane component: `--name=value`, `--name`, `-v=4`, or
/// `name=value` (normalised to `--name=value` by the controller). A bare word is rejected.
pub const EXTRA_ARG_PATTERN: &str =
    r"^(--?[A-Za-z0-9][-A-Za-z0-9_.]*(=.*)?|[A-Za-z0-9][-A-Za-z0-9_.]*=.*)$";

/// CEL rule for one `certSANs` entry: an IP address, or a DNS name (optionally a `*.`
/// wildcard) made of labels of at most 63 characters. `host:port` and URLs fail both.
pub const CERT_SAN_RULE: &str = r"isIP(self) || self.matches('^(\\*\\.)?[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$')";

/// CEL rule for a host name that becomes the control-plane endpoint host
/// (`network.ingress.hostname`, `network.gateway.hostname`): a lowercase DNS name (RFC 1123
/// subdomain, as Ingress and Gateway API require), not an IP address, no wildcard. `host:port`
/// and URLs fail.
pub const ENDPOINT_HOSTNAME_RULE: &str = r"!isIP(self) && self.matches('^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$')";

/// CEL rule for `controlPlaneEndpoint.host`: empty (not set yet), an IP address, or a DNS name
/// (no wildcard). `host:port` and URLs fail.
pub const ENDPOINT_HOST_RULE: &str = r"self == '' || isIP(self) || self.matches('^[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$')";

/// CEL rule for `dataStoreOverrides[].resource`: one `group/resource` as kube-apiserver's
/// `--etcd-servers-overrides` takes it (`/events` for the core group, `apps/deployments`):
/// exactly one `/`, a resource after it (never the whole keyspace), no `#`, `,` or `;` (the
/// flag's separators). [`is_override_resource`] is the same check.
pub const OVERRIDE_RESOURCE_RULE: &str = r"self.matches('^[a-z0-9.-]*/[a-z0-9.-]+$')";

/// Admission message of [`OVERRIDE_RESOURCE_RULE`].
pub const OVERRIDE_RESOURCE_MESSAGE: &str = "dataStoreOverrides[].resource must be one \
    group/resource as kube-apiserver's --etcd-servers-overrides takes it: /events for core \
    events, apps/deployments (lowercase letters, digits, '.' and '-', one '/', a resource after it)";

/// CEL rule for `dataStoreOverrides`: each resource at most once.
pub const OVERRIDE_UNIQUE_RULE: &str = "self.all(o, self.exists_one(p, p.resource == o.resource))";

/// True when `resource` is one `group/resource` of `--etcd-servers-overrides`
/// ([`OVERRIDE_RESOURCE_RULE`]).
#[must_use]
pub fn is_override_resource(resource: &str) -> bool {
    let allowed = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
    };
    resource
        .split_once('/')
        .is_some_and(|(group, name)| allowed(group) && !name.is_empty() && allowed(name))
}

/// kube-apiserver flags that wire the control plane to its PKI, DataStore, encryption key
/// (`spec.encryptionAtRest`) and the Cluster's service network. The controller owns them; `spec.apiServer.extraArgs` may not set them
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
    "encryption-provider-config",
];

/// One entry of `encryptionAtRest.resources`, as kube-apiserver's `EncryptionConfiguration`
/// names resources: `<resource>` (core group), `<resource>.<group>`, `*.<group>`, `*.` (every
/// core resource) or `*.*` (every resource); lowercase (`resource name should not contain
/// capital letters`), never `*` alone nor `<resource>.*` (kube-apiserver refuses both).
pub const ENCRYPTED_RESOURCE_PATTERN: &str = r"^(\*\.(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)$";

/// Resources kube-apiserver's `EncryptionConfiguration` validation refuses by name: those
/// without a REST API, the `events.k8s.io` group (stored as core `events`) and the removed
/// `extensions` group (k8s.io/apiserver `validation_encryption.go`).
pub const ENCRYPTED_RESOURCE_RULE: &str = r"!(self in ['apiserveripinfo', 'serviceipallocations', 'servicenodeportallocations']) && !self.matches('^[^.]*\\.(events\\.k8s\\.io|extensions)$')";

/// The message of [`ENCRYPTED_RESOURCE_RULE`].
pub const ENCRYPTED_RESOURCE_MESSAGE: &str = "encryptionAtRest.resources: kube-apiserver cannot \
    encrypt apiserveripinfo, serviceipallocations, servicenodeportallocations, the extensions \
    group, nor events.k8s.io (encrypt core 'events' instead)";

/// `encryptionAtRest.resources` names no resource twice and none another entry covers (`*.*`
/// covers all; `*.<group>` every resource of its group; `*.` the core group), as
/// kube-apiserver requires of one entry's resources.
pub const ENCRYPTED_RESOURCES_DISJOINT_RULE: &str = "self.all(r, self.exists_one(o, o == r) && !self.exists(o, o != r && (o == '*.*' || (o.startsWith('*.') && (r.contains('.') ? r.substring(r.indexOf('.') + 1) : '') == o.substring(2)))))";

/// The group an `encryptionAtRest.resources` entry names (`""` for the core group, `*` for
/// all): what follows its first `.`.
#[must_use]
pub fn encrypted_resource_group(resource: &str) -> &str {
    resource.split_once('.').map_or("", |(_, group)| group)
}

/// Whether the entry `wide` covers the entry `resource` (`*.*` all, `*.<group>` its group).
#[must_use]
pub fn encrypted_resource_covers(wide: &str, resource: &str) -> bool {
    wide != resource
        && (wide == "*.*" || wide.strip_prefix("*.") == Some(encrypted_resource_group(resource)))
}

/// What the admission rules of `encryptionAtRest.resources` refuse
/// ([`ENCRYPTED_RESOURCE_PATTERN`], [`ENCRYPTED_RESOURCE_RULE`],
/// [`ENCRYPTED_RESOURCES_DISJOINT_RULE`]), checked again by the controller: `(index, reason)`
/// per refused entry.
#[must_use]
pub fn encrypted_resource_errors(resources: &[String]) -> Vec<(usize, String)> {
    // ENCRYPTED_RESOURCE_PATTERN: dot-separated lowercase labels, or `*.` before them, `*`
    // or nothing.
    let label = |l: &str| {
        !l.is_empty()
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let labels = |s: &str| s.split('.').all(label);
    let well_formed = |r: &str| match r.strip_prefix("*.") {
        Some(group) => group.is_empty() || group == "*" || labels(group),
        None => labels(r),
    };
    let mut errors = Vec::new();
    for (i, r) in resources.iter().enumerate() {
        let group = encrypted_resource_group(r);
        let reason = if r.len() > 253 || !well_formed(r) {
            Some(format!(
                "{r:?} is not a resource as EncryptionConfiguration names them (<resource>, \
                 <resource>.<group>, *.<group>, *. or *.*, lowercase)"
            ))
        } else if matches!(
            r.as_str(),
            "apiserveripinfo" | "serviceipallocations" | "servicenodeportallocations"
        ) {
            Some(format!(
                "{r:?} has no REST API: kube-apiserver cannot encrypt it"
            ))
        } else if group == "events.k8s.io" {
            Some(format!(
                "{r:?}: events are stored as core 'events'; encrypt 'events' instead"
            ))
        } else if group == "extensions" {
            Some(format!("{r:?}: the extensions group has been removed"))
        } else if resources[..i].contains(r) {
            Some(format!("{r:?} is named twice"))
        } else {
            resources
                .iter()
                .find(|o| encrypted_resource_covers(o, r))
                .map(|o| format!("{r:?} is covered by {o:?}: name one of them"))
        };
        errors.extend(reason.map(|reason| (i, reason)));
    }
    errors
}

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

/// A command-line argument read as a flag: its leading dashes, the name after them up to the
/// first `=`, and the value after that `=`. The one flag parser of the workspace:
/// [`flag_name`] keeps the forms `extraArgs` accepts, kamaji-bootstrap's
/// `controlplane::flags::Flag::parse` reads the user's flags with it to merge them, and the
/// reconciler reads with it which flags the user's `extraArgs` set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlagArg<'a> {
    /// How many dashes lead (`--name`: 2, `name=value`: 0).
    pub dashes: usize,
    /// The name, without its dashes (empty in `--=x`).
    pub name: &'a str,
    /// What follows the first `=`, if there is one.
    pub value: Option<&'a str>,
}

impl<'a> FlagArg<'a> {
    /// Splits `arg` (any string: every leading dash is dropped, the name ends at the first
    /// `=`). [`FlagArg::is_accepted`] says whether it is a flag in a form `extraArgs` accepts.
    #[must_use]
    pub fn parse(arg: &'a str) -> Self {
        let rest = arg.trim_start_matches('-');
        let (name, value) = match rest.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (rest, None),
        };
        Self {
            dashes: arg.len() - rest.len(),
            name,
            value,
        }
    }

    /// Whether the argument is `--name=value`, `--name`, `-name` (with or without a value) or
    /// `name=value`, with a name of ASCII letters, digits, `-`, `_` and `.` that starts with a
    /// letter or digit: what [`EXTRA_ARG_PATTERN`] admits.
    #[must_use]
    pub fn is_accepted(&self) -> bool {
        let valid_name = self
            .name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        valid_name && self.dashes <= 2 && (self.dashes > 0 || self.value.is_some())
    }
}

/// Name of a flag given as `--name=value`, `--name`, `-name` or `name=value`; `None` for a
/// string that is not a flag in any of these forms ([`FlagArg`]).
#[must_use]
pub fn flag_name(arg: &str) -> Option<&str> {
    let flag = FlagArg::parse(arg);
    flag.is_accepted().then_some(flag.name)
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

/// Adds rules to property `property` of the object `schema` describes.
fn push_property_rules(
    schema: &mut Schema,
    property: &str,
    rules: impl IntoIterator<Item = Value>,
) {
    if let Some(Value::Object(prop)) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut(property))
        && let Value::Array(list) = prop
            .entry("x-kubernetes-validations")
            .or_insert_with(|| Value::Array(Vec::new()))
    {
        list.extend(rules);
    }
}

/// `int(<side>.version.findAll('[0-9]+')[i])`: the i-th numeric part of a version.
fn part(side: &str, i: usize) -> String {
    format!("int({side}.version.findAll('[0-9]+')[{i}])")
}

/// `<side>.version` does not have three numeric parts (the pattern rejects it anyway).
fn unparsed(side: &str) -> String {
    format!("{side}.version.findAll('[0-9]+').size() < 3")
}

/// `<a>.version >= <b>.version`, comparing major, minor and patch numerically.
fn at_least(a: &str, b: &str) -> String {
    let (a0, a1, a2) = (part(a, 0), part(a, 1), part(a, 2));
    let (b0, b1, b2) = (part(b, 0), part(b, 1), part(b, 2));
    format!("({a0} > {b0} || ({a0} == {b0} && ({a1} > {b1} || ({a1} == {b1} && {a2} >= {b2}))))")
}

/// Transition rules of `spec.version` that compare it with the old spec only: no major
/// change, no skipped minor. (The downgrade rule needs `status` and sits at the root, see
/// [`version_downgrade_rule`].)
fn version_rules() -> Vec<Value> {
    let parsed = format!("{} || {}", unparsed("self"), unparsed("oldSelf"));
    let (n0, n1) = (part("self", 0), part("self", 1));
    let (o0, o1) = (part("oldSelf", 0), part("oldSelf", 1));
    vec![
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

/// Root rule of `KamajiControlPlane`: `spec.version` may go down only as far as
/// `status.version`, the lowest version any control-plane pod runs, which the controller
/// raises only once every replica runs the new version. So a stuck upgrade can be backed out
/// to the last fully rolled-out version, and a real downgrade (below it) is refused. Without
/// `status.version` nothing was ever fully rolled out, and any version may be set. It sits at
/// the root because `status` is not visible from `spec`; it is a transition rule, so it runs
/// on update only.
#[must_use]
pub fn version_downgrade_rule() -> kube::core::Rule {
    let (new, old, status) = ("self.spec", "oldSelf.spec", "self.status");
    let rule = [
        format!("{new}.version == {old}.version"),
        unparsed(new),
        unparsed(old),
        at_least(new, old),
        format!("!has({status})"),
        format!("!has({status}.version)"),
        format!("(!({}) && {})", unparsed(status), at_least(new, status)),
    ]
    .join(" || ");
    kube::core::Rule::new(rule)
        .message(
            "spec.version cannot be downgraded below status.version (the last fully rolled-out \
         version)",
        )
        .field_path(".spec.version")
}

/// Root rule of `KamajiControlPlane`: `spec.<field>` (`dataStoreName`, `dataStoreSchema` or
/// `dataStoreUsername`) left empty at creation may be set later only to the name
/// `status.dataStore.<key>` shows in use (what the empty field was derived to). Another name
/// would move the control plane to an empty DataStore, prefix, database or user with nothing
/// stored moved along; a change of a set field is refused by the spec's `is immutable once
/// set` rule. At the root because `status` is not visible from `spec`; a transition rule, so it
/// runs on update only.
#[must_use]
pub fn data_store_in_use_rule(field: &str, key: &str) -> kube::core::Rule {
    let rule = format!(
        "has(oldSelf.spec.{field}) || !has(self.spec.{field}) || !has(self.status) || \
         !has(self.status.dataStore) || self.spec.{field} == self.status.dataStore.{key}"
    );
    kube::core::Rule::new(rule)
        .message(
            format!(
                "spec.{field} may only be set to status.dataStore.{key}, the name in use: another \
             name would leave everything stored under the one in use behind"
            )
            .as_str(),
        )
        .field_path(format!(".spec.{field}"))
}

/// Root rule of `KamajiControlPlane`: `spec.version` may be at most one minor above
/// `status.version` (the last fully rolled-out version), so an upgrade that is stuck (or not
/// finished) cannot be pushed on past the next minor; the spec-level rule compares with the old
/// `spec.version` only. A transition rule, on update only.
#[must_use]
pub fn version_skip_from_status_rule() -> kube::core::Rule {
    let (new, old, status) = ("self.spec", "oldSelf.spec", "self.status");
    let rule = [
        format!("{new}.version == {old}.version"),
        unparsed(new),
        format!("!has({status})"),
        format!("!has({status}.version)"),
        unparsed(status),
        format!("{} != {}", part(new, 0), part(status, 0)),
        format!("{} <= {} + 1", part(new, 1), part(status, 1)),
    ]
    .join(" || ");
    kube::core::Rule::new(rule)
        .message(
            "spec.version cannot be more than one minor version above status.version (the last \
             fully rolled-out version): finish or back out the running upgrade first",
        )
        .field_path(".spec.version")
}

/// The reasons of `CertificateAuthoritiesRotated=False` while a CA rotation runs (its phases).
pub const CA_ROTATION_PHASE_REASONS: [&str; 4] = [
    crate::conditions::reasons::TRUSTING_NEW_CA,
    crate::conditions::reasons::ISSUING_FROM_NEW_CA,
    crate::conditions::reasons::REPLACING_WORKERS,
    crate::conditions::reasons::DROPPING_PREVIOUS_CA,
];

/// The message of [`minor_upgrade_during_ca_rotation_rule`].
pub const MINOR_UPGRADE_DURING_CA_ROTATION: &str = "spec.version cannot move to another minor \
     version while a CA rotation runs (CertificateAuthoritiesRotated=False): the rotation \
     replaces every worker, and Cluster API would create the replacements at their \
     MachineDeployment's minor, which kubeadm cannot join to the next minor (KubeadmVersionSkew); \
     upgrade once CertificateAuthoritiesRotated is True";

/// Root rule of `KamajiControlPlane` for the refused pair (CA rotation, minor upgrade) of
/// [`crate::lifecycle::decide`]: `spec.version` keeps its minor version while the status shows
/// a CA rotation in one of its phases ([`CA_ROTATION_PHASE_REASONS`]). At the root, where the
/// status is visible; a transition rule, on update only. A rotation requested in the same
/// instant as the upgrade is not in the status yet: it waits for the upgrade instead
/// (`WaitingForUpgrade`).
#[must_use]
pub fn minor_upgrade_during_ca_rotation_rule() -> kube::core::Rule {
    let (new, old, status) = ("self.spec", "oldSelf.spec", "self.status");
    let phases = CA_ROTATION_PHASE_REASONS
        .iter()
        .map(|r| cel_quote(r))
        .collect::<Vec<_>>()
        .join(", ");
    let rule = [
        format!("{new}.version == {old}.version"),
        unparsed(new),
        unparsed(old),
        format!("{} == {}", part(new, 1), part(old, 1)),
        format!("!has({status})"),
        format!("!has({status}.conditions)"),
        format!(
            "!{status}.conditions.exists(c, c.type == '{}' && c.status == 'False' && c.reason in [{phases}])",
            crate::conditions::types::CERTIFICATE_AUTHORITIES_ROTATED
        ),
    ]
    .join(" || ");
    kube::core::Rule::new(rule)
        .message(MINOR_UPGRADE_DURING_CA_ROTATION)
        .field_path(".spec.version")
}

/// The root rule that refuses `requested` at admission while `running` runs, for each pair
/// [`crate::lifecycle::decide`] refuses; `None` for the others.
#[must_use]
pub fn lifecycle_refusal_rule(
    running: crate::lifecycle::Operation,
    requested: crate::lifecycle::Operation,
) -> Option<kube::core::Rule> {
    use crate::lifecycle::Operation::{CaRotation, MinorUpgrade};
    match (running, requested) {
        (CaRotation, MinorUpgrade) => Some(minor_upgrade_during_ca_rotation_rule()),
        (MinorUpgrade, MinorUpgrade) => Some(version_skip_from_status_rule()),
        _ => None,
    }
}

/// Rule on `spec.version`: a version kamaji-rs supports ([`is_supported_version`]). Not a
/// transition rule, so it runs on create and on every update that changes the version (an
/// object stored with an older version keeps updating its other fields: the API server ratchets
/// unchanged values).
fn supported_version_rule() -> Value {
    let p = |i: usize| format!("int(self.findAll('[0-9]+')[{i}])");
    rule(
        format!(
            "self.findAll('[0-9]+').size() < 3 || ({} == {SUPPORTED_MAJOR} && {} >= {MIN_SUPPORTED_MINOR} && {} <= {MAX_SUPPORTED_MINOR})",
            p(0),
            p(1),
            p(1)
        ),
        unsupported_version_message(),
    )
}

/// Transition rules of `spec`: once the old object has a control-plane endpoint
/// (`controlPlaneEndpoint.host` non-empty), the fields that decide the endpoint cannot change.
/// Cluster API copies the endpoint into the Cluster once and treats it as immutable, so a change
/// would be half-applied (a new serving SAN and rolled pods, but the old host in the Cluster,
/// the kubeconfig and the kubeadm artifacts). Setting them in the update that first sets the
/// endpoint, and the controller's merge patch of `controlPlaneEndpoint` alone, pass.
fn endpoint_field_rules() -> Vec<Value> {
    let endpoint_set = "has(oldSelf.controlPlaneEndpoint) && has(oldSelf.controlPlaneEndpoint.host) \
                        && oldSelf.controlPlaneEndpoint.host != ''";
    exposure_rules()
        .into_iter()
        .chain(service_rules())
        .map(|(unchanged, message, path)| {
            rule_at(format!("!({endpoint_set}) || {unchanged}"), message, path)
        })
        .collect()
}

/// An endpoint rule of [`endpoint_field_rules`]: what stays unchanged (CEL), the message, the
/// field path.
type EndpointRule = (String, String, &'static str);

/// The endpoint rules of the ingress and the gateway: neither added nor removed, their
/// hostnames and the gateway's port unchanged.
fn exposure_rules() -> [EndpointRule; 5] {
    let gateway_port = |side: &str| {
        format!("(has({side}.network.gateway.port) ? {side}.network.gateway.port : 443)")
    };
    [
        (
            format!(
                "{} == {}",
                has_network("self", "ingress"),
                has_network("oldSelf", "ingress")
            ),
            endpoint_message("network.ingress", "cannot be added or removed"),
            ".network",
        ),
        (
            format!(
                "!({}) || self.network.ingress.hostname == oldSelf.network.ingress.hostname",
                both_network("ingress")
            ),
            endpoint_message("network.ingress.hostname", "cannot change"),
            ".network.ingress.hostname",
        ),
        (
            format!(
                "{} == {}",
                has_network("self", "gateway"),
                has_network("oldSelf", "gateway")
            ),
            endpoint_message("network.gateway", "cannot be added or removed"),
            ".network",
        ),
        (
            format!(
                "!({}) || self.network.gateway.hostname == oldSelf.network.gateway.hostname",
                both_network("gateway")
            ),
            endpoint_message("network.gateway.hostname", "cannot change"),
            ".network.gateway.hostname",
        ),
        (
            format!(
                "!({}) || {} == {}",
                both_network("gateway"),
                gateway_port("self"),
                gateway_port("oldSelf")
            ),
            endpoint_message("network.gateway.port", "cannot change"),
            ".network.gateway.port",
        ),
    ]
}

/// The endpoint rules of the Service: its address unchanged, and its type unless an ingress
/// or gateway (kept, by [`exposure_rules`]) decides the endpoint.
fn service_rules() -> [EndpointRule; 2] {
    let external = |side: &str| {
        format!(
            "({} || {})",
            has_network(side, "ingress"),
            has_network(side, "gateway")
        )
    };
    [
        (
            format!(
                "{} == {}",
                network_value("self", "serviceAddress", "''"),
                network_value("oldSelf", "serviceAddress", "''")
            ),
            endpoint_message("network.serviceAddress", "cannot change"),
            ".network.serviceAddress",
        ),
        // Behind an ingress or gateway (kept, by the rules above) the Service type does not
        // decide the endpoint.
        (
            format!(
                "({} && {}) || {} == {}",
                external("self"),
                external("oldSelf"),
                network_value("self", "serviceType", "'LoadBalancer'"),
                network_value("oldSelf", "serviceType", "'LoadBalancer'")
            ),
            endpoint_message("network.serviceType", "cannot change"),
            ".network.serviceType",
        ),
    ]
}

/// Whether `side` (`self`, `oldSelf`) has `network.<field>` (CEL).
fn has_network(side: &str, field: &str) -> String {
    format!("(has({side}.network) && has({side}.network.{field}))")
}

/// Whether both sides have `network.<field>` (CEL).
fn both_network(field: &str) -> String {
    format!(
        "{} && {}",
        has_network("self", field),
        has_network("oldSelf", field)
    )
}

/// The value of the optional `network.<field>` of `side`, `default` when unset (CEL).
fn network_value(side: &str, field: &str, default: &str) -> String {
    format!(
        "({} ? {side}.network.{field} : {default})",
        has_network(side, field)
    )
}

/// The message of an endpoint rule: `spec.<field> <change>` once the endpoint is set.
fn endpoint_message(field: &str, change: &str) -> String {
    format!(
        "spec.{field} {change} once spec.controlPlaneEndpoint is set: Cluster API treats the \
         control-plane endpoint as immutable"
    )
}

/// `s` as a CEL string literal (single quotes).
fn cel_quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A CEL `messageExpression` producing `template` with each placeholder replaced by the value
/// of its CEL expression: the admission message is the controller's message, word for word.
fn cel_message(template: &str, values: &[(&str, &str)]) -> String {
    let mut parts = vec![template.to_owned()];
    for (placeholder, expression) in values {
        parts = parts
            .iter()
            .flat_map(|p| {
                let mut out = Vec::new();
                for (i, piece) in p.split(placeholder).enumerate() {
                    if i > 0 {
                        out.push(format!("\u{0}{expression}"));
                    }
                    out.push(piece.to_owned());
                }
                out
            })
            .collect();
    }
    parts
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.strip_prefix('\u{0}')
                .map_or_else(|| cel_quote(p), |expr| format!("({expr})"))
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

/// A regular expression alternative matching any of `names` exactly (dots escaped, in CEL
/// string-literal form).
fn alternatives(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| n.replace('.', "\\\\."))
        .collect::<Vec<_>>()
        .join("|")
}

/// `spec.version` has a minor below `minor` (or is not a version: the pattern refuses it).
fn version_below(minor: impl std::fmt::Display) -> String {
    format!(
        "self.version.findAll('[0-9]+').size() < 3 || int(self.version.findAll('[0-9]+')[1]) < {minor}"
    )
}

/// Rules of `KamajiControlPlane.spec` generated from [`REMOVED_FLAGS`]: one per component and
/// removal minor, refusing the component's `extraArgs` that name a flag removed at or before
/// `spec.version`'s minor, in any form `extraArgs` accepts (`--name=v`, `--name`, `-name`,
/// `name=v`), with the controller's message ([`removed_flag_message`]).
fn removed_flag_rules() -> Vec<Value> {
    let mut groups: BTreeMap<(Component, u32), Vec<&str>> = BTreeMap::new();
    for (component, name, minor) in REMOVED_FLAGS {
        groups.entry((*component, *minor)).or_default().push(name);
    }
    groups
        .into_iter()
        .map(|((component, minor), names)| {
            let field = component.json_field();
            let args = format!("self.{field}.extraArgs");
            let matches = format!("a.matches('^-{{0,2}}({})(=.*)?$')", alternatives(&names));
            let flag = format!(
                "'--' + {args}.filter(a, {matches})[0].find('[A-Za-z0-9][-A-Za-z0-9_.]*')"
            );
            let flags = names.iter().map(|n| format!("--{n}")).collect::<Vec<_>>();
            json!({
                "rule": format!(
                    "!has(self.{field}) || !has({args}) || {} || !{args}.exists(a, {matches})",
                    version_below(minor)
                ),
                "message": format!(
                    "spec.{field}.extraArgs: {} removed from {} in v1.{minor}; this spec.version would not start with it",
                    flags.join(", "),
                    component.name()
                ),
                "messageExpression": cel_message(
                    &removed_flag_message(component, "\u{1}", minor, "\u{2}"),
                    &[("\u{1}", &flag), ("\u{2}", "self.version")],
                ),
                "fieldPath": format!(".{field}.extraArgs"),
            })
        })
        .collect()
}

/// Rules of `KamajiControlPlane.spec` generated from
/// [`crate::kcp::AdmissionController::removed_in_minor`]: one per removed plugin, refusing a
/// `spec.admissionControllers` that lists it when `spec.version`'s minor is at or past the
/// removal, on create and on update (an upgrade reaching that minor included), with the
/// controller's message ([`removed_admission_plugin_message`]); a list with several such plugins
/// gets one message each. One rule per plugin, not per removal minor: the API server's cost
/// estimate of a message naming the plugins a `filter` finds (`map` and `join` over the list)
/// exceeded the CRD's budget more than a hundredfold; a constant plugin name and
/// `spec.version` cost next to nothing. The controller keeps its own check for objects stored
/// before these rules.
fn removed_admission_plugin_rules() -> Vec<Value> {
    crate::kcp::AdmissionController::ALL
        .into_iter()
        .filter_map(|plugin| Some((plugin.as_str(), plugin.removed_in_minor()?)))
        .map(|(plugin, minor)| {
            json!({
                "rule": format!(
                    "!has(self.admissionControllers) || {} || !({} in self.admissionControllers)",
                    version_below(minor),
                    cel_quote(plugin)
                ),
                "message": format!(
                    "spec.admissionControllers: admission plugin {plugin} was removed in v1.{minor}; this spec.version would not start with it"
                ),
                "messageExpression": cel_message(
                    &removed_admission_plugin_message(plugin, minor, "\u{1}"),
                    &[("\u{1}", "self.version")],
                ),
                "fieldPath": ".admissionControllers",
            })
        })
        .collect()
}

/// `spec.dataStoreOverrides` cannot be added, changed or removed: kube-apiserver would look
/// for a resource's objects in the other DataStore, and those already stored would vanish from
/// the tenant (the garbage collector then deleting what they owned).
fn data_store_overrides_fixed() -> Value {
    rule_at(
        "has(self.dataStoreOverrides) == has(oldSelf.dataStoreOverrides) && \
         (!has(self.dataStoreOverrides) || self.dataStoreOverrides == oldSelf.dataStoreOverrides)"
            .to_owned(),
        "spec.dataStoreOverrides is immutable: moving a resource to or from another DataStore \
         would hide the objects already stored; create a new control plane instead"
            .to_owned(),
        ".dataStoreOverrides",
    )
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

/// Rules of `KamajiControlPlane.spec`: version upgrade policy and supported range, DataStore
/// immutability, reserved flags, flags removed at `spec.version`, endpoint fields frozen once
/// the endpoint is set.
pub(crate) fn kamaji_control_plane_spec(schema: &mut Schema) {
    push_property_rules(schema, "version", [supported_version_rule()]);
    let mut rules = version_rules();
    rules.extend(
        ["dataStoreName", "dataStoreSchema", "dataStoreUsername"]
            .into_iter()
            .map(immutable_once_set),
    );
    rules.push(data_store_overrides_fixed());
    rules.extend(reserved_flag_rules("self", "spec."));
    rules.extend(removed_flag_rules());
    rules.extend(removed_admission_plugin_rules());
    rules.extend(endpoint_field_rules());
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
        assert_eq!(flag_name("---v=4"), None);
        assert_eq!(flag_name("-"), None);
    }

    /// Every string splits into dashes, name and value, in a form `extraArgs` accepts or not.
    #[test]
    fn flag_args_split_any_string() {
        let split = |arg| {
            let f = FlagArg::parse(arg);
            (f.dashes, f.name, f.value, f.is_accepted())
        };
        assert_eq!(split("--a=b=c"), (2, "a", Some("b=c"), true));
        assert_eq!(split("-v"), (1, "v", None, true));
        assert_eq!(split("a="), (0, "a", Some(""), true));
        assert_eq!(split("word"), (0, "word", None, false));
        assert_eq!(split("---a"), (3, "a", None, false));
        assert_eq!(split("--=x"), (2, "", Some("x"), false));
        assert_eq!(split(""), (0, "", None, false));
    }

    fn text<'a>(rule: &'a Value, key: &str) -> &'a str {
        rule[key].as_str().unwrap_or_default()
    }

    #[test]
    fn override_resources_are_one_group_and_resource() {
        for ok in [
            "/events",
            "apps/deployments",
            "coordination.k8s.io/leases",
            "/pods",
        ] {
            assert!(is_override_resource(ok), "{ok}");
        }
        for bad in [
            "",
            "/",
            "events",
            "apps/",
            "/events/x",
            "/Events",
            "/events#x",
            "/a,b",
            "/a;b",
            " /events",
        ] {
            assert!(!is_override_resource(bad), "{bad:?}");
        }
    }

    #[test]
    fn version_rules_compare_numeric_parts() {
        let rules = version_rules();
        assert_eq!(
            rules.len(),
            2,
            "major change and minor skip; downgrade is at the root"
        );
        assert!(text(&rules[1], "rule").contains("int(self.version.findAll('[0-9]+')[1])"));
    }

    #[test]
    fn downgrade_rule_compares_with_status_version_at_the_root() {
        let rule = serde_json::to_value(version_downgrade_rule()).unwrap();
        let cel = text(&rule, "rule");
        assert!(cel.contains("int(self.spec.version.findAll('[0-9]+')[2]) >= int(self.status.version.findAll('[0-9]+')[2])"));
        assert!(cel.contains("int(self.spec.version.findAll('[0-9]+')[2]) >= int(oldSelf.spec.version.findAll('[0-9]+')[2])"));
        assert!(cel.contains("!has(self.status) || !has(self.status.version)"));
        assert_eq!(text(&rule, "fieldPath"), ".spec.version");
        assert!(text(&rule, "message").contains("below status.version"));
        // Installed at the root of the CRD schema, where status and oldSelf are visible.
        let crd = serde_json::to_value(crate::crd::kamaji_control_plane()).unwrap();
        let root = &crd["spec"]["versions"][1]["schema"]["openAPIV3Schema"];
        assert!(
            root["x-kubernetes-validations"]
                .as_array()
                .unwrap()
                .contains(&rule)
        );
        assert_eq!(
            root["properties"]["status"]["properties"]["version"]["maxLength"],
            256
        );
    }

    #[test]
    fn supported_versions_come_from_the_constants() {
        assert!(is_supported_version(1, 23) && is_supported_version(1, 36));
        assert!(!is_supported_version(1, 22) && !is_supported_version(1, 37));
        assert!(!is_supported_version(2, 30) && !is_supported_version(0, 30));
        assert_eq!(supported_versions(), "v1.23.0 to v1.36.x");
        let rule = supported_version_rule();
        let cel = text(&rule, "rule");
        for part in [
            "int(self.findAll('[0-9]+')[0]) == 1",
            "int(self.findAll('[0-9]+')[1]) >= 23",
            "int(self.findAll('[0-9]+')[1]) <= 36",
        ] {
            assert!(cel.contains(part), "{part} missing from {cel}");
        }
        assert_eq!(
            text(&rule, "message"),
            "spec.version must be a Kubernetes version from v1.23.0 to v1.36.x (the versions kamaji-rs supports)"
        );
        let crd = serde_json::to_value(crate::crd::kamaji_control_plane()).unwrap();
        let version = &crd["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["version"];
        assert!(
            version["x-kubernetes-validations"]
                .as_array()
                .unwrap()
                .contains(&rule)
        );
    }

    #[test]
    fn cel_message_quotes_text_and_splices_expressions() {
        assert_eq!(
            cel_message("a \u{1} b's \u{2}", &[("\u{1}", "x.y"), ("\u{2}", "z")]),
            r"'a ' + (x.y) + ' b\'s ' + (z)"
        );
        assert_eq!(cel_quote(r"a\b"), r"'a\\b'");
    }

    /// Evaluates a `messageExpression` made by [`cel_message`] for given expression values:
    /// every `(expression)` becomes its value, then the literals are joined.
    fn evaluate(message: &str, values: &[(&str, &str)]) -> String {
        let mut m = message.to_owned();
        for (expression, value) in values {
            m = m.replace(&format!("({expression})"), &cel_quote(value));
        }
        m.strip_prefix('\'')
            .and_then(|m| m.strip_suffix('\''))
            .unwrap()
            .replace("' + '", "")
    }

    #[test]
    fn every_refused_lifecycle_pair_has_its_rule_at_the_root_of_the_crd() {
        use crate::lifecycle::{Decision, Operation, decide};
        let crd = serde_json::to_value(crate::crd::kamaji_control_plane()).unwrap();
        for version in crd["spec"]["versions"].as_array().unwrap() {
            let root = version["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
                .as_array()
                .unwrap();
            for running in Operation::ALL {
                for requested in Operation::ALL {
                    let refused = decide(running, requested).0 == Decision::Refused;
                    let rule = lifecycle_refusal_rule(running, requested);
                    assert_eq!(refused, rule.is_some(), "{running:?} / {requested:?}");
                    if let Some(rule) = rule {
                        let rule = serde_json::to_value(rule).unwrap();
                        assert!(root.contains(&rule), "{running:?} / {requested:?}: {rule}");
                    }
                }
            }
        }
        let cel = minor_upgrade_during_ca_rotation_rule().rule;
        for reason in CA_ROTATION_PHASE_REASONS {
            assert!(cel.contains(&format!("'{reason}'")), "{cel}");
        }
        assert!(cel.contains("c.type == 'CertificateAuthoritiesRotated' && c.status == 'False'"));
        assert!(cel.contains(
            "int(self.spec.version.findAll('[0-9]+')[1]) == int(oldSelf.spec.version.findAll('[0-9]+')[1])"
        ));
    }

    #[test]
    fn removed_admission_plugin_rules_cover_every_removed_plugin() {
        let rules = removed_admission_plugin_rules();
        let removed: Vec<_> = crate::kcp::AdmissionController::ALL
            .into_iter()
            .filter_map(|p| p.removed_in_minor().map(|m| (p.as_str(), m)))
            .collect();
        assert_eq!(removed.len(), 5);
        assert_eq!(rules.len(), removed.len());
        for (plugin, minor) in removed {
            let owner = rules
                .iter()
                .find(|r| {
                    text(r, "rule").contains(&format!("!('{plugin}' in self.admissionControllers)"))
                })
                .unwrap();
            assert!(
                text(owner, "rule").contains(&format!("< {minor} ||")),
                "{plugin}"
            );
            assert_eq!(text(owner, "fieldPath"), ".admissionControllers");
            // The controller's message, word for word.
            assert_eq!(
                text(owner, "messageExpression"),
                format!(
                    "'admission plugin {plugin} was removed in v1.{minor}; version ' + (self.version) + ' would not start with it'"
                )
            );
        }
    }

    #[test]
    fn removed_flag_rules_cover_the_table_grouped_by_component_and_minor() {
        let rules = removed_flag_rules();
        let mut groups: Vec<(Component, u32)> =
            REMOVED_FLAGS.iter().map(|(c, _, m)| (*c, *m)).collect();
        groups.sort();
        groups.dedup();
        assert_eq!(rules.len(), groups.len());
        for (component, name, minor) in REMOVED_FLAGS {
            let field = component.json_field();
            let owners: Vec<&Value> = rules
                .iter()
                .filter(|r| {
                    text(r, "fieldPath") == format!(".{field}.extraArgs")
                        && text(r, "rule").contains(&format!("< {minor} ||"))
                })
                .collect();
            assert_eq!(owners.len(), 1, "{field} {minor}");
            let rule = owners[0];
            let cel = text(rule, "rule");
            assert!(cel.starts_with(&format!(
                "!has(self.{field}) || !has(self.{field}.extraArgs) || "
            )));
            let group = cel
                .split("a.matches('^-{0,2}(")
                .nth(1)
                .and_then(|g| g.split(")(=.*)?$')").next())
                .unwrap();
            assert!(
                group.split('|').any(|n| n == *name),
                "{name} not in {group}"
            );
            assert!(text(rule, "message").contains(&format!("--{name}")));
            // The admission message is the controller's, word for word.
            let flag_expression = format!(
                "'--' + self.{field}.extraArgs.filter(a, a.matches('^-{{0,2}}({group})(=.*)?$'))[0].find('[A-Za-z0-9][-A-Za-z0-9_.]*')"
            );
            let flag = format!("--{name}");
            assert_eq!(
                evaluate(
                    text(rule, "messageExpression"),
                    &[(&flag_expression, &flag), ("self.version", "v1.36.3")]
                ),
                removed_flag_message(*component, &flag, *minor, "v1.36.3")
            );
        }
        assert_eq!(
            removed_flag_message(Component::ApiServer, "--insecure-port", 24, "v1.36.3"),
            "--insecure-port was removed from kube-apiserver in v1.24; version v1.36.3 would not start with it"
        );
    }

    #[test]
    fn endpoint_rules_apply_only_once_the_endpoint_is_set() {
        let rules = endpoint_field_rules();
        let fields: Vec<&str> = rules.iter().map(|r| text(r, "fieldPath")).collect();
        assert_eq!(
            fields,
            [
                ".network",
                ".network.ingress.hostname",
                ".network",
                ".network.gateway.hostname",
                ".network.gateway.port",
                ".network.serviceAddress",
                ".network.serviceType"
            ]
        );
        for rule in &rules {
            assert!(text(rule, "rule").starts_with(
                "!(has(oldSelf.controlPlaneEndpoint) && has(oldSelf.controlPlaneEndpoint.host) && oldSelf.controlPlaneEndpoint.host != '') || "
            ));
            assert!(text(rule, "message").ends_with(
                "once spec.controlPlaneEndpoint is set: Cluster API treats the control-plane endpoint as immutable"
            ));
        }
    }

    /// The controller's check of `encryptionAtRest.resources` refuses what kube-apiserver's
    /// `EncryptionConfiguration` validation refuses, and overlaps, naming the entry.
    #[test]
    fn encrypted_resources_are_refused_as_kube_apiserver_refuses_them() {
        let list = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let good = list(&[
            "configmaps",
            "widgets.example.com",
            "*.apps",
            "events",
            "secrets",
        ]);
        assert!(encrypted_resource_errors(&good).is_empty());
        assert!(encrypted_resource_errors(&list(&["*."])).is_empty());
        assert!(encrypted_resource_errors(&list(&["*.*"])).is_empty());
        for bad in [
            "*",
            "ConfigMaps",
            "configmaps.*",
            "",
            ".",
            "a..b",
            "-a",
            "con figmaps",
            "configmaps;drop",
            "apiserveripinfo",
            "servicenodeportallocations",
            "events.events.k8s.io",
            "*.events.k8s.io",
            "ingresses.extensions",
            "é",
        ] {
            let errors = encrypted_resource_errors(&list(&[bad]));
            assert_eq!(errors.len(), 1, "{bad:?} accepted");
            assert_eq!(errors[0].0, 0);
        }
        let twice = encrypted_resource_errors(&list(&["configmaps", "configmaps"]));
        assert_eq!(twice, [(1, "\"configmaps\" is named twice".to_owned())]);
        let covered = encrypted_resource_errors(&list(&["configmaps", "*.", "deployments.apps"]));
        assert_eq!(covered.iter().map(|e| e.0).collect::<Vec<_>>(), [0]);
        let all = encrypted_resource_errors(&list(&["*.*", "*.apps"]));
        assert_eq!(all.iter().map(|e| e.0).collect::<Vec<_>>(), [1]);
        assert!(encrypted_resource_covers("*.apps", "deployments.apps"));
        assert!(!encrypted_resource_covers(
            "*.apps",
            "deployments.apps.example.com"
        ));
        assert!(!encrypted_resource_covers("*.", "deployments.apps"));
    }
}
