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

/// Two builds on one machine share the cache: a second build of a group waits for the lock
/// the first holds (`<cache>/<group>.lock`, flock) and then reuses what the first built
/// instead of removing it. Played with the `pause` group (no Go, no compiler run): the test
/// holds its lock as a first build would, finishes that "build" while the script waits, and
/// releases the lock.
#[test]
fn a_second_build_of_a_group_waits_for_the_first_and_reuses_its_output() {
    let tmp = tempfile::tempdir().unwrap();
    // A copy of the script in a repository layout of its own, so that the bin directory it
    // records goes to this folder's target/tools-bin, not the workspace's.
    let tools = tmp.path().join("tests/tools");
    std::fs::create_dir_all(tools.join("pause")).unwrap();
    std::fs::copy(build_script(), tools.join("build.sh")).unwrap();
    let pause_c = build_script().with_file_name("pause/pause.c");
    std::fs::copy(&pause_c, tools.join("pause/pause.c")).unwrap();
    let cache = tmp.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();

    let lock = std::fs::File::create(cache.join("pause.lock")).unwrap();
    lock.lock().unwrap();
    let stderr_path = tmp.path().join("stderr");
    let mut second = Command::new("/bin/bash")
        .arg(tools.join("build.sh"))
        .args(["--only", "pause"])
        .env("KAMAJI_TOOLS_CACHE", &cache)
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !std::fs::read_to_string(&stderr_path)
        .unwrap()
        .contains("waiting for another build of pause")
    {
        assert!(
            second.try_wait().unwrap().is_none(),
            "the second build did not wait: {}",
            std::fs::read_to_string(&stderr_path).unwrap()
        );
        assert!(std::time::Instant::now() < deadline, "no waiting line");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(second.try_wait().unwrap().is_none(), "it stopped waiting");

    // The first build ends: its folder, keyed by pause.c, complete.
    let hash = Command::new("sha256sum").arg(&pause_c).output().unwrap();
    let hash = String::from_utf8(hash.stdout).unwrap()[..12].to_owned();
    let dir = cache.join(format!("pause-{hash}"));
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::write(dir.join("bin/pause"), "built by the first build\n").unwrap();
    std::fs::write(dir.join(".complete"), "").unwrap();
    lock.unlock().unwrap();

    let out = second.wait_with_output().unwrap();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    assert!(out.status.success(), "stderr: {stderr}");
    assert!(!stderr.contains("building pause"), "stderr: {stderr}");
    let bin = String::from_utf8(out.stdout).unwrap();
    let recorded = std::fs::read_to_string(tmp.path().join("target/tools-bin")).unwrap();
    assert_eq!(bin.trim(), recorded.trim());
    assert_eq!(
        std::fs::read_to_string(std::path::Path::new(bin.trim()).join("pause")).unwrap(),
        "built by the first build\n"
    );
}
