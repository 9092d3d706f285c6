//! Leader election with a `coordination.k8s.io` Lease (`kamaji-rs-manager`), so that one
//! replica of the manager reconciles and another takes over when it goes.

use anyhow::{Context as _, Result};
use kube::Client;
use tokio::sync::oneshot;
use tracing::info;

/// Name of the Lease.
pub const LEASE_NAME: &str = "kamaji-rs-manager";

/// Waits until this process holds the Lease in `namespace` as `identity` (15 s lease, 5 s
/// grace); the receiver fires when leadership is lost.
///
/// # Errors
/// When the Lease cannot be read or written.
pub async fn acquire(
    client: Client,
    namespace: &str,
    identity: String,
) -> Result<oneshot::Receiver<()>> {
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client, LEASE_NAME)
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
