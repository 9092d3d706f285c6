//! The environment of an end-to-end test: a local management cluster (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, the CAPI core manager) whose pods — the tenants'
//! control planes — run as containers on real machines (kubelet, containerd, runc,
//! kube-proxy) behind the load-balancer stand-in, a shared TLS etcd registered as the
//! `default` DataStore, and the kamaji-rs `manager` binary as its own process under the
//! shipped RBAC. Everything runs in the test's private network ([`crate::test`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kamaji_api::KamajiControlPlane;
use kamaji_machine::ManagementMachines;
use kamaji_machine::management::{
    MANAGEMENT_CLUSTER_CIDR, SECOND_MANAGEMENT_CLUSTER_CIDR, SECOND_MANAGEMENT_SERVICE_CIDR,
};
use kamaji_machine::network::UNDERLAY_GATEWAY;
use kamaji_testenv::pki::CertPair;
use kamaji_testenv::{Etcd, LocalCluster};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};

use kamaji_testenv::kubeconfig::config_from_secret;

use crate::datastore::start_datastore;
use crate::f0;
use crate::machines::{MachineProvider, standin_machine_crds};
use crate::manager::{Identity, Manager};

/// A running environment. Drop order: worker machines, manager, management machines,
/// datastore, cluster.
pub struct Env {
    /// The stand-in infrastructure provider's machines (only from [`Env::start_with_machines`]).
    pub machines: Option<MachineProvider>,
    /// The cert-manager stand-in (only with [`EnvBuilder::installed_by_clusterctl`]).
    pub cert_manager: Option<kamaji_testenv::cert_manager::CertManagerStandIn>,
    pub(crate) manager: Manager,
    /// The management cluster's machines running the control-plane pods, and the
    /// load-balancer stand-in in front of them.
    pub management: ManagementMachines,
    /// The datastore etcd (shared with the source environment for a second management cluster).
    pub datastore: Arc<Etcd>,
    /// An admin client certificate of the datastore.
    pub datastore_client: CertPair,
    /// The datastore CA (certificate and key).
    pub datastore_ca: CertPair,
    /// The datastore's address as pods reach it.
    pub datastore_for_pods: SocketAddr,
    /// The management cluster.
    pub cluster: LocalCluster,
    /// Audit events before this index belong to earlier tests ([`Env::mark_test_start`]).
    pub(crate) audit_from: std::sync::atomic::AtomicUsize,
}

/// Options for [`Env`]; obtain with [`Env::builder`].
#[derive(Debug, Clone)]
#[allow(clippy::struct_excessive_bools)] // independent on/off switches of a builder
pub struct EnvBuilder {
    management_machines: usize,
    versions: Vec<String>,
    workers: bool,
    clusterctl: bool,
    gateway_api: bool,
    default_datastore: bool,
    test_images: bool,
}

impl Default for EnvBuilder {
    fn default() -> Self {
        Self {
            management_machines: 1,
            versions: Vec::new(),
            workers: false,
            clusterctl: false,
            gateway_api: false,
            default_datastore: true,
            test_images: true,
        }
    }
}

impl EnvBuilder {
    /// Management machines running the control-plane pods (1 to 3, default 1).
    #[must_use]
    pub fn management_machines(mut self, n: usize) -> Self {
        self.management_machines = n;
        self
    }

    /// Also make the control-plane images of the built `version` available on the
    /// management machines (default: only the tools' own version's).
    #[must_use]
    pub fn version(mut self, version: &str) -> Self {
        self.versions.push(version.to_owned());
        self
    }

    /// Also run CABPK, the stand-in infrastructure provider for worker Machines
    /// ([`MachineProvider`], `StandInMachine`), and load-balancer addresses workers reach.
    #[must_use]
    pub fn workers(mut self, on: bool) -> Self {
        self.workers = on;
        self
    }

    /// Install Cluster API and kamaji-rs the way a platform engineer does (default: off):
    /// the management cluster starts bare (no provider CRDs, no host-process CAPI), the
    /// cert-manager stand-in runs, and `clusterctl init --core cluster-api --bootstrap kubeadm
    /// --control-plane kamaji` installs the three providers from a local repository
    /// ([`crate::clusterctl::init`]), each running as a pod of its image on the management
    /// machines under its shipped RBAC; no manager host process is started.
    #[must_use]
    pub fn installed_by_clusterctl(mut self, on: bool) -> Self {
        self.clusterctl = on;
        self
    }

