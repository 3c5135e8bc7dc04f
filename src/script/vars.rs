//! Script variables from `--var k=v` and `--var-file`, read with `var_str` and friends.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Mutex;

/// Why the variables could not be read from the command line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("--var {arg:?}: expected NAME=VALUE")]
    ParseVar { arg: String },
    #[error("--var-file {path}: {source}")]
    ReadVarFile {
        path: String,
        source: std::io::Error,
    },
    #[error("--var-file {path}: {message}")]
    ParseVarFile { path: String, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The variables of one run. Values keep their YAML type when they come from a file;
/// `--var` values are strings. Reads are recorded to warn about unused variables.
#[derive(Debug, Default)]
pub struct Vars {
    values: BTreeMap<String, serde_json::Value>,
    read: Mutex<BTreeSet<String>>,
}

impl Vars {
    /// Builds the variables: the file's first, then each `--var`, which wins.
    ///
    /// # Errors
    /// A `--var` without `=`, an unreadable file, or a file that is not a YAML map.
    pub fn from_args(args: &[String], files: &[impl AsRef<Path>]) -> Result<Self> {
        let mut values = BTreeMap::new();
        for file in files {
            let path = file.as_ref().display().to_string();
            let text =
                std::fs::read_to_string(file.as_ref()).map_err(|source| Error::ReadVarFile {
                    path: path.clone(),
                    source,
                })?;
            let map: BTreeMap<String, serde_json::Value> =
                serde_saphyr::from_str(&text).map_err(|e| Error::ParseVarFile {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
            values.extend(map);
        }
        for arg in args {
            let (k, v) = arg
                .split_once('=')
                .ok_or_else(|| Error::ParseVar { arg: arg.clone() })?;
            if k.is_empty() {
                return Err(Error::ParseVar { arg: arg.clone() });
            }
            values.insert(k.to_owned(), serde_json::Value::String(v.to_owned()));
        }
        Ok(Self {
            values,
            read: Mutex::default(),
        })
    }

    /// Builds variables from string pairs (the operator's `spec.vars`).
    pub fn from_map(map: impl IntoIterator<Item = (String, String)>) -> Self {
        let values = map
            .into_iter()
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect();
        Self {
            values,
            read: Mutex::default(),
        }
    }

    /// The raw value of `name`, recording that the script asked for it (only names
    /// that were set are recorded: `unused` needs no others, and a script asking for a
    /// new name on every call must not grow the record).
    pub fn get(&self, name: &str) -> Option<&serde_json::Value> {
        let value = self.values.get(name);
        if value.is_some()
            && let Ok(mut read) = self.read.lock()
            && !read.contains(name)
        {
            read.insert(name.to_owned());
        }
        value
    }

    /// The names of every variable, sorted (`var_names()`); reading the list counts as
    /// reading none of them.
    pub fn names(&self) -> Vec<String> {
        self.values.keys().cloned().collect()
    }

    /// Variables that were set but never read and whose name does not appear as a
    /// string literal in `source` (a handler that runs later may still read those).
    pub fn unused(&self, source: &str) -> Vec<String> {
        let read = self.read.lock().map(|r| r.clone()).unwrap_or_default();
        self.values
            .keys()
            .filter(|k| !read.contains(*k))
            .filter(|k| {
                !source.contains(&format!("\"{k}\"")) && !source.contains(&format!("'{k}'"))
            })
            .cloned()
            .collect()
    }
}

/// The expected type of a `var_*` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarType {
    Str,
    Int,
    Bool,
    Float,
}

/// A typed variable value.
#[derive(Debug, Clone, PartialEq)]
pub enum VarValue {
    Str(String),
    Int(i64),
    Bool(bool),
    Float(f64),
}

/// Converts a raw value to `ty`, or says why not (e.g. `"abc" is not an integer`).
pub fn convert(raw: &serde_json::Value, ty: VarType) -> std::result::Result<VarValue, String> {
    use serde_json::Value as J;
    let text = match raw {
        J::String(s) => s.trim().to_owned(),
        other => other.to_string(),
    };
    let shown = match raw {
        J::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    match ty {
        VarType::Str => Ok(VarValue::Str(match raw {
            J::String(s) => s.clone(),
            other => other.to_string(),
        })),
        VarType::Int => text
            .parse()
            .map(VarValue::Int)
            .map_err(|_| format!("{shown} is not an integer")),
        VarType::Float => match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(VarValue::Float(f)),
            _ => Err(format!("{shown} is not a number")),
        },
        VarType::Bool => match text.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Ok(VarValue::Bool(true)),
            "false" | "no" | "off" | "0" => Ok(VarValue::Bool(false)),
            _ => Err(format!("{shown} is not a boolean (true/false)")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn var_args_parse_and_override_files() {
        let dir = std::env::temp_dir().join(format!("kite-vars-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("v.yaml");
        std::fs::write(&file, "a: 1\nb: x\n").unwrap();
        let vars = Vars::from_args(&["b=y".into(), "c=k=v".into()], &[&file]).unwrap();
        assert_eq!(vars.get("a"), Some(&json!(1)));
        assert_eq!(vars.get("b"), Some(&json!("y")));
        assert_eq!(vars.get("c"), Some(&json!("k=v")));
        assert!(Vars::from_args(&["novalue".into()], &[] as &[&Path]).is_err());
        assert!(Vars::from_args(&["=v".into()], &[] as &[&Path]).is_err());
    }

    #[test]
    fn conversion_errors_name_the_value() {
        assert_eq!(
            convert(&json!("abc"), VarType::Int),
            Err("\"abc\" is not an integer".into())
        );
        assert_eq!(convert(&json!("5"), VarType::Int), Ok(VarValue::Int(5)));
        assert_eq!(convert(&json!(5), VarType::Int), Ok(VarValue::Int(5)));
        assert_eq!(
            convert(&json!("yes"), VarType::Bool),
            Ok(VarValue::Bool(true))
        );
        assert!(convert(&json!("nan"), VarType::Float).is_err());
        assert_eq!(
            convert(&json!(1.5), VarType::Str),
            Ok(VarValue::Str("1.5".into()))
        );
    }

    #[test]
    fn conversion_never_panics() {
        let samples = [
            "",
            " ",
            "-",
            "9999999999999999999999",
            "1e400",
            "0x10",
            "\u{0}",
            "ß",
            "-0",
        ];
        for s in samples {
            for ty in [VarType::Str, VarType::Int, VarType::Bool, VarType::Float] {
                let _ = convert(&json!(s), ty);
            }
        }
    }

    #[test]
    fn unused_vars_are_reported_unless_named_in_source() {
        let vars =
            Vars::from_args(&["a=1".into(), "b=2".into(), "c=3".into()], &[] as &[&Path]).unwrap();
        vars.get("a");
        assert_eq!(vars.unused("x = var_int('b')"), vec!["c".to_string()]);
    }
}
