//! The control-plane Deployment (pure): kube-apiserver, kube-controller-manager and
//! kube-scheduler in one pod template, their arguments and key-material layout from
//! kamaji-bootstrap's [`controlplane`](kamaji_bootstrap::controlplane), PKI mounted read-only
//! with mode 0600, probes, the whole `spec.deployment` section, and a pod-template annotation
//! carrying the hash of the mounted key material so a reissued certificate rolls the pods;
//! [`rollout`] turns `spec.rollout.after` into another pod-template annotation.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, KeyToPath, Lifecycle, LifecycleHandler, PodSpec,
    PodTemplateSpec, Probe, SecretVolumeSource, SleepAction, TopologySpreadConstraint, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kamaji_api::kcp::{Component, ProbeSpec};
use kamaji_bootstrap::controlplane::{
    ControlPlaneSpec, Layout, PkiVolume, component_args, health_endpoint,
};

use super::{API_SERVER_PORT_NAME, PKI_HASH_ANNOTATION, common_labels, meta};
use crate::reconcile::validate::{
    CA_ROTATION_VOLUME, ENCRYPTION_VOLUME, KINE_VOLUME, SERVICE_ACCOUNT_ROTATION_VOLUME, ValidSpec,
    selector_labels,
};

/// Pod-template annotation holding the `spec.rollout.after` (RFC 3339) the pods were last
/// replaced for; changing it is what replaces them.
pub const ROLLOUT_AFTER_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/kamaji-rs-rollout-after";

/// What `spec.rollout.after` asks of the pod template at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    /// The value of [`ROLLOUT_AFTER_ANNOTATION`] the template carries (`None`: no annotation).
    pub annotation: Option<String>,
    /// While the time is ahead: how long until it passes (the pass must look again then, since
    /// nothing else produces an event at that moment).
    pub due_in: Option<Duration>,
}

/// The rollout annotation for `after` (`spec.rollout.after`) given the stored Deployment and
/// `now` (Cluster API's `rolloutAfter` rule: pods created before the time are replaced once it
/// has passed).
///
/// - The time has passed: the annotation carries it. If the stored template carries another
///   value (or none), the template changes and the Deployment replaces every pod, once; a new
///   Deployment is simply created with it (its pods are newer than the time).
/// - The time is ahead, or the field is unset: the stored value is kept, so nothing rolls
///   before the time, and removing the field or moving it into the future rolls nothing.
/// - The time has passed but the stored template was already replaced for a later time: kept
///   (its pods are newer than the time), so moving the field back rolls nothing.
#[must_use]
pub fn rollout(
    after: Option<k8s_openapi::jiff::Timestamp>,
    stored: Option<&Deployment>,
    now: SystemTime,
) -> Rollout {
    let kept = stored
        .and_then(|d| {
            d.spec
                .as_ref()?
                .template
                .metadata
                .as_ref()?
                .annotations
                .as_ref()
        })
        .and_then(|a| a.get(ROLLOUT_AFTER_ANNOTATION))
        .cloned();
    let Some(after) = after else {
        return Rollout {
            annotation: kept,
            due_in: None,
        };
    };
    match SystemTime::from(after).duration_since(now) {
        // Ahead: nothing yet.
        Ok(ahead) if !ahead.is_zero() => Rollout {
            annotation: kept,
            due_in: Some(ahead),
        },
        // Passed: pods replaced for this time or a later one are newer than it already.
        _ => Rollout {
            annotation: match kept {
                Some(k)
                    if k.parse::<k8s_openapi::jiff::Timestamp>()
                        .is_ok_and(|t| t >= after) =>
                {
                    Some(k)
                }
                _ => Some(after.to_string()),
            },
            due_in: None,
        },
    }
}

/// Sets (or leaves out) the rollout annotation on `d`'s pod template.
pub fn annotate_rollout(d: &mut Deployment, rollout: &Rollout) {
    let Some(value) = rollout.annotation.as_ref() else {
        return;
    };
    if let Some(spec) = d.spec.as_mut() {
        spec.template
            .metadata
            .get_or_insert_with(ObjectMeta::default)
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(ROLLOUT_AFTER_ANNOTATION.to_owned(), value.clone());
    }
}

