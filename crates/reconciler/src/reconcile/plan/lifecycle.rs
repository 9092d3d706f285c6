//! The lifecycle gates the plan applies ([`kamaji_api::lifecycle::decide`] is the table): what
//! the plan reads to know an operation runs, for the operations that wait for it. The other
//! waits live in the state machines that run both ([`super::ca_rotation`],
//! [`super::sa_rotation`], [`super::encryption_rotation`]), and the refusals in the CRD's
//! admission rules ([`kamaji_api::validation::lifecycle_refusal_rule`]).

use crate::reconcile::observe::Observed;
use crate::reconcile::validate::ValidSpec;

/// The upgrade the control plane is in, as Cluster API tells it (`spec.version` is not
/// `status.version`, the last version every replica ran), unless the Deployment already runs
/// `spec.version` in every replica (this pass then records it in `status.version`):
/// `"<status.version> → <spec.version>"`. `None` when it is in none.
#[must_use]
pub fn upgrade_in_progress(spec: &ValidSpec, observed: &Observed) -> Option<String> {
    let to = &spec.version_tag;
    if observed.status_version.as_ref() == Some(to) {
        return None;
    }
    let runs_it = observed.deployment.as_ref().is_some_and(|d| {
        crate::reconcile::observe::rolled_out(d)
            && d.spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|p| {
                    p.containers
                        .iter()
                        .find(|c| c.name == kamaji_api::kcp::Component::ApiServer.name())
                })
                .and_then(|c| c.image.as_deref())
                .is_some_and(|image| image.rsplit_once(':').map(|(_, tag)| tag) == Some(to))
    });
    (!runs_it).then(|| {
        format!(
            "{} → {to}",
            observed.status_version.as_deref().unwrap_or("(none yet)")
        )
    })
}

#[cfg(test)]
mod tests {
    //! Issue 48: every pair of lifecycle operations, one running and one requested, through
    //! the plan (pure): what [`kamaji_api::lifecycle::decide`] says is what the plan does —
    //! the requested one proceeds beside the running one, or waits for it (nothing of it is
    //! made, a condition names what it waits for), or the CRD refuses it at admission.
    use std::collections::BTreeMap;

    use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
    use k8s_openapi::api::core::v1::Secret;
    use kamaji_api::conditions::{reasons, types};
    use kamaji_api::lifecycle::{Decision, Operation, decide};
    use kube::ResourceExt as _;

    use super::super::tests::{datastore, observed, owner, settings, stored_service, three_roots};
    use super::super::{Plan, plan};
    use crate::datastore::Resolved;
    use crate::reconcile::observe::{ControlPlanePods, Observed};
    use crate::reconcile::validate::ValidSpec;
    use crate::reconcile::validate::tests::{fixture, merge, valid};

    /// The version the worlds run, one minor below the newest so that a minor upgrade can be
    /// asked for.
    const VERSION: &str = "v1.35.4";

    /// A control plane: its spec (F0 with `patch` and the rotation requests), its stored
    /// Secrets, its Deployment and `status.version`.
    struct World {
        patch: serde_json::Value,
        requests: [Option<&'static str>; 3],
        stored: BTreeMap<String, Secret>,
        deployment: Option<Deployment>,
        status_version: Option<String>,
        ds: Resolved,
    }

    impl World {
        /// F0 at [`VERSION`] with every Secret stored and its Deployment rolled out.
        fn settled() -> Self {
            let mut w = Self {
                patch: serde_json::json!({"version": VERSION}),
                requests: [None; 3],
                stored: BTreeMap::new(),
                deployment: None,
                status_version: None,
                ds: datastore(),
            };
            w.pass();
            w.pass();
            let mut d = w.pass().control_plane.unwrap().deployment;
            d.metadata.generation = Some(1);
            let replicas = d.spec.as_ref().and_then(|s| s.replicas);
            d.status = Some(DeploymentStatus {
                observed_generation: Some(1),
                replicas,
                updated_replicas: replicas,
                ready_replicas: replicas,
                available_replicas: replicas,
                ..DeploymentStatus::default()
            });
            w.deployment = Some(d);
            w.status_version = Some(VERSION.into());
            w
        }

