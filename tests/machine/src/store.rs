//! A containerd image store made once and shared by every machine that runs those images.
//!
//! Importing an image-layout tar costs containerd a full read, a copy into its content store
//! and an unpack into overlay snapshots: about 9 s for the management machines' 250 MB, on
//! every machine. An [`ImageStore`] does that once: a containerd of its own (in a private mount
//! namespace, its gRPC socket in the store's work directory, CRI off) imports the images and
//! stops, and the resulting root (content blobs, overlay snapshots, their metadata) is kept
//! under the system temp directory, named by a fingerprint of the images and of containerd
//! ([`ImageBuilder::fingerprint`]), for every later machine and test process. A store no test
//! has used for two hours is removed by the next [`ImageStore::prepare`], so new tools or
//! images do not fill the disk with old stores.
//!
//! A machine starts from a copy of it ([`ImageStore::copy_into`]): directories made anew,
//! every file hard-linked — the blobs and the committed snapshots are never written, a
//! container's changes go to its own upper directory — except the two bolt databases
//! (`*.db`), which are real copies because containerd writes them.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use kamaji_testenv::Tools;
use sha2::{Digest as _, Sha256};
use tokio::process::Command;

use crate::image::ImageBuilder;

/// `ctr` arguments that import an image tar into the namespace the kubelet's CRI uses
/// (`k8s.io`), for this machine kind's platform; the tar's path follows.
pub(crate) const CTR_IMPORT: [&str; 6] = [
    "-n",
    "k8s.io",
    "images",
    "import",
    "--platform",
    "linux/amd64",
];

/// A prepared store (see the module docs).
#[derive(Debug, Clone)]
pub struct ImageStore {
    root: PathBuf,
    references: Vec<String>,
}

impl ImageStore {
    /// The store holding `images`, made the first time this fingerprint is asked for (by any
    /// process; two at once both make it, one keeps it).
    ///
    /// # Errors
    /// When an image cannot be written or containerd cannot import it (the message names the
    /// image and holds containerd's log tail).
    pub async fn prepare(tools: &Tools, images: &[ImageBuilder]) -> Result<Self> {
        let containerd = std::fs::metadata(tools.path("containerd"))
            .context("containerd is missing from the tools (run `make tools`)")?;
        let mut text = format!(
            "containerd {} {:?}\n",
            containerd.len(),
            containerd.modified()?
        );
        for image in images {
            text.push_str(&image.fingerprint()?);
            text.push('\n');
        }
        let fingerprint = hex::encode(&Sha256::digest(text.as_bytes())[..8]);
        let references = images.iter().map(|i| i.reference().to_owned()).collect();
        let base = std::env::temp_dir().join("kamaji-machine-images");
        let root = base.join(&fingerprint);
        if !root.join(".complete").exists() {
            make(tools, images, &base, &fingerprint).await?;
        }
        // Marks this store used now, and removes the stores no test has used for a while: a
        // store is about 1 GB and a new tools build or image set makes new ones.
        if let Ok(dir) = std::fs::File::open(&root) {
            let _ = dir.set_modified(std::time::SystemTime::now());
        }
        prune(&base, &fingerprint);
        Ok(Self { root, references })
    }

    /// The images it holds.
    #[must_use]
    pub fn references(&self) -> &[String] {
        &self.references
    }

    /// Copies the store into `dir`, a containerd root about to be used (see the module docs).
    ///
    /// # Errors
    /// On a file system error.
    pub fn copy_into(&self, dir: &Path) -> Result<()> {
        copy_tree(&self.root, dir).with_context(|| {
            format!(
                "copy the image store {} into {}",
                self.root.display(),
                dir.display()
            )
        })
    }
}

/// How long a store nobody used is kept. A machine holds hard links to the files of the store
/// it was copied from, so removing a store never touches a running machine; only a process
/// about to copy it (between [`ImageStore::prepare`] and [`ImageStore::copy_into`], seconds)
/// could miss it.
const UNUSED_STORE_KEPT: Duration = Duration::from_hours(2);

