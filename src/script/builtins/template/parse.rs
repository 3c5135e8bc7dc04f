//! The parser: tokens to the trees of a template and of the templates it defines,
//! checking functions and variables as Go's parser does.

use std::collections::HashMap;
use std::sync::Arc;

use super::data::Data;
use super::funcs;
use super::lex::{Kind, Token, lex};
use super::tree::{Arg, Branch, Command, List, Node, Pipe};

/// Deeper nesting of blocks or parentheses than this is refused, so that a hostile
/// template cannot overflow the stack while being parsed.
pub const MAX_NESTING: usize = 256;

/// A parsed template: the main body and every `define`d or `block` template, by name.
pub type Trees = HashMap<String, Arc<List>>;

/// How an item list ended.
enum End {
    End,
    /// `{{else}}`; `chained` when an `if` or `with` follows in the same action.
    Else {
        chained: bool,
    },
}

/// What one action or text produced.
enum Item {
    Node(Node),
    End,
    Else { chained: bool },
}

struct Parser<'a> {
    name: &'a str,
    tokens: Vec<Token>,
    next: usize,
    line: usize,
    vars: Vec<String>,
    ranges: usize,
    nesting: usize,
    trees: Trees,
}

/// Parses `src` (named `name` in messages) with the given delimiters.
///
/// # Errors
/// Go's message, e.g. `template: tmpl:3: unexpected EOF`.
pub fn parse(name: &str, src: &str, left: &str, right: &str) -> Result<Trees, String> {
    let tokens =
        lex(src, left, right).map_err(|e| format!("template: {name}:{}: {}", e.line, e.message))?;
    let mut p = Parser {
        name,
        tokens,
        next: 0,
        line: 1,
        vars: vec!["$".to_owned()],
        ranges: 0,
        nesting: 0,
        trees: HashMap::new(),
    };
    let root = p.top().map_err(|m| p.message(&m))?;
    p.add(name, root).map_err(|m| p.message(&m))?;
    Ok(p.trees)
}

/// How Go names a token in "unexpected ..." messages.
fn describe(t: &Token) -> String {
    match t.kind {
        Kind::Eof => "EOF".to_owned(),
        Kind::Keyword => format!("<{}>", t.text),
        _ if t.text.chars().count() > 10 => {
            let head: String = t.text.chars().take(10).collect();
            format!("{head:?}...")
        }
        _ => format!("{:?}", t.text),
    }
}

/// Whether a body has nothing but spaces (such a `define` may be redefined).
fn is_empty(list: &List) -> bool {
    list.iter()
        .all(|n| matches!(n, Node::Text(t) if t.trim().is_empty()))
}

