//! `regexp.match`: one match of a pattern, its text, offsets and groups.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;

use allocative::Allocative;
use regex::Regex;
use starlark::any::ProvidesStaticType;
use starlark::environment::{Methods, MethodsBuilder};
use starlark::starlark_module;
use starlark::values::none::NoneOr;
use starlark::values::tuple::AllocTuple;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

/// One match: its text, offsets and groups.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Match {
    text: String,
    start: usize,
    end: usize,
    /// Groups 1.. (None where a group did not take part).
    groups: Vec<Option<String>>,
    /// Group names by index (index 0 is the whole match).
    names: Vec<Option<String>>,
}

starlark::starlark_simple_value!(Match);

/// `str(m)` is the matched text, as upstream's (so a match prints as what it found);
/// `repr(m)` says what it is.
impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Match {
    pub(super) fn of(re: &Regex, caps: &regex::Captures) -> Self {
        let whole = caps.get(0).expect("group 0 is the match");
        Match {
            text: whole.as_str().to_owned(),
            start: whole.start(),
            end: whole.end(),
            groups: (1..caps.len())
                .map(|i| caps.get(i).map(|m| m.as_str().to_owned()))
                .collect(),
            names: re.capture_names().map(|n| n.map(str::to_owned)).collect(),
        }
    }
}

fn match_of(v: Value<'_>) -> anyhow::Result<&Match> {
    v.downcast_ref::<Match>()
        .ok_or_else(|| anyhow::anyhow!("not a regexp match"))
}

#[starlark_module]
fn match_methods(builder: &mut MethodsBuilder) {
    /// The matched text.
    #[starlark(attribute)]
    fn text(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(match_of(this)?.text.clone())
    }

    /// The byte offset where the match starts.
    #[starlark(attribute)]
    fn start(#[starlark(this)] this: Value) -> anyhow::Result<i64> {
        Ok(i64::try_from(match_of(this)?.start)?)
    }

    /// The byte offset just after the match.
    #[starlark(attribute)]
    fn end(#[starlark(this)] this: Value) -> anyhow::Result<i64> {
        Ok(i64::try_from(match_of(this)?.end)?)
    }

    /// Every group, the whole match first (index 0), as upstream's; None for a group
    /// that did not take part.
    #[starlark(attribute)]
    fn groups<'v>(#[starlark(this)] this: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        let m = match_of(this)?;
        let whole = std::iter::once(heap.alloc(m.text.as_str()));
        Ok(
            heap.alloc(AllocTuple(whole.chain(m.groups.iter().map(|g| match g {
                Some(s) => heap.alloc(s.as_str()),
                None => Value::new_none(),
            })))),
        )
    }

    /// Group `n` (0 is the whole match), or the group called `name`; None for a group
    /// that did not take part.
    fn group(
        #[starlark(this)] this: Value,
        #[starlark(default = 0)] n: i32,
        #[starlark(require = named, default = "")] name: &str,
    ) -> anyhow::Result<NoneOr<String>> {
        let m = match_of(this)?;
        let index = if name.is_empty() {
            usize::try_from(n)
                .ok()
                .filter(|i| *i <= m.groups.len())
                .ok_or_else(|| {
                    anyhow::anyhow!("group({n}): the pattern has {} group(s)", m.groups.len())
                })?
        } else {
            m.names
                .iter()
                .position(|g| g.as_deref() == Some(name))
                .ok_or_else(|| anyhow::anyhow!("group(name = {name:?}): no group has that name"))?
        };
        Ok(NoneOr::from_option(if index == 0 {
            Some(m.text.clone())
        } else {
            m.groups.get(index - 1).cloned().flatten()
        }))
    }
}

starlark::methods_static!(MATCH_METHODS = match_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "regexp.match")]
impl<'v> StarlarkValue<'v> for Match {
    fn get_methods() -> Option<&'static Methods> {
        Some(MATCH_METHODS.methods())
    }

    fn collect_str(&self, collector: &mut String) {
        collector.push_str(&self.text);
    }

    fn collect_repr(&self, collector: &mut String) {
        use std::fmt::Write;
        let _ = write!(
            collector,
            "<regexp.match {:?} [{}:{}]>",
            self.text, self.start, self.end
        );
    }

    fn to_bool(&self) -> bool {
        true
    }
}
