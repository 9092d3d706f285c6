//! Image references mapped to the programs of the tools cache.

use std::path::PathBuf;

/// Programs an image may name (the last path component of the repository).
pub(crate) const PROGRAMS: [&str; 4] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
];

/// The built versions the images must carry.
#[derive(Debug, Clone)]
pub(crate) struct Catalogue {
    /// Directory of the built programs.
    pub bin: PathBuf,
    /// Kubernetes version (`v1.36.3`).
    pub kubernetes: String,
    /// etcd version without `v` (`3.6.16`).
    pub etcd: String,
}

impl Catalogue {
    /// The program name and path for `image`, or an `ErrImagePull`-style message.
    ///
    /// Any registry prefix is accepted; the tag must match the built version
    /// (`etcd` tags may carry kubeadm's `-<n>` suffix and a `v` prefix).
    pub(crate) fn resolve(&self, image: &str) -> Result<(&'static str, PathBuf), String> {
        if image.contains('@') {
            return Err(format!(
                "image {image:?}: digest references are not supported by the local node"
            ));
        }
        let last = image.rsplit('/').next().unwrap_or(image);
        let (repo, tag) = last.split_once(':').unwrap_or((last, "latest"));
        let Some(program) = PROGRAMS.iter().find(|p| **p == repo) else {
            return Err(format!(
                "image {image:?} not found: the local node only runs {} images",
                PROGRAMS.join(", ")
            ));
        };
        let matches = if *program == "etcd" {
            let v = tag.trim_start_matches('v');
            v.split_once('-').map_or(v, |(v, _)| v) == self.etcd
        } else {
            tag == self.kubernetes
        };
        // Other Kubernetes versions the tools build (`versions/<tag>/<program>`), for upgrades.
        let other = self.bin.join("versions").join(tag).join(program);
        if !matches && *program != "etcd" && is_safe_tag(tag) && other.exists() {
            return Ok((program, other));
        }
        if !matches {
            let built = if *program == "etcd" {
                &self.etcd
            } else {
                &self.kubernetes
            };
            return Err(format!(
                "image {image:?} not found: manifest unknown (the local node has {program} {built} only)"
            ));
        }
        Ok((program, self.bin.join(program)))
    }
}

/// A tag that is a plain version (`v1.36.1`), so that it cannot walk out of `versions/`.
fn is_safe_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        && !tag.starts_with('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cat() -> Catalogue {
        Catalogue {
            bin: "/bin".into(),
            kubernetes: "v1.36.3".into(),
            etcd: "3.6.16".into(),
        }
    }

    #[test]
    fn maps_any_registry_and_checks_the_tag() {
        let c = cat();
        assert_eq!(
            c.resolve("registry.k8s.io/kube-apiserver:v1.36.3")
                .unwrap()
                .0,
            "kube-apiserver"
        );
        assert_eq!(
            c.resolve("my.reg:5000/mirror/kube-scheduler:v1.36.3")
                .unwrap()
                .0,
            "kube-scheduler"
        );
        assert_eq!(
            c.resolve("registry.k8s.io/etcd:3.6.16-0").unwrap().0,
            "etcd"
        );
        assert!(
            c.resolve("registry.k8s.io/kube-apiserver:v1.35.0")
                .unwrap_err()
                .contains("v1.36.3")
        );
        assert!(c.resolve("nginx").is_err());
        assert!(c.resolve("registry.k8s.io/kube-apiserver").is_err());
    }
}
