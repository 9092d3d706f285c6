//! The manager's HTTP endpoints: `/metrics` (Prometheus text) on `--metrics-bind-address`,
//! `/healthz` and `/readyz` on `--health-probe-bind-address`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;

use crate::context::Context;

/// Serves `/metrics` on `addr` until the process ends.
///
/// # Errors
/// When the address cannot be bound.
pub async fn metrics(addr: SocketAddr, ctx: Arc<Context>) -> std::io::Result<()> {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let ctx = ctx.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    ctx.metrics().encode(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app).await
}

/// Serves `/healthz` (always ok while the process runs) and `/readyz` (ok once `ready` is set:
/// the CRDs exist and the controller runs) on `addr`.
///
/// # Errors
/// When the address cannot be bound.
pub async fn health(addr: SocketAddr, ready: Arc<AtomicBool>) -> std::io::Result<()> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    if ready.load(Ordering::Relaxed) {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app).await
}
