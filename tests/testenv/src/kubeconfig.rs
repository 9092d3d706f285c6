//! Clients from kubeconfigs: files, bytes, Secrets, and `ServiceAccount` tokens.

use std::path::Path;

use anyhow::{Context as _, Result};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// A client configuration from kubeconfig text (YAML), using its current context.
///
/// # Errors
/// When the text is no valid kubeconfig.
pub async fn config_from_kubeconfig(yaml: &[u8]) -> Result<kube::Config> {
    let kc: Kubeconfig = serde_yaml::from_slice(yaml)?;
    Ok(kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?)
}

/// A client from a kubeconfig file.
///
/// # Errors
/// When the file is unreadable or invalid.
pub async fn client_from_kubeconfig(path: &Path) -> Result<Client> {
    let text = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    Ok(Client::try_from(config_from_kubeconfig(&text).await?)?)
}

/// The client configuration stored in key `key` of Secret `ns/name` (e.g. CAPI's
/// `<cluster>-kubeconfig`, key `value`).
///
/// # Errors
/// When the Secret or the key is missing or the kubeconfig is invalid.
pub async fn config_from_secret(
    client: &Client,
    ns: &str,
    name: &str,
    key: &str,
) -> Result<kube::Config> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    let raw = secret
        .data
        .and_then(|d| d.get(key).cloned())
        .with_context(|| format!("Secret {ns}/{name} has no key {key}"))?;
    config_from_kubeconfig(&raw.0).await
}

/// A token of `ServiceAccount` `ns/name` from the `TokenRequest` API, valid for `seconds`.
///
/// # Errors
/// When the `ServiceAccount` does not exist or the request is refused.
pub async fn service_account_token(
    client: &Client,
    ns: &str,
    name: &str,
    seconds: i64,
) -> Result<String> {
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(seconds),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let created = api
        .create_token_request(name, &PostParams::default(), &req)
        .await
        .with_context(|| format!("TokenRequest for ServiceAccount {ns}/{name}"))?;
    Ok(created.status.context("TokenRequest without status")?.token)
}
