//! Talking to a tenant API server: reachability (`/readyz` through the public endpoint, with
//! the CAPI admin kubeconfig) and the tenant-side kubeadm artifacts (server-side applied with
//! the provider's super-admin identity over the management Service address).

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kamaji_bootstrap::kubeadm::TenantArtifacts;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, Preconditions,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use lru::LruCache;
use prometheus_client::metrics::counter::Counter;

use crate::error::Error;
use kamaji_api::meta::{
    FIELD_MANAGER, KUBECONFIG_SECRET_KEY, TENANT_ARTIFACTS_HASH_ANNOTATION,
    TENANT_INSTALLED_ANNOTATION,
};

/// How many tenant clients [`Clients`] keeps: the passes that reach one tenant while it comes
/// up (its control plane turning ready, then its status settling) come within seconds of each
/// other, so a few dozen cover a thousand tenants provisioning at once.
pub const TENANT_CLIENTS_KEPT: NonZeroUsize = NonZeroUsize::new(64).expect("non-zero");

/// Tenant clients kept between passes for the kubeadm artifacts (issue 16: building one parses
/// its kubeconfig and each new client opens a new TLS connection), not for `/readyz`
/// ([`Clients::fresh`]),
/// least recently used first out, at most [`TENANT_CLIENTS_KEPT`]. Only the clients of tenants
/// coming up are kept: a settled tenant is reached once per resync, and keeping its client
/// (and its idle connection) would only cost memory, most after a restart.
///
/// Keyed by the kubeconfig Secret's UID with the `resourceVersion` the client was built from:
/// a reissued or repointed kubeconfig is a new version, so it gets a new client. A client's
/// pooled connections that a restarted tenant API server closed are dropped by the client and
/// reopened; a caller that met an error forgets the client ([`Clients::forget`]) all the same.
pub struct Clients {
    kept: Mutex<LruCache<String, (String, Client)>>,
    user_agent: Option<http::HeaderValue>,
    built: Counter,
}

impl Clients {
    /// None kept yet; the clients send `user_agent` (none when `None` or empty); `built`
    /// counts the clients built.
    #[must_use]
    pub fn new(user_agent: Option<http::HeaderValue>, built: Counter) -> Self {
        Self {
            kept: Mutex::new(LruCache::new(TENANT_CLIENTS_KEPT)),
            user_agent: user_agent.filter(|v| !v.is_empty()),
            built,
        }
    }

    /// The client for the kubeconfig of `secret`: the kept one built from this version of the
    /// Secret, or a new one ([`client_from_secret`]), kept if `keep` (the tenant is coming up)
    /// and the Secret has a UID and a version.
    ///
    /// # Errors
    /// [`Error::Tenant`] when the Secret holds no valid kubeconfig.
    pub async fn get(&self, secret: &Secret, keep: bool) -> Result<Client, Error> {
        let key = secret
            .metadata
            .uid
            .clone()
            .zip(secret.metadata.resource_version.clone());
        if let Some((uid, version)) = &key
            && let Ok(mut kept) = self.kept.lock()
            && let Some((v, client)) = kept.get(uid)
            && v == version
        {
            return Ok(client.clone());
        }
        let client = self.fresh(secret).await?;
        if keep
            && let Some((uid, version)) = key
            && let Ok(mut kept) = self.kept.lock()
        {
            kept.put(uid, (version, client.clone()));
        }
        Ok(client)
    }

    /// A new client for the kubeconfig of `secret`, neither taken from the kept ones nor kept:
    /// for the reachability probe through the endpoint, whose point is a new connection (a
    /// kept connection would hide a load balancer that refuses new ones).
    ///
    /// # Errors
    /// [`Error::Tenant`] when the Secret holds no valid kubeconfig.
    pub async fn fresh(&self, secret: &Secret) -> Result<Client, Error> {
        let client = client_from_secret(secret, self.user_agent.as_ref()).await?;
        self.built.inc();
        Ok(client)
    }

    /// Drops the kept client of `secret` (after an error through it).
    pub fn forget(&self, secret: &Secret) {
        if let Some(uid) = &secret.metadata.uid
            && let Ok(mut kept) = self.kept.lock()
        {
            kept.pop(uid);
        }
    }

    /// How many clients are kept.
    #[must_use]
    pub fn len(&self) -> usize {
        self.kept.lock().map_or(0, |k| k.len())
    }

