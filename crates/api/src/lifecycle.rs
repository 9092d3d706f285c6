//! The lifecycle operations of a control plane and what happens when one is requested while
//! another runs: the second runs alongside, waits for the first (a condition says for what),
//! or is refused at admission (naming what runs). [`decide`] is the one table; the admission
//! rules of the refused pairs are generated from it ([`crate::validation`]), the controller's
//! waits follow it, and `docs/lifecycle.md` shows it ([`matrix_markdown`], checked by a test).
//!
//! Who can refuse what follows from how an operation is asked for: a change of the
//! KamajiControlPlane's spec can be refused at admission (CEL sees the spec and the status);
//! a rotation is asked for with an annotation, which CRD validation rules cannot see, and a
//! DataStore CA rotation is the DataStore owner's change of another object: those can only
//! wait.

use std::fmt::Write as _;

/// A lifecycle operation of one control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// The rotation of the cluster and front-proxy CAs
    /// ([`crate::meta::CA_ROTATION_ANNOTATION`]).
    CaRotation,
    /// The rotation of the service-account signing key
    /// ([`crate::meta::SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION`]).
    ServiceAccountKeyRotation,
    /// The rotation of the key the tenant's objects are encrypted with at rest
    /// ([`crate::meta::ENCRYPTION_KEY_ROTATION_ANNOTATION`]).
    EncryptionKeyRotation,
    /// A change of `spec.encryptionAtRest.resources`.
    EncryptionResourcesChange,
    /// The DataStore's owner rotating its CA (`DataStore.spec.tlsConfig.certificateAuthority`).
    DataStoreCaRotation,
    /// `spec.version` to the minor version after `status.version`'s (the last version every
    /// replica ran).
    MinorUpgrade,
    /// `spec.version` to another patch release of `status.version`'s minor version.
    PatchUpgrade,
    /// A change of `spec.replicas`.
    Scaling,
    /// `spec.addons.konnectivity` added or removed.
    KonnectivityChange,
    /// Moving the tenant to another DataStore (`spec.dataStoreName`): not available yet.
    DataStoreMigration,
}

impl Operation {
    /// Every operation, in the order of the matrix.
    pub const ALL: [Self; 10] = [
        Self::CaRotation,
        Self::ServiceAccountKeyRotation,
        Self::EncryptionKeyRotation,
        Self::EncryptionResourcesChange,
        Self::DataStoreCaRotation,
        Self::MinorUpgrade,
        Self::PatchUpgrade,
        Self::Scaling,
        Self::KonnectivityChange,
        Self::DataStoreMigration,
    ];

    /// The operation in a few words, as conditions and the docs name it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::CaRotation => "CA rotation",
            Self::ServiceAccountKeyRotation => "service-account key rotation",
            Self::EncryptionKeyRotation => "encryption-key rotation",
            Self::EncryptionResourcesChange => "change of the encrypted resources",
            Self::DataStoreCaRotation => "DataStore CA rotation",
            Self::MinorUpgrade => "minor upgrade",
            Self::PatchUpgrade => "patch upgrade",
            Self::Scaling => "scaling",
            Self::KonnectivityChange => "konnectivity on/off",
            Self::DataStoreMigration => "DataStore migration",
        }
    }

    /// How a user asks for it.
    #[must_use]
    pub fn requested_by(self) -> &'static str {
        match self {
            Self::CaRotation => {
                "annotation `controlplane.cluster.x-k8s.io/rotate-certificate-authorities`"
            }
            Self::ServiceAccountKeyRotation => {
                "annotation `controlplane.cluster.x-k8s.io/rotate-service-account-key`"
            }
            Self::EncryptionKeyRotation => {
                "annotation `controlplane.cluster.x-k8s.io/rotate-encryption-key`"
            }
            Self::EncryptionResourcesChange => "`spec.encryptionAtRest.resources`",
            Self::DataStoreCaRotation => "the DataStore's `spec.tlsConfig.certificateAuthority`",
            Self::MinorUpgrade => "`spec.version`, the minor after `status.version`'s",
            Self::PatchUpgrade => "`spec.version`, another patch of `status.version`'s minor",
            Self::Scaling => "`spec.replicas`",
            Self::KonnectivityChange => "`spec.addons.konnectivity`",
            Self::DataStoreMigration => "`spec.dataStoreName`",
        }
    }

    /// What shows it running.
    #[must_use]
    pub fn shown_by(self) -> &'static str {
        match self {
            Self::CaRotation => "`CertificateAuthoritiesRotated=False`",
            Self::ServiceAccountKeyRotation => "`ServiceAccountKeyRotated=False`",
            Self::EncryptionKeyRotation => "`EncryptionKeyRotated=False`",
            Self::EncryptionResourcesChange => "`EncryptionAtRestConfigured=False`",
            Self::DataStoreCaRotation | Self::Scaling | Self::KonnectivityChange => {
                "`RollingOut=True` / `ScalingUp`, `ScalingDown`"
            }
            Self::MinorUpgrade | Self::PatchUpgrade => "`spec.version` ≠ `status.version`",
            Self::DataStoreMigration => "—",
        }
    }
}

