//! Running programs as supervised child processes that are stopped on drop.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The Go garbage collector's target (`GOGC`, percent of live heap added before the next
/// collection; Go's default is 100) for the test environment's own programs: the management
/// cluster's etcd, kube-apiserver, controller-manager, scheduler and providers, and the
/// machines' containerd and kubelet. At 400 a management kube-apiserver starts on about a
/// fifth less CPU (2026-12-05: 4.8 against 6.0 CPU-seconds, `local_cluster`, three runs each)
/// for a larger heap, a good trade on 2 cores and 24 GiB running fifty environments a
/// `make test`. The tenants' pods run with their images' settings, as in production.
pub const GOGC: &str = "400";

/// A child process whose output goes to a log file and which is stopped (SIGTERM, then
/// SIGKILL after 5 s) when dropped — including while a panicking test unwinds.
#[derive(Debug)]
pub struct Supervised {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Supervised {
    /// Spawns `cmd`, sending stdout and stderr to `log`.
    ///
    /// # Errors
    /// When the log file cannot be created or the program cannot be started.
    ///
    /// `cmd` gets `GOGC` ([`GOGC`]) unless it sets its own; programs not written in Go ignore it.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Self> {
        if !cmd.get_envs().any(|(k, _)| k == "GOGC") {
            cmd.env("GOGC", GOGC);
        }
        let out = File::create(log).with_context(|| format!("create {}", log.display()))?;
        let err = out.try_clone()?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| {
                format!(
                    "start {name} ({})",
                    std::path::Path::new(cmd.get_program()).display()
                )
            })?;
        Ok(Self {
            name: name.to_owned(),
            child: Some(child),
            log: log.to_owned(),
        })
    }

    /// The process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The program's name as given to [`Supervised::spawn`].
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Path of the log file holding stdout and stderr.
    #[must_use]
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the log, for error messages.
    #[must_use]
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// `Some(status)` if the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Stops the process: SIGTERM, then SIGKILL after `grace`; reaps it.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if child.try_wait().ok().flatten().is_none() {
            #[allow(clippy::cast_possible_wrap)]
            let pid = Pid::from_raw(child.id() as i32);
            let _ = kill(pid, Signal::SIGTERM);
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
        }
        let _ = child.wait();
    }

    /// Kills the process at once with SIGKILL (a crash, as a test may want) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// The ports [`free_port`] hands out: below the kernel's ephemeral range (32768–60999 here,
/// `net.ipv4.ip_local_port_range`) and below Kubernetes' `NodePort` range (30000–32767), so an
/// outgoing connection or a Service can never take a port between the check and the program's
/// bind.
const FREE_PORTS: std::ops::Range<u16> = 20_000..30_000;

/// A free TCP port on 127.0.0.1 for a program the test starts.
///
/// Ports come from [`FREE_PORTS`], walked from a start derived from this process's id (two test
/// binaries running side by side walk different stretches) and never handed out twice by one
/// process; each is checked by binding it. Ports the kernel picks (`bind(:0)`) are not used: they
/// come from the ephemeral range, which every outgoing connection on the machine draws from, and
/// a program started a moment later once found its port taken ("bind: address already in use").
///
/// # Errors
/// When no port of the range can be bound.
pub fn free_port() -> Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let span = u32::from(FREE_PORTS.end - FREE_PORTS.start);
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let offset = (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let Some(port) = u16::try_from(offset)
            .ok()
            .and_then(|o| FREE_PORTS.start.checked_add(o))
        else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no free port on 127.0.0.1 in {FREE_PORTS:?}")
}
