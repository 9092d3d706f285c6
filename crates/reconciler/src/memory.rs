//! The per-process memory behind the event and write suppression of the scale work
//! (docs/development/reconcile-pipeline.md, "Keeping a pass cheap"): what this process wrote,
//! read and verified, which watch events it holds while a pass runs, what the last pass saw of
//! its Deployment, the events it published and the setbacks it holds back. Private state
//! behind methods; one [`Memory`] per process, in [`crate::context::Context`].
//!
//! The watch filters of the controller ask it whether an event needs a pass
//! ([`Memory::control_plane_event_skipped`], [`Memory::owned_event_skipped`],
//! [`Memory::deployment_event_skipped`]); the pipeline tells it what a pass wrote and found.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kamaji_api::KamajiControlPlane;
use prometheus_client::metrics::counter::Counter;

use crate::metrics::Metrics;
use crate::replicas::DeploymentView;

/// A datastore schema claimed for a control plane: (DataStore, schema, `namespace/name`).
pub type SchemaClaimKey = (String, String, String);

/// What this process remembers between passes (the module's doc).
#[derive(Debug)]
pub struct Memory {
    /// Objects (by UID) whose stored form still differed from the desired object right after
    /// kamaji-rs applied it (a mutating admission webhook rewrote a field), with the desired
    /// hash of that write: their drift is accepted until the desired object changes, so a
    /// rewrite never turns into a write loop.
    settled_drift: Mutex<HashMap<String, String>>,
    /// Owned objects (by UID) found holding the desired object, or written so by this process:
    /// the `resourceVersion` read or written and the desired hash it holds. Both are immutable
    /// for that pair, so a pass reading the same version for the same desired object skips the
    /// comparison (two JSON serializations per object per pass; issue 16), and the watch event
    /// of that version wakes no pass ([`Memory::known_version`]). A root Secret this process
    /// created is recorded with an empty hash (it is never compared). At most
    /// [`VERIFIED_KEPT`], emptied when full.
    verified: Mutex<HashMap<String, (String, String)>>,
    /// Per KamajiControlPlane UID, the `resourceVersion`s this process's own successful writes
    /// to it replaced, newest last (at most [`SUPERSEDED_KEPT`]): a pass handed one of them by
    /// the watch cache (its event raced the write's) would compute from an older status and
    /// its writes would be refused; the replacing version's own event brings the pass.
    superseded: Mutex<HashMap<String, Vec<String>>>,
    /// Per KamajiControlPlane UID, the `resourceVersion` the last pass that ended without error
    /// left with its own writes to it (its status write, preconditioned on the version the pass
    /// read or wrote, or its last spec or metadata write): that version's watch event carries
    /// nothing the pass did not account for, so it wakes no pass ([`Memory::is_own_result`]).
    own_results: Mutex<HashMap<String, String>>,
    /// Per KamajiControlPlane UID whose pass is running, the versions watch events brought
    /// meanwhile, of it ([`Memory::hold_event`]) and of the objects it owns
    /// ([`Memory::hold_owned_event`]): the pass's own writes are only known as such once it
    /// ends ([`Memory::end_pass`]).
    running: Mutex<HashMap<String, Vec<Held>>>,
    /// Per KamajiControlPlane UID and event reason, the note last published and when: a pass
    /// repeating it within the resync period publishes nothing ([`Memory::repeats_event`]).
    published: Mutex<HashMap<(String, String), (String, Instant)>>,
    /// When each control plane (by `namespace/name`) first met the transient setback its
    /// status is being held back for ([`Memory::hold_setback`]).
    setbacks: Mutex<HashMap<String, Instant>>,
    /// Datastore schemas this process has claimed (or found claimed) for their control plane
    /// and whose etcd user and role it has granted, so both are checked once per process.
    schema_claims: Mutex<HashSet<SchemaClaimKey>>,
    /// Per KamajiControlPlane UID, its Deployment as the last pass that ended without error saw
    /// it: a Deployment event showing nothing else a pass reads wakes no pass
    /// ([`Memory::deployment_wakes`]).
    deployments_seen: Mutex<HashMap<String, DeploymentView>>,
    /// How long a published event is not repeated (the manager's resync period).
    resync: Duration,
    /// How long a transient setback is held back (`--transient-failure-grace-seconds`).
    transient_grace: Duration,
    /// The counters of the events this memory dismisses.
    counters: Counters,
}

