//! The repository's copies of the users' manifests (`tests/samples`, which the suites apply)
//! stay byte for byte what `shared/samples` holds, and every shared sample has its copy.
//! Where the shared folder is not beside the clone (CI's clean clone may lack it) there is
//! nothing to compare, and the test says so.
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::PathBuf;

#[test]
fn the_samples_the_suites_apply_are_the_shared_samples_byte_for_byte() {
    let ours = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/samples");
    let shared = kamaji_testenv::workspace_root().join("../shared/samples");
    if !shared.is_dir() {
        eprintln!(
            "no {} beside the clone: nothing to compare",
            shared.display()
        );
        return;
    }
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
