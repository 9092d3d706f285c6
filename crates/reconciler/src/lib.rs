//! kamaji-reconciler: the kamaji-rs manager, which turns a Cluster API `Cluster` +
//! `KamajiControlPlane` into a running tenant control plane (shared/design/ARCHITECTURE.md).
//!
//! - [`reconcile`] — the pipeline, one module per step (gates, validate, observe, plan,
//!   apply, status, delete); its driver is the only place that writes status;
//! - [`datastore`], [`tenant`], [`infrastructure`] — I/O with the DataStore, the tenant API
//!   and the Cluster's infrastructure object;
//! - [`controller`] — watches and backoff; [`leader`] — leader election; [`server`],
//!   [`metrics`] — observability; [`context`], [`error`] — shared state and errors.

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
