//! The `Path` value: upstream's path object, with its pure path arithmetic here and its
//! filesystem methods in `files`. `p.try_X(...)` runs any method as a result.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;
use std::path::{Component, Path as StdPath};

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::collections::StarlarkHasher;
use starlark::environment::{Methods, MethodsBuilder};
use starlark::eval::{Arguments, Evaluator};
use starlark::starlark_module;
use starlark::values::tuple::AllocTuple;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

use super::glob::match_name;
use crate::script::outcome::result;

/// A filesystem path as the script wrote it (relative ones resolve against the
/// script's working directory when used).
#[derive(Debug, Clone, PartialEq, Eq, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Path(pub String);

starlark::starlark_simple_value!(Path);

/// `path("/etc/hosts")`, as upstream shows a Path (`str(p)`); `p.string` is the text.
impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "path({:?})", self.0)
    }
}

impl Path {
    pub fn std(&self) -> &StdPath {
        StdPath::new(&self.0)
    }

    /// A path from what a script passed: a string or another Path.
    ///
    /// # Errors
    /// Anything else, naming `call`.
    pub fn arg(call: &str, v: Value<'_>) -> anyhow::Result<Path> {
        if let Some(s) = v.unpack_str() {
            return Ok(Path(s.to_owned()));
        }
        if let Some(p) = v.downcast_ref::<Path>() {
            return Ok(p.clone());
        }
        anyhow::bail!(
            "{call}: expected a path (string or Path), not {}",
            v.get_type()
        )
    }

    fn of(pb: &StdPath) -> Path {
        Path(pb.to_string_lossy().into_owned())
    }

    fn join(&self, other: &str) -> Path {
        Path::of(&self.std().join(other))
    }

    fn name(&self) -> String {
        self.std()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    fn suffix(&self) -> String {
        self.std()
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .unwrap_or_default()
    }

    fn parent(&self) -> Path {
        match self.std().parent() {
            Some(p) if p.as_os_str().is_empty() => Path(".".to_owned()),
            Some(p) => Path::of(p),
            None if self.std().has_root() => Path("/".to_owned()),
            None => Path(".".to_owned()),
        }
    }
}

/// The path with `.`, `..` and repeated slashes resolved by text alone, as Go's
/// `filepath.Clean`.
pub fn clean(path: &str) -> String {
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for c in StdPath::new(path).components() {
        match c {
            Component::Normal(s) => parts.push(s.to_str().unwrap_or("")),
            Component::ParentDir => match parts.last() {
                Some(&"..") | None if !rooted => parts.push(".."),
                Some(_) => {
                    parts.pop();
                }
                None => {}
            },
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    let body = parts.join("/");
    match (rooted, body.is_empty()) {
        (true, _) => format!("/{body}"),
        (false, true) => ".".to_owned(),
        (false, false) => body,
    }
}

/// True when `path` matches `pattern`: a relative pattern matches the end of the path
/// (as pathlib's `match`), an absolute one the whole path.
fn matches(path: &str, pattern: &str) -> bool {
    let path = clean(path);
    let names: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let pats: Vec<&str> = pattern.split('/').filter(|s| !s.is_empty()).collect();
    if pats.is_empty() || pats.len() > names.len() {
        return false;
    }
    if pattern.starts_with('/') && (pats.len() != names.len() || !path.starts_with('/')) {
        return false;
    }
    names[names.len() - pats.len()..]
        .iter()
        .zip(&pats)
        .all(|(n, p)| match_name(p, n))
}

pub(super) fn path_of(v: Value<'_>) -> anyhow::Result<&Path> {
    v.downcast_ref::<Path>()
        .ok_or_else(|| anyhow::anyhow!("not a Path"))
}

#[starlark_module]
fn pure_methods(builder: &mut MethodsBuilder) {
    /// The last name, with its extension (`"report.md"`).
    #[starlark(attribute)]
    fn name(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(path_of(this)?.name())
    }

    /// The directory holding this path.
    #[starlark(attribute)]
    fn parent(#[starlark(this)] this: Value) -> anyhow::Result<Path> {
        Ok(path_of(this)?.parent())
    }

    /// The last name without its extension (`"report"`).
    #[starlark(attribute)]
    fn stem(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(path_of(this)?
            .std()
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default())
    }

    /// The extension with its dot (`".md"`), or `""`.
    #[starlark(attribute)]
    fn suffix(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(path_of(this)?.suffix())
    }

    /// The path as a string.
    #[starlark(attribute)]
    fn string(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(path_of(this)?.0.clone())
    }

    /// The components, the root first for an absolute path (`("/", "var", "log")`).
    #[starlark(attribute)]
    fn parts<'v>(#[starlark(this)] this: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        let p = path_of(this)?;
        let parts: Vec<String> = p
            .std()
            .components()
            .filter_map(|c| match c {
                Component::RootDir => Some("/".to_owned()),
                Component::CurDir => None,
                other => Some(other.as_os_str().to_string_lossy().into_owned()),
            })
            .collect();
        Ok(heap.alloc(AllocTuple(parts)))
    }

    /// This path joined with each of `others`.
    fn join<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(args)] others: starlark::values::tuple::UnpackTuple<Value<'v>>,
    ) -> anyhow::Result<Path> {
        let mut p = path_of(this)?.clone();
        for o in others.items {
            p = p.join(&Path::arg("Path.join", o)?.0);
        }
        Ok(p)
    }

