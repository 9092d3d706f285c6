//! Error types of the crate.

/// Any failure of a builder in this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Key generation or certificate signing failed inside rcgen / aws-lc-rs.
    #[error("certificate generation failed for {what}: {source}")]
    Generate {
        /// Which certificate or key was being built.
        what: String,
        /// The underlying rcgen error.
        #[source]
        source: rcgen::Error,
    },
    /// A PEM certificate or key given as input could not be parsed.
    #[error("cannot parse {what}: {reason}")]
    Parse {
        /// Which input failed (for example `CA certificate`).
        what: String,
        /// Why it failed.
        reason: String,
    },
    /// A certificate and key given as a pair do not belong together, or a CA input is not a CA.
    #[error("invalid key material for {what}: {reason}")]
    KeyMaterial {
        /// Which input failed.
        what: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A spec value is invalid; the field is named.
    #[error(transparent)]
    Validation(#[from] ValidationError),
    /// Rendering YAML failed (should not happen for well-formed inputs).
    #[error("cannot render {what} as YAML: {source}")]
    Render {
        /// What was rendered.
        what: String,
        /// The serializer error.
        #[source]
        source: serde_yaml::Error,
    },
    /// Converting to or from JSON failed (should not happen for well-formed inputs).
    #[error("cannot convert {what} to JSON: {source}")]
    Json {
        /// What was converted.
        what: String,
        /// The serde_json error.
        #[source]
        source: serde_json::Error,
    },
    /// A built-in object template does not parse (a bug in this crate; covered by tests).
    #[error("built-in template {what} is invalid: {source}")]
    Template {
        /// Which template.
        what: String,
        /// The parser error.
        #[source]
        source: serde_yaml::Error,
    },
    /// The operating system random source failed.
    #[error("random source unavailable: {0}")]
    Random(String),
}

/// A spec value that cannot be used, naming the field (dotted path, KamajiControlPlane terms
/// where one exists) so it can be surfaced as an admission message or condition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ValidationError {
    /// The offending field, e.g. `network.dnsServiceIPs[0]`.
    pub field: String,
    /// Human-readable reason.
    pub reason: String,
}

impl ValidationError {
    /// A validation error for `field` with `reason`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

pub(crate) fn gen_err(what: &str) -> impl FnOnce(rcgen::Error) -> Error + '_ {
    move |source| Error::Generate {
        what: what.to_owned(),
        source,
    }
}

pub(crate) fn parse_err(what: &str, reason: impl std::fmt::Display) -> Error {
    Error::Parse {
        what: what.to_owned(),
        reason: reason.to_string(),
    }
}