    /// Whether no client is kept.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A new client for the kubeconfig stored under key `value` of `secret`, with short timeouts,
/// sending `user_agent` when given.
///
/// # Errors
/// [`Error::Tenant`] when the Secret holds no valid kubeconfig.
pub async fn client_from_secret(
    secret: &Secret,
    user_agent: Option<&http::HeaderValue>,
) -> Result<Client, Error> {
    let raw = secret
        .data
        .as_ref()
        .and_then(|d| d.get(KUBECONFIG_SECRET_KEY))
        .ok_or_else(|| Error::Tenant("kubeconfig Secret has no `value`".into()))?;
    let kc: Kubeconfig =
        serde_yaml::from_slice(&raw.0).map_err(|e| Error::Tenant(format!("kubeconfig: {e}")))?;
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Tenant(format!("kubeconfig: {e}")))?;
    config.connect_timeout = Some(Duration::from_secs(3));
    config.read_timeout = Some(Duration::from_secs(15));
    config.write_timeout = Some(Duration::from_secs(15));
    if let Some(agent) = user_agent {
        config
            .headers
            .push((http::header::USER_AGENT, agent.clone()));
    }
    Client::try_from(config).map_err(|e| Error::Tenant(format!("client: {e}")))
}

/// `GET /readyz` answered `ok`.
pub async fn readyz(client: &Client) -> bool {
    let Ok(req) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    matches!(client.request_text(req).await, Ok(body) if body.trim() == "ok")
}

/// Every tenant object of `artifacts` as dynamic objects, in apply order.
///
/// # Errors
/// [`Error::Bootstrap`] / [`Error::Serde`] when rendering fails.
pub fn objects(artifacts: &TenantArtifacts) -> Result<Vec<DynamicObject>, Error> {
    artifacts
        .to_values()?
        .into_iter()
        .map(|v| serde_json::from_value(v).map_err(Error::from))
        .collect()
}

/// Server-side applies `objects` to the tenant (forced: these objects are the provider's).
///
/// # Errors
/// [`Error::Tenant`] naming the first object the tenant refused.
pub async fn apply(client: &Client, objects: &[DynamicObject]) -> Result<(), Error> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for obj in objects {
        let (api, kind, name) = api_of(client, obj)?;
        api.patch(&name, &pp, &Patch::Apply(obj))
            .await
            .map_err(|e| Error::Tenant(format!("apply {kind} {name}: {e}")))?;
    }
    Ok(())
}

/// Deletes each object of `objects` (identities only) that exists in the tenant and that
/// kamaji-rs applied (its `managedFields` name [`FIELD_MANAGER`] and it carries
/// [`TENANT_INSTALLED_ANNOTATION`]); an object of the same name a user created is kept, and so
/// is one an earlier kamaji-rs applied without the annotation. The delete is preconditioned on the UID read, so an object
/// re-created in between is kept too. Returns how many were deleted.
///
/// # Errors
/// [`Error::Tenant`] naming the first object the tenant did not let read or delete.
pub async fn remove_applied(client: &Client, objects: &[DynamicObject]) -> Result<usize, Error> {
    let mut deleted = 0;
    for obj in objects {
        let (api, kind, name) = api_of(client, obj)?;
        let found = api
            .get_opt(&name)
            .await
            .map_err(|e| Error::Tenant(format!("read {kind} {name}: {e}")))?;
        let Some(found) = found else { continue };
        let ours = found
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|m| m.manager.as_deref() == Some(FIELD_MANAGER))
            && found
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(TENANT_INSTALLED_ANNOTATION));
        if !ours {
            continue;
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: found.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(&name, &dp).await {
            Ok(_) => deleted += 1,
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(Error::Tenant(format!("delete {kind} {name}: {e}"))),
        }
    }
    Ok(deleted)
}

/// Whether the tenant may hold objects an earlier apply of kamaji-rs left, which
/// [`remove_applied`] must then look for: `cluster_info` (as read before this apply) names a
/// kubeconfig or an applied set (a complete apply), or `first` exists in the tenant. `first` is
/// the first object of every apply (the join RBAC, which every set holds and
/// [`crate::reconcile::plan::TenantObjects::objects`] puts before any addon's objects, applied
/// one after another in that order), so an apply that stopped half-way left it. A tenant with
/// neither was never applied to: its objects of addons `spec.addons` leaves out are not
/// kamaji-rs's, and the first bootstrap does not read each of them (about 20 GETs).
///
/// # Errors
/// [`Error::Tenant`] when the tenant refuses to let `first` be read.
pub async fn applied_before(
    client: &Client,
    cluster_info: &ClusterInfo,
    first: &DynamicObject,
) -> Result<bool, Error> {
    if cluster_info.kubeconfig.is_some() || cluster_info.artifacts_hash.is_some() {
        return Ok(true);
    }
    let (api, kind, name) = api_of(client, first)?;
    let found = api
        .get_metadata_opt(&name)
        .await
        .map_err(|e| Error::Tenant(format!("read {kind} {name}: {e}")))?;
    Ok(found.is_some())
}

