//! The executor: walks a parsed template over data, as Go's `Execute` does, within
//! bounds on depth, output size and the script's time budget.

use std::time::Instant;

use super::data::Data;
use super::funcs;
use super::parse::Trees;
use super::tree::{Arg, Branch, Command, List, Node, Pipe, template_call};
use crate::script::budget::{self, Cancel};

/// The deepest nesting of blocks and template calls; Go allows far more, but a
/// template that recurses forever must fail before the thread's stack runs out.
pub const MAX_DEPTH: usize = 300;

/// The most output one render may produce.
pub const MAX_OUTPUT: usize = 16 << 20;

/// How often (in steps) the time budget is looked at.
const BUDGET_EVERY: u32 = 1024;

/// What a missing map key gives (`missing_key=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingKey {
    /// Go's invalid value, printed `<no value>`.
    Default,
    /// The zero value of the map's element type (nil).
    Zero,
    /// An error.
    Error,
}

/// What the executor is at, for error messages.
#[derive(Clone, Copy)]
enum At<'a> {
    Nothing,
    Arg(&'a Arg),
    Pipe(&'a Pipe),
    Command(&'a Command),
    Template(usize, &'a str, Option<&'a Pipe>),
}

/// How a body ended: normally, or at `{{break}}` / `{{continue}}`.
enum Flow {
    Normal,
    Break,
    Continue,
}

type Result<T> = std::result::Result<T, String>;

struct State<'a> {
    trees: &'a Trees,
    /// The name the source was parsed under (the place in messages).
    parse_name: &'a str,
    src: &'a str,
    /// The template being executed (`executing "NAME"` in messages).
    name: &'a str,
    vars: Vec<(&'a str, Data)>,
    out: String,
    depth: usize,
    missing: MissingKey,
    steps: u32,
    deadline: Option<Instant>,
    stop: Option<Cancel>,
    at: At<'a>,
}

/// Renders the template `name` of `trees` with `data`.
///
/// # Errors
/// Go's message, e.g. `template: tmpl:1:2: executing "tmpl" at <.a.b>: ...`.
pub fn execute(
    trees: &Trees,
    name: &str,
    src: &str,
    data: Data,
    missing: MissingKey,
) -> Result<String> {
    let Some(root) = trees.get(name) else {
        return Err(format!(
            "template: {name}: \"{name}\" is an incomplete or empty template"
        ));
    };
    let budget = budget::current();
    let mut s = State {
        trees,
        parse_name: name,
        src,
        name,
        vars: vec![("$", data.clone())],
        out: String::new(),
        depth: 0,
        missing,
        steps: 0,
        deadline: budget.as_ref().map(|b| b.deadline),
        stop: budget.and_then(|b| b.stop),
        at: At::Nothing,
    };
    s.walk(&data, root)?;
    Ok(s.out)
}

impl<'a> State<'a> {
    /// Go's error: the place and the node when there is one.
    fn fail(&self, message: &str) -> String {
        let (pos, context) = match self.at {
            At::Nothing => return format!("template: {}: {message}", self.name),
            At::Arg(a) => (a.pos(), a.to_string()),
            At::Pipe(p) => (p.pos, p.to_string()),
            At::Command(c) => (c.pos, c.to_string()),
            At::Template(pos, name, pipe) => (pos, template_call(name, pipe)),
        };
        let before = &self.src[..pos.min(self.src.len())];
        let line = 1 + before.matches('\n').count();
        let col = before.rfind('\n').map_or(pos, |nl| pos - nl - 1);
        let context = if context.chars().count() > 20 {
            format!("{}...", context.chars().take(20).collect::<String>())
        } else {
            context
        };
        format!(
            "template: {}:{line}:{col}: executing {:?} at <{context}>: {message}",
            self.parse_name, self.name
        )
    }

    fn step(&mut self) -> Result<()> {
        // Values a template keeps (variables, a pipeline's operands) can each be a copy
        // of large data: every step looks at the memory budget (a cheap check).
        if crate::script::memory::exhausted() {
            return Err(self.fail("the script's memory limit was passed"));
        }
        self.steps = self.steps.wrapping_add(1);
        if self.steps.is_multiple_of(BUDGET_EVERY) {
            if self.deadline.is_some_and(|d| Instant::now() > d) {
                return Err(self.fail(&budget::Interrupted::OverBudget.to_string()));
            }
            if self.stop.as_ref().is_some_and(Cancel::is_set) {
                return Err(self.fail(&budget::Interrupted::Stopped.to_string()));
            }
        }
        Ok(())
    }

    fn write(&mut self, text: &str) -> Result<()> {
        if self.out.len() + text.len() > MAX_OUTPUT {
            return Err(self.fail(&format!("output exceeds {MAX_OUTPUT} bytes")));
        }
        self.out.push_str(text);
        Ok(())
    }

    fn descend(&mut self) -> Result<()> {
        if self.depth >= MAX_DEPTH {
            return Err(self.fail(&format!("exceeded maximum template depth ({MAX_DEPTH})")));
        }
        self.depth += 1;
        Ok(())
    }

    fn walk(&mut self, dot: &Data, list: &'a List) -> Result<Flow> {
        self.descend()?;
        let flow = self.walk_nodes(dot, list);
        self.depth -= 1;
        flow
    }

    fn walk_nodes(&mut self, dot: &Data, list: &'a List) -> Result<Flow> {
        for node in list {
            self.step()?;
            let flow = match node {
                Node::Text(t) => {
                    self.write(t)?;
                    Flow::Normal
                }
                Node::Action(pipe) => {
                    let v = self.pipeline(dot, pipe, true)?;
                    if pipe.decl.is_empty() {
                        self.write(&v.to_go_string())?;
                    }
                    Flow::Normal
                }
                Node::If(b) => self.if_or_with(dot, b, false)?,
                Node::With(b) => self.if_or_with(dot, b, true)?,
                Node::Range(b) => self.range(dot, b)?,
                Node::Template { pos, name, pipe } => {
                    self.template(dot, *pos, name, pipe.as_ref())?;
                    Flow::Normal
                }
                Node::Break => Flow::Break,
                Node::Continue => Flow::Continue,
            };
            if !matches!(flow, Flow::Normal) {
                return Ok(flow);
            }
        }
        Ok(Flow::Normal)
    }

    fn if_or_with(&mut self, dot: &Data, b: &'a Branch, with: bool) -> Result<Flow> {
        let mark = self.vars.len();
        let v = self.pipeline(dot, &b.pipe, true)?;
        let flow = if v.truth() {
            self.walk(if with { &v } else { dot }, &b.list)?
        } else if let Some(e) = &b.else_list {
            self.walk(dot, e)?
        } else {
            Flow::Normal
        };
        self.vars.truncate(mark);
        Ok(flow)
    }

    fn range(&mut self, dot: &Data, b: &'a Branch) -> Result<Flow> {
        let mark = self.vars.len();
        let v = self.pipeline(dot, &b.pipe, false)?;
        let items: Vec<(Data, Data)> = match &v {
            Data::List(l) => (0_i64..)
                .zip(l.iter())
                .map(|(i, e)| (Data::Int(i), e.clone()))
                .collect(),
            Data::Map(m) => m.iter().map(|(k, e)| (Data::str(k), e.clone())).collect(),
            Data::Int(n) => {
                if b.pipe.decl.len() > 1 {
                    self.at = At::Pipe(&b.pipe);
                    return Err(self.fail(&format!(
                        "can't use {n} to iterate over more than one variable"
                    )));
                }
                (0..*n).map(|i| (Data::Int(i), Data::Int(i))).collect()
            }
            Data::Missing | Data::Nil => Vec::new(),
            other => {
                self.at = At::Pipe(&b.pipe);
                return Err(self.fail(&format!(
                    "range can't iterate over {}",
                    other.to_go_string()
                )));
            }
        };
        if items.is_empty() {
            return match &b.else_list {
                Some(e) => self.walk(dot, e),
                None => Ok(Flow::Normal),
            };
        }
        for (key, elem) in items {
            self.step()?;
            self.vars.truncate(mark);
            match (b.pipe.decl.as_slice(), b.pipe.is_assign) {
                ([v], false) => self.vars.push((v, elem.clone())),
                ([k, v], false) => {
                    self.vars.push((k, key));
                    self.vars.push((v, elem.clone()));
                }
                ([v], true) => self.set_var(v, elem.clone())?,
                ([k, v], true) => {
                    self.set_var(k, key)?;
                    self.set_var(v, elem.clone())?;
                }
                _ => {}
            }
            if let Flow::Break = self.walk(&elem, &b.list)? {
                break;
            }
        }
        self.vars.truncate(mark);
        Ok(Flow::Normal)
    }

    fn template(
        &mut self,
        dot: &Data,
        pos: usize,
        name: &'a str,
        pipe: Option<&'a Pipe>,
    ) -> Result<()> {
        self.at = At::Template(pos, name, pipe);
        let Some(tree) = self.trees.get(name) else {
            return Err(self.fail(&format!("template {name:?} not defined")));
        };
        let new_dot = match pipe {
            Some(p) => self.pipeline(dot, p, true)?,
            None => Data::Missing,
        };
        self.at = At::Template(pos, name, pipe);
        let vars = std::mem::replace(&mut self.vars, vec![("$", new_dot.clone())]);
        let outer = std::mem::replace(&mut self.name, name);
        let r = self.walk(&new_dot, tree);
        self.vars = vars;
        self.name = outer;
        r.map(|_| ())
    }

    fn set_var(&mut self, name: &str, value: Data) -> Result<()> {
        match self.vars.iter_mut().rev().find(|(n, _)| *n == name) {
            Some(slot) => {
                slot.1 = value;
                Ok(())
            }
            None => Err(self.fail(&format!("undefined variable: {name}"))),
        }
    }

    fn var(&self, name: &str) -> Result<Data> {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| self.fail(&format!("undefined variable: {name}")))
    }

    /// A pipeline's value; `declare` binds its variables (a range binds its own).
    fn pipeline(&mut self, dot: &Data, pipe: &'a Pipe, declare: bool) -> Result<Data> {
        self.at = At::Pipe(pipe);
        let mut value = None;
        for cmd in &pipe.cmds {
            let v = self.command(dot, cmd, value.take())?;
            // As Go's: a nil from the data is no value once a command returns it.
            value = Some(if v == Data::Nil { Data::Missing } else { v });
        }
        let value = value.unwrap_or(Data::Missing);
        if declare {
            for name in &pipe.decl {
                if pipe.is_assign {
                    self.set_var(name, value.clone())?;
                } else {
                    self.vars.push((name, value.clone()));
                }
            }
        }
        Ok(value)
    }

    fn not_a_function(&self, args: &'a [Arg], last: Option<&Data>) -> Result<()> {
        if args.len() > 1 || last.is_some() {
            return Err(self.fail(&format!("can't give argument to non-function {}", args[0])));
        }
        Ok(())
    }

    fn command(&mut self, dot: &Data, cmd: &'a Command, last: Option<Data>) -> Result<Data> {
        self.at = At::Command(cmd);
        let Some(first) = cmd.args.first() else {
            return Err(self.fail("empty command"));
        };
        let has_args = cmd.args.len() > 1 || last.is_some();
        match first {
            Arg::Field { names, .. } => {
                self.at = At::Arg(first);
                self.fields(dot.clone(), names, has_args)
            }
            Arg::Variable { name, names, .. } => {
                self.at = At::Arg(first);
                let v = self.var(name)?;
                if names.is_empty() {
                    self.not_a_function(&cmd.args, last.as_ref())?;
                    return Ok(v);
                }
                self.fields(v, names, has_args)
            }
            Arg::Chain { pipe, names, .. } => {
                let v = self.pipeline(dot, pipe, true)?;
                self.at = At::Arg(first);
                self.fields(v, names, has_args)
            }
            Arg::Ident { name, .. } => self.call(dot, first, name, &cmd.args[1..], last),
            Arg::Pipe(p) => {
                self.at = At::Arg(first);
                self.not_a_function(&cmd.args, last.as_ref())?;
                self.pipeline(dot, p, true)
            }
            Arg::Nil(_) => {
                self.at = At::Arg(first);
                Err(self.fail("nil is not a command"))
            }
            Arg::Dot(_) | Arg::Literal { .. } => {
                self.at = At::Arg(first);
                self.not_a_function(&cmd.args, last.as_ref())?;
                Ok(match first {
                    Arg::Literal { value, .. } => value.clone(),
                    _ => dot.clone(),
                })
            }
        }
    }

    /// `.a.b.c` on `receiver`; `has_args` when the last one was given arguments.
    fn fields(&self, mut receiver: Data, names: &[String], has_args: bool) -> Result<Data> {
        for (i, name) in names.iter().enumerate() {
            let last = i + 1 == names.len();
            receiver = match &receiver {
                Data::Missing => {
                    if self.missing == MissingKey::Error {
                        return Err(self.fail(&format!("nil data; no entry for key {name:?}")));
                    }
                    Data::Missing
                }
                Data::Nil => {
                    return Err(self.fail(&format!("nil pointer evaluating interface {{}}.{name}")));
                }
                Data::Map(m) => {
                    if last && has_args {
                        return Err(self.fail(&format!("{name} is not a method but has arguments")));
                    }
                    match (m.get(name), self.missing) {
                        (Some(v), _) => v.clone(),
                        (None, MissingKey::Default) => Data::Missing,
                        (None, MissingKey::Zero) => Data::Nil,
                        (None, MissingKey::Error) => {
                            return Err(self.fail(&format!("map has no entry for key {name:?}")));
                        }
                    }
                }
                other => {
                    return Err(self.fail(&format!(
                        "can't evaluate field {name} in type {}",
                        other.type_name()
                    )));
                }
            };
        }
        Ok(receiver)
    }

    /// An operand as a function argument.
    fn arg(&mut self, dot: &Data, arg: &'a Arg) -> Result<Data> {
        self.at = At::Arg(arg);
        let v = match arg {
            Arg::Dot(_) => dot.clone(),
            Arg::Nil(_) => Data::Nil,
            Arg::Literal { value, .. } => value.clone(),
            Arg::Field { names, .. } => self.fields(dot.clone(), names, false)?,
            Arg::Variable { name, names, .. } => {
                let v = self.var(name)?;
                self.fields(v, names, false)?
            }
            Arg::Chain { pipe, names, .. } => {
                let v = self.pipeline(dot, pipe, true)?;
                self.at = At::Arg(arg);
                self.fields(v, names, false)?
            }
            Arg::Pipe(p) => self.pipeline(dot, p, true)?,
            Arg::Ident { name, .. } => self.call(dot, arg, name, &[], None)?,
        };
        Ok(v.into_arg())
    }

    /// A function call: `args` are the operands after the name, `last` the value piped in.
    fn call(
        &mut self,
        dot: &Data,
        ident: &'a Arg,
        name: &str,
        args: &'a [Arg],
        last: Option<Data>,
    ) -> Result<Data> {
        self.at = At::Arg(ident);
        let given = args.len() + usize::from(last.is_some());
        let (fixed, variadic) = funcs::arity(name);
        if variadic && given < fixed {
            return Err(self.fail(&format!(
                "wrong number of args for {name}: want at least {fixed} got {given}"
            )));
        }
        if !variadic && given != fixed {
            return Err(self.fail(&format!(
                "wrong number of args for {name}: want {fixed} got {given}"
            )));
        }
        if name == "and" || name == "or" {
            let mut v = Data::Nil;
            for a in args {
                v = self.arg(dot, a)?;
                if v.truth() == (name == "or") {
                    return Ok(v);
                }
            }
            return Ok(last.map_or(v, Data::into_arg));
        }
        let mut values = Vec::with_capacity(given);
        for a in args {
            values.push(self.arg(dot, a)?);
        }
        values.extend(last.map(Data::into_arg));
        self.at = At::Arg(ident);
        funcs::call(name, &values).map_err(|e| self.fail(&format!("error calling {name}: {e}")))
    }
}