/// The metrics [`Memory`] counts (clones of [`Metrics`]' counters).
#[derive(Debug)]
struct Counters {
    own_results: Counter,
    owned_own_writes: Counter,
    unchanged_deployments: Counter,
}

/// A watch event held while a control plane's pass runs ([`Memory::begin_pass`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// A `resourceVersion` of the KamajiControlPlane itself.
    ControlPlane(String),
    /// A `resourceVersion` of an object it owns, with that object's UID.
    Owned {
        /// The owned object's UID.
        uid: String,
        /// Its `resourceVersion`.
        version: String,
        /// For the control-plane Deployment, what a pass reads of that version.
        deployment: Option<DeploymentView>,
    },
}

/// How many objects [`Memory::verified_desired`] remembers at most (about fifteen per tenant;
/// a full memory of them is emptied).
pub const VERIFIED_KEPT: usize = 100_000;

/// How many replaced versions [`Memory::supersede`] keeps per control plane: the writes of
/// a few passes, more than a watch event can lag behind.
pub const SUPERSEDED_KEPT: usize = 8;

impl Memory {
    /// An empty memory counting into `metrics`; a published event is not repeated within
    /// `resync`, a transient setback is held back for `transient_grace`.
    #[must_use]
    pub fn new(metrics: &Metrics, resync: Duration, transient_grace: Duration) -> Self {
        Self {
            settled_drift: Mutex::new(HashMap::new()),
            verified: Mutex::new(HashMap::new()),
            superseded: Mutex::new(HashMap::new()),
            own_results: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            published: Mutex::new(HashMap::new()),
            setbacks: Mutex::new(HashMap::new()),
            schema_claims: Mutex::new(HashSet::new()),
            deployments_seen: Mutex::new(HashMap::new()),
            resync,
            transient_grace,
            counters: Counters {
                own_results: metrics.own_result_events.clone(),
                owned_own_writes: metrics.owned_own_write_events.clone(),
                unchanged_deployments: metrics.unchanged_deployment_events.clone(),
            },
        }
    }

    /// Whether the transient setback of `key` (first met now, or earlier) is still within the
    /// grace given to [`Memory::new`]; once it is not, it is forgotten (the status reports it).
    pub fn hold_setback(&self, key: &str) -> bool {
        let now = Instant::now();
        let Ok(mut m) = self.setbacks.lock() else {
            return false;
        };
        let first = *m.entry(key.to_owned()).or_insert(now);
        let held = now.duration_since(first) < self.transient_grace;
        if !held {
            m.remove(key);
        }
        held
    }

    /// Forgets a setback of `key` (the pass found none).
    pub fn end_setback(&self, key: &str) {
        if let Ok(mut m) = self.setbacks.lock() {
            m.remove(key);
        }
    }

    /// Whether drift of the object `uid` from the desired object with `hash` was accepted.
    #[must_use]
    pub fn drift_settled(&self, uid: &str, hash: &str) -> bool {
        self.settled_drift
            .lock()
            .is_ok_and(|m| m.get(uid).is_some_and(|h| h == hash))
    }

    /// Records that this process's write replaced version `version` of the control plane
    /// `uid` (its `superseded` versions).
    pub fn supersede(&self, uid: &str, version: &str) {
        if let Ok(mut m) = self.superseded.lock() {
            let versions = m.entry(uid.to_owned()).or_default();
            if versions.len() == SUPERSEDED_KEPT {
                versions.remove(0);
            }
            versions.push(version.to_owned());
        }
    }

    /// Whether version `version` of the control plane `uid` is one this process's own write
    /// replaced (its `superseded` versions).
    #[must_use]
    pub fn is_superseded(&self, uid: &str, version: &str) -> bool {
        self.superseded
            .lock()
            .is_ok_and(|m| m.get(uid).is_some_and(|v| v.iter().any(|s| s == version)))
    }

    /// Records that a pass of the control plane `uid` ended without error and that its own
    /// writes left it at version `version` (its `own_results`).
    pub fn own_result(&self, uid: &str, version: &str) {
        if let Ok(mut m) = self.own_results.lock() {
            m.insert(uid.to_owned(), version.to_owned());
        }
    }

    /// Whether version `version` of the control plane `uid` is the one the last pass that
    /// ended without error left with its own writes (its `own_results`): its watch
    /// event needs no pass.
    #[must_use]
    pub fn is_own_result(&self, uid: &str, version: &str) -> bool {
        self.own_results
            .lock()
            .is_ok_and(|m| m.get(uid).is_some_and(|v| v == version))
    }

