//! An etcd member on loopback.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Result;

use crate::process::{Supervised, free_port};
use crate::tools::Tools;
use crate::wait::poll_until;

/// TLS material for an etcd that requires client certificates (files on disk).
#[derive(Debug, Clone)]
pub struct EtcdTls {
    /// Server certificate (PEM file); must cover 127.0.0.1.
    pub cert_file: PathBuf,
    /// Server key (PEM file).
    pub key_file: PathBuf,
    /// CA that client certificates must chain to (PEM file).
    pub client_ca_file: PathBuf,
}

/// A single-member etcd listening on a free loopback port; stopped on drop.
#[derive(Debug)]
pub struct Etcd {
    process: Supervised,
    url: String,
}

impl Etcd {
    /// Starts etcd with its data under `dir` (created), plain HTTP unless `tls` is given,
    /// and waits until it answers `/health` (plain HTTP only) or its port accepts connections.
    ///
    /// # Errors
    /// When etcd does not start within 30 s (the message carries the log tail).
    pub async fn start(tools: &Tools, dir: &Path, tls: Option<&EtcdTls>) -> Result<Self> {
        Self::launch(tools, dir, tls, None).await
    }

    async fn launch(
        tools: &Tools,
        dir: &Path,
        tls: Option<&EtcdTls>,
        also_on: Option<IpAddr>,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let client_port = free_port()?;
        let peer_port = free_port()?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let mut cmd = Command::new(tools.path("etcd"));
        let listen = match also_on {
            Some(ip) => format!("{url},{scheme}://{ip}:{client_port}"),
            None => url.clone(),
        };
        cmd.arg("--name=testenv")
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls={listen}"))
            .arg(format!("--advertise-client-urls={url}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=testenv={peer}"))
            .arg("--unsafe-no-fsync=true")
            .arg("--listen-metrics-urls=")
            .arg("--log-level=warn")
            .arg("--quota-backend-bytes=4294967296");
        if let Some(tls) = tls {
            cmd.arg(format!("--cert-file={}", tls.cert_file.display()))
                .arg(format!("--key-file={}", tls.key_file.display()))
                .arg(format!(
                    "--trusted-ca-file={}",
                    tls.client_ca_file.display()
                ))
                .arg("--client-cert-auth=true");
        }
        let mut process = Supervised::spawn("etcd", cmd, &dir.join("etcd.log"))?;
        poll_until(
            "etcd did not start",
            Duration::from_secs(30),
            Duration::from_millis(50),
            Some(&mut process),
            || async {
                tokio::net::TcpStream::connect(("127.0.0.1", client_port))
                    .await
                    .is_ok()
            },
        )
        .await?;
        Ok(Self { process, url })
    }

    /// Starts etcd with TLS under `dir`: it serves `cert_pem`/`key_pem` (which must cover
    /// 127.0.0.1) and requires client certificates chaining to `client_ca_pem`. The PEMs are
    /// written to `dir/tls/`.
    ///
    /// # Errors
    /// On file errors, or as [`Etcd::start`].
    pub async fn start_tls(
        tools: &Tools,
        dir: &Path,
        cert_pem: &str,
        key_pem: &str,
        client_ca_pem: &str,
    ) -> Result<Self> {
        Self::start_tls_also_on(tools, dir, cert_pem, key_pem, client_ca_pem, None).await
    }

    /// As [`Etcd::start_tls`], also listening on `also_on` (same port; the certificate must
    /// cover it): an address other machines of a private test network reach, such as the
    /// underlay gateway of kamaji-machine.
    ///
    /// # Errors
    /// As [`Etcd::start_tls`].
    pub async fn start_tls_also_on(
        tools: &Tools,
        dir: &Path,
        cert_pem: &str,
        key_pem: &str,
        client_ca_pem: &str,
        also_on: Option<IpAddr>,
    ) -> Result<Self> {
        let tls_dir = dir.join("tls");
        std::fs::create_dir_all(&tls_dir)?;
        let write = |name: &str, pem: &str| -> Result<PathBuf> {
            let p = tls_dir.join(name);
            std::fs::write(&p, pem)?;
            Ok(p)
        };
        let tls = EtcdTls {
            cert_file: write("server.crt", cert_pem)?,
            key_file: write("server.key", key_pem)?,
            client_ca_file: write("ca.crt", client_ca_pem)?,
        };
        Self::launch(tools, dir, Some(&tls), also_on).await
    }

    /// Client URL, e.g. `http://127.0.0.1:40123`.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The client port on 127.0.0.1.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_default()
    }

    /// The etcd process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}
