//! What the manager wrote, from the management API server's audit log.

use anyhow::Result;
use kamaji_testenv::AuditEvent;

use crate::Env;

impl Env {
    /// Writes requests of the manager's user, from the audit log (in a shared environment,
    /// from the current test's start).
    pub fn manager_writes(&self) -> Result<Vec<AuditEvent>> {
        Ok(self
            .cluster
            .audit_events()?
            .into_iter()
            .skip(self.audit_from.load(std::sync::atomic::Ordering::Relaxed))
            .filter(|e| e.user.username == self.manager.identity.user && e.is_write())
            .collect())
    }

    /// Marks the start of a test in a shared environment ([`crate::shared`]): the audit log is
    /// read from here on, as if the environment had started now.
    pub(crate) fn mark_test_start(&self) {
        let seen = self.cluster.audit_events().map_or(0, |e| e.len());
        self.audit_from
            .store(seen, std::sync::atomic::Ordering::Relaxed);
    }
}
