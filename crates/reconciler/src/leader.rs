//! Leader election with a `coordination.k8s.io` Lease (`kamaji-rs-manager`, one per
//! `--watch-filter` value), so that one replica of the manager reconciles and another takes
//! over when it goes.

use anyhow::{Context as _, Result};
use kube::Client;
use tokio::sync::oneshot;
use tracing::info;

/// Name of the Lease of a manager without `--watch-filter`.
pub const LEASE_NAME: &str = "kamaji-rs-manager";

/// The Lease of a manager: [`LEASE_NAME`], or with `--watch-filter` one Lease per filter value
/// (`kamaji-rs-manager-<value>`; a value that is not a lower-case DNS label is replaced by the
/// first 16 hex digits of its SHA-256), so managers that split the tenants each elect their
/// own leader in the same namespace.
#[must_use]
pub fn lease_name(watch_filter: Option<&str>) -> String {
    use sha2::Digest as _;
    let Some(value) = watch_filter else {
        return LEASE_NAME.to_owned();
    };
    let label = value.len() <= 40
        && value.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && value.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if label {
        format!("{LEASE_NAME}-{value}")
    } else {
        let digest = hex::encode(sha2::Sha256::digest(value.as_bytes()));
        format!("{LEASE_NAME}-{}", &digest[..16])
    }
}

/// Waits until this process holds the Lease `lease` in `namespace` as `identity` (15 s lease,
/// 5 s grace); the receiver fires when leadership is lost.
///
/// # Errors
/// When the Lease cannot be read or written.
pub async fn acquire(
    client: Client,
    namespace: &str,
    lease: &str,
    identity: String,
) -> Result<oneshot::Receiver<()>> {
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client, lease)
        .with_namespace(namespace.trim())
        .with_identity(identity)
        .with_duration(15)
        .with_grace(5)
        .build()
        .await
        .context("leader election")?;
    let (mut leading, task) = manager.watch().await;
    info!("waiting to become leader");
    while !*leading.borrow_and_update() {
        leading.changed().await.context("leader election")?;
    }
    info!("became leader");
    let (lost_tx, lost_rx) = oneshot::channel();
    tokio::spawn(async move {
        // Keep the lease manager's task alive as long as leadership is watched.
        let _task = task;
        while leading.changed().await.is_ok() {
            if !*leading.borrow() {
                break;
            }
        }
        let _ = lost_tx.send(());
    });
    Ok(lost_rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_lease_per_filter_value() {
        assert_eq!(lease_name(None), "kamaji-rs-manager");
        assert_eq!(lease_name(Some("shard-a")), "kamaji-rs-manager-shard-a");
        let odd = lease_name(Some("Shard_A"));
        assert_eq!(odd.len(), "kamaji-rs-manager-".len() + 16);
        assert_ne!(odd, lease_name(Some("shard_a")));
    }
}
