//! A real machine: containerd, runc and a kubelet in mount, network and UTS namespaces of
//! their own, started as a kubeadm node would be (shared/reference/real-machines.md §3).
//!
//! One holder process (`unshare -m -n -u --propagation slave sleep infinity`) owns the
//! namespaces; everything else enters them with `nsenter`. Inside:
//!
//! - private overlays over `/etc`, `/var`, `/run` and `/opt` (upper dirs in the machine's work
//!   dir), so kubeadm's writes never reach the host; `/var/lib/containerd` and
//!   `/var/lib/kubelet` are real directories of the work dir (the overlay snapshotter and
//!   cadvisor need a real filesystem);
//! - the three global sysctls the kubelet insists on (`vm.overcommit_memory=1`,
//!   `kernel.panic=10`, `kernel.panic_on_oops=1`) are files bind-mounted over their
//!   `/proc/sys` entries, so the kubelet reads what it expects and the kernel is left alone;
//! - hostname, `lo`, `eth0` with `10.200.0.(10+i)` on the test's underlay bridge (default route
//!   via the test's namespace, which has no uplink), `ip_forward=1`, a private `/etc/hosts` and
//!   a `resolv.conf` naming the underlay gateway, where nothing answers DNS;
//! - containerd with the CRI settings this machine kind needs ([`containerd_config`]);
//! - a kubelet supervisor standing in for systemd's `kubelet.service` with kubeadm's drop-in
//!   (restarts the kubelet 2 s after any exit, sources `kubeadm-flags.env` and
//!   `/etc/default/kubelet`), and a `systemctl` stand-in first on `PATH` so kubeadm's calls
//!   succeed;
//! - its own cgroup root `/kamaji-machine-<pid>-<name>` in every cgroup v1 hierarchy, undone
//!   with `rmdir`.
//!
//! The one host setting machines need is not theirs to make: real machines have a kernel each,
//! these share one, and with it the per-user inotify limits (`fs.inotify.max_user_instances`,
//! 128 by default; a user namespace would not help, its use is charged to the host's limit
//! too). Every kubelet, containerd, kube-apiserver and controller manager holds several
//! instances (one suite of two tests peaked at 75), so four suites side by side ran out and the
//! CAPI manager exited with `too many open files`. [`check_inotify_limits`] refuses to start a
//! machine below [`INOTIFY_MAX_USER_INSTANCES`] and [`INOTIFY_MAX_USER_WATCHES`], naming
//! `make host-limits` (`tests/host-limits.sh`), which raises them as kind's known issues ask of
//! a host that runs several nodes; `make test`, `make demo` and `make bench` run it first.
//!
//! Per-machine kubelet flags (`--cgroup-root`, `--node-ip`) live in `/etc/default/kubelet`, as
//! a machine image would set them; everything else comes from kubeadm.
//!
//! Every process of the machine (its mount namespace, its cgroups) is killed on drop, and the
//! cgroup directories removed. A ledger under [`STATE_DIR`] lets the next run do the same for a
//! run that was killed.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kamaji_testenv::Tools;
use kamaji_testenv::process::GOGC;
use serde::{Deserialize, Serialize};
use tokio::process::{Child, Command};

use crate::network::{self, UNDERLAY_BRIDGE, UNDERLAY_GATEWAY};
use crate::store::ImageStore;

/// Where machine ledgers live (one JSON file per machine).
pub const STATE_DIR: &str = "/run/kamaji-machine";

/// The pause image every machine's containerd pins as its sandbox image (kubeadm v1.36's
/// `constants.PauseVersion`).
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10.2";

/// The per-user inotify instances the host must allow (`fs.inotify.max_user_instances`): room
/// for four suites of machines side by side, at about 75 instances per suite, with margin.
/// `tests/host-limits.sh` raises the host to it.
pub const INOTIFY_MAX_USER_INSTANCES: u64 = 8192;

/// The per-user inotify watches the host must allow (`fs.inotify.max_user_watches`), kind's
/// figure for a host running several nodes. `tests/host-limits.sh` raises the host to it.
pub const INOTIFY_MAX_USER_WATCHES: u64 = 524_288;

