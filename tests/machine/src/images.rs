//! The images the machines run, built from the programs `make tools` built, under the names
//! kubeadm and the product reference (real-machines.md §2).

use std::path::Path;

use anyhow::{Context, Result};
use kamaji_testenv::{CAPI_VERSION, KUBERNETES_VERSION, Tools};

use crate::image::ImageBuilder;
use crate::machine::PAUSE_IMAGE;

/// kubeadm v1.36's `CoreDNS` image (`constants.CoreDNSVersion` under `coredns/coredns`).
pub const COREDNS_IMAGE: &str = "registry.k8s.io/coredns/coredns:v1.14.2";
/// The test client image (`netcheck`, see `tests/tools/netcheck`).
pub const NETCHECK_IMAGE: &str = "kamaji-rs.test/netcheck:v0";

/// The apiserver-network-proxy release `make tools` builds (`KONNECTIVITY_VERSION` in
/// `tests/tools/build.sh`): the default of `addons.konnectivity` for Kubernetes v1.36.
pub const KONNECTIVITY_VERSION: &str = "v0.36.0";

/// The konnectivity image of `program` (`proxy-server`, `proxy-agent`) under the name
/// upstream publishes it and `addons.konnectivity` defaults to
/// (`registry.k8s.io/kas-network-proxy/proxy-server:v0.36.0`).
#[must_use]
pub fn konnectivity_image(program: &str) -> String {
    format!("registry.k8s.io/kas-network-proxy/{program}:{KONNECTIVITY_VERSION}")
}

/// The konnectivity image of `program` as upstream's: the static program at `/<program>`,
/// the command the provider's containers run.
///
/// # Errors
/// When the program is missing.
pub fn konnectivity(tools: &Tools, program: &str) -> Result<ImageBuilder> {
    let binary = tools.path(program);
    std::fs::metadata(&binary)
        .with_context(|| format!("{} is missing (run `make tools`)", binary.display()))?;
    Ok(ImageBuilder::new(&konnectivity_image(program))?
        .file(&format!("/{program}"), binary, 0o755)
        .entrypoint([format!("/{program}")]))
}

/// The kine image the provider runs for `PostgreSQL` and `MySQL` data stores as the `kine` sidecar of
/// a tenant's control-plane pod: kine at the version `make tools` builds (`KINE_VERSION` in
/// `tests/tools/build.sh`), under the name Rancher publishes it.
pub const KINE_IMAGE: &str = "docker.io/rancher/kine:v0.17.5";

/// The [`KINE_IMAGE`]: the static program at `/bin/kine` (the command the sidecar runs,
/// `["/bin/kine"]`, also the entrypoint) and an empty `/tmp`.
///
/// # Errors
/// When `kine` is missing from the tools (`make tools`).
pub fn kine(tools: &Tools) -> Result<ImageBuilder> {
    let binary = tools.path("kine");
    std::fs::metadata(&binary)
        .with_context(|| format!("{} is missing (run `make tools`)", binary.display()))?;
    Ok(ImageBuilder::new(KINE_IMAGE)?
        .file("/bin/kine", binary, 0o755)
        .bytes("/tmp/.keep", Vec::new(), 0o644)
        .entrypoint(["/bin/kine"]))
}

/// The kube-proxy image kubeadm's addon names for `version` (`registry.k8s.io/kube-proxy:<v>`).
#[must_use]
pub fn kube_proxy_image(version: &str) -> String {
    format!("registry.k8s.io/kube-proxy:{version}")
}

/// The control-plane programs the provider's Deployment runs, one image each.
pub const CONTROL_PLANE_PROGRAMS: [&str; 3] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// The image of control-plane `program` at `version` under the default registry the
/// provider uses (`registry.k8s.io/kube-apiserver:v1.36.3`).
#[must_use]
pub fn control_plane_image(program: &str, version: &str) -> String {
    format!("registry.k8s.io/{program}:{version}")
}

