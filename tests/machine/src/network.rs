//! The test's private network: the test runs in a network namespace of its own, which holds
//! the machines' underlay bridge and the load-balancer stand-in's addresses.
//!
//! [`run_in_private_network`] runs a test body on a thread that first moves into a fresh
//! network namespace; the tokio runtime's threads and every process the test starts (etcd,
//! kube-apiserver, the manager, the machines) inherit it. So the host's
//! network is never changed: the bridge, routes, addresses and `ip_forward` all live in that
//! namespace and vanish with it when the test's threads exit.
//!
//! Layout (shared/reference/real-machines.md §3):
//!
//! | what | address |
//! |---|---|
//! | underlay bridge [`UNDERLAY_BRIDGE`] in the test's namespace | [`UNDERLAY_GATEWAY`]`/24` |
//! | machine `i` (`eth0` in its own namespace, default route via the gateway) | `10.200.0.(10 + i)` |
//! | load-balancer addresses (the cloud's role), `/32`s on the bridge | [`LOAD_BALANCER_POOL`] |

use std::future::Future;
use std::net::Ipv4Addr;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The underlay bridge in the test's network namespace.
pub const UNDERLAY_BRIDGE: &str = "kamaji0";
/// The test namespace's address on the underlay: the machines' default gateway.
pub const UNDERLAY_GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 1);
/// Load-balancer addresses handed out by the test's load-balancer stand-in (16 addresses).
pub const LOAD_BALANCER_POOL: &str = "10.200.0.208/28";

/// The underlay address of machine `index` (`10.200.0.(10 + index)`).
///
/// # Errors
/// When `index` is 190 or more (the address would leave the machines' range).
pub fn machine_address(index: u8) -> Result<Ipv4Addr> {
    if index >= 190 {
        bail!("machine index {index} is out of range (at most 189)");
    }
    Ok(Ipv4Addr::new(10, 200, 0, 10 + index))
}

/// Runs `body` on a new thread in a fresh network namespace with the underlay set up, on a
/// two-worker tokio runtime whose threads share that namespace.
///
/// A panic in `body` is resumed on the caller's thread, so test assertions behave as usual.
///
/// # Errors
/// When the namespace or the underlay cannot be created (not root), or `body` fails.
pub fn run_in_private_network<F, Fut, T>(body: F) -> Result<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T>>,
    T: Send + 'static,
{
    on_own_thread(
        || {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
                .context("unshare the network namespace (root needed)")?;
            set_up_underlay()
        },
        body,
    )
}

/// The calling thread's network namespace (a private network's, when called from inside
/// [`run_in_private_network`]), for [`run_in_network`] on other threads.
///
/// # Errors
/// When `/proc/thread-self/ns/net` cannot be opened.
pub fn current_network() -> Result<std::fs::File> {
    std::fs::File::open("/proc/thread-self/ns/net").context("open /proc/thread-self/ns/net")
}

/// Runs `body` as [`run_in_private_network`] does, but in the existing network namespace
/// `network` ([`current_network`] of a private network's thread) instead of a fresh one: a
/// second body in the network of a running environment, seeing its addresses and machines.
///
/// # Errors
/// When the namespace cannot be joined (not root), or `body` fails.
pub fn run_in_network<F, Fut, T>(network: std::fs::File, body: F) -> Result<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T>>,
    T: Send + 'static,
{
    on_own_thread(
        move || {
            nix::sched::setns(&network, nix::sched::CloneFlags::CLONE_NEWNET)
                .context("join the network namespace (root needed)")
        },
        body,
    )
}

/// Runs `enter` then `body` (on a two-worker tokio runtime built after `enter`, so its threads
/// share the namespace `enter` moved the thread to) on a new thread; a panic is resumed here.
fn on_own_thread<E, F, Fut, T>(enter: E, body: F) -> Result<T>
where
    E: FnOnce() -> Result<()> + Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T>>,
    T: Send + 'static,
{
    let thread = std::thread::Builder::new()
        .name("private-network".into())
        .spawn(move || -> Result<T> {
            enter()?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            runtime.block_on(body())
        })?;
    match thread.join() {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Loopback, the bridge, the load-balancer addresses and forwarding, in the calling
/// thread's (fresh) network namespace.
fn set_up_underlay() -> Result<()> {
    run(&["ip", "link", "set", "lo", "up"])?;
    run(&["ip", "link", "add", UNDERLAY_BRIDGE, "type", "bridge"])?;
    run(&[
        "ip",
        "addr",
        "add",
        &format!("{UNDERLAY_GATEWAY}/24"),
        "dev",
        UNDERLAY_BRIDGE,
    ])?;
    for address in load_balancer_addresses()? {
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{address}/32"),
            "dev",
            UNDERLAY_BRIDGE,
        ])?;
    }
    run(&["ip", "link", "set", UNDERLAY_BRIDGE, "up"])?;
    // Per network namespace: this one routes between the machines, their pods
    // and the load-balancer addresses.
    run(&["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])?;
    Ok(())
}

/// Every address of [`LOAD_BALANCER_POOL`].
///
/// # Errors
/// Never for the built-in pool (kept fallible for its parse).
pub fn load_balancer_addresses() -> Result<Vec<Ipv4Addr>> {
    let (base, len) = LOAD_BALANCER_POOL
        .split_once('/')
        .context("pool is a CIDR")?;
    let base: Ipv4Addr = base.parse()?;
    let len: u32 = len.parse()?;
    let count = 1u32 << (32 - len);
    Ok((0..count)
        .map(|i| Ipv4Addr::from(u32::from(base) + i))
        .collect())
}

/// Adds (or replaces) the route `cidr via gateway` in the test's namespace.
///
/// # Errors
/// When `ip route replace` fails.
pub fn route(cidr: &str, gateway: Ipv4Addr) -> Result<()> {
    run(&["ip", "route", "replace", cidr, "via", &gateway.to_string()])?;
    Ok(())
}

/// Runs a command in the calling thread's network namespace, failing with its stderr.
pub(crate) fn run(args: &[&str]) -> Result<String> {
    let (program, rest) = args.split_first().context("empty command")?;
    let out = Command::new(program)
        .args(rest)
        .output()
        .with_context(|| format!("run {program}"))?;
    if !out.status.success() {
        bail!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn machine_and_load_balancer_addresses_never_overlap() {
        let pool = load_balancer_addresses().unwrap();
        assert_eq!(pool.len(), 16);
        assert_eq!(pool[0], Ipv4Addr::new(10, 200, 0, 208));
        let last_machine = machine_address(189).unwrap();
        assert!(last_machine < pool[0]);
        assert!(machine_address(190).is_err());
        assert!(!pool.contains(&UNDERLAY_GATEWAY));
    }
}