impl Parser<'_> {
    fn message(&self, m: &str) -> String {
        format!("template: {}:{}: {m}", self.name, self.line)
    }

    fn next(&mut self) -> Token {
        let i = self.next.min(self.tokens.len() - 1);
        self.next = i + 1;
        let t = self.tokens[i].clone();
        self.line = t.line;
        t
    }

    fn backup(&mut self) {
        self.next -= 1;
    }

    fn peek(&self) -> &Token {
        &self.tokens[self.next.min(self.tokens.len() - 1)]
    }

    fn next_non_space(&mut self) -> Token {
        loop {
            let t = self.next();
            if t.kind != Kind::Space {
                return t;
            }
        }
    }

    fn peek_non_space(&mut self) -> Token {
        let t = self.next_non_space();
        self.backup();
        t
    }

    fn expect(&mut self, kind: Kind, context: &str) -> Result<Token, String> {
        let t = self.next_non_space();
        if t.kind == kind {
            Ok(t)
        } else {
            Err(format!("unexpected {} in {context}", describe(&t)))
        }
    }

    fn add(&mut self, name: &str, list: List) -> Result<(), String> {
        match self.trees.get(name) {
            Some(old) if !is_empty(old) => {
                if !is_empty(&list) {
                    return Err(format!(
                        "template: multiple definition of template {name:?}"
                    ));
                }
            }
            _ => {
                self.trees.insert(name.to_owned(), Arc::new(list));
            }
        }
        Ok(())
    }

    fn enter(&mut self) -> Result<(), String> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return Err(format!("exceeded maximum nesting depth ({MAX_NESTING})"));
        }
        Ok(())
    }

    /// The top level: text, actions and `define`s.
    fn top(&mut self) -> Result<List, String> {
        let mut root = Vec::new();
        loop {
            if self.peek().kind == Kind::Eof {
                return Ok(root);
            }
            if self.peek().kind == Kind::LeftDelim {
                let at = self.next;
                self.next();
                let t = self.next_non_space();
                if t.kind == Kind::Keyword && t.text == "define" {
                    self.definition()?;
                    continue;
                }
                self.next = at;
            }
            match self.text_or_action()? {
                Item::Node(n) => root.push(n),
                Item::End => return Err("unexpected {{end}}".to_owned()),
                Item::Else { .. } => return Err("unexpected {{else}}".to_owned()),
            }
        }
    }

    /// `{{define "name"}} ... {{end}}`, the `define` already read.
    fn definition(&mut self) -> Result<(), String> {
        let name = self.template_name("define clause")?;
        self.expect(Kind::RightDelim, "define clause")?;
        let body = self.separate_body("define clause")?;
        self.add(&name, body)
    }

    /// A body with its own variables (only `$`) and outside any range.
    fn separate_body(&mut self, context: &str) -> Result<List, String> {
        let vars = std::mem::replace(&mut self.vars, vec!["$".to_owned()]);
        let ranges = std::mem::take(&mut self.ranges);
        let (body, end) = self.item_list()?;
        self.vars = vars;
        self.ranges = ranges;
        match end {
            End::End => Ok(body),
            End::Else { .. } => Err(format!("unexpected {{{{else}}}} in {context}")),
        }
    }

    fn template_name(&mut self, context: &str) -> Result<String, String> {
        let t = self.next_non_space();
        if t.kind != Kind::Str {
            return Err(format!("unexpected {} in {context}", describe(&t)));
        }
        unquote(&t.text)
    }

    /// Nodes up to an `{{end}}` or `{{else}}`.
    fn item_list(&mut self) -> Result<(List, End), String> {
        let mut list = Vec::new();
        loop {
            if self.peek_non_space().kind == Kind::Eof {
                self.next_non_space();
                return Err("unexpected EOF".to_owned());
            }
            match self.text_or_action()? {
                Item::Node(n) => list.push(n),
                Item::End => return Ok((list, End::End)),
                Item::Else { chained } => return Ok((list, End::Else { chained })),
            }
        }
    }

    fn text_or_action(&mut self) -> Result<Item, String> {
        let t = self.next_non_space();
        match t.kind {
            Kind::Text => Ok(Item::Node(Node::Text(t.text))),
            Kind::LeftDelim => self.action(),
            _ => Err(format!("unexpected {} in input", describe(&t))),
        }
    }

    fn action(&mut self) -> Result<Item, String> {
        let t = self.next_non_space();
        if t.kind == Kind::Keyword {
            match t.text.as_str() {
                "block" => return self.block().map(Item::Node),
                "break" | "continue" => return self.loop_control(&t).map(Item::Node),
                "else" => {
                    let p = self.peek_non_space();
                    if p.kind == Kind::Keyword && (p.text == "if" || p.text == "with") {
                        return Ok(Item::Else { chained: true });
                    }
                    self.expect(Kind::RightDelim, "else")?;
                    return Ok(Item::Else { chained: false });
                }
                "end" => {
                    self.expect(Kind::RightDelim, "end")?;
                    return Ok(Item::End);
                }
                "if" => return self.control("if").map(|b| Item::Node(Node::If(b))),
                "range" => return self.control("range").map(|b| Item::Node(Node::Range(b))),
                "with" => return self.control("with").map(|b| Item::Node(Node::With(b))),
                "template" => return self.template().map(Item::Node),
                _ => {}
            }
        }
        self.backup();
        Ok(Item::Node(Node::Action(
            self.pipeline("command", &Kind::RightDelim)?,
        )))
    }

    fn loop_control(&mut self, t: &Token) -> Result<Node, String> {
        let context = format!("{{{{{}}}}}", t.text);
        self.expect(Kind::RightDelim, &context)?;
        if self.ranges == 0 {
            return Err(format!("{context} outside {{{{range}}}}"));
        }
        Ok(if t.text == "break" {
            Node::Break
        } else {
            Node::Continue
        })
    }

    /// `if`, `range` or `with`: pipeline, body, optional else (or else-if chain), end.
    fn control(&mut self, context: &str) -> Result<Branch, String> {
        self.enter()?;
        let mark = self.vars.len();
        let pipe = self.pipeline(context, &Kind::RightDelim)?;
        if context == "range" {
            self.ranges += 1;
        }
        let (list, end) = self.item_list()?;
        if context == "range" {
            self.ranges -= 1;
        }
        let else_list = match end {
            End::End => None,
            End::Else { chained: true } => {
                let kw = self.next_non_space();
                if kw.text != context || context == "range" {
                    return Err(format!("unexpected {} in {context}", describe(&kw)));
                }
                let inner = self.control(context)?;
                Some(vec![if context == "if" {
                    Node::If(inner)
                } else {
                    Node::With(inner)
                }])
            }
            End::Else { chained: false } => {
                let (else_list, end) = self.item_list()?;
                if !matches!(end, End::End) {
                    return Err("expected end; found {{else}}".to_owned());
                }
                Some(else_list)
            }
        };
        self.vars.truncate(mark);
        self.nesting -= 1;
        Ok(Branch {
            pipe,
            list,
            else_list,
        })
    }

    /// `{{template "name" pipeline}}`.
    fn template(&mut self) -> Result<Node, String> {
        let context = "template clause";
        let pos = self.peek_non_space().pos;
        let name = self.template_name(context)?;
        let pipe = if self.next_non_space().kind == Kind::RightDelim {
            None
        } else {
            self.backup();
            Some(self.pipeline(context, &Kind::RightDelim)?)
        };
        Ok(Node::Template { pos, name, pipe })
    }

    /// `{{block "name" pipeline}} default {{end}}`: defines the template and calls it.
    fn block(&mut self) -> Result<Node, String> {
        let context = "block clause";
        let pos = self.peek_non_space().pos;
        let name = self.template_name(context)?;
        let pipe = self.pipeline(context, &Kind::RightDelim)?;
        self.enter()?;
        let body = self.separate_body(context)?;
        self.nesting -= 1;
        self.add(&name, body)?;
        Ok(Node::Template {
            pos,
            name,
            pipe: Some(pipe),
        })
    }

    /// A pipeline up to `end`, with its declarations.
    fn pipeline(&mut self, context: &str, end: &Kind) -> Result<Pipe, String> {
        let pos = self.peek_non_space().pos;
        let (decl, is_assign) = self.declarations(context)?;
        let mut cmds = Vec::new();
        loop {
            let t = self.next_non_space();
            if &t.kind == end {
                break;
            }
            match t.kind {
                Kind::Bool
                | Kind::Char
                | Kind::Dot
                | Kind::Field
                | Kind::Ident
                | Kind::Number
                | Kind::Nil
                | Kind::Str
                | Kind::Variable
                | Kind::LeftParen => {
                    self.backup();
                    cmds.push(self.command()?);
                }
                _ => return Err(format!("unexpected {} in {context}", describe(&t))),
            }
        }
        if cmds.is_empty() {
            return Err(format!("missing value for {context}"));
        }
        for (i, c) in cmds.iter().enumerate().skip(1) {
            if matches!(
                c.args.first(),
                Some(Arg::Literal { .. } | Arg::Dot(_) | Arg::Nil(_))
            ) {
                return Err(format!(
                    "non executable command in pipeline stage {}",
                    i + 1
                ));
            }
        }
        Ok(Pipe {
            pos,
            is_assign,
            decl,
            cmds,
        })
    }

    /// `$x :=`, `$x =`, or (in a range) `$i, $v :=` at the start of a pipeline.
    fn declarations(&mut self, context: &str) -> Result<(Vec<String>, bool), String> {
        let start = self.next;
        let first = self.next_non_space();
        if first.kind != Kind::Variable {
            self.next = start;
            return Ok((Vec::new(), false));
        }
        let op = self.next_non_space();
        let (names, op) = match op.kind {
            Kind::Declare | Kind::Assign => (vec![first.text], op),
            Kind::Other if op.text == "," => {
                if context != "range" {
                    return Err(format!("too many declarations in {context}"));
                }
                let second = self.next_non_space();
                if second.kind != Kind::Variable {
                    return Err("missing range variable".to_owned());
                }
                let op = self.next_non_space();
                if !matches!(op.kind, Kind::Declare | Kind::Assign) {
                    return Err(format!("unexpected {} in {context}", describe(&op)));
                }
                (vec![first.text, second.text], op)
            }
            _ => {
                self.next = start;
                return Ok((Vec::new(), false));
            }
        };
        let is_assign = op.kind == Kind::Assign;
        if is_assign {
            for n in &names {
                self.use_var(n)?;
            }
        } else {
            self.vars.extend(names.iter().cloned());
        }
        Ok((names, is_assign))
    }

    fn use_var(&self, name: &str) -> Result<(), String> {
        if self.vars.iter().any(|v| v == name) {
            Ok(())
        } else {
            Err(format!("undefined variable {name:?}"))
        }
    }

    fn command(&mut self) -> Result<Command, String> {
        let pos = self.peek_non_space().pos;
        let mut args = Vec::new();
        loop {
            self.peek_non_space();
            if let Some(a) = self.operand()? {
                args.push(a);
            }
            let t = self.next();
            match t.kind {
                Kind::Space => continue,
                Kind::RightDelim | Kind::RightParen => self.backup(),
                Kind::Pipe => {}
                _ => return Err(format!("unexpected {} in operand", describe(&t))),
            }
            break;
        }
        if args.is_empty() {
            return Err("empty command".to_owned());
        }
        Ok(Command { pos, args })
    }

    /// A term and the fields that follow it without space.
    fn operand(&mut self) -> Result<Option<Arg>, String> {
        let Some(term) = self.term()? else {
            return Ok(None);
        };
        if self.peek().kind != Kind::Field {
            return Ok(Some(term));
        }
        let mut more = Vec::new();
        while self.peek().kind == Kind::Field {
            more.push(self.next().text[1..].to_owned());
        }
        Ok(Some(match term {
            Arg::Field { pos, mut names } => {
                names.extend(more);
                Arg::Field { pos, names }
            }
            Arg::Variable {
                pos,
                name,
                mut names,
            } => {
                names.extend(more);
                Arg::Variable { pos, name, names }
            }
            Arg::Pipe(pipe) => Arg::Chain {
                pos: pipe.pos,
                pipe,
                names: more,
            },
            other => return Err(format!("unexpected . after term {:?}", other.to_string())),
        }))
    }

    fn term(&mut self) -> Result<Option<Arg>, String> {
        let t = self.next_non_space();
        let pos = t.pos;
        Ok(Some(match t.kind {
            Kind::Ident => {
                if !funcs::is_builtin(&t.text) {
                    return Err(format!("function {:?} not defined", t.text));
                }
                Arg::Ident { pos, name: t.text }
            }
            Kind::Dot => Arg::Dot(pos),
            Kind::Nil => Arg::Nil(pos),
            Kind::Variable => {
                self.use_var(&t.text)?;
                Arg::Variable {
                    pos,
                    name: t.text,
                    names: Vec::new(),
                }
            }
            Kind::Field => Arg::Field {
                pos,
                names: vec![t.text[1..].to_owned()],
            },
            Kind::Bool => Arg::Literal {
                pos,
                value: Data::Bool(t.text == "true"),
                text: t.text,
            },
            Kind::Char | Kind::Number => Arg::Literal {
                pos,
                value: number(&t)?,
                text: t.text,
            },
            Kind::Str => Arg::Literal {
                pos,
                value: Data::str(&unquote(&t.text)?),
                text: t.text,
            },
            Kind::LeftParen => {
                self.enter()?;
                let pipe = self.pipeline("parenthesized pipeline", &Kind::RightParen)?;
                self.nesting -= 1;
                Arg::Pipe(Box::new(pipe))
            }
            _ => {
                self.backup();
                return Ok(None);
            }
        }))
    }
}

