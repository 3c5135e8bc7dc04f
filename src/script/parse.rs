//! Script-supplied JSON and YAML text into JSON values, node by node within the call's
//! memory and time budgets: a short text can decode to a tree a hundred times its size,
//! in blocks too small for the allocator's own backstop to see.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value as Json};

/// A JSON value whose decoding counted each node (`budget::walk_step`), and stopped
/// with an error once the call's memory or time ran out.
pub struct Budgeted(pub Json);

impl<'de> Deserialize<'de> for Budgeted {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Node).map(Budgeted)
    }
}

/// serde_json's key for a number kept as its text (`arbitrary_precision`, which
/// starlark turns on): `{KEY: "123"}` stands for the number 123.
const NUMBER_KEY: &str = "$serde_json::private::Number";

/// Counts one node of `bytes`; the error once the budgets ran out.
fn step<E: de::Error>(bytes: usize) -> Result<(), E> {
    match crate::script::budget::walk_step(bytes) {
        None => Ok(()),
        Some(why) => Err(E::custom(format!("decoding stopped: {why}"))),
    }
}

struct Node;

impl<'de> Visitor<'de> for Node {
    type Value = Json;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        Ok(Number::from_f64(v).map_or(Json::Null, Json::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Json, E> {
        step(v.len())?;
        Ok(Json::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Json, E> {
        step(v.len())?;
        Ok(Json::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Json, D::Error> {
        d.deserialize_any(Node)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        step(0)?;
        let mut items = Vec::new();
        while let Some(Budgeted(item)) = seq.next_element()? {
            step(0)?;
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        step(0)?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.is_empty() && key == NUMBER_KEY {
                let text: String = map.next_value()?;
                let n: Number = text.parse().map_err(de::Error::custom)?;
                return Ok(Json::Number(n));
            }
            step(key.len())?;
            let Budgeted(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Json::Object(object))
    }
}

/// Parses JSON text within the call's budgets.
///
/// # Errors
/// The syntax error, or where decoding stopped because a budget ran out.
pub fn json(text: &str) -> serde_json::Result<Json> {
    serde_json::from_str::<Budgeted>(text).map(|b| b.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_as_serde_json_does() {
        let text = r#"{"a": [1, -2, 3.5, 18446744073709551615, 123456789012345678901234567890], "b": null, "c": {"d": true, "e": "x"}}"#;
        let ours = json(text).unwrap();
        let theirs: Json = serde_json::from_str(text).unwrap();
        assert_eq!(ours, theirs);
        assert!(json("[1,").is_err());
    }

    /// Issue 26: a text of many tiny containers (each block under 4 KiB, 40 times its
    /// size once decoded) stops at the memory budget, not after decoding it all.
    #[test]
    fn a_tree_of_tiny_nodes_stops_at_the_memory_budget() {
        let leaf = format!("[{}]", vec!["[]"; 32].join(","));
        let l2 = format!("[{}]", vec![leaf.as_str(); 32].join(","));
        let l3 = format!("[{}]", vec![l2.as_str(); 32].join(","));
        let text = format!("[{}]", [l3.as_str(); 8].join(","));
        let (result, left) = crate::script::memory::guard(4 << 20, || {
            let result = json(&text);
            (result, crate::script::memory::used())
        })
        .unwrap();
        let e = result.unwrap_err();
        assert!(
            e.to_string().contains("passed the script's memory limit"),
            "{e}"
        );
        // What was built before it stopped is freed again.
        assert!(left < 1 << 20, "{left}");
    }

    /// Issue 26: YAML's aliases expand a few lines into millions of nodes; the
    /// expansion stops at the memory budget too.
    #[test]
    fn yaml_aliases_stop_at_the_memory_budget() {
        let mut text = String::from("a: &a [\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\n");
        for (name, prev) in [
            ("b", "a"),
            ("c", "b"),
            ("d", "c"),
            ("e", "d"),
            ("f", "e"),
            ("g", "f"),
            ("h", "g"),
        ] {
            let refs = vec![format!("*{prev}"); 8].join(",");
            text.push_str(&format!("{name}: &{name} [{refs}]\n"));
        }
        let e = crate::script::memory::guard(4 << 20, || crate::script::yaml::parse_yaml(&text))
            .unwrap()
            .unwrap_err();
        assert!(
            e.to_string().contains("passed the script's memory limit"),
            "{e}"
        );
    }
}