    /// Records that a pass of the control plane `uid` begins.
    pub fn begin_pass(&self, uid: &str) {
        if let Ok(mut m) = self.running.lock() {
            m.insert(uid.to_owned(), Vec::new());
        }
    }

    /// Holds the watch event of version `version` of the control plane `uid` when its pass is
    /// running (`true`): the event of the pass's own write can arrive before the pass has
    /// recorded it ([`Memory::own_result`]), and would wake one more pass for nothing.
    /// [`Memory::end_pass`] decides about it.
    pub fn hold_event(&self, uid: &str, version: &str) -> bool {
        self.hold(uid, Held::ControlPlane(version.to_owned()))
    }

    /// Holds the watch event of version `version` of the object `uid` that the control plane
    /// `owner` owns, when the control plane's pass is running (`true`): an object the pass
    /// writes can bring its event before the pass has recorded the write
    /// ([`Memory::verified_desired`], [`Memory::created`]). [`Memory::end_pass`] decides.
    /// `deployment` is what a pass reads of that version, for the control-plane Deployment.
    pub fn hold_owned_event(
        &self,
        owner: &str,
        uid: &str,
        version: &str,
        deployment: Option<&DeploymentView>,
    ) -> bool {
        let held = Held::Owned {
            uid: uid.to_owned(),
            version: version.to_owned(),
            deployment: deployment.cloned(),
        };
        self.hold(owner, held)
    }

    fn hold(&self, owner: &str, held: Held) -> bool {
        self.running
            .lock()
            .is_ok_and(|mut m| match m.get_mut(owner) {
                Some(events) => {
                    events.push(held);
                    true
                }
                None => false,
            })
    }

    /// Records that the pass of the control plane `uid` ended (after [`Memory::own_result`]),
    /// and returns whether an event held meanwhile brought a version its own writes and reads
    /// do not account for (another writer's): that one needs a pass.
    pub fn end_pass(&self, uid: &str) -> bool {
        let held = self
            .running
            .lock()
            .ok()
            .and_then(|mut m| m.remove(uid))
            .unwrap_or_default();
        // Every held event is looked at (no short cut), so each dismissed Deployment event is
        // counted.
        let mut wakes = false;
        for h in &held {
            wakes |= match h {
                Held::ControlPlane(v) => !self.is_own_result(uid, v) && !self.is_superseded(uid, v),
                Held::Owned {
                    uid: object,
                    version,
                    deployment,
                } => self.held_owned_wakes(uid, object, version, deployment.as_ref()),
            };
        }
        wakes
    }

    /// Whether the event of version `version` of the object `object` that the control plane
    /// `owner` owns, held while its pass ran, needs another pass now that it has ended: not a
    /// version the pass wrote or verified, nor (`deployment`, for its Deployment) one showing
    /// nothing the pass did not see.
    fn held_owned_wakes(
        &self,
        owner: &str,
        object: &str,
        version: &str,
        deployment: Option<&DeploymentView>,
    ) -> bool {
        if self.known_version(object, version) {
            return false;
        }
        let unchanged = deployment.is_some_and(|d| !self.deployment_wakes(owner, d));
        if unchanged {
            self.counters.unchanged_deployments.inc();
        }
        !unchanged
    }

    /// Records what the pass of the control plane `uid` that just ended without error saw of
    /// its Deployment (`None`: none, or the pass did not get that far).
    pub fn saw_deployment(&self, uid: &str, deployment: Option<DeploymentView>) {
        if let Ok(mut m) = self.deployments_seen.lock() {
            match deployment {
                Some(d) => m.insert(uid.to_owned(), d),
                None => m.remove(uid),
            };
        }
    }

    /// Whether the control plane `uid`'s Deployment as `deployment` shows a pass anything the
    /// last pass did not see ([`DeploymentView::wakes`]); `true` when no pass recorded one.
    #[must_use]
    pub fn deployment_wakes(&self, uid: &str, deployment: &DeploymentView) -> bool {
        self.deployments_seen.lock().map_or(true, |m| {
            m.get(uid).is_none_or(|seen| deployment.wakes(seen))
        })
    }

    /// Forgets the version recorded by [`Memory::own_result`] for the control plane `uid`: a
    /// pass handed a version that write replaced waits for the write's own event.
    pub fn forget_own_result(&self, uid: &str) {
        if let Ok(mut m) = self.own_results.lock() {
            m.remove(uid);
        }
    }

