//! Compiles the real-program suites only where they can run (see kamaji-test-gate).

use kamaji_test_gate::{Needs, gate};

fn main() {
    gate(&[
        ("kamaji-e2e/admission", Needs::Programs),
        ("kamaji-e2e/apply_writes", Needs::Programs),
        ("kamaji-e2e/join", Needs::Programs),
        ("kamaji-e2e/e2e_main", Needs::ProgramsAndRoot),
        ("kamaji-e2e/cases", Needs::ProgramsAndRoot),
        ("kamaji-e2e/fields", Needs::ProgramsAndRoot),
        ("kamaji-e2e/lifecycle", Needs::ProgramsAndRoot),
        ("kamaji-e2e/robustness", Needs::ProgramsAndRoot),
        ("kamaji-e2e/field_reports", Needs::ProgramsAndRoot),
        ("kamaji-e2e/workers", Needs::ProgramsAndRoot),
        ("kamaji-e2e/konnectivity", Needs::ProgramsAndRoot),
        ("kamaji-e2e/clusterctl", Needs::ProgramsAndRoot),
        ("kamaji-e2e/datastores", Needs::ProgramsAndRoot),
        ("kamaji-e2e/rotation", Needs::ProgramsAndRoot),
        ("kamaji-e2e/ca_rotation", Needs::ProgramsAndRoot),
        ("kamaji-e2e/upgrades", Needs::ProgramsAndRoot),
    ]);
}
