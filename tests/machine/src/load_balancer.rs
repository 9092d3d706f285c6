//! The load-balancer stand-in: the cloud's part of a Service of type `LoadBalancer`, which
//! nothing real here can play (a cloud provider's load balancer, or `MetalLB` with a router).
//!
//! For every such Service of the cluster it watches, it
//!
//! - assigns an address: the Service's `spec.loadBalancerIP` when that is a loopback address
//!   or a free address of [`LOAD_BALANCER_POOL`] (as `MetalLB` and cloud load balancers honour
//!   a requested address, so an address can follow a Service to another cluster), else a
//!   free address of the pool; writes it to `status.loadBalancer.ingress` (`ipMode: VIP`);
//! - listens on `<address>:<port>` for each TCP port and forwards each connection to that
//!   port's `nodePort` on the cluster's machines, round robin, trying the next machine when
//!   one does not answer — as a cloud load balancer targets node ports. kube-proxy on the
//!   machine then picks a ready endpoint, or rejects the connection when there is none.
//!
//! The pool's addresses are `/32`s on the underlay bridge of the test's network namespace
//! ([`crate::network`]), so the test, the manager and every machine and pod reach them; an
//! address is handed to one stand-in at a time per test process. Nothing else is
//! implemented: no health checks beyond a failed connect, no UDP, no `externalTrafficPolicy`.
//!
//! For tests of what a passing network failure does, [`LoadBalancer::outage`] closes every new
//! connection to a Service's address for a while, as a cloud load balancer does while it fails
//! over.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt as _};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::network::{LOAD_BALANCER_POOL, load_balancer_addresses};

/// Pool addresses handed out in this process, to which stand-in (by its id).
static IN_USE: Mutex<BTreeMap<Ipv4Addr, u64>> = Mutex::new(BTreeMap::new());
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A running stand-in; dropping it closes its listeners and frees its addresses.
pub struct LoadBalancer {
    id: u64,
    client: Client,
    assigned: Arc<Mutex<BTreeMap<String, Ipv4Addr>>>,
    outages: Outages,
    task: JoinHandle<()>,
}

/// Addresses whose new connections are closed until the instant given.
type Outages = Arc<Mutex<BTreeMap<Ipv4Addr, tokio::time::Instant>>>;

impl std::fmt::Debug for LoadBalancer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadBalancer")
            .field("id", &self.id)
            .field("assigned", &self.assigned)
            .finish_non_exhaustive()
    }
}

struct State {
    id: u64,
    client: Client,
    services: Store<Service>,
    nodes: Vec<Ipv4Addr>,
    kick: Arc<Notify>,
    assigned: Arc<Mutex<BTreeMap<String, Ipv4Addr>>>,
    outages: Outages,
}

struct Listener {
    node_port: Arc<Mutex<u16>>,
    task: JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LoadBalancer {
    /// Starts serving the `LoadBalancer` Services of `client`'s cluster, forwarding to the
    /// node ports of `nodes` (the machines' underlay addresses).
    ///
    /// # Errors
    /// When the Service watch does not start within 30 s.
    pub async fn start(client: Client, nodes: Vec<Ipv4Addr>) -> Result<Self> {
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let (services, writer) = reflector::store();
        let kick = Arc::new(Notify::new());
        let k = Arc::clone(&kick);
        let stream = reflector::reflector(
            writer,
            watcher(
                Api::<Service>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff(),
        );
        let watch = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while stream.next().await.is_some() {
                k.notify_one();
            }
        });
        tokio::time::timeout(Duration::from_secs(30), services.wait_until_ready())
            .await
            .context("the load-balancer stand-in's Service watch did not start in 30 s")??;
        let assigned = Arc::new(Mutex::new(BTreeMap::new()));
        let outages = Outages::default();
        let state = Arc::new(State {
            id,
            client: client.clone(),
            services,
            nodes,
            kick,
            assigned: Arc::clone(&assigned),
            outages: Arc::clone(&outages),
        });
        let task = tokio::spawn(async move {
            let _watch = AbortOnDrop(watch);
            run(state).await;
        });
        Ok(Self {
            id,
            client,
            assigned,
            outages,
            task,
        })
    }

