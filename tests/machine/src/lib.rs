//! kamaji-machine: real machines for the kamaji-rs tests.
//!
//! - [`image`]: OCI image-layout tars written from static binaries and files, without a
//!   container engine, for `ctr images import`.
pub mod image;
