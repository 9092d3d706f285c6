//! kamaji-reconciler: the kamaji-rs manager, which turns a Cluster API `Cluster` +
//! `KamajiControlPlane` into a running tenant control plane (shared/design/ARCHITECTURE.md).
//!
//! Layered, lowest first (docs/development/reconcile-pipeline.md, "Layers"; checked by
//! `tests/layers.rs`): a module uses only its own layer and lower ones.
//!
//! - foundations: [`error`], [`metrics`], [`lean`], [`gateway_api`], [`replicas`];
//! - I/O edges: [`datastore`], [`tenant`], [`infrastructure`] — the DataStore, the tenant API
//!   and the Cluster's infrastructure object;
//! - the runtime's memory and context: [`memory`] (what this process wrote, verified and
//!   holds; the watch filters), [`context`] (settings, client, caches; fields private);
//! - [`reconcile`] — the pipeline, one module per step; its driver is the only place that
//!   writes status;
//! - [`controller`] — watches and backoff; [`leader`] — leader election; [`server`] — metrics
//!   and health endpoints.

// Docs name Kubernetes kinds and fields in prose (KamajiControlPlane, DataStore, kubeconfig).
#![allow(clippy::doc_markdown)]

pub mod context;
pub mod controller;
pub mod datastore;
pub mod error;
pub mod gateway_api;
pub mod infrastructure;
pub mod leader;
pub mod lean;
pub mod memory;
pub mod metrics;
pub mod reconcile;
pub mod replicas;
pub mod server;
pub mod tenant;
