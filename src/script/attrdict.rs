//! `AttrDict`: a dict whose keys also read as attributes, as upstream Starkite objects do.
//!
//! Every object that comes back from the cluster or a builder is an AttrDict:
//! `obj.metadata.name`, `obj.spec.get("replicas", 1)`, `obj["kind"]`. A missing key read
//! as an attribute is `None`, so scripts can write `cm.data if cm.data != None else {}`.
//!
//! # Caveats
//! A key shadows a dict method of the same name: a List object's `.items` is its items,
//! not the `items()` method. Use `[(k, obj[k]) for k in obj]` to get the pairs then.
//! `dict(obj)` does not accept an AttrDict; `obj.to_dict()` (upstream's) copies one.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt::{self, Display};

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::coerce::Coerce;
use starlark::collections::StarlarkHasher;
use starlark::eval::{Arguments, Evaluator};
use starlark::starlark_complex_value;
use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::list::{AllocList, ListRef};
use starlark::values::{
    Freeze, Heap, NoSerialize, StarlarkValue, Trace, Value, ValueLifetimeless, ValueLike,
    starlark_value,
};

/// The dict methods that an AttrDict exposes when no key of the same name exists.
const DICT_METHODS: &[&str] = &[
    "clear",
    "get",
    "items",
    "keys",
    "pop",
    "popitem",
    "setdefault",
    "update",
    "values",
];

/// Upstream's AttrDict method with no dict counterpart: `obj.to_dict()`.
const TO_DICT: &str = "to_dict";

/// A Starlark dict with attribute access. `dict` always points to a Starlark `dict`.
#[derive(Clone, Debug, Trace, Coerce, Freeze, ProvidesStaticType, Allocative)]
#[repr(C)]
pub struct AttrDictGen<V: ValueLifetimeless> {
    dict: V,
}

starlark_complex_value!(pub AttrDict);

impl<'v> AttrDict<'v> {
    /// Wraps a Starlark dict value (which it shares, so writes go through to it).
    pub fn alloc(heap: Heap<'v>, dict: Value<'v>) -> Value<'v> {
        heap.alloc_complex(AttrDict { dict })
    }

    /// The dict inside `value` if it is an AttrDict.
    pub fn dict_of(value: Value<'v>) -> Option<Value<'v>> {
        AttrDict::from_value(value).map(|a| a.dict.to_value())
    }
}

impl<'v, V: ValueLike<'v>> Display for AttrDictGen<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Display::fmt(&self.dict.to_value(), f)
    }
}

impl<'v, V: ValueLike<'v>> serde::Serialize for AttrDictGen<V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.dict.to_value().serialize(s)
    }
}

