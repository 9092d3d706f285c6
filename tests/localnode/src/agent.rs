//! The agent: nodes, the pod manager, the service proxy, and host cleanup.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kamaji_testenv::LocalCluster;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt as _};
use tokio::sync::{Notify, broadcast, watch};

use crate::image::Catalogue;
use crate::ledger::{self, Ledger};
use crate::net::HostNet;
use crate::node::{self, NodeInfo};
use crate::pod::{self, AbortOnDrop};
use crate::proxy::{self, ProxyCtx};
use crate::volumes::Sources;

static INSTANCES: AtomicU32 = AtomicU32::new(0);
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// State shared by the agent's tasks.
pub(crate) struct Ctx {
    pub client: Client,
    pub catalogue: Catalogue,
    pub net: HostNet,
    pub sources: Sources,
    /// `(kind, namespace, name)` of every Secret/ConfigMap change.
    pub changed: broadcast::Sender<(String, String, String)>,
    /// Node name → node IP.
    pub nodes: BTreeMap<String, Ipv4Addr>,
    pub dir: PathBuf,
    pub backoff: Duration,
    pub max_backoff: Duration,
    pub serving: Arc<Mutex<HashMap<IpAddr, bool>>>,
    pub proxy_kick: Arc<Notify>,
    /// `namespace/pod/container` → pid of the running process.
    pub pids: Mutex<BTreeMap<String, u32>>,
    /// Every pid started, for the leftover check on drop.
    pub started: Arc<Mutex<Vec<u32>>>,
}

/// Options for [`LocalNode`]; obtain with [`LocalNode::builder`].
#[derive(Debug, Clone)]
pub struct Builder {
    nodes: usize,
    prefix: String,
    lb_pool: Option<String>,
    backoff: Duration,
    max_backoff: Duration,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            nodes: 3,
            prefix: "node".into(),
            lb_pool: None,
            backoff: Duration::from_secs(10),
            max_backoff: Duration::from_mins(5),
        }
    }
}

impl Builder {
    /// Number of Node objects (default 3), named `<prefix>-<i>` in zones `zone-a`, `zone-b`, ….
    #[must_use]
    pub fn nodes(mut self, n: usize) -> Self {
        self.nodes = n.clamp(1, 26);
        self
    }

    /// Node name prefix (default `node`).
    #[must_use]
    pub fn name_prefix(mut self, prefix: &str) -> Self {
        prefix.clone_into(&mut self.prefix);
        self
    }

    /// Load-balancer addresses: a CIDR inside `127.0.0.0/8`, or one whose every address is
    /// already assigned in the agent's network namespace (a private test network such as
    /// kamaji-machine's underlay, whose machines reach them). Default: a loopback /25 derived
    /// from the process id, so concurrent agents do not collide.
    #[must_use]
    pub fn lb_pool(mut self, cidr: &str) -> Self {
        self.lb_pool = Some(cidr.to_owned());
        self
    }

    /// Crash-loop back-off: first delay and cap (default 10 s and 300 s, as the kubelet).
    #[must_use]
    pub fn crash_backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff = first;
        self.max_backoff = max.max(first);
        self
    }

    /// Registers the nodes and starts running the pods bound to them.
    ///
    /// # Errors
    /// When not running as root, when the host network cannot be set up, or when the
    /// cluster does not answer.
    pub async fn start(self, cluster: &LocalCluster) -> Result<LocalNode> {
        LocalNode::launch(self, cluster).await
    }
}

/// A running node agent; dropping it stops every pod process and removes every network
/// namespace, link, route and file it created on the host.
pub struct LocalNode {
    tasks: Vec<AbortOnDrop>,
    forwards: Mutex<HashMap<u16, (SocketAddr, AbortOnDrop)>>,
    ctx: Arc<Ctx>,
    nodes: Vec<NodeInfo>,
    lb_ips: Arc<Mutex<BTreeMap<String, Ipv4Addr>>>,
    api_address: Option<SocketAddr>,
    tag: String,
    ledger: Arc<Ledger>,
    started_pids: Arc<Mutex<Vec<u32>>>,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for LocalNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalNode")
            .field("tag", &self.tag)
            .field("nodes", &self.nodes)
            .finish_non_exhaustive()
    }
}

