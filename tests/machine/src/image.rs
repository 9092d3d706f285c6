//! OCI images without an engine: an image-layout tar that `ctr images import` loads.
//!
//! An [`ImageBuilder`] collects files (from the host or from bytes), an entrypoint, an
//! environment and a user, and writes one uncompressed layer plus its config, manifest and
//! `index.json` as an [OCI image layout] tar. The index carries the image's full reference in
//! `io.containerd.image.name` and its tag in `org.opencontainers.image.ref.name`, the two
//! annotations containerd's importer reads, so the image appears under exactly the name a
//! Pod (or kubeadm) asks for, e.g. `registry.k8s.io/kube-proxy:v1.36.3`.
//!
//! [OCI image layout]: https://github.com/opencontainers/image-spec/blob/main/image-layout.md

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{Context, Result, bail};
use oci_spec::image::{
    Arch, ConfigBuilder, Descriptor, DescriptorBuilder, Digest, ImageConfigurationBuilder,
    ImageIndexBuilder, ImageManifestBuilder, MediaType, Os, RootFsBuilder,
};
use sha2::{Digest as _, Sha256};

/// The annotation containerd's importer names an image by.
pub const CONTAINERD_IMAGE_NAME: &str = "io.containerd.image.name";
/// The OCI annotation for the tag of a manifest in an index.
pub const OCI_REF_NAME: &str = "org.opencontainers.image.ref.name";

/// Where a file's content comes from.
#[derive(Debug, Clone)]
enum Source {
    /// A host file (symbolic links followed).
    Host(PathBuf),
    /// Literal bytes.
    Bytes(Vec<u8>),
    /// A symbolic link to the given target.
    Symlink(String),
}

/// One entry of the image's single layer.
#[derive(Debug, Clone)]
struct Entry {
    source: Source,
    mode: u32,
}

/// An image to write: a reference, files, entrypoint, environment and user.
///
/// Paths inside the image are absolute (`/usr/local/bin/kube-proxy`); parent directories
/// are created `0755`. Timestamps are zero, so the same inputs give the same digests.
#[derive(Debug, Clone)]
pub struct ImageBuilder {
    reference: String,
    files: BTreeMap<String, Entry>,
    entrypoint: Vec<String>,
    env: Vec<String>,
    user: Option<String>,
}

/// What [`ImageBuilder::write`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenImage {
    /// The full reference (`registry.k8s.io/pause:3.10.2`).
    pub reference: String,
    /// The manifest's digest (`sha256:<hex>`).
    pub manifest_digest: String,
    /// The tar written.
    pub path: PathBuf,
}

impl ImageBuilder {
    /// An empty image named `reference` (`[registry/]repository:tag`).
    ///
    /// # Errors
    /// When the reference has no tag.
    pub fn new(reference: &str) -> Result<Self> {
        tag_of(reference)?;
        Ok(Self {
            reference: reference.to_owned(),
            files: BTreeMap::new(),
            entrypoint: Vec::new(),
            env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
            user: None,
        })
    }

    /// Adds the host file `host` (links followed) at `path` with permission bits `mode`.
    #[must_use]
    pub fn file(mut self, path: &str, host: impl AsRef<Path>, mode: u32) -> Self {
        self.files.insert(
            normalize(path),
            Entry {
                source: Source::Host(host.as_ref().to_path_buf()),
                mode,
            },
        );
        self
    }

    /// Adds `contents` at `path` with permission bits `mode`.
    #[must_use]
    pub fn bytes(mut self, path: &str, contents: impl Into<Vec<u8>>, mode: u32) -> Self {
        self.files.insert(
            normalize(path),
            Entry {
                source: Source::Bytes(contents.into()),
                mode,
            },
        );
        self
    }

    /// Adds a symbolic link at `path` pointing to `target`.
    #[must_use]
    pub fn symlink(mut self, path: &str, target: &str) -> Self {
        self.files.insert(
            normalize(path),
            Entry {
                source: Source::Symlink(target.to_owned()),
                mode: 0o777,
            },
        );
        self
    }

