//! Kubernetes versions and the choices kubeadm makes by version.

use std::fmt;
use std::str::FromStr;

use crate::error::ValidationError;

/// A Kubernetes release version `v<major>.<minor>.<patch>` (pre-release suffixes are kept
/// verbatim for display but ignored for comparisons of major/minor).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KubernetesVersion {
    /// Major version (always 1 today).
    pub major: u32,
    /// Minor version, e.g. 36.
    pub minor: u32,
    /// Patch version, e.g. 3.
    pub patch: u32,
    /// Anything after the patch number (`-rc.1`, `+build`), without the separator.
    pub suffix: Option<String>,
}

impl KubernetesVersion {
    /// Builds `v<major>.<minor>.<patch>`.
    #[must_use]
    pub fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
            suffix: None,
        }
    }

    /// Parses `v1.36.3` or `1.36.3` (a leading `v` is optional).
    ///
    /// # Errors
    /// A [`ValidationError`] on field `version` when the text is not `[v]X.Y.Z[-suffix]`.
    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        let bad = || ValidationError::new("version", format!("{text:?} is not a version vX.Y.Z"));
        let t = text.strip_prefix('v').unwrap_or(text);
        let (core, suffix) = match t.find(['-', '+']) {
            Some(i) => (&t[..i], Some(t[i + 1..].to_owned())),
            None => (t, None),
        };
        let mut parts = core.split('.');
        let mut next = || -> Result<u32, ValidationError> {
            let p = parts.next().ok_or_else(bad)?;
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            p.parse().map_err(|_| bad())
        };
        let (major, minor, patch) = (next()?, next()?, next()?);
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Self {
            major,
            minor,
            patch,
            suffix,
        })
    }

    /// True when this version is at least `major.minor`.
    #[must_use]
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }

    /// The `kubeadm.k8s.io` API version kubeadm of this minor stores `ClusterConfiguration` in:
    /// `v1beta4` from 1.31 (kubernetes/kubernetes#125029; v1beta3 removed in 1.36), `v1beta3`
    /// for 1.22–1.30. Older tenants also get `v1beta3` (the oldest version this provider writes;
    /// v1beta1/v1beta2 are never written, see case B05).
    #[must_use]
    pub fn kubeadm_api_version(&self) -> &'static str {
        if self.at_least(1, 31) {
            "kubeadm.k8s.io/v1beta4"
        } else {
            "kubeadm.k8s.io/v1beta3"
        }
    }

    /// Name of the kubelet base configuration ConfigMap: `kubelet-config` from 1.24
    /// (`UnversionedKubeletConfigMap` on by default), `kubelet-config-1.X` below, as Kamaji does.
    #[must_use]
    pub fn kubelet_config_map_name(&self) -> String {
        if self.at_least(1, 24) {
            "kubelet-config".to_owned()
        } else {
            format!("kubelet-config-{}.{}", self.major, self.minor)
        }
    }

    /// Name of the Role/RoleBinding granting `get` on the kubelet-config ConfigMap:
    /// `kubeadm:kubelet-config`, or `kubeadm:kubelet-config-1.X` below 1.24.
    #[must_use]
    pub fn kubelet_config_rbac_name(&self) -> String {
        format!("kubeadm:{}", self.kubelet_config_map_name())
    }

    /// The CoreDNS version kubeadm of this minor deploys (`constants.CoreDNSVersion`, without
    /// the leading `v`). Minors newer than the table get the newest known version; minors older
    /// than 1.22 get the 1.22 version.
    #[must_use]
    pub fn coredns_version(&self) -> &'static str {
        const TABLE: &[(u32, &str)] = &[
            (22, "1.8.4"),
            (23, "1.8.6"),
            (24, "1.8.6"),
            (25, "1.9.3"),
            (26, "1.9.3"),
            (27, "1.10.1"),
            (28, "1.10.1"),
            (29, "1.11.1"),
            (30, "1.11.1"),
            (31, "1.11.3"),
            (32, "1.11.3"),
            (33, "1.12.0"),
            (34, "1.12.1"),
            (35, "1.13.1"),
            (36, "1.14.2"),
        ];
        let mut chosen = TABLE[0].1;
        for (minor, v) in TABLE {
            if self.major > 1 || self.minor >= *minor {
                chosen = v;
            }
        }
        chosen
    }

    /// `v<major>.<minor>.<patch>` without suffix: the kube-proxy image tag kubeadm uses.
    #[must_use]
    pub fn tag(&self) -> String {
        format!("v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl fmt::Display for KubernetesVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)?;
        if let Some(s) = &self.suffix {
            write!(f, "-{s}")?;
        }
        Ok(())
    }
}

impl FromStr for KubernetesVersion {
    type Err = ValidationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_displays() {
        let v = KubernetesVersion::parse("v1.36.3").unwrap();
        assert_eq!(v, KubernetesVersion::new(1, 36, 3));
        assert_eq!(v.to_string(), "v1.36.3");
        assert_eq!(KubernetesVersion::parse("1.23.17").unwrap().minor, 23);
        let rc = KubernetesVersion::parse("v1.31.0-rc.1").unwrap();
        assert_eq!(rc.suffix.as_deref(), Some("rc.1"));
        assert_eq!(rc.tag(), "v1.31.0");
        for bad in ["", "v1", "v1.2", "v1.2.x", "1..2", "v1.2.3.4", "va.b.c"] {
            assert_eq!(
                KubernetesVersion::parse(bad).unwrap_err().field,
                "version",
                "{bad}"
            );
        }
    }

    #[test]
    fn b05_kubeadm_api_version_by_minor() {
        let api = |s: &str| KubernetesVersion::parse(s).unwrap().kubeadm_api_version();
        assert_eq!(api("v1.23.17"), "kubeadm.k8s.io/v1beta3");
        assert_eq!(api("v1.30.2"), "kubeadm.k8s.io/v1beta3");
        assert_eq!(api("v1.31.0"), "kubeadm.k8s.io/v1beta4");
        assert_eq!(api("v1.33.1"), "kubeadm.k8s.io/v1beta4");
        assert_eq!(api("v1.36.3"), "kubeadm.k8s.io/v1beta4");
    }

    #[test]
    fn b06_kubelet_config_name_by_minor() {
        let v = |s: &str| KubernetesVersion::parse(s).unwrap();
        assert_eq!(
            v("v1.23.17").kubelet_config_map_name(),
            "kubelet-config-1.23"
        );
        assert_eq!(
            v("v1.23.17").kubelet_config_rbac_name(),
            "kubeadm:kubelet-config-1.23"
        );
        assert_eq!(v("v1.24.0").kubelet_config_map_name(), "kubelet-config");
        assert_eq!(
            v("v1.30.2").kubelet_config_rbac_name(),
            "kubeadm:kubelet-config"
        );
    }

    #[test]
    fn coredns_versions() {
        let v = |s: &str| KubernetesVersion::parse(s).unwrap().coredns_version();
        assert_eq!(v("v1.36.3"), "1.14.2");
        assert_eq!(v("v1.23.17"), "1.8.6");
        assert_eq!(v("v1.40.0"), "1.14.2");
        assert_eq!(v("v1.20.0"), "1.8.4");
    }
}
