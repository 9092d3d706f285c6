//! The tenant-API stand-in of the simulated bench ([`crate::sim`]): kwok's pods run no
//! process, so nothing would answer on a tenant's endpoint. This stand-in plays only the part
//! of a tenant's kube-apiserver that the provider talks to, so simulated tenants can become
//! `Available` and the provider's steady state is the one of healthy tenants, not of broken
//! ones:
//!
//! - it makes the simulated cluster's whole service network local to the test's private
//!   network namespace (`ip route add local <cidr> dev lo`, as `AnyIP`), so a connection to
//!   any tenant's `ClusterIP` (its endpoint with `serviceType: ClusterIP`, and the address of
//!   the provider's super-admin kubeconfig) reaches one listener on port [`TENANT_PORT`];
//! - it serves TLS with the tenant's own serving certificate (the `tls.crt`/`tls.key` of the
//!   tenant's API-server Secret, read once per tenant, chosen by the address connected to), so
//!   the provider's clients verify it against the tenant CA exactly as they would the real one;
//! - over HTTP/1.1 it answers `GET /readyz` with `ok`, keeps what the provider server-side
//!   applies (`PATCH` with an apply patch: the object, given a `uid` and `resourceVersion`),
//!   returns it on `GET` and forgets it on `DELETE`; anything else is answered `404`.
//!
//! Nothing else of an API server is there: no authentication or authorization of the client
//! certificate, no admission, no field-manager merge (the last apply wins), no watch, no list.
//! Its requests are counted ([`TenantApiCounts`]) and reported apart from the management
//! cluster's.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result, bail};
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::{Secret, Service};
use kamaji_api::names::ObjectNames;
use kube::Client;
use kube::api::{Api, ListParams};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The port every simulated tenant's API is served on (`spec.network.serviceAddress` port
/// default, `6443`).
pub const TENANT_PORT: u16 = 6443;

/// The `User-Agent` prefix of the provider's requests (the manager's own, which its tenant
/// clients send too); every other client (Cluster API's cluster cache, which reaches each
/// tenant through its kubeconfig) is counted apart.
pub const PROVIDER_USER_AGENT: &str = "kamaji-rs-manager/";

/// Requests one group of clients made, by kind.
#[derive(Debug, Default)]
pub struct Counts {
    /// TLS connections accepted (counted by their first request's client).
    pub connections: AtomicU64,
    /// `GET /readyz`.
    pub readyz: AtomicU64,
    /// Server-side applies (`PATCH`).
    pub applies: AtomicU64,
    /// `GET` of an object (found or not).
    pub gets: AtomicU64,
    /// `DELETE` and anything else.
    pub other: AtomicU64,
}

impl Counts {
    /// `(connections, readyz, applies, gets, other)` now.
    #[must_use]
    pub fn snapshot(&self) -> [u64; 5] {
        [
            &self.connections,
            &self.readyz,
            &self.applies,
            &self.gets,
            &self.other,
        ]
        .map(|c| c.load(Ordering::Relaxed))
    }
}

/// Requests the stand-in answered: the provider's and everyone else's.
#[derive(Debug, Default)]
pub struct TenantApiCounts {
    /// The provider's ([`PROVIDER_USER_AGENT`]).
    pub provider: Counts,
    /// Every other client's.
    pub others: Counts,
}

/// [`TenantApiCounts`] at one time, each as [`Counts::snapshot`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TenantApiSnapshot {
    /// The provider's.
    pub provider: [u64; 5],
    /// Every other client's.
    pub others: [u64; 5],
}

impl TenantApiCounts {
    /// Both groups now.
    #[must_use]
    pub fn snapshot(&self) -> TenantApiSnapshot {
        TenantApiSnapshot {
            provider: self.provider.snapshot(),
            others: self.others.snapshot(),
        }
    }

    /// The group of a request with these headers.
    fn of(&self, headers: &hyper::HeaderMap) -> &Counts {
        let provider = headers
            .get(hyper::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(PROVIDER_USER_AGENT));
        if provider {
            &self.provider
        } else {
            &self.others
        }
    }
}

/// A running stand-in; dropping it stops it.
pub struct TenantApis {
    /// What it answered so far.
    pub counts: Arc<TenantApiCounts>,
    task: JoinHandle<()>,
}