/// Fails with a clear message unless the process runs as root.
fn require_root() -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("?");
    if euid != "0" {
        bail!(
            "kamaji-localnode needs root (network namespaces, veth links, routes and mounts); \
             run the tests as root (effective uid is {euid})"
        );
    }
    Ok(())
}

fn etcd_version(bin: &std::path::Path) -> Result<String> {
    let out = std::process::Command::new(bin)
        .arg("--version")
        .output()
        .context("run etcd --version")?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("etcd Version:"))
        .map(|v| v.trim().to_owned())
        .context("etcd --version printed no version")
}

fn spawn_watch<K, F>(api: Api<K>, on_event: F) -> (Store<K>, AbortOnDrop)
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    F: Fn(&K) + Send + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Apply(o) | Event::Delete(o)) => on_event(&o),
                Ok(_) => {}
                Err(e) => tracing::debug!("watch: {e}"),
            }
        }
    });
    (reader, AbortOnDrop(task))
}

use kube::runtime::reflector::reflector;
use kube::runtime::watcher::watcher;

impl LocalNode {
    /// Options.
    #[must_use]
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Starts an agent with three nodes; shorthand for `LocalNode::builder().start(cluster)`.
    ///
    /// # Errors
    /// See [`Builder::start`].
    pub async fn start(cluster: &LocalCluster) -> Result<Self> {
        Builder::default().start(cluster).await
    }