    /// Forgets what was recorded in memory about the control plane `uid` (it is gone).
    pub fn forget(&self, uid: &str) {
        if let Ok(mut m) = self.superseded.lock() {
            m.remove(uid);
        }
        if let Ok(mut m) = self.own_results.lock() {
            m.remove(uid);
        }
        if let Ok(mut m) = self.deployments_seen.lock() {
            m.remove(uid);
        }
        if let Ok(mut m) = self.published.lock() {
            m.retain(|(u, _), _| u != uid);
        }
    }

    /// Whether an event with `reason` and `note` about the control plane `uid` repeats the one
    /// this process published last for that reason, within the resync period given to
    /// [`Memory::new`]; when it does not, it is recorded as published. Every pass of a control plane waiting for something
    /// reports the same event, and each would be one more write (the recorder patches the
    /// event's series count); a new note, or the same after a resync period, is published.
    pub fn repeats_event(&self, uid: &str, reason: &str, note: &str) -> bool {
        let Ok(mut m) = self.published.lock() else {
            return false;
        };
        let now = Instant::now();
        let key = (uid.to_owned(), reason.to_owned());
        if let Some((last, at)) = m.get(&key)
            && last == note
            && now.duration_since(*at) < self.resync
        {
            return true;
        }
        m.insert(key, (note.to_owned(), now));
        false
    }

    /// Accepts drift of the object `uid` from the desired object with `hash`.
    pub fn settle_drift(&self, uid: &str, hash: &str) {
        if let Ok(mut m) = self.settled_drift.lock() {
            m.insert(uid.to_owned(), hash.to_owned());
        }
    }

    /// Whether the object `uid` at version `version` was found holding the desired object of
    /// hash `hash` (its `verified` versions).
    #[must_use]
    pub fn holds_desired(&self, uid: &str, version: &str, hash: &str) -> bool {
        self.verified
            .lock()
            .is_ok_and(|m| m.get(uid).is_some_and(|(v, h)| v == version && h == hash))
    }

    /// Records that the object `uid` at version `version` holds the desired object of hash
    /// `hash` (its `verified` versions).
    pub fn verified_desired(&self, uid: &str, version: &str, hash: &str) {
        if uid.is_empty() || version.is_empty() {
            return;
        }
        if let Ok(mut m) = self.verified.lock() {
            if m.len() >= VERIFIED_KEPT {
                m.clear();
            }
            m.insert(uid.to_owned(), (version.to_owned(), hash.to_owned()));
        }
    }

    /// Records that this process created the object `uid` at version `version` (a root
    /// Secret, never compared with a desired object): its watch event wakes no pass.
    pub fn created(&self, uid: &str, version: &str) {
        self.verified_desired(uid, version, "");
    }

    /// Whether a pass of this process wrote the object `uid` at version `version`, or read it
    /// at that version and found it holding the desired object (its `verified` versions): the
    /// watch event of that version brings nothing the pass did not account for.
    #[must_use]
    pub fn known_version(&self, uid: &str, version: &str) -> bool {
        self.verified
            .lock()
            .is_ok_and(|m| m.get(uid).is_some_and(|(v, _)| v == version))
    }

    /// Whether this process claimed (or found claimed) the schema `claim` and granted its user
    /// ([`Memory::remember_claim`]).
    #[must_use]
    pub fn claimed(&self, claim: &SchemaClaimKey) -> bool {
        self.schema_claims.lock().is_ok_and(|c| c.contains(claim))
    }

    /// Records that this process claimed the schema `claim` and granted its user.
    pub fn remember_claim(&self, claim: SchemaClaimKey) {
        if let Ok(mut c) = self.schema_claims.lock() {
            c.insert(claim);
        }
    }

    /// Forgets every schema claim but those `keep` keeps (claims released with their data).
    pub fn forget_claims(&self, keep: impl Fn(&SchemaClaimKey) -> bool) {
        if let Ok(mut c) = self.schema_claims.lock() {
            c.retain(|claim| keep(claim));
        }
    }

    /// Every schema claim this process remembers ([`Memory::remember_claim`]).
    #[must_use]
    pub fn claims(&self) -> HashSet<SchemaClaimKey> {
        self.schema_claims
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
    }
}

