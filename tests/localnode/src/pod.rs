//! The pod worker: runs the containers of one pod as processes, probes them, restarts them
//! per `restartPolicy`, reports status, and stops them when the pod is deleted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::agent::Ctx;
use crate::expand::expand;
use crate::net::PodNet;
use crate::probe;
use crate::volumes::{self, PodVolumes};

/// A spawned task aborted when this handle is dropped.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Debug)]
enum Ev {
    Exited {
        i: usize,
        epoch: u64,
        code: i32,
        signal: Option<i32>,
    },
    Started {
        i: usize,
        epoch: u64,
    },
    Ready {
        i: usize,
        epoch: u64,
        ready: bool,
    },
    Unhealthy {
        i: usize,
        epoch: u64,
        why: String,
    },
}

#[derive(Debug, Clone)]
struct Term {
    exit_code: i32,
    signal: Option<i32>,
    reason: String,
    message: String,
    started_at: Timestamp,
    finished_at: Timestamp,
}

#[derive(Debug)]
struct Instance {
    pid: u32,
    started_at: Timestamp,
    exited: watch::Receiver<bool>,
    log: PathBuf,
    _probes: AbortOnDrop,
}

#[derive(Debug)]
#[allow(clippy::struct_excessive_bools)]
struct Ctr {
    spec: Container,
    program: Result<(&'static str, PathBuf), String>,
    epoch: u64,
    run: Option<Instance>,
    waiting: Option<(String, String)>,
    restarts: i32,
    crashes: u32,
    last_term: Option<Term>,
    term: Option<Term>,
    ready: bool,
    started: bool,
    ever_started: bool,
    next_start: Option<Instant>,
    restart_pending: bool,
}

/// Runs the pod received on `rx` until it is deleted.
pub(crate) async fn run(ctx: Arc<Ctx>, mut rx: watch::Receiver<Pod>) {
    let pod = rx.borrow_and_update().clone();
    let name = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    );
    let mut w = Worker::new(ctx, pod);
    w.main(&mut rx).await;
    tracing::debug!(pod = %name, "pod worker done");
}

struct Worker {
    ctx: Arc<Ctx>,
    pod: Pod,
    key: String,
    dir: PathBuf,
    net: Option<PodNet>,
    vols: PodVolumes,
    vol_error: Option<String>,
    ctrs: Vec<Ctr>,
    tx: mpsc::UnboundedSender<Ev>,
    rx: mpsc::UnboundedReceiver<Ev>,
    conditions: BTreeMap<&'static str, (bool, Timestamp)>,
    last_status: Option<Value>,
    start_time: Timestamp,
    terminating: bool,
    retry_at: Option<Instant>,
}

