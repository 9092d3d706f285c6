//! Names the controller and CAPI share: API groups, contract labels, label and annotation
//! keys, the finalizer and the field manager.

/// API group of `KamajiControlPlane` and `KamajiControlPlaneTemplate`.
pub const CONTROL_PLANE_GROUP: &str = "controlplane.cluster.x-k8s.io";
/// Storage version of the control-plane kinds.
pub const STORAGE_VERSION: &str = "v1alpha2";
/// Every served version of the control-plane kinds, oldest first.
pub const SERVED_VERSIONS: &[&str] = &["v1alpha1", "v1alpha2"];
/// API group of `DataStore` (shared with Kamaji).
pub const DATASTORE_GROUP: &str = "kamaji.clastix.io";
/// API group of CAPI core (`Cluster`).
pub const CAPI_GROUP: &str = "cluster.x-k8s.io";

/// CRD label naming the served versions that follow the CAPI v1beta2 contract.
pub const CONTRACT_V1BETA2_LABEL: &str = "cluster.x-k8s.io/v1beta2";
/// CRD label naming the served versions that follow the CAPI v1beta1 contract.
pub const CONTRACT_V1BETA1_LABEL: &str = "cluster.x-k8s.io/v1beta1";
/// Value of both contract labels: the served versions joined with `_`.
pub const CONTRACT_VERSIONS: &str = "v1alpha1_v1alpha2";

/// Field manager of every server-side apply kamaji-rs sends.
pub const FIELD_MANAGER: &str = "kamaji-rs";
/// Annotation on every object kamaji-rs applies in a tenant (value `"true"`): only an object
/// carrying it (and applied by [`FIELD_MANAGER`]) is removed when its addon leaves
/// `spec.addons`. Objects an earlier version applied without it, which installed CoreDNS and
/// kube-proxy whatever `spec.addons` said, are left in place (no longer updated) rather than
/// deleted by a manager upgrade.
pub const TENANT_INSTALLED_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/kamaji-rs-installed";
/// Annotation kamaji-rs sets on the tenant's `kube-public/cluster-info` ConfigMap: the hash of
/// the whole set of tenant objects it applied (hex SHA-256). cluster-info is applied last, after
/// every other object of the set and after the objects of removed addons were deleted, so the
/// value says the set was applied completely; a manager that finds it equal to the set it would
/// apply (after a restart, say) writes nothing to the tenant.
pub const TENANT_ARTIFACTS_HASH_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/kamaji-rs-artifacts-hash";
/// Requests a rotation of the service-account signing key (`<cluster>-sa`) when set on a
/// `KamajiControlPlane` to a value no rotation has used yet (any string, e.g. a date): the new
/// key is first trusted by every API server, then signs, and the old public key keeps
/// verifying for the manager's `--service-account-key-overlap-seconds` before it is dropped.
/// `ServiceAccountKeyRotated` reports the phase; the value of the last rotation done is kept
/// on `<cluster>-sa-rotation.keys`.
pub const SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/rotate-service-account-key";
/// Requests a rotation of the cluster CA (`<cluster>-ca`) and the front-proxy CA
/// (`<cluster>-proxy`) when set on a `KamajiControlPlane` to a value no rotation has used yet
/// (any string, e.g. a date). In phases, each waiting until every control-plane pod runs the
/// previous one: every component and kubeconfig trusts both CAs; the new CAs sign (the API
/// server's certificate is served with the new CA cross-signed by the old one, so clients
/// that trust only the old CA keep working); the Cluster's MachineDeployments are rolled
/// through Cluster API so that every worker joins anew with the new CA; the old CAs are
/// dropped. `CertificateAuthoritiesRotated` reports the phase; the value of the last rotation
/// done is kept on `<cluster>-ca-rotation.keys`. Kubeconfigs issued before the rotation stop
/// working when the old CA is dropped.
pub const CA_ROTATION_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/rotate-certificate-authorities";
/// Requests a rotation of the key the tenant's Secrets are encrypted with at rest
/// (`<cluster>-encryption.config`) when set on a `KamajiControlPlane` to a value no rotation
/// has used yet (any string, e.g. a date). In phases, each waiting until every control-plane
/// pod runs the previous one: every API server reads the new key as well; the new key
/// writes; every Secret of the tenant is rewritten (storage migration) and the old key is
/// dropped. `EncryptionKeyRotated` reports the phase; the value of the last rotation done is
/// kept on `<cluster>-encryption.config`.
pub const ENCRYPTION_KEY_ROTATION_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/rotate-encryption-key";
/// Finalizer kamaji-rs puts on a `KamajiControlPlane` to clean up its control plane and
/// DataStore data before the object goes.
pub const FINALIZER: &str = "kamaji-rs.controlplane.cluster.x-k8s.io/finalizer";

/// Label set by CAPI on objects of a Cluster (value: Cluster name); required on the
/// kubeconfig and certificate Secrets.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Annotation (any value) that pauses reconciliation of the object carrying it.
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
/// Annotation `clusterctl move` puts on each source object just before it removes the object's
/// finalizers and deletes it: the object lives on in the target management cluster, so a
/// controller must not tear down what the object stands for (CAPI's
/// `clusterctl.cluster.x-k8s.io/delete-for-move`).
pub const DELETE_FOR_MOVE_ANNOTATION: &str = "clusterctl.cluster.x-k8s.io/delete-for-move";
/// Label of objects created by the CAPI topology controller.
pub const TOPOLOGY_OWNED_LABEL: &str = "topology.cluster.x-k8s.io/owned";
/// Label clusterctl uses to find provider components.
pub const PROVIDER_LABEL: &str = "cluster.x-k8s.io/provider";
/// Value of [`PROVIDER_LABEL`] for kamaji-rs.
pub const PROVIDER_NAME: &str = "control-plane-kamaji";
/// `type` of the CAPI kubeconfig and certificate Secrets.
pub const CLUSTER_SECRET_TYPE: &str = "cluster.x-k8s.io/secret";
/// Key of the kubeconfig in `<cluster>-kubeconfig`.
pub const KUBECONFIG_SECRET_KEY: &str = "value";

/// Kamaji label: component that created the object (`capi` on the CAPI Secrets).
pub const KAMAJI_COMPONENT_LABEL: &str = "kamaji.clastix.io/component";
/// Kamaji label: kind of Secret (`kubeconfig`, `ca`, ...).
pub const KAMAJI_SECRET_LABEL: &str = "kamaji.clastix.io/secret";
/// Kamaji label: Cluster name.
pub const KAMAJI_CLUSTER_LABEL: &str = "kamaji.clastix.io/cluster";
/// Kamaji label: control-plane name.
pub const KAMAJI_TCP_LABEL: &str = "kamaji.clastix.io/tcp";
/// Label on the control-plane pods, Deployment and Service: the KamajiControlPlane name
/// (Kamaji uses the same key). Part of the pod selector.
pub const KAMAJI_NAME_LABEL: &str = "kamaji.clastix.io/name";
/// Annotation selecting the kubeconfig variant of `<cluster>-kubeconfig`
/// (`admin.conf`, `admin.svc`, `super-admin.conf`, `super-admin.svc`).
pub const KUBECONFIG_SECRET_KEY_ANNOTATION: &str = "kamaji.clastix.io/kubeconfig-secret-key";
/// Annotation `kubectl apply` leaves behind; never propagated.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Standard label: the application name.
pub const APP_NAME_LABEL: &str = "app.kubernetes.io/name";
/// Standard label: the component within the application.
pub const APP_COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// Standard label: the tool managing the object (value [`FIELD_MANAGER`]).
pub const APP_MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
