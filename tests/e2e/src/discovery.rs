//! A real `kubeadm join` token discovery against a tenant, as a worker would do it.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kamaji_bootstrap::token::{BootstrapToken, TokenSecretOptions, bootstrap_token_secret};
use kamaji_testenv::kubeadm;
use kamaji_testenv::wait::await_object;
use kube::api::{Api, PostParams};

use crate::{Env, secret_text};

/// Creates a fresh bootstrap token in the tenant, waits for its cluster-info signature, and
/// runs the real `kubeadm join phase preflight` discovery against `endpoint` pinned to the CA
/// of `<cluster>-ca`. Returns kubeadm's output; fails when discovery fails.
pub async fn kubeadm_discovery(
    env: &Env,
    ns: &str,
    cluster: &str,
    endpoint: &str,
) -> Result<String> {
    let tenant = env.tenant_client(ns, cluster).await?;
    let token = BootstrapToken::generate()?;
    let secret = bootstrap_token_secret(&token, &TokenSecretOptions::default())?;
    Api::<Secret>::namespaced(tenant.clone(), "kube-system")
        .create(&PostParams::default(), &secret)
        .await?;
    let key = token.jws_key();
    let signed = move |c: &ConfigMap| c.data.as_ref().is_some_and(|d| d.contains_key(&key));
    let cluster_info = Api::<ConfigMap>::namespaced(tenant, "kube-public");
    await_object(
        &cluster_info,
        "cluster-info",
        Duration::from_mins(1),
        signed,
    )
    .await?
    .context("cluster-info was not signed for the new token within 60 s")?;
    let ca_pem = secret_text(&env.secret(ns, &format!("{cluster}-ca")).await?, "tls.crt");
    let hash = kamaji_bootstrap::pki::ca_cert_hash(&ca_pem)?;
    let found = kubeadm::join_preflight(env.cluster.tools(), endpoint, &token.token(), &hash)?;
    if !found.success || !found.validated_pin() {
        bail!("kubeadm join discovery failed:\n{}", found.output);
    }
    Ok(found.output)
}