    #[allow(clippy::too_many_lines)]
    async fn launch(opts: Builder, cluster: &LocalCluster) -> Result<Self> {
        require_root()?;
        ledger::sweep_stale();
        let instance = INSTANCES.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let tag = format!("kl{:06x}{:02x}", pid & 0x00ff_ffff, instance & 0xff);
        let ledger = Arc::new(Ledger::create(instance)?);
        let dir = tempfile::Builder::new()
            .prefix("kamaji-localnode-")
            .tempdir()?;
        let client = cluster.client();
        let tools = cluster.tools();
        let catalogue = Catalogue {
            bin: tools.bin_dir().to_owned(),
            kubernetes: kamaji_testenv::KUBERNETES_VERSION.to_owned(),
            etcd: etcd_version(&tools.path("etcd"))?,
        };
        // From here on, a failure must undo what was made: the ledger does on drop.
        let guard = LedgerGuard(Some(Arc::clone(&ledger)));
        let net = HostNet::create(&tag, Arc::clone(&ledger), cluster.service_cidr()).await?;
        tracing::info!(%tag, bridge = net.bridge(), host_ip = %net.host_ip(), "local node network ready");

        let block = [
            127u8,
            u8::try_from(100 + pid % 100).unwrap_or(100),
            u8::try_from(instance % 256).unwrap_or(0),
        ];
        let nodes: Vec<NodeInfo> = (0..opts.nodes)
            .map(|i| NodeInfo {
                name: format!("{}-{i}", opts.prefix),
                zone: format!(
                    "zone-{}",
                    char::from(b'a' + u8::try_from(i % 26).unwrap_or(0))
                ),
                ip: Ipv4Addr::new(
                    block[0],
                    block[1],
                    block[2],
                    u8::try_from(i + 1).unwrap_or(1),
                ),
            })
            .collect();
        let lb_pool: Vec<Ipv4Addr> = match &opts.lb_pool {
            Some(cidr) => {
                let net: ipnet::Ipv4Net =
                    cidr.parse().with_context(|| format!("LB pool {cidr:?}"))?;
                if net.addr().is_loopback() {
                    net.hosts().collect()
                } else {
                    let pool: Vec<Ipv4Addr> = if net.prefix_len() >= 31 {
                        net.hosts().collect()
                    } else {
                        // Every address of a private pool, network and broadcast included.
                        (u32::from(net.network())..=u32::from(net.broadcast()))
                            .map(Ipv4Addr::from)
                            .collect()
                    };
                    let local = ledger::run(&["ip", "-o", "-4", "addr", "show"]).await?;
                    if let Some(missing) =
                        pool.iter().find(|a| !local.contains(&format!("inet {a}/")))
                    {
                        bail!(
                            "the load-balancer pool {cidr} must lie in 127.0.0.0/8 or be assigned \
                             in this network namespace ({missing} is not)"
                        );
                    }
                    pool
                }
            }
            None => (128..=254)
                .map(|d| Ipv4Addr::new(block[0], block[1], block[2], d))
                .collect(),
        };
        node::register(&client, &nodes, kamaji_testenv::KUBERNETES_VERSION).await?;

        let (changed, _) = broadcast::channel(256);
        let kick = Arc::new(Notify::new());
        let mut tasks = Vec::new();
        let tx = changed.clone();
        let (secrets, t) = spawn_watch(Api::<Secret>::all(client.clone()), move |s: &Secret| {
            let _ = tx.send((
                "Secret".into(),
                s.namespace().unwrap_or_default(),
                s.name_any(),
            ));
        });
        tasks.push(t);
        let tx = changed.clone();
        let (config_maps, t) = spawn_watch(
            Api::<ConfigMap>::all(client.clone()),
            move |c: &ConfigMap| {
                let _ = tx.send((
                    "ConfigMap".into(),
                    c.namespace().unwrap_or_default(),
                    c.name_any(),
                ));
            },
        );
        tasks.push(t);
        let k = Arc::clone(&kick);
        let (services, t) = spawn_watch(Api::<Service>::all(client.clone()), move |_: &Service| {
            k.notify_one();
        });
        tasks.push(t);
        let k = Arc::clone(&kick);
        let (slices, t) = spawn_watch(
            Api::<EndpointSlice>::all(client.clone()),
            move |_: &EndpointSlice| k.notify_one(),
        );
        tasks.push(t);
        let ready = async {
            secrets.wait_until_ready().await?;
            config_maps.wait_until_ready().await?;
            services.wait_until_ready().await
        };
        tokio::time::timeout(READY_TIMEOUT, ready)
            .await
            .context("Secret/ConfigMap/Service watch not ready")??;
        tokio::time::timeout(READY_TIMEOUT, slices.wait_until_ready())
            .await
            .context("EndpointSlice watch not ready")??;

        let serving = Arc::new(Mutex::new(HashMap::new()));
        let started_pids = Arc::new(Mutex::new(Vec::new()));
        let ctx = Arc::new(Ctx {
            client: client.clone(),
            catalogue,
            net,
            sources: Sources {
                secrets,
                config_maps,
            },
            changed,
            nodes: nodes.iter().map(|n| (n.name.clone(), n.ip)).collect(),
            dir: dir.path().to_owned(),
            backoff: opts.backoff,
            max_backoff: opts.max_backoff,
            serving: Arc::clone(&serving),
            proxy_kick: Arc::clone(&kick),
            pids: Mutex::new(BTreeMap::new()),
            started: Arc::clone(&started_pids),
        });
        let lb_ips = Arc::new(Mutex::new(BTreeMap::new()));
        let service_cidr: ipnet::Ipv4Net = cluster.service_cidr().parse()?;
        let proxy_ctx = Arc::new(ProxyCtx {
            client: client.clone(),
            services,
            slices,
            node_ips: nodes.iter().map(|n| n.ip).collect(),
            lb_pool,
            service_cidr,
            serving,
            kick: Arc::clone(&kick),
            lb_ips: Arc::clone(&lb_ips),
        });
        tasks.push(AbortOnDrop(tokio::spawn(proxy::run(proxy_ctx))));
        tasks.push(AbortOnDrop(tokio::spawn(node::heartbeat(
            client.clone(),
            nodes.clone(),
            kamaji_testenv::KUBERNETES_VERSION.to_owned(),
        ))));
        tasks.push(AbortOnDrop(tokio::spawn(manage_pods(Arc::clone(&ctx)))));

        // The `kubernetes` Service address forwards to the management API server, whose
        // serving certificate covers it.
        let api_port: u16 = cluster
            .server_url()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .context("API server URL has no port")?;
        let svc: Service = Api::<Service>::namespaced(client.clone(), "default")
            .get("kubernetes")
            .await?;
        let mut api_address = None;
        if let Some(ip) = svc
            .spec
            .and_then(|s| s.cluster_ip)
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
        {
            let addr = SocketAddr::new(ip.into(), 443);
            match std::net::TcpListener::bind(addr)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
            {
                Ok(l) => {
                    tasks.push(proxy::forward(
                        l,
                        SocketAddr::from(([127, 0, 0, 1], api_port)),
                    ));
                    api_address = Some(addr);
                }
                Err(e) => tracing::warn!(%addr, "kubernetes service address: {e}"),
            }
        }
        std::mem::forget(guard);
        Ok(Self {
            tasks,
            forwards: Mutex::new(HashMap::new()),
            ctx,
            nodes,
            lb_ips,
            api_address,
            tag,
            ledger,
            started_pids,
            _dir: dir,
        })
    }

