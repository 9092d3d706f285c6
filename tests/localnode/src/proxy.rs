//! Userspace service proxies: ClusterIP, NodePort and LoadBalancer addresses forwarded to
//! ready endpoints.
//!
//! A listener exists only while its Service has at least one ready endpoint; without one
//! the address refuses connections (as kube-proxy's reject rule does), so an outage during
//! a rolling update is observable.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::pod::AbortOnDrop;

/// What the proxy needs from the agent.
pub(crate) struct ProxyCtx {
    pub client: kube::Client,
    pub services: Store<Service>,
    pub slices: Store<EndpointSlice>,
    pub node_ips: Vec<Ipv4Addr>,
    pub lb_pool: Vec<Ipv4Addr>,
    pub service_cidr: ipnet::Ipv4Net,
    /// Local pod IP → serving (ready and not terminating); fresher than EndpointSlices.
    pub serving: Arc<Mutex<HashMap<IpAddr, bool>>>,
    pub kick: Arc<Notify>,
    /// Allocated load-balancer IPs, `namespace/name` → IP.
    pub lb_ips: Arc<Mutex<BTreeMap<String, Ipv4Addr>>>,
}

struct Listener {
    backends: Arc<Mutex<Vec<SocketAddr>>>,
    _task: AbortOnDrop,
}

/// Reconciles listeners whenever Services, EndpointSlices or local readiness change.
pub(crate) async fn run(ctx: Arc<ProxyCtx>) {
    let mut listeners: HashMap<SocketAddr, Listener> = HashMap::new();
    loop {
        let desired = desired(&ctx).await;
        let mut bind_failed = false;
        listeners.retain(|addr, _| desired.get(addr).is_some_and(|b| !b.is_empty()));
        for (addr, backends) in desired {
            if backends.is_empty() {
                continue;
            }
            if let Some(l) = listeners.get(&addr) {
                if let Ok(mut b) = l.backends.lock() {
                    *b = backends;
                }
                continue;
            }
            match TcpListener::bind(addr).await {
                Ok(sock) => {
                    let shared = Arc::new(Mutex::new(backends));
                    let task = tokio::spawn(serve(sock, Arc::clone(&shared)));
                    listeners.insert(
                        addr,
                        Listener {
                            backends: shared,
                            _task: AbortOnDrop(task),
                        },
                    );
                }
                Err(e) => {
                    bind_failed = true;
                    tracing::warn!(%addr, "service listener: {e}");
                }
            }
        }
        // Wait for the next change; retry failed binds after a while.
        if bind_failed {
            tokio::select! {
                () = ctx.kick.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(2)) => {}
            }
        } else {
            ctx.kick.notified().await;
        }
    }
}