/// The UID and `resourceVersion` of the object with `meta`, when it has both.
fn uid_and_version(meta: &ObjectMeta) -> Option<(&str, &str)> {
    Some((meta.uid.as_deref()?, meta.resource_version.as_deref()?))
}

/// The UID of the KamajiControlPlane that controls the object with `meta`.
fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == "KamajiControlPlane")
        .map(|o| o.uid.as_str())
}

/// The watch filters: whether an event needs no pass.
impl Memory {
    /// Whether `kcp` is at a version this process's own writes account for: the one the last
    /// pass that ended without error left ([`Memory::is_own_result`]), or one a later write of
    /// this process already replaced ([`Memory::is_superseded`]: the finalizer and endpoint
    /// patches a pass makes before its status write; their events arrive after the pass that
    /// made them).
    #[must_use]
    pub fn accounts_for(&self, kcp: &KamajiControlPlane) -> bool {
        uid_and_version(&kcp.metadata).is_some_and(|(uid, version)| {
            self.is_own_result(uid, version) || self.is_superseded(uid, version)
        })
    }

    /// Whether the change event of the KamajiControlPlane `kcp` needs no pass: a version this
    /// process's own writes account for ([`Memory::accounts_for`]), or one held because its
    /// pass is running ([`Memory::hold_event`]). Counted (`kamaji_own_write_events_total`).
    pub fn control_plane_event_skipped(&self, kcp: &KamajiControlPlane) -> bool {
        let skip = self.accounts_for(kcp)
            || uid_and_version(&kcp.metadata)
                .is_some_and(|(uid, version)| self.hold_event(uid, version));
        if skip {
            self.counters.own_results.inc();
        }
        skip
    }

    /// Whether the change event of the owned object with `meta` needs no pass now: a version
    /// this process wrote or verified, or one held while its owner's pass runs (with
    /// `deployment`, what a pass reads of that version of the control-plane Deployment).
    #[must_use]
    pub fn own_owned(&self, meta: &ObjectMeta, deployment: Option<&DeploymentView>) -> bool {
        let Some((uid, version)) = uid_and_version(meta) else {
            return false;
        };
        if self.known_version(uid, version) {
            return true;
        }
        controller_uid(meta)
            .is_some_and(|owner| self.hold_owned_event(owner, uid, version, deployment))
    }

    /// [`Memory::own_owned`] for an owned object that is not the Deployment, counted
    /// (`kamaji_owned_own_write_events_total`).
    pub fn owned_event_skipped(&self, meta: &ObjectMeta) -> bool {
        let skip = self.own_owned(meta, None);
        if skip {
            self.counters.owned_own_writes.inc();
        }
        skip
    }