        fn spec(&self) -> ValidSpec {
            let mut spec = valid(&fixture(self.patch.clone()));
            spec.ca_rotation = self.requests[0].map(Into::into);
            spec.service_account_key_rotation = self.requests[1].map(Into::into);
            spec.encryption_key_rotation = self.requests[2].map(Into::into);
            spec
        }

        fn observed(&self, spec: &ValidSpec) -> Observed {
            let mut o = observed(self.stored.clone(), Some(stored_service(spec)));
            o.deployment.clone_from(&self.deployment);
            o.status_version.clone_from(&self.status_version);
            // Every rotation's pods are listed, none on its phase yet: nothing settles.
            o.control_plane_pods = Some(ControlPlanePods {
                service_account: vec![None],
                certificate_authorities: vec![None],
                encryption: vec![None],
                rolled_out: false,
            });
            o
        }

        /// One pass; every Secret it writes is stored.
        fn pass(&mut self) -> Plan {
            let spec = self.spec();
            let p = plan(&spec, &self.observed(&spec), &self.ds, owner(), &settings())
                .unwrap()
                .unwrap();
            let mut writes: Vec<Secret> = three_roots(&p.roots)
                .into_iter()
                .chain(std::iter::once(&p.roots.encryption))
                .map(|r| r.secret().clone())
                .collect();
            writes.push(p.datastore_client.clone());
            writes.extend(p.service_account.writes.iter().cloned());
            writes.extend(p.certificate_authorities.writes.iter().cloned());
            writes.extend(p.encryption_keys.write.iter().cloned());
            if let Ok(cp) = &p.control_plane {
                writes.extend(cp.leaves.iter().map(|l| l.secret.clone()));
            }
            for mut s in writes {
                s.metadata.owner_references = Some(vec![owner()]);
                self.stored.insert(s.name_any(), s);
            }
            p
        }

        /// The Deployment as the Deployment controller leaves it mid-roll.
        fn rolling(&mut self) {
            if let Some(d) = self.deployment.as_mut() {
                d.metadata.generation = Some(2);
            }
        }

        /// The Deployment's pod template at version `tag`.
        fn template_at(&mut self, tag: &str) {
            let d = self.deployment.as_mut().unwrap();
            let pod = d.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
            for c in &mut pod.containers {
                if let Some((image, _)) = c.image.as_deref().and_then(|i| i.rsplit_once(':')) {
                    c.image = Some(format!("{image}:{tag}"));
                }
            }
        }

        fn merge(&mut self, patch: serde_json::Value) {
            merge(&mut self.patch, patch);
        }

        /// Puts `op` in progress, as the plan and the status show it.
        fn run(&mut self, op: Operation) {
            match op {
                Operation::CaRotation => self.requests[0] = Some("first"),
                Operation::ServiceAccountKeyRotation => self.requests[1] = Some("first"),
                Operation::EncryptionKeyRotation => self.requests[2] = Some("first"),
                Operation::EncryptionResourcesChange => {
                    self.merge(
                        serde_json::json!({"encryptionAtRest": {"resources": ["configmaps"]}}),
                    );
                }
                Operation::DataStoreCaRotation => self.ds = datastore(),
                Operation::MinorUpgrade => {
                    self.status_version = Some("v1.34.6".into());
                    self.template_at("v1.34.6");
                }
                Operation::PatchUpgrade => {
                    self.status_version = Some("v1.35.3".into());
                    self.template_at("v1.35.3");
                }
                Operation::Scaling => self.merge(serde_json::json!({"replicas": 3})),
                Operation::KonnectivityChange => {
                    self.merge(serde_json::json!({"addons": {"konnectivity": {}}}));
                }
                Operation::DataStoreMigration => unreachable!("never runs"),
            }
            self.pass();
            self.rolling();
        }
    }

    /// What became of a requested operation in one pass.
    #[derive(Debug, PartialEq, Eq)]
    enum Outcome {
        Proceeds,
        Waits(String),
        Refused,
    }

