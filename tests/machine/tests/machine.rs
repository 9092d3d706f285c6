//! A machine on its own: containerd answers, the images are imported under the names
//! kubeadm uses, a container runs under the seccomp-enabled runc, and nothing is left behind.
#![cfg(real_programs_as_root)]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::os::unix::fs::MetadataExt;

use anyhow::Result;
use kamaji_machine::ImageStore;
use kamaji_machine::images::{COREDNS_IMAGE, NETCHECK_IMAGE, kube_proxy_image, worker_images};
use kamaji_machine::machine::{INOTIFY_MAX_USER_INSTANCES, INOTIFY_MAX_USER_WATCHES, PAUSE_IMAGE};
use kamaji_machine::{Machine, MachineSpec, run_in_private_network};
use kamaji_testenv::{KUBERNETES_VERSION, Tools};

#[test]
fn a_machine_runs_containers_from_imported_images_and_leaves_nothing_behind() -> Result<()> {
    let host_net = std::fs::metadata("/proc/self/ns/net")?.ino();
    let host_routes = std::process::Command::new("ip")
        .args(["route"])
        .output()?
        .stdout;
    run_in_private_network(move || async move {
        let tools = Tools::locate()?;
        let store = ImageStore::prepare(&tools, &worker_images(&tools)?).await?;
        let machine = Machine::start(
            &tools,
            MachineSpec {
                name: "m-smoke".into(),
                index: 1,
                images: store,
                kubelet_version: None,
            },
        )
        .await?;
        // The shared kernel's inotify limits allow many machines (module docs, `machine`).
        for (name, wanted) in [
            ("max_user_instances", INOTIFY_MAX_USER_INSTANCES),
            ("max_user_watches", INOTIFY_MAX_USER_WATCHES),
        ] {
            let set: u64 = std::fs::read_to_string(format!("/proc/sys/fs/inotify/{name}"))?
                .trim()
                .parse()?;
            assert!(set >= wanted, "fs.inotify.{name} is {set}, below {wanted}");
        }
        let listed = machine
            .exec(&["ctr", "-n", "k8s.io", "images", "ls", "-q"])
            .await?;
        for name in [
            PAUSE_IMAGE,
            COREDNS_IMAGE,
            NETCHECK_IMAGE,
            &kube_proxy_image(KUBERNETES_VERSION),
        ] {
            assert!(listed.lines().any(|l| l == name), "{name} not in {listed}");
        }
        // A container under the seccomp-enabled runc, in the machine's network: netcheck
        // reaches the underlay gateway, where nothing listens on port 1.
        let out = machine
            .exec(&[
                "ctr",
                "-n",
                "k8s.io",
                "run",
                "--rm",
                "--net-host",
                "--seccomp",
                NETCHECK_IMAGE,
                "smoke",
                "/netcheck",
                "-get",
                "http://10.200.0.1:1/",
            ])
            .await;
        let text = format!("{out:?}");
        assert!(
            text.contains("connection refused"),
            "netcheck did not run: {text}"
        );
        assert_eq!(machine.exec(&["hostname"]).await?.trim(), "m-smoke");
        let hosts = String::from_utf8(machine.read_file("/etc/hosts")?)?;
        assert!(hosts.contains("10.200.0.11 m-smoke"), "{hosts}");
        let cgroup_root = format!("kamaji-machine-{}-m-smoke", std::process::id());
        assert!(
            std::path::Path::new("/sys/fs/cgroup/memory")
                .join(&cgroup_root)
                .is_dir(),
            "the machine has no cgroup root {cgroup_root}"
        );
        drop(machine);
        for h in std::fs::read_dir("/sys/fs/cgroup")? {
            let h = h?.path();
            assert!(
                !h.join(&cgroup_root).exists(),
                "cgroup left in {}",
                h.display()
            );
        }
        assert!(!std::path::Path::new("/etc/kubernetes").exists());
        Ok(())
    })?;
    assert_eq!(std::fs::metadata("/proc/self/ns/net")?.ino(), host_net);
    let after = std::process::Command::new("ip")
        .args(["route"])
        .output()?
        .stdout;
    assert_eq!(host_routes, after, "the host's routes changed");
    Ok(())
}