    /// Whether the change event of the control-plane Deployment with `meta`, read as `view`,
    /// needs no pass now: a version this process wrote or verified, one held while its
    /// owner's pass runs, or one showing nothing the owner's last pass did not see. Counted.
    pub fn deployment_event_skipped(&self, meta: &ObjectMeta, view: &DeploymentView) -> bool {
        if self.own_owned(meta, Some(view)) {
            self.counters.owned_own_writes.inc();
            return true;
        }
        let unchanged =
            controller_uid(meta).is_some_and(|owner| !self.deployment_wakes(owner, view));
        if unchanged {
            self.counters.unchanged_deployments.inc();
        }
        unchanged
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Config;

    fn memory() -> Memory {
        let config = Config::default();
        Memory::new(&Metrics::default(), config.resync, config.transient_grace)
    }

    /// Every pass of a control plane waiting for something reports the same event: it is
    /// published once per resync period, a new note at once, another control plane's apart.
    #[tokio::test]
    async fn an_event_repeated_by_a_later_pass_is_not_published_again() {
        let mem = memory();
        assert!(!mem.repeats_event("a", "WaitingForOwnerCluster", "waiting"));
        assert!(mem.repeats_event("a", "WaitingForOwnerCluster", "waiting"));
        assert!(!mem.repeats_event("b", "WaitingForOwnerCluster", "waiting"));
        assert!(!mem.repeats_event("a", "WaitingForOwnerCluster", "still waiting"));
        assert!(!mem.repeats_event("a", "InvalidSpec", "waiting"));
        mem.forget("a");
        assert!(!mem.repeats_event("a", "InvalidSpec", "waiting"));
        assert!(mem.repeats_event("b", "WaitingForOwnerCluster", "waiting"));
    }

    /// The versions this process's writes replaced are recognised, per control plane, and
    /// only the last [`SUPERSEDED_KEPT`] are kept.
    #[tokio::test]
    async fn versions_replaced_by_own_writes_are_recognised_per_control_plane() {
        let mem = memory();
        mem.supersede("a", "1");
        assert!(mem.is_superseded("a", "1"));
        assert!(!mem.is_superseded("a", "2"));
        assert!(!mem.is_superseded("b", "1"));
        for v in 2..=SUPERSEDED_KEPT + 1 {
            mem.supersede("a", &v.to_string());
        }
        assert!(!mem.is_superseded("a", "1"));
        assert!(mem.is_superseded("a", "2"));
        mem.forget("a");
        assert!(!mem.is_superseded("a", "2"));
    }

    /// Events of a control plane whose pass runs are held; at its end only a version its own
    /// writes do not account for asks for another pass; no pass running, nothing is held.
    #[tokio::test]
    async fn events_held_during_a_pass_ask_for_another_only_when_another_writer_made_them() {
        let mem = memory();
        assert!(!mem.hold_event("a", "1"), "no pass running");
        mem.begin_pass("a");
        assert!(mem.hold_event("a", "2"));
        assert!(
            !mem.hold_event("b", "2"),
            "another control plane's pass is not running"
        );
        assert!(mem.hold_event("a", "3"));
        mem.supersede("a", "2");
        mem.own_result("a", "3");
        assert!(!mem.end_pass("a"), "2 and 3 are the pass's own writes");
        assert!(!mem.hold_event("a", "4"), "the pass ended");
        mem.begin_pass("a");
        assert!(mem.hold_event("a", "3"));
        assert!(mem.hold_event("a", "5"));
        assert!(mem.end_pass("a"), "5 is another writer's");
    }

    /// An object found holding the desired object is remembered for that version and that
    /// desired hash only.
    #[tokio::test]
    async fn an_object_verified_is_remembered_for_its_version_and_desired_hash_only() {
        let mem = memory();
        mem.verified_desired("u", "3", "h1");
        assert!(mem.holds_desired("u", "3", "h1"));
        assert!(!mem.holds_desired("u", "4", "h1"));
        assert!(!mem.holds_desired("u", "3", "h2"));
        assert!(!mem.holds_desired("v", "3", "h1"));
        mem.verified_desired("u", "4", "h1");
        assert!(!mem.holds_desired("u", "3", "h1"));
        assert!(mem.known_version("u", "4"));
        assert!(!mem.known_version("u", "3"));
        mem.created("r", "9");
        assert!(mem.known_version("r", "9"));
    }

    /// Events of objects a control plane owns, while its pass runs, are held; at its end only a
    /// version the pass neither wrote nor verified asks for another pass.
    #[tokio::test]
    async fn owned_events_held_during_a_pass_ask_for_another_only_for_versions_it_did_not_write() {
        let mem = memory();
        assert!(
            !mem.hold_owned_event("a", "s1", "1", None),
            "no pass running"
        );
        mem.begin_pass("a");
        assert!(mem.hold_owned_event("a", "s1", "2", None));
        assert!(mem.hold_owned_event("a", "d1", "3", None));
        mem.verified_desired("s1", "2", "h");
        mem.created("d1", "3");
        assert!(!mem.end_pass("a"), "both are the pass's own writes");
        mem.begin_pass("a");
        assert!(mem.hold_owned_event("a", "d1", "4", None));
        assert!(
            mem.end_pass("a"),
            "4 is another writer's (the Deployment's status)"
        );
    }

    /// The version a pass's own writes left is recognised for its control plane only, and
    /// only the last one; it is forgotten on request (a pass handed an older version waits for
    /// its event) and with the control plane.
    #[tokio::test]
    async fn the_version_a_pass_left_is_recognised_until_forgotten() {
        let mem = memory();
        mem.own_result("a", "5");
        assert!(mem.is_own_result("a", "5"));
        assert!(!mem.is_own_result("a", "6"));
        assert!(!mem.is_own_result("b", "5"));
        mem.own_result("a", "7");
        assert!(!mem.is_own_result("a", "5"));
        assert!(mem.is_own_result("a", "7"));
        mem.forget_own_result("a");
        assert!(!mem.is_own_result("a", "7"));
        mem.own_result("a", "8");
        mem.forget("a");
        assert!(!mem.is_own_result("a", "8"));
    }
}