/// The dynamic API of `obj`'s kind and namespace, its kind and its name.
fn api_of(
    client: &Client,
    obj: &DynamicObject,
) -> Result<(Api<DynamicObject>, String, String), Error> {
    let types = obj
        .types
        .clone()
        .ok_or_else(|| Error::Tenant("artifact without apiVersion/kind".into()))?;
    let (group, version) = match types.api_version.split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), types.api_version.clone()),
    };
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(&group, &version, &types.kind));
    let name = obj.metadata.name.clone().unwrap_or_default();
    let api = match &obj.metadata.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    Ok((api, types.kind, name))
}

/// Sets `client-ca-file` and `requestheader-client-ca-file` of the tenant's
/// `kube-system/extension-apiserver-authentication` ConfigMap to `client_ca` and
/// `requestheader_client_ca` (PEM) when they differ, with the read `resourceVersion` as a
/// precondition. kube-apiserver's cluster-authentication-trust controller only adds its CA
/// files to what the ConfigMap holds (it drops a certificate once expired, not before), so a
/// CA rotation has to take the old CAs out. Every API server must already run with exactly
/// these CAs, or it merges its own back. Returns whether it wrote; nothing to do while the
/// ConfigMap does not exist (kube-apiserver creates it from its own files).
///
/// # Errors
/// [`Error::Tenant`] when the tenant refuses the read or the write (a conflict included: the
/// pass is retried).
pub async fn set_authentication_trust(
    client: &Client,
    client_ca: &str,
    requestheader_client_ca: &str,
) -> Result<bool, Error> {
    const NAME: &str = "extension-apiserver-authentication";
    let api = Api::<ConfigMap>::namespaced(client.clone(), "kube-system");
    let Some(cm) = api
        .get_opt(NAME)
        .await
        .map_err(|e| Error::Tenant(format!("read kube-system/{NAME}: {e}")))?
    else {
        return Ok(false);
    };
    let data = cm.data.unwrap_or_default();
    let want = [
        ("client-ca-file", client_ca),
        ("requestheader-client-ca-file", requestheader_client_ca),
    ];
    if want
        .iter()
        .all(|(k, v)| data.get(*k).map(String::as_str) == Some(*v))
    {
        return Ok(false);
    }
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": cm.metadata.resource_version},
        "data": {
            "client-ca-file": client_ca,
            "requestheader-client-ca-file": requestheader_client_ca,
        },
    });
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| Error::Tenant(format!("write kube-system/{NAME}: {e}")))?;
    Ok(true)
}

/// Whether `pattern` (an `EncryptionConfiguration` resource: `<resource>`,
/// `<resource>.<group>`, `*.<group>`, `*.`, `*.*`) names the resource `plural` of `group`.
#[must_use]
pub fn names_resource(pattern: &str, group: &str, plural: &str) -> bool {
    pattern == "*.*"
        || pattern.strip_prefix("*.") == Some(group)
        || pattern.strip_prefix(plural).is_some_and(|rest| {
            (rest.is_empty() && group.is_empty()) || rest.strip_prefix('.') == Some(group)
        })
}