#[starlark_value(type = "AttrDict")]
impl<'v, V: ValueLike<'v>> StarlarkValue<'v> for AttrDictGen<V>
where
    Self: ProvidesStaticType<'v>,
{
    fn collect_repr(&self, collector: &mut String) {
        self.dict.to_value().collect_repr(collector);
    }

    fn collect_repr_cycle(&self, collector: &mut String) {
        collector.push_str("{...}");
    }

    fn to_bool(&self) -> bool {
        self.dict.to_value().to_bool()
    }

    fn equals(&self, other: Value<'v>) -> starlark::Result<bool> {
        let other = AttrDict::dict_of(other).unwrap_or(other);
        self.dict.to_value().equals(other)
    }

    fn write_hash(&self, hasher: &mut StarlarkHasher) -> starlark::Result<()> {
        self.dict.to_value().write_hash(hasher)
    }

    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        let dict = self.dict.to_value();
        if let Some(v) = DictRef::from_value(dict).and_then(|d| d.get_str(attribute)) {
            return Some(v);
        }
        if DICT_METHODS.contains(&attribute) {
            return dict.get_attr(attribute, heap).ok().flatten();
        }
        if attribute == TO_DICT {
            return Some(heap.alloc_complex(ToDict { dict }));
        }
        Some(Value::new_none())
    }

    fn has_attr(&self, attribute: &str, _heap: Heap<'v>) -> bool {
        DictRef::from_value(self.dict.to_value()).is_some_and(|d| d.get_str(attribute).is_some())
            || DICT_METHODS.contains(&attribute)
            || attribute == TO_DICT
    }

    fn dir_attr(&self) -> Vec<String> {
        let mut names: Vec<String> = DictRef::from_value(self.dict.to_value())
            .map(|d| {
                d.keys()
                    .filter_map(|k| k.unpack_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        names.extend(DICT_METHODS.iter().map(|m| (*m).to_owned()));
        names.push(TO_DICT.to_owned());
        names
    }

    fn set_attr(&self, attribute: &str, new_value: Value<'v>) -> starlark::Result<()> {
        // No heap is at hand to allocate a new key string, so attribute writes only
        // replace existing keys; brackets add new ones.
        let dict = self.dict.to_value();
        let key = DictRef::from_value(dict)
            .and_then(|d| d.keys().find(|k| k.unpack_str() == Some(attribute)));
        match key {
            Some(key) => dict.set_at(key, new_value),
            None => Err(starlark::Error::new_other(anyhow::anyhow!(
                "AttrDict has no key {attribute:?}; add a new key with obj[{attribute:?}] = value"
            ))),
        }
    }

    fn at(&self, index: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        self.dict.to_value().at(index, heap)
    }

    fn set_at(&self, index: Value<'v>, new_value: Value<'v>) -> starlark::Result<()> {
        self.dict.to_value().set_at(index, new_value)
    }

    fn length(&self) -> starlark::Result<i32> {
        self.dict.to_value().length()
    }

    fn is_in(&self, other: Value<'v>) -> starlark::Result<bool> {
        self.dict.to_value().is_in(other)
    }

    fn iterate_collect(&self, heap: Heap<'v>) -> starlark::Result<Vec<Value<'v>>> {
        Ok(self.dict.to_value().iterate(heap)?.collect())
    }
}

/// `obj.to_dict` bound to its object: calling it gives a deep copy made of plain dicts
/// and lists, for code that wants `type(x) == "dict"` (upstream's `to_dict()`).
#[derive(Clone, Debug, Trace, Coerce, Freeze, ProvidesStaticType, Allocative, NoSerialize)]
#[repr(C)]
pub struct ToDictGen<V: ValueLifetimeless> {
    dict: V,
}

starlark_complex_value!(pub ToDict);

impl<'v, V: ValueLike<'v>> Display for ToDictGen<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<bound method to_dict of AttrDict>")
    }
}

#[starlark_value(type = "function")]
impl<'v, V: ValueLike<'v>> StarlarkValue<'v> for ToDictGen<V>
where
    Self: ProvidesStaticType<'v>,
{
    fn invoke(
        &self,
        _me: Value<'v>,
        args: &Arguments<'v, '_>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        args.no_named_args()?;
        args.no_positional_args(eval.heap())?;
        Ok(plain(self.dict.to_value(), eval.heap()))
    }
}

/// `v` with every AttrDict and dict copied to a plain dict and every list copied.
fn plain<'v>(v: Value<'v>, heap: Heap<'v>) -> Value<'v> {
    let v = AttrDict::dict_of(v).unwrap_or(v);
    if let Some(d) = DictRef::from_value(v) {
        let pairs: Vec<(Value<'v>, Value<'v>)> =
            d.iter().map(|(k, x)| (k, plain(x, heap))).collect();
        return heap.alloc(AllocDict(pairs));
    }
    if let Some(l) = ListRef::from_value(v) {
        let items: Vec<Value<'v>> = l.iter().map(|x| plain(x, heap)).collect();
        return heap.alloc(AllocList(items));
    }
    v
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::snippets::eval;

    fn obj(code: &str) -> String {
        let setup = r#"o = json.decode('{"metadata": {"name": "web", "labels": {"app": "x"}}, "spec": {"replicas": 3, "containers": [{"name": "c"}]}, "items": [1]}')
"#;
        eval(&format!("{setup}{code}")).unwrap_or_else(|e| format!("error: {e}"))
    }

    #[test]
    fn dot_access_at_any_depth_and_missing_keys_read_as_none() {
        assert_eq!(obj("o.metadata.name"), "\"web\"");
        assert_eq!(obj("o.spec.containers[0].name"), "\"c\"");
        assert_eq!(obj("o.status"), "None");
        assert_eq!(obj("o.metadata.labels.missing"), "None");
    }

    #[test]
    fn dict_operations_work() {
        assert_eq!(obj("o.spec.get('replicas', 1)"), "3");
        assert_eq!(obj("o.spec.get('paused', False)"), "False");
        assert_eq!(obj("o['metadata']['name']"), "\"web\"");
        assert_eq!(
            obj("['spec' in o, 'status' in o, len(o)]"),
            "[True, False, 3]"
        );
        assert_eq!(obj("[k for k in o.metadata]"), "[\"name\", \"labels\"]");
        assert_eq!(obj("o.metadata.keys()"), "[\"name\", \"labels\"]");
        assert_eq!(obj("o.metadata.labels.values()"), "[\"x\"]");
        assert_eq!(obj("o.metadata.labels.items()"), "[(\"app\", \"x\")]");
        assert!(
            obj("o['nope']").starts_with("error:"),
            "brackets keep dict semantics"
        );
    }

    #[test]
    fn to_dict_gives_plain_dicts_all_the_way_down() {
        assert_eq!(
            obj("d = o.to_dict()\n[type(d), type(d['spec']), type(d['spec']['containers'][0])]"),
            "[\"dict\", \"dict\", \"dict\"]"
        );
        assert_eq!(
            obj("d = o.to_dict()\nd['metadata']['name'] = 'x'\no.metadata.name"),
            "\"web\""
        );
        assert_eq!(obj("o == o.to_dict()"), "True");
        assert!(obj("o.to_dict(1)").starts_with("error:"));
    }

    #[test]
    fn a_key_shadows_the_method_of_the_same_name() {
        assert_eq!(obj("o.items"), "[1]");
        assert_eq!(obj("[(k, o[k]) for k in o][2]"), "(\"items\", [1])");
    }

    #[test]
    fn writes_go_to_the_scripts_copy() {
        assert_eq!(obj("o.spec['replicas'] = 5\no.spec.replicas"), "5");
        assert_eq!(obj("o.spec.replicas = 7\no['spec']['replicas']"), "7");
        assert_eq!(
            obj("o['status'] = {'ready': True}\no.status"),
            "{\"ready\": True}"
        );
        assert!(
            obj("o.newkey = 1").contains("add a new key with"),
            "attribute writes only replace"
        );
    }

    #[test]
    fn equality_and_printing_are_those_of_a_dict() {
        assert_eq!(obj("o.metadata.labels == {'app': 'x'}"), "True");
        assert_eq!(obj("o.metadata.labels != {'app': 'y'}"), "True");
        assert_eq!(
            obj("str(o.metadata.labels)"),
            "\"{\\\"app\\\": \\\"x\\\"}\""
        );
        assert_eq!(obj("type(o)"), "\"AttrDict\"");
        assert_eq!(obj("bool(o) and not json.decode('{}')"), "True");
    }
}
