//! Pod volumes materialised as files, kubelet-style: each Secret/ConfigMap volume is a
//! directory whose entries are symlinks into `..data`, itself a symlink to a timestamped
//! directory that is swapped atomically on update.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, KeyToPath, Pod, Secret, Volume};
use kube::runtime::reflector::{ObjectRef, Store};

/// Files of one volume: relative path → (content, mode).
pub(crate) type Files = BTreeMap<String, (Vec<u8>, u32)>;

/// Where a pod's volumes live on the host.
#[derive(Debug)]
pub(crate) struct PodVolumes {
    root: PathBuf,
    /// Volume name → host directory.
    pub dirs: BTreeMap<String, PathBuf>,
    written: BTreeMap<String, Files>,
}

/// The Secrets and ConfigMaps the agent sees.
#[derive(Clone)]
pub(crate) struct Sources {
    pub secrets: Store<Secret>,
    pub config_maps: Store<ConfigMap>,
}

impl PodVolumes {
    /// An empty set of volumes under `root`.
    pub(crate) fn new(root: PathBuf) -> Self {
        Self {
            root,
            dirs: BTreeMap::new(),
            written: BTreeMap::new(),
        }
    }

    /// Creates or refreshes every volume of `pod`. Returns an error message (the kubelet's
    /// `FailedMount`) when a volume cannot be set up yet, e.g. its Secret is missing.
    pub(crate) fn sync(&mut self, pod: &Pod, sources: &Sources) -> Result<(), String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        for v in &volumes {
            let dir = self.root.join(&v.name);
            if v.empty_dir.is_some() {
                std::fs::create_dir_all(&dir).map_err(|e| format!("emptyDir {}: {e}", v.name))?;
                set_mode(&dir, 0o777);
                self.dirs.insert(v.name.clone(), dir);
                continue;
            }
            let files = volume_files(v, ns, sources)
                .map_err(|e| format!("MountVolume.SetUp failed for volume {:?}: {e}", v.name))?;
            if self.written.get(&v.name) != Some(&files) {
                write_atomic(&dir, &files)
                    .map_err(|e| format!("write volume {:?}: {e}", v.name))?;
                self.written.insert(v.name.clone(), files);
            }
            self.dirs.insert(v.name.clone(), dir);
        }
        Ok(())
    }
}

/// Whether `pod` mounts Secret `name` or ConfigMap `name` (kind `"Secret"`/`"ConfigMap"`).
pub(crate) fn references(pod: &Pod, kind: &str, name: &str) -> bool {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes.into_iter().flatten().any(|v| {
        let direct = match kind {
            "Secret" => v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some(name),
            _ => v.config_map.as_ref().map(|c| c.name.as_str()) == Some(name),
        };
        let projected = v
            .projected
            .as_ref()
            .and_then(|p| p.sources.as_ref())
            .is_some_and(|ss| {
                ss.iter().any(|s| match kind {
                    "Secret" => s.secret.as_ref().map(|x| x.name.as_str()) == Some(name),
                    _ => s.config_map.as_ref().map(|x| x.name.as_str()) == Some(name),
                })
            });
        direct || projected
    })
}

fn secret_data(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut m: BTreeMap<String, Vec<u8>> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in s.string_data.iter().flatten() {
        m.insert(k.clone(), v.clone().into_bytes());
    }
    m
}

fn config_map_data(c: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut m: BTreeMap<String, Vec<u8>> = c
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    for (k, v) in c.binary_data.iter().flatten() {
        m.insert(k.clone(), v.0.clone());
    }
    m
}

/// Files of one source (all keys, or `items`), or `None` when it is optional and missing.
fn source_files(
    what: &str,
    data: Option<BTreeMap<String, Vec<u8>>>,
    items: Option<&Vec<KeyToPath>>,
    optional: bool,
    mode: u32,
) -> Result<Files, String> {
    let Some(data) = data else {
        return if optional {
            Ok(Files::new())
        } else {
            Err(format!("{what} not found"))
        };
    };
    let mut files = Files::new();
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                let Some(bytes) = data.get(&item.key) else {
                    if optional {
                        continue;
                    }
                    return Err(format!("{what} has no key {:?}", item.key));
                };
                check_path(&item.path)?;
                let m = item
                    .mode
                    .and_then(|m| u32::try_from(m).ok())
                    .unwrap_or(mode);
                files.insert(item.path.clone(), (bytes.clone(), m));
            }
        }
        _ => {
            for (k, bytes) in data {
                files.insert(k, (bytes, mode));
            }
        }
    }
    Ok(files)
}

