//! kube-proxy and CoreDNS, shaped like kubeadm's addon phases
//! (`phases/addons/proxy/manifests.go`, `phases/addons/dns/manifests.go`, v1.36).
//!
//! The fixed parts are parsed from static templates (no string interpolation, so no input can
//! inject YAML); everything that varies is set on the typed objects afterwards.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, Subject};
use serde_json::{Value, json};

use super::rbac::{cluster_role_binding, configmap_reader, group};
use super::{Tenant, from_template, labels, meta, to_yaml};
use crate::error::{Error, ValidationError};
use crate::kubeconfig::kube_proxy_kubeconfig;
use crate::token::NODE_BOOTSTRAP_TOKEN_GROUP;

/// kube-proxy's objects.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeProxyObjects {
    /// `kube-system/kube-proxy`.
    pub service_account: ServiceAccount,
    /// `kubeadm:node-proxier` → `system:node-proxier` for the ServiceAccount.
    pub cluster_role_binding: ClusterRoleBinding,
    /// `kube-system/kube-proxy`: `get configmaps [kube-proxy]`.
    pub role: Role,
    /// Binds `role` to the bootstrap token group (join reads the ConfigMap).
    pub role_binding: RoleBinding,
    /// `kube-system/kube-proxy` with `config.conf` and `kubeconfig.conf`.
    pub config_map: ConfigMap,
    /// `kube-system/kube-proxy`.
    pub daemon_set: DaemonSet,
}

/// CoreDNS's objects.
#[derive(Debug, Clone, PartialEq)]
pub struct CoreDnsObjects {
    /// `kube-system/coredns`.
    pub service_account: ServiceAccount,
    /// `system:coredns`.
    pub cluster_role: ClusterRole,
    /// `system:coredns` → ServiceAccount `coredns`.
    pub cluster_role_binding: ClusterRoleBinding,
    /// `kube-system/coredns` with the `Corefile`.
    pub config_map: ConfigMap,
    /// `kube-system/kube-dns` on the DNS Service IP(s).
    pub service: Service,
    /// `kube-system/coredns`.
    pub deployment: Deployment,
}

/// Pod-template annotation of the kube-proxy DaemonSet: a hash of the `kube-proxy` ConfigMap's
/// data (`config.conf`, `kubeconfig.conf`), so a change of the configuration (`mode`, the
/// patches, the endpoint) rolls the DaemonSet's pods onto it (kube-proxy reads its
/// configuration only at start).
pub const KUBE_PROXY_CONFIG_HASH_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/kamaji-rs-kube-proxy-config-hash";

