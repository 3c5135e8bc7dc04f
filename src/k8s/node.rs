//! Node scheduling controls: `cordon`, `uncordon`, `taint` and `untaint`.

use serde_json::{Value as Json, json};

use super::ops::{self, Error, Result, Target};
use super::session::Session;

/// The taint effects the API server accepts.
const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// One node taint as scripts give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

impl Taint {
    /// The taint `taint(node, key, value=, effect=)` means. `key` may also be kubectl's
    /// `key=value:Effect` form, when `value` and `effect` are not given; the effect
    /// defaults to `NoSchedule`.
    ///
    /// # Errors
    /// An empty key, or an effect other than NoSchedule, PreferNoSchedule or NoExecute.
    pub fn parse(key: &str, value: &str, effect: &str) -> Result<Self> {
        let (mut key, mut value, mut effect) = (key.trim(), value, effect);
        if value.is_empty() && effect.is_empty() {
            if let Some((k, e)) = key.rsplit_once(':') {
                key = k;
                effect = e;
            }
            if let Some((k, v)) = key.split_once('=') {
                key = k;
                value = v;
            }
        }
        if key.is_empty() {
            return Err(Error::Invalid("taint key is empty".into()));
        }
        let effect = if effect.is_empty() {
            "NoSchedule"
        } else {
            effect
        };
        let Some(effect) = EFFECTS.iter().find(|e| e.eq_ignore_ascii_case(effect)) else {
            return Err(Error::Invalid(format!(
                "taint effect must be NoSchedule, PreferNoSchedule or NoExecute, not {effect:?}"
            )));
        };
        Ok(Self {
            key: key.to_owned(),
            value: value.to_owned(),
            effect: (*effect).to_owned(),
        })
    }

    fn to_json(&self) -> Json {
        let mut t = json!({"key": self.key, "effect": self.effect});
        if !self.value.is_empty() {
            t["value"] = json!(self.value);
        }
        t
    }
}

/// Which taints `untaint(node, key)` removes: `key` (every effect), or kubectl's
/// `key:Effect` / `key:Effect-` for one effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaintMatch {
    pub key: String,
    pub effect: Option<String>,
}

impl TaintMatch {
    /// # Errors
    /// An empty key or an unknown effect.
    pub fn parse(spec: &str) -> Result<Self> {
        let spec = spec.trim().trim_end_matches('-');
        let (key, effect) = match spec.rsplit_once(':') {
            Some((k, e)) => (k, Some(Taint::parse(k, "", e)?.effect)),
            None => (spec, None),
        };
        // `key=value` names the same taint as `key`: taints are unique by key and effect.
        let key = key.split_once('=').map_or(key, |(k, _)| k);
        if key.is_empty() {
            return Err(Error::Invalid("taint key is empty".into()));
        }
        Ok(Self {
            key: key.to_owned(),
            effect,
        })
    }

    fn matches(&self, taint: &Json) -> bool {
        taint["key"].as_str() == Some(&self.key)
            && self
                .effect
                .as_deref()
                .is_none_or(|e| taint["effect"].as_str() == Some(e))
    }
}

/// The node's taints with `taint` added; one with the same key and effect is replaced,
/// as `kubectl taint --overwrite` does.
pub fn with_taint(current: &[Json], taint: &Taint) -> Vec<Json> {
    let same = TaintMatch {
        key: taint.key.clone(),
        effect: Some(taint.effect.clone()),
    };
    let mut out: Vec<Json> = current
        .iter()
        .filter(|t| !same.matches(t))
        .cloned()
        .collect();
    out.push(taint.to_json());
    out
}

/// The node's taints without those `m` names, and how many were removed.
pub fn without_taint(current: &[Json], m: &TaintMatch) -> (Vec<Json>, usize) {
    let kept: Vec<Json> = current.iter().filter(|t| !m.matches(t)).cloned().collect();
    let removed = current.len() - kept.len();
    (kept, removed)
}

async fn nodes(session: &Session) -> Result<Target> {
    Target::resolve(session, "nodes", None).await
}

/// Sets `spec.unschedulable`; returns the node.
pub async fn set_unschedulable(session: &Session, node: &str, unschedulable: bool) -> Result<Json> {
    let target = nodes(session).await?;
    let body = kube::api::Patch::Merge(json!({"spec": {"unschedulable": unschedulable}}));
    ops::patch(session, &target, node, &body, false).await
}

