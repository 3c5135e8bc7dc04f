//! YAML and JSON forms of the rendered objects.

use serde_json::{Value as Json, json};

use super::{Error, Result};
use crate::script::yaml::Plain;

/// The objects as a YAML stream, one `---`-separated document each, each ending in a newline.
///
/// # Errors
/// Only when a value has no YAML form (not expected for JSON input).
pub fn to_yaml(objects: &[Json]) -> Result<String> {
    let mut out = String::new();
    for (i, object) in objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        let doc =
            serde_saphyr::to_string(&Plain(object)).map_err(|e| Error::WriteYaml(e.to_string()))?;
        out.push_str(&doc);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// The objects as one pretty-printed `v1/List`, which `kubectl apply -f` accepts.
///
/// # Errors
/// Only when serialization fails (not expected for JSON input).
pub fn to_json(objects: &[Json]) -> Result<String> {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let mut out = serde_json::to_string_pretty(&list).map_err(Error::WriteJson)?;
    out.push('\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::render;
    use super::super::tests::{control, inference, mixed, opts};
    use super::*;

    #[test]
    fn yaml_stream_parses_back_to_the_same_objects() {
        let mut o = opts();
        // Strings that look like numbers or booleans must come back as strings.
        o.vars = vec![("n".into(), "3".into()), ("on".into(), "true".into())];
        let r = render(&inference(mixed(), control(Some(8081), true)), &o).unwrap();
        let yaml = to_yaml(&r.objects).unwrap();
        assert!(yaml.ends_with('\n'));
        for line in [
            "\n  replicas: 1\n",
            "containerPort: 8081\n",
            "- \"0.0.0.0\"\n",
            "- n=3\n",
        ] {
            assert!(yaml.contains(line), "{line:?} in {yaml}");
        }
        assert!(!yaml.contains("serde_json"), "{yaml}");
        assert_eq!(
            yaml.matches("\n---\n").count(),
            r.objects.len() - 1,
            "{yaml}"
        );
        let back = crate::script::yaml::parse_yaml(&yaml).unwrap();
        assert_eq!(back, r.objects);
    }

    #[test]
    fn json_is_one_list() {
        let r = render(&inference(mixed(), control(None, false)), &opts()).unwrap();
        let text = to_json(&r.objects).unwrap();
        let list: Json = serde_json::from_str(&text).unwrap();
        assert_eq!(list["apiVersion"], "v1");
        assert_eq!(list["kind"], "List");
        assert_eq!(list["items"], Json::Array(r.objects));
        assert!(text.starts_with("{\n  \"apiVersion\""));
    }
}
