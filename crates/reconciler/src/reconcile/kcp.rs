//! The pass's own KamajiControlPlane: its key and the owner reference of what it owns, and the
//! merge patches of it at the version the pass knows (a replaced version is refused, `409`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kamaji_api::KamajiControlPlane;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use tracing::debug;

use super::report::Report;
use crate::context::Context;
use crate::error::Error;
use crate::lean::Lean;

/// `namespace/name` of a KamajiControlPlane.
#[must_use]
pub fn object_key(kcp: &KamajiControlPlane) -> String {
    format!("{}/{}", kcp.namespace().unwrap_or_default(), kcp.name_any())
}

/// The controller owner reference to `kcp`.
#[must_use]
pub fn owner_reference(kcp: &KamajiControlPlane) -> OwnerReference {
    OwnerReference {
        api_version: KamajiControlPlane::api_version(&()).into_owned(),
        kind: KamajiControlPlane::kind(&()).into_owned(),
        name: kcp.name_any(),
        uid: kcp.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The version of the KamajiControlPlane the pass knows: `written`, the one its own last write
/// to it returned ([`Report::wrote_kcp`]), else the one it read.
pub(crate) fn known_version<'a>(
    written: Option<&'a String>,
    kcp: &'a KamajiControlPlane,
) -> Option<&'a String> {
    written.or(kcp.metadata.resource_version.as_ref())
}

/// Merge-patches the KamajiControlPlane (its `status` subresource when `status`) with
/// `version` as the precondition `metadata.resourceVersion`: `409 Conflict` once it has been
/// replaced.
pub(crate) async fn patch_at_version(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    version: Option<&String>,
    mut patch: serde_json::Value,
    status: bool,
) -> Result<KamajiControlPlane, kube::Error> {
    if let Some(rv) = version {
        patch["metadata"]["resourceVersion"] = rv.as_str().into();
    }
    let api = Api::<Lean<KamajiControlPlane>>::namespaced(
        ctx.client().clone(),
        &kcp.namespace().unwrap_or_default(),
    );
    let (params, patch) = (PatchParams::default(), Patch::Merge(patch));
    let Lean(written) = if status {
        api.patch_status(&kcp.name_any(), &params, &patch).await
    } else {
        api.patch(&kcp.name_any(), &params, &patch).await
    }?;
    if let (Some(uid), Some(rv)) = (kcp.metadata.uid.as_deref(), version) {
        ctx.memory().supersede(uid, rv);
    }
    Ok(written)
}

/// Merge-patches the KamajiControlPlane the pass reads with `patch` (`what` names it in an
/// error), with the version the pass knows as precondition: the one it read, or the one its
/// own last write to it returned ([`Report::wrote_kcp`], recorded here). `Ok(false)` when the
/// version has been replaced since (`409 Conflict`): the pass acted on a stale copy, writes no
/// more and leaves the work to the pass the newer version's watch event brings (its status
/// write fails the same precondition: the driver's `write_status`).
///
/// # Errors
/// [`Error::Kube`] when the API server refuses the patch otherwise.
pub(crate) async fn patch_kcp(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    report: &mut Report,
    patch: serde_json::Value,
    what: &str,
) -> Result<bool, Error> {
    match patch_at_version(
        kcp,
        ctx,
        known_version(report.resource_version.as_ref(), kcp),
        patch,
        false,
    )
    .await
    {
        Ok(written) => {
            report.wrote_kcp(&written);
            Ok(true)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            debug!(kcp = %object_key(kcp), "{what}: the pass read a replaced version; stopping");
            Ok(false)
        }
        Err(source) => Err(Error::Kube {
            action: what.to_owned(),
            source,
        }),
    }
}
