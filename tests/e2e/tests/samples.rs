//! The repository's copies of the users' manifests (`tests/samples`, which the suites apply)
//! stay byte for byte what `shared/samples` holds, and every shared sample has its copy.
//!
//! The shared folder is `$KAMAJI_SHARED` when that is set (the test fails when it holds no
//! `samples` directory), else `../shared` beside the clone. Where neither is there (a clean
//! clone elsewhere, as CI's may be) there is nothing to compare: the test passes and writes
//! `SKIPPED: …` to stderr, past the test harness's capture, naming the path it looked for.
#![allow(clippy::unwrap_used, missing_docs)]

use std::io::Write as _;
use std::path::PathBuf;

#[test]
fn the_samples_the_suites_apply_are_the_shared_samples_byte_for_byte() {
    let ours = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/samples");
    let from_env = std::env::var_os("KAMAJI_SHARED").filter(|d| !d.is_empty());
    let shared = if let Some(dir) = from_env {
        let shared = PathBuf::from(dir).join("samples");
        assert!(
            shared.is_dir(),
            "KAMAJI_SHARED is set, but {} is not a directory",
            shared.display()
        );
        shared
    } else {
        let shared = kamaji_testenv::workspace_root().join("../shared/samples");
        if !shared.is_dir() {
            // To stderr itself: the test harness captures eprintln! of a passing test.
            writeln!(
                std::io::stderr(),
                "SKIPPED: no {} beside the clone; set KAMAJI_SHARED=<dir> to compare",
                shared.display()
            )
            .unwrap();
            return;
        }
        shared
    };
    for entry in std::fs::read_dir(&shared).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let name = path.file_name().unwrap();
        let copy = std::fs::read(ours.join(name))
            .unwrap_or_else(|e| panic!("no copy of {} in tests/samples: {e}", path.display()));
        assert!(
            copy == std::fs::read(&path).unwrap(),
            "tests/samples/{} differs from {}",
            name.to_string_lossy(),
            path.display()
        );
    }
}
