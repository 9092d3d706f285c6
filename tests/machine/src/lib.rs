//! kamaji-machine: real machines for the kamaji-rs tests (shared/reference/real-machines.md).
//!
//! - [`image`]: OCI image-layout tars written from static binaries and files, without a
//!   container engine, for `ctr images import`; [`images`]: the machines' images.
//! - [`network`]: the test's own network namespace with the machines' underlay bridge and the
//!   load-balancer stand-in's addresses; the host's network is never changed.
//! - [`store`]: a containerd image store made once, which machines start from.
//! - [`machine`]: a machine (containerd, runc, a kubelet supervised as systemd would) in
//!   namespaces of its own, undone on drop and after a killed run.
//! - [`management`]: the management cluster's machines (kubelets joined to a
//!   [`kamaji_testenv::LocalCluster`], kube-proxy) and [`load_balancer`], the stand-in for a
//!   cloud's load balancer in front of them.

pub mod image;
pub mod images;
pub mod load_balancer;
pub mod machine;
pub mod management;
pub mod network;
pub mod store;

pub use load_balancer::LoadBalancer;
pub use machine::{Machine, MachineSpec};
pub use management::ManagementMachines;
pub use network::{current_network, run_in_network, run_in_private_network};
pub use store::ImageStore;