/// Checks that the host allows [`INOTIFY_MAX_USER_INSTANCES`] inotify instances and
/// [`INOTIFY_MAX_USER_WATCHES`] watches per user (see the module docs for why machines need
/// them); changes nothing.
///
/// # Errors
/// When a limit is lower (the message names the setting, its value and `make host-limits`),
/// or cannot be read.
pub fn check_inotify_limits() -> Result<()> {
    check_inotify_limits_in(Path::new("/proc/sys/fs/inotify"))
}

/// [`check_inotify_limits`] on the `max_user_instances` and `max_user_watches` files in `dir`.
fn check_inotify_limits_in(dir: &Path) -> Result<()> {
    for (name, wanted) in [
        ("max_user_instances", INOTIFY_MAX_USER_INSTANCES),
        ("max_user_watches", INOTIFY_MAX_USER_WATCHES),
    ] {
        let current: u64 = std::fs::read_to_string(dir.join(name))
            .with_context(|| format!("read fs.inotify.{name}"))?
            .trim()
            .parse()
            .with_context(|| format!("parse fs.inotify.{name}"))?;
        if current < wanted {
            bail!(
                "fs.inotify.{name} is {current}, below the {wanted} that machines sharing this \
                 kernel need: run `make host-limits` as root (docs/development/real-machines.md)"
            );
        }
    }
    Ok(())
}

/// What a machine is.
#[derive(Debug, Clone)]
pub struct MachineSpec {
    /// Host name and Node name (a DNS label).
    pub name: String,
    /// Its underlay address is `10.200.0.(10 + index)`.
    pub index: u8,
    /// The images containerd has from the start (a copy of the store).
    pub images: ImageStore,
    /// The built version whose kubelet the machine runs (`versions/<v>/kubelet` of the tools,
    /// first on its `PATH`), as a machine image of that Kubernetes version has it; `None`:
    /// the tools' own ([`kamaji_testenv::KUBERNETES_VERSION`]).
    pub kubelet_version: Option<String>,
}

/// A running machine (see the module docs).
#[derive(Debug)]
pub struct Machine {
    name: String,
    address: Ipv4Addr,
    holder: Child,
    holder_pid: u32,
    dir: tempfile::TempDir,
    path: String,
    ledger: PathBuf,
    record: Record,
    daemons: Vec<Child>,
    /// The mount namespace, held open until the clean-up of `Drop` has run (see [`Record`]).
    _namespace_pin: std::fs::File,
}

/// The ledger entry of one machine.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    /// The test process that owns the machine.
    owner: u32,
    /// The inode of the machine's mount namespace.
    mount_namespace: u64,
    /// The cgroup root name (`kamaji-machine-<owner pid>-<name>`).
    cgroup_root: String,
    /// The namespace holder's pid and start time (`/proc/<pid>/stat` field 22): while that
    /// process lives, `mount_namespace` is still this machine's. Once the namespace is freed
    /// the kernel hands its inode number to the next namespace (another machine's), so a
    /// sweep kills by namespace only while the holder lives (0: unknown, never).
    #[serde(default)]
    holder: u32,
    #[serde(default)]
    holder_start: u64,
}

impl Record {
    /// Whether the holder this record names still runs (so its namespace is still ours).
    fn holder_alive(&self) -> bool {
        self.holder_start != 0 && start_time(self.holder) == Some(self.holder_start)
    }
}

/// A process's start time in clock ticks after boot (`/proc/<pid>/stat` field 22).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command (field 2) is in parentheses and may hold spaces: count after the last ')'.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

