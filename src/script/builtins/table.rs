//! `table`: upstream Starkite's text tables: `table.new(headers)`, `.add_row(...)`,
//! `.render()` and `table.print(t)`, drawn with ASCII borders by comfy-table.
//!
//! # Caveats
//! A row with fewer values than columns is padded with empty cells; more values than
//! columns is an error (upstream's code would crash). A rendering larger than
//! [`RENDER_CAP`] fails instead of being built.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use allocative::Allocative;
use comfy_table::{ContentLineStyle, LineStyle, Table as Comfy, TableStyle};
use starlark::any::ProvidesStaticType;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::list::ListRef;
use starlark::values::none::NoneType;
use starlark::values::tuple::{TupleRef, UnpackTuple};
use starlark::values::{NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

/// The largest text one table renders to.
pub const RENDER_CAP: usize = 16 << 20;

/// The boxed ASCII style upstream's documentation shows.
const STYLE: TableStyle = TableStyle::new()
    .top_border(LineStyle::new('+', '-', '+', '+'))
    .header_lines(ContentLineStyle::new('|', '|', '|'))
    .header_separator(LineStyle::new('+', '-', '+', '+'))
    .content_lines(ContentLineStyle::new('|', '|', '|'))
    .bottom_border(LineStyle::new('+', '-', '+', '+'));

#[derive(Debug, Default)]
struct Cells {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

/// `table.new(headers)`: a table that rows are added to (a mutable value).
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Table(#[allocative(skip)] Mutex<Cells>);

starlark::starlark_simple_value!(Table);

impl Table {
    fn cells(&self) -> MutexGuard<'_, Cells> {
        // A poisoned lock only means a panic elsewhere; the cells are still whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.cells();
        write!(f, "<table {} cols, {} rows>", c.headers.len(), c.rows.len())
    }
}

/// A cell's text: a string as it is, anything else as `str()`.
fn text(v: Value<'_>) -> String {
    v.unpack_str().map_or_else(|| v.to_str(), str::to_owned)
}

fn step(call: &str, bytes: usize) -> anyhow::Result<()> {
    match crate::script::budget::walk_step(bytes) {
        Some(why) => anyhow::bail!("{call}: stopped: {why}"),
        None => Ok(()),
    }
}

/// An upper bound of the rendering's size in bytes: every line as wide as the widest
/// cells (in bytes) make it.
fn size_bound(c: &Cells) -> usize {
    let lines = |cell: &String| cell.split('\n').count();
    let mut widths: Vec<usize> = c.headers.iter().map(String::len).collect();
    let mut height = 3 + c.headers.iter().map(lines).max().unwrap_or(1);
    for row in &c.rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.split('\n').map(str::len).max().unwrap_or(0));
        }
        height = height.saturating_add(row.iter().map(lines).max().unwrap_or(1));
    }
    let width = widths
        .iter()
        .fold(2usize, |acc, w| acc.saturating_add(w.saturating_add(3)));
    width.saturating_mul(height)
}

fn render(table: &Table) -> anyhow::Result<String> {
    let c = table.cells();
    if size_bound(&c) > RENDER_CAP {
        anyhow::bail!(
            "table.render: the table would render to more than kite's {} MiB limit",
            RENDER_CAP >> 20
        );
    }
    let mut t = Comfy::new();
    t.load_style(STYLE);
    t.set_header(c.headers.clone());
    for row in &c.rows {
        t.add_row(row.clone());
    }
    // Upstream's rendering ends with a newline.
    Ok(format!("{t}\n"))
}

fn table_of(v: Value<'_>) -> anyhow::Result<&Table> {
    v.downcast_ref::<Table>()
        .ok_or_else(|| anyhow::anyhow!("expected a table, got {}", v.get_type()))
}