/// `sha256:<hex>` of a ConfigMap's data (keys in order, each key and value length-prefixed).
fn config_hash(data: &BTreeMap<String, String>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (k, v) in data {
        for part in [k, v] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

/// [`KUBE_PROXY_DAEMONSET`] as parsed once ([`from_template`]).
static KUBE_PROXY_DAEMONSET_PARSED: OnceLock<DaemonSet> = OnceLock::new();

const KUBE_PROXY_DAEMONSET: &str = r"
apiVersion: apps/v1
kind: DaemonSet
metadata:
  labels: {k8s-app: kube-proxy}
  name: kube-proxy
  namespace: kube-system
spec:
  selector:
    matchLabels: {k8s-app: kube-proxy}
  updateStrategy: {type: RollingUpdate}
  template:
    metadata:
      labels: {k8s-app: kube-proxy}
    spec:
      priorityClassName: system-node-critical
      containers:
      - name: kube-proxy
        image: IMAGE
        imagePullPolicy: IfNotPresent
        command:
        - /usr/local/bin/kube-proxy
        - --config=/var/lib/kube-proxy/config.conf
        - --hostname-override=$(NODE_NAME)
        securityContext: {privileged: true}
        volumeMounts:
        - {mountPath: /var/lib/kube-proxy, name: kube-proxy}
        - {mountPath: /run/xtables.lock, name: xtables-lock, readOnly: false}
        - {mountPath: /lib/modules, name: lib-modules, readOnly: true}
        env:
        - name: NODE_NAME
          valueFrom:
            fieldRef: {fieldPath: spec.nodeName}
      hostNetwork: true
      serviceAccountName: kube-proxy
      volumes:
      - name: kube-proxy
        configMap: {name: kube-proxy}
      - name: xtables-lock
        hostPath: {path: /run/xtables.lock, type: FileOrCreate}
      - name: lib-modules
        hostPath: {path: /lib/modules}
      tolerations:
      - operator: Exists
      nodeSelector: {kubernetes.io/os: linux}
";

/// The KubeProxyConfiguration kubeadm publishes (`bindAddress: 0.0.0.0`, the kubeconfig in
/// `/var/lib/kube-proxy`, `clusterCIDR` = the pod CIDRs, `mode: ""` = the platform default),
/// with `addons.kubeProxy.configurationJSONPatches` applied in order.
///
/// # Errors
/// [`ValidationError`] on `addons.kubeProxy.configurationJSONPatches` if a patch fails or the
/// result changes `apiVersion`/`kind`.
pub fn kube_proxy_configuration(tenant: &Tenant) -> Result<Value, ValidationError> {
    let mut config = json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "bindAddress": "0.0.0.0",
        "clientConnection": {"kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf"},
        "clusterCIDR": tenant.network().pod_subnet(),
        "mode": "",
    });
    let field = "addons.kubeProxy.configurationJSONPatches";
    json_patch::patch(&mut config, tenant.kube_proxy_patches())
        .map_err(|e| ValidationError::new(field, e.to_string()))?;
    if config.get("apiVersion").and_then(Value::as_str) != Some("kubeproxy.config.k8s.io/v1alpha1")
        || config.get("kind").and_then(Value::as_str) != Some("KubeProxyConfiguration")
    {
        return Err(ValidationError::new(
            field,
            "the patched configuration must keep apiVersion kubeproxy.config.k8s.io/v1alpha1 and kind KubeProxyConfiguration",
        ));
    }
    Ok(config)
}

/// kube-proxy as kubeadm deploys it: ServiceAccount, `kubeadm:node-proxier` binding, the
/// `kube-proxy` Role/RoleBinding for the bootstrap token group, the ConfigMap (label
/// `app: kube-proxy`; `config.conf` = a KubeProxyConfiguration with `clusterCIDR` = the pod
/// CIDRs, `kubeconfig.conf` pointing at the **public** endpoint) and the DaemonSet with image
/// `<registry>/kube-proxy:<tenant version>` (or the override) and the ConfigMap's hash in its
/// pod template ([`KUBE_PROXY_CONFIG_HASH_ANNOTATION`]), so a configuration change rolls it.
///
/// # Errors
/// [`Error::Render`], [`Error::Template`].
pub fn kube_proxy(tenant: &Tenant) -> Result<KubeProxyObjects, Error> {
    let ns = Some("kube-system");
    let config = kube_proxy_configuration(tenant)?;
    let mut config_map = ConfigMap {
        metadata: meta("kube-proxy", ns),
        data: Some(BTreeMap::from([
            (
                "config.conf".to_owned(),
                to_yaml("KubeProxyConfiguration", &config)?,
            ),
            (
                "kubeconfig.conf".to_owned(),
                kube_proxy_kubeconfig(&tenant.server_url()).to_yaml()?,
            ),
        ])),
        ..ConfigMap::default()
    };
    config_map.metadata.labels = Some(labels(&[("app", "kube-proxy")]));
    let mut daemon_set: DaemonSet = from_template(
        &KUBE_PROXY_DAEMONSET_PARSED,
        "kube-proxy DaemonSet",
        KUBE_PROXY_DAEMONSET,
    )?;
    let hash = config_hash(config_map.data.as_ref().unwrap_or(&BTreeMap::new()));
    for template in daemon_set.spec.iter_mut().map(|s| &mut s.template) {
        template
            .metadata
            .get_or_insert_default()
            .annotations
            .get_or_insert_default()
            .insert(KUBE_PROXY_CONFIG_HASH_ANNOTATION.to_owned(), hash.clone());
        for c in template
            .spec
            .iter_mut()
            .flat_map(|p| p.containers.iter_mut())
        {
            c.image = Some(tenant.kube_proxy_image().to_owned());
        }
    }
    let (role, role_binding) = configmap_reader(
        "kube-proxy",
        "kube-system",
        &["kube-proxy"],
        vec![group(NODE_BOOTSTRAP_TOKEN_GROUP)],
    );
    Ok(KubeProxyObjects {
        service_account: ServiceAccount {
            metadata: meta("kube-proxy", ns),
            ..ServiceAccount::default()
        },
        cluster_role_binding: cluster_role_binding(
            "kubeadm:node-proxier",
            "system:node-proxier",
            vec![Subject {
                api_group: None,
                kind: "ServiceAccount".into(),
                name: "kube-proxy".into(),
                namespace: Some("kube-system".into()),
            }],
        ),
        role,
        role_binding,
        config_map,
        daemon_set,
    })
}