/// The control-plane images of `version`: each a
/// static program at `/usr/local/bin/<program>` (on the image's `PATH`, as upstream's images
/// have it, since the Deployment names the command only) and an empty `/tmp`. The programs of
/// [`KUBERNETES_VERSION`] are the tools' own; other built versions come from their
/// `versions/<tag>/` directory.
///
/// # Errors
/// When `version` was not built.
pub fn control_plane_images(tools: &Tools, version: &str) -> Result<Vec<ImageBuilder>> {
    let bin = if version == KUBERNETES_VERSION {
        tools.bin_dir().to_path_buf()
    } else {
        tools.bin_dir().join("versions").join(version)
    };
    CONTROL_PLANE_PROGRAMS
        .iter()
        .map(|program| {
            let binary = bin.join(program);
            std::fs::metadata(&binary).with_context(|| {
                format!(
                    "{} is missing: version {version} is not built (`make tools`)",
                    binary.display()
                )
            })?;
            Ok(ImageBuilder::new(&control_plane_image(program, version))?
                .file(&format!("/usr/local/bin/{program}"), &binary, 0o755)
                .bytes("/tmp/.keep", Vec::new(), 0o644)
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .entrypoint([format!("/usr/local/bin/{program}")]))
        })
        .collect()
}

/// The node images every machine has: pause and kube-proxy (with `nft`, its libraries, the
/// loader and `/etc/protocols`).
///
/// # Errors
/// When a program or library is missing.
pub fn node_images(tools: &Tools) -> Result<Vec<ImageBuilder>> {
    Ok(vec![
        ImageBuilder::new(PAUSE_IMAGE)?
            .file("/pause", tools.path("pause"), 0o755)
            .entrypoint(["/pause"]),
        kube_proxy(tools)?,
    ])
}

/// The images of a management machine that only tests run: the netcheck client, the
/// konnectivity server (`addons.konnectivity`) and kine (SQL data stores).
///
/// # Errors
/// When a program is missing.
pub fn test_images_of_management_machines(tools: &Tools) -> Result<Vec<ImageBuilder>> {
    Ok(vec![
        netcheck(tools)?,
        konnectivity(tools, "proxy-server")?,
        kine(tools)?,
    ])
}

/// The worker images: the [`node_images`], `CoreDNS`, the konnectivity agent and the
/// netcheck client.
///
/// # Errors
/// When a program or library is missing.
pub fn worker_images(tools: &Tools) -> Result<Vec<ImageBuilder>> {
    worker_images_with(tools, true)
}

/// The worker images, with the konnectivity agent and the netcheck client only when
/// `test_images` (the images only tests run; `make demo` runs without them).
///
/// # Errors
/// When a program or library is missing.
pub fn worker_images_with(tools: &Tools, test_images: bool) -> Result<Vec<ImageBuilder>> {
    let mut images = node_images(tools)?;
    images.push(
        ImageBuilder::new(COREDNS_IMAGE)?
            .file("/coredns", tools.path("coredns"), 0o755)
            .entrypoint(["/coredns"])
            .user("65532"),
    );
    if test_images {
        images.extend([konnectivity(tools, "proxy-agent")?, netcheck(tools)?]);
    }
    // kube-proxy of every other built version that has one (the previous minor's), for a
    // tenant of that version (its kube-proxy DaemonSet follows the tenant's version).
    if let Ok(versions) = std::fs::read_dir(tools.bin_dir().join("versions")) {
        for dir in versions.flatten() {
            let binary = dir.path().join("kube-proxy");
            let version = dir.file_name().to_string_lossy().into_owned();
            if std::fs::metadata(&binary).is_ok() && version != KUBERNETES_VERSION {
                images.push(kube_proxy_at(tools, &version, &binary)?);
            }
        }
    }
    Ok(images)
}

/// The netcheck test client ([`NETCHECK_IMAGE`], `tests/tools/netcheck`), as user 65532.
///
/// # Errors
/// When the program is missing.
pub fn netcheck(tools: &Tools) -> Result<ImageBuilder> {
    Ok(ImageBuilder::new(NETCHECK_IMAGE)?
        .file("/netcheck", tools.path("netcheck"), 0o755)
        .entrypoint(["/netcheck"])
        .user("65532"))
}

/// kube-proxy in nftables mode execs `nft`: the image carries it with its shared libraries,
/// glibc's `libc.so.6` and loader, and `/etc/protocols` + `/etc/services` (without them `nft`
/// prints protocol numbers and kube-proxy's resync deletes every service: real-machines.md §5.4).
fn kube_proxy(tools: &Tools) -> Result<ImageBuilder> {
    kube_proxy_at(tools, KUBERNETES_VERSION, &tools.path("kube-proxy"))
}

