//! Reading the API server's audit log.

use serde::Deserialize;

/// One audit event (`audit.k8s.io/v1` `Event`, stage `ResponseComplete` or `Panic`), reduced
/// to the fields tests count by.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// The authenticated user.
    pub user: AuditUser,
    /// The client's `User-Agent` header (the kamaji-rs manager's names its replica:
    /// `kamaji-rs-manager/<version> (<identity>[; watch-filter=<value>])`).
    #[serde(default)]
    pub user_agent: String,
    /// Request URI, e.g. `/api/v1/namespaces/default/secrets/x`.
    pub request_u_r_i: String,
    /// The target object, when the request names one.
    #[serde(default)]
    pub object_ref: Option<AuditObjectRef>,
    /// Event stage (`ResponseComplete`, `ResponseStarted`, `Panic`).
    pub stage: String,
    /// HTTP status of the response, when complete.
    #[serde(default)]
    pub response_status: Option<AuditStatus>,
    /// The request body (for a patch, the patch), where the policy logs it (level `Request`:
    /// writes to `infrastructure.cluster.x-k8s.io` and `controlplane.cluster.x-k8s.io`).
    #[serde(default)]
    pub request_object: Option<serde_json::Value>,
}

/// The user of an [`AuditEvent`].
#[derive(Debug, Clone, Deserialize)]
pub struct AuditUser {
    /// User name (client certificate CN, service account, …).
    #[serde(default)]
    pub username: String,
    /// Groups.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// The object an [`AuditEvent`] targets.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditObjectRef {
    /// Resource plural, e.g. `secrets`.
    #[serde(default)]
    pub resource: String,
    /// Namespace, when namespaced.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Object name, when named.
    #[serde(default)]
    pub name: Option<String>,
    /// API group (empty for core).
    #[serde(default)]
    pub api_group: Option<String>,
    /// Subresource, e.g. `status`.
    #[serde(default)]
    pub subresource: Option<String>,
}

/// Response status of an [`AuditEvent`].
#[derive(Debug, Clone, Deserialize)]
pub struct AuditStatus {
    /// HTTP status code.
    #[serde(default)]
    pub code: u16,
}

impl AuditEvent {
    /// True for verbs that change state (`create`, `update`, `patch`, `delete`,
    /// `deletecollection`).
    #[must_use]
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }

    /// The HTTP status code of the response, when the event has one.
    #[must_use]
    pub fn code(&self) -> Option<u16> {
        self.response_status.as_ref().map(|s| s.code)
    }

    /// True for a write the API server refused (a response code of 400 or more: a `409
    /// Conflict` on a stale `resourceVersion` precondition, say): it changed nothing.
    #[must_use]
    pub fn refused(&self) -> bool {
        self.code().is_some_and(|c| c >= 400)
    }
}

/// Parses the JSON-lines audit log, keeping completed requests only.
pub(crate) fn parse(text: &str) -> Vec<AuditEvent> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<AuditEvent>(l).ok())
        .filter(|e| e.stage == "ResponseComplete" || e.stage == "Panic")
        .collect()
}
