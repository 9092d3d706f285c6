//! Stand-in for cert-manager: a real cluster uses cert-manager.
//!
//! `clusterctl init` requires cert-manager, and Cluster API's components ask it for their
//! webhook serving certificates and for CA injection. cert-manager cannot be built here, so
//! [`CertManagerStandIn`] does the smallest part of its job that they need:
//!
//! - the `Certificate`, `Issuer` and `ClusterIssuer` CRDs (`cert-manager.io/v1`, any content):
//!   clusterctl's check creates and deletes its test resources, passes, and skips installing
//!   cert-manager;
//! - issuing: each `Certificate` gets its Secret (`kubernetes.io/tls`: `tls.crt`, `tls.key`,
//!   `ca.crt`) from a `selfSigned` or `ca` Issuer/ClusterIssuer, and `status` Ready/notAfter;
//! - cainjector: `cert-manager.io/inject-ca-from: <ns>/<certificate>` (or
//!   `inject-ca-from-secret: <ns>/<secret>`) on webhook configurations, CRDs (webhook conversion
//!   only) and `APIService`s set their `caBundle` to that Secret's `ca.crt`.
//!
//! Limits, unlike cert-manager: keys are ECDSA P-256 (cert-manager's default is RSA 2048);
//! `spec.duration`, `renewBefore`, `privateKey`, `usages`, `subject`, `uris` and
//! `emailAddresses` are ignored: a certificate is valid for one year, carries `commonName`,
//! `dnsNames`, `ipAddresses` and `isCA` (CA: keyCertSign), and its leaf key usages are
//! digitalSignature and keyEncipherment. Nothing is renewed or rotated: a Secret holding a
//! certificate with the requested names, CA flag and issuer is never regenerated. `tls.crt` is
//! the leaf alone. There are no `CertificateRequest`s, no other issuer types and no Issuer
//! status; a `ClusterIssuer`'s CA Secret is read from namespace `cert-manager`;
//! `inject-ca-from-secret` does not ask for the `allow-direct-injection` annotation.
//!
//! The controller is event-driven (watches on every kind it reads, debounced into one sync
//! pass); errors are logged and retried on the next event, and a resync every 5 s is only a
//! safety net. Key material is never logged.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context as _, Result};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures::{FutureExt as _, StreamExt as _};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch};
use kube::api::{PatchParams, PostParams, TypeMeta};
use kube::runtime::wait::Condition as _;
use kube::runtime::{WatchStreamExt as _, conditions, watcher};
use kube::{Client, ResourceExt as _};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use x509_parser::extensions::GeneralName;

/// Field manager of the CRDs, Secrets and Certificate statuses the stand-in writes.
pub const ISSUER_FIELD_MANAGER: &str = "cert-manager-stand-in";
/// Field manager of the stand-in's `caBundle` injections.
pub const INJECTOR_FIELD_MANAGER: &str = "cert-manager-cainjector-stand-in";
const ISSUER_NAME: &str = "cert-manager.io/issuer-name";
const ISSUER_KIND: &str = "cert-manager.io/issuer-kind";
const KINDS: [&str; 3] = ["Certificate", "Issuer", "ClusterIssuer"];
const INJECTABLE: [&str; 4] = [
    "admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration",
    "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration",
    "apiextensions.k8s.io/v1/CustomResourceDefinition",
    "apiregistration.k8s.io/v1/APIService",
];

/// Stand-in for cert-manager: a real cluster uses cert-manager. The running controller (see
/// the [module documentation](self) for what it does and does not do); dropping it stops the
/// controller, while the CRDs and the issued Secrets stay.
#[derive(Debug)]
pub struct CertManagerStandIn {
    task: tokio::task::JoinHandle<()>,
}

