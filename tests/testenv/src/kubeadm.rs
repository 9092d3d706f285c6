//! The real `kubeadm join` token discovery against an API server endpoint.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, Result};

use crate::tools::Tools;

/// What `kubeadm join phase preflight` printed and whether it succeeded.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// Exit status 0.
    pub success: bool,
    /// Standard output followed by standard error.
    pub output: String,
}

impl Discovery {
    /// Whether discovery validated the endpoint's TLS certificate against the pinned CA
    /// (kubeadm's "TLS certificate validates against pinned roots").
    #[must_use]
    pub fn validated_pin(&self) -> bool {
        self.output
            .contains("TLS certificate validates against pinned roots")
    }
}

/// Runs `kubeadm join phase preflight <endpoint>` with bootstrap token `token` and CA pin
/// `ca_hash` (`sha256:<hex>`), all preflight errors ignored, as node `worker-1` with no
/// container runtime: token discovery (JWS-signed cluster-info, CA pin, TLS-verified
/// re-read) and the reads of kubeadm-config and kubelet-config with the token identity.
///
/// # Errors
/// When kubeadm cannot be run (a failed discovery is `success: false`).
pub fn join_preflight(
    tools: &Tools,
    endpoint: &str,
    token: &str,
    ca_hash: &str,
) -> Result<Discovery> {
    run(Command::new(tools.path("kubeadm"))
        .args(["join", "phase", "preflight", endpoint])
        .arg(format!("--token={token}"))
        .arg(format!("--discovery-token-ca-cert-hash={ca_hash}"))
        .args([
            "--ignore-preflight-errors=all",
            "--node-name=worker-1",
            "--cri-socket=unix:///nonexistent.sock",
            "-v=1",
        ]))
}

/// Runs `kubeadm join phase preflight --config=<config>` (a `JoinConfiguration` file).
///
/// # Errors
/// When kubeadm cannot be run.
pub fn join_preflight_config(tools: &Tools, config: &Path) -> Result<Discovery> {
    run(Command::new(tools.path("kubeadm"))
        .args(["join", "phase", "preflight", "-v=1"])
        .arg(format!("--config={}", config.display())))
}

fn run(cmd: &mut Command) -> Result<Discovery> {
    let out = cmd.output().context("running kubeadm")?;
    Ok(Discovery {
        success: out.status.success(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    })
}
