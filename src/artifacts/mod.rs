//! Manifests and a Dockerfile that deploy a script (`kite kube gen-controller-artifacts`).

mod deployment;
mod dockerfile;
mod output;
mod rbac;
mod webhook;

use std::path::{Path, PathBuf};

use serde_json::{Value as Json, json};

use crate::rbac::Inference;

pub use dockerfile::{DEFAULT_BASE_IMAGE, dockerfile};
pub use output::{to_json, to_yaml};
pub use webhook::{WebhookOptions, render as render_webhook};

/// Why the artifacts could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what} {value:?}: {reason}")]
    Validate {
        /// The flag or argument, e.g. `--name`.
        what: &'static str,
        value: String,
        reason: String,
    },
    #[error("the script never calls k8s.control(); there is no controller to deploy")]
    FindController,
    #[error("the script never calls k8s.webhook(); there is no webhook to deploy")]
    FindWebhook,
    #[error("refusing to grant a wildcard in {scope}: {rule}")]
    GrantWildcard { scope: String, rule: String },
    #[error("writing YAML: {0}")]
    WriteYaml(String),
    #[error("writing JSON: {0}")]
    WriteJson(#[source] serde_json::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What to deploy, and where.
#[derive(Clone, Debug)]
pub struct Options {
    /// The name of the ServiceAccount, the roles and the Deployment.
    pub name: String,
    pub namespace: String,
    pub image: String,
    pub replicas: u32,
    /// `--var` values passed to the script, in order.
    pub vars: Vec<(String, String)>,
    /// The script path as given; only its file name reaches the manifests.
    pub script: PathBuf,
}

/// The objects to apply, in dependency order, and what the user should know about them.
#[derive(Clone, Debug)]
pub struct Rendered {
    pub objects: Vec<Json>,
    /// Problems with the deployment itself; the inference's own warnings are not repeated.
    pub warnings: Vec<String>,
}

/// A DNS-1123 label derived from the script's file name, e.g. `My_Ctrl.star` -> `my-ctrl`.
pub fn default_name(script: &Path) -> String {
    let stem = script
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let mapped: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let mut name = mapped.trim_matches('-').to_owned();
    // Truncating can expose a '-' at the end again.
    name.truncate(63);
    let name = name.trim_end_matches('-');
    if name.is_empty() {
        "controller".to_owned()
    } else {
        name.to_owned()
    }
}

/// The objects that run the script as a controller: Namespace, ServiceAccount, roles and
/// bindings, then the Deployment.
///
/// # Errors
/// An invalid name, namespace or image; a script without `k8s.control()`; a wildcard rule.
pub fn render(inference: &Inference, opts: &Options) -> Result<Rendered> {
    validate_label("--name", &opts.name)?;
    validate_label("--namespace", &opts.namespace)?;
    if opts.image.trim().is_empty() || opts.image.chars().any(char::is_whitespace) {
        return Err(Error::Validate {
            what: "--image",
            value: opts.image.clone(),
            reason: "must be an image reference without spaces".into(),
        });
    }
    let control = inference.control.as_ref().ok_or(Error::FindController)?;

    let mut warnings = Vec::new();
    if opts.replicas > 1 && !control.leader_election {
        warnings.push(format!(
            "--replicas {}: the script does not set leader_election=True, so every replica \
             reconciles the same objects",
            opts.replicas
        ));
    }

    let mut objects = Vec::new();
    // The built-in namespaces always exist: labelling them as ours would make
    // `kubectl delete -f` try to delete them.
    if !is_builtin_namespace(&opts.namespace) {
        objects.push(json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": opts.namespace, "labels": labels(&opts.name)},
        }));
    }
    objects.push(json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(&opts.name, &opts.namespace, &opts.name),
    }));
    objects.extend(rbac::objects(
        &inference.rules.resolved(&opts.namespace),
        opts,
    )?);
    objects.push(deployment::deployment(control, opts)?);
    Ok(Rendered { objects, warnings })
}

/// The ServiceAccount `name` in `namespace` and the roles and bindings that grant it
/// `rules` (with [`crate::rbac::Scope::Own`] meaning `namespace`): the identity
/// `kite operator` creates for each StarlarkController, rendered as for a deployment.
///
/// # Errors
/// An invalid name or namespace, or a wildcard rule.
pub fn identity_objects(
    rules: &crate::rbac::Rules,
    name: &str,
    namespace: &str,
) -> Result<Vec<Json>> {
    validate_label("the ServiceAccount name", name)?;
    validate_label("the namespace", namespace)?;
    let opts = Options {
        name: name.to_owned(),
        namespace: namespace.to_owned(),
        image: String::new(),
        replicas: 1,
        vars: Vec::new(),
        script: PathBuf::new(),
    };
    let mut objects = vec![json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(name, namespace, name),
    })];
    objects.extend(rbac::objects(&rules.resolved(namespace), &opts)?);
    Ok(objects)
}

fn is_builtin_namespace(ns: &str) -> bool {
    matches!(
        ns,
        "default" | "kube-system" | "kube-public" | "kube-node-lease"
    )
}

