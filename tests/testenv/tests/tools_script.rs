//! `make tools` fails with one line naming the cause.

use std::process::Command;

fn build_script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/build.sh")
}

#[test]
fn without_a_go_toolchain_it_says_so_in_one_line() {
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new("/bin/bash")
        .arg(build_script())
        .env("PATH", format!("{}:/usr/bin:/bin", empty.path().display()))
        .env("KAMAJI_TOOLS_CACHE", empty.path().join("cache"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "stderr: {stderr}");
    assert!(stderr.contains("no Go toolchain"), "stderr: {stderr}");
}

#[test]
fn a_module_that_cannot_be_downloaded_is_named_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new("/bin/bash")
        .arg(build_script())
        .env("KAMAJI_TOOLS_CACHE", tmp.path().join("cache"))
        .env("GOMODCACHE", tmp.path().join("modcache"))
        .env("GOPROXY", "off")
        .env("GOFLAGS", "-mod=mod")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr
        .trim()
        .lines()
        .filter(|l| l.starts_with("make tools:"))
        .collect();
    assert_eq!(lines.len(), 1, "stderr: {stderr}");
    assert!(lines[0].contains("go.etcd.io/etcd"), "stderr: {stderr}");
    // One line of cause, plus at most the progress line that names the log.
    assert!(stderr.trim().lines().count() <= 2, "stderr: {stderr}");
}