/// [`COREDNS_DEPLOYMENT`] as parsed once ([`from_template`]).
static COREDNS_DEPLOYMENT_PARSED: OnceLock<Deployment> = OnceLock::new();

const COREDNS_DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  replicas: 2
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxUnavailable: 1}
  selector:
    matchLabels: {k8s-app: kube-dns}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      priorityClassName: system-cluster-critical
      serviceAccountName: coredns
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              labelSelector:
                matchExpressions:
                - {key: k8s-app, operator: In, values: [kube-dns]}
              topologyKey: kubernetes.io/hostname
      tolerations:
      - {key: CriticalAddonsOnly, operator: Exists}
      - {key: node-role.kubernetes.io/control-plane, effect: NoSchedule}
      nodeSelector: {kubernetes.io/os: linux}
      containers:
      - name: coredns
        image: IMAGE
        imagePullPolicy: IfNotPresent
        resources:
          limits: {memory: 170Mi}
          requests: {cpu: 100m, memory: 70Mi}
        args: ["-conf", "/etc/coredns/Corefile"]
        volumeMounts:
        - {name: config-volume, mountPath: /etc/coredns, readOnly: true}
        ports:
        - {containerPort: 53, name: dns, protocol: UDP}
        - {containerPort: 53, name: dns-tcp, protocol: TCP}
        - {containerPort: 9153, name: metrics, protocol: TCP}
        - {containerPort: 8080, name: liveness-probe, protocol: TCP}
        - {containerPort: 8181, name: readiness-probe, protocol: TCP}
        livenessProbe:
          httpGet: {path: /health, port: liveness-probe, scheme: HTTP}
          initialDelaySeconds: 60
          timeoutSeconds: 5
          successThreshold: 1
          failureThreshold: 5
        readinessProbe:
          httpGet: {path: /ready, port: readiness-probe, scheme: HTTP}
        securityContext:
          allowPrivilegeEscalation: false
          capabilities:
            add: [NET_BIND_SERVICE]
            drop: [ALL]
          readOnlyRootFilesystem: true
      dnsPolicy: Default
      volumes:
      - name: config-volume
        configMap:
          name: coredns
          items:
          - {key: Corefile, path: Corefile}
"#;

/// [`COREDNS_SERVICE`] as parsed once ([`from_template`]).
static COREDNS_SERVICE_PARSED: OnceLock<Service> = OnceLock::new();

const COREDNS_SERVICE: &str = r#"
apiVersion: v1
kind: Service
metadata:
  labels:
    k8s-app: kube-dns
    kubernetes.io/cluster-service: "true"
    kubernetes.io/name: CoreDNS
  name: kube-dns
  namespace: kube-system
  annotations:
    prometheus.io/port: "9153"
    prometheus.io/scrape: "true"