impl Drop for TenantApis {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Per tenant address: its TLS acceptor (once read) and the objects applied to it, by path.
#[derive(Default)]
struct Tenants {
    acceptors: Mutex<HashMap<IpAddr, TlsAcceptor>>,
    objects: Mutex<HashMap<(IpAddr, String), serde_json::Value>>,
    next_version: AtomicU64,
}

impl TenantApis {
    /// Makes `service_cidr` local (the calling thread's network namespace must be the test's
    /// private one: see [`kamaji_machine::run_in_private_network`]) and starts answering on
    /// `0.0.0.0:`[`TENANT_PORT`] for every Service of that range whose tenant is named
    /// `cluster`/`kcp` in its namespace; `client` reads the Services and serving certificates.
    ///
    /// # Errors
    /// When the route cannot be added or the port is taken.
    pub async fn start(
        client: Client,
        service_cidr: &str,
        cluster: &str,
        kcp: &str,
    ) -> Result<Self> {
        let status = std::process::Command::new("ip")
            .args(["route", "add", "local", service_cidr, "dev", "lo"])
            .status()
            .context("run ip route")?;
        if !status.success() {
            bail!("ip route add local {service_cidr} dev lo: {status}");
        }
        let listener = TcpListener::bind(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            TENANT_PORT,
        ))
        .await
        .with_context(|| format!("bind port {TENANT_PORT}"))?;
        let counts = Arc::new(TenantApiCounts::default());
        let tenants = Arc::new(Tenants::default());
        let secret_name = ObjectNames::new(cluster, kcp).apiserver_certificate_secret();
        let task = tokio::spawn({
            let counts = Arc::clone(&counts);
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let Ok(local) = stream.local_addr() else {
                        continue;
                    };
                    let (client, counts, tenants, secret_name) = (
                        client.clone(),
                        Arc::clone(&counts),
                        Arc::clone(&tenants),
                        secret_name.clone(),
                    );
                    tokio::spawn(async move {
                        let ip = local.ip();
                        let Ok(acceptor) = acceptor(&client, &tenants, ip, &secret_name).await
                        else {
                            return;
                        };
                        let Ok(tls) = acceptor.accept(stream).await else {
                            return;
                        };
                        let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
                        let service = hyper::service::service_fn(move |req| {
                            let (counts, tenants) = (Arc::clone(&counts), Arc::clone(&tenants));
                            let group = counts.of(req.headers());
                            if first.swap(false, Ordering::Relaxed) {
                                group.connections.fetch_add(1, Ordering::Relaxed);
                            }
                            async move {
                                let group = counts.of(req.headers());
                                Ok::<_, std::convert::Infallible>(
                                    answer(req, ip, group, &tenants).await,
                                )
                            }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                            .await;
                    });
                }
            }
        });
        Ok(Self { counts, task })
    }
}

/// The TLS acceptor of the tenant whose Service has `ip` as its `ClusterIP`: its serving
/// certificate chain and key from Secret `secret_name` in the Service's namespace.
async fn acceptor(
    client: &Client,
    tenants: &Tenants,
    ip: IpAddr,
    secret_name: &str,
) -> Result<TlsAcceptor> {
    if let Some(a) = tenants.acceptors.lock().expect("lock").get(&ip) {
        return Ok(a.clone());
    }
    let field = format!("spec.clusterIP={ip}");
    let services = Api::<Service>::all(client.clone())
        .list_metadata(&ListParams::default().fields(&field))
        .await?;
    let ns = services
        .items
        .first()
        .and_then(|s| s.metadata.namespace.clone())
        .with_context(|| format!("no Service has ClusterIP {ip}"))?;
    let secret = Api::<Secret>::namespaced(client.clone(), &ns)
        .get(secret_name)
        .await?;
    let data = secret.data.unwrap_or_default();
    let pem = |key: &str| {
        data.get(key)
            .map(|b| b.0.clone())
            .with_context(|| format!("{ns}/{secret_name} has no {key}"))
    };
    let chain = CertificateDer::pem_slice_iter(&pem("tls.crt")?).collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(&pem("tls.key")?)?;
    let config = ServerConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(chain, key)?;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    tenants
        .acceptors
        .lock()
        .expect("lock")
        .insert(ip, acceptor.clone());
    Ok(acceptor)
}

/// The answer to one request to the tenant at `ip`.
async fn answer(
    req: Request<Incoming>,
    ip: IpAddr,
    counts: &Counts,
    tenants: &Tenants,
) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let key = (ip, path.clone());
    match (&parts.method, path.as_str()) {
        (&Method::GET, "/readyz") => {
            counts.readyz.fetch_add(1, Ordering::Relaxed);
            reply(StatusCode::OK, "text/plain", "ok".into())
        }
        (&Method::PATCH, _) => {
            counts.applies.fetch_add(1, Ordering::Relaxed);
            let Ok(body) = body.collect().await else {
                return status(StatusCode::BAD_REQUEST, "BadRequest", "unreadable body");
            };
            // kube-rs sends an apply patch as JSON (which is YAML too).
            let Ok(mut object) = serde_json::from_slice::<serde_json::Value>(&body.to_bytes())
            else {
                return status(StatusCode::BAD_REQUEST, "BadRequest", "not JSON");
            };
            let version = tenants.next_version.fetch_add(1, Ordering::Relaxed) + 1;
            let mut objects = tenants.objects.lock().expect("lock");
            let uid = objects
                .get(&key)
                .and_then(|o| o["metadata"]["uid"].as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("standin-{version}"));
            object["metadata"]["uid"] = uid.into();
            object["metadata"]["resourceVersion"] = version.to_string().into();
            let text = object.to_string();
            objects.insert(key, object);
            reply(StatusCode::OK, "application/json", text)
        }
        (&Method::GET, _) => {
            counts.gets.fetch_add(1, Ordering::Relaxed);
            match tenants.objects.lock().expect("lock").get(&key) {
                Some(o) => reply(StatusCode::OK, "application/json", o.to_string()),
                None => status(StatusCode::NOT_FOUND, "NotFound", "not found"),
            }
        }
        (&Method::DELETE, _) => {
            counts.other.fetch_add(1, Ordering::Relaxed);
            match tenants.objects.lock().expect("lock").remove(&key) {
                Some(_) => status(StatusCode::OK, "", ""),
                None => status(StatusCode::NOT_FOUND, "NotFound", "not found"),
            }
        }
        _ => {
            counts.other.fetch_add(1, Ordering::Relaxed);
            status(
                StatusCode::NOT_FOUND,
                "NotFound",
                "not served by the stand-in",
            )
        }
    }
}

fn reply(code: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = code;
    if let Ok(v) = content_type.parse() {
        response.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    response
}

/// A `metav1.Status` answer (`Success` for 2xx).
fn status(code: StatusCode, reason: &str, message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": if code.is_success() { "Success" } else { "Failure" },
        "reason": reason, "message": message, "code": code.as_u16(),
    });
    reply(code, "application/json", body.to_string())
}
