//! What a hosted controller does with each `k8s.control()` option: the script's own
//! setting, a StarlarkController's override, or the operator's (health and leader
//! election), decided per option by an exhaustive match.

use std::time::Duration;

use crate::control::option::ControlOption as O;
use crate::control::spec::ControlSpec;
use crate::operator::resource::ControlOverrides;
use crate::script::host::Limits;

/// What a hosted controller does with one `k8s.control()` option.
pub enum Hosting {
    /// As the script says: a StarlarkController has no field for it.
    Script,
    /// As the script says unless the StarlarkController's `spec.control` says otherwise:
    /// sets the spec from the overrides, within the operator's limits.
    Overridden(fn(&mut ControlSpec, &ControlOverrides, &Limits) -> Result<(), String>),
    /// Dropped, and said so, because the operator does it for all its controllers:
    /// clears the option and says what was dropped, if the script set it.
    Ignored(fn(&mut ControlSpec) -> Option<String>),
    /// Without effect: it only shapes leader election, which is [`Hosting::Ignored`].
    Moot,
}

/// How a hosted controller treats each option. A match over every option, with no
/// default, so that a new option is decided here (may a StarlarkController override
/// it? does the operator take it over?) instead of being left as the script says.
fn hosting(option: O) -> Hosting {
    match option {
        // The script's own logic: what it watches, and the functions that handle it.
        O::Kind
        | O::Reconcile
        | O::OnCreate
        | O::OnUpdate
        | O::OnDelete
        | O::Finalize
        | O::Finalizer
        | O::WatchOwned
        | O::WatchRelated
        | O::Predicate => Hosting::Script,
        O::Namespace => Hosting::Overridden(|spec, o, _| {
            if let Some(ns) = &o.namespace {
                spec.namespace = Some(ns.clone());
            }
            Ok(())
        }),
        O::Labels => Hosting::Overridden(|spec, o, _| {
            if let Some(l) = &o.labels {
                spec.labels = Some(l.clone());
            }
            Ok(())
        }),
        O::FieldSelector => Hosting::Overridden(|spec, o, _| {
            if let Some(f) = &o.field_selector {
                spec.field_selector = Some(f.clone());
            }
            Ok(())
        }),
        O::Poll => Hosting::Overridden(|spec, o, limits| {
            if let Some(p) = &o.poll {
                spec.poll = Some(period(O::Poll, p, limits)?).filter(|d| !d.is_zero());
            }
            Ok(())
        }),
        O::Resync => Hosting::Overridden(|spec, o, limits| {
            if let Some(r) = &o.resync {
                spec.resync = Some(period(O::Resync, r, limits)?).filter(|d| !d.is_zero());
            }
            Ok(())
        }),
        O::Workers => Hosting::Overridden(|spec, o, limits| {
            if let Some(w) = o.workers {
                if w == 0 || w as usize > limits.max_workers {
                    return Err(format!(
                        "spec.control.workers: {w} is not between 1 and {} limit of {}",
                        limits.source, limits.max_workers
                    ));
                }
                spec.workers = w as usize;
            }
            Ok(())
        }),
        O::GenerationChanged => Hosting::Overridden(|spec, o, _| {
            if let Some(g) = o.generation_changed {
                spec.generation_changed = g;
            }
            Ok(())
        }),
        O::MaxRetries => Hosting::Overridden(|spec, o, _| {
            if let Some(m) = o.max_retries {
                spec.max_retries = m;
            }
            Ok(())
        }),
        O::Backoff => Hosting::Overridden(|spec, o, limits| {
            if let Some(b) = &o.backoff {
                spec.backoff = period(O::Backoff, b, limits)?;
                if spec.backoff.is_zero() {
                    return Err("spec.control.backoff: must be greater than zero".into());
                }
            }
            Ok(())
        }),
        O::HealthPort => Hosting::Ignored(|spec| {
            let port = spec.health_port.take()?;
            Some(format!(
                "health_port={port} (the operator serves /healthz and /readyz)"
            ))
        }),
        O::LeaderElection => Hosting::Ignored(|spec| {
            std::mem::take(&mut spec.leader_election).then(|| {
                "leader_election=True (the operator elects one leader for all controllers)".into()
            })
        }),
        O::LeaderElectionId | O::LeaderElectionNamespace | O::Identity => Hosting::Moot,
    }
}

/// Health and leader election belong to the operator in a hosted script.
pub fn ignore_hosting_options(spec: &mut ControlSpec) -> Vec<String> {
    O::ALL
        .iter()
        .filter_map(|option| match hosting(*option) {
            Hosting::Ignored(drop) => drop(spec),
            Hosting::Script | Hosting::Overridden(_) | Hosting::Moot => None,
        })
        .collect()
}

/// A period of `spec.control`, parsed and held to the operator's floor (0 turns it off,
/// so it has no floor).
fn period(option: O, v: &str, limits: &Limits) -> Result<Duration, String> {
    let d = crate::duration::parse(v).map_err(|e| format!("spec.control.{option}: {e}"))?;
    if !d.is_zero() {
        limits
            .check_period(option.name(), d)
            .map_err(|e| format!("spec.control.{option}: {e}"))?;
    }
    Ok(d)
}