    /// Register the datastore etcd as the `default` DataStore (default: on). Off, the
    /// environment's datastore etcd runs but no DataStore names it: the install guide's step
    /// `datastore` does ([`crate::install_guide`]).
    #[must_use]
    pub fn default_datastore(mut self, on: bool) -> Self {
        self.default_datastore = on;
        self
    }

    /// Also install the Gateway API's `TLSRoute` CRD (default: off, as in a cluster without
    /// the Gateway API).
    #[must_use]
    pub fn gateway_api(mut self, on: bool) -> Self {
        self.gateway_api = on;
        self
    }

    /// Import the images only tests run on the machines (default: on): kine, the
    /// konnectivity server and agent, the netcheck client. Off (`make demo`), those programs
    /// need not be built (`tests/tools/build.sh --demo`); a tenant with a SQL DataStore or
    /// `addons.konnectivity` then finds no image for them.
    #[must_use]
    pub fn test_images(mut self, on: bool) -> Self {
        self.test_images = on;
        self
    }

    /// Starts the environment.
    pub async fn start(self) -> Result<Env> {
        Env::launch(self, None).await
    }

    /// Starts a second management cluster (its own etcd, API server, controllers, machines,
    /// providers as the options say) whose `default` DataStore is `source`'s datastore etcd:
    /// two management clusters that reach one shared datastore (the `clusterctl move` setup).
    pub async fn start_sharing_datastore(self, source: &Env) -> Result<Env> {
        Env::launch(self, Some(source)).await
    }
}

impl Env {
    /// Starts everything, including the manager, with one management machine.
    pub async fn start() -> Result<Self> {
        Self::builder().start().await
    }

    /// Options: management machines, control-plane versions, worker machines.
    #[must_use]
    pub fn builder() -> EnvBuilder {
        EnvBuilder::default()
    }

    /// Starts everything for worker machines: also CABPK, the stand-in infrastructure provider
    /// for Machines ([`MachineProvider`], `StandInMachine`), and load-balancer addresses on the
    /// private underlay that machines and their pods reach. Must run inside
    /// [`kamaji_machine::run_in_private_network`].
    pub async fn start_with_machines() -> Result<Self> {
        Self::builder().workers(true).start().await
    }

    async fn launch(opts: EnvBuilder, shared: Option<&Env>) -> Result<Self> {
        let machines = opts.workers;
        let by_clusterctl = opts.clusterctl;
        let mut management = ManagementMachines::builder()
            .machines(opts.management_machines)
            .with_capi_images(by_clusterctl)
            .with_test_images(opts.test_images);
        for v in &opts.versions {
            management = management.with_version(v);
        }
        // The machines boot (containerd, images) while the cluster starts.
        let tools = kamaji_testenv::Tools::locate()?;
        let mut builder = LocalCluster::builder();
        if opts.gateway_api {
            builder = builder.crds_from(tools.gateway_api_crds());
        }
        if shared.is_some() {
            builder = builder.service_cidr(SECOND_MANAGEMENT_SERVICE_CIDR);
        }
        let (cluster, booted) = tokio::join!(
            builder
                .controllers(true)
                .capi(!by_clusterctl)
                .capi_crds(!by_clusterctl)
                .kamaji_crds(!by_clusterctl)
                .kubeadm_bootstrap(machines && !by_clusterctl)
                .advertise_address(UNDERLAY_GATEWAY)
                .cluster_cidr(if shared.is_some() {
                    SECOND_MANAGEMENT_CLUSTER_CIDR
                } else {
                    MANAGEMENT_CLUSTER_CIDR
                })
                .start(),
            management.boot(&tools),
        );
        let (cluster, booted) = (cluster?, booted?);
        if machines {
            cluster.apply_yaml(&standin_machine_crds()).await?;
        }
        let management = booted.join(&cluster).await?;
        let (datastore, datastore_ca, datastore_client, for_pods) = if let Some(source) = shared {
            (
                Arc::clone(&source.datastore),
                source.datastore_ca.clone(),
                source.datastore_client.clone(),
                source.datastore_for_pods,
            )
        } else {
            let (etcd, ca, client) = start_datastore(&cluster, Some(UNDERLAY_GATEWAY)).await?;
            // On the underlay gateway, where every machine's pods reach it.
            let for_pods = SocketAddr::new(UNDERLAY_GATEWAY.into(), etcd.port());
            (Arc::new(etcd), ca, client, for_pods)
        };
        let (identity, cert_manager) = if by_clusterctl {
            let cert_manager =
                kamaji_testenv::cert_manager::CertManagerStandIn::start(cluster.client()).await?;
            (
                crate::clusterctl::init(&cluster, &management).await?,
                Some(cert_manager),
            )
        } else {
            (Identity::install(&cluster).await?, None)
        };
        let provider = if machines {
            let tools = kamaji_testenv::Tools::locate()?;
            let images = kamaji_machine::ImageStore::prepare(
                &tools,
                &kamaji_machine::images::worker_images_with(&tools, opts.test_images)?,
            )
            .await?;
            Some(MachineProvider::start(cluster.client(), tools, images))
        } else {
            None
        };
        let mut env = Self {
            machines: provider,
            cert_manager,
            manager: Manager::new(identity),
            management,
            datastore,
            datastore_client,
            datastore_ca,
            datastore_for_pods: for_pods,
            cluster,
            audit_from: std::sync::atomic::AtomicUsize::new(0),
        };
        if opts.default_datastore {
            env.create_datastore("default", for_pods).await?;
        }
        if !by_clusterctl {
            env.start_manager()?;
        }
        Ok(env)
    }