impl Machine {
    /// Creates the machine and starts containerd (its images copied from the store) and the
    /// kubelet supervisor; returns once containerd answers. The kubelet starts once kubeadm has
    /// written `/var/lib/kubelet/config.yaml`.
    ///
    /// Must run inside [`network::run_in_private_network`].
    ///
    /// # Errors
    /// When a namespace, mount, link or daemon cannot be set up; the message names the step.
    pub async fn start(tools: &Tools, spec: MachineSpec) -> Result<Self> {
        sweep();
        check_inotify_limits()?;
        let address = network::machine_address(spec.index)?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("kamaji-machine-{}-", spec.name))
            .tempdir()?;
        let holder = Command::new("unshare")
            .args([
                "-m",
                "-n",
                "-u",
                "--propagation",
                "slave",
                "sleep",
                "infinity",
            ])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("start the machine's namespace holder (unshare)")?;
        let holder_pid = holder.id().context("holder pid")?;
        let mount_namespace = wait_for_new_mount_namespace(holder_pid).await?;
        // Held open for the machine's life: the namespace (and so its inode number) cannot be
        // freed and reused by another machine before this one's clean-up has run.
        let namespace_pin = std::fs::File::open(format!("/proc/{holder_pid}/ns/mnt"))
            .context("open the machine's mount namespace")?;
        let record = Record {
            owner: std::process::id(),
            mount_namespace,
            // With the owner's pid: machines of two test processes may share a name.
            cgroup_root: format!("kamaji-machine-{}-{}", std::process::id(), spec.name),
            holder: holder_pid,
            holder_start: start_time(holder_pid).unwrap_or(0),
        };
        std::fs::create_dir_all(STATE_DIR)?;
        let ledger = Path::new(STATE_DIR).join(format!("{}-{}.json", record.owner, spec.name));
        std::fs::write(&ledger, serde_json::to_vec(&record)?)?;

