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

/// The resource always encrypted, in its own entry ahead of every other: the tenant's Secrets.
pub const SECRETS: &str = "secrets";

/// The resources encrypted by default: the tenant's Secrets.
pub const RESOURCES: &[&str] = &[SECRETS];

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

/// How the objects of one resource are written (both modes read either form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Written with the first key (`secretbox` first), read as plain text too (`identity`).
    Encrypted,
    /// Written as plain text (`identity` first), read encrypted too: the step between plain
    /// text and encrypted, either way, while not every API server reads both forms yet.
    Plaintext,
}

/// An `EncryptionConfiguration` as kamaji-rs writes it: one entry per resource, each with the
/// same keys. [`SECRETS`] comes first and is always [`Mode::Encrypted`]; then resources of one
/// group, then `*.<group>`, `*.` and `*.*` (kube-apiserver takes the first entry a resource
/// matches, and refuses overlapping resources only within one entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configuration {
    /// The keys, the writer first. Never empty.
    pub keys: Vec<Key>,
    /// The resources besides [`SECRETS`] (`EncryptionConfiguration.resources[].resources`
    /// form) and how each is written.
    pub resources: Vec<(String, Mode)>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Document<'a> {
    api_version: &'static str,
    kind: &'static str,
    resources: Vec<ResourceConfiguration<'a>>,
}

#[derive(Serialize)]
struct ResourceConfiguration<'a> {
    resources: [&'a str; 1],
    providers: Vec<serde_json::Value>,
}

/// The order of entries: one resource first, then `*.<group>`, `*.`, `*.*`.
fn specificity(resource: &str) -> u8 {
    match resource {
        "*.*" => 3,
        "*." => 2,
        r if r.starts_with("*.") => 1,
        _ => 0,
    }
}

impl Configuration {
    /// Only the Secrets, encrypted with `keys`.
    #[must_use]
    pub fn secrets_only(keys: Vec<Key>) -> Self {
        Self {
            keys,
            resources: Vec::new(),
        }
    }

    /// The YAML document kube-apiserver reads. Byte for byte the same for the same
    /// configuration (its fingerprint rolls the API servers when it changes).
    #[must_use]
    pub fn render(&self) -> String {
        let b64 = base64::engine::general_purpose::STANDARD;
        let keys: Vec<serde_json::Value> = self
            .keys
            .iter()
            .map(|k| serde_json::json!({"name": k.name, "secret": b64.encode(k.secret)}))
            .collect();
        let secretbox = serde_json::json!({"secretbox": {"keys": keys}});
        let identity = serde_json::json!({"identity": {}});
        let mut others: Vec<&(String, Mode)> = self
            .resources
            .iter()
            .filter(|(r, _)| r != SECRETS)
            .collect();
        others.sort_by(|a, b| (specificity(&a.0), &a.0).cmp(&(specificity(&b.0), &b.0)));
        let resources = std::iter::once((SECRETS, Mode::Encrypted))
            .chain(others.into_iter().map(|(r, m)| (r.as_str(), *m)))
            .map(|(resource, mode)| ResourceConfiguration {
                resources: [resource],
                providers: match mode {
                    Mode::Encrypted => vec![secretbox.clone(), identity.clone()],
                    Mode::Plaintext => vec![identity.clone(), secretbox.clone()],
                },
            })
            .collect();
        let document = Document {
            api_version: "apiserver.config.k8s.io/v1",
            kind: "EncryptionConfiguration",
            resources,
        };
        serde_yaml::to_string(&document).unwrap_or_default()
    }