/// Rewrites every stored object of the tenant's `resources` (`EncryptionConfiguration` form,
/// see [`names_resource`]), unchanged, so that kube-apiserver stores each anew with the
/// encryption configuration that now writes (a storage migration: an update of an object
/// read with a key or provider other than the writer is written even when nothing changed,
/// as Kubernetes' "Rotating a decryption key" task relies on). Resources other than Secrets
/// are found through the tenant's discovery; only those that can be listed and updated are
/// rewritten. Read in pages of 500; an object deleted or updated meanwhile needs nothing more
/// (its last write used the configuration that writes). Returns how many were rewritten.
///
/// # Errors
/// [`Error::Tenant`] when discovery, a list or an update is refused.
pub async fn rewrite(client: &Client, resources: &[String]) -> Result<usize, Error> {
    use kube::core::{ApiResource, DynamicObject};
    use kube::discovery::{Discovery, Scope, verbs};
    let mut targets: Vec<(ApiResource, Scope)> = Vec::new();
    if resources
        .iter()
        .any(|r| r != kamaji_bootstrap::encryption::SECRETS)
    {
        let discovery = Discovery::new(client.clone())
            .run()
            .await
            .map_err(|e| Error::Tenant(format!("discover the tenant's resources: {e}")))?;
        for group in discovery.groups() {
            for (ar, caps) in group.recommended_resources() {
                let wanted = resources
                    .iter()
                    .any(|r| names_resource(r, &ar.group, &ar.plural));
                if wanted
                    && caps.supports_operation(verbs::LIST)
                    && caps.supports_operation(verbs::UPDATE)
                {
                    targets.push((ar, caps.scope));
                }
            }
        }
    } else {
        targets.push((ApiResource::erase::<Secret>(&()), Scope::Namespaced));
    }
    let mut rewritten = 0;
    for (ar, scope) in &targets {
        let what = if ar.group.is_empty() {
            ar.plural.clone()
        } else {
            format!("{}.{}", ar.plural, ar.group)
        };
        let all = Api::<DynamicObject>::all_with(client.clone(), ar);
        let mut page = ListParams::default().limit(500);
        loop {
            let list = match all.list(&page).await {
                Ok(list) => list,
                // Not served any more, or by an aggregated server that stores nothing here.
                Err(kube::Error::Api(s)) if matches!(s.code, 404 | 405 | 503) => break,
                Err(e) => return Err(Error::Tenant(format!("list {what}: {e}"))),
            };
            for object in &list.items {
                let Some(name) = object.metadata.name.as_deref() else {
                    continue;
                };
                let api = match (scope, object.metadata.namespace.as_deref()) {
                    (Scope::Namespaced, Some(ns)) => {
                        Api::<DynamicObject>::namespaced_with(client.clone(), ns, ar)
                    }
                    _ => all.clone(),
                };
                match api.replace(name, &PostParams::default(), object).await {
                    Ok(_) => rewritten += 1,
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                    Err(e) => return Err(Error::Tenant(format!("rewrite {what} {name}: {e}"))),
                }
            }
            match list.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => page = ListParams::default().limit(500).continue_token(&token),
                None => break,
            }
        }
    }
    Ok(rewritten)
}

/// What a pass reads of the tenant's `kube-public/cluster-info` ConfigMap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterInfo {
    /// Its `kubeconfig` value (`None` when the ConfigMap or the key is missing).
    pub kubeconfig: Option<String>,
    /// Its [`TENANT_ARTIFACTS_HASH_ANNOTATION`]: the set of tenant objects last applied
    /// completely.
    pub artifacts_hash: Option<String>,
}

/// The tenant's `kube-public/cluster-info` ([`ClusterInfo`]; all `None` if it does not exist).
///
/// # Errors
/// [`Error::Tenant`] when the tenant does not answer.
pub async fn cluster_info(client: &Client) -> Result<ClusterInfo, Error> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), "kube-public")
        .get_opt("cluster-info")
        .await
        .map_err(|e| Error::Tenant(format!("read cluster-info: {e}")))?;
    let Some(cm) = cm else {
        return Ok(ClusterInfo::default());
    };
    Ok(ClusterInfo {
        artifacts_hash: cm
            .metadata
            .annotations
            .and_then(|mut a| a.remove(TENANT_ARTIFACTS_HASH_ANNOTATION)),
        kubeconfig: cm.data.and_then(|mut d| d.remove("kubeconfig")),
    })
}

/// The konnectivity agents' workload in the tenant (`kube-system/konnectivity-agent`, of
/// `mode`'s kind) as `(ready, desired)`, `None` while it does not exist.
///
/// # Errors
/// [`Error::Tenant`] when the tenant refuses the read.
pub async fn konnectivity_agents(
    client: &Client,
    mode: kamaji_bootstrap::konnectivity::AgentMode,
) -> Result<Option<(i32, i32)>, Error> {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    use kamaji_bootstrap::konnectivity::{AGENT_NAME, AGENT_NAMESPACE, AgentMode};
    let read = |e: kube::Error| Error::Tenant(format!("read {AGENT_NAMESPACE}/{AGENT_NAME}: {e}"));
    Ok(match mode {
        AgentMode::DaemonSet => Api::<DaemonSet>::namespaced(client.clone(), AGENT_NAMESPACE)
            .get_opt(AGENT_NAME)
            .await
            .map_err(read)?
            .map(|d| {
                let s = d.status.unwrap_or_default();
                (s.number_ready, s.desired_number_scheduled)
            }),
        AgentMode::Deployment { .. } => {
            Api::<Deployment>::namespaced(client.clone(), AGENT_NAMESPACE)
                .get_opt(AGENT_NAME)
                .await
                .map_err(read)?
                .map(|d| {
                    let desired = d.spec.and_then(|s| s.replicas).unwrap_or(1);
                    let ready = d.status.and_then(|s| s.ready_replicas).unwrap_or(0);
                    (ready, desired)
                })
        }
    })
}