fn unquote(text: &str) -> Result<String, String> {
    crate::script::builtins::strings::unquote(text).map_err(|_| format!("invalid syntax: {text}"))
}

/// A number or character constant: an integer when it is one, else a float.
fn number(t: &Token) -> Result<Data, String> {
    if t.kind == Kind::Char {
        let s = unquote(&t.text)?;
        let mut chars = s.chars();
        return match (chars.next(), chars.next()) {
            (Some(c), None) => Ok(Data::Int(i64::from(u32::from(c)))),
            _ => Err(format!("malformed character constant: {}", t.text)),
        };
    }
    let text = t.text.replace('_', "");
    let bad = || format!("illegal number syntax: {:?}", t.text);
    if text.ends_with('i') {
        return Err(format!("complex numbers are not supported: {}", t.text));
    }
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text.as_str()),
    };
    let lower = digits.to_ascii_lowercase();
    let radix = [("0x", 16), ("0o", 8), ("0b", 2)]
        .iter()
        .find(|(p, _)| lower.starts_with(p));
    let int = match radix {
        Some((p, r)) => i64::from_str_radix(&lower[p.len()..], *r).ok(),
        None if lower.len() > 1
            && lower.starts_with('0')
            && lower.bytes().all(|b| b.is_ascii_digit()) =>
        {
            i64::from_str_radix(&lower[1..], 8).ok()
        }
        None => lower.parse::<i64>().ok(),
    };
    if let Some(i) = int {
        return Ok(Data::Int(if negative { -i } else { i }));
    }
    if radix.is_some() {
        return Err(bad());
    }
    let f: f64 = digits.parse().map_err(|_| bad())?;
    Ok(Data::Float(if negative { -f } else { f }))
}