    fn condition(p: &Plan, type_: &str) -> Option<(String, String)> {
        p.certificate_authorities
            .condition
            .iter()
            .chain(p.service_account.condition.iter())
            .chain(p.encryption_keys.conditions.iter())
            .find(|c| c.type_ == type_)
            .map(|c| (c.reason.to_owned(), c.message.clone()))
    }

    /// Requests `op` of `w` and says what the pass did with it.
    fn request(w: &mut World, running: Operation, op: Operation) -> Outcome {
        if kamaji_api::validation::lifecycle_refusal_rule(running, op).is_some() {
            return Outcome::Refused;
        }
        match op {
            Operation::CaRotation => rotation(w, 0, types::CERTIFICATE_AUTHORITIES_ROTATED),
            Operation::ServiceAccountKeyRotation => {
                rotation(w, 1, types::SERVICE_ACCOUNT_KEY_ROTATED)
            }
            Operation::EncryptionKeyRotation => rotation(w, 2, types::ENCRYPTION_KEY_ROTATED),
            Operation::EncryptionResourcesChange => {
                w.merge(serde_json::json!({"encryptionAtRest": {"resources": ["configmaps", "widgets.example.com"]}}));
                let p = w.pass();
                let (reason, message) =
                    condition(&p, types::ENCRYPTION_AT_REST_CONFIGURED).unwrap_or_default();
                if reason == reasons::READING_ENCRYPTED_RESOURCES
                    && message.contains("widgets.example.com")
                    && !message.contains("waits")
                {
                    Outcome::Proceeds
                } else {
                    Outcome::Waits(format!("{reason}: {message}"))
                }
            }
            Operation::DataStoreCaRotation => {
                let before = w.stored[&w.spec().names.apiserver_etcd_client_secret()]
                    .data
                    .clone();
                w.ds = datastore();
                let p = w.pass();
                proceeds(p.datastore_client.data != before)
            }
            Operation::MinorUpgrade | Operation::PatchUpgrade => {
                let to = if op == Operation::MinorUpgrade {
                    "v1.36.3"
                } else {
                    "v1.35.5"
                };
                w.merge(serde_json::json!({"version": to}));
                proceeds(image_tags(&w.pass()).iter().all(|t| t == to))
            }
            Operation::Scaling => {
                w.merge(serde_json::json!({"replicas": 4}));
                let d = w.pass().control_plane.unwrap().deployment;
                proceeds(d.spec.and_then(|s| s.replicas) == Some(4))
            }
            Operation::KonnectivityChange => {
                let on = w.patch["addons"]["konnectivity"].is_object();
                w.merge(serde_json::json!({"addons": {"konnectivity": if on { serde_json::Value::Null } else { serde_json::json!({}) }}}));
                let has = containers(&w.pass())
                    .iter()
                    .any(|c| c == "konnectivity-server");
                proceeds(has != on)
            }
            Operation::DataStoreMigration => unreachable!("unavailable"),
        }
    }

    fn proceeds(done: bool) -> Outcome {
        if done {
            Outcome::Proceeds
        } else {
            Outcome::Waits("the change is not in the plan".into())
        }
    }

    /// A rotation requested (as `second`) in slot `slot`: it proceeds when the pass writes its
    /// state Secret for `second`; else it waits, and its condition must say for what.
    fn rotation(w: &mut World, slot: usize, type_: &str) -> Outcome {
        use kamaji_api::meta::{
            CA_ROTATION_ANNOTATION, ENCRYPTION_KEY_ROTATION_ANNOTATION,
            SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION,
        };
        w.requests[slot] = Some("second");
        let p = w.pass();
        let (key, writes): (&str, Vec<&Secret>) = match slot {
            0 => (
                CA_ROTATION_ANNOTATION,
                p.certificate_authorities.writes.iter().collect(),
            ),
            1 => (
                SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION,
                p.service_account.writes.iter().collect(),
            ),
            _ => (
                ENCRYPTION_KEY_ROTATION_ANNOTATION,
                p.encryption_keys.write.iter().collect(),
            ),
        };
        let started = writes
            .iter()
            .any(|s| s.annotations().get(key).map(String::as_str) == Some("second"));
        let (reason, message) = condition(&p, type_).unwrap_or_default();
        if started {
            Outcome::Proceeds
        } else {
            Outcome::Waits(format!("{reason}: {message}"))
        }
    }