impl CertManagerStandIn {
    /// Installs the cert-manager CRDs, waits until they are established and starts the
    /// controller on the current tokio runtime.
    ///
    /// # Errors
    /// When the API server rejects a CRD or it is not established within 30 s.
    pub async fn start(client: Client) -> Result<Self> {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for kind in KINDS {
            crate::apply::apply_value(&client, &crd(kind), ISSUER_FIELD_MANAGER).await?;
        }
        for kind in KINDS {
            let name = format!("{}s.cert-manager.io", kind.to_lowercase());
            let established = |c: &CustomResourceDefinition| {
                conditions::is_crd_established().matches_object(Some(c))
            };
            crate::wait::await_object(&crds, &name, Duration::from_secs(30), established)
                .await?
                .with_context(|| format!("CRD {name} not established in 30 s"))?;
        }
        let task = tokio::spawn(run(client));
        Ok(Self { task })
    }
}

impl Drop for CertManagerStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The CRD of `kind` as cert-manager names it, accepting any `spec` and `status`.
fn crd(kind: &str) -> Value {
    let singular = kind.to_lowercase();
    let (scope, short_names) = match kind {
        "Certificate" => ("Namespaced", vec!["cert", "certs"]),
        "Issuer" => ("Namespaced", vec![]),
        _ => ("Cluster", vec![]),
    };
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{singular}s.cert-manager.io"),
                     "labels": {"app.kubernetes.io/name": "cert-manager"}},
        "spec": {"group": "cert-manager.io", "scope": scope,
                 "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": format!("{singular}s"),
                           "singular": singular, "shortNames": short_names, "categories": ["cert-manager"]},
                 "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object",
                                          "properties": {"spec": open, "status": open}}}}]},
    })
}

/// The resource of `[group/]version/Kind`.
fn resource(gvk: &str) -> ApiResource {
    let (gv, kind) = gvk.rsplit_once('/').unwrap_or(("v1", gvk));
    let (group, version) = gv.split_once('/').unwrap_or(("", gv));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

fn cm(kind: &str) -> ApiResource {
    resource(&format!("cert-manager.io/v1/{kind}"))
}

/// Watches every kind a sync pass reads; each burst of events (or 5 s without one, a safety
/// net) runs one pass.
async fn run(client: Client) {
    let mut kinds: Vec<ApiResource> = KINDS.iter().map(|k| cm(k)).collect();
    kinds.extend(["v1/Secret"].iter().chain(&INJECTABLE).map(|k| resource(k)));
    let mut events = futures::stream::select_all(kinds.iter().map(|ar| {
        let api = Api::<DynamicObject>::all_with(client.clone(), ar);
        let events = watcher(api, watcher::Config::default()).default_backoff();
        events.map(|_| ()).boxed()
    }));
    loop {
        if let Err(e) = sync(&client).await {
            tracing::warn!("cert-manager stand-in: {e:#}");
        }
        tokio::select! {
            Some(()) = events.next() => {},
            () = tokio::time::sleep(Duration::from_secs(5)) => {},
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        while events.next().now_or_never().flatten().is_some() {}
    }
}

/// One pass: issue what is missing, then inject CA bundles.
async fn sync(client: &Client) -> Result<()> {
    let certs = Api::<DynamicObject>::all_with(client.clone(), &cm("Certificate"));
    for cert in certs.list(&ListParams::default()).await? {
        if let Err(e) = sync_certificate(client, &cert).await {
            let ns = cert.namespace().unwrap_or_default();
            tracing::warn!(
                "cert-manager stand-in: Certificate {ns}/{}: {e:#}",
                cert.name_any()
            );
        }
    }
    for gvk in INJECTABLE {
        let ar = resource(gvk);
        let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
        for mut obj in api.list(&ListParams::default()).await? {
            let anns = obj.annotations();
            let source = match anns.get("cert-manager.io/inject-ca-from") {
                Some(from) => Some((true, from.clone())),
                None => anns
                    .get("cert-manager.io/inject-ca-from-secret")
                    .map(|s| (false, s.clone())),
            };
            let Some((via_certificate, from)) = source else {
                continue;
            };
            let ca = match injected_ca(client, via_certificate, &from).await {
                Ok(Some(ca)) => ca,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!("cert-manager stand-in: {gvk} {}: {e:#}", obj.name_any());
                    continue;
                }
            };
            if set_ca_bundles(&ar.kind, &mut obj.data, &STANDARD.encode(ca)) {
                let (api_version, kind) = (ar.api_version.clone(), ar.kind.clone());
                obj.types = Some(TypeMeta { api_version, kind });
                let pp = PostParams {
                    field_manager: Some(INJECTOR_FIELD_MANAGER.into()),
                    ..PostParams::default()
                };
                if let Err(e) = api.replace(&obj.name_any(), &pp, &obj).await {
                    tracing::warn!(
                        "cert-manager stand-in: inject {gvk} {}: {e}",
                        obj.name_any()
                    );
                }
            }
        }
    }
    Ok(())
}

/// The `ca.crt` named by an injection annotation (`<namespace>/<certificate or secret>`), once
/// it is issued.
async fn injected_ca(
    client: &Client,
    via_certificate: bool,
    from: &str,
) -> Result<Option<Vec<u8>>> {
    let (ns, name) = from
        .split_once('/')
        .with_context(|| format!("{from}: not <ns>/<name>"))?;
    let secret_name = if via_certificate {
        let certs = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &cm("Certificate"));
        let Some(cert) = certs.get_opt(name).await? else {
            return Ok(None);
        };
        cert.data["spec"]["secretName"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    } else {
        name.to_owned()
    };
    let secrets = Api::<Secret>::namespaced(client.clone(), ns);
    let ca = secrets
        .get_opt(&secret_name)
        .await?
        .and_then(|s| s.data?.remove("ca.crt"));
    Ok(ca.map(|b| b.0).filter(|b| !b.is_empty()))
}

/// Sets `caBundle` wherever cainjector would for an object of `kind`; true when it changed.
fn set_ca_bundles(kind: &str, data: &mut Value, ca_b64: &str) -> bool {
    let targets: Vec<&mut Value> = match kind {
        "CustomResourceDefinition" => {
            let conversion = data.pointer_mut("/spec/conversion");
            let webhook = conversion.filter(|c| c["strategy"] == "Webhook");
            webhook
                .and_then(|c| c.pointer_mut("/webhook/clientConfig"))
                .into_iter()
                .collect()
        }
        "APIService" => data.get_mut("spec").into_iter().collect(),
        _ => {
            let webhooks = data.get_mut("webhooks").and_then(Value::as_array_mut);
            webhooks
                .into_iter()
                .flatten()
                .filter_map(|w| w.get_mut("clientConfig"))
                .collect()
        }
    };
    let mut changed = false;
    for target in targets.into_iter().filter_map(Value::as_object_mut) {
        if target.get("caBundle").and_then(Value::as_str) != Some(ca_b64) {
            target.insert("caBundle".into(), ca_b64.into());
            changed = true;
        }
    }
    changed
}

/// What a certificate is or must be: names, CA flag and issuer (kind, name).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Want {
    cn: Option<String>,
    dns: Vec<String>,
    ips: Vec<IpAddr>,
    is_ca: bool,
    issuer: [String; 2],
}

