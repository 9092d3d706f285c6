//! Reconcile errors, each with a category for metrics and the backoff policy.

/// Errors reading key material back.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// A root Secret exists but does not hold a usable CA or key: it is never replaced
    /// automatically (that would cut every client off); a human must repair or delete it.
    #[error("Secret {name} exists but its key material is unusable: {reason}")]
    UnusableRoot {
        /// Secret name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Issuing or rendering failed.
    #[error(transparent)]
    Bootstrap(#[from] kamaji_bootstrap::Error),
    /// The SAN list is invalid.
    #[error("{0}")]
    Validation(#[from] kamaji_bootstrap::ValidationError),
}

impl PkiError {
    /// [`PkiError::UnusableRoot`]: the stored `secret` cannot be used, for `reason`.
    pub fn unusable_root(
        secret: &k8s_openapi::api::core::v1::Secret,
        reason: impl std::fmt::Display,
    ) -> Self {
        Self::UnusableRoot {
            name: secret.metadata.name.clone().unwrap_or_default(),
            reason: reason.to_string(),
        }
    }
}

/// Why a reconcile pass failed. Invalid specs are not errors: they are reported as the
/// `SpecValid=False` condition and wait for a change.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A management-cluster API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done, e.g. `apply Deployment tenant-a/demo`.
        action: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// Key material could not be read back or issued.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// kamaji-bootstrap could not render an artifact.
    #[error("render: {0}")]
    Bootstrap(#[from] kamaji_bootstrap::Error),
    /// The tenant API server could not be reached or refused a write.
    #[error("tenant API: {0}")]
    Tenant(String),
    /// The datastore could not be used (unreachable, bad credentials).
    #[error("datastore: {0}")]
    Datastore(String),
    /// (De)serialisation of an object failed.
    #[error("serialize: {0}")]
    Serde(#[from] serde_json::Error),
}

impl Error {
    /// Short category for metrics labels and logs.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Kube { .. } => "Kube",
            Self::Pki(_) => "Pki",
            Self::Bootstrap(_) => "Render",
            Self::Tenant(_) => "Tenant",
            Self::Datastore(_) => "Datastore",
            Self::Serde(_) => "Serialize",
        }
    }

    /// The `Reconciled=False` condition reason for this error
    /// (`kamaji_api::conditions::reasons`).
    #[must_use]
    pub fn reason(&self) -> &'static str {
        use kamaji_api::conditions::reasons;
        match self {
            Self::Kube { .. } => reasons::KUBE_API_ERROR,
            Self::Pki(_) => reasons::PKI_ERROR,
            Self::Bootstrap(_) => reasons::RENDER_ERROR,
            Self::Tenant(_) => reasons::TENANT_API_ERROR,
            Self::Datastore(_) => reasons::DATASTORE_ERROR,
            Self::Serde(_) => reasons::SERIALIZATION_ERROR,
        }
    }
}

/// Attaches an action description to a kube result.
pub trait KubeContext<T> {
    /// Maps the error into [`Error::Kube`] with `action`.
    fn ctx(self, action: impl FnOnce() -> String) -> Result<T, Error>;
}

impl<T> KubeContext<T> for Result<T, kube::Error> {
    fn ctx(self, action: impl FnOnce() -> String) -> Result<T, Error> {
        self.map_err(|source| Error::Kube {
            action: action(),
            source,
        })
    }
}