/// Listen address → ready backends, for every Service; assigns load-balancer IPs.
async fn desired(ctx: &ProxyCtx) -> HashMap<SocketAddr, Vec<SocketAddr>> {
    let serving = ctx.serving.lock().map(|s| s.clone()).unwrap_or_default();
    let slices = ctx.slices.state();
    let mut out: HashMap<SocketAddr, Vec<SocketAddr>> = HashMap::new();
    for svc in ctx.services.state() {
        let ns = svc.namespace().unwrap_or_default();
        let name = svc.name_any();
        let Some(spec) = &svc.spec else { continue };
        if spec.type_.as_deref() == Some("ExternalName") {
            continue;
        }
        let lb_ip = if spec.type_.as_deref() == Some("LoadBalancer") {
            assign_lb(ctx, &svc).await
        } else {
            None
        };
        let cluster_ip = spec
            .cluster_ip
            .as_deref()
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
            .filter(|ip| ctx.service_cidr.contains(ip));
        for port in spec.ports.iter().flatten() {
            if port.protocol.as_deref().is_some_and(|p| p != "TCP") {
                continue;
            }
            let pname = port.name.clone().unwrap_or_default();
            let mut backends = Vec::new();
            for slice in slices.iter().filter(|s| {
                s.namespace().as_deref() == Some(ns.as_str())
                    && s.labels().get("kubernetes.io/service-name") == Some(&name)
            }) {
                let Some(p) = slice.ports.iter().flatten().find(|p| {
                    p.name.clone().unwrap_or_default() == pname
                        && p.protocol.as_deref().unwrap_or("TCP") == "TCP"
                }) else {
                    continue;
                };
                let Some(target) = p.port.and_then(|p| u16::try_from(p).ok()) else {
                    continue;
                };
                for ep in &slice.endpoints {
                    let ready = ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                    if !ready {
                        continue;
                    }
                    for a in &ep.addresses {
                        let Ok(ip) = a.parse::<IpAddr>() else {
                            continue;
                        };
                        if serving.get(&ip) == Some(&false) {
                            continue;
                        }
                        backends.push(SocketAddr::new(ip, target));
                    }
                }
            }
            backends.sort();
            backends.dedup();
            let Ok(svc_port) = u16::try_from(port.port) else {
                continue;
            };
            let mut listen = Vec::new();
            if let Some(ip) = cluster_ip {
                listen.push(SocketAddr::new(ip.into(), svc_port));
            }
            if let Some(np) = port.node_port.and_then(|p| u16::try_from(p).ok()) {
                listen.extend(
                    ctx.node_ips
                        .iter()
                        .map(|ip| SocketAddr::new((*ip).into(), np)),
                );
            }
            if let Some(ip) = lb_ip {
                listen.push(SocketAddr::new(ip.into(), svc_port));
            }
            for addr in listen {
                out.entry(addr)
                    .or_default()
                    .extend(backends.iter().copied());
            }
        }
    }
    out
}

/// The Service's load-balancer IP, written to its status when it differs: the requested
/// `spec.loadBalancerIP` when it is a loopback address (as MetalLB and cloud load balancers
/// honour a requested address, so an address can follow a Service to another cluster), else
/// one from the pool.
async fn assign_lb(ctx: &ProxyCtx, svc: &Service) -> Option<Ipv4Addr> {
    let key = format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any());
    let requested = svc
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_ip.as_deref())
        .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
        .filter(Ipv4Addr::is_loopback);
    let ip = {
        let mut ips = ctx.lb_ips.lock().ok()?;
        if let Some(ip) = requested {
            ips.insert(key.clone(), ip);
            ip
        } else if let Some(ip) = ips.get(&key) {
            *ip
        } else {
            let used: Vec<Ipv4Addr> = ips.values().copied().collect();
            let ip = *ctx.lb_pool.iter().find(|ip| !used.contains(ip))?;
            ips.insert(key.clone(), ip);
            ip
        }
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
            Api::namespaced(ctx.client.clone(), &svc.namespace().unwrap_or_default());
        let patch = json!({"status": {"loadBalancer": {"ingress": [{"ip": ip.to_string(), "ipMode": "VIP"}]}}});
        if let Err(e) = api
            .patch_status(
                &svc.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            tracing::warn!(service = %key, "load-balancer status: {e}");
        }
    }
    Some(ip)
}

async fn serve(sock: TcpListener, backends: Arc<Mutex<Vec<SocketAddr>>>) {
    let mut next = 0usize;
    loop {
        let Ok((conn, _)) = sock.accept().await else {
            continue;
        };
        let list = backends.lock().map(|b| b.clone()).unwrap_or_default();
        next = next.wrapping_add(1);
        tokio::spawn(async move {
            for k in 0..list.len() {
                let backend = list[(next + k) % list.len()];
                let connect =
                    tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(backend));
                if let Ok(Ok(upstream)) = connect.await {
                    splice(conn, upstream).await;
                    return;
                }
            }
        });
    }
}

/// Copies both ways until either side closes.
pub(crate) async fn splice(mut a: TcpStream, mut b: TcpStream) {
    let _ = a.set_nodelay(true);
    let _ = b.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
}

/// Forwards `listen` to `target` for as long as the returned task runs.
pub(crate) fn forward(sock: std::net::TcpListener, target: SocketAddr) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        let Ok(sock) = TcpListener::from_std(sock) else {
            return;
        };
        loop {
            let Ok((conn, _)) = sock.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                if let Ok(up) = TcpStream::connect(target).await {
                    splice(conn, up).await;
                }
            });
        }
    }))
}
