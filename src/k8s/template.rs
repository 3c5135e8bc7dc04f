//! `set_image`, `set_env` and `set_resources`: strategic-merge patches to the containers
//! of a workload's pod template (or of a Pod), as `kubectl set` sends them.

use kube::api::Patch;
use serde_json::{Map, Value as Json, json};

use super::ops::{self, Error, Result, Target};
use super::session::Session;

/// Where the pod spec sits in an object of `kind`.
pub fn pod_spec_path(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &["spec"],
        "CronJob" => &["spec", "jobTemplate", "spec", "template", "spec"],
        _ => &["spec", "template", "spec"],
    }
}

fn scalar_text(v: &Json) -> Option<String> {
    match v {
        Json::String(s) => Some(s.clone()),
        Json::Number(n) => Some(n.to_string()),
        Json::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `set_env`'s dict as container env entries: a value becomes a string, None removes
/// the variable (kubectl's `NAME-`).
///
/// # Errors
/// `Invalid` naming the variable whose value is a list or dict.
pub fn env_entries(env: &Json) -> Result<Vec<Json>> {
    let Some(map) = env.as_object() else {
        return Err(Error::Invalid(
            "env must be a dict of names to values".into(),
        ));
    };
    map.iter()
        .map(|(name, v)| match v {
            Json::Null => Ok(json!({"name": name, "$patch": "delete"})),
            other => scalar_text(other)
                .map(|value| json!({"name": name, "value": value}))
                .ok_or_else(|| {
                    Error::Invalid(format!(
                        "env[{name:?}] must be a string, number, bool or None, not {other}"
                    ))
                }),
        })
        .collect()
}

/// `set_resources`' requests or limits as quantities, e.g. `{"cpu": "100m", "memory":
/// "128Mi"}` (numbers are allowed: `{"cpu": 1}`).
///
/// # Errors
/// `Invalid` naming the argument and resource whose quantity is not a string or number.
pub fn quantities(arg: &str, v: &Json) -> Result<Option<Json>> {
    if v.is_null() {
        return Ok(None);
    }
    let Some(map) = v.as_object() else {
        return Err(Error::Invalid(format!(
            "{arg} must be a dict such as {{\"cpu\": \"100m\"}}"
        )));
    };
    let mut out = Map::new();
    for (resource, q) in map {
        let text = match q {
            Json::String(s) if !s.trim().is_empty() => s.trim().to_owned(),
            Json::Number(n) => n.to_string(),
            other => {
                return Err(Error::Invalid(format!(
                    "{arg}[{resource:?}] must be a quantity such as \"100m\" or \"128Mi\", not {other}"
                )));
            }
        };
        out.insert(resource.clone(), json!(text));
    }
    Ok(Some(Json::Object(out)))
}

/// The names of the containers to change: `container`, or all of them when empty.
///
/// # Errors
/// `Invalid` when the named container does not exist, listing those that do.
pub fn pick_containers(obj: &Json, kind: &str, container: &str) -> Result<Vec<String>> {
    let mut spec = obj;
    for p in pod_spec_path(kind) {
        spec = &spec[*p];
    }
    let names: Vec<String> = spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect();
    if container.is_empty() || container == "*" {
        return Ok(names);
    }
    if names.iter().any(|n| n == container) {
        Ok(vec![container.to_owned()])
    } else {
        Err(Error::Invalid(format!(
            "no container named {container:?} (containers: {})",
            names.join(", ")
        )))
    }
}

/// Wraps per-container patches at the pod spec's place in `kind`.
pub fn containers_patch(kind: &str, containers: Vec<Json>) -> Json {
    let mut body = json!({"containers": containers});
    for p in pod_spec_path(kind).iter().rev() {
        let mut outer = Map::new();
        outer.insert((*p).to_owned(), body);
        body = Json::Object(outer);
    }
    body
}

/// Reads the object, builds the per-container patch with `each`, and sends it as a
/// strategic merge patch; returns the patched object.
///
/// # Errors
/// The object or container is missing, or the API refuses the patch.
pub async fn patch_containers(
    session: &Session,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    container: &str,
    each: impl Fn(&str) -> Json,
) -> Result<Json> {
    let target = Target::resolve(session, kind, namespace).await?;
    let obj = ops::get_of(session, &target, name).await?;
    let kind = target.resource.api_resource.kind.as_str();
    let names = pick_containers(&obj, kind, container)?;
    if names.is_empty() {
        return Err(Error::Invalid(format!(
            "{} {name:?} has no containers",
            target.display_name()
        )));
    }
    // One copy of the script's value per container: counted as it grows.
    let mut patches = Vec::with_capacity(names.len());
    for n in &names {
        if crate::script::memory::exhausted() {
            return Err(Error::Invalid(
                "the patch for every container passed the script's memory limit".into(),
            ));
        }
        patches.push(each(n));
    }
    let body = containers_patch(kind, patches);
    ops::patch(session, &target, name, &Patch::Strategic(body), false).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_become_strings_and_none_removes() {
        let e = env_entries(&json!({"A": "x", "B": 3, "C": true, "D": null})).unwrap();
        assert_eq!(e[1], json!({"name": "B", "value": "3"}));
        assert_eq!(e[2], json!({"name": "C", "value": "true"}));
        assert_eq!(e[3], json!({"name": "D", "$patch": "delete"}));
        let err = env_entries(&json!({"L": [1]})).unwrap_err().to_string();
        assert!(err.contains("env[\"L\"]"), "{err}");
        assert!(env_entries(&json!(["A"])).is_err());
    }

    #[test]
    fn resource_quantities() {
        let q = quantities("limits", &json!({"cpu": 1, "memory": " 128Mi "})).unwrap();
        assert_eq!(q, Some(json!({"cpu": "1", "memory": "128Mi"})));
        assert_eq!(quantities("requests", &Json::Null).unwrap(), None);
        let err = quantities("requests", &json!({"cpu": ""}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("requests[\"cpu\"]"), "{err}");
    }

    #[test]
    fn containers_by_kind() {
        let d =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}}});
        assert_eq!(pick_containers(&d, "Deployment", "").unwrap(), ["a", "b"]);
        assert_eq!(pick_containers(&d, "Deployment", "b").unwrap(), ["b"]);
        let err = pick_containers(&d, "Deployment", "c")
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"c\"") && err.contains("a, b"), "{err}");
        let p = containers_patch("CronJob", vec![json!({"name": "a"})]);
        assert_eq!(
            p["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["name"],
            "a"
        );
        let p = containers_patch("Pod", vec![]);
        assert_eq!(p, json!({"spec": {"containers": []}}));
    }
}