/// What happens to an operation requested while another runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Both run; their pod rolls combine (each rotation phase moves on only once every
    /// control-plane pod carries its own fingerprint).
    Together,
    /// The requested one does not start (or does not pass the phase named in the reason)
    /// until the running one is done; its condition says what it waits for.
    Waits,
    /// Refused at admission while the running one is shown in the status, naming it.
    Refused,
    /// The requested operation does not exist yet: refused at admission whatever runs
    /// (`spec.dataStoreName` is immutable once set). As the running one: never runs.
    Unavailable,
}

impl Decision {
    /// The word the matrix uses.
    #[must_use]
    pub fn word(self) -> &'static str {
        match self {
            Self::Together => "together",
            Self::Waits => "**waits**",
            Self::Refused => "**refused**",
            Self::Unavailable => "n/a",
        }
    }
}

/// The reason of every pair that runs together without a reason of its own.
pub const TOGETHER: &str = "they touch different material; the pod rolls combine";

/// The decision for `requested` while `running` runs, with its reason in one sentence.
#[must_use]
pub fn decide(running: Operation, requested: Operation) -> (Decision, &'static str) {
    use Decision::{Refused, Together, Unavailable, Waits};
    use Operation::{
        CaRotation, DataStoreCaRotation, DataStoreMigration, EncryptionKeyRotation,
        EncryptionResourcesChange, MinorUpgrade, PatchUpgrade, ServiceAccountKeyRotation,
    };
    match (running, requested) {
        (DataStoreMigration, _) | (_, DataStoreMigration) => (
            Unavailable,
            "DataStore migration does not exist yet: `spec.dataStoreName` is immutable once set",
        ),
        (CaRotation, CaRotation)
        | (ServiceAccountKeyRotation, ServiceAccountKeyRotation)
        | (EncryptionKeyRotation, EncryptionKeyRotation) => (
            Waits,
            "a new annotation value starts a new rotation once the running one is done, with \
             key material made after it was asked for; the running one's condition names the \
             waiting request",
        ),
        (EncryptionResourcesChange, EncryptionResourcesChange) => (
            Waits,
            "the change under way finishes its phase first (a resource it was adding and no \
             longer asked for is written as plain text again); what remains of the new list \
             is a change after it",
        ),
        (EncryptionKeyRotation, EncryptionResourcesChange)
        | (EncryptionResourcesChange, EncryptionKeyRotation) => (
            Waits,
            "both rewrite the encryption configuration and every encrypted object: one after \
             the other (`WaitingForEncryptionChange`)",
        ),
        (CaRotation, MinorUpgrade) => (
            Refused,
            "the rotation replaces every worker, and Cluster API creates the replacements at \
             their MachineDeployment's minor, which kubeadm cannot join to a control plane of \
             the next minor (MachineSet preflight check `KubeadmVersionSkew`): upgrade once \
             the rotation is done",
        ),
        (MinorUpgrade, MinorUpgrade) => (
            Refused,
            "`spec.version` is at most one minor above `status.version`, the last version \
             fully rolled out",
        ),
        (MinorUpgrade, CaRotation) => (
            Waits,
            "the rotation starts once the control plane runs `spec.version` everywhere \
             (`WaitingForUpgrade`): Cluster API creates no worker Machine while the control \
             plane upgrades (`ControlPlaneIsStable`), and the rotation replaces the workers; \
             workers still on the previous minor then hold it in `ReplacingWorkers`, which \
             names the MachineSets Cluster API holds back and why",
        ),
        (PatchUpgrade, CaRotation) => (
            Waits,
            "the rotation starts once every replica runs the new patch release \
             (`WaitingForUpgrade`): Cluster API creates no worker Machine while the control \
             plane upgrades (`ControlPlaneIsStable`), and a rotation started after the roll \
             has none of its phases in a roll that may still be backed out",
        ),
        (CaRotation, PatchUpgrade) => (
            Together,
            "a patch release keeps the minor, so the replacement workers still join; \
             `ReplacingWorkers` waits while the control plane rolls (Cluster API's \
             `ControlPlaneIsStable`), and its condition quotes Cluster API saying so",
        ),
        (DataStoreCaRotation, DataStoreCaRotation) => (
            Together,
            "each tenant follows the DataStore as it is (a client certificate from the CA the \
             key belongs to, `--etcd-cafile` the bundle), so a second change rolls the tenants \
             onto the newest; the DataStore's owner drops a CA from the etcd's trust only once \
             every tenant shows `RollingOut=False`",
        ),
        _ => (Together, TOGETHER),
    }
}