    /// The containers of the Deployment `p` plans.
    fn pod_containers(p: &Plan) -> &[k8s_openapi::api::core::v1::Container] {
        let d = &p.control_plane.as_ref().unwrap().deployment;
        let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        &pod.containers
    }

    fn containers(p: &Plan) -> Vec<String> {
        pod_containers(p).iter().map(|c| c.name.clone()).collect()
    }

    fn image_tags(p: &Plan) -> Vec<String> {
        pod_containers(p)
            .iter()
            .filter(|c| c.name.starts_with("kube-"))
            .filter_map(|c| {
                c.image
                    .as_deref()?
                    .rsplit_once(':')
                    .map(|(_, t)| t.to_owned())
            })
            .collect()
    }

    #[test]
    fn every_pair_of_lifecycle_operations_does_what_the_matrix_says() {
        let mut wrong = Vec::new();
        let mut checked = 0;
        for running in Operation::ALL {
            for requested in Operation::ALL {
                let (decision, _) = decide(running, requested);
                if decision == Decision::Unavailable {
                    continue;
                }
                let mut w = World::settled();
                w.run(running);
                let outcome = request(&mut w, running, requested);
                let fits = match (&outcome, decision) {
                    (Outcome::Proceeds, Decision::Together)
                    | (Outcome::Refused, Decision::Refused) => true,
                    (Outcome::Waits(why), Decision::Waits) => {
                        // The condition says what it waits for (the running operation).
                        let named = ["first", "upgrade", "runs first", "under way"];
                        named.iter().any(|n| why.contains(n))
                    }
                    _ => false,
                };
                checked += 1;
                if !fits {
                    wrong.push(format!(
                        "{} requested while {} runs: expected {decision:?}, got {outcome:?}",
                        requested.name(),
                        running.name()
                    ));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "{checked} pairs checked:\n{}",
            wrong.join("\n")
        );
        assert_eq!(checked, 81, "every pair but the migration's row and column");
    }

    /// DataStore migration is not available: `spec.dataStoreName` is immutable, whatever runs.
    #[test]
    fn a_datastore_migration_is_refused_at_admission_whatever_runs() {
        for other in Operation::ALL {
            assert_eq!(
                decide(other, Operation::DataStoreMigration).0,
                Decision::Unavailable
            );
            assert_eq!(
                decide(Operation::DataStoreMigration, other).0,
                Decision::Unavailable
            );
        }
        let crd = serde_json::to_string(&kamaji_api::crd::kamaji_control_plane()).unwrap();
        assert!(crd.contains("spec.dataStoreName is immutable once set"));
    }

    /// The upgrade a new CA rotation waits for: `spec.version` not yet `status.version` and
    /// not yet rolled out in every replica.
    #[test]
    fn an_upgrade_is_in_progress_until_every_replica_runs_the_version() {
        let mut w = World::settled();
        let spec = w.spec();
        assert_eq!(super::upgrade_in_progress(&spec, &w.observed(&spec)), None);
        w.status_version = Some("v1.34.6".into());
        w.template_at("v1.34.6");
        let o = w.observed(&spec);
        assert_eq!(
            super::upgrade_in_progress(&spec, &o).as_deref(),
            Some("v1.34.6 → v1.35.4")
        );
        // The new template is in the Deployment but not rolled out yet.
        w.template_at(VERSION);
        w.rolling();
        assert!(super::upgrade_in_progress(&spec, &w.observed(&spec)).is_some());
        // Rolled out: this pass records it (status.version still says the old one).
        w.deployment.as_mut().unwrap().metadata.generation = Some(1);
        assert_eq!(super::upgrade_in_progress(&spec, &w.observed(&spec)), None);
        // A control plane never rolled out is provisioning, as Cluster API says.
        let mut fresh = World::settled();
        fresh.status_version = None;
        fresh.rolling();
        let o = fresh.observed(&spec);
        assert_eq!(
            super::upgrade_in_progress(&spec, &o).as_deref(),
            Some("(none yet) → v1.35.4")
        );
    }
}
