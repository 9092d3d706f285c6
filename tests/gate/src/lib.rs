//! kamaji-test-gate: called from the build scripts of the crates holding real-program test
//! suites (tests that start etcd, kube-apiserver, … built by `make tools`, some also needing
//! root for the machines).
//!
//! It sets `cfg(real_programs)` when the programs are there (kamaji-testenv's lookup:
//! `$KAMAJI_TOOLS_BIN`, else the directory recorded in `<workspace>/target/tools-bin`) and
//! `KAMAJI_SKIP_REAL_PROGRAMS` is not `1`, and `cfg(real_programs_as_root)` when, in addition,
//! the build runs as root. `KAMAJI_ASSUME_REAL_PROGRAMS=1` sets `cfg(real_programs)` without
//! looking: `make test` compiles the suites while `make tools` builds the programs, so that
//! they compile once, not once without the programs and again with them. A suite starts with
//! `#![cfg(real_programs)]` (or
//! `#![cfg(real_programs_as_root)]`) and compiles to nothing otherwise; for each such suite a
//! `cargo:warning` line names it and the reason, so a bare `cargo test` says what it skipped.

use std::path::{Path, PathBuf};

/// What a suite needs besides the Rust toolchain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// The programs `make tools` builds.
    Programs,
    /// The programs and root (the machines' network and mount namespaces).
    ProgramsAndRoot,
}

/// Declares the cfgs, decides them, and warns about each of `suites` (`(name, needs)`) that
/// will compile to nothing.
pub fn gate(suites: &[(&str, Needs)]) {
    println!("cargo::rustc-check-cfg=cfg(real_programs)");
    println!("cargo::rustc-check-cfg=cfg(real_programs_as_root)");
    println!("cargo::rerun-if-env-changed=KAMAJI_SKIP_REAL_PROGRAMS");
    println!("cargo::rerun-if-env-changed=KAMAJI_TOOLS_BIN");
    println!("cargo::rerun-if-env-changed=KAMAJI_ASSUME_REAL_PROGRAMS");

    let skip = std::env::var("KAMAJI_SKIP_REAL_PROGRAMS").is_ok_and(|v| v == "1");
    let assume = std::env::var("KAMAJI_ASSUME_REAL_PROGRAMS").is_ok_and(|v| v == "1");
    let programs = if skip {
        Err("KAMAJI_SKIP_REAL_PROGRAMS=1 (`make check`); `make test` runs it".to_owned())
    } else if assume {
        // No rerun on the record file: the answer does not depend on it, and a rerun would
        // recompile every crate that uses the cfgs once the tools show up.
        Ok(())
    } else {
        let record = workspace_root().join("target/tools-bin");
        // A missing file reruns this script on every build, so the tools showing up is noticed.
        println!("cargo::rerun-if-changed={}", record.display());
        tools_present(&record)
    };
    let root = is_root();
    if programs.is_ok() {
        println!("cargo::rustc-cfg=real_programs");
        if root {
            println!("cargo::rustc-cfg=real_programs_as_root");
        }
    }
    for (suite, needs) in suites {
        let reason = match (&programs, needs) {
            (Err(why), _) => why.clone(),
            (Ok(()), Needs::ProgramsAndRoot) if !root => {
                "it needs root (the machines' network and mount namespaces)".to_owned()
            }
            (Ok(()), _) => continue,
        };
        println!("cargo::warning=skipped test suite {suite}: {reason}");
    }
}

fn tools_present(record: &Path) -> Result<(), String> {
    let bin = match std::env::var_os("KAMAJI_TOOLS_BIN") {
        Some(dir) => PathBuf::from(dir),
        None => match std::fs::read_to_string(record) {
            Ok(text) => PathBuf::from(text.trim()),
            Err(_) => {
                return Err(format!(
                    "the real programs are not built ({} is missing): run `make tools`",
                    record.display()
                ));
            }
        },
    };
    if bin.join("kube-apiserver").exists() {
        Ok(())
    } else {
        Err(format!(
            "{} holds no kube-apiserver: run `make tools`",
            bin.display()
        ))
    }
}

/// The workspace root: the nearest ancestor of the calling package holding `Cargo.lock`.
fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    manifest
        .ancestors()
        .find(|d| d.join("Cargo.lock").exists())
        .map_or(manifest.clone(), Path::to_path_buf)
}

/// Whether this process runs with effective user id 0.
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}
