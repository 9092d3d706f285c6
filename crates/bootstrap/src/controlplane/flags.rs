//! Command-line flags of the control-plane components: kamaji-rs defaults merged with the
//! user's `extraArgs` (case B12), and refusal of flags the target Kubernetes version no longer
//! has (a removed flag makes the component exit at start, so it must be caught before any pod
//! is rolled). The removed-flag table is [`kamaji_api::validation::REMOVED_FLAGS`]: admission
//! refuses the same flags for the object's own `spec.version`; the check here also covers
//! objects stored before those rules.
//!
//! Merge rules:
//! - a user flag replaces every default flag of the same name (the user's value wins);
//! - a flag the user gives several times is kept several times, in the user's order, only when
//!   the component accepts it repeatedly ([`REPEATABLE`]); otherwise the last one wins, as
//!   pflag does for scalar flags;
//! - no flag appears twice unless it is repeatable, and nothing from an earlier `extraArgs`
//!   lingers: the list is recomputed from the spec on every reconcile;
//! - kube-controller-manager's `--controllers` always enables `bootstrapsigner` and
//!   `tokencleaner`, which kubeadm joins depend on (case B03, first option).

use std::collections::BTreeSet;

use kamaji_api::validation::{FlagArg, REMOVED_FLAGS};

/// One control-plane component (defined in kamaji-api, next to the tables of its flags).
pub use kamaji_api::kcp::Component;

/// A parsed flag: name without dashes, and the value if one was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    /// Flag name, e.g. `max-requests-inflight`.
    pub name: String,
    /// Value after `=`, if any.
    pub value: Option<String>,
}

impl Flag {
    /// A flag with a value.
    #[must_use]
    pub fn new(name: &str, value: impl Into<String>) -> Self {
        Self {
            name: name.to_owned(),
            value: Some(value.into()),
        }
    }

    /// Parses `--name=value`, `--name`, `-name=value` or `name=value` (the forms
    /// `extraArgs` accepts), trimmed, with [`FlagArg`]: a bare word is a flag without a value.
    #[must_use]
    pub fn parse(arg: &str) -> Self {
        let FlagArg { name, value, .. } = FlagArg::parse(arg.trim());
        Self {
            name: name.to_owned(),
            value: value.map(str::to_owned),
        }
    }

    /// Renders the flag as one argument, `--name=value` or `--name`.
    #[must_use]
    pub fn render(&self) -> String {
        match &self.value {
            Some(v) => format!("--{}={v}", self.name),
            None => format!("--{}", self.name),
        }
    }
}

/// Flags a component accepts several times (pflag `stringArray`), so repeats are kept:
/// kube-apiserver `--service-account-issuer` (the first issues, all are accepted),
/// `--service-account-key-file`, `--tls-sni-cert-key`, `--api-audiences`.
pub const REPEATABLE: &[(Component, &str)] = &[
    (Component::ApiServer, "service-account-issuer"),
    (Component::ApiServer, "service-account-key-file"),
    (Component::ApiServer, "tls-sni-cert-key"),
    (Component::ApiServer, "api-audiences"),
];

/// Controllers kube-controller-manager must run for kubeadm joins (off by default upstream).
pub const REQUIRED_CONTROLLERS: &[&str] = &["bootstrapsigner", "tokencleaner"];

fn repeatable(component: Component, name: &str) -> bool {
    REPEATABLE
        .iter()
        .any(|(c, n)| *c == component && *n == name)
}

/// A flag in `extra` that `minor` (of Kubernetes 1.x) no longer accepts: `(flag, removed_in)`.
#[must_use]
pub fn removed_flag(component: Component, extra: &[String], minor: u32) -> Option<(String, u32)> {
    extra.iter().map(|a| Flag::parse(a)).find_map(|f| {
        REMOVED_FLAGS
            .iter()
            .find(|(c, n, removed)| *c == component && *n == f.name && minor >= *removed)
            .map(|(_, n, removed)| (format!("--{n}"), *removed))
    })
}

/// Merges `defaults` with the user's `extra` flags (see the module docs) and renders the
/// argument list: the defaults the user did not override, in their order, then the user's
/// flags in the user's order.
#[must_use]
pub fn merge(component: Component, defaults: &[Flag], extra: &[String]) -> Vec<String> {
    let mut out = merge_flags(defaults, extra, |name| repeatable(component, name));
    if component == Component::ControllerManager {
        ensure_required_controllers(&mut out);
    }
    out.iter().map(Flag::render).collect()
}

/// The merge of [`merge`] for any program: `repeatable` says which flags the program accepts
/// several times (all others: the last value wins). Returns the flags, not yet rendered.
#[must_use]
pub fn merge_flags(
    defaults: &[Flag],
    extra: &[String],
    repeatable: impl Fn(&str) -> bool,
) -> Vec<Flag> {
    let user: Vec<Flag> = extra
        .iter()
        .map(|a| Flag::parse(a))
        .filter(|f| !f.name.is_empty())
        .collect();
    let user_names: BTreeSet<&str> = user.iter().map(|f| f.name.as_str()).collect();
    let mut out: Vec<Flag> = defaults
        .iter()
        .filter(|d| !user_names.contains(d.name.as_str()))
        .cloned()
        .collect();
    for (i, flag) in user.iter().enumerate() {
        let later_duplicate = user[i + 1..].iter().any(|f| f.name == flag.name);
        if later_duplicate && !repeatable(&flag.name) {
            continue; // pflag semantics: the last value of a scalar flag wins
        }
        out.push(flag.clone());
    }
    out
}

