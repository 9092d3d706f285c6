//! Bootstrap tokens (`k8s.io/cluster-bootstrap/token/api`) and the detached JWS that signs
//! `kube-public/cluster-info` for a token (`cluster-bootstrap/token/jws`).

use std::collections::BTreeMap;
use std::fmt;
use std::time::SystemTime;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::Sha256;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::error::{Error, ValidationError};

/// `system:bootstrappers:kubeadm:default-node-token` (kubeadm's `NodeBootstrapTokenAuthGroup`).
pub const NODE_BOOTSTRAP_TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// Secret type of bootstrap tokens.
pub const BOOTSTRAP_TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// Prefix of bootstrap token Secret names.
pub const BOOTSTRAP_TOKEN_SECRET_PREFIX: &str = "bootstrap-token-";
/// Prefix of the signature keys in cluster-info.
pub const JWS_KEY_PREFIX: &str = "jws-kubeconfig-";

const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// A bootstrap token `<id>.<secret>` (`[a-z0-9]{6}.[a-z0-9]{16}`). `Debug` hides the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    id: String,
    secret: String,
}

fn is_token_part(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

impl BootstrapToken {
    /// A token from its parts.
    ///
    /// # Errors
    /// A [`ValidationError`] on `token.id` / `token.secret` if a part does not match
    /// `[a-z0-9]{6}` / `[a-z0-9]{16}`.
    pub fn new(id: &str, secret: &str) -> Result<Self, ValidationError> {
        if !is_token_part(id, 6) {
            return Err(ValidationError::new("token.id", "must match [a-z0-9]{6}"));
        }
        if !is_token_part(secret, 16) {
            return Err(ValidationError::new(
                "token.secret",
                "must match [a-z0-9]{16}",
            ));
        }
        Ok(Self {
            id: id.into(),
            secret: secret.into(),
        })
    }

    /// Parses `abcdef.0123456789abcdef`.
    ///
    /// # Errors
    /// A [`ValidationError`] on `token` if the format is wrong.
    pub fn parse(token: &str) -> Result<Self, ValidationError> {
        let (id, secret) = token
            .split_once('.')
            .ok_or_else(|| ValidationError::new("token", "must be <id>.<secret>"))?;
        Self::new(id, secret)
    }

    /// A fresh random token from the operating system's random source (uniform over the
    /// alphabet, by rejection sampling).
    ///
    /// # Errors
    /// [`Error::Random`] if the random source fails.
    pub fn generate() -> Result<Self, Error> {
        let mut out = String::with_capacity(22);
        let mut buf = [0u8; 64];
        while out.len() < 22 {
            getrandom::fill(&mut buf).map_err(|e| Error::Random(e.to_string()))?;
            for b in buf {
                // 252 = 7 * 36: values below are uniform modulo 36.
                if b < 252 && out.len() < 22 {
                    out.push(char::from(ALPHABET[usize::from(b % 36)]));
                }
            }
        }
        let (id, secret) = out.split_at(6);
        Ok(Self::new(id, secret)?)
    }

    /// The token id (public).
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The token secret. Secret.
    #[must_use]
    pub fn secret(&self) -> &str {
        &self.secret
    }
    /// `<id>.<secret>`, as given to `kubeadm join --token`. Secret.
    #[must_use]
    pub fn token(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }
    /// `bootstrap-token-<id>`.
    #[must_use]
    pub fn secret_name(&self) -> String {
        format!("{BOOTSTRAP_TOKEN_SECRET_PREFIX}{}", self.id)
    }
    /// `jws-kubeconfig-<id>`.
    #[must_use]
    pub fn jws_key(&self) -> String {
        format!("{JWS_KEY_PREFIX}{}", self.id)
    }
}

impl fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootstrapToken")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// The detached JWS kubeadm expects under `jws-kubeconfig-<token_id>` in cluster-info:
/// HS256 with the token secret as key, protected header `{"alg":"HS256","kid":"<id>"}`,
/// payload = the exact bytes of `kubeconfig`; result `b64url(header) + ".." + b64url(mac)`
/// (base64url without padding). Byte-identical to `jws.ComputeDetachedSignature`, which join
/// recomputes and compares as a string.
#[must_use]
pub fn jws_kubeconfig(token_id: &str, token_secret: &str, kubeconfig: &str) -> String {
    // The header is written by hand so its bytes are exactly Go's (sorted keys, no spaces).
    let header = format!(r#"{{"alg":"HS256","kid":"{}"}}"#, escape_json(token_id));
    let header_b64 = URL_SAFE_NO_PAD.encode(header);
    let payload_b64 = URL_SAFE_NO_PAD.encode(kubeconfig);
    let signing_input = format!("{header_b64}.{payload_b64}");
    // HMAC accepts keys of any length; new_from_slice cannot fail for HMAC.
    let sig = match Hmac::<Sha256>::new_from_slice(token_secret.as_bytes()) {
        Ok(mut mac) => {
            mac.update(signing_input.as_bytes());
            mac.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    };
    format!("{header_b64}..{}", URL_SAFE_NO_PAD.encode(sig))
}

fn escape_json(s: &str) -> String {
    serde_json::to_string(s)
        .map(|q| q[1..q.len() - 1].to_owned())
        .unwrap_or_default()
}

/// Options of a bootstrap token Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSecretOptions {
    /// Expiry (`expiration`, RFC 3339 UTC); `None` = never.
    pub expiration: Option<SystemTime>,
    /// `description`; `None` = absent.
    pub description: Option<String>,
    /// `auth-extra-groups` (each must match `system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]`).
    pub extra_groups: Vec<String>,
    /// `usage-bootstrap-authentication: "true"`.
    pub usage_authentication: bool,
    /// `usage-bootstrap-signing: "true"` (the bootstrapsigner signs cluster-info for it).
    pub usage_signing: bool,
}

impl Default for TokenSecretOptions {
    /// What kubeadm / CABPK use for a node join token: both usages, group
    /// [`NODE_BOOTSTRAP_TOKEN_GROUP`], no expiry, no description.
    fn default() -> Self {
        Self {
            expiration: None,
            description: None,
            extra_groups: vec![NODE_BOOTSTRAP_TOKEN_GROUP.into()],
            usage_authentication: true,
            usage_signing: true,
        }
    }
}

fn is_extra_group(g: &str) -> bool {
    let Some(rest) = g.strip_prefix("system:bootstrappers:") else {
        return false;
    };
    !rest.is_empty()
        && rest.len() <= 256
        && rest
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'-')
        && rest
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// The Secret `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token` with
/// keys `token-id`, `token-secret`, `usage-bootstrap-authentication`,
/// `usage-bootstrap-signing`, `auth-extra-groups` (comma-separated), and optionally
/// `expiration` and `description` — the shape CABPK and `kubeadm token create` write.
///
/// # Errors
/// A [`ValidationError`] on `auth-extra-groups[i]` for a group outside `system:bootstrappers:`,
/// or on `expiration` if it cannot be formatted.
pub fn bootstrap_token_secret(
    token: &BootstrapToken,
    options: &TokenSecretOptions,
) -> Result<Secret, ValidationError> {
    let mut data = BTreeMap::new();
    let mut put = |k: &str, v: &str| {
        data.insert(k.to_owned(), ByteString(v.as_bytes().to_vec()));
    };
    put("token-id", token.id());
    put("token-secret", token.secret());
    if let Some(exp) = options.expiration {
        let ts = OffsetDateTime::from(exp)
            .replace_nanosecond(0)
            .ok()
            .and_then(|t| t.format(&Rfc3339).ok())
            .ok_or_else(|| ValidationError::new("expiration", "cannot format as RFC 3339"))?;
        put("expiration", &ts);
    }
    if let Some(d) = &options.description {
        put("description", d);
    }
    if options.usage_authentication {
        put("usage-bootstrap-authentication", "true");
    }
    if options.usage_signing {
        put("usage-bootstrap-signing", "true");
    }
    for (i, g) in options.extra_groups.iter().enumerate() {
        if !is_extra_group(g) {
            return Err(ValidationError::new(
                format!("auth-extra-groups[{i}]"),
                format!("{g:?} must match system:bootstrappers:[a-z0-9:-]{{0,255}}[a-z0-9]"),
            ));
        }
    }
    if !options.extra_groups.is_empty() {
        put("auth-extra-groups", &options.extra_groups.join(","));
    }
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(token.secret_name()),
            namespace: Some("kube-system".into()),
            ..ObjectMeta::default()
        },
        type_: Some(BOOTSTRAP_TOKEN_SECRET_TYPE.into()),
        data: Some(data),
        ..Secret::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn b03_jws_reproduces_the_worked_example() {
        assert_eq!(
            jws_kubeconfig(
                "abcdef",
                "0123456789abcdef",
                "apiVersion: v1\nclusters: []\n"
            ),
            "eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9..BBvDJAkf27s1H4CVEm8EIMiBR80uZHSN_IM4Siy8zsU"
        );
    }

    #[test]
    fn token_parsing_and_generation() {
        let t = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
        assert_eq!(t.id(), "abcdef");
        assert_eq!(t.secret_name(), "bootstrap-token-abcdef");
        assert_eq!(t.jws_key(), "jws-kubeconfig-abcdef");
        assert!(!format!("{t:?}").contains("0123456789abcdef"));
        for bad in [
            "abcdef",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef.0123",
        ] {
            assert!(BootstrapToken::parse(bad).is_err(), "{bad}");
        }
        let a = BootstrapToken::generate().unwrap();
        let b = BootstrapToken::generate().unwrap();
        assert_ne!(a, b);
        assert!(BootstrapToken::parse(&a.token()).is_ok());
    }

    #[test]
    fn token_secret_has_kubeadm_keys() {
        let t = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
        let exp = SystemTime::UNIX_EPOCH + std::time::Duration::from_hours(525_960);
        let s = bootstrap_token_secret(
            &t,
            &TokenSecretOptions {
                expiration: Some(exp),
                description: Some("d".into()),
                ..TokenSecretOptions::default()
            },
        )
        .unwrap();
        assert_eq!(s.type_.as_deref(), Some("bootstrap.kubernetes.io/token"));
        assert_eq!(s.metadata.name.as_deref(), Some("bootstrap-token-abcdef"));
        assert_eq!(s.metadata.namespace.as_deref(), Some("kube-system"));
        let d = s.data.unwrap();
        let get = |k: &str| String::from_utf8(d[k].0.clone()).unwrap();
        assert_eq!(get("token-id"), "abcdef");
        assert_eq!(get("token-secret"), "0123456789abcdef");
        assert_eq!(get("expiration"), "2030-01-01T00:00:00Z");
        assert_eq!(get("usage-bootstrap-authentication"), "true");
        assert_eq!(get("usage-bootstrap-signing"), "true");
        assert_eq!(get("auth-extra-groups"), NODE_BOOTSTRAP_TOKEN_GROUP);
        let bad = TokenSecretOptions {
            extra_groups: vec!["system:masters".into()],
            ..TokenSecretOptions::default()
        };
        assert_eq!(
            bootstrap_token_secret(&t, &bad).unwrap_err().field,
            "auth-extra-groups[0]"
        );
    }
}