    /// A configuration [`Configuration::render`] wrote.
    ///
    /// # Errors
    /// [`Error::KeyMaterial`] when it does not parse, has no `secretbox` keys, a key is not 32
    /// bytes of base64, or an entry is not one of the two forms [`Mode`] names.
    pub fn parse(configuration: &str) -> Result<Self, Error> {
        let bad = |reason: String| Error::KeyMaterial {
            what: "encryption configuration".into(),
            reason,
        };
        let v: serde_json::Value =
            serde_yaml::from_str(configuration).map_err(|e| bad(e.to_string()))?;
        let entries = v["resources"]
            .as_array()
            .ok_or_else(|| bad("no resources".into()))?;
        let mut keys = None;
        let mut resources = Vec::new();
        for entry in entries {
            let providers = entry["providers"].as_array().map_or(&[][..], Vec::as_slice);
            let mode = match providers {
                [first, second]
                    if first.get("secretbox").is_some() && second.get("identity").is_some() =>
                {
                    Mode::Encrypted
                }
                [first, second]
                    if first.get("identity").is_some() && second.get("secretbox").is_some() =>
                {
                    Mode::Plaintext
                }
                _ => {
                    return Err(bad(
                        "an entry is neither secretbox, identity nor identity, secretbox".into(),
                    ));
                }
            };
            let box_keys = providers
                .iter()
                .find_map(|p| p.get("secretbox"))
                .map(|b| parse_keys(&b["keys"]))
                .transpose()
                .map_err(bad)?;
            if keys.is_none() {
                keys = box_keys;
            }
            for r in entry["resources"].as_array().map_or(&[][..], Vec::as_slice) {
                let r = r
                    .as_str()
                    .ok_or_else(|| bad("a resource is not a string".into()))?;
                if r != SECRETS {
                    resources.push((r.to_owned(), mode));
                }
            }
        }
        let keys = keys
            .filter(|k: &Vec<Key>| !k.is_empty())
            .ok_or_else(|| bad("no secretbox keys".into()))?;
        Ok(Self { keys, resources })
    }
}

fn parse_keys(keys: &serde_json::Value) -> Result<Vec<Key>, String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    keys.as_array()
        .ok_or_else(|| "no secretbox keys".to_owned())?
        .iter()
        .map(|k| {
            let name = k["name"].as_str().ok_or("a key without name")?;
            let raw = b64
                .decode(k["secret"].as_str().unwrap_or_default())
                .map_err(|e| format!("key {name}: {e}"))?;
            let secret: [u8; 32] = raw
                .try_into()
                .map_err(|_| format!("key {name} is not 32 bytes"))?;
            Ok(Key {
                name: name.to_owned(),
                secret,
            })
        })
        .collect()
}

/// The configuration encrypting only the Secrets with `keys` (the writer first; not empty).
#[must_use]
pub fn configuration(keys: &[Key]) -> String {
    Configuration::secrets_only(keys.to_vec()).render()
}

/// The keys of a configuration [`Configuration::render`] wrote, in order (the writer first).
///
/// # Errors
/// As [`Configuration::parse`].
pub fn keys_of(configuration: &str) -> Result<Vec<Key>, Error> {
    Configuration::parse(configuration).map(|c| c.keys)
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

    /// A configuration of the Secrets alone is byte for byte what the versions before the
    /// configurable resources wrote (their API servers do not roll on upgrade).
    #[test]
    fn the_secrets_alone_render_as_before() {
        let key = Key {
            name: "key-1".into(),
            secret: [7; 32],
        };
        let expected = "apiVersion: apiserver.config.k8s.io/v1\n\
            kind: EncryptionConfiguration\n\
            resources:\n\
            - resources:\n  - secrets\n  providers:\n  - secretbox:\n      keys:\n      \
            - name: key-1\n        \
            secret: BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n  - identity: {}\n";
        assert_eq!(configuration(&[key]), expected);
    }

    /// One entry per resource: the Secrets first, then single resources, `*.<group>`, `*.`,
    /// `*.*`; plain-text ones put `identity` first; parsing gives back what was rendered.
    #[test]
    fn each_resource_has_its_entry_secrets_first_wildcards_last() {
        let config = Configuration {
            keys: vec![
                Key::generate("key-2").unwrap(),
                Key::generate("key-1").unwrap(),
            ],
            resources: vec![
                ("*.*".into(), Mode::Plaintext),
                ("*.apps".into(), Mode::Encrypted),
                ("configmaps".into(), Mode::Encrypted),
                ("*.".into(), Mode::Plaintext),
                ("widgets.example.com".into(), Mode::Plaintext),
            ],
        };
        let yaml = config.render();
        let v: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
        let order: Vec<&str> = v["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["resources"][0].as_str().unwrap())
            .collect();
        assert_eq!(
            order,
            [
                "secrets",
                "configmaps",
                "widgets.example.com",
                "*.apps",
                "*.",
                "*.*"
            ]
        );
        assert!(v["resources"][2]["providers"][0].get("identity").is_some());
        assert!(v["resources"][3]["providers"][0].get("secretbox").is_some());
        let back = Configuration::parse(&yaml).unwrap();
        assert_eq!(back.keys, config.keys);
        let mut want = config.resources.clone();
        want.sort_by_key(|(r, _)| (specificity(r), r.clone()));
        assert_eq!(back.resources, want);
        assert!(
            Configuration::parse("resources: [{resources: [secrets], providers: [{aescbc: {}}]}]")
                .is_err()
        );
    }
}
