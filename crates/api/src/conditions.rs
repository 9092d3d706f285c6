//! Condition types and reasons written to `KamajiControlPlane.status.conditions`
//! (`metav1.Condition`).
//!
//! The CAPI v1beta2 vocabulary (`kubernetes-sigs/cluster-api:api/core/v1beta2/condition_consts.go`,
//! KCP's set; shared/reference/capi-contract.md items 87-88) plus kamaji-rs' own types for the
//! steps of its pipeline. CAPI reads `Available` (mirrored to the Cluster's
//! `ControlPlaneAvailable`), `RollingOut`, `ScalingUp`, `ScalingDown`, `Paused` and `Deleting`.

/// Condition types.
pub mod types {
    /// The control plane serves requests (CAPI mirrors it to `ControlPlaneAvailable`).
    pub const AVAILABLE: &str = "Available";
    /// The API server has accepted requests at least once (sticky).
    pub const INITIALIZED: &str = "Initialized";
    /// Control-plane pods are being replaced because the spec changed.
    pub const ROLLING_OUT: &str = "RollingOut";
    /// Fewer control-plane pods exist than `spec.replicas`.
    pub const SCALING_UP: &str = "ScalingUp";
    /// More control-plane pods exist than `spec.replicas`.
    pub const SCALING_DOWN: &str = "ScalingDown";
    /// Reconciliation is paused (Cluster `spec.paused` or the `cluster.x-k8s.io/paused`
    /// annotation).
    pub const PAUSED: &str = "Paused";
    /// The KamajiControlPlane is being deleted.
    pub const DELETING: &str = "Deleting";
    /// The CA, service-account key, front-proxy CA and leaf certificates exist.
    pub const CERTIFICATES_AVAILABLE: &str = "CertificatesAvailable";
    /// The `<cluster>-kubeconfig` Secret is up to date.
    pub const KUBECONFIG_AVAILABLE: &str = "KubeconfigAvailable";
    /// The DataStore exists, is supported, and this control plane's prefix/user is set up.
    pub const DATASTORE_READY: &str = "DataStoreReady";
    /// The control-plane endpoint is known and written to `spec.controlPlaneEndpoint`.
    pub const ENDPOINT_READY: &str = "ControlPlaneEndpointReady";
    /// The control-plane Deployment has the desired pods ready.
    pub const DEPLOYMENT_READY: &str = "ControlPlaneDeploymentReady";
    /// The kubeadm artifacts (cluster-info, kubeadm-config, kubelet-config, bootstrap-token
    /// RBAC, addons) exist in the tenant.
    pub const TENANT_BOOTSTRAPPED: &str = "TenantBootstrapped";
    /// konnectivity agents are connected to the server (only while `spec.addons.konnectivity`
    /// is set): `True` when every agent the tenant's workload wants is ready (an agent is
    /// ready once it holds a connection to a server), with the counts in the message.
    pub const KONNECTIVITY_READY: &str = "KonnectivityReady";
    /// The service-account key rotation requested with
    /// [`crate::meta::SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION`] (only once one was requested):
    /// `False` while it runs, with the phase as the reason, `True` once the old key is dropped.
    pub const SERVICE_ACCOUNT_KEY_ROTATED: &str = "ServiceAccountKeyRotated";
    /// The certificate-authority rotation requested with
    /// [`crate::meta::CA_ROTATION_ANNOTATION`] (only once one was requested): `False` while it
    /// runs, with the phase as the reason, `True` once the old CAs are dropped.
    pub const CERTIFICATE_AUTHORITIES_ROTATED: &str = "CertificateAuthoritiesRotated";
    /// The rotation of the key the tenant's Secrets are encrypted with at rest, requested
    /// with [`crate::meta::ENCRYPTION_KEY_ROTATION_ANNOTATION`] (only once one was
    /// requested): `False` while it runs, with the phase as the reason, `True` once every
    /// Secret is rewritten with the new key and the old one is dropped.
    pub const ENCRYPTION_KEY_ROTATED: &str = "EncryptionKeyRotated";
    /// What the API servers encrypt at rest: the Secrets and the resources
    /// `spec.encryptionAtRest.resources` adds. `True` once every API server writes exactly
    /// those encrypted and their stored objects were rewritten (the message names them and
    /// the key that writes); `False` while a change rolls out.
    pub const ENCRYPTION_AT_REST_CONFIGURED: &str = "EncryptionAtRestConfigured";
    /// The spec passed the controller's own validation (checks CEL cannot express, such as
    /// the DNS Service IP lying inside the Cluster's service CIDR).
    pub const SPEC_VALID: &str = "SpecValid";
    /// The owner Cluster was found through the ownerReferences.
    pub const CLUSTER_FOUND: &str = "ClusterFound";
    /// The last reconcile pass ran to its end; `False` says which step failed and why, so the
    /// status never shows an older pass's state while every pass fails.
    pub const RECONCILED: &str = "Reconciled";
}