    /// The registered nodes (name, zone, address).
    #[must_use]
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.nodes.clone()
    }

    /// The host's address on the pod bridge: pods reach the host there.
    #[must_use]
    pub fn host_ip(&self) -> Ipv4Addr {
        self.ctx.net.host_ip()
    }

    /// Makes the host's `127.0.0.1:<port>` (e.g. a test etcd) reachable from pods and
    /// returns the address pods use (`<host_ip>:<port>`). Idempotent per port.
    ///
    /// # Errors
    /// When the address cannot be bound.
    pub fn expose_host_port(&self, port: u16) -> Result<SocketAddr> {
        let mut fwd = self
            .forwards
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?;
        if let Some((addr, _)) = fwd.get(&port) {
            return Ok(*addr);
        }
        let addr = SocketAddr::new(self.host_ip().into(), port);
        let sock = std::net::TcpListener::bind(addr).with_context(|| format!("bind {addr}"))?;
        sock.set_nonblocking(true)?;
        let task = proxy::forward(sock, SocketAddr::from(([127, 0, 0, 1], port)));
        fwd.insert(port, (addr, task));
        Ok(addr)
    }

    /// The management API server as pods reach it: the `kubernetes` Service address
    /// (`<first service IP>:443`), which its serving certificate covers. `None` when that
    /// address could not be bound.
    #[must_use]
    pub fn api_server_address(&self) -> Option<SocketAddr> {
        self.api_address
    }

    /// Waits (at most `timeout`) until Service `namespace/name` of type `LoadBalancer` has
    /// its address from the pool, and returns `<ip>:<port>`.
    ///
    /// # Errors
    /// When no address is assigned in time.
    pub async fn load_balancer_address(
        &self,
        namespace: &str,
        name: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<SocketAddr> {
        let api: Api<Service> = Api::namespaced(self.ctx.client.clone(), namespace);
        let has_ip = |s: Option<&Service>| {
            s.and_then(|s| s.status.as_ref())
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|l| l.ingress.as_ref())
                .is_some_and(|i| i.iter().any(|x| x.ip.is_some()))
        };
        tokio::time::timeout(
            timeout,
            kube::runtime::wait::await_condition(api, name, has_ip),
        )
        .await
        .with_context(|| {
            format!("service {namespace}/{name} got no load-balancer address in {timeout:?}")
        })??;
        let key = format!("{namespace}/{name}");
        let ip = self
            .lb_ips
            .lock()
            .ok()
            .and_then(|m| m.get(&key).copied())
            .with_context(|| format!("service {key} has an address this agent did not assign"))?;
        Ok(SocketAddr::new(ip.into(), port))
    }

    /// The pid of the running process of `container` in pod `namespace/pod`.
    #[must_use]
    pub fn container_pid(&self, namespace: &str, pod: &str, container: &str) -> Option<u32> {
        self.ctx
            .pids
            .lock()
            .ok()?
            .get(&format!("{namespace}/{pod}/{container}"))
            .copied()
    }

    /// Every process id this agent has started (running or not).
    #[must_use]
    pub fn started_pids(&self) -> Vec<u32> {
        self.started_pids
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default()
    }

    /// The prefix of every network namespace and link name this agent creates.
    #[must_use]
    pub fn name_tag(&self) -> &str {
        &self.tag
    }

    /// Stops the agent: removes the Node objects and their leases, then everything on the
    /// host (as drop does).
    pub async fn shutdown(self) {
        node::deregister(&self.ctx.client, &self.nodes).await;
        drop(self);
    }
}

