//! Compiles the real-program suites only where they can run (see kamaji-test-gate).

use kamaji_test_gate::{Needs, gate};

fn main() {
    gate(&[
        ("kamaji-testenv/local_cluster", Needs::Programs),
        ("kamaji-testenv/cert_manager", Needs::Programs),
        ("kamaji-testenv/sql_servers", Needs::Programs),
    ]);
}