/// Makes `--controllers` enable [`REQUIRED_CONTROLLERS`]: drops `-bootstrapsigner` /
/// `-tokencleaner` and appends the names that are missing (`*` does not include them).
fn ensure_required_controllers(flags: &mut [Flag]) {
    for flag in flags.iter_mut().filter(|f| f.name == "controllers") {
        let mut list: Vec<String> = flag
            .value
            .as_deref()
            .unwrap_or("*")
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .filter(|c| {
                !REQUIRED_CONTROLLERS
                    .iter()
                    .any(|r| c.strip_prefix('-') == Some(*r))
            })
            .map(str::to_owned)
            .collect();
        for required in REQUIRED_CONTROLLERS {
            if !list.iter().any(|c| c == required) {
                list.push((*required).to_owned());
            }
        }
        flag.value = Some(list.join(","));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Vec<Flag> {
        vec![
            Flag::new("max-requests-inflight", "400"),
            Flag::new(
                "service-account-issuer",
                "https://kubernetes.default.svc.cluster.local",
            ),
            Flag::new("secure-port", "6443"),
        ]
    }

    fn count(args: &[String], name: &str) -> usize {
        args.iter().filter(|a| Flag::parse(a).name == name).count()
    }

    #[test]
    fn b12_user_value_wins_without_duplicates() {
        let kcm = merge(
            Component::ControllerManager,
            &[
                Flag::new("allocate-node-cidrs", "true"),
                Flag::new("controllers", "*"),
            ],
            &["--allocate-node-cidrs=false".into()],
        );
        assert_eq!(count(&kcm, "allocate-node-cidrs"), 1);
        assert!(kcm.contains(&"--allocate-node-cidrs=false".to_owned()));
    }

    #[test]
    fn b12_repeatable_issuers_are_kept_in_order_and_replace_the_default() {
        let extra = vec![
            "--max-requests-inflight=800".to_owned(),
            "--service-account-issuer=https://issuer-new.example.com".to_owned(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
        ];
        let args = merge(Component::ApiServer, &defaults(), &extra);
        let issuers: Vec<&String> = args
            .iter()
            .filter(|a| a.starts_with("--service-account-issuer="))
            .collect();
        assert_eq!(
            issuers,
            vec![
                "--service-account-issuer=https://issuer-new.example.com",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local"
            ]
        );
        assert_eq!(count(&args, "max-requests-inflight"), 1);
        assert!(args.contains(&"--max-requests-inflight=800".to_owned()));
    }

    #[test]
    fn b12_an_update_leaves_no_stale_flag() {
        let args = merge(
            Component::ApiServer,
            &defaults(),
            &["--max-mutating-requests-inflight=400".into()],
        );
        assert!(
            args.contains(&"--max-requests-inflight=400".to_owned()),
            "default is back"
        );
        assert!(args.contains(&"--max-mutating-requests-inflight=400".to_owned()));
        assert_eq!(count(&args, "service-account-issuer"), 1);
        let names: BTreeSet<String> = args.iter().map(|a| Flag::parse(a).name).collect();
        assert_eq!(names.len(), args.len(), "no flag twice: {args:?}");
    }

    #[test]
    fn scalar_flag_given_twice_keeps_the_last() {
        let args = merge(Component::ApiServer, &[], &["--v=2".into(), "v=4".into()]);
        assert_eq!(args, vec!["--v=4"]);
    }

    #[test]
    fn b03_controllers_always_include_bootstrapsigner_and_tokencleaner() {
        let args = merge(
            Component::ControllerManager,
            &[Flag::new("controllers", "*,bootstrapsigner,tokencleaner")],
            &["--controllers=*,-ttl".into()],
        );
        assert_eq!(
            args,
            vec!["--controllers=*,-ttl,bootstrapsigner,tokencleaner"]
        );
        let args = merge(
            Component::ControllerManager,
            &[],
            &["--controllers=*,-bootstrapsigner".into()],
        );
        assert_eq!(args, vec!["--controllers=*,bootstrapsigner,tokencleaner"]);
    }

    #[test]
    fn removed_flags_are_found_for_new_versions_only() {
        let extra = vec!["--cloud-provider=external".to_owned()];
        assert_eq!(removed_flag(Component::ApiServer, &extra, 27), None);
        assert_eq!(
            removed_flag(Component::ApiServer, &extra, 36),
            Some(("--cloud-provider".to_owned(), 33))
        );
        assert_eq!(removed_flag(Component::ControllerManager, &extra, 36), None);
    }

    proptest::proptest! {
        #[test]
        fn merged_args_never_repeat_a_scalar_flag(
            extra in proptest::collection::vec("(--)?[a-c]{1,2}(=[0-9])?", 0..8)
        ) {
            let args = merge(Component::Scheduler, &[Flag::new("a", "1"), Flag::new("b", "2")], &extra);
            let names: Vec<String> = args.iter().map(|a| Flag::parse(a).name).collect();
            let unique: BTreeSet<&String> = names.iter().collect();
            proptest::prop_assert_eq!(unique.len(), names.len());
            for f in &extra {
                let f = Flag::parse(f);
                proptest::prop_assert!(names.contains(&f.name), "user flag {} dropped", f.name);
            }
        }
    }
}