        let version_bin = match &spec.kubelet_version {
            Some(v) => {
                let bin = tools.bin_dir().join("versions").join(v);
                std::fs::metadata(bin.join("kubelet")).with_context(|| {
                    format!("no kubelet of {v} in {} (`make tools`)", bin.display())
                })?;
                format!("{}:", bin.display())
            }
            None => String::new(),
        };
        let path = format!(
            "{}:{version_bin}{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            dir.path().join("bin").display(),
            tools.bin_dir().display()
        );
        let mut machine = Self {
            name: spec.name.clone(),
            address,
            holder,
            holder_pid,
            dir,
            path,
            ledger,
            record,
            daemons: Vec::new(),
            _namespace_pin: namespace_pin,
        };
        machine.write_work_files(tools)?;
        spec.images
            .copy_into(&machine.dir.path().join("containerd"))?;
        machine
            .exec_script(&machine.setup_script())
            .await
            .context("set up the machine's mounts, sysctls and host name")?;
        machine
            .connect()
            .await
            .context("connect the machine to the underlay")?;
        create_cgroup_root(&machine.record.cgroup_root)?;
        machine.start_daemons().await?;
        Ok(machine)
    }

    /// The machine's name (host name, Node name).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The machine's underlay address (its Node's `InternalIP`).
    #[must_use]
    pub fn address(&self) -> Ipv4Addr {
        self.address
    }

    /// Runs `argv` inside the machine (its namespaces and `PATH`), returning stdout.
    ///
    /// # Errors
    /// When the command cannot start or exits non-zero (the message holds its output).
    pub async fn exec(&self, argv: &[&str]) -> Result<String> {
        let out = self.command(argv).output().await?;
        if !out.status.success() {
            bail!(
                "`{}` on {} failed ({}): {}{}",
                argv.join(" "),
                self.name,
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Adds (or replaces) the route `cidr via gateway` inside the machine.
    ///
    /// # Errors
    /// As [`Machine::exec`].
    pub async fn route(&self, cidr: &str, gateway: Ipv4Addr) -> Result<()> {
        self.exec(&["ip", "route", "replace", cidr, "via", &gateway.to_string()])
            .await
            .map(drop)
    }

    /// Runs a shell script inside the machine (`sh -eu -c`), returning stdout.
    ///
    /// # Errors
    /// As [`Machine::exec`].
    pub async fn exec_script(&self, script: &str) -> Result<String> {
        self.exec(&["sh", "-eu", "-c", script]).await
    }

    /// Writes `contents` at `path` inside the machine (parents created), with `mode`.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<()> {
        let target = self.root().join(path.trim_start_matches('/'));
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&target, contents)
            .with_context(|| format!("write {path} on {}", self.name))?;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))?;
        Ok(())
    }

    /// Writes `image` and imports it into the machine's containerd (namespace `k8s.io`, where
    /// the kubelet finds it), as a registry pull would leave it.
    ///
    /// # Errors
    /// When the image cannot be written or containerd refuses it.
    pub async fn import_image(&self, image: &crate::image::ImageBuilder) -> Result<()> {
        let inside = format!("/tmp/import-{}.tar", std::process::id());
        let host = self.root().join(inside.trim_start_matches('/'));
        image.write(&host)?;
        let mut argv = vec!["ctr"];
        argv.extend(crate::store::CTR_IMPORT);
        argv.push(&inside);
        let imported = self.exec(&argv).await;
        let _ = std::fs::remove_file(&host);
        imported.map(drop)
    }

    /// Reads `path` inside the machine.
    ///
    /// # Errors
    /// When the file does not exist.
    pub fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let target = self.root().join(path.trim_start_matches('/'));
        std::fs::read(&target).with_context(|| format!("read {path} on {}", self.name))
    }

    /// The last `lines` lines of the kubelet's log (for failure messages).
    #[must_use]
    pub fn kubelet_log_tail(&self, lines: usize) -> String {
        tail(&self.dir.path().join("kubelet.log"), lines)
    }

    /// The last `lines` lines of containerd's log.
    #[must_use]
    pub fn containerd_log_tail(&self, lines: usize) -> String {
        tail(&self.dir.path().join("containerd.log"), lines)
    }

    /// The machine's root as the host sees it (through the holder's mount namespace).
    fn root(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.holder_pid))
    }

    fn command(&self, argv: &[&str]) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg("-t")
            .arg(self.holder_pid.to_string())
            .args(["-m", "-n", "-u", "--", "env", "-i"])
            .arg(format!("PATH={}", self.path))
            .arg("HOME=/root")
            // The machine's Go daemons (containerd, the kubelet) collect garbage as the test
            // environment's programs do (kamaji_testenv's GOGC); containers get their own
            // environment from their image and pod, not this one.
            .arg(format!("GOGC={GOGC}"))
            .args(argv)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    /// The supervisor, the `systemctl` stand-in, containerd's config and the CNI template.
    fn write_work_files(&self, tools: &Tools) -> Result<()> {
        let dir = self.dir.path();
        for sub in [
            "bin",
            "upper",
            "work",
            "containerd",
            "kubelet",
            "sysctl",
            "cni",
        ] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        for (name, body) in [
            ("bin/systemctl", SYSTEMCTL),
            ("kubelet-supervisor", KUBELET_SUPERVISOR),
        ] {
            std::fs::write(dir.join(name), body)?;
            std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o755))?;
        }
        std::fs::write(dir.join("cni.template"), CNI_TEMPLATE)?;
        std::fs::write(
            dir.join("containerd.toml"),
            containerd_config(
                &tools.path("runc"),
                &tools.bin_dir().join("cni"),
                &dir.join("cni.template"),
            ),
        )?;
        for (name, value) in SYSCTLS {
            std::fs::write(dir.join("sysctl").join(name), format!("{value}\n"))?;
        }
        Ok(())
    }

    /// The script that sets up mounts, sysctls, host name and files inside the namespaces.
    fn setup_script(&self) -> String {
        let w = self.dir.path().display();
        let name = &self.name;
        let address = self.address;
        let cgroup_root = &self.record.cgroup_root;
        let mut s = String::from("mount --make-rshared /\n");
        for d in ["etc", "var", "run", "opt"] {
            let _ = write!(
                s,
                "mkdir -p {w}/upper/{d} {w}/work/{d} /{d}\n\
                 mount -t overlay overlay -o lowerdir=/{d},upperdir={w}/upper/{d},workdir={w}/work/{d} /{d}\n"
            );
        }
        // What a fresh machine image has: none of the host's kubeadm, kubelet or CNI state,
        // and the static-pod directory the kubelet package creates.
        s.push_str(
            "rm -rf /etc/kubernetes /etc/cni /var/lib/etcd /etc/default/kubelet /run/containerd /run/kubelet.pid\n\
             mkdir -p /var/lib/containerd /var/lib/kubelet /etc/default /etc/cni/net.d\n\
             mkdir -p /etc/kubernetes/manifests\n",
        );
        let _ = write!(
            s,
            "mount --bind {w}/containerd /var/lib/containerd\n\
             mount --bind {w}/kubelet /var/lib/kubelet\n"
        );
        for (sysctl, _) in SYSCTLS {
            let proc_path = format!("/proc/sys/{}", sysctl.replace('.', "/"));
            let _ = writeln!(s, "mount --bind {w}/sysctl/{sysctl} {proc_path}");
        }
        let _ = write!(
            s,
            "hostname {name}\n\
             ip link set lo up\n\
             sysctl -q -w net.ipv4.ip_forward=1\n\
             printf '127.0.0.1 localhost\\n{address} {name}\\n' > /etc/hosts\n\
             echo {name} > /etc/hostname\n\
             rm -f /etc/resolv.conf\n\
             printf 'nameserver {UNDERLAY_GATEWAY}\\n' > /etc/resolv.conf\n\
             printf 'KUBELET_EXTRA_ARGS=\"--cgroup-root=/{cgroup_root} --node-ip={address}\"\\n' > /etc/default/kubelet\n"
        );
        s
    }

    /// A veth pair between the test's namespace (on the bridge) and the machine (`eth0`).
    async fn connect(&self) -> Result<()> {
        // Named by the address (unique in the test's namespace), not the host name: names
        // longer than 15 bytes are cut, and two cut names may collide.
        let outside = format!("km-{}", self.address.octets()[3]);
        // A machine of the same index that just stopped may still hold the name while the
        // kernel tears its namespace down.
        let _ = network::run(&["ip", "link", "del", &outside]);
        network::run(&[
            "ip",
            "link",
            "add",
            &outside,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &format!("/proc/{}/ns/net", self.holder_pid),
        ])?;
        network::run(&["ip", "link", "set", &outside, "master", UNDERLAY_BRIDGE])?;
        network::run(&["ip", "link", "set", &outside, "up"])?;
        self.exec_script(&format!(
            "ip addr add {}/24 dev eth0\nip link set eth0 up\nip route add default via {UNDERLAY_GATEWAY}\n",
            self.address
        ))
        .await?;
        Ok(())
    }

    async fn start_daemons(&mut self) -> Result<()> {
        let w = self.dir.path().to_path_buf();
        let log = |name: &str| -> Result<std::fs::File> {
            Ok(std::fs::File::create(w.join(format!("{name}.log")))?)
        };
        let containerd = self
            .command(&[
                "containerd",
                "--config",
                &w.join("containerd.toml").display().to_string(),
            ])
            .stdout(log("containerd")?)
            .stderr(log("containerd-stderr")?)
            .spawn()
            .context("start containerd")?;
        self.daemons.push(containerd);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.exec(&["ctr", "version"]).await.is_err() {
            if Instant::now() > deadline {
                bail!(
                    "containerd on {} did not answer in 30s: {}",
                    self.name,
                    tail(&w.join("containerd-stderr.log"), 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let supervisor = self
            .command(&[
                "bash",
                &w.join("kubelet-supervisor").display().to_string(),
                &w.join("kubelet.log").display().to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(log("supervisor")?)
            .spawn()
            .context("start the kubelet supervisor")?;
        self.daemons.push(supervisor);
        Ok(())
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        for daemon in &mut self.daemons {
            let _ = daemon.start_kill();
        }
        let _ = self.holder.start_kill();
        // The namespace is pinned by `_namespace_pin` (dropped after this), so its inode is
        // still this machine's.
        clean_up(&self.record, true);
        let _ = std::fs::remove_file(&self.ledger);
    }
}

/// Kills every process of the machine (those in its mount namespace only when
/// `by_namespace`: the namespace is known to be still the machine's) and removes its cgroup
/// directories.
fn clean_up(record: &Record, by_namespace: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut pids = if by_namespace {
            processes_in_mount_namespace(record.mount_namespace)
        } else {
            Vec::new()
        };
        pids.extend(processes_in_cgroups(&record.cgroup_root));
        pids.retain(|p| *p != std::process::id());
        if pids.is_empty() || Instant::now() > deadline {
            break;
        }
        for pid in pids {
            if let Ok(pid) = i32::try_from(pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for hierarchy in cgroup_hierarchies() {
        remove_tree(&hierarchy.join(&record.cgroup_root));
    }
}

/// Cleans up after machines whose test process no longer runs (a killed run).
fn sweep() {
    let Ok(entries) = std::fs::read_dir(STATE_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(text) = std::fs::read(entry.path()) else {
            continue;
        };
        let Ok(record) = serde_json::from_slice::<Record>(&text) else {
            continue;
        };
        if Path::new(&format!("/proc/{}", record.owner)).exists() {
            continue;
        }
        tracing::warn!(cgroup = %record.cgroup_root, "cleaning up a machine left by a killed run");
        // Its namespace only while its holder (same pid and start time) still pins it: a freed
        // namespace's inode number may already be another machine's. Its cgroups always.
        clean_up(&record, record.holder_alive());
        let _ = std::fs::remove_file(entry.path());
    }
}

/// Waits until the holder runs in a mount namespace other than ours, returning its inode.
async fn wait_for_new_mount_namespace(pid: u32) -> Result<u64> {
    let ours = std::fs::metadata("/proc/self/ns/mnt")?.ino();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(meta) = std::fs::metadata(format!("/proc/{pid}/ns/mnt"))
            && meta.ino() != ours
        {
            return Ok(meta.ino());
        }
        if Instant::now() > deadline {
            bail!("the namespace holder (pid {pid}) did not enter a new mount namespace");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn processes_in_mount_namespace(inode: u64) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}/ns/mnt")).is_ok_and(|m| m.ino() == inode)
        })
        .collect()
}

fn processes_in_cgroups(root: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for hierarchy in cgroup_hierarchies() {
        collect_procs(&hierarchy.join(root), &mut pids);
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

fn collect_procs(dir: &Path, pids: &mut Vec<u32>) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_procs(&e.path(), pids);
            }
        }
    }
}

/// Removes a cgroup directory tree, deepest first.
fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// The cgroup v1 hierarchies (every directory of `/sys/fs/cgroup` but the v2 `unified`).
fn cgroup_hierarchies() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()) && e.file_name() != "unified")
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Creates the machine's cgroup root in every v1 hierarchy (cpuset values copied from the
/// root, which a new cpuset cgroup needs before it can hold tasks).
fn create_cgroup_root(name: &str) -> Result<()> {
    for hierarchy in cgroup_hierarchies() {
        let dir = hierarchy.join(name);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("create the cgroup {}", dir.display()))?;
        if hierarchy.ends_with("cpuset") {
            for file in ["cpuset.cpus", "cpuset.mems"] {
                let value = std::fs::read_to_string(hierarchy.join(file))?;
                std::fs::write(dir.join(file), value.trim())?;
            }
        }
    }
    Ok(())
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The sysctls the kubelet writes host-wide unless they already hold these values.
const SYSCTLS: [(&str, &str); 3] = [
    ("vm.overcommit_memory", "1"),
    ("kernel.panic", "10"),
    ("kernel.panic_on_oops", "1"),
];

/// containerd's configuration (version 3) for this machine kind: the pinned pause image,
/// `restrict_oom_score_adj` (root here lacks `CAP_SYS_RESOURCE`, so runc cannot lower
/// `oom_score_adj`), the seccomp-enabled runc with the cgroupfs driver, and CNI from a
/// template that containerd renders once the kubelet knows the Node's pod CIDR.
#[must_use]
pub fn containerd_config(runc: &Path, cni_bin: &Path, cni_template: &Path) -> String {
    format!(
        r#"version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{PAUSE_IMAGE}"

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    BinaryName = "{runc}"
    SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "/etc/cni/net.d"
    conf_template = "{cni_template}"
"#,
        runc = runc.display(),
        cni_bin = cni_bin.display(),
        cni_template = cni_template.display(),
    )
}

/// The CNI template: bridge `cni0` (gateway, hairpin, no masquerade: the underlay routes pod
/// CIDRs) with host-local addresses from the Node's pod CIDRs.
const CNI_TEMPLATE: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "kamaji-machine",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [{{range $i, $r := .PodCIDRRanges}}{{if $i}}, {{end}}[{"subnet": "{{$r}}"}]{{end}}],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
"#;

/// Stands in for systemd's `kubelet.service` plus kubeadm's `10-kubeadm.conf` drop-in:
/// sources the same environment files, runs the kubelet with the same flags, and restarts it
/// 2 s after any exit (the kubelet only starts once kubeadm wrote its config). Written once
/// and never edited while it runs (bash reads scripts lazily).
const KUBELET_SUPERVISOR: &str = r#"#!/bin/bash
log=$1
while :; do
  KUBELET_KUBEADM_ARGS=
  KUBELET_EXTRA_ARGS=
  [ -f /var/lib/kubelet/kubeadm-flags.env ] && . /var/lib/kubelet/kubeadm-flags.env
  [ -f /etc/default/kubelet ] && . /etc/default/kubelet
  if [ -f /var/lib/kubelet/config.yaml ]; then
    kubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
      --kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml \
      $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS >>"$log" 2>&1 &
    echo $! >/run/kubelet.pid
    wait $!
    echo "kubelet exited: $?" >>"$log"
  fi
  sleep 2
done
"#;

/// A `systemctl` stand-in: kubeadm's calls succeed; `restart`/`stop kubelet` end the running
/// kubelet (the supervisor starts it again); `is-active` tells the truth for the kubelet and
/// says `systemd-resolved` is not running (so kubeadm keeps `/etc/resolv.conf`).
const SYSTEMCTL: &str = r#"#!/bin/sh
cmd=
unit=
for a in "$@"; do
  case $a in
    -*) ;;
    *) if [ -z "$cmd" ]; then cmd=$a; else unit=${a%.service}; fi ;;
  esac
