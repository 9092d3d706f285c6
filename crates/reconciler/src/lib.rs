//! kamaji-reconciler: the kamaji-rs manager, which turns a Cluster API `Cluster` +
//! `KamajiControlPlane` into a running tenant control plane (shared/design/ARCHITECTURE.md).
//!
//! The reconcile pipeline, one module per step:
//! - gates and I/O: [`reconcile`] (owner Cluster, paused, finalizer, deletion; observe;
//!   apply; status written once);
//! - [`spec`] — validate (pure);
//! - [`endpoint`], [`plan`], [`pki`], [`args`] — plan (pure, apart from key generation for a
//!   leaf that must be reissued);
//! - [`status`] — conditions and contract fields (pure);
//! - [`tenant`], [`datastore`] — the tenant API and the datastore;
//! - [`controller`] — watches and backoff; [`server`], [`metrics`] — observability.

// Docs name Kubernetes kinds and fields in prose (KamajiControlPlane, DataStore, kubeconfig).
#![allow(clippy::doc_markdown)]

pub mod args;
pub mod context;
pub mod controller;
pub mod datastore;
pub mod drift;
pub mod endpoint;
pub mod error;
pub mod metrics;
pub mod pki;
pub mod plan;
pub mod reconcile;
pub mod server;
pub mod spec;
pub mod status;
pub mod tenant;