/// The matrix as a Markdown table: a row per running operation, a column per requested one.
#[must_use]
pub fn matrix_markdown() -> String {
    let mut out = String::from("| running ↓ / requested → |");
    for requested in Operation::ALL {
        let _ = write!(out, " {} |", requested.name());
    }
    out.push_str("\n|---|");
    for _ in Operation::ALL {
        out.push_str("---|");
    }
    out.push('\n');
    for running in Operation::ALL {
        let _ = write!(out, "| **{}** |", running.name());
        for requested in Operation::ALL {
            let _ = write!(out, " {} |", decide(running, requested).0.word());
        }
        out.push('\n');
    }
    out
}

/// How each operation is asked for and what shows it running, as a Markdown table.
#[must_use]
pub fn operations_markdown() -> String {
    let mut out = String::from("| operation | asked for with | running while |\n|---|---|---|\n");
    for op in Operation::ALL {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            op.name(),
            op.requested_by(),
            op.shown_by()
        );
    }
    out
}

/// The pairs with a reason of their own (every one that is not together, and those together for
/// a reason other than [`TOGETHER`]), as a Markdown list (the notes under the matrix).
#[must_use]
pub fn notes_markdown() -> String {
    let mut out = String::new();
    for running in Operation::ALL {
        for requested in Operation::ALL {
            let (decision, why) = decide(running, requested);
            if decision == Decision::Unavailable || why == TOGETHER {
                continue;
            }
            let _ = writeln!(
                out,
                "- {} while the {} runs: {} — {why}.",
                capitalized(requested.name()),
                running.name(),
                decision.word(),
            );
        }
    }
    out
}

fn capitalized(s: &str) -> String {
    let mut chars = s.chars();
    chars.next().map_or_else(String::new, |c| {
        c.to_uppercase().collect::<String>() + chars.as_str()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_has_a_decision_and_a_reason() {
        for running in Operation::ALL {
            for requested in Operation::ALL {
                let (_, why) = decide(running, requested);
                assert!(!why.is_empty(), "{running:?} / {requested:?}");
            }
        }
        let table = matrix_markdown();
        assert_eq!(table.lines().count(), 2 + Operation::ALL.len());
        assert!(table.contains("| **CA rotation** | **waits** |"));
    }

    #[test]
    fn only_spec_changes_are_refused() {
        for running in Operation::ALL {
            for requested in Operation::ALL {
                if decide(running, requested).0 == Decision::Refused {
                    assert!(
                        requested.requested_by().starts_with("`spec."),
                        "{requested:?} cannot be refused at admission: {}",
                        requested.requested_by()
                    );
                }
            }
        }
    }
}