#[starlark_module]
fn table_methods(builder: &mut MethodsBuilder) {
    /// Adds a row of values (strings as they are, anything else as `str()`).
    fn add_row<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(args)] values: UnpackTuple<Value<'v>>,
    ) -> anyhow::Result<NoneType> {
        let table = table_of(this)?;
        let mut row = Vec::with_capacity(values.items.len());
        for v in &values.items {
            let t = text(*v);
            step("table.add_row", t.len())?;
            row.push(t);
        }
        let mut c = table.cells();
        let columns = c.headers.len();
        if row.len() > columns {
            anyhow::bail!(
                "table.add_row: {} values for a table of {columns} columns",
                row.len()
            );
        }
        row.resize(columns, String::new());
        c.rows.push(row);
        Ok(NoneType)
    }

    /// The table as text, with ASCII borders.
    fn render(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        render(table_of(this)?)
    }

    /// How many rows were added.
    #[starlark(attribute)]
    fn row_count(#[starlark(this)] this: Value) -> anyhow::Result<i32> {
        let n = table_of(this)?.cells().rows.len();
        Ok(i32::try_from(n).unwrap_or(i32::MAX))
    }
}

starlark::methods_static!(TABLE_METHODS = table_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "table")]
impl<'v> StarlarkValue<'v> for Table {
    fn get_methods() -> Option<&'static Methods> {
        Some(TABLE_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        !self.cells().rows.is_empty()
    }
}

#[starlark_module]
pub fn table_namespace(builder: &mut GlobalsBuilder) {
    /// A table with these column headers (a list of strings).
    fn new<'v>(#[starlark(require = pos)] headers: Value<'v>) -> anyhow::Result<Table> {
        let items = ListRef::from_value(headers)
            .map(|l| l.content().to_vec())
            .or_else(|| TupleRef::from_value(headers).map(|t| t.content().to_vec()))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "table.new: headers must be a list, got {}",
                    headers.get_type()
                )
            })?;
        let headers = items
            .iter()
            .map(|h| {
                h.unpack_str().map(str::to_owned).ok_or_else(|| {
                    anyhow::anyhow!("table.new: headers must be strings, got {}", h.get_type())
                })
            })
            .collect::<anyhow::Result<Vec<String>>>()?;
        Ok(Table(Mutex::new(Cells {
            headers,
            rows: Vec::new(),
        })))
    }

    /// Prints the table (as `print` does).
    fn print<'v>(
        #[starlark(require = pos)] table: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let text = render(table_of(table)?)?;
        super::fmt::emit(eval, &text)
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::snippets::eval;

    #[test]
    fn renders_rows_under_headers_with_borders() {
        let out = eval(
            "t = table.new(['NAME', 'VALUE'])\nt.add_row('foo', 1)\nt.add_row('bar')\n(t.row_count, bool(t), t.render(), str(t))",
        )
        .unwrap();
        let expected = "+------+-------+\\n| NAME | VALUE |\\n+------+-------+\\n| foo  | 1     |\\n| bar  |       |\\n+------+-------+\\n";
        assert_eq!(
            out,
            format!("(2, True, \"{expected}\", \"<table 2 cols, 2 rows>\")")
        );
        assert_eq!(eval("bool(table.new(['A']))").unwrap(), "False");
    }

    #[test]
    fn bad_input_is_an_error_naming_the_call() {
        let e = eval("table.new(['A']).add_row(1, 2)").unwrap_err();
        assert!(
            e.contains("table.add_row: 2 values for a table of 1 columns"),
            "{e}"
        );
        let e = eval("table.new([1])").unwrap_err();
        assert!(
            e.contains("table.new: headers must be strings, got int"),
            "{e}"
        );
        let e = eval("table.new('A')").unwrap_err();
        assert!(e.contains("table.new: headers must be a list"), "{e}");
        let e = eval("table.print(1)").unwrap_err();
        assert!(e.contains("expected a table, got int"), "{e}");
    }

    #[test]
    fn a_rendering_past_the_cap_fails_before_it_is_built() {
        // 20,000 rows padded to one 1 KiB-wide cell: about 20 MiB of text.
        let code = "t = table.new(['A'])\nt.add_row('x' * 1024)\nfor i in range(20000):\n    t.add_row('y')\nt.render()";
        let e = eval(code).unwrap_err();
        assert!(e.contains("more than kite's 16 MiB limit"), "{e}");
    }
}