/// Removes the stores (and work directories of unfinished ones) under `base` other than
/// `keep` that nobody has used for [`UNUSED_STORE_KEPT`].
fn prune(base: &Path, keep: &str) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let unused = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > UNUSED_STORE_KEPT);
        if unused && entry.file_name() != keep {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Makes the store `<base>/<fingerprint>`: a private containerd imports the images into a
/// work directory, which is renamed into place once containerd has stopped.
async fn make(
    tools: &Tools,
    images: &[ImageBuilder],
    base: &Path,
    fingerprint: &str,
) -> Result<()> {
    let work = base.join(format!("{fingerprint}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    for d in ["root", "state", "tars"] {
        std::fs::create_dir_all(work.join(d))?;
    }
    let socket = work.join("state/containerd.sock");
    let config = work.join("containerd.toml");
    std::fs::write(
        &config,
        format!(
            "version = 3\nroot = \"{}\"\nstate = \"{}\"\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = \"{}\"\n",
            work.join("root").display(),
            work.join("state").display(),
            socket.display()
        ),
    )?;
    let log = work.join("containerd.log");
    let mut containerd = Command::new("unshare")
        .args(["-m", "--propagation", "private"])
        .arg(tools.path("containerd"))
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .kill_on_drop(true)
        .spawn()
        .context("start containerd for the image store")?;
    let ctr = |args: &[&str]| {
        let mut cmd = Command::new(tools.path("ctr"));
        cmd.arg("--address").arg(&socket).args(args);
        cmd
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ctr(&["version"])
        .output()
        .await
        .is_ok_and(|o| o.status.success())
    {
        if Instant::now() > deadline {
            bail!(
                "containerd for the image store did not answer in 30 s: {}",
                tail(&log)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (i, image) in images.iter().enumerate() {
        let tar = work.join("tars").join(format!("{i}.tar"));
        image.write(&tar)?;
        let out = ctr(&CTR_IMPORT).arg(&tar).output().await?;
        if !out.status.success() {
            bail!(
                "import {} into the image store: {}{}",
                image.reference(),
                String::from_utf8_lossy(&out.stderr),
                tail(&log)
            );
        }
        std::fs::remove_file(&tar)?;
    }
    // A clean stop closes containerd's databases.
    if let Some(pid) = containerd.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    tokio::time::timeout(Duration::from_secs(20), containerd.wait())
        .await
        .context("containerd for the image store did not stop in 20 s")??;
    std::fs::write(work.join("root/.complete"), b"")?;
    let target = base.join(fingerprint);
    if std::fs::rename(work.join("root"), &target).is_err() && !target.join(".complete").exists() {
        bail!("could not move the image store to {}", target.display());
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// Copies `from` into `to`: directories with their modes, `*.db` files copied, every other
/// file and link hard-linked.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&source, &target)?;
            let mode = std::fs::metadata(&source)?.permissions().mode();
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))?;
        } else if entry.file_name().to_string_lossy().ends_with(".db") {
            std::fs::copy(&source, &target)?;
        } else if entry.file_name() != ".complete" {
            std::fs::hard_link(&source, &target)?;
        }
    }
    Ok(())
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    #[test]
    fn a_copy_links_every_file_but_copies_the_databases() {
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        let blob = from
            .path()
            .join("io.containerd.content.v1.content/blobs/sha256/ab");
        std::fs::create_dir_all(blob.parent().unwrap()).unwrap();
        std::fs::write(&blob, b"blob").unwrap();
        let db = from.path().join("io.containerd.metadata.v1.bolt/meta.db");
        std::fs::create_dir_all(db.parent().unwrap()).unwrap();
        std::fs::write(&db, b"db").unwrap();
        std::fs::write(from.path().join(".complete"), b"").unwrap();
        std::fs::set_permissions(db.parent().unwrap(), std::fs::Permissions::from_mode(0o700))
            .unwrap();

        copy_tree(from.path(), to.path()).unwrap();
        let linked = to
            .path()
            .join("io.containerd.content.v1.content/blobs/sha256/ab");
        assert_eq!(
            std::fs::metadata(&linked).unwrap().ino(),
            std::fs::metadata(&blob).unwrap().ino()
        );
        let copied = to.path().join("io.containerd.metadata.v1.bolt/meta.db");
        assert_ne!(
            std::fs::metadata(&copied).unwrap().ino(),
            std::fs::metadata(&db).unwrap().ino()
        );
        assert_eq!(std::fs::read(&copied).unwrap(), b"db");
        assert_eq!(
            std::fs::metadata(copied.parent().unwrap())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        assert!(!to.path().join(".complete").exists());
    }
}