impl Drop for LocalNode {
    fn drop(&mut self) {
        self.tasks.clear();
        if let Ok(mut f) = self.forwards.lock() {
            f.clear();
        }
        self.ledger.undo_all();
        // The processes were killed with their network namespaces; wait until reaped.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let pids = self.started_pids();
        while pids
            .iter()
            .any(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Undoes the ledger if start-up fails half-way.
struct LedgerGuard(Option<Arc<Ledger>>);

impl Drop for LedgerGuard {
    fn drop(&mut self) {
        if let Some(l) = self.0.take() {
            l.undo_all();
        }
    }
}

/// Watches pods and runs a worker for each pod bound to one of the agent's nodes.
async fn manage_pods(ctx: Arc<Ctx>) {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let mut senders: HashMap<String, watch::Sender<Pod>> = HashMap::new();
    let mut workers: Vec<AbortOnDrop> = Vec::new();
    let mut listed: HashSet<String> = HashSet::new();
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Apply(p) | Event::InitApply(p)) => {
                let Some(uid) = p.uid() else { continue };
                listed.insert(uid.clone());
                let node = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                if !ctx.nodes.contains_key(&node) {
                    continue;
                }
                if let Some(tx) = senders.get(&uid) {
                    tx.send_replace(p);
                    continue;
                }
                let phase = p
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default();
                if phase == "Succeeded" || phase == "Failed" {
                    continue;
                }
                let (tx, rx) = watch::channel(p);
                senders.insert(uid, tx);
                workers.retain(|w| !w.0.is_finished());
                workers.push(AbortOnDrop(tokio::spawn(pod::run(Arc::clone(&ctx), rx))));
            }
            Ok(Event::Delete(p)) => {
                if let Some(uid) = p.uid() {
                    senders.remove(&uid);
                }
            }
            Ok(Event::Init) => listed.clear(),
            Ok(Event::InitDone) => senders.retain(|uid, _| listed.contains(uid)),
            Err(e) => tracing::debug!("pod watch: {e}"),
        }
    }
}

/// A service CIDR (`10.<a>.<b>.0/24`) derived from the process id and a counter that no
/// route on the host uses yet, for a [`LocalCluster`] that runs beside other agents
/// (`LocalCluster::builder().service_cidr(&unique_service_cidr())`).
#[must_use]
pub fn unique_service_cidr() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let routes = ledger::quiet(&["ip", "-4", "route", "show", "table", "all"]).unwrap_or_default();
    let pid = std::process::id();
    loop {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let cidr = format!("10.{}.{}.0/24", 100 + pid % 100, (pid / 100 + n) % 256);
        if !routes.contains(cidr.trim_end_matches("0/24")) {
            return cidr;
        }
    }
}