fn check_path(p: &str) -> Result<(), String> {
    let ok = Path::new(p)
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    if ok && !p.is_empty() {
        Ok(())
    } else {
        Err(format!("invalid item path {p:?}"))
    }
}

fn mode_of(m: Option<i32>) -> u32 {
    m.and_then(|m| u32::try_from(m).ok()).unwrap_or(0o644)
}

fn volume_files(v: &Volume, ns: &str, src: &Sources) -> Result<Files, String> {
    let secret = |name: &str| {
        src.secrets
            .get(&ObjectRef::new(name).within(ns))
            .map(|s| secret_data(&s))
    };
    let config_map = |name: &str| {
        src.config_maps
            .get(&ObjectRef::new(name).within(ns))
            .map(|c| config_map_data(&c))
    };
    if let Some(s) = &v.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        return source_files(
            &format!("secret {name:?}"),
            secret(&name),
            s.items.as_ref(),
            s.optional.unwrap_or(false),
            mode_of(s.default_mode),
        );
    }
    if let Some(c) = &v.config_map {
        return source_files(
            &format!("configmap {:?}", c.name),
            config_map(&c.name),
            c.items.as_ref(),
            c.optional.unwrap_or(false),
            mode_of(c.default_mode),
        );
    }
    if let Some(p) = &v.projected {
        let mode = mode_of(p.default_mode);
        let mut files = Files::new();
        for s in p.sources.iter().flatten() {
            let part = if let Some(x) = &s.secret {
                source_files(
                    &format!("secret {:?}", x.name),
                    secret(&x.name),
                    x.items.as_ref(),
                    x.optional.unwrap_or(false),
                    mode,
                )?
            } else if let Some(x) = &s.config_map {
                source_files(
                    &format!("configmap {:?}", x.name),
                    config_map(&x.name),
                    x.items.as_ref(),
                    x.optional.unwrap_or(false),
                    mode,
                )?
            } else {
                return Err(
                    "only secret and configMap projections are supported by the local node".into(),
                );
            };
            files.extend(part);
        }
        return Ok(files);
    }
    Err(
        "unsupported volume type (the local node supports secret, configMap, emptyDir, projected)"
            .into(),
    )
}

/// Writes `files` into `dir` the way the kubelet's atomic writer does: a fresh timestamped
/// directory, a `..data` symlink swapped by rename, and top-level symlinks into `..data`.
pub(crate) fn write_atomic(dir: &Path, files: &Files) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let stamp = format!(
        "..{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
    );
    let fresh = dir.join(&stamp);
    std::fs::create_dir(&fresh)?;
    for (rel, (bytes, mode)) in files {
        let path = fresh.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, bytes)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))?;
    }
    let old = std::fs::read_link(dir.join("..data")).ok();
    let tmp_link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&stamp, &tmp_link)?;
    std::fs::rename(&tmp_link, dir.join("..data"))?;
    let tops: BTreeSet<String> = files
        .keys()
        .filter_map(|k| k.split('/').next().map(str::to_owned))
        .collect();
    for top in &tops {
        let link = dir.join(top);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(top), &link)?;
        }
    }
    for entry in std::fs::read_dir(dir)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !tops.contains(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = old {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) {
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_writer_swaps_data_and_keeps_links() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Files::new();
        files.insert("tls.crt".into(), (b"one".to_vec(), 0o600));
        files.insert("sub/ca.crt".into(), (b"ca".to_vec(), 0o644));
        write_atomic(dir.path(), &files).unwrap();
        assert_eq!(std::fs::read(dir.path().join("tls.crt")).unwrap(), b"one");
        assert_eq!(std::fs::read(dir.path().join("sub/ca.crt")).unwrap(), b"ca");
        let mode = std::fs::metadata(dir.path().join("tls.crt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        files.insert("tls.crt".into(), (b"two".to_vec(), 0o600));
        files.remove("sub/ca.crt");
        write_atomic(dir.path(), &files).unwrap();
        assert_eq!(std::fs::read(dir.path().join("tls.crt")).unwrap(), b"two");
        assert!(!dir.path().join("sub").exists());
        let dirs = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(dirs, 3, "tls.crt, ..data and one timestamped directory");
    }
}
