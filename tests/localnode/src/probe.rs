//! Probes (httpGet over HTTP/HTTPS, tcpSocket, exec) and a small HTTPS client for tests.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// What a probe checks, resolved against the pod.
#[derive(Debug, Clone)]
pub(crate) enum Check {
    Http {
        addr: SocketAddr,
        https: bool,
        path: String,
        host: String,
        headers: Vec<(String, String)>,
    },
    Tcp(SocketAddr),
    Exec(Vec<String>),
}

/// Timing of a probe.
#[derive(Debug, Clone)]
pub(crate) struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

fn secs(v: Option<i32>, default: u64) -> Duration {
    Duration::from_secs(
        v.and_then(|v| u64::try_from(v).ok())
            .filter(|v| *v > 0)
            .unwrap_or(default),
    )
}

fn count(v: Option<i32>, default: u32) -> u32 {
    v.and_then(|v| u32::try_from(v).ok())
        .filter(|v| *v > 0)
        .unwrap_or(default)
}

/// Resolves a probe of `container` in a pod at `pod_ip`. Named ports resolve against the
/// container's ports. A loopback `host` means the pod itself (the agent probes from the host).
pub(crate) fn resolve(
    probe: &Probe,
    container: &Container,
    pod_ip: IpAddr,
) -> Result<(Check, Timing)> {
    let timing = Timing {
        initial_delay: Duration::from_secs(
            probe
                .initial_delay_seconds
                .and_then(|v| u64::try_from(v).ok())
                .unwrap_or(0),
        ),
        period: secs(probe.period_seconds, 10),
        timeout: secs(probe.timeout_seconds, 1),
        success_threshold: count(probe.success_threshold, 1),
        failure_threshold: count(probe.failure_threshold, 3),
    };
    let port = |p: &IntOrString| -> Result<u16> {
        match p {
            IntOrString::Int(n) => Ok(u16::try_from(*n)?),
            IntOrString::String(name) => container
                .ports
                .iter()
                .flatten()
                .find(|cp| cp.name.as_deref() == Some(name.as_str()))
                .and_then(|cp| u16::try_from(cp.container_port).ok())
                .with_context(|| format!("probe names port {name:?} that the container lacks")),
        }
    };
    let target = |host: Option<&String>| -> IpAddr {
        host.and_then(|h| h.parse::<IpAddr>().ok())
            .filter(|ip| !ip.is_loopback())
            .unwrap_or(pod_ip)
    };
    let check = if let Some(h) = &probe.http_get {
        let ip = target(h.host.as_ref());
        Check::Http {
            addr: SocketAddr::new(ip, port(&h.port)?),
            https: h
                .scheme
                .as_deref()
                .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS")),
            path: h.path.clone().unwrap_or_else(|| "/".into()),
            host: ip.to_string(),
            headers: h
                .http_headers
                .iter()
                .flatten()
                .map(|x| (x.name.clone(), x.value.clone()))
                .collect(),
        }
    } else if let Some(t) = &probe.tcp_socket {
        Check::Tcp(SocketAddr::new(target(t.host.as_ref()), port(&t.port)?))
    } else if let Some(e) = &probe.exec {
        Check::Exec(e.command.clone().unwrap_or_default())
    } else {
        bail!("the local node supports httpGet, tcpSocket and exec probes only");
    };
    Ok((check, timing))
}

/// Runs a check once; `pid` is the container's process (exec probes enter its namespaces).
pub(crate) async fn run_once(check: &Check, timeout: Duration, pid: u32) -> bool {
    let fut = async {
        match check {
            Check::Http {
                addr,
                https,
                path,
                host,
                headers,
            } => {
                let tls = if *https {
                    match insecure_tls() {
                        Ok(cfg) => Some(cfg),
                        Err(_) => return false,
                    }
                } else {
                    None
                };
                match http_get(*addr, tls, None, host, path, headers).await {
                    Ok((status, _)) => (200..400).contains(&status),
                    Err(_) => false,
                }
            }
            Check::Tcp(addr) => tokio::net::TcpStream::connect(addr).await.is_ok(),
            Check::Exec(cmd) => {
                if cmd.is_empty() {
                    return false;
                }
                let target = pid.to_string();
                let mut c = tokio::process::Command::new("nsenter");
                c.args(["-t", &target, "-n", "-m", "--"]).args(cmd);
                c.stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .kill_on_drop(true);
                c.status().await.is_ok_and(|s| s.success())
            }
        }
    };
    tokio::time::timeout(timeout, fut).await.unwrap_or(false)
}

/// A rustls client config that accepts any server certificate (kubelet HTTPS probes do not
/// verify).
fn insecure_tls() -> Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `GET https://<addr><path>`, verifying the server certificate against `ca_pem` for the
/// address's IP; returns the status code and body. Connection errors keep their
/// [`std::io::Error`] (e.g. [`std::io::ErrorKind::ConnectionRefused`]) as the error's root
/// cause, so a test can tell a refused connection from other failures.
///
/// # Errors
/// On connection, TLS or HTTP errors, or when `ca_pem` holds no certificate.
pub async fn https_get(addr: SocketAddr, ca_pem: &str, path: &str) -> Result<(u16, String)> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.context("parse CA PEM")?)?;
    }
    if roots.is_empty() {
        bail!("no certificate in the CA PEM");
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::IpAddress(addr.ip().into());
    http_get(
        addr,
        Some(Arc::new(cfg)),
        Some(name),
        &addr.ip().to_string(),
        path,
        &[],
    )
    .await
}

async fn http_get(
    addr: SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
    name: Option<ServerName<'static>>,
    host: &str,
    path: &str,
    headers: &[(String, String)],
) -> Result<(u16, String)> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: kube-probe/localnode\r\nAccept: */*\r\nConnection: close\r\n"
    );
    for (k, v) in headers {
        let _ = write!(req, "{k}: {v}\r\n");
    }
    req.push_str("\r\n");
    match tls {
        Some(cfg) => {
            let name = name.unwrap_or_else(|| ServerName::IpAddress(addr.ip().into()));
            let stream = tokio_rustls::TlsConnector::from(cfg)
                .connect(name, tcp)
                .await?;
            exchange(stream, &req).await
        }
        None => exchange(tcp, &req).await,
    }
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, req: &str) -> Result<(u16, String)> {
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    // Servers may close TLS without close_notify; keep what was read.
    let _ = s.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| {
            format!(
                "no HTTP status in response {:?}",
                text.chars().take(80).collect::<String>()
            )
        })?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}