/// Mode of mounted key files: owner read/write only.
pub const SECRET_MODE: i32 = 0o600;

fn probe(timings: &ProbeSpec, path: &str, port: u16) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(i32::from(port)),
            scheme: Some("HTTPS".into()),
            ..HTTPGetAction::default()
        }),
        initial_delay_seconds: timings.initial_delay_seconds,
        timeout_seconds: timings.timeout_seconds,
        period_seconds: timings.period_seconds,
        success_threshold: timings.success_threshold,
        failure_threshold: timings.failure_threshold,
        ..Probe::default()
    }
}

/// Seconds a terminating kube-apiserver keeps serving before it is sent `SIGTERM`.
///
/// A deleted pod leaves its Service's ready endpoints at once, but kube-proxy on every node
/// of the management cluster (and a load balancer in front of node ports) takes a moment to
/// stop sending it new connections; an API server that stopped accepting them in that moment
/// would fail requests during a roll. A `preStop` sleep (the kubelet's sleep action, no
/// binary in the image needed) covers that moment, so a roll never refuses a connection.
/// Well under the pod's default 30 s termination grace period.
pub const API_SERVER_PRE_STOP_SECONDS: i64 = 10;

fn api_server_lifecycle() -> Lifecycle {
    Lifecycle {
        pre_stop: Some(LifecycleHandler {
            sleep: Some(SleepAction {
                seconds: API_SERVER_PRE_STOP_SECONDS,
            }),
            ..LifecycleHandler::default()
        }),
        ..Lifecycle::default()
    }
}