spec:
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
  - {name: metrics, port: 9153, protocol: TCP, targetPort: 9153}
  selector: {k8s-app: kube-dns}
"#;

/// [`COREDNS_CLUSTER_ROLE`] as parsed once ([`from_template`]).
static COREDNS_CLUSTER_ROLE_PARSED: OnceLock<ClusterRole> = OnceLock::new();

const COREDNS_CLUSTER_ROLE: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [nodes]
  verbs: [get]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
"#;

/// The Corefile kubeadm writes for `dns_domain` (kubeadm ≥ 1.36 additionally disables
/// success/denial caching of the cluster domain).
#[must_use]
pub fn corefile(dns_domain: &str, disable_cluster_domain_cache: bool) -> String {
    let cache = if disable_cluster_domain_cache {
        format!(
            "    cache 30 {{\n       disable success {dns_domain}\n       disable denial {dns_domain}\n    }}\n"
        )
    } else {
        "    cache 30\n".to_owned()
    };
    format!(
        ".:53 {{\n    errors\n    health {{\n       lameduck 5s\n    }}\n    ready\n    kubernetes {dns_domain} in-addr.arpa ip6.arpa {{\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n       ttl 30\n    }}\n    prometheus :9153\n    forward . /etc/resolv.conf {{\n       max_concurrent 1000\n    }}\n{cache}    loop\n    reload\n    loadbalance\n}}\n"
    )
}

/// CoreDNS as kubeadm deploys it: ServiceAccount, ClusterRole/Binding `system:coredns`, the
/// `coredns` ConfigMap (Corefile for the tenant's DNS domain), the `kube-dns` Service with
/// `clusterIP` = the first DNS Service IP (all of them in `clusterIPs`, dual-stack when two) —
/// the same address as kubelet `clusterDNS` — and the Deployment (2 replicas) with the CoreDNS
/// image of the tenant's minor.
///
/// # Errors
/// [`Error::Template`].
pub fn coredns(tenant: &Tenant) -> Result<CoreDnsObjects, Error> {
    let ns = Some("kube-system");
    let mut deployment: Deployment = from_template(
        &COREDNS_DEPLOYMENT_PARSED,
        "CoreDNS Deployment",
        COREDNS_DEPLOYMENT,
    )?;
    for c in deployment
        .spec
        .iter_mut()
        .filter_map(|s| s.template.spec.as_mut())
        .flat_map(|p| p.containers.iter_mut())
    {
        c.image = Some(tenant.coredns_image().to_owned());
    }
    let mut service: Service =
        from_template(&COREDNS_SERVICE_PARSED, "CoreDNS Service", COREDNS_SERVICE)?;
    let ips: Vec<String> = tenant
        .network()
        .dns_service_ips()
        .iter()
        .map(ToString::to_string)
        .collect();
    if let Some(spec) = service.spec.as_mut() {
        spec.cluster_ip = ips.first().cloned();
        if ips.len() > 1 {
            spec.ip_family_policy = Some("PreferDualStack".into());
        }
        spec.cluster_ips = Some(ips);
    }
    Ok(CoreDnsObjects {
        service_account: ServiceAccount {
            metadata: meta("coredns", ns),
            ..ServiceAccount::default()
        },
        cluster_role: from_template(
            &COREDNS_CLUSTER_ROLE_PARSED,
            "CoreDNS ClusterRole",
            COREDNS_CLUSTER_ROLE,
        )?,
        cluster_role_binding: cluster_role_binding(
            "system:coredns",
            "system:coredns",
            vec![Subject {
                api_group: None,
                kind: "ServiceAccount".into(),
                name: "coredns".into(),
                namespace: Some("kube-system".into()),
            }],
        ),
        config_map: ConfigMap {
            metadata: meta("coredns", ns),
            data: Some(BTreeMap::from([(
                "Corefile".to_owned(),
                corefile(
                    tenant.network().dns_domain(),
                    tenant.version().at_least(1, 36),
                ),
            )])),
            ..ConfigMap::default()
        },
        service,
        deployment,
    })
}