/// Condition reasons (CamelCase, as `metav1.Condition.reason` requires).
pub mod reasons {
    /// `Available` True.
    pub const AVAILABLE: &str = "Available";
    /// `KonnectivityReady` True: every agent is connected.
    pub const AGENTS_CONNECTED: &str = "AgentsConnected";
    /// `KonnectivityReady` False: agents are missing, starting or not connected.
    pub const WAITING_FOR_AGENTS: &str = "WaitingForAgents";
    /// `Available` False.
    pub const NOT_AVAILABLE: &str = "NotAvailable";
    /// `Initialized` True.
    pub const INITIALIZED: &str = "Initialized";
    /// `Initialized` False.
    pub const NOT_INITIALIZED: &str = "NotInitialized";
    /// `RollingOut` True.
    pub const ROLLING_OUT: &str = "RollingOut";
    /// `RollingOut` False.
    pub const NOT_ROLLING_OUT: &str = "NotRollingOut";
    /// `ScalingUp` True.
    pub const SCALING_UP: &str = "ScalingUp";
    /// `ScalingUp` False.
    pub const NOT_SCALING_UP: &str = "NotScalingUp";
    /// `ScalingDown` True.
    pub const SCALING_DOWN: &str = "ScalingDown";
    /// `ScalingDown` False.
    pub const NOT_SCALING_DOWN: &str = "NotScalingDown";
    /// `Paused` True.
    pub const PAUSED: &str = "Paused";
    /// `Paused` False.
    pub const NOT_PAUSED: &str = "NotPaused";
    /// `Deleting` True.
    pub const DELETING: &str = "Deleting";
    /// `Deleting` False.
    pub const NOT_DELETING: &str = "NotDeleting";
    /// `Deleting`: the control-plane Deployment and Services are being removed.
    pub const WAITING_FOR_CONTROL_PLANE_DELETION: &str = "WaitingForControlPlaneDeletion";
    /// `Deleting`: this control plane's DataStore data is being removed.
    pub const WAITING_FOR_DATASTORE_CLEANUP: &str = "WaitingForDataStoreCleanup";
    /// Generic True reason for kamaji-rs' own conditions.
    pub const READY: &str = "Ready";
    /// The owner Cluster is not set yet (CAPI sets the ownerRef).
    pub const WAITING_FOR_OWNER_CLUSTER: &str = "WaitingForOwnerCluster";
    /// The control-plane Service has no address yet.
    pub const WAITING_FOR_ENDPOINT: &str = "WaitingForControlPlaneEndpoint";
    /// The control-plane pods are not ready yet.
    pub const WAITING_FOR_PODS: &str = "WaitingForControlPlanePods";
    /// The tenant API server does not answer yet.
    pub const WAITING_FOR_API_SERVER: &str = "WaitingForAPIServer";
    /// The control plane is scaled to zero (`spec.replicas: 0`).
    pub const SCALED_TO_ZERO: &str = "ScaledToZero";
    /// The DataStore named by `spec.dataStoreName` (or the default) does not exist.
    pub const DATASTORE_NOT_FOUND: &str = "DataStoreNotFound";
    /// The DataStore's driver is not implemented by kamaji-rs yet.
    pub const DATASTORE_DRIVER_UNSUPPORTED: &str = "DataStoreDriverUnsupported";
    /// A DataStore of `spec.dataStoreOverrides` has another CA certificate than the control
    /// plane's DataStore (kube-apiserver has one etcd client certificate and CA for all).
    pub const DATASTORE_CA_MISMATCH: &str = "DataStoreCAMismatch";
    /// The control plane's datastore schema (its etcd key prefix) is claimed by another
    /// control plane on the same DataStore; the message names it.
    pub const DATASTORE_SCHEMA_IN_USE: &str = "DataStoreSchemaInUse";
    /// The spec is invalid; the message names the field.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// `Reconciled` True: the last pass ran to its end.
    pub const RECONCILE_SUCCEEDED: &str = "ReconcileSucceeded";
    /// `Reconciled` False: a management-cluster API request failed.
    pub const KUBE_API_ERROR: &str = "KubeAPIError";
    /// `Reconciled` False: key material could not be read back or issued.
    pub const PKI_ERROR: &str = "PKIError";
    /// `Reconciled` False: an artifact could not be rendered.
    pub const RENDER_ERROR: &str = "RenderError";
    /// `Reconciled` False: the tenant API server refused or failed a request.
    pub const TENANT_API_ERROR: &str = "TenantAPIError";
    /// `Reconciled` False: the datastore could not be used.
    pub const DATASTORE_ERROR: &str = "DataStoreError";
    /// `Reconciled` False: an object could not be (de)serialised.
    pub const SERIALIZATION_ERROR: &str = "SerializationError";
    /// An object kamaji-rs would write exists and is controlled by another object; it is
    /// never overwritten (the message names the object and its controller).
    pub const OWNED_BY_ANOTHER_OBJECT: &str = "OwnedByAnotherObject";
    /// `CertificatesAvailable` False: a root (cluster CA, front-proxy CA, service-account key)
    /// disappeared after the control plane was initialized. It is never generated again
    /// implicitly: every joined node and issued credential trusts the old one.
    pub const ROOT_KEY_MATERIAL_MISSING: &str = "RootKeyMaterialMissing";
    /// The key the tenant's Secrets are encrypted with at rest is missing after the API
    /// servers ran with it; it is never generated again (restore it from a backup).
    pub const ENCRYPTION_KEY_MISSING: &str = "EncryptionKeyMissing";
    /// `EncryptionKeyRotated` False: the API servers roll to read the new key as well; the old
    /// one still writes.
    pub const READING_NEW_KEY: &str = "ReadingNewKey";
    /// `EncryptionKeyRotated` False: the API servers roll to write with the new key; then
    /// every Secret is rewritten with it.
    pub const WRITING_WITH_NEW_KEY: &str = "WritingWithNewKey";
    /// `EncryptionKeyRotated` False: every Secret is rewritten with the new key; the API
    /// servers roll without the old one.
    pub const DROPPING_PREVIOUS_KEY: &str = "DroppingPreviousKey";
    /// `EncryptionAtRestConfigured` True: the resources asked for are encrypted.
    pub const CONFIGURED: &str = "Configured";
    /// `EncryptionAtRestConfigured` False: the API servers roll to read the added resources
    /// encrypted and to write the removed ones as plain text.
    pub const READING_ENCRYPTED_RESOURCES: &str = "ReadingEncryptedResources";
    /// `EncryptionAtRestConfigured` False: the removed resources' objects were rewritten as
    /// plain text; the API servers roll to write the added ones encrypted, then their objects
    /// are rewritten.
    pub const WRITING_ENCRYPTED_RESOURCES: &str = "WritingEncryptedResources";
    /// `EncryptionAtRestConfigured` False: a rotation of the encryption key runs first;
    /// `EncryptionKeyRotated` False: a change of the encrypted resources runs first.
    pub const WAITING_FOR_ENCRYPTION_CHANGE: &str = "WaitingForEncryptionChange";
    /// `ServiceAccountKeyRotated` False: the API servers roll to trust the new key; the old one
    /// still signs.
    pub const TRUSTING_NEW_KEY: &str = "TrustingNewKey";
    /// `ServiceAccountKeyRotated` False: the new key signs; tokens of the old key are accepted
    /// until the overlap ends.
    pub const VERIFYING_PREVIOUS_KEY: &str = "VerifyingPreviousKey";
    /// `ServiceAccountKeyRotated` True: the old key is no longer accepted;
    /// `CertificateAuthoritiesRotated` True: the old CAs are no longer trusted.
    pub const ROTATED: &str = "Rotated";
    /// `ServiceAccountKeyRotated` or `CertificateAuthoritiesRotated` False: the rotation
    /// cannot run (the message says why and what to change).
    pub const ROTATION_REFUSED: &str = "RotationRefused";
    /// `CertificateAuthoritiesRotated` False: the components roll to trust the new CAs as
    /// well; the old ones still sign.
    pub const TRUSTING_NEW_CA: &str = "TrustingNewCA";
    /// `CertificateAuthoritiesRotated` False: the new CAs sign and the components roll to
    /// certificates they issued; the old CAs are still trusted.
    pub const ISSUING_FROM_NEW_CA: &str = "IssuingFromNewCA";
    /// `CertificateAuthoritiesRotated` False: the Cluster's MachineDeployments roll so that
    /// every worker joins with the new CA (the message lists the Machines still waited for).
    pub const REPLACING_WORKERS: &str = "ReplacingWorkers";
    /// `CertificateAuthoritiesRotated` False: the components roll to trust only the new CAs.
    pub const DROPPING_PREVIOUS_CA: &str = "DroppingPreviousCA";
    /// `CertificateAuthoritiesRotated` False: the requested rotation has not started because
    /// the control plane is upgrading (`spec.version` is not `status.version` yet): Cluster
    /// API creates no worker Machine meanwhile, and the rotation replaces the workers.
    pub const WAITING_FOR_UPGRADE: &str = "WaitingForUpgrade";
}