fn validate_label(what: &'static str, value: &str) -> Result<()> {
    let fail = |reason: &str| {
        Err(Error::Validate {
            what,
            value: value.to_owned(),
            reason: reason.to_owned(),
        })
    };
    if value.is_empty() || value.len() > 63 {
        return fail("must be 1 to 63 characters (a DNS-1123 label)");
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return fail("must consist of lower-case letters, digits and '-' (a DNS-1123 label)");
    }
    if value.starts_with('-') || value.ends_with('-') {
        return fail("must start and end with a letter or digit (a DNS-1123 label)");
    }
    Ok(())
}

/// The labels every object carries; `app.kubernetes.io/name` alone selects the pods.
fn labels(name: &str) -> Json {
    json!({
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/managed-by": "kite",
        "app.kubernetes.io/component": "controller",
    })
}

fn metadata(name: &str, namespace: &str, app: &str) -> Json {
    json!({"name": name, "namespace": namespace, "labels": labels(app)})
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::rbac::{ControlFacts, Rules, Scope, Site};

    pub(crate) fn inference(rules: Rules, control: ControlFacts) -> Inference {
        Inference {
            rules,
            warnings: Vec::new(),
            unresolved: Vec::new(),
            control: Some(control),
            webhook: None,
            files: vec!["ctrl.star".into()],
        }
    }

    pub(crate) fn control(health_port: Option<u16>, leader_election: bool) -> ControlFacts {
        ControlFacts {
            kind: Some("Deployment".into()),
            health_port,
            leader_election,
        }
    }

    pub(crate) fn opts() -> Options {
        Options {
            name: "ctrl".into(),
            namespace: "team".into(),
            image: "example.com/ctrl:1".into(),
            replicas: 1,
            vars: Vec::new(),
            script: "./examples/ctrl.star".into(),
        }
    }

    pub(crate) fn rules(entries: &[(&str, &str, &[&str], Scope)]) -> Rules {
        let mut rules = Rules::default();
        for (i, (group, resource, verbs, scope)) in entries.iter().enumerate() {
            let site = Site {
                position: format!("ctrl.star:{}:1", i + 1),
                what: "test".into(),
            };
            rules.add(group, resource, verbs, scope.clone(), &[], site);
        }
        rules
    }

    fn kinds(objects: &[Json]) -> Vec<&str> {
        objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect()
    }

    pub(crate) fn mixed() -> Rules {
        rules(&[
            (
                "apps",
                "deployments",
                &["list", "watch", "patch"],
                Scope::Cluster,
            ),
            ("", "events", &["create"], Scope::Own),
        ])
    }

    #[test]
    fn objects_come_in_dependency_order_and_all_carry_the_labels() {
        let r = render(&inference(mixed(), control(Some(8081), false)), &opts()).unwrap();
        assert_eq!(
            kinds(&r.objects),
            [
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "Role",
                "ClusterRoleBinding",
                "RoleBinding",
                "Deployment"
            ]
        );
        for o in &r.objects {
            assert_eq!(o["metadata"]["labels"], labels("ctrl"), "{o}");
        }
        assert_eq!(r.objects[1]["metadata"]["namespace"], "team");
        assert!(r.warnings.is_empty());
    }

    #[test]
    fn built_in_namespaces_are_not_emitted() {
        let mut o = opts();
        o.namespace = "default".into();
        let r = render(&inference(mixed(), control(None, false)), &o).unwrap();
        assert_eq!(kinds(&r.objects)[0], "ServiceAccount");
    }

    #[test]
    fn invalid_flags_and_a_missing_control_are_errors() {
        let inf = inference(mixed(), control(None, false));
        for (name, ns) in [
            ("Ctrl", "team"),
            ("ctrl", "team-"),
            ("", "team"),
            ("a_b", "x"),
        ] {
            let mut o = opts();
            o.name = name.into();
            o.namespace = ns.into();
            let err = render(&inf, &o).unwrap_err().to_string();
            assert!(err.contains("DNS-1123"), "{err}");
        }
        let mut o = opts();
        o.name = "x".repeat(64);
        let err = render(&inf, &o).unwrap_err().to_string();
        assert!(err.starts_with("--name \"xxx"), "{err}");
        let mut none = inference(mixed(), control(None, false));
        none.control = None;
        let err = render(&none, &opts()).unwrap_err().to_string();
        assert_eq!(
            err,
            "the script never calls k8s.control(); there is no controller to deploy"
        );
    }

    #[test]
    fn replicas_without_leader_election_warn() {
        let mut o = opts();
        o.replicas = 3;
        let r = render(&inference(mixed(), control(None, false)), &o).unwrap();
        assert_eq!(r.warnings.len(), 1);
        assert!(
            r.warnings[0].starts_with("--replicas 3: the script does not set leader_election=True"),
            "{:?}",
            r.warnings
        );
        let r = render(&inference(mixed(), control(None, true)), &o).unwrap();
        assert!(r.warnings.is_empty());
    }

    #[test]
    fn default_names() {
        for (path, want) in [
            ("./max-replicas-controller.star", "max-replicas-controller"),
            ("My_Ctrl.star", "my-ctrl"),
            ("dir/__x__.star", "x"),
            ("_.star", "controller"),
            ("", "controller"),
        ] {
            assert_eq!(default_name(Path::new(path)), want, "{path}");
        }
        let long = format!("{}_b.star", "a".repeat(62));
        assert_eq!(default_name(Path::new(&long)), "a".repeat(62));
    }
}
