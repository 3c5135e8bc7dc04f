//! `k8s.wait_for`: poll an object until a condition holds, with a deadline.

use std::time::Duration;

use serde_json::Value as Json;
use tokio::time::Instant;

use super::ops::{Result, Target};
use super::session::Session;

/// What to wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// The object exists.
    Exists,
    /// The object is gone (404).
    Deleted,
    /// `status.conditions[type=<name>].status == "True"` (case-insensitive type).
    Type(String),
}

impl Condition {
    /// Parses the `condition=` argument: None, "delete"/"deleted", or a condition type.
    pub fn parse(s: Option<&str>) -> Self {
        match s.map(str::trim) {
            None | Some("" | "exists") => Condition::Exists,
            Some(c) if c.eq_ignore_ascii_case("delete") || c.eq_ignore_ascii_case("deleted") => {
                Condition::Deleted
            }
            Some(c) => Condition::Type(c.to_owned()),
        }
    }

    /// Whether `obj` (None when absent) satisfies the condition.
    pub fn holds(&self, obj: Option<&Json>) -> bool {
        match (self, obj) {
            (Condition::Exists, found) => found.is_some(),
            (Condition::Deleted, found) => found.is_none(),
            (Condition::Type(_), None) => false,
            (Condition::Type(t), Some(obj)) => obj["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["type"]
                        .as_str()
                        .is_some_and(|ct| ct.eq_ignore_ascii_case(t))
                        && c["status"] == "True"
                }),
        }
    }

    fn describe(&self) -> String {
        match self {
            Condition::Exists => "to exist".into(),
            Condition::Deleted => "to be deleted".into(),
            Condition::Type(t) => format!("condition {t}"),
        }
    }
}

/// How a wait ended, as upstream reports it: whether the condition held (`ready`), the
/// object as last seen (`resource`, None when absent) and a `message`: the matched
/// condition's own message, or what ran out.
#[derive(Debug, Clone, PartialEq)]
pub struct Waited {
    pub ready: bool,
    pub resource: Option<Json>,
    pub message: String,
}

impl Waited {
    /// The `{"ready", "resource", "message"}` dict scripts get.
    pub fn to_json(&self) -> Json {
        serde_json::json!({
            "ready": self.ready,
            "resource": self.resource,
            "message": self.message,
        })
    }
}

impl Condition {
    /// The message of a condition that holds: its status condition's own message.
    fn message(&self, obj: Option<&Json>) -> String {
        match (self, obj) {
            (Condition::Deleted, _) => "resource deleted".into(),
            (Condition::Type(t), Some(obj)) => obj["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| {
                    c["type"]
                        .as_str()
                        .is_some_and(|ct| ct.eq_ignore_ascii_case(t))
                })
                .and_then(|c| c["message"].as_str())
                .unwrap_or_default()
                .to_owned(),
            _ => String::new(),
        }
    }
}

/// Waits until `condition` holds for the object or `timeout` passes; running out is an
/// answer (`ready` False, with the reason), not an error, as upstream has it.
///
/// # Errors
/// API errors other than 404.
pub async fn wait_for(
    session: &Session,
    target: &Target,
    name: &str,
    condition: &Condition,
    timeout: Duration,
) -> Result<Waited> {
    let api = target.api(session);
    let deadline = Instant::now() + timeout;
    let mut interval = Duration::from_millis(100);
    loop {
        let obj = api
            .get_opt(name)
            .await?
            .map(|o| target.complete(serde_json::to_value(o).unwrap_or_default()));
        if condition.holds(obj.as_ref()) {
            return Ok(Waited {
                ready: true,
                message: condition.message(obj.as_ref()),
                resource: obj,
            });
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(Waited {
                ready: false,
                resource: obj,
                message: format!(
                    "timed out after {} waiting for {} {name:?} {}",
                    crate::duration::format(timeout),
                    target.display_name(),
                    condition.describe()
                ),
            });
        }
        tokio::time::sleep(interval.min(deadline - now)).await;
        interval = (interval * 3 / 2).min(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_match_status_conditions_case_insensitively() {
        let obj = json!({"status": {"conditions": [{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "False"}]}});
        assert!(Condition::parse(Some("available")).holds(Some(&obj)));
        assert!(!Condition::parse(Some("Progressing")).holds(Some(&obj)));
        assert!(!Condition::parse(Some("Ready")).holds(Some(&obj)));
        assert!(Condition::parse(None).holds(Some(&obj)));
        assert!(Condition::parse(Some("delete")).holds(None));
        assert!(!Condition::parse(Some("Available")).holds(None));
    }

    #[test]
    fn a_held_condition_reports_its_message() {
        let obj = json!({"status": {"conditions": [{"type": "Available", "status": "True", "message": "has minimum availability"}]}});
        let c = Condition::parse(Some("available"));
        assert_eq!(c.message(Some(&obj)), "has minimum availability");
        assert_eq!(Condition::Deleted.message(None), "resource deleted");
        let w = Waited {
            ready: false,
            resource: None,
            message: "timed out".into(),
        };
        assert_eq!(
            w.to_json(),
            json!({"ready": false, "resource": null, "message": "timed out"})
        );
    }
}
