//! Label and field selectors as scripts give them: a string (`"app=web,tier!=db"`), or a
//! dict of equalities (`{"app": "web"}`).

use serde_json::Value as Json;
use starlark::values::Value;

use crate::script::json::from_starlark;

/// The selector text, or `None` when `v` is neither a string nor a dict.
pub fn selector(v: Value) -> Option<String> {
    if let Some(s) = v.unpack_str() {
        return Some(s.to_owned());
    }
    let Ok(Json::Object(map)) = from_starlark(v) else {
        return None;
    };
    let terms: Vec<String> = map
        .iter()
        .map(|(k, v)| match v {
            Json::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect();
    Some(terms.join(","))
}

#[cfg(test)]
mod tests {
    use starlark::environment::{Globals, Module};
    use starlark::eval::Evaluator;
    use starlark::syntax::{AstModule, Dialect};

    use super::*;

    fn text(code: &str) -> Option<String> {
        Module::with_temp_heap(|module| {
            let ast = AstModule::parse("t.star", code.to_owned(), &Dialect::Standard).unwrap();
            let mut eval = Evaluator::new(&module);
            let v = eval.eval_module(ast, &Globals::standard()).unwrap();
            selector(v)
        })
    }

    #[test]
    fn strings_and_dicts_become_selector_text() {
        assert_eq!(
            text("'app=web,tier!=db'").as_deref(),
            Some("app=web,tier!=db")
        );
        assert_eq!(
            text("{'app': 'web', 'n': 1}").as_deref(),
            Some("app=web,n=1")
        );
        assert_eq!(text("3"), None);
        assert_eq!(text("['app=web']"), None);
    }
}
