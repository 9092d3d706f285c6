//! The host side of pod networking: a bridge with a private /24, one network namespace and
//! veth pair per pod, and the service CIDR made local on the host.
//!
//! Nothing here routes traffic off the machine: pod addresses live on a bridge that only
//! connects the agent's network namespaces to the host, and the whole service CIDR is a
//! `local` route on `lo`, so a ClusterIP packet is always delivered to the host itself,
//! where the agent's proxies listen.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};

use crate::ledger::{self, Ledger, STATE_DIR, Undo};

/// Third octet range tried for the pod subnet `10.213.<n>.0/24`.
const POD_NET_BASE: [u8; 2] = [10, 213];

/// The network of one pod.
#[derive(Debug, Clone)]
pub(crate) struct PodNet {
    /// Network namespace name (under `/run/netns`).
    pub netns: String,
    /// The pod's address.
    pub ip: Ipv4Addr,
    host_link: String,
}

/// The agent's bridge and address pool.
#[derive(Debug)]
pub(crate) struct HostNet {
    tag: String,
    bridge: String,
    host_ip: Ipv4Addr,
    ledger: Arc<Ledger>,
    free: Mutex<BTreeSet<u8>>,
    next_link: Mutex<u32>,
}

impl HostNet {
    /// Creates the bridge on a free `10.213.<n>.0/24` and makes `service_cidr` local.
    pub(crate) async fn create(tag: &str, ledger: Arc<Ledger>, service_cidr: &str) -> Result<Self> {
        let third = claim_subnet(&ledger).await?;
        let host_ip = Ipv4Addr::new(POD_NET_BASE[0], POD_NET_BASE[1], third, 1);
        let bridge = format!("{tag}br");
        ledger.push(Undo::Link(bridge.clone()))?;
        ledger::run(&["ip", "link", "add", &bridge, "type", "bridge"]).await?;
        ledger::run(&[
            "ip",
            "addr",
            "add",
            &format!("{host_ip}/24"),
            "dev",
            &bridge,
        ])
        .await?;
        ledger::run(&["ip", "link", "set", &bridge, "up"]).await?;

        let cidr: ipnet::Ipv4Net = service_cidr.parse().context("service CIDR must be IPv4")?;
        let cidr = cidr.trunc().to_string();
        let existing = ledger::run(&[
            "ip", "route", "show", "table", "local", "type", "local", &cidr,
        ])
        .await?;
        if existing.trim().is_empty() {
            ledger.push(Undo::LocalRoute(cidr.clone()))?;
            ledger::run(&[
                "ip", "route", "add", "local", &cidr, "dev", "lo", "table", "local",
            ])
            .await?;
        } else {
            tracing::warn!(%cidr, "the service CIDR is already local on this host (another agent?)");
        }
        Ok(Self {
            tag: tag.to_owned(),
            bridge,
            host_ip,
            ledger,
            free: Mutex::new((2..=254).collect()),
            next_link: Mutex::new(0),
        })
    }

    /// The host's address on the bridge (the pods' default gateway).
    pub(crate) fn host_ip(&self) -> Ipv4Addr {
        self.host_ip
    }

    /// The bridge's name.
    pub(crate) fn bridge(&self) -> &str {
        &self.bridge
    }

    /// Creates a network namespace with an address on the bridge for a pod.
    pub(crate) async fn add_pod(&self) -> Result<PodNet> {
        let last = {
            let mut free = self.free.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            let Some(last) = free.pop_first() else {
                bail!("the pod subnet is exhausted")
            };
            last
        };
        let n = {
            let mut next = self
                .next_link
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?;
            *next += 1;
            *next
        };
        let ip = Ipv4Addr::new(
            self.host_ip.octets()[0],
            self.host_ip.octets()[1],
            self.host_ip.octets()[2],
            last,
        );
        let net = PodNet {
            netns: format!("{}-p{n}", self.tag),
            ip,
            host_link: format!("{}v{:03x}", self.tag, n % 0x1000),
        };
        if let Err(e) = self.setup(&net).await {
            self.remove_pod(&net);
            return Err(e);
        }
        Ok(net)
    }

    async fn setup(&self, net: &PodNet) -> Result<()> {
        let ns = net.netns.as_str();
        let link = net.host_link.as_str();
        self.ledger.push(Undo::Netns(ns.to_owned()))?;
        ledger::run(&["ip", "netns", "add", ns]).await?;
        // Recorded too: a namespace is freed asynchronously, its veth would linger.
        self.ledger.push(Undo::Link(link.to_owned()))?;
        ledger::run(&[
            "ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns,
        ])
        .await?;
        ledger::run(&["ip", "link", "set", link, "master", &self.bridge, "up"]).await?;
        let addr = format!("{}/24", net.ip);
        let gw = self.host_ip.to_string();
        for args in [
            vec!["addr", "add", &addr, "dev", "eth0"],
            vec!["link", "set", "lo", "up"],
            vec!["link", "set", "eth0", "up"],
            vec!["route", "add", "default", "via", &gw],
        ] {
            let mut cmd = vec!["ip", "-n", ns];
            cmd.extend(args);
            ledger::run(&cmd).await?;
        }
        Ok(())
    }

    /// Kills what still runs in the pod's namespace and deletes it (its veth goes with it).
    pub(crate) fn remove_pod(&self, net: &PodNet) {
        self.ledger.undo(&Undo::Link(net.host_link.clone()));
        self.ledger.undo(&Undo::Netns(net.netns.clone()));
        if let Ok(mut free) = self.free.lock() {
            free.insert(net.ip.octets()[3]);
        }
    }
}

/// Claims a free `10.213.<n>.0/24` with an exclusive claim file (atomic across processes)
/// and checks that the host has no route or address in it.
async fn claim_subnet(ledger: &Ledger) -> Result<u8> {
    let routes = ledger::run(&["ip", "-4", "route", "show", "table", "all"]).await?;
    let addrs = ledger::run(&["ip", "-4", "addr", "show"]).await?;
    let start = u8::try_from(std::process::id() % 200).unwrap_or(0);
    for i in 0..=255u8 {
        let third = start.wrapping_add(i);
        let prefix = format!("{}.{}.{third}.", POD_NET_BASE[0], POD_NET_BASE[1]);
        if routes.contains(&prefix) || addrs.contains(&prefix) {
            continue;
        }
        let claim = Path::new(STATE_DIR).join(format!("subnet-{third}.claim"));
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&claim)
        {
            use std::io::Write as _;
            let _ = write!(f, "{}", std::process::id());
            ledger.push(Undo::File(claim))?;
            return Ok(third);
        }
    }
    bail!("no free 10.213.x.0/24 subnet for pods")
}