    /// This path with its last name replaced.
    fn with_name(#[starlark(this)] this: Value, name: &str) -> anyhow::Result<Path> {
        let p = path_of(this)?;
        if p.name().is_empty() {
            anyhow::bail!("Path.with_name: {} has no name to replace", p.0);
        }
        let mut pb = p.std().to_path_buf();
        pb.set_file_name(name);
        Ok(Path::of(&pb))
    }

    /// This path with its extension replaced (`""` removes it).
    fn with_suffix(#[starlark(this)] this: Value, suffix: &str) -> anyhow::Result<Path> {
        let p = path_of(this)?;
        if p.name().is_empty() {
            anyhow::bail!("Path.with_suffix: {} has no name to change", p.0);
        }
        let mut pb = p.std().to_path_buf();
        pb.set_extension(suffix.strip_prefix('.').unwrap_or(suffix));
        Ok(Path::of(&pb))
    }

    /// This path with `.`, `..` and repeated slashes resolved by text alone.
    fn clean(#[starlark(this)] this: Value) -> anyhow::Result<Path> {
        Ok(Path(clean(&path_of(this)?.0)))
    }

    /// True for a path from the root.
    fn is_absolute(#[starlark(this)] this: Value) -> anyhow::Result<bool> {
        Ok(path_of(this)?.std().is_absolute())
    }

    /// True when this path lies under `base` (by text).
    fn is_relative_to<'v>(
        #[starlark(this)] this: Value<'v>,
        base: Value<'v>,
    ) -> anyhow::Result<bool> {
        let base = clean(&Path::arg("Path.is_relative_to", base)?.0);
        Ok(StdPath::new(&clean(&path_of(this)?.0)).starts_with(base))
    }

    /// This path relative to `base` (by text).
    fn relative_to<'v>(#[starlark(this)] this: Value<'v>, base: Value<'v>) -> anyhow::Result<Path> {
        let p = path_of(this)?;
        let base = clean(&Path::arg("Path.relative_to", base)?.0);
        let cleaned = clean(&p.0);
        let rel = StdPath::new(&cleaned)
            .strip_prefix(&base)
            .map_err(|_| anyhow::anyhow!("Path.relative_to: {} is not under {base}", p.0))?;
        Ok(if rel.as_os_str().is_empty() {
            Path(".".to_owned())
        } else {
            Path::of(rel)
        })
    }

    /// True when this path matches the glob `pattern` (from the end, unless the pattern
    /// is absolute).
    fn r#match(#[starlark(this)] this: Value, pattern: &str) -> anyhow::Result<bool> {
        Ok(matches(&path_of(this)?.0, pattern))
    }
}

fn all_methods(builder: &mut MethodsBuilder) {
    pure_methods(builder);
    super::files::file_methods(builder);
    super::files::dir_methods(builder);
}

starlark::methods_static!(PATH_METHODS = all_methods);

#[starlark_value(type = "fs.path")]
impl<'v> StarlarkValue<'v> for Path {
    fn get_methods() -> Option<&'static Methods> {
        Some(PATH_METHODS.methods())
    }

    fn equals(&self, other: Value<'v>) -> starlark::Result<bool> {
        Ok(other.downcast_ref::<Path>().is_some_and(|o| o.0 == self.0))
    }

    fn write_hash(&self, hasher: &mut StarlarkHasher) -> starlark::Result<()> {
        std::hash::Hash::hash(&self.0, hasher);
        Ok(())
    }

    fn div(&self, other: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        let other = Path::arg("Path /", other).map_err(starlark::Error::new_other)?;
        Ok(heap.alloc(self.join(&other.0)))
    }

    // Methods come first; only other names reach here.
    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        let method = attribute.strip_prefix("try_")?;
        TRY_METHODS.contains(&method).then_some(())?;
        Some(heap.alloc(TryMethod {
            path: self.clone(),
            method: method.to_owned(),
        }))
    }
}

/// The methods that have a `try_` form: everything that touches the disk.
const TRY_METHODS: &[&str] = &[
    "exists",
    "is_file",
    "is_dir",
    "is_symlink",
    "stat",
    "owner",
    "group",
    "read_text",
    "read_bytes",
    "write_text",
    "write_bytes",
    "append_text",
    "append_bytes",
    "touch",
    "mkdir",
    "remove",
    "rename",
    "copy_to",
    "move_to",
    "truncate",
    "chmod",
    "chown",
    "symlink_to",
    "readlink",
    "hardlink_to",
    "listdir",
    "glob",
    "walk",
    "disk_usage",
    "resolve",
    "expanduser",
    "relative_to",
    "with_name",
    "with_suffix",
];

/// `p.try_X`: calls `p.X(...)` and returns its result (`.ok`, `.value`, `.error`)
/// instead of failing.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct TryMethod {
    path: Path,
    method: String,
}

starlark::starlark_simple_value!(TryMethod);

impl fmt::Display for TryMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<function Path.try_{}>", self.method)
    }
}

#[starlark_value(type = "function")]
impl<'v> StarlarkValue<'v> for TryMethod {
    fn invoke(
        &self,
        _me: Value<'v>,
        args: &Arguments<'v, '_>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let heap = eval.heap();
        let target = heap.alloc(self.path.clone());
        let method = target.get_attr_error(&self.method, heap)?;
        let positional: Vec<Value<'v>> = args.positions(heap)?.collect();
        let named_map = args.names_map()?;
        let named: Vec<(&str, Value<'v>)> =
            named_map.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let outcome = eval
            .eval_function(method, &positional, &named)
            .map_err(|e| e.without_diagnostic().to_string());
        Ok(result(eval.heap(), outcome))
    }
}