impl Want {
    fn normalized(mut self) -> Self {
        self.dns.sort();
        self.dns.dedup();
        self.ips.sort();
        self.ips.dedup();
        self
    }

    /// From a Certificate's `spec`.
    fn of_spec(spec: &Value) -> Result<Self> {
        let strings = |k: &str| {
            let values = spec[k].as_array().into_iter().flatten();
            values
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        let ips = strings("ipAddresses")
            .iter()
            .map(|ip| ip.parse())
            .collect::<Result<_, _>>()?;
        let issuer_ref = &spec["issuerRef"];
        let kind = issuer_ref["kind"].as_str().unwrap_or("Issuer");
        let name = issuer_ref["name"].as_str().unwrap_or_default();
        let cn = spec["commonName"].as_str().map(str::to_owned);
        let (dns, is_ca) = (strings("dnsNames"), spec["isCA"] == true);
        let issuer = [kind.to_owned(), name.to_owned()];
        Ok(Self {
            cn,
            dns,
            ips,
            is_ca,
            issuer,
        }
        .normalized())
    }
}

/// A freshly issued certificate, key and CA certificate, PEM, and its `notAfter` (RFC 3339).
struct Issued {
    cert: String,
    key: String,
    ca: String,
    not_after: String,
}

fn rfc3339(t: OffsetDateTime) -> String {
    let t = t.replace_nanosecond(0).unwrap_or(t);
    t.format(&Rfc3339).unwrap_or_default()
}

/// Issues `want`, self-signed or signed by `ca` (certificate PEM, key PEM), valid for a year,
/// with a new ECDSA P-256 key.
fn issue(want: &Want, ca: Option<(&str, &str)>) -> Result<Issued> {
    let mut p = CertificateParams::new(want.dns.clone())?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    if let Some(cn) = &want.cn {
        p.distinguished_name.push(DnType::CommonName, cn.as_str());
    }
    let ips = want.ips.iter().map(|ip| rcgen::SanType::IpAddress(*ip));
    p.subject_alt_names.extend(ips);
    p.not_before = OffsetDateTime::now_utc();
    p.not_after = p.not_before + time::Duration::days(365);
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    if want.is_ca {
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages.push(KeyUsagePurpose::KeyCertSign);
    }
    let key = KeyPair::generate()?;
    let (cert, ca) = match ca {
        None => {
            let cert = p.self_signed(&key)?.pem();
            (cert.clone(), cert)
        }
        Some((ca_cert, ca_key)) => {
            let issuer = Issuer::from_ca_cert_pem(ca_cert, KeyPair::from_pem(ca_key)?)?;
            (p.signed_by(&key, &issuer)?.pem(), ca_cert.to_owned())
        }
    };
    let (key, not_after) = (key.serialize_pem(), rfc3339(p.not_after));
    Ok(Issued {
        cert,
        key,
        ca,
        not_after,
    })
}

/// What the certificate in `secret` is, and its `notAfter`, when the Secret holds one and a key.
fn existing(secret: &Secret) -> Option<(Want, String)> {
    let data = secret.data.as_ref()?;
    data.get("tls.key").filter(|k| !k.0.is_empty())?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&data.get("tls.crt")?.0).ok()?;
    let x = pem.parse_x509().ok()?;
    let (mut dns, mut ips) = (Vec::new(), Vec::new());
    let san = x.subject_alternative_name().ok().flatten();
    for name in san.iter().flat_map(|s| &s.value.general_names) {
        match name {
            GeneralName::DNSName(d) => dns.push((*d).to_owned()),
            GeneralName::IPAddress(b) => ips.push(match <[u8; 4]>::try_from(*b) {
                Ok(v4) => IpAddr::from(v4),
                Err(_) => IpAddr::from(<[u8; 16]>::try_from(*b).ok()?),
            }),
            _ => {}
        }
    }
    let cn = x
        .subject()
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok());
    let anns = secret.metadata.annotations.as_ref()?;
    let issuer = [
        anns.get(ISSUER_KIND)?.clone(),
        anns.get(ISSUER_NAME)?.clone(),
    ];
    let (cn, is_ca) = (cn.map(str::to_owned), x.is_ca());
    let want = Want {
        cn,
        dns,
        ips,
        is_ca,
        issuer,
    }
    .normalized();
    Some((want, rfc3339(x.validity().not_after.to_datetime())))
}

