//! Host changes the agent makes, recorded on disk so that they are undone on drop, and
//! so that a later run can undo what a killed run left behind.
//!
//! Every agent instance has a ledger file `/run/kamaji-localnode/<pid>-<n>.json` listing
//! its network namespaces, links, routes and claims. When the agent starts it sweeps the
//! ledgers of processes that no longer exist.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// Directory of ledgers and address claims.
pub(crate) const STATE_DIR: &str = "/run/kamaji-localnode";

/// One host change to undo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Undo {
    /// A network namespace: its processes are killed, then it is deleted.
    Netns(String),
    /// A network link (bridge or veth).
    Link(String),
    /// A `local <cidr> dev lo` route.
    LocalRoute(String),
    /// A file (an address claim).
    File(PathBuf),
}

impl Undo {
    /// Undoes the change; errors are ignored (the thing may already be gone).
    pub(crate) fn undo(&self) {
        match self {
            Self::Netns(ns) => {
                kill_netns_processes(ns);
                let _ = quiet(&["ip", "netns", "del", ns]);
            }
            Self::Link(link) => {
                let _ = quiet(&["ip", "link", "del", link]);
            }
            Self::LocalRoute(cidr) => {
                let _ = quiet(&[
                    "ip", "route", "del", "local", cidr, "dev", "lo", "table", "local",
                ]);
            }
            Self::File(path) => {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// The ledger of one agent instance.
#[derive(Debug)]
pub(crate) struct Ledger {
    path: PathBuf,
    /// `None` once [`Ledger::undo_all`] ran: later changes are undone at once.
    entries: Mutex<Option<Vec<Undo>>>,
}

impl Ledger {
    /// Creates the ledger file of this instance (`<pid>-<n>.json`).
    pub(crate) fn create(instance: u32) -> Result<Self> {
        std::fs::create_dir_all(STATE_DIR).with_context(|| format!("create {STATE_DIR}"))?;
        let path = Path::new(STATE_DIR).join(format!("{}-{instance}.json", std::process::id()));
        let ledger = Self {
            path,
            entries: Mutex::new(Some(Vec::new())),
        };
        ledger.save(&[])?;
        Ok(ledger)
    }

    /// Records a change (before making it, so that a crash in between is still undone).
    pub(crate) fn push(&self, undo: Undo) -> Result<()> {
        let mut entries = self
            .entries
            .lock()
            .map_err(|_| anyhow::anyhow!("ledger poisoned"))?;
        let Some(entries) = entries.as_mut() else {
            undo.undo();
            bail!("the local node is shutting down");
        };
        entries.push(undo);
        self.save(entries)
    }

    /// Undoes one recorded change now and forgets it.
    pub(crate) fn undo(&self, undo: &Undo) {
        undo.undo();
        if let Ok(mut entries) = self.entries.lock()
            && let Some(entries) = entries.as_mut()
        {
            entries.retain(|e| e != undo);
            let _ = self.save(entries);
        }
    }

    /// Undoes every recorded change, newest first, and removes the ledger file.
    pub(crate) fn undo_all(&self) {
        let entries = match self.entries.lock() {
            Ok(mut e) => e.take(),
            Err(p) => p.into_inner().take(),
        }
        .unwrap_or_default();
        for e in entries.iter().rev() {
            e.undo();
        }
        let _ = std::fs::remove_file(&self.path);
    }

    fn save(&self, entries: &[Undo]) -> Result<()> {
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(entries)?)?;
        std::fs::rename(&tmp, &self.path)?;
        Ok(())
    }
}

/// Undoes the ledgers of agent processes that no longer run (a killed earlier run).
pub(crate) fn sweep_stale() {
    let Ok(dir) = std::fs::read_dir(STATE_DIR) else {
        return;
    };
    for entry in dir.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let owner = if name.starts_with("subnet-") {
            std::fs::read_to_string(&path).unwrap_or_default()
        } else {
            name.split(['-', '.']).next().unwrap_or_default().to_owned()
        };
        let Ok(pid) = owner.trim().parse::<u32>() else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if Path::new(name)
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        {
            let entries: Vec<Undo> = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            tracing::info!(ledger = %path.display(), "undoing the leftovers of a killed run");
            for e in entries.iter().rev() {
                e.undo();
            }
        }
        let _ = std::fs::remove_file(&path);
    }
}

/// Kills (SIGKILL) every process in network namespace `ns` and waits up to 5 s for them to go.
pub(crate) fn kill_netns_processes(ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = netns_pids(ns);
        if pids.is_empty() || Instant::now() > deadline {
            return;
        }
        for pid in pids {
            #[allow(clippy::cast_possible_wrap)]
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Process ids in network namespace `ns` (excluding zombies).
pub(crate) fn netns_pids(ns: &str) -> Vec<u32> {
    let out = quiet(&["ip", "netns", "pids", ns]).unwrap_or_default();
    out.split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|pid: &u32| !is_zombie(*pid))
        .collect()
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            == Some("Z")
    })
}

/// Runs a command synchronously; returns stdout or an error with stderr.
pub(crate) fn quiet(args: &[&str]) -> Result<String> {
    let (prog, rest) = args.split_first().context("empty command")?;
    let out = Command::new(prog)
        .args(rest)
        .output()
        .with_context(|| format!("run {prog}"))?;
    if !out.status.success() {
        bail!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a command on tokio's process support; returns stdout or an error with stderr.
pub(crate) async fn run(args: &[&str]) -> Result<String> {
    let (prog, rest) = args.split_first().context("empty command")?;
    let out = tokio::process::Command::new(prog)
        .args(rest)
        .output()
        .await
        .with_context(|| format!("run {prog}"))?;
    if !out.status.success() {
        bail!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
