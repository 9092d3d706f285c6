//! What the manager wrote, from the management API server's audit log.

use anyhow::Result;
use kamaji_testenv::AuditEvent;

use crate::Env;

impl Env {
    /// Writes requests of the manager's user, from the audit log.
    pub fn manager_writes(&self) -> Result<Vec<AuditEvent>> {
        Ok(self
            .cluster
            .audit_events()?
            .into_iter()
            .filter(|e| e.user.username == self.manager.identity.user && e.is_write())
            .collect())
    }
}