/// Makes the Secret of `cert` hold its certificate and sets its Ready condition.
async fn sync_certificate(client: &Client, cert: &DynamicObject) -> Result<()> {
    let ns = cert.namespace().context("Certificate without namespace")?;
    let issued = ensure_secret(client, &ns, &cert.name_any(), &cert.data["spec"]).await?;
    let (ready, reason, message) = match &issued {
        Ok(_) => (
            "True",
            "Issued",
            "Certificate is up to date and has not expired",
        ),
        Err(why) => ("False", "Pending", why.as_str()),
    };
    let generation = cert.metadata.generation;
    let condition = json!({"type": "Ready", "status": ready, "reason": reason, "message": message,
                           "observedGeneration": generation});
    let mut status = json!({"conditions": [condition]});
    if let Ok(not_after) = issued {
        status["notAfter"] = not_after.into();
    }
    let mut current = cert.data.get("status").cloned().unwrap_or_default();
    if let Some(c) = current
        .pointer_mut("/conditions/0")
        .and_then(Value::as_object_mut)
    {
        c.remove("lastTransitionTime");
    }
    if current == status {
        return Ok(());
    }
    status["conditions"][0]["lastTransitionTime"] = rfc3339(OffsetDateTime::now_utc()).into();
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &cm("Certificate"));
    let patch = Patch::Merge(json!({"status": status}));
    api.patch_status(&cert.name_any(), &PatchParams::default(), &patch)
        .await?;
    Ok(())
}