    /// Closes every new connection to the address of Service `namespace/name` for `duration`
    /// from now (connections already open stay up), as a load balancer failing over does.
    ///
    /// # Errors
    /// When this stand-in has assigned the Service no address.
    pub fn outage(&self, namespace: &str, name: &str, duration: Duration) -> Result<()> {
        let ip = self.assigned_ip(namespace, name).with_context(|| {
            format!("service {namespace}/{name} has no address from this stand-in")
        })?;
        if let Ok(mut outages) = self.outages.lock() {
            outages.insert(ip, tokio::time::Instant::now() + duration);
        }
        Ok(())
    }

    /// Waits (at most `timeout`) until Service `namespace/name` has its address from this
    /// stand-in, and returns `<address>:<port>`.
    ///
    /// # Errors
    /// When no address is assigned in time.
    pub async fn address(
        &self,
        namespace: &str,
        name: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<SocketAddr> {
        let api: Api<Service> = Api::namespaced(self.client.clone(), namespace);
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
        let ip = self.assigned_ip(namespace, name).with_context(|| {
            format!("service {namespace}/{name} has an address this stand-in did not assign")
        })?;
        Ok(SocketAddr::new(ip.into(), port))
    }

    /// The address this stand-in assigned Service `namespace/name`, if any.
    fn assigned_ip(&self, namespace: &str, name: &str) -> Option<Ipv4Addr> {
        self.assigned
            .lock()
            .ok()?
            .get(&format!("{namespace}/{name}"))
            .copied()
    }
}

impl Drop for LoadBalancer {
    fn drop(&mut self) {
        self.task.abort();
        if let Ok(mut used) = IN_USE.lock() {
            used.retain(|_, owner| *owner != self.id);
        }
    }
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Reconciles addresses and listeners on every Service change; retries failed binds and
/// requested addresses another stand-in still holds (a Service moved from another cluster
/// whose old Service is still going) every 2 s.
async fn run(state: Arc<State>) {
    let mut listeners: HashMap<SocketAddr, Listener> = HashMap::new();
    loop {
        let (desired, unassigned) = desired(&state).await;
        listeners.retain(|addr, _| desired.contains_key(addr));
        let mut bind_failed = false;
        for (addr, node_port) in desired {
            if let Some(l) = listeners.get(&addr) {
                if let Ok(mut p) = l.node_port.lock() {
                    *p = node_port;
                }
                continue;
            }
            match TcpListener::bind(addr).await {
                Ok(sock) => {
                    let node_port = Arc::new(Mutex::new(node_port));
                    let task = tokio::spawn(serve(
                        sock,
                        state.nodes.clone(),
                        Arc::clone(&node_port),
                        Arc::clone(&state.outages),
                    ));
                    listeners.insert(addr, Listener { node_port, task });
                }
                Err(e) => {
                    bind_failed = true;
                    tracing::debug!(%addr, "load-balancer listener: {e}");
                }
            }
        }
        if bind_failed || unassigned {
            tokio::select! {
                () = state.kick.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(2)) => {}
            }
        } else {
            state.kick.notified().await;
        }
    }
}

/// Listen address → node port for every TCP port of every `LoadBalancer` Service; assigns
/// and frees addresses. The flag: a Service got no address this time.
async fn desired(state: &State) -> (BTreeMap<SocketAddr, u16>, bool) {
    let mut out = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let mut unassigned = false;
    for svc in state.services.state() {
        let Some(spec) = &svc.spec else { continue };
        if spec.type_.as_deref() != Some("LoadBalancer") {
            continue;
        }
        let key = format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any());
        seen.insert(key.clone());
        let Some(ip) = assign(state, &svc, &key).await else {
            unassigned = true;
            continue;
        };
        for port in spec.ports.iter().flatten() {
            if port.protocol.as_deref().is_some_and(|p| p != "TCP") {
                continue;
            }
            let (Ok(listen), Some(Ok(node_port))) =
                (u16::try_from(port.port), port.node_port.map(u16::try_from))
            else {
                continue;
            };
            out.insert(SocketAddr::new(ip.into(), listen), node_port);
        }
    }
    if let Ok(mut assigned) = state.assigned.lock() {
        let gone: Vec<Ipv4Addr> = assigned
            .iter()
            .filter(|(k, _)| !seen.contains(*k))
            .map(|(_, ip)| *ip)
            .collect();
        assigned.retain(|k, _| seen.contains(k));
        if let Ok(mut used) = IN_USE.lock() {
            for ip in gone {
                if used.get(&ip) == Some(&state.id) {
                    used.remove(&ip);
                }
            }
        }
    }
    (out, unassigned)
}