done
kubelet_pid() { [ -f /run/kubelet.pid ] && cat /run/kubelet.pid; }
case $cmd in
  is-active)
    case $unit in
      kubelet) pid=$(kubelet_pid); [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && { echo active; exit 0; } ;;
      containerd) echo active; exit 0 ;;
    esac
    echo inactive; exit 3 ;;
  is-enabled) echo enabled ;;
  restart|stop|try-restart|reload-or-restart)
    if [ "$unit" = kubelet ]; then pid=$(kubelet_pid); [ -n "$pid" ] && kill "$pid" 2>/dev/null; fi ;;
esac
exit 0
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(instances: u64, watches: u64) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("max_user_instances"),
            format!("{instances}\n"),
        )
        .unwrap();
        std::fs::write(dir.path().join("max_user_watches"), format!("{watches}\n")).unwrap();
        dir
    }

    #[test]
    fn a_stale_record_names_its_namespace_only_while_its_holder_runs() {
        let me = std::process::id();
        let record = |holder, holder_start| Record {
            owner: 1,
            mount_namespace: 1,
            cgroup_root: String::new(),
            holder,
            holder_start,
        };
        let started = start_time(me).expect("our own start time");
        assert!(record(me, started).holder_alive());
        // Same pid, another start: the pid was reused, and so may the namespace's inode be.
        assert!(!record(me, started + 1).holder_alive());
        // A ledger written before the holder was recorded.
        let old: Record =
            serde_json::from_str(r#"{"owner":1,"mount_namespace":2,"cgroup_root":"x"}"#).unwrap();
        assert!(!old.holder_alive());
    }

    #[test]
    fn a_host_at_the_default_inotify_limits_is_refused_naming_the_setting_and_make_host_limits() {
        let default = limits(128, 192_536);
        let err = check_inotify_limits_in(default.path())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("fs.inotify.max_user_instances is 128, below the 8192")
                && err.contains("make host-limits"),
            "{err}"
        );
        let few_watches = limits(INOTIFY_MAX_USER_INSTANCES, 8192);
        let err = check_inotify_limits_in(few_watches.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("fs.inotify.max_user_watches is 8192"), "{err}");
        let raised = limits(INOTIFY_MAX_USER_INSTANCES, INOTIFY_MAX_USER_WATCHES + 1);
        check_inotify_limits_in(raised.path()).unwrap();
    }

    #[test]
    fn host_limits_sh_raises_to_the_figures_machines_check() {
        let script = include_str!("../../host-limits.sh");
        assert!(script.contains(&format!(
            "raise max_user_instances {INOTIFY_MAX_USER_INSTANCES}\n"
        )));
        assert!(script.contains(&format!(
            "raise max_user_watches {INOTIFY_MAX_USER_WATCHES}\n"
        )));
    }
}
