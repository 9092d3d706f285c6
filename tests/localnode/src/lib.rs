//! kamaji-localnode: a local node agent for the kamaji-rs test environment.
//!
//! kamaji-rs runs each tenant's kube-apiserver, kube-controller-manager and kube-scheduler
//! in a Deployment of the management cluster. The development machines have no container
//! engine, so this agent makes the local management cluster of [`kamaji_testenv`] behave,
//! for control-plane pods, like a cluster with kubelets, kube-proxy and a load balancer:
//!
//! - **Nodes**: N Node objects (default 3) with distinct `kubernetes.io/hostname` and
//!   `topology.kubernetes.io/zone` labels, Ready, with leases renewed every 10 s, so the real
//!   kube-scheduler evaluates anti-affinity and topology spread.
//! - **Pods** bound to those nodes run as real processes: the image
//!   (`<any registry>/kube-apiserver|kube-controller-manager|kube-scheduler|etcd:<tag>`) maps
//!   to the program built by `make tools` when the tag is the built version, else the
//!   container waits with `ErrImagePull`. `command`/`args`/`env` are used as written, with
//!   the kubelet's `$(VAR)` expansion. Every pod gets its own network namespace and IP on a
//!   private bridge (`status.podIP`); its containers share it. Each container gets its own
//!   mount namespace in which the pod's `secret`, `configMap`, `emptyDir` and `projected`
//!   volumes are bind-mounted at their `mountPath`s (missing parent directories appear via
//!   a private overlay, never on the host), so absolute paths in flags resolve. Secret and
//!   ConfigMap updates are written with the kubelet's atomic `..data` swap.
//! - **Status**: `Pending` → `Running`, readiness from `httpGet` (HTTP, HTTPS without
//!   verification), `tcpSocket` and `exec` probes, startup and liveness probes restart the
//!   process, exits restart per `restartPolicy` with back-off (`CrashLoopBackOff`,
//!   `lastState.terminated` with exit code and log tail). Deletion sends SIGTERM, SIGKILL
//!   after the grace period, then removes the pod object.
//! - **Services**: ClusterIP, NodePort and LoadBalancer addresses (the latter from a loopback
//!   pool, or the Service's `spec.loadBalancerIP` when it is a loopback address, written to
//!   `status.loadBalancer.ingress`) forward to ready endpoints only; with
//!   none, the address refuses connections.
//!
//! It does **not** implement a CRI, images, CNI, init containers, hostPath volumes, resource
//! limits, or UDP services. It needs root.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use kamaji_testenv::LocalCluster;
//! let cluster = LocalCluster::builder().controllers(true).capi(false).start().await?;
//! let node = kamaji_localnode::LocalNode::start(&cluster).await?;
//! // A datastore on the host, as pods reach it:
//! let etcd_for_pods = node.expose_host_port(2379)?;
//! // … create a Deployment and a LoadBalancer Service, then:
//! let lb = node
//!     .load_balancer_address("default", "tenant", 6443, std::time::Duration::from_secs(30))
//!     .await?;
//! # let _ = (etcd_for_pods, lb);
//! # Ok(()) }
//! ```
//!
//! # Host safety
//!
//! Traffic stays on the machine: pod addresses live on a bridge that only links the
//! agent's network namespaces to the host (`10.213.<n>.0/24`), the whole service CIDR is
//! made a `local` route on `lo` while the agent runs, and load-balancer and node addresses
//! are in `127.0.0.0/8`. Every namespace, link, route and claim is recorded in a ledger under
//! `/run/kamaji-localnode` and undone on drop (also while a test panics) or by the next
//! agent that starts after a killed run.

// Kubernetes kind names (ConfigMap, ClusterIP, …) appear in prose throughout.
#![allow(clippy::doc_markdown)]

mod agent;
mod expand;
mod image;
mod ledger;
mod net;
mod node;
mod pod;
mod probe;
mod proxy;
mod volumes;

pub use agent::{Builder, LocalNode, unique_service_cidr};
pub use node::NodeInfo;
pub use probe::https_get;