impl Worker {
    fn new(ctx: Arc<Ctx>, pod: Pod) -> Self {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let dir = ctx.dir.join("pods").join(format!("{ns}_{name}_{uid}"));
        let ctrs = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .map(|c| Ctr {
                program: ctx
                    .catalogue
                    .resolve(c.image.as_deref().unwrap_or_default()),
                spec: c.clone(),
                epoch: 0,
                run: None,
                waiting: None,
                restarts: 0,
                crashes: 0,
                last_term: None,
                term: None,
                ready: false,
                started: false,
                ever_started: false,
                next_start: Some(Instant::now()),
                restart_pending: false,
            })
            .collect();
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            vols: PodVolumes::new(dir.join("volumes")),
            ctx,
            key: format!("{ns}/{name}"),
            dir,
            pod,
            net: None,
            vol_error: None,
            ctrs,
            tx,
            rx,
            conditions: BTreeMap::new(),
            last_status: None,
            start_time: Timestamp::now(),
            terminating: false,
            retry_at: None,
        }
    }

    fn ns(&self) -> String {
        self.pod.metadata.namespace.clone().unwrap_or_default()
    }

    fn name(&self) -> String {
        self.pod.metadata.name.clone().unwrap_or_default()
    }

    async fn main(&mut self, rx: &mut watch::Receiver<Pod>) {
        if self.pod.metadata.deletion_timestamp.is_some() {
            self.terminate(rx).await;
            return;
        }
        if let Err(e) = std::fs::create_dir_all(self.dir.join("logs")) {
            tracing::error!(pod = %self.key, "create pod dir: {e}");
        }
        let has_init = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|v| !v.is_empty());
        if has_init {
            for c in &mut self.ctrs {
                c.waiting = Some((
                    "CreateContainerConfigError".into(),
                    "init containers are not supported by the local node".into(),
                ));
                c.next_start = None;
            }
        }
        match self.ctx.net.add_pod().await {
            Ok(net) => self.net = Some(net),
            Err(e) => {
                tracing::error!(pod = %self.key, "pod network: {e:#}");
                for c in &mut self.ctrs {
                    c.waiting = Some(("ContainerCreating".into(), format!("pod network: {e:#}")));
                    c.next_start = None;
                }
            }
        }
        let mut changes = self.ctx.changed.subscribe();
        self.sync_volumes();
        loop {
            self.start_due();
            self.push_status().await;
            let next = self
                .ctrs
                .iter()
                .filter_map(|c| c.next_start)
                .chain(self.retry_at)
                .min();
            tokio::select! {
                ev = self.rx.recv() => {
                    if let Some(ev) = ev { self.handle(ev); }
                }
                update = rx.changed() => {
                    if update.is_err() {
                        // The pod object is gone (force deletion): stop at once.
                        self.kill_all(Duration::ZERO).await;
                        self.teardown();
                        return;
                    }
                    self.pod = rx.borrow_and_update().clone();
                    if self.pod.metadata.deletion_timestamp.is_some() {
                        self.terminate(rx).await;
                        return;
                    }
                }
                change = changes.recv() => {
                    let relevant = match change {
                        Ok((kind, ns, name)) => ns == self.ns() && volumes::references(&self.pod, &kind, &name),
                        Err(_) => true,
                    };
                    if relevant { self.sync_volumes(); }
                }
                () = sleep_until(next) => {}
            }
        }
    }

    fn sync_volumes(&mut self) {
        let sources = self.ctx.sources.clone();
        let pod = self.pod.clone();
        self.vol_error = self.vols.sync(&pod, &sources).err();
        if let Some(e) = &self.vol_error {
            tracing::debug!(pod = %self.key, "volumes: {e}");
        }
    }

    fn start_due(&mut self) {
        let now = Instant::now();
        for i in 0..self.ctrs.len() {
            let due =
                self.ctrs[i].next_start.is_some_and(|t| t <= now) && self.ctrs[i].run.is_none();
            if due && self.net.is_some() && !self.terminating {
                self.ctrs[i].next_start = None;
                self.start(i);
            }
        }
    }

    #[allow(clippy::too_many_lines)]
    fn env_for(&self, c: &Container) -> Result<Vec<(String, String)>, String> {
        let ns = self.ns();
        let pod_ip = self
            .net
            .as_ref()
            .map(|n| n.ip.to_string())
            .unwrap_or_default();
        let node = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let host_ip = self
            .ctx
            .nodes
            .get(&node)
            .map(ToString::to_string)
            .unwrap_or_default();
        let mut vars: Vec<(String, String)> = vec![
            (
                "PATH".into(),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            ),
            ("HOSTNAME".into(), self.name()),
        ];
        let secret = |name: &str, key: &str| -> Option<Option<String>> {
            let s = self
                .ctx
                .sources
                .secrets
                .get(&ObjectRef::new(name).within(&ns))?;
            Some(
                s.data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|b| String::from_utf8_lossy(&b.0).into_owned()),
            )
        };
        let config_map = |name: &str, key: &str| -> Option<Option<String>> {
            let c = self
                .ctx
                .sources
                .config_maps
                .get(&ObjectRef::new(name).within(&ns))?;
            Some(c.data.as_ref().and_then(|d| d.get(key)).cloned())
        };
        for from in c.env_from.iter().flatten() {
            let prefix = from.prefix.clone().unwrap_or_default();
            if let Some(r) = &from.secret_ref {
                match self
                    .ctx
                    .sources
                    .secrets
                    .get(&ObjectRef::new(&r.name).within(&ns))
                {
                    Some(s) => {
                        for (k, v) in s.data.iter().flatten() {
                            vars.push((
                                format!("{prefix}{k}"),
                                String::from_utf8_lossy(&v.0).into_owned(),
                            ));
                        }
                    }
                    None if r.optional.unwrap_or(false) => {}
                    None => return Err(format!("secret {:?} not found", r.name)),
                }
            }
            if let Some(r) = &from.config_map_ref {
                match self
                    .ctx
                    .sources
                    .config_maps
                    .get(&ObjectRef::new(&r.name).within(&ns))
                {
                    Some(cm) => {
                        for (k, v) in cm.data.iter().flatten() {
                            vars.push((format!("{prefix}{k}"), v.clone()));
                        }
                    }
                    None if r.optional.unwrap_or(false) => {}
                    None => return Err(format!("configmap {:?} not found", r.name)),
                }
            }
        }
        for e in c.env.iter().flatten() {
            let known: HashMap<String, String> = vars.iter().cloned().collect();
            let value = if let Some(v) = &e.value {
                expand(v, &known)
            } else if let Some(src) = &e.value_from {
                if let Some(f) = &src.field_ref {
                    let meta = &self.pod.metadata;
                    let path = f.field_path.as_str();
                    let label = |m: &Option<BTreeMap<String, String>>, p: &str, pre: &str| {
                        let k = p.strip_prefix(pre)?.strip_suffix("']")?;
                        m.as_ref()?.get(k).cloned()
                    };
                    match path {
                        "metadata.name" => self.name(),
                        "metadata.namespace" => ns.clone(),
                        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
                        "spec.nodeName" => node.clone(),
                        "spec.serviceAccountName" => self
                            .pod
                            .spec
                            .as_ref()
                            .and_then(|s| s.service_account_name.clone())
                            .unwrap_or_default(),
                        "status.podIP" | "status.podIPs" => pod_ip.clone(),
                        "status.hostIP" | "status.hostIPs" => host_ip.clone(),
                        p if p.starts_with("metadata.labels['") => {
                            label(&meta.labels, p, "metadata.labels['").unwrap_or_default()
                        }
                        p if p.starts_with("metadata.annotations['") => {
                            label(&meta.annotations, p, "metadata.annotations['")
                                .unwrap_or_default()
                        }
                        other => return Err(format!("unsupported fieldRef {other:?}")),
                    }
                } else if let Some(r) = &src.secret_key_ref {
                    match secret(&r.name, &r.key) {
                        Some(Some(v)) => v,
                        _ if r.optional.unwrap_or(false) => continue,
                        _ => return Err(format!("secret {:?} key {:?} not found", r.name, r.key)),
                    }
                } else if let Some(r) = &src.config_map_key_ref {
                    match config_map(&r.name, &r.key) {
                        Some(Some(v)) => v,
                        _ if r.optional.unwrap_or(false) => continue,
                        _ => {
                            return Err(format!(
                                "configmap {:?} key {:?} not found",
                                r.name, r.key
                            ));
                        }
                    }
                } else {
                    return Err(format!("unsupported valueFrom for {:?}", e.name));
                }
            } else {
                String::new()
            };
            vars.retain(|(k, _)| *k != e.name);
            vars.push((e.name.clone(), value));
        }
        Ok(vars)
    }

    /// The shell script that mounts the container's volumes inside its mount namespace and
    /// then execs the program with its arguments.
    fn mount_script(&self, c: &Container, scratch: &Path) -> Result<String, String> {
        let mut script = String::from("set -e\n");
        let mut mounts: Vec<_> = c.volume_mounts.iter().flatten().collect();
        mounts.sort_by_key(|m| Path::new(&m.mount_path).components().count());
        let mut overlaid: BTreeSet<PathBuf> = BTreeSet::new();
        for (k, m) in mounts.iter().enumerate() {
            let Some(dir) = self.vols.dirs.get(&m.name) else {
                return Err(format!("volume {:?} is not defined or not ready", m.name));
            };
            let mut src = dir.clone();
            if let Some(sp) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                src = src.join(sp);
            }
            let target = Path::new(&m.mount_path);
            if !target.is_absolute() {
                return Err(format!("mountPath {:?} is not absolute", m.mount_path));
            }
            let is_file = std::fs::metadata(&src).is_ok_and(|md| md.is_file());
            if !is_file && !src.exists() {
                std::fs::create_dir_all(&src)
                    .map_err(|e| format!("subPath {}: {e}", src.display()))?;
            }
            if std::fs::symlink_metadata(target).is_err() {
                let mut anc = target.parent().unwrap_or(Path::new("/"));
                while !anc.exists() {
                    anc = anc.parent().unwrap_or(Path::new("/"));
                }
                if anc == Path::new("/") {
                    return Err(format!(
                        "mountPath {:?}: the local node cannot create top-level directories",
                        m.mount_path
                    ));
                }
                if !overlaid.iter().any(|o| anc.starts_with(o))
                    && !Self::inside_mount(&mounts[..k], anc)
                {
                    let s = scratch.join(format!("ovl{k}"));
                    for d in ["u", "w"] {
                        std::fs::create_dir_all(s.join(d)).map_err(|e| format!("scratch: {e}"))?;
                    }
                    let _ = writeln!(
                        script,
                        "mount -t overlay overlay -o lowerdir={a},upperdir={u},workdir={w} {a}",
                        a = q(anc),
                        u = q(&s.join("u")),
                        w = q(&s.join("w")),
                    );
                    overlaid.insert(anc.to_owned());
                }
                if is_file {
                    let parent = target.parent().unwrap_or(Path::new("/"));
                    let _ = writeln!(script, "mkdir -p {}\ntouch {}", q(parent), q(target));
                } else {
                    let _ = writeln!(script, "mkdir -p {}", q(target));
                }
            }
            let _ = writeln!(script, "mount --bind {} {}", q(&src), q(target));
            if m.read_only.unwrap_or(false) {
                let _ = writeln!(script, "mount -o remount,bind,ro {}", q(target));
            }
        }
        let wd = c.working_dir.clone().unwrap_or_else(|| "/".into());
        let _ = writeln!(script, "cd {}\nexec \"$0\" \"$@\"", q(Path::new(&wd)));
        Ok(script)
    }

    fn inside_mount(earlier: &[&k8s_openapi::api::core::v1::VolumeMount], p: &Path) -> bool {
        earlier.iter().any(|m| p.starts_with(&m.mount_path))
    }

    #[allow(clippy::too_many_lines)]
    fn start(&mut self, i: usize) {
        let spec = self.ctrs[i].spec.clone();
        let (program, path) = match &self.ctrs[i].program {
            Ok(p) => p.clone(),
            Err(msg) => {
                self.ctrs[i].waiting = Some(("ErrImagePull".into(), msg.clone()));
                return;
            }
        };
        if let Some(e) = self.vol_error.clone() {
            self.ctrs[i].waiting = Some(("ContainerCreating".into(), e));
            return;
        }
        let env = match self.env_for(&spec) {
            Ok(env) => env,
            Err(e) => {
                self.ctrs[i].waiting = Some(("CreateContainerConfigError".into(), e));
                return;
            }
        };
        let vars: HashMap<String, String> = env.iter().cloned().collect();
        let command: Vec<String> = spec
            .command
            .iter()
            .flatten()
            .map(|s| expand(s, &vars))
            .collect();
        let args: Vec<String> = spec
            .args
            .iter()
            .flatten()
            .map(|s| expand(s, &vars))
            .collect();
        let full: Vec<String> = if command.is_empty() {
            std::iter::once(program.to_owned()).chain(args).collect()
        } else {
            command.into_iter().chain(args).collect()
        };
        let base = Path::new(&full[0])
            .file_name()
            .map(|f| f.to_string_lossy().into_owned());
        if base.as_deref() != Some(program) {
            let msg = format!(
                "exec: \"{}\": executable file not found in $PATH (the image only holds {program})",
                full[0]
            );
            self.crashed(i, 128, None, "StartError", msg, Timestamp::now());
            return;
        }
        let scratch = self.dir.join(format!("ctr-{}", spec.name));
        let script = match self.mount_script(&spec, &scratch) {
            Ok(s) => s,
            Err(e) => {
                self.ctrs[i].waiting = Some(("CreateContainerError".into(), e));
                self.ctrs[i].next_start = Some(Instant::now() + Duration::from_secs(2));
                return;
            }
        };
        let Some(net) = self.net.clone() else { return };
        let c = &mut self.ctrs[i];
        let log = self.dir.join("logs").join(format!(
            "{}-{}.log",
            spec.name,
            c.restarts + i32::from(c.restart_pending)
        ));
        let spawned = spawn_process(&net.netns, &script, &path, &full[1..], &env, &log);
        match spawned {
            Ok(child) => {
                let (flag, exited) = watch::channel(false);
                c.epoch += 1;
                if c.restart_pending {
                    c.restarts += 1;
                    c.restart_pending = false;
                }
                let pid = child.id();
                let epoch = c.epoch;
                let tx = self.tx.clone();
                std::thread::spawn(move || wait_child(child, &flag, &tx, i, epoch));
                let probes = self.probes(i, epoch, pid, net.ip.into());
                let c = &mut self.ctrs[i];
                c.run = Some(Instance {
                    pid,
                    started_at: Timestamp::now(),
                    exited,
                    log,
                    _probes: probes,
                });
                c.waiting = None;
                c.ever_started = true;
                if let Ok(mut pids) = self.ctx.pids.lock() {
                    pids.insert(format!("{}/{}", self.key, spec.name), pid);
                }
                if let Ok(mut all) = self.ctx.started.lock() {
                    all.push(pid);
                }
                tracing::info!(pod = %self.key, container = %spec.name, pid, "started");
            }
            Err(e) => {
                self.crashed(
                    i,
                    128,
                    None,
                    "StartError",
                    format!("{e:#}"),
                    Timestamp::now(),
                );
            }
        }
    }

    #[allow(clippy::too_many_lines)]
    fn probes(&self, i: usize, epoch: u64, pid: u32, ip: IpAddr) -> AbortOnDrop {
        let spec = &self.ctrs[i].spec;
        let resolve = |p: Option<&k8s_openapi::api::core::v1::Probe>| {
            p.map(|p| probe::resolve(p, spec, ip)).transpose()
        };
        let tx = self.tx.clone();
        let probes = (
            resolve(spec.startup_probe.as_ref()),
            resolve(spec.readiness_probe.as_ref()),
            resolve(spec.liveness_probe.as_ref()),
        );
        AbortOnDrop(tokio::spawn(async move {
            let (startup, readiness, liveness) = match probes {
                (Ok(s), Ok(r), Ok(l)) => (s, r, l),
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                    let _ = tx.send(Ev::Unhealthy {
                        i,
                        epoch,
                        why: format!("invalid probe: {e:#}"),
                    });
                    return;
                }
            };
            if let Some((check, t)) = startup {
                tokio::time::sleep(t.initial_delay).await;
                let mut fails = 0;
                while !probe::run_once(&check, t.timeout, pid).await {
                    fails += 1;
                    if fails >= t.failure_threshold {
                        let _ = tx.send(Ev::Unhealthy {
                            i,
                            epoch,
                            why: "Startup probe failed".into(),
                        });
                        return;
                    }
                    tokio::time::sleep(t.period).await;
                }
            }
            let _ = tx.send(Ev::Started { i, epoch });
            let ready_loop = async {
                let Some((check, t)) = readiness else {
                    let _ = tx.send(Ev::Ready {
                        i,
                        epoch,
                        ready: true,
                    });
                    return;
                };
                tokio::time::sleep(t.initial_delay).await;
                let (mut ready, mut ok, mut bad) = (false, 0, 0);
                loop {
                    if probe::run_once(&check, t.timeout, pid).await {
                        ok += 1;
                        bad = 0;
                        if !ready && ok >= t.success_threshold {
                            ready = true;
                            let _ = tx.send(Ev::Ready { i, epoch, ready });
                        }
                    } else {
                        bad += 1;
                        ok = 0;
                        if ready && bad >= t.failure_threshold {
                            ready = false;
                            let _ = tx.send(Ev::Ready { i, epoch, ready });
                        }
                    }
                    tokio::time::sleep(t.period).await;
                }
            };
            let live_loop = async {
                let Some((check, t)) = liveness else { return };
                tokio::time::sleep(t.initial_delay).await;
                let mut bad = 0;
                loop {
                    if probe::run_once(&check, t.timeout, pid).await {
                        bad = 0;
                    } else {
                        bad += 1;
                        if bad >= t.failure_threshold {
                            let _ = tx.send(Ev::Unhealthy {
                                i,
                                epoch,
                                why: "Liveness probe failed".into(),
                            });
                            return;
                        }
                    }
                    tokio::time::sleep(t.period).await;
                }
            };
            tokio::join!(ready_loop, live_loop);
        }))
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Exited {
                i,
                epoch,
                code,
                signal,
            } => {
                if self.ctrs[i].epoch != epoch {
                    return;
                }
                let Some(inst) = self.ctrs[i].run.take() else {
                    return;
                };
                let exit_code = signal.map_or(code, |s| 128 + s);
                let message = if exit_code == 0 {
                    String::new()
                } else {
                    log_tail(&inst.log)
                };
                let reason = if exit_code == 0 { "Completed" } else { "Error" };
                tracing::info!(pod = %self.key, container = %self.ctrs[i].spec.name, exit_code, "exited");
                if Timestamp::now().duration_since(inst.started_at).as_secs() > 600 {
                    self.ctrs[i].crashes = 0;
                }
                let term = Term {
                    exit_code,
                    signal,
                    reason: reason.into(),
                    message,
                    started_at: inst.started_at,
                    finished_at: Timestamp::now(),
                };
                self.finish(i, term);
            }
            Ev::Started { i, epoch } if self.ctrs[i].epoch == epoch => self.ctrs[i].started = true,
            Ev::Ready { i, epoch, ready } if self.ctrs[i].epoch == epoch => {
                self.ctrs[i].ready = ready;
            }
            Ev::Unhealthy { i, epoch, why } if self.ctrs[i].epoch == epoch => {
                tracing::info!(pod = %self.key, container = %self.ctrs[i].spec.name, "{why}: restarting");
                self.ctrs[i].ready = false;
                let grace = self.grace();
                if let Some(inst) = &self.ctrs[i].run {
                    stop(inst.pid, inst.exited.clone(), grace);
                }
            }
            _ => {}
        }
    }

    fn crashed(
        &mut self,
        i: usize,
        exit_code: i32,
        signal: Option<i32>,
        reason: &str,
        message: String,
        started_at: Timestamp,
    ) {
        let term = Term {
            exit_code,
            signal,
            reason: reason.into(),
            message,
            started_at,
            finished_at: Timestamp::now(),
        };
        self.finish(i, term);
    }

    /// A container instance ended: restart it per `restartPolicy` with back-off, or keep it
    /// terminated.
    fn finish(&mut self, i: usize, term: Term) {
        let policy = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into());
        let restart = !self.terminating
            && match policy.as_str() {
                "Never" => false,
                "OnFailure" => term.exit_code != 0,
                _ => true,
            };
        let c = &mut self.ctrs[i];
        c.ready = false;
        c.started = false;
        if restart {
            let exp = c.crashes.min(16);
            let delay = self
                .ctx
                .backoff
                .saturating_mul(1 << exp)
                .min(self.ctx.max_backoff);
            c.crashes += 1;
            c.last_term = Some(term);
            c.term = None;
            c.restart_pending = true;
            c.next_start = Some(Instant::now() + delay);
            c.waiting = Some((
                "CrashLoopBackOff".into(),
                format!(
                    "back-off {}s restarting failed container={} pod={}",
                    delay.as_secs(),
                    c.spec.name,
                    self.pod.metadata.name.as_deref().unwrap_or_default()
                ),
            ));
        } else {
            c.term = Some(term);
            c.waiting = None;
            c.next_start = None;
        }
    }

    fn grace(&self) -> Duration {
        let secs = self
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                self.pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30);
        Duration::from_secs(u64::try_from(secs).unwrap_or(0))
    }

    /// Graceful deletion: not ready at once, SIGTERM, SIGKILL after the grace period, then
    /// the network goes and the pod object is removed (grace 0), as the kubelet does.
    async fn terminate(&mut self, rx: &mut watch::Receiver<Pod>) {
        self.terminating = true;
        self.publish_serving();
        self.push_status().await;
        let grace = self.grace();
        tracing::info!(pod = %self.key, ?grace, "terminating");
        self.kill_all(grace).await;
        self.teardown();
        let uid = self.pod.metadata.uid.clone();
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ns());
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid,
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        for _ in 0..5 {
            match api.delete(&self.name(), &dp).await {
                Ok(_) => return,
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => return,
                Err(e) => {
                    tracing::warn!(pod = %self.key, "delete: {e}");
                    if rx.has_changed().is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// Stops every running container (SIGTERM, SIGKILL after `grace`) and waits for them.
    async fn kill_all(&mut self, grace: Duration) {
        self.terminating = true;
        for c in &mut self.ctrs {
            c.next_start = None;
            if let Some(inst) = &c.run {
                stop(inst.pid, inst.exited.clone(), grace);
            }
        }
        let deadline = Instant::now() + grace + Duration::from_secs(10);
        while self.ctrs.iter().any(|c| c.run.is_some()) && Instant::now() < deadline {
            tokio::select! {
                ev = self.rx.recv() => match ev { Some(ev) => self.handle(ev), None => break },
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
    }

    fn teardown(&mut self) {
        self.terminating = true;
        self.publish_serving();
        if let Some(net) = self.net.take() {
            if let Ok(mut s) = self.ctx.serving.lock() {
                s.remove(&IpAddr::V4(net.ip));
            }
            self.ctx.net.remove_pod(&net);
            self.ctx.proxy_kick.notify_one();
        }
        if let Ok(mut pids) = self.ctx.pids.lock() {
            pids.retain(|k, _| !k.starts_with(&format!("{}/", self.key)));
        }
    }

    fn pod_ready(&self) -> bool {
        !self.terminating
            && !self.ctrs.is_empty()
            && self.ctrs.iter().all(|c| c.ready && c.run.is_some())
    }

    fn publish_serving(&self) {
        let Some(net) = &self.net else { return };
        let ready = self.pod_ready();
        let changed = self
            .ctx
            .serving
            .lock()
            .is_ok_and(|mut s| s.insert(IpAddr::V4(net.ip), ready) != Some(ready));
        if changed {
            self.ctx.proxy_kick.notify_one();
        }
    }

    fn condition(&mut self, kind: &'static str, status: bool) -> Value {
        let entry = self
            .conditions
            .entry(kind)
            .or_insert((status, Timestamp::now()));
        if entry.0 != status {
            *entry = (status, Timestamp::now());
        }
        json!({
            "type": kind,
            "status": if status { "True" } else { "False" },
            "lastTransitionTime": Time(entry.1),
            "lastProbeTime": Value::Null,
        })
    }

    async fn push_status(&mut self) {
        self.publish_serving();
        let containers_ready = self.ctrs.iter().all(|c| c.ready && c.run.is_some());
        let ready = self.pod_ready();
        let done = !self.ctrs.is_empty() && self.ctrs.iter().all(|c| c.term.is_some());
        let phase = if done {
            if self
                .ctrs
                .iter()
                .all(|c| c.term.as_ref().is_some_and(|t| t.exit_code == 0))
            {
                "Succeeded"
            } else {
                "Failed"
            }
        } else if self.ctrs.iter().all(|c| c.ever_started) {
            "Running"
        } else {
            "Pending"
        };
        let statuses: Vec<Value> = self.ctrs.iter().map(container_status).collect();
        let node = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let host_ip = self.ctx.nodes.get(&node).map(ToString::to_string);
        let pod_ip = self.net.as_ref().map(|n| n.ip.to_string());
        let conditions = vec![
            self.condition("PodReadyToStartContainers", self.net.is_some()),
            self.condition("Initialized", true),
            self.condition("ContainersReady", containers_ready),
            self.condition("Ready", ready),
            self.condition("PodScheduled", true),
        ];
        let status = json!({
            "phase": phase,
            "hostIP": host_ip,
            "hostIPs": host_ip.as_ref().map(|ip| vec![json!({"ip": ip})]),
            "podIP": pod_ip,
            "podIPs": pod_ip.as_ref().map(|ip| vec![json!({"ip": ip})]),
            "startTime": Time(self.start_time),
            "qosClass": "BestEffort",
            "conditions": conditions,
            "containerStatuses": statuses,
        });
        if self.last_status.as_ref() == Some(&status) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ns());
        let patch = json!({"status": status});
        match api
            .patch_status(
                &self.name(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(_) => {
                self.last_status = Some(status);
                self.retry_at = None;
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {
                self.last_status = Some(status);
                self.retry_at = None;
            }
            Err(e) => {
                tracing::warn!(pod = %self.key, "status update: {e}");
                self.retry_at = Some(Instant::now() + Duration::from_secs(1));
            }
        }
    }
}

fn container_status(c: &Ctr) -> Value {
    let term_json = |t: &Term| {
        json!({"terminated": {
            "exitCode": t.exit_code,
            "signal": t.signal,
            "reason": t.reason,
            "message": if t.message.is_empty() { None } else { Some(&t.message) },
            "startedAt": Time(t.started_at),
            "finishedAt": Time(t.finished_at),
        }})
    };
    let state = if let Some(r) = &c.run {
        json!({"running": {"startedAt": Time(r.started_at)}, "waiting": null, "terminated": null})
    } else if let Some(t) = &c.term {
        let mut v = term_json(t);
        v["waiting"] = Value::Null;
        v["running"] = Value::Null;
        v
    } else {
        let (reason, message) = c
            .waiting
            .clone()
            .unwrap_or_else(|| ("ContainerCreating".into(), String::new()));
        json!({"waiting": {"reason": reason, "message": if message.is_empty() { None } else { Some(message) }}, "running": null, "terminated": null})
    };
    json!({
        "name": c.spec.name,
        "image": c.spec.image,
        "imageID": c.program.as_ref().map(|(_, p)| format!("localnode://{}", p.display())).unwrap_or_default(),
        "containerID": c.run.as_ref().map(|r| format!("localnode://{}", r.pid)),
        "ready": c.ready && c.run.is_some(),
        "started": c.started && c.run.is_some(),
        "restartCount": c.restarts,
        "state": state,
        "lastState": c.last_term.as_ref().map_or_else(|| json!({}), term_json),
    })
}

/// Shell-quotes a path.
fn q(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(20)..].join("\n");
    let start = tail.len().saturating_sub(2048);
    let start = (start..tail.len())
        .find(|i| tail.is_char_boundary(*i))
        .unwrap_or(tail.len());
    tail[start..].to_owned()
}

/// Starts a container process: enter the pod's network namespace, unshare a private mount
/// namespace, mount the volumes, exec the program. The returned pid is the program's.
fn spawn_process(
    netns: &str,
    script: &str,
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    log: &Path,
) -> anyhow::Result<std::process::Child> {
    use anyhow::Context as _;
    let out = std::fs::File::create(log).with_context(|| format!("create {}", log.display()))?;
    let err = out.try_clone()?;
    let mut cmd = std::process::Command::new("nsenter");
    cmd.arg(format!("--net=/run/netns/{netns}"))
        .args([
            "--",
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
            script,
        ])
        .arg(program)
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err);
    cmd.spawn().context("start nsenter")
}

fn wait_child(
    mut child: std::process::Child,
    exited: &watch::Sender<bool>,
    tx: &mpsc::UnboundedSender<Ev>,
    i: usize,
    epoch: u64,
) {
    use std::os::unix::process::ExitStatusExt as _;
    let status = child.wait();
    exited.send_replace(true);
    let (code, signal) = match status {
        Ok(s) => (s.code().unwrap_or(0), s.signal()),
        Err(_) => (255, None),
    };
    let _ = tx.send(Ev::Exited {
        i,
        epoch,
        code,
        signal,
    });
}

/// SIGTERM now, SIGKILL after `grace` unless the process has exited.
fn stop(pid: u32, mut exited: watch::Receiver<bool>, grace: Duration) {
    #[allow(clippy::cast_possible_wrap)]
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    if *exited.borrow() {
        return;
    }
    if grace.is_zero() {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        return;
    }
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    tokio::spawn(async move {
        let gone = tokio::time::timeout(grace, exited.wait_for(|e| *e)).await;
        if gone.is_err() {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
    });
}