    /// An administrator's client of the management cluster (`system:masters`).
    #[must_use]
    pub fn client(&self) -> Client {
        self.cluster.client()
    }

    /// Creates namespace `ns` if missing.
    pub async fn namespace(&self, ns: &str) -> Result<()> {
        let obj: Namespace = serde_json::from_value(
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )?;
        self.cluster.apply(&obj).await?;
        Ok(())
    }

    /// Server-side applies one object given as JSON (any kind the API server knows), as an
    /// administrator.
    pub async fn apply_value(&self, v: &serde_json::Value) -> Result<()> {
        self.cluster.apply_value(v).await
    }

    /// Applies every document of a YAML stream, in order.
    pub async fn apply_yaml(&self, yaml: &str) -> Result<()> {
        self.cluster.apply_yaml(yaml).await
    }

    /// The tenant's client configuration from `<cluster>-kubeconfig` (key `value`).
    pub async fn tenant_config(&self, ns: &str, cluster: &str) -> Result<kube::Config> {
        config_from_secret(
            &self.client(),
            ns,
            &format!("{cluster}-kubeconfig"),
            "value",
        )
        .await
    }

    /// A client for the tenant from `<cluster>-kubeconfig` (key `value`).
    pub async fn tenant_client(&self, ns: &str, cluster: &str) -> Result<Client> {
        Ok(Client::try_from(self.tenant_config(ns, cluster).await?)?)
    }
}

impl Env {
    /// Reads Secret `ns/name`.
    pub async fn secret(&self, ns: &str, name: &str) -> Result<Secret> {
        Ok(Api::<Secret>::namespaced(self.client(), ns)
            .get(name)
            .await?)
    }

    /// The control-plane Deployment `ns/name`.
    pub async fn deployment(&self, ns: &str, name: &str) -> Result<Deployment> {
        Ok(Api::<Deployment>::namespaced(self.client(), ns)
            .get(name)
            .await?)
    }

    /// The args of container `container` of Deployment `ns/name`.
    pub async fn container_args(
        &self,
        ns: &str,
        name: &str,
        container: &str,
    ) -> Result<Vec<String>> {
        let d = self.deployment(ns, name).await?;
        let spec = d
            .spec
            .and_then(|s| s.template.spec)
            .context("no pod spec")?;
        let c = spec
            .containers
            .into_iter()
            .find(|c| c.name == container)
            .context("no such container")?;
        Ok(c.args.unwrap_or_default())
    }

    /// Applies F0 for `ns/name` and waits until the control plane is Available.
    pub async fn f0_available(
        &self,
        ns: &str,
        name: &str,
        replicas: i32,
    ) -> Result<KamajiControlPlane> {
        self.namespace(ns).await?;
        self.apply_yaml(&f0(ns, name, replicas)).await?;
        self.wait_kcp_condition(ns, name, "Available", "True", Duration::from_mins(4))
            .await
    }

    /// The Cluster API objects of `kind` at `version` (`cluster.x-k8s.io`) in `ns`, e.g.
    /// `Machine` or `MachineDeployment` at `v1beta2`.
    #[must_use]
    pub fn capi(&self, ns: &str, version: &str, kind: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client(),
            ns,
            &ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", version, kind)),
        )
    }

    /// Merge-patches the KamajiControlPlane `ns/name`.
    pub async fn patch_kcp(&self, ns: &str, name: &str, patch: serde_json::Value) -> Result<()> {
        Api::<KamajiControlPlane>::namespaced(self.client(), ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }
}
