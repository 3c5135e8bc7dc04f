//! The parent's `Ready` condition: computed from the children, written only when it
//! changes, with `lastTransitionTime` moving only when the status does.

use serde_json::{Value as Json, json};

/// What the Ready condition should say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    pub status: bool,
    /// `Reconciled`, `Progressing` or `ReconcileError`.
    pub reason: &'static str,
    pub message: String,
}

impl Ready {
    pub fn reconciled() -> Self {
        Self {
            status: true,
            reason: "Reconciled",
            message: "all children are ready".into(),
        }
    }

    pub fn progressing(waiting: &[String]) -> Self {
        Self {
            status: false,
            reason: "Progressing",
            message: format!("waiting for {}", waiting.join(", ")),
        }
    }

    pub fn error(message: impl Into<String>) -> Self {
        let mut message: String = message.into();
        // Conditions are for people; a full traceback belongs in the logs.
        if message.len() > 1024 {
            message.truncate(message.floor_char_boundary(1021));
            message.push_str("...");
        }
        Self {
            status: false,
            reason: "ReconcileError",
            message,
        }
    }
}

/// The parent's conditions with Ready set as `ready` says, or None when the current
/// condition already says exactly that (so nothing is written).
pub fn updated_conditions(parent: &Json, ready: &Ready, now: &str) -> Option<Vec<Json>> {
    let generation = parent["metadata"]["generation"].as_i64();
    let status = if ready.status { "True" } else { "False" };
    let mut conditions: Vec<Json> = parent["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let existing = conditions.iter().position(|c| c["type"] == "Ready");
    if let Some(i) = existing {
        let c = &conditions[i];
        if c["status"] == status
            && c["reason"] == ready.reason
            && c["message"] == ready.message.as_str()
            && c["observedGeneration"].as_i64() == generation
        {
            return None;
        }
    }
    let transition = match existing.map(|i| &conditions[i]) {
        Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    let mut condition = json!({
        "type": "Ready",
        "status": status,
        "reason": ready.reason,
        "message": ready.message,
        "lastTransitionTime": transition,
    });
    if let Some(g) = generation {
        condition["observedGeneration"] = json!(g);
    }
    match existing {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
    Some(conditions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_write_when_nothing_changed() {
        let parent = json!({"metadata": {"generation": 2}, "status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "Reconciled", "message": "all children are ready",
             "observedGeneration": 2, "lastTransitionTime": "t0"}]}});
        assert_eq!(
            updated_conditions(&parent, &Ready::reconciled(), "t1"),
            None
        );
    }

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let parent = json!({"metadata": {"generation": 3}, "status": {"conditions": [
            {"type": "Other", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "Progressing", "message": "waiting", "observedGeneration": 2, "lastTransitionTime": "t0"}]}});
        let same_status = updated_conditions(
            &parent,
            &Ready::progressing(&["deployments/x".into()]),
            "t1",
        )
        .unwrap();
        assert_eq!(same_status[1]["lastTransitionTime"], "t0");
        assert_eq!(same_status[1]["observedGeneration"], 3);
        assert_eq!(same_status[0]["type"], "Other", "other conditions are kept");
        let flipped = updated_conditions(&parent, &Ready::reconciled(), "t1").unwrap();
        assert_eq!(flipped[1]["lastTransitionTime"], "t1");
        assert_eq!(flipped[1]["status"], "True");
    }

    #[test]
    fn a_first_condition_is_added_and_long_errors_are_cut() {
        let c = updated_conditions(&json!({}), &Ready::error("x".repeat(5000)), "t").unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0]["reason"], "ReconcileError");
        assert!(c[0]["message"].as_str().unwrap().len() <= 1024);
        assert!(c[0].get("observedGeneration").is_none());
    }
}
