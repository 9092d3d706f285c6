//! What a pass found and reports: the conditions and events the steps report, the facts the
//! status is computed from, and the version of the KamajiControlPlane its own writes left. The
//! driver writes the status and publishes the events from it once, at the pass's end.

use k8s_openapi::api::apps::v1::Deployment;
use kamaji_api::KamajiControlPlane;
use kube::runtime::events::EventType;

use super::status::{AppliedRecord, Cond};

/// What a pass found, for the status and events the driver writes at its end.
#[derive(Debug, Default)]
pub struct Report {
    pub(crate) conditions: Vec<Cond>,
    pub(crate) events: Vec<(EventType, &'static str, String)>,
    /// Desired replicas, version and the Deployment, once the spec is valid.
    pub(crate) facts: Option<Facts>,
    /// The KamajiControlPlane's `resourceVersion` after the pass's own writes to it (the
    /// finalizer, the endpoint), when it made any: the status write's precondition.
    pub(crate) resource_version: Option<String>,
    /// The KamajiControlPlane's `metadata.generation` after the pass's own writes to it: the
    /// endpoint it writes into the spec raises it, and the status the pass writes describes
    /// that spec, so its conditions observe that generation (no further pass just to say so).
    pub(crate) generation: Option<i64>,
    /// What the apply step did that conditions report ([`super::status::applied_conditions`]).
    pub(crate) applied: AppliedRecord,
    /// The pass writes no status and publishes no event (a control plane a Cluster points at,
    /// before Cluster API has set its owner reference: [`super::gates::awaits`]).
    pub(crate) silent: bool,
}

/// What the status is computed from once the spec is valid.
#[derive(Debug, Clone)]
pub(crate) struct Facts {
    pub(crate) desired: i32,
    pub(crate) version: String,
    pub(crate) selector: String,
    pub(crate) deployment: Option<Deployment>,
    pub(crate) template_changed: bool,
    pub(crate) reachable: bool,
    pub(crate) kubeconfig_exists: bool,
    pub(crate) retired: Vec<&'static str>,
    pub(crate) data_store: kamaji_api::StatusDataStore,
}

impl Report {
    /// Records the `resourceVersion` the pass's own write to the KamajiControlPlane returned.
    pub(crate) fn wrote_kcp(&mut self, written: &KamajiControlPlane) {
        self.resource_version
            .clone_from(&written.metadata.resource_version);
        self.generation = written.metadata.generation;
    }

    /// Reports a condition; a later report of the same type replaces the earlier one (the
    /// observe step's `DataStoreReady=True`, say, by apply's finding that the schema is held by
    /// another control plane), so the status never carries a type twice.
    pub fn push(&mut self, cond: Cond) {
        if let Some(same) = self.conditions.iter_mut().find(|c| c.type_ == cond.type_) {
            *same = cond;
        } else {
            self.conditions.push(cond);
        }
    }
    /// A Normal event.
    pub fn note(&mut self, reason: &'static str, message: &str) {
        self.events
            .push((EventType::Normal, reason, message.to_owned()));
    }
    /// A Warning event.
    pub fn warn(&mut self, reason: &'static str, message: &str) {
        self.events
            .push((EventType::Warning, reason, message.to_owned()));
    }
}
