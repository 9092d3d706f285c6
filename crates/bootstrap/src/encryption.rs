//! Encryption at rest of the tenant's Secrets: the `EncryptionConfiguration`
//! (`apiserver.config.k8s.io/v1`) kube-apiserver reads from `--encryption-provider-config`.
//!
//! Secrets are written with the `secretbox` provider (XSalsa20-Poly1305, a 32-byte key) under
//! the newest key and read with any key listed; the `identity` provider comes last so that
//! Secrets stored before encryption was turned on stay readable until they are rewritten
//! (Kubernetes' "Encrypting Confidential Data at Rest" task). The stored value of an encrypted
//! Secret starts with `k8s:enc:secretbox:v1:<key name>:`.

use base64::Engine as _;
use serde::Serialize;

use crate::Error;

/// The Secret key (and file name) holding the configuration.
pub const CONFIGURATION_KEY: &str = "encryption-configuration.yaml";

/// The resources encrypted: the tenant's Secrets.
pub const RESOURCES: &[&str] = &["secrets"];

/// A `secretbox` key: its name (unique within the configuration) and 32 random bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Key {
    /// The key's name, as stored in each value's prefix (`k8s:enc:secretbox:v1:<name>:`).
    pub name: String,
    /// The key itself.
    pub secret: [u8; 32],
}

/// Shows the name only.
impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Key {
    /// A new key named `name` from the operating system's random source.
    ///
    /// # Errors
    /// [`Error::Random`] when no randomness is available.
    pub fn generate(name: &str) -> Result<Self, Error> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| Error::Random(e.to_string()))?;
        Ok(Self {
            name: name.to_owned(),
            secret,
        })
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Configuration<'a> {
    api_version: &'static str,
    kind: &'static str,
    resources: Vec<ResourceConfiguration<'a>>,
}

#[derive(Serialize)]
struct ResourceConfiguration<'a> {
    resources: &'a [&'a str],
    providers: Vec<serde_json::Value>,
}

/// The configuration: [`RESOURCES`] written with the first of `keys` and read with any of
/// them, then as plain text (`identity`). `keys` must not be empty.
#[must_use]
pub fn configuration(keys: &[Key]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    let keys: Vec<serde_json::Value> = keys
        .iter()
        .map(|k| serde_json::json!({"name": k.name, "secret": b64.encode(k.secret)}))
        .collect();
    let config = Configuration {
        api_version: "apiserver.config.k8s.io/v1",
        kind: "EncryptionConfiguration",
        resources: vec![ResourceConfiguration {
            resources: RESOURCES,
            providers: vec![
                serde_json::json!({"secretbox": {"keys": keys}}),
                serde_json::json!({"identity": {}}),
            ],
        }],
    };
    serde_yaml::to_string(&config).unwrap_or_default()
}

/// The keys of a configuration built by [`configuration`], in order (the writer first).
///
/// # Errors
/// [`Error::KeyMaterial`] when it does not parse or a key is not 32 bytes of base64.
pub fn keys_of(configuration: &str) -> Result<Vec<Key>, Error> {
    let bad = |reason: String| Error::KeyMaterial {
        what: "encryption configuration".into(),
        reason,
    };
    let v: serde_json::Value =
        serde_yaml::from_str(configuration).map_err(|e| bad(e.to_string()))?;
    let b64 = base64::engine::general_purpose::STANDARD;
    v["resources"][0]["providers"][0]["secretbox"]["keys"]
        .as_array()
        .ok_or_else(|| bad("no secretbox keys".into()))?
        .iter()
        .map(|k| {
            let name = k["name"]
                .as_str()
                .ok_or_else(|| bad("a key without name".into()))?;
            let raw = b64
                .decode(k["secret"].as_str().unwrap_or_default())
                .map_err(|e| bad(format!("key {name}: {e}")))?;
            let secret: [u8; 32] = raw
                .try_into()
                .map_err(|_| bad(format!("key {name} is not 32 bytes")))?;
            Ok(Key {
                name: name.to_owned(),
                secret,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Secrets are written with the first secretbox key and still read as plain text; the keys
    /// read back as written.
    #[test]
    fn secrets_are_written_with_the_first_key_and_read_with_any() {
        let (a, b) = (
            Key::generate("key-2").unwrap(),
            Key::generate("key-1").unwrap(),
        );
        assert_ne!(a.secret, b.secret);
        let yaml = configuration(&[a.clone(), b.clone()]);
        let v: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(v["apiVersion"], "apiserver.config.k8s.io/v1");
        assert_eq!(v["kind"], "EncryptionConfiguration");
        assert_eq!(
            v["resources"][0]["resources"],
            serde_json::json!(["secrets"])
        );
        assert_eq!(
            v["resources"][0]["providers"][1],
            serde_json::json!({"identity": {}})
        );
        assert_eq!(keys_of(&yaml).unwrap(), [a, b]);
        assert!(!format!("{:?}", keys_of(&yaml).unwrap()).contains(
            &base64::engine::general_purpose::STANDARD.encode(keys_of(&yaml).unwrap()[0].secret)
        ));
        assert!(keys_of("resources: []").is_err());
    }
}