    /// Sets the entrypoint (the command the container runs when the Pod gives none).
    #[must_use]
    pub fn entrypoint<S: Into<String>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.entrypoint = args.into_iter().map(Into::into).collect();
        self
    }

    /// Adds `NAME=value` to the image's environment.
    #[must_use]
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.retain(|e| !e.starts_with(&format!("{name}=")));
        self.env.push(format!("{name}={value}"));
        self
    }

    /// Sets the user (`65532`, `65532:65532`).
    #[must_use]
    pub fn user(mut self, user: &str) -> Self {
        self.user = Some(user.to_owned());
        self
    }

    /// The image reference.
    #[must_use]
    pub fn reference(&self) -> &str {
        &self.reference
    }

    /// Writes the image-layout tar to `out`.
    ///
    /// # Errors
    /// When a host file cannot be read or `out` cannot be written.
    pub fn write(&self, out: &Path) -> Result<WrittenImage> {
        let layer = self.layer()?;
        let layer_digest = sha256(&layer);

        let mut config = ConfigBuilder::default().env(self.env.clone());
        if !self.entrypoint.is_empty() {
            config = config.entrypoint(self.entrypoint.clone());
        }
        if let Some(user) = &self.user {
            config = config.user(user.clone());
        }
        let config = ImageConfigurationBuilder::default()
            .architecture(Arch::Amd64)
            .os(Os::Linux)
            .config(config.build()?)
            .rootfs(
                RootFsBuilder::default()
                    .typ("layers")
                    .diff_ids(vec![layer_digest.clone()])
                    .build()?,
            )
            .build()?;
        let config_json = serde_json::to_vec(&config)?;
        let config_digest = sha256(&config_json);

        let manifest = ImageManifestBuilder::default()
            .schema_version(2u32)
            .media_type(MediaType::ImageManifest)
            .config(descriptor(
                MediaType::ImageConfig,
                &config_digest,
                config_json.len(),
                None,
            )?)
            .layers(vec![descriptor(
                MediaType::ImageLayer,
                &layer_digest,
                layer.len(),
                None,
            )?])
            .build()?;
        let manifest_json = serde_json::to_vec(&manifest)?;
        let manifest_digest = sha256(&manifest_json);

        let annotations = BTreeMap::from([
            (CONTAINERD_IMAGE_NAME.to_owned(), self.reference.clone()),
            (OCI_REF_NAME.to_owned(), tag_of(&self.reference)?.to_owned()),
        ]);
        let index = ImageIndexBuilder::default()
            .schema_version(2u32)
            .media_type(MediaType::ImageIndex)
            .manifests(vec![descriptor(
                MediaType::ImageManifest,
                &manifest_digest,
                manifest_json.len(),
                Some(annotations.into_iter().collect()),
            )?])
            .build()?;
        let index_json = serde_json::to_vec(&index)?;

        let file =
            std::fs::File::create(out).with_context(|| format!("create {}", out.display()))?;
        let mut tar = tar::Builder::new(std::io::BufWriter::new(file));
        append(
            &mut tar,
            "oci-layout",
            br#"{"imageLayoutVersion":"1.0.0"}"#,
            0o644,
        )?;
        append(&mut tar, "index.json", &index_json, 0o644)?;
        for (digest, blob) in [
            (&layer_digest, &layer),
            (&config_digest, &config_json),
            (&manifest_digest, &manifest_json),
        ] {
            let hex = digest.trim_start_matches("sha256:");
            append(&mut tar, &format!("blobs/sha256/{hex}"), blob, 0o644)?;
        }
        tar.into_inner()?.flush()?;
        Ok(WrittenImage {
            reference: self.reference.clone(),
            manifest_digest,
            path: out.to_path_buf(),
        })
    }

    /// A digest of everything the image is made from (reference, entries with their modes,
    /// host files by path, size and modification time, entrypoint, environment, user):
    /// equal fingerprints give equal images, without reading the host files.
    ///
    /// # Errors
    /// When a host file is missing.
    pub fn fingerprint(&self) -> Result<String> {
        use std::fmt::Write as _;
        let mut text = format!(
            "{}\n{:?}\n{:?}\n{:?}\n",
            self.reference, self.entrypoint, self.env, self.user
        );
        for (path, entry) in &self.files {
            let source = match &entry.source {
                Source::Host(host) => {
                    let meta = std::fs::metadata(host)
                        .with_context(|| format!("read {}", host.display()))?;
                    let mtime = meta
                        .modified()?
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_nanos();
                    format!("host {} {} {mtime}", host.display(), meta.len())
                }
                Source::Bytes(data) => format!("bytes {}", sha256(data)),
                Source::Symlink(target) => format!("symlink {target}"),
            };
            let _ = writeln!(text, "{path} {:o} {source}", entry.mode);
        }
        Ok(sha256(text.as_bytes()))
    }

    /// The single layer: every parent directory, then every entry, in path order.
    fn layer(&self) -> Result<Vec<u8>> {
        let mut dirs = BTreeSet::new();
        for path in self.files.keys() {
            let mut parent = Path::new(path).parent();
            while let Some(p) = parent {
                if p.as_os_str().is_empty() {
                    break;
                }
                dirs.insert(p.to_string_lossy().into_owned());
                parent = p.parent();
            }
        }
        let mut tar = tar::Builder::new(Vec::new());
        for dir in &dirs {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            header.set_mtime(0);
            tar.append_data(&mut header, format!("{dir}/"), std::io::empty())?;
        }
        for (path, entry) in &self.files {
            match &entry.source {
                Source::Symlink(target) => {
                    let mut header = tar::Header::new_gnu();
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_mode(entry.mode);
                    header.set_size(0);
                    header.set_mtime(0);
                    tar.append_link(&mut header, path, target)?;
                }
                Source::Host(host) => {
                    let data =
                        std::fs::read(host).with_context(|| format!("read {}", host.display()))?;
                    append(&mut tar, path, &data, entry.mode)?;
                }
                Source::Bytes(data) => append(&mut tar, path, data, entry.mode)?,
            }
        }
        Ok(tar.into_inner()?)
    }
}