/// The kube-proxy image of `version` with the program at `binary`.
fn kube_proxy_at(tools: &Tools, version: &str, binary: &Path) -> Result<ImageBuilder> {
    let nft_root = tools.bin_dir().join("nft-root");
    let mut image = ImageBuilder::new(&kube_proxy_image(version))?
        .file("/usr/local/bin/kube-proxy", binary, 0o755)
        .file("/usr/sbin/nft", nft_root.join("usr/sbin/nft"), 0o755)
        .file("/etc/protocols", "/etc/protocols", 0o644)
        .file("/etc/services", "/etc/services", 0o644)
        .file(
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/x86_64-linux-gnu/libc.so.6",
            0o755,
        )
        .file(
            "/lib64/ld-linux-x86-64.so.2",
            "/lib64/ld-linux-x86-64.so.2",
            0o755,
        )
        .env("LD_LIBRARY_PATH", "/lib/x86_64-linux-gnu")
        .entrypoint(["/usr/local/bin/kube-proxy"]);
    for lib_dir in ["usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu"] {
        let Ok(entries) = std::fs::read_dir(nft_root.join(lib_dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.contains(".so.") {
                image = image.file(
                    &format!("/lib/x86_64-linux-gnu/{name}"),
                    entry.path(),
                    0o755,
                );
            }
        }
    }
    std::fs::metadata(nft_root.join("usr/sbin/nft"))
        .context("nft is missing from the tools (run `make tools`)")?;
    Ok(image)
}

/// The image of a Cluster API controller as its release names it
/// (`registry.k8s.io/cluster-api/cluster-api-controller:v1.14.2`), the name the components of
/// [`Tools::clusterctl_repository`] ask for.
#[must_use]
pub fn capi_image(name: &str) -> String {
    format!("registry.k8s.io/cluster-api/{name}:{CAPI_VERSION}")
}

/// The Cluster API core manager and CABPK as their release images are made (the static
/// program at `/manager`, the command their Deployments run, user 65532 as in their
/// distroless base), from the programs `make tools` built.
///
/// # Errors
/// When a program is missing.
pub fn capi_images(tools: &Tools) -> Result<Vec<ImageBuilder>> {
    [
        ("cluster-api-controller", "capi-manager"),
        (
            "kubeadm-bootstrap-controller",
            "capi-kubeadm-bootstrap-manager",
        ),
    ]
    .into_iter()
    .map(|(image, program)| {
        let binary = tools.path(program);
        std::fs::metadata(&binary)
            .with_context(|| format!("{} is missing (run `make tools`)", binary.display()))?;
        Ok(ImageBuilder::new(&capi_image(image))?
            .file("/manager", binary, 0o755)
            .entrypoint(["/manager"])
            .user(MANAGER_USER))
    })
    .collect()
}

/// The user the manager image runs as (`nonroot` of distroless images).
pub const MANAGER_USER: &str = "65532:65532";

/// The kamaji-rs manager as an OCI image named `reference`: the `binary` at `/manager` (the
/// command `config/manager/manager.yaml` runs), the shared libraries it links (as the
/// system's dynamic loader resolves them, `ldd`) at their paths with the loader itself, and
/// nothing else — no shell, no package manager; user [`MANAGER_USER`], so it runs with
/// `runAsNonRoot` and a read-only root filesystem.
///
/// # Errors
/// When `binary` is missing or `ldd` cannot list its libraries.
pub fn manager_image(binary: &Path, reference: &str) -> Result<ImageBuilder> {
    std::fs::metadata(binary).with_context(|| format!("{} is missing", binary.display()))?;
    let out = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .context("run ldd")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut image = ImageBuilder::new(reference)?
        .file("/manager", binary, 0o755)
        .user(MANAGER_USER);
    if out.status.success() {
        for path in shared_libraries(&text) {
            image = image.file(&path, &path, 0o755);
        }
    } else if !String::from_utf8_lossy(&out.stderr).contains("not a dynamic executable")
        && !text.contains("statically linked")
    {
        anyhow::bail!(
            "ldd {}: {}",
            binary.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(image)
}

/// The absolute paths `ldd` output names: `lib => /path (addr)` and the loader `/path (addr)`.
fn shared_libraries(ldd: &str) -> Vec<String> {
    ldd.lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = match line.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => line.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| path.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_libraries_ldd_names() {
        let ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x1)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x2)\n\t/lib64/ld-linux-x86-64.so.2 (0x3)\n";
        assert_eq!(
            shared_libraries(ldd),
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
    }
}