fn container(spec: &ValidSpec, cp: &ControlPlaneSpec, c: Component) -> Container {
    let own = spec.component(c);
    let (port, live, ready) = health_endpoint(cp, c);
    let mut volume_mounts: Vec<VolumeMount> = Layout::mounts(c, cp.datastore.tls)
        .into_iter()
        .map(|v| VolumeMount {
            name: v.volume_name().into(),
            mount_path: cp.layout.dir(v),
            read_only: Some(true),
            ..VolumeMount::default()
        })
        .collect();
    if c == Component::ApiServer && spec.konnectivity.is_some() {
        volume_mounts.push(kamaji_bootstrap::konnectivity::config_mount());
        volume_mounts.push(kamaji_bootstrap::konnectivity::uds_mount());
    }
    if c == Component::ApiServer && cp.encryption_provider_config.is_some() {
        volume_mounts.push(VolumeMount {
            name: ENCRYPTION_VOLUME.into(),
            mount_path: cp.layout.encryption_dir(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    if c == Component::ApiServer && cp.service_account_verify_file.is_some() {
        volume_mounts.push(VolumeMount {
            name: SERVICE_ACCOUNT_ROTATION_VOLUME.into(),
            mount_path: cp.layout.service_account_verify_dir(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    if matches!(c, Component::ApiServer | Component::ControllerManager)
        && (cp.ca_bundle_file.is_some() || cp.front_proxy_ca_bundle_file.is_some())
    {
        volume_mounts.push(VolumeMount {
            name: CA_ROTATION_VOLUME.into(),
            mount_path: cp.layout.ca_rotation_dir(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    volume_mounts.extend(own.extra_volume_mounts.iter().cloned());
    Container {
        name: c.name().into(),
        image: Some(format!(
            "{}/{}:{}",
            spec.registry, own.image_name, spec.version_tag
        )),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![c.name().into()]),
        args: Some(component_args(cp, c, &own.extra_args)),
        ports: Some(vec![ContainerPort {
            name: Some(if c == Component::ApiServer {
                API_SERVER_PORT_NAME.into()
            } else {
                "https".into()
            }),
            container_port: i32::from(port),
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        liveness_probe: Some(probe(&own.probes.liveness, live, port)),
        readiness_probe: Some(probe(&own.probes.readiness, ready, port)),
        startup_probe: Some(probe(&own.probes.startup, live, port)),
        resources: own.resources.clone(),
        volume_mounts: Some(volume_mounts),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        lifecycle: (c == Component::ApiServer).then(api_server_lifecycle),
        ..Container::default()
    }
}

/// A volume of the internal Secret `which` with only `keys`, each under its own name.
fn internal_secret_volume(
    spec: &ValidSpec,
    volume: &str,
    which: kamaji_api::names::InternalSecret,
    keys: &[&str],
) -> Volume {
    Volume {
        name: volume.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(spec.names.internal_secret(which)),
            default_mode: Some(SECRET_MODE),
            items: Some(
                keys.iter()
                    .map(|k| KeyToPath {
                        key: (*k).into(),
                        path: (*k).into(),
                        mode: None,
                    })
                    .collect(),
            ),
            optional: None,
        }),
        ..Volume::default()
    }
}

/// The Secret volumes of the key material (the datastore's only for a TLS datastore; the
/// service-account rotation's while one runs).
fn pki_volumes(spec: &ValidSpec, cp: &ControlPlaneSpec) -> Vec<Volume> {
    use kamaji_api::names::InternalSecret;
    let rotation = cp.service_account_verify_file.as_ref().map(|_| {
        internal_secret_volume(
            spec,
            SERVICE_ACCOUNT_ROTATION_VOLUME,
            InternalSecret::ServiceAccountRotation,
            &[super::sa_rotation::VERIFY_KEY],
        )
    });
    let ca_rotation = (cp.ca_bundle_file.is_some() || cp.front_proxy_ca_bundle_file.is_some())
        .then(|| {
            internal_secret_volume(
                spec,
                CA_ROTATION_VOLUME,
                InternalSecret::CaRotation,
                &[
                    super::ca_rotation::CA_BUNDLE,
                    super::ca_rotation::FRONT_PROXY_CA_BUNDLE,
                ],
            )
        });
    let encryption = cp.encryption_provider_config.as_ref().map(|_| {
        internal_secret_volume(
            spec,
            ENCRYPTION_VOLUME,
            InternalSecret::Encryption,
            &[kamaji_bootstrap::encryption::CONFIGURATION_KEY],
        )
    });
    PkiVolume::ALL
        .into_iter()
        .filter(|v| *v != PkiVolume::Datastore || cp.datastore.tls)
        .map(|v| Volume {
            name: v.volume_name().into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(v.secret_name(&spec.names)),
                default_mode: Some(SECRET_MODE),
                items: v.items().map(|list| {
                    list.iter()
                        .map(|(key, path)| KeyToPath {
                            key: (*key).into(),
                            path: (*path).into(),
                            mode: None,
                        })
                        .collect()
                }),
                optional: None,
            }),
            ..Volume::default()
        })
        .chain(encryption)
        .chain(rotation)
        .chain(ca_rotation)
        .collect()
}

fn merge_into(into: &mut BTreeMap<String, String>, from: &BTreeMap<String, String>) {
    for (k, v) in from {
        into.entry(k.clone()).or_insert_with(|| v.clone());
    }
}

/// `deployment.topologySpreadConstraints`, a constraint without `labelSelector` given the
/// control plane's own pod selector (without one, a constraint counts no pod at all).
fn topology_spread_constraints(spec: &ValidSpec) -> Option<Vec<TopologySpreadConstraint>> {
    spec.pod.topology_spread_constraints.clone().map(|list| {
        list.into_iter()
            .map(|mut c| {
                c.label_selector.get_or_insert_with(|| LabelSelector {
                    match_labels: Some(selector_labels(spec)),
                    ..LabelSelector::default()
                });
                c
            })
            .collect()
    })
}

/// Where the kine container finds `<cluster>-kine.config`'s files.
pub const KINE_DIR: &str = "/etc/kine";

/// On a PostgreSQL or MySQL DataStore (`datastore.sql`), adds kine (`image`, its program at
/// `/bin/kine`) to the pods of `deployment`: a container `kine` serving the etcd API on the
/// pod's loopback ([`crate::datastore::sql::KINE_LISTEN_ADDRESS`], kube-apiserver's
/// `--etcd-servers`) from the tenant's database. Its `--endpoint` (with the tenant's password)
/// comes from `<cluster>-kine.config` as `KINE_ENDPOINT`, never from the command line; metrics
/// are off (`--metrics-bind-address=0`) unless `spec.kine.extraArgs` turns them on; the
/// DataStore's CA becomes `--ca-file` (TLS towards the server, verified) and its client
/// certificate `--cert-file`/`--key-file`; `spec.kine.extraArgs` replace flags of the same name; `spec.kine.resources` are the
/// container's.
pub fn add_kine(
    deployment: &mut Deployment,
    spec: &ValidSpec,
    datastore: &crate::datastore::Resolved,
    image: &str,
) {
    let Some(access) = &datastore.sql else {
        return;
    };
    let secret = spec
        .names
        .internal_secret(kamaji_api::names::InternalSecret::Kine);
    let container = kine_container(spec, access, image, &secret);
    if let Some(pod) = deployment
        .spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
    {
        pod.containers.push(container);
        pod.volumes.get_or_insert_with(Vec::new).push(Volume {
            name: KINE_VOLUME.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret),
                default_mode: Some(SECRET_MODE),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
}

/// kine's container ([`add_kine`]), reading `<cluster>-kine.config` (`secret`).
fn kine_container(
    spec: &ValidSpec,
    access: &crate::datastore::sql::SqlAccess,
    image: &str,
    secret: &str,
) -> Container {
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, SecretKeySelector};
    use kamaji_bootstrap::controlplane::flags::{Flag, merge_flags};
    let extra = spec
        .kine
        .as_ref()
        .and_then(|k| k.extra_args.clone())
        .unwrap_or_default();
    Container {
        name: "kine".into(),
        image: Some(image.to_owned()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["/bin/kine".into()]),
        args: Some(
            merge_flags(&kine_flags(access), &extra, |_| false)
                .iter()
                .map(Flag::render)
                .collect(),
        ),
        env: Some(vec![EnvVar {
            name: "KINE_ENDPOINT".into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.to_owned(),
                    key: super::pki::KINE_ENDPOINT_KEY.into(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }]),
        resources: spec.kine.as_ref().and_then(|k| k.resources.clone()),
        volume_mounts: Some(vec![VolumeMount {
            name: KINE_VOLUME.into(),
            mount_path: KINE_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Container::default()
    }
}

/// kine's own flags: its loopback listen address, metrics off, and the DataStore's CA and
/// client certificate when it has them.
fn kine_flags(
    access: &crate::datastore::sql::SqlAccess,
) -> Vec<kamaji_bootstrap::controlplane::flags::Flag> {
    use kamaji_bootstrap::controlplane::flags::Flag;
    let mut defaults = vec![
        Flag::new(
            "listen-address",
            crate::datastore::sql::KINE_LISTEN_ADDRESS.to_owned(),
        ),
        Flag::new("metrics-bind-address", "0".to_owned()),
    ];
    if access.ca_cert.is_some() {
        defaults.push(Flag::new("ca-file", format!("{KINE_DIR}/ca.crt")));
    }
    if access.client.is_some() {
        defaults.push(Flag::new("cert-file", format!("{KINE_DIR}/tls.crt")));
        defaults.push(Flag::new("key-file", format!("{KINE_DIR}/tls.key")));
    }
    defaults
}

/// The control-plane Deployment. `pki_hash` is the hash of the mounted Secrets' content.
#[must_use]
pub fn deployment(
    spec: &ValidSpec,
    cp: &ControlPlaneSpec,
    owner: &OwnerReference,
    pki_hash: &str,
) -> Deployment {
    let pod = &spec.pod;
    let mut m = meta(spec, spec.names.deployment(), owner);
    merge_into(m.labels.get_or_insert_with(BTreeMap::new), &pod.labels);
    if !pod.annotations.is_empty() {
        merge_into(
            m.annotations.get_or_insert_with(BTreeMap::new),
            &pod.annotations,
        );
    }
    let mut pod_labels = common_labels(spec);
    merge_into(&mut pod_labels, &pod.pod_labels);
    let mut pod_annotations =
        BTreeMap::from([(PKI_HASH_ANNOTATION.to_owned(), pki_hash.to_owned())]);
    merge_into(&mut pod_annotations, &pod.pod_annotations);
    let mut volumes = pki_volumes(spec, cp);
    let mut containers: Vec<Container> = Component::ALL
        .into_iter()
        .map(|c| container(spec, cp, c))
        .collect();
    if let Some(k) = &spec.konnectivity {
        volumes.extend(kamaji_bootstrap::konnectivity::volumes(
            &spec.names.konnectivity_secret(),
            SECRET_MODE,
        ));
        containers.push(kamaji_bootstrap::konnectivity::server_container(
            &k.server,
            &cp.layout,
            API_SERVER_PRE_STOP_SECONDS,
        ));
    }
    volumes.extend(pod.extra_volumes.iter().cloned());
    containers.extend(pod.extra_containers.iter().cloned());
    Deployment {
        metadata: m,
        spec: Some(DeploymentSpec {
            replicas: Some(spec.replicas),
            selector: LabelSelector {
                match_labels: Some(selector_labels(spec)),
                ..LabelSelector::default()
            },
            strategy: Some(pod.strategy.clone()),
            revision_history_limit: Some(10),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(pod_annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers,
                    init_containers: Some(pod.extra_init_containers.clone())
                        .filter(|v| !v.is_empty()),
                    volumes: Some(volumes),
                    node_selector: pod.node_selector.clone(),
                    affinity: pod.affinity.clone(),
                    tolerations: pod.tolerations.clone(),
                    topology_spread_constraints: topology_spread_constraints(spec),
                    runtime_class_name: pod.runtime_class_name.clone(),
                    service_account_name: pod.service_account_name.clone(),
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn stored(annotation: Option<&str>) -> Deployment {
        let mut d = Deployment {
            spec: Some(DeploymentSpec::default()),
            ..Deployment::default()
        };
        if let Some(a) = annotation {
            annotate_rollout(
                &mut d,
                &Rollout {
                    annotation: Some(a.to_owned()),
                    due_in: None,
                },
            );
        }
        d
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn rollout_after_rolls_once_after_the_time_and_never_before() {
        let t = at("2026-12-02T12:00:00Z");
        let before = SystemTime::from(at("2026-12-02T11:59:30Z"));
        let after = SystemTime::from(at("2026-12-02T12:00:01Z"));
        // Ahead: the stored template stays as it is, and the pass looks again at the time.
        assert_eq!(
            rollout(Some(t), Some(&stored(None)), before),
            Rollout {
                annotation: None,
                due_in: Some(Duration::from_secs(30)),
            }
        );
        assert_eq!(
            rollout(Some(t), Some(&stored(Some("2026-01-01T00:00:00Z"))), before).annotation,
            Some("2026-01-01T00:00:00Z".to_owned())
        );
        // Passed: the template carries the time (a change, so the Deployment replaces its pods).
        let passed = rollout(Some(t), Some(&stored(None)), after);
        assert_eq!(passed.annotation.as_deref(), Some("2026-12-02T12:00:00Z"));
        assert_eq!(passed.due_in, None);
        // Exactly at the time counts as passed.
        assert_eq!(
            rollout(Some(t), None, SystemTime::from(t)).annotation,
            passed.annotation
        );
        // Once rolled, later passes ask for the same template: no second roll.
        assert_eq!(
            rollout(Some(t), Some(&stored(passed.annotation.as_deref())), after),
            passed
        );
        // Moved back to an earlier time: the pods are newer than it, nothing rolls.
        let earlier = at("2026-12-02T11:00:00Z");
        assert_eq!(
            rollout(
                Some(earlier),
                Some(&stored(passed.annotation.as_deref())),
                after
            )
            .annotation,
            passed.annotation
        );
    }

    #[test]
    fn removing_rollout_after_rolls_nothing() {
        let kept = rollout(
            None,
            Some(&stored(Some("2026-12-02T12:00:00Z"))),
            SystemTime::now(),
        );
        assert_eq!(kept.annotation.as_deref(), Some("2026-12-02T12:00:00Z"));
        assert_eq!(rollout(None, None, SystemTime::now()).annotation, None);
        let mut d = stored(None);
        annotate_rollout(&mut d, &rollout(None, None, SystemTime::now()));
        assert_eq!(d, stored(None), "no annotation without the field");
    }
}