/// The tag of `[registry/]repository:tag` (a `:` after the last `/`).
fn tag_of(reference: &str) -> Result<&str> {
    let last = reference.rsplit('/').next().unwrap_or(reference);
    match last.rsplit_once(':') {
        Some((_, tag)) if !tag.is_empty() => Ok(tag),
        _ => bail!("image reference {reference:?} has no tag"),
    }
}

/// `/a/b` → `a/b` (tar paths are relative to the root).
fn normalize(path: &str) -> String {
    path.trim_start_matches('/').to_owned()
}

fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

fn descriptor(
    media_type: MediaType,
    digest: &str,
    size: usize,
    annotations: Option<std::collections::HashMap<String, String>>,
) -> Result<Descriptor> {
    let mut d = DescriptorBuilder::default()
        .media_type(media_type)
        .digest(Digest::from_str(digest)?)
        .size(u64::try_from(size)?);
    if let Some(a) = annotations {
        d = d.annotations(a);
    }
    Ok(d.build()?)
}

fn append<W: Write>(tar: &mut tar::Builder<W>, path: &str, data: &[u8], mode: u32) -> Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(mode);
    header.set_size(u64::try_from(data.len())?);
    header.set_mtime(0);
    tar.append_data(&mut header, path, data)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::HashMap;
    use std::io::Read;

    use super::*;

    fn entries(data: &[u8]) -> HashMap<String, (Vec<u8>, u32, tar::EntryType)> {
        let mut out = HashMap::new();
        let mut archive = tar::Archive::new(data);
        for e in archive.entries().unwrap() {
            let mut e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let mode = e.header().mode().unwrap();
            let kind = e.header().entry_type();
            let mut buf = Vec::new();
            e.read_to_end(&mut buf).unwrap();
            out.insert(path, (buf, mode, kind));
        }
        out
    }

    fn blob<'a>(
        outer: &'a HashMap<String, (Vec<u8>, u32, tar::EntryType)>,
        digest: &str,
    ) -> &'a [u8] {
        let path = format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
        &outer
            .get(&path)
            .unwrap_or_else(|| panic!("no blob {path}"))
            .0
    }

    #[test]
    fn the_layout_names_the_image_and_every_digest_matches_its_blob() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("prog");
        std::fs::write(&host, b"\x7fELF program").unwrap();
        let written = ImageBuilder::new("registry.k8s.io/kube-proxy:v1.36.3")
            .unwrap()
            .file("/usr/local/bin/kube-proxy", &host, 0o755)
            .bytes("/etc/protocols", "tcp 6 TCP\n", 0o644)
            .symlink("/usr/sbin/nft-link", "nft")
            .entrypoint(["/usr/local/bin/kube-proxy"])
            .env("LD_LIBRARY_PATH", "/lib")
            .user("65532")
            .write(&dir.path().join("img.tar"))
            .unwrap();

        let outer = entries(&std::fs::read(&written.path).unwrap());
        assert_eq!(
            outer["oci-layout"].0,
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()
        );
        let index: serde_json::Value = serde_json::from_slice(&outer["index.json"].0).unwrap();
        let m = &index["manifests"][0];
        assert_eq!(
            m["annotations"][CONTAINERD_IMAGE_NAME],
            "registry.k8s.io/kube-proxy:v1.36.3"
        );
        assert_eq!(m["annotations"][OCI_REF_NAME], "v1.36.3");
        let manifest_digest = m["digest"].as_str().unwrap();
        assert_eq!(manifest_digest, written.manifest_digest);
        let manifest_bytes = blob(&outer, manifest_digest);
        assert_eq!(sha256(manifest_bytes), manifest_digest);
        assert_eq!(m["size"], manifest_bytes.len());

        let manifest: serde_json::Value = serde_json::from_slice(manifest_bytes).unwrap();
        let config_digest = manifest["config"]["digest"].as_str().unwrap();
        let config_bytes = blob(&outer, config_digest);
        assert_eq!(sha256(config_bytes), config_digest);
        let config: serde_json::Value = serde_json::from_slice(config_bytes).unwrap();
        assert_eq!(config["architecture"], "amd64");
        assert_eq!(config["os"], "linux");
        assert_eq!(
            config["config"]["Entrypoint"][0],
            "/usr/local/bin/kube-proxy"
        );
        assert_eq!(config["config"]["User"], "65532");
        assert!(
            config["config"]["Env"]
                .as_array()
                .unwrap()
                .contains(&"LD_LIBRARY_PATH=/lib".into())
        );

        let layer_digest = manifest["layers"][0]["digest"].as_str().unwrap();
        assert_eq!(
            manifest["layers"][0]["mediaType"],
            "application/vnd.oci.image.layer.v1.tar"
        );
        let layer = blob(&outer, layer_digest);
        assert_eq!(sha256(layer), layer_digest);
        assert_eq!(config["rootfs"]["diff_ids"][0], layer_digest);
        let files = entries(layer);
        let (data, mode, _) = &files["usr/local/bin/kube-proxy"];
        assert_eq!(data, b"\x7fELF program");
        assert_eq!(*mode, 0o755);
        assert_eq!(files["etc/protocols"].0, b"tcp 6 TCP\n");
        assert_eq!(files["usr/sbin/nft-link"].2, tar::EntryType::Symlink);
        for dir in ["usr/", "usr/local/", "usr/local/bin/", "etc/", "usr/sbin/"] {
            assert_eq!(files[dir].2, tar::EntryType::Directory, "{dir}");
        }
    }

    #[test]
    fn the_same_inputs_give_the_same_digest_and_a_reference_needs_a_tag() {
        let dir = tempfile::tempdir().unwrap();
        let build = |out: &str| {
            ImageBuilder::new("localhost:5000/x/pause:3.10.2")
                .unwrap()
                .bytes("/pause", "p", 0o755)
                .entrypoint(["/pause"])
                .write(&dir.path().join(out))
                .unwrap()
        };
        assert_eq!(
            build("a.tar").manifest_digest,
            build("b.tar").manifest_digest
        );
        assert!(ImageBuilder::new("registry.k8s.io/pause").is_err());
        assert!(ImageBuilder::new("localhost:5000/pause").is_err());
        assert_eq!(tag_of("localhost:5000/pause:3.10").unwrap(), "3.10");
    }
}
