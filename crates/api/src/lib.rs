//! kamaji-api: the API types of kamaji-rs (see shared/design/ARCHITECTURE.md §3).
//!
//! - [`kcp`]: `KamajiControlPlane` (`controlplane.cluster.x-k8s.io`, `v1alpha1` + `v1alpha2`
//!   with one shared schema; the Rust type is the storage version `v1alpha2`).
//! - [`template`]: `KamajiControlPlaneTemplate` for ClusterClass.
//! - [`datastore`]: Kamaji's cluster-scoped `DataStore` (`kamaji.clastix.io/v1alpha1`).
//! - [`cluster`]: read-only typed views of the CAPI `Cluster` (`v1beta1` and `v1beta2`).
//! - [`validation`]: the admission rules (OpenAPI patterns and CEL) carried by the CRDs.
//! - [`lifecycle`]: which lifecycle operation waits for, runs beside or is refused during
//!   which.
//! - [`conditions`], [`meta`]: condition types and reasons, label/annotation keys, finalizer,
//!   field manager.
//! - [`names`]: the one place that derives child object names.
//! - [`crd`]: the CRDs as installed (multi-version merge, contract labels) and their YAML.
//!
//! The crate does no I/O.

// The docs name Kubernetes kinds and terms in prose (KamajiControlPlane, ClusterClass,
// InfraCluster, DataStore, OpenAPI), as the Kubernetes documentation does.
#![allow(clippy::doc_markdown)]

pub mod cluster;
pub mod conditions;
pub mod crd;
pub mod datastore;
#[doc = include_str!("../FIELDS.md")]
pub mod fields {}
pub mod kcp;
pub mod lifecycle;
pub mod meta;
pub mod names;
mod schema;
pub mod template;
pub mod validation;

pub use datastore::{DataStore, DataStoreSpec, DataStoreStatus};
pub use kcp::{
    KamajiControlPlane, KamajiControlPlaneFields, KamajiControlPlaneSpec, KamajiControlPlaneStatus,
    StatusDataStore,
};
pub use template::{KamajiControlPlaneTemplate, KamajiControlPlaneTemplateSpec};
