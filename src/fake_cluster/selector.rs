//! Label and field selectors as the API server reads them from the query string.

use serde_json::Value as Json;

use super::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Term {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    Absent(String),
}

/// A parsed selector; the empty selector matches everything.
#[derive(Clone, Debug, Default)]
pub struct Selector {
    labels: Vec<Term>,
    fields: Vec<Term>,
}

impl Selector {
    /// Parses `labelSelector` and `fieldSelector`.
    ///
    /// # Errors
    /// [`Error::BadRequest`] naming the term that does not parse.
    pub fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Self> {
        Ok(Self {
            labels: terms(labels.unwrap_or_default(), true)?,
            fields: terms(fields.unwrap_or_default(), false)?,
        })
    }

    pub fn matches(&self, obj: &Json) -> bool {
        let labels = &obj["metadata"]["labels"];
        self.labels.iter().all(|t| {
            holds(t, |k| {
                labels.get(k).and_then(Json::as_str).map(str::to_owned)
            })
        }) && self.fields.iter().all(|t| holds(t, |k| field(obj, k)))
    }
}

/// A dotted field of an object as text (`status.phase`, `metadata.name`).
fn field(obj: &Json, path: &str) -> Option<String> {
    let mut at = obj;
    for part in path.split('.') {
        at = at.get(part)?;
    }
    match at {
        Json::String(s) => Some(s.clone()),
        Json::Null => None,
        other => Some(other.to_string()),
    }
}

fn holds(term: &Term, value: impl Fn(&str) -> Option<String>) -> bool {
    match term {
        Term::Equals(k, v) => value(k).as_deref() == Some(v),
        Term::NotEquals(k, v) => value(k).as_deref() != Some(v),
        Term::In(k, vs) => value(k).is_some_and(|x| vs.contains(&x)),
        Term::NotIn(k, vs) => value(k).is_none_or(|x| !vs.contains(&x)),
        Term::Exists(k) => value(k).is_some(),
        Term::Absent(k) => value(k).is_none(),
    }
}

/// Splits on commas outside parentheses and parses each term.
fn terms(text: &str, sets: bool) -> Result<Vec<Term>> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| term(p, sets))
        .collect()
}

fn term(text: &str, sets: bool) -> Result<Term> {
    let bad = || Error::BadRequest(format!("unable to parse requirement: {text:?}"));
    if let Some((k, v)) = text.split_once("!=") {
        return Ok(Term::NotEquals(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = text.split_once("==").or_else(|| text.split_once('=')) {
        return Ok(Term::Equals(k.trim().into(), v.trim().into()));
    }
    if !sets {
        return Err(bad());
    }
    let words: Vec<&str> = text.splitn(2, char::is_whitespace).collect();
    if let [key, rest] = words.as_slice() {
        let rest = rest.trim();
        let (op, list) = rest.split_once('(').ok_or_else(bad)?;
        let values: Vec<String> = list
            .strip_suffix(')')
            .ok_or_else(bad)?
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect();
        return match op.trim() {
            "in" => Ok(Term::In((*key).to_owned(), values)),
            "notin" => Ok(Term::NotIn((*key).to_owned(), values)),
            _ => Err(bad()),
        };
    }
    match text.strip_prefix('!') {
        Some(key) => Ok(Term::Absent(key.trim().into())),
        None => Ok(Term::Exists(text.into())),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn labels_and_fields_match() {
        let obj = json!({"metadata": {"name": "a", "labels": {"app": "web", "tier": "fe"}},
                         "status": {"phase": "Running"}});
        let yes = |l: &str, f: &str| Selector::parse(Some(l), Some(f)).unwrap().matches(&obj);
        assert!(yes(
            "app=web,tier in (fe, be)",
            "metadata.name=a,status.phase==Running"
        ));
        assert!(yes("app,!gone,tier notin (db)", ""));
        assert!(!yes("app!=web", ""));
        assert!(!yes("", "status.phase=Pending"));
        assert!(Selector::parse(Some("app in fe"), None).is_err());
        assert!(Selector::parse(None, Some("status.phase")).is_err());
    }
}
