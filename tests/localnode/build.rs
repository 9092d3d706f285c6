//! Compiles the real-program suites only where they can run (see kamaji-test-gate).

use kamaji_test_gate::{Needs, gate};

fn main() {
    gate(&[
        (
            "kamaji-localnode/apiserver_behind_lb",
            Needs::ProgramsAndRoot,
        ),
        ("kamaji-localnode/cleanup", Needs::ProgramsAndRoot),
        ("kamaji-localnode/pod_lifecycle", Needs::ProgramsAndRoot),
    ]);
}
