//! The parse tree of a template, and how its nodes print in error messages (as Go
//! prints them: `<.spec.replicas>`, `<index .items 3>`).

use std::fmt;

use super::data::Data;

/// A sequence of nodes: a template body, or a branch of `if`, `range`, `with`.
pub type List = Vec<Node>;

/// One piece of a template body.
#[derive(Debug)]
pub enum Node {
    Text(String),
    Action(Pipe),
    If(Branch),
    Range(Branch),
    With(Branch),
    Template {
        pos: usize,
        name: String,
        pipe: Option<Pipe>,
    },
    Break,
    Continue,
}

/// The shared shape of `if`, `range` and `with`.
#[derive(Debug)]
pub struct Branch {
    pub pipe: Pipe,
    pub list: List,
    pub else_list: Option<List>,
}

/// A pipeline: optional variable declarations (or assignment) and `|`-joined commands.
#[derive(Debug)]
pub struct Pipe {
    pub pos: usize,
    pub is_assign: bool,
    /// Variable names, with their `$`.
    pub decl: Vec<String>,
    pub cmds: Vec<Command>,
}

/// One stage of a pipeline: a function or value and its arguments.
#[derive(Debug)]
pub struct Command {
    pub pos: usize,
    pub args: Vec<Arg>,
}

/// An operand.
#[derive(Debug)]
pub enum Arg {
    /// `.a.b` (the names without dots).
    Field {
        pos: usize,
        names: Vec<String>,
    },
    /// `$x.a.b`.
    Variable {
        pos: usize,
        name: String,
        names: Vec<String>,
    },
    /// `(pipeline).a.b`.
    Chain {
        pos: usize,
        pipe: Box<Pipe>,
        names: Vec<String>,
    },
    Pipe(Box<Pipe>),
    Ident {
        pos: usize,
        name: String,
    },
    Dot(usize),
    Nil(usize),
    /// A literal: its value and its source text.
    Literal {
        pos: usize,
        value: Data,
        text: String,
    },
}

impl Arg {
    pub fn pos(&self) -> usize {
        match self {
            Arg::Field { pos, .. }
            | Arg::Variable { pos, .. }
            | Arg::Chain { pos, .. }
            | Arg::Ident { pos, .. }
            | Arg::Dot(pos)
            | Arg::Nil(pos)
            | Arg::Literal { pos, .. } => *pos,
            Arg::Pipe(p) => p.pos,
        }
    }
}

fn write_names(f: &mut fmt::Formatter<'_>, names: &[String]) -> fmt::Result {
    for n in names {
        write!(f, ".{n}")?;
    }
    Ok(())
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Field { names, .. } => write_names(f, names),
            Arg::Variable { name, names, .. } => {
                f.write_str(name)?;
                write_names(f, names)
            }
            Arg::Chain { pipe, names, .. } => {
                write!(f, "({pipe})")?;
                write_names(f, names)
            }
            Arg::Pipe(p) => write!(f, "({p})"),
            Arg::Ident { name, .. } => f.write_str(name),
            Arg::Dot(_) => f.write_str("."),
            Arg::Nil(_) => f.write_str("nil"),
            Arg::Literal { text, .. } => f.write_str(text),
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{a}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Pipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.decl.is_empty() {
            let op = if self.is_assign { "=" } else { ":=" };
            write!(f, "{} {op} ", self.decl.join(", "))?;
        }
        for (i, c) in self.cmds.iter().enumerate() {
            if i > 0 {
                f.write_str(" | ")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

/// A template call as Go prints it, for error context.
pub fn template_call(name: &str, pipe: Option<&Pipe>) -> String {
    match pipe {
        Some(p) => format!("{{{{template {name:?} {p}}}}}"),
        None => format!("{{{{template {name:?}}}}}"),
    }
}