/// `Ok(Ok(notAfter))` when the Secret holds the certificate (kept as it was or issued now),
/// `Ok(Err(why))` when it cannot be issued yet.
async fn ensure_secret(
    client: &Client,
    ns: &str,
    name: &str,
    spec: &Value,
) -> Result<Result<String, String>> {
    let want = Want::of_spec(spec)?;
    let [kind, issuer_name] = &want.issuer;
    let (issuers, resource_ns) = match kind.as_str() {
        "Issuer" => (Api::namespaced_with(client.clone(), ns, &cm(kind)), ns),
        "ClusterIssuer" => (Api::all_with(client.clone(), &cm(kind)), "cert-manager"),
        _ => {
            return Ok(Err(format!(
                "issuer kind {kind} is not supported by the stand-in"
            )));
        }
    };
    let found: Option<DynamicObject> = issuers.get_opt(issuer_name).await?;
    let Some(issuer) = found else {
        return Ok(Err(format!("{kind} {issuer_name} not found")));
    };
    let secret_name = spec["secretName"].as_str().context("no spec.secretName")?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let current = secrets.get_opt(secret_name).await?;
    if let Some((have, not_after)) = current.as_ref().and_then(existing)
        && have == want
    {
        return Ok(Ok(not_after));
    }
    let new = if issuer.data["spec"]["selfSigned"].is_object() {
        issue(&want, None)?
    } else if let Some(ca_secret) = issuer.data["spec"]["ca"]["secretName"].as_str() {
        let ca_secrets: Api<Secret> = Api::namespaced(client.clone(), resource_ns);
        let found = ca_secrets.get_opt(ca_secret).await?.and_then(|s| s.data);
        let pem = |k: &str| {
            String::from_utf8(found.as_ref()?.get(k)?.0.clone())
                .ok()
                .filter(|s| !s.is_empty())
        };
        let (Some(ca_cert), Some(ca_key)) = (pem("tls.crt"), pem("tls.key")) else {
            let why = format!("CA Secret {resource_ns}/{ca_secret} missing or incomplete");
            return Ok(Err(why));
        };
        issue(&want, Some((&ca_cert, &ca_key)))?
    } else {
        let why = format!("{kind} {issuer_name}: the stand-in only knows selfSigned and ca");
        return Ok(Err(why));
    };
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": secret_name, "namespace": ns, "annotations": {
            "cert-manager.io/certificate-name": name, "cert-manager.io/issuer-group": "cert-manager.io",
            "cert-manager.io/issuer-name": issuer_name, "cert-manager.io/issuer-kind": kind}},
        "data": {"tls.crt": STANDARD.encode(&new.cert), "tls.key": STANDARD.encode(&new.key),
                 "ca.crt": STANDARD.encode(&new.ca)},
    });
    let pp = PatchParams::apply(ISSUER_FIELD_MANAGER).force();
    secrets
        .patch(secret_name, &pp, &Patch::Apply(&secret))
        .await?;
    tracing::info!(
        "cert-manager stand-in: issued Secret {ns}/{secret_name} for Certificate {name}"
    );
    Ok(Ok(new.not_after))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want(cn: &str, dns: &[&str], is_ca: bool) -> Want {
        let spec = json!({"commonName": cn, "dnsNames": dns, "ipAddresses": ["10.0.0.1"],
                          "isCA": is_ca, "issuerRef": {"name": "ca"}});
        Want::of_spec(&spec).unwrap()
    }

    fn secret_of(issued: &Issued, w: &Want) -> Secret {
        serde_json::from_value(json!({
            "metadata": {"annotations": {ISSUER_KIND: w.issuer[0], ISSUER_NAME: w.issuer[1]}},
            "data": {"tls.crt": STANDARD.encode(&issued.cert), "tls.key": STANDARD.encode(&issued.key)},
        }))
        .unwrap()
    }

    #[test]
    fn a_leaf_from_a_ca_has_the_sans_and_chains_to_the_ca() {
        let ca = issue(&want("my-ca", &[], true), None).unwrap();
        assert_eq!(
            ca.ca, ca.cert,
            "self-signed: ca.crt is the certificate itself"
        );
        let leaf_want = want("svc", &["svc.ns.svc", "svc.ns"], false);
        let leaf = issue(&leaf_want, Some((&ca.cert, &ca.key))).unwrap();
        assert_eq!(leaf.ca, ca.cert);

        let (_, ca_pem) = x509_parser::pem::parse_x509_pem(ca.cert.as_bytes()).unwrap();
        let ca_x = ca_pem.parse_x509().unwrap();
        assert!(ca_x.is_ca());
        assert!(ca_x.key_usage().unwrap().unwrap().value.key_cert_sign());
        let (_, leaf_pem) = x509_parser::pem::parse_x509_pem(leaf.cert.as_bytes()).unwrap();
        let leaf_x = leaf_pem.parse_x509().unwrap();
        assert!(!leaf_x.is_ca());
        leaf_x.verify_signature(Some(ca_x.public_key())).unwrap();
        assert!(
            leaf_x.verify_signature(None).is_err(),
            "the leaf is not self-signed"
        );
        assert_eq!(leaf_x.issuer(), ca_x.subject());
        // The names read back are the requested ones: such a Secret is kept as it is.
        let (have, not_after) = existing(&secret_of(&leaf, &leaf_want)).unwrap();
        assert_eq!(have.dns, ["svc.ns", "svc.ns.svc"]);
        assert_eq!(have, leaf_want);
        assert_eq!(not_after, leaf.not_after);
        assert_ne!(have, want("svc", &["svc.ns.svc", "svc.ns", "svc"], false));
        let mut other_issuer = leaf_want.clone();
        other_issuer.issuer[1] = "other".into();
        assert_ne!(have, other_issuer);
    }

    #[test]
    fn injection_sets_every_webhooks_ca_bundle_and_only_webhook_conversions() {
        let mut vwc = json!({"webhooks": [
            {"name": "a", "clientConfig": {"service": {"name": "svc"}}, "failurePolicy": "Ignore"},
            {"name": "b", "clientConfig": {"caBundle": "b2xk", "url": "https://x"}},
        ]});
        assert!(set_ca_bundles(
            "ValidatingWebhookConfiguration",
            &mut vwc,
            "bmV3"
        ));
        assert_eq!(vwc["webhooks"][0]["clientConfig"]["caBundle"], "bmV3");
        assert_eq!(vwc["webhooks"][1]["clientConfig"]["caBundle"], "bmV3");
        assert_eq!(vwc["webhooks"][0]["clientConfig"]["service"]["name"], "svc");
        assert_eq!(vwc["webhooks"][1]["clientConfig"]["url"], "https://x");
        assert_eq!(vwc["webhooks"][0]["failurePolicy"], "Ignore");
        assert!(!set_ca_bundles(
            "MutatingWebhookConfiguration",
            &mut vwc,
            "bmV3"
        ));

        let conversion =
            json!({"strategy": "Webhook", "webhook": {"clientConfig": {"service": {}}}});
        let mut crd = json!({"spec": {"conversion": conversion}});
        assert!(set_ca_bundles("CustomResourceDefinition", &mut crd, "bmV3"));
        assert_eq!(
            crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"],
            "bmV3"
        );
        let mut none = json!({"spec": {"conversion": {"strategy": "None"}}});
        assert!(!set_ca_bundles(
            "CustomResourceDefinition",
            &mut none,
            "bmV3"
        ));
        assert_eq!(none, json!({"spec": {"conversion": {"strategy": "None"}}}));
        let mut apisvc = json!({"spec": {"service": {"name": "svc"}, "groupPriorityMinimum": 100}});
        assert!(set_ca_bundles("APIService", &mut apisvc, "bmV3"));
        assert_eq!(apisvc["spec"]["caBundle"], "bmV3");
        assert_eq!(apisvc["spec"]["groupPriorityMinimum"], 100);
    }
}