/// Rewrites the node's taints with `edit`, guarded by the resourceVersion read, retrying
/// when another writer got in between (the node controller updates taints too).
async fn edit_taints(
    session: &Session,
    node: &str,
    edit: impl Fn(&[Json]) -> Result<Vec<Json>>,
) -> Result<Json> {
    let target = nodes(session).await?;
    let mut attempt = 0;
    loop {
        let current = ops::get_of(session, &target, node).await?;
        let taints = current["spec"]["taints"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let next = edit(&taints)?;
        let body = kube::api::Patch::Merge(json!({
            "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "spec": {"taints": next},
        }));
        match ops::patch(session, &target, node, &body, false).await {
            Err(e) if e.code() == Some(409) && attempt < 5 => attempt += 1,
            other => return other,
        }
    }
}

/// Adds (or replaces) a taint; returns the node.
pub async fn taint(session: &Session, node: &str, taint: &Taint) -> Result<Json> {
    edit_taints(session, node, |current| Ok(with_taint(current, taint))).await
}

/// Removes the taints `m` names; returns the node.
///
/// # Errors
/// `Invalid` when the node has no such taint, as kubectl reports it.
pub async fn untaint(session: &Session, node: &str, m: &TaintMatch) -> Result<Json> {
    edit_taints(session, node, |current| {
        let (kept, removed) = without_taint(current, m);
        if removed == 0 {
            return Err(Error::Invalid(format!(
                "node {node:?} has no taint with key {:?}{}",
                m.key,
                m.effect
                    .as_deref()
                    .map(|e| format!(" and effect {e}"))
                    .unwrap_or_default()
            )));
        }
        Ok(kept)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taint_arguments_and_kubectl_form() {
        let t = Taint::parse("dedicated", "gpu", "").unwrap();
        assert_eq!(
            (t.key.as_str(), t.value.as_str(), t.effect.as_str()),
            ("dedicated", "gpu", "NoSchedule")
        );
        let t = Taint::parse("dedicated=gpu:NoExecute", "", "").unwrap();
        assert_eq!(
            (t.key.as_str(), t.value.as_str(), t.effect.as_str()),
            ("dedicated", "gpu", "NoExecute")
        );
        let t = Taint::parse("maint:prefernoschedule", "", "").unwrap();
        assert_eq!(
            (t.key.as_str(), t.value.as_str(), t.effect.as_str()),
            ("maint", "", "PreferNoSchedule")
        );
        let e = Taint::parse("k", "v", "Sometimes").unwrap_err().to_string();
        assert!(e.contains("\"Sometimes\""), "{e}");
        assert!(Taint::parse(" ", "", "").is_err());
    }

    #[test]
    fn untaint_specs() {
        assert_eq!(
            TaintMatch::parse("dedicated:NoSchedule-").unwrap(),
            TaintMatch {
                key: "dedicated".into(),
                effect: Some("NoSchedule".into())
            }
        );
        assert_eq!(
            TaintMatch::parse("dedicated-").unwrap(),
            TaintMatch {
                key: "dedicated".into(),
                effect: None
            }
        );
        assert!(TaintMatch::parse("k:Bad-").is_err());
        assert!(TaintMatch::parse(":NoSchedule").is_err());
    }

    #[test]
    fn taints_are_unique_by_key_and_effect() {
        let current = vec![
            json!({"key": "a", "value": "1", "effect": "NoSchedule"}),
            json!({"key": "a", "effect": "NoExecute"}),
            json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}),
        ];
        let next = with_taint(&current, &Taint::parse("a=2:NoSchedule", "", "").unwrap());
        assert_eq!(next.len(), 3);
        assert_eq!(
            next[2],
            json!({"key": "a", "value": "2", "effect": "NoSchedule"})
        );
        let (kept, removed) = without_taint(&current, &TaintMatch::parse("a").unwrap());
        assert_eq!((kept.len(), removed), (1, 2));
        let (_, removed) = without_taint(&current, &TaintMatch::parse("a:NoExecute").unwrap());
        assert_eq!(removed, 1);
    }
}