/// Applies a StarlarkController's `spec.control` to what the script asked for.
///
/// # Errors
/// A malformed duration, an out-of-range count, or a value beyond `limits`, naming the
/// field.
pub fn apply_overrides(
    spec: &mut ControlSpec,
    o: &ControlOverrides,
    limits: &Limits,
) -> Result<(), String> {
    for option in O::ALL {
        if let Hosting::Overridden(apply) = hosting(*option) {
            apply(spec, o, limits)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::CustomResourceExt;
    use serde_json::json;

    use std::collections::BTreeMap;

    use super::*;
    use crate::operator::resource::{ClusterStarlarkController, StarlarkController};

    fn spec() -> ControlSpec {
        ControlSpec {
            health_port: Some(8081),
            leader_election: true,
            ..ControlSpec::for_tests("deployments")
        }
    }

    #[test]
    fn overrides_replace_the_scripts_options() {
        let mut s = spec();
        let o = ControlOverrides {
            namespace: Some("team".into()),
            labels: Some("a=b".into()),
            poll: Some("1m30s".into()),
            workers: Some(4),
            max_retries: Some(0),
            ..Default::default()
        };
        apply_overrides(&mut s, &o, &Limits::default()).unwrap();
        assert_eq!(s.namespace.as_deref(), Some("team"));
        assert_eq!(s.labels.as_deref(), Some("a=b"));
        assert_eq!(s.poll, Some(Duration::from_secs(90)));
        assert_eq!((s.workers, s.max_retries), (4, 0));
        let bad = ControlOverrides {
            backoff: Some("soon".into()),
            ..Default::default()
        };
        assert!(
            apply_overrides(&mut s, &bad, &Limits::default())
                .unwrap_err()
                .starts_with("spec.control.backoff: ")
        );
    }

    #[test]
    fn overrides_cannot_pass_the_operators_floors_and_caps() {
        let hosted = Limits {
            min_period: Duration::from_secs(1),
            max_workers: 8,
            source: "the operator's",
            ..Limits::default()
        };
        for (o, says) in [
            (
                ControlOverrides {
                    poll: Some("100ms".into()),
                    ..Default::default()
                },
                "spec.control.poll: poll of 100ms is below the operator's floor of 1s",
            ),
            (
                ControlOverrides {
                    backoff: Some("0s".into()),
                    ..Default::default()
                },
                "spec.control.backoff: must be greater than zero",
            ),
            (
                ControlOverrides {
                    workers: Some(9),
                    ..Default::default()
                },
                "spec.control.workers: 9 is not between 1 and the operator's limit of 8",
            ),
        ] {
            let mut s = spec();
            assert_eq!(apply_overrides(&mut s, &o, &hosted).unwrap_err(), says);
        }
    }

    #[test]
    fn health_and_leader_election_are_ignored_and_said_so() {
        let mut s = spec();
        let ignored = ignore_hosting_options(&mut s);
        assert_eq!(s.health_port, None);
        assert!(!s.leader_election);
        assert_eq!(ignored.len(), 2);
        assert!(ignored[0].starts_with("health_port=8081"));
    }

    /// The fields of `spec.control` in a controller resource's CRD, by their names as
    /// options are spelled (`field_selector` for `fieldSelector`): the field's own name
    /// and its schema.
    fn override_fields(
        crd: &CustomResourceDefinition,
    ) -> BTreeMap<String, (String, serde_json::Value)> {
        let crd = serde_json::to_value(crd).unwrap();
        let fields = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["control"]["properties"];
        let fields = fields.as_object().expect("spec.control has fields");
        let snake = |camel: &str| {
            camel.chars().fold(String::new(), |mut s, c| {
                if c.is_ascii_uppercase() {
                    s.push('_');
                }
                s.push(c.to_ascii_lowercase());
                s
            })
        };
        fields
            .iter()
            .map(|(name, schema)| (snake(name), (name.clone(), schema.clone())))
            .collect()
    }

    fn overridden() -> Vec<O> {
        O::ALL
            .iter()
            .copied()
            .filter(|o| matches!(hosting(*o), Hosting::Overridden(_)))
            .collect()
    }

    #[test]
    fn the_crds_override_fields_are_the_options_a_controller_may_override() {
        for crd in [StarlarkController::crd(), ClusterStarlarkController::crd()] {
            let fields = override_fields(&crd);
            for name in fields.keys() {
                assert!(
                    O::parse(name).is_some(),
                    "spec.control.{name} is not a k8s.control() option"
                );
            }
            let names: Vec<&str> = fields.keys().map(String::as_str).collect();
            let mut options: Vec<&str> = overridden().iter().map(|o| o.name()).collect();
            options.sort_unstable();
            assert_eq!(names, options, "{}", crd.spec.names.kind);
        }
    }

    /// Each option a StarlarkController may override is set from its own field: with
    /// only that field given, applying that option alone changes the spec.
    #[test]
    fn each_override_is_read_from_the_field_of_its_option() {
        let fields = override_fields(&StarlarkController::crd());
        for option in overridden() {
            let (camel, schema) = &fields[option.name()];
            let value = match schema["type"].as_str() {
                Some("integer") => json!(3),
                Some("boolean") => json!(!spec().generation_changed),
                Some("string") if schema.get("pattern").is_some() => json!("7s"),
                Some("string") => json!("a=b"),
                other => panic!("{option}: a field of type {other:?}"),
            };
            let o: ControlOverrides = serde_json::from_value(json!({ camel: value })).unwrap();
            let Hosting::Overridden(apply) = hosting(option) else {
                unreachable!()
            };
            let mut s = spec();
            apply(&mut s, &o, &Limits::default()).unwrap();
            assert_ne!(s, spec(), "{option} did not read spec.control.{camel}");
            let mut all = spec();
            apply_overrides(&mut all, &o, &Limits::default()).unwrap();
            assert_eq!(
                all, s,
                "another option than {option} read spec.control.{camel}"
            );
        }
    }
}