#[cfg(test)]
mod rewrite_tests {
    use super::names_resource;

    /// The patterns name resources as kube-apiserver's `EncryptionConfiguration` does.
    #[test]
    fn patterns_name_resources_as_the_encryption_configuration_does() {
        assert!(names_resource("secrets", "", "secrets"));
        assert!(names_resource("configmaps", "", "configmaps"));
        assert!(!names_resource("configmaps", "", "configmapsx"));
        assert!(!names_resource("configmaps", "apps", "configmaps"));
        assert!(names_resource("deployments.apps", "apps", "deployments"));
        assert!(!names_resource("deployments.apps", "", "deployments"));
        assert!(!names_resource(
            "deployments.apps",
            "apps.example.com",
            "deployments"
        ));
        assert!(names_resource("*.apps", "apps", "daemonsets"));
        assert!(!names_resource("*.apps", "", "pods"));
        assert!(names_resource("*.", "", "pods"));
        assert!(!names_resource("*.", "apps", "deployments"));
        assert!(names_resource("*.*", "widgets.example.com", "widgets"));
    }
}

#[cfg(test)]
mod clients_tests {
    use super::*;

    /// A kubeconfig Secret of `uid` at `version` (its server is never dialled).
    fn kubeconfig_secret(uid: &str, version: &str) -> Secret {
        let kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: https://127.0.0.1:9\n    insecure-skip-tls-verify: true\nusers:\n- name: t\n  user: {}\ncontexts:\n- name: t\n  context: {cluster: t, user: t}\ncurrent-context: t\n";
        Secret {
            metadata: kube::api::ObjectMeta {
                uid: Some(uid.into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            data: Some(
                [(
                    KUBECONFIG_SECRET_KEY.to_owned(),
                    k8s_openapi::ByteString(kubeconfig.into()),
                )]
                .into(),
            ),
            ..Default::default()
        }
    }

    /// A client is built once per version of a kubeconfig Secret while its tenant comes up, and
    /// built anew for a new version, after an error, and for a settled tenant (never kept).
    #[tokio::test]
    async fn tenant_clients_are_kept_per_secret_version_only_while_the_tenant_comes_up() {
        let built = Counter::default();
        let clients = Clients::new(None, built.clone());
        let v1 = kubeconfig_secret("a", "1");
        clients.get(&v1, true).await.expect("client");
        clients.get(&v1, true).await.expect("client");
        clients.get(&v1, false).await.expect("client");
        assert_eq!(
            built.get(),
            1,
            "the kept client serves every pass of that version"
        );
        assert_eq!(clients.len(), 1);
        let v2 = kubeconfig_secret("a", "2");
        clients.get(&v2, true).await.expect("client");
        assert_eq!(
            built.get(),
            2,
            "a new version of the Secret gets a new client"
        );
        assert_eq!(clients.len(), 1, "and replaces the old one");
        clients.forget(&v2);
        assert!(clients.is_empty());
        clients.get(&v2, true).await.expect("client");
        assert_eq!(built.get(), 3, "a forgotten client is built again");
        clients.fresh(&v2).await.expect("client");
        assert_eq!(built.get(), 4, "a probe's client is always new");
        assert_eq!(clients.len(), 1, "and never kept");
        let settled = kubeconfig_secret("b", "1");
        clients.get(&settled, false).await.expect("client");
        clients.get(&settled, false).await.expect("client");
        assert_eq!(built.get(), 6, "a settled tenant's client is not kept");
        assert_eq!(clients.len(), 1);
        let broken = Secret::default();
        assert!(clients.get(&broken, true).await.is_err());
        assert_eq!(built.get(), 6);
        for i in 0..=TENANT_CLIENTS_KEPT.get() {
            clients
                .get(&kubeconfig_secret(&format!("n{i}"), "1"), true)
                .await
                .expect("client");
        }
        assert_eq!(clients.len(), TENANT_CLIENTS_KEPT.get(), "bounded");
    }
}