/// The Service's address (see the module docs), written to its status when it differs.
async fn assign(state: &State, svc: &Service, key: &str) -> Option<Ipv4Addr> {
    let requested = svc
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_ip.as_deref())
        .and_then(|ip| ip.parse::<Ipv4Addr>().ok());
    let ip = {
        let mut assigned = state.assigned.lock().ok()?;
        let mut used = IN_USE.lock().ok()?;
        let pool = load_balancer_addresses().ok()?;
        let free = |ip: &Ipv4Addr, used: &BTreeMap<Ipv4Addr, u64>| {
            used.get(ip).is_none_or(|owner| *owner == state.id)
        };
        let ip = match requested {
            Some(ip) if ip.is_loopback() => ip,
            Some(ip) if pool.contains(&ip) && free(&ip, &used) => ip,
            Some(ip) => {
                tracing::warn!(service = key, %ip, "requested address is neither loopback nor free in {LOAD_BALANCER_POOL}");
                return None;
            }
            None => match assigned.get(key) {
                Some(ip) => *ip,
                None => *pool.iter().find(|ip| !used.contains_key(ip))?,
            },
        };
        if pool.contains(&ip) {
            used.insert(ip, state.id);
        }
        assigned.insert(key.to_owned(), ip);
        ip
    };
    let current: Vec<String> = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref())
        .map(|i| i.iter().filter_map(|x| x.ip.clone()).collect())
        .unwrap_or_default();
    if current != [ip.to_string()] {
        let api: Api<Service> =
            Api::namespaced(state.client.clone(), &svc.namespace().unwrap_or_default());
        let patch = json!({"status": {"loadBalancer": {"ingress": [{"ip": ip.to_string(), "ipMode": "VIP"}]}}});
        if let Err(e) = api
            .patch_status(
                &svc.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            tracing::warn!(service = key, "load-balancer status: {e}");
        }
    }
    Some(ip)
}

/// Accepts connections and splices each to `<node>:<node port>`, starting at the next node
/// each time and trying the others when one does not answer within 2 s; closes them at once
/// during an outage of the listening address.
async fn serve(
    sock: TcpListener,
    nodes: Vec<Ipv4Addr>,
    node_port: Arc<Mutex<u16>>,
    outages: Outages,
) {
    let mut next = 0usize;
    loop {
        let Ok((mut conn, _)) = sock.accept().await else {
            continue;
        };
        let out = match sock.local_addr() {
            Ok(SocketAddr::V4(a)) => outages.lock().is_ok_and(|o| {
                o.get(a.ip())
                    .is_some_and(|until| *until > tokio::time::Instant::now())
            }),
            _ => false,
        };
        if out {
            drop(conn);
            continue;
        }
        let port = node_port.lock().map(|p| *p).unwrap_or_default();
        next = next.wrapping_add(1);
        let nodes = nodes.clone();
        tokio::spawn(async move {
            for k in 0..nodes.len() {
                let target = SocketAddr::new(nodes[(next + k) % nodes.len()].into(), port);
                let connect =
                    tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(target));
                if let Ok(Ok(mut upstream)) = connect.await {
                    let _ = conn.set_nodelay(true);
                    let _ = upstream.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
                    return;
                }
            }
        });
    }
}
