//! The lexer: template source to tokens, with Go's delimiters, trim markers (`{{- ` and
//! ` -}}`) and comments.

/// What a token is.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Text,
    LeftDelim,
    RightDelim,
    Space,
    /// A function name.
    Ident,
    /// `.Name` (the text keeps the dot).
    Field,
    /// `$` or `$name`.
    Variable,
    Dot,
    /// A quoted or raw string (the text keeps the quotes).
    Str,
    /// A character constant (`'a'`).
    Char,
    Number,
    Bool,
    Nil,
    Pipe,
    LeftParen,
    RightParen,
    Declare,
    Assign,
    /// Any other printable character (`,` separates range variables).
    Other,
    Keyword,
    Eof,
}

/// A token: its kind, text, byte offset and line.
#[derive(Debug, Clone)]
pub struct Token {
    pub kind: Kind,
    pub text: String,
    pub pos: usize,
    pub line: usize,
}

/// A lexing failure: the message and the line, as Go reports them.
#[derive(Debug)]
pub struct LexError {
    pub line: usize,
    pub message: String,
}

const KEYWORDS: &[&str] = &[
    "block", "break", "continue", "define", "else", "end", "if", "range", "template", "with",
];

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn is_alnum(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

struct Lexer<'a> {
    src: &'a str,
    left: &'a str,
    right: &'a str,
    pos: usize,
    tokens: Vec<Token>,
    paren_depth: usize,
    /// A position and its line: tokens come in order, so lines are counted once.
    seen: std::cell::Cell<(usize, usize)>,
}

/// Splits `src` into tokens, ending with `Eof`.
///
/// # Errors
/// An unclosed action or comment, an unterminated string, a bad character or number.
pub fn lex(src: &str, left: &str, right: &str) -> Result<Vec<Token>, LexError> {
    let mut l = Lexer {
        src,
        left,
        right,
        pos: 0,
        tokens: Vec::new(),
        paren_depth: 0,
        seen: std::cell::Cell::new((0, 1)),
    };
    l.run()?;
    Ok(l.tokens)
}

impl Lexer<'_> {
    fn line_at(&self, pos: usize) -> usize {
        let (from, line) = self.seen.get();
        let line = if pos >= from {
            line + self.src[from..pos].matches('\n').count()
        } else {
            1 + self.src[..pos].matches('\n').count()
        };
        self.seen.set((pos, line));
        line
    }

    fn rest(&self) -> &str {
        &self.src[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn emit(&mut self, kind: Kind, start: usize) {
        self.tokens.push(Token {
            kind,
            text: self.src[start..self.pos].to_owned(),
            pos: start,
            line: self.line_at(start),
        });
    }

    fn fail<T>(&self, message: impl Into<String>) -> Result<T, LexError> {
        Err(LexError {
            line: self.line_at(self.pos),
            message: message.into(),
        })
    }

    fn run(&mut self) -> Result<(), LexError> {
        loop {
            let start = self.pos;
            let Some(at) = self.rest().find(self.left) else {
                self.pos = self.src.len();
                if self.pos > start {
                    self.emit(Kind::Text, start);
                }
                self.emit(Kind::Eof, self.pos);
                return Ok(());
            };
            let delim = start + at;
            let after = &self.src[delim + self.left.len()..];
            let trim = has_left_trim(after);
            let text_end = if trim {
                start + self.src[start..delim].trim_end_matches(is_space).len()
            } else {
                delim
            };
            if text_end > start {
                self.pos = text_end;
                self.emit(Kind::Text, start);
            }
            self.pos = delim + self.left.len() + if trim { 2 } else { 0 };
            if self.rest().starts_with("/*") {
                self.comment(delim)?;
                continue;
            }
            self.tokens.push(Token {
                kind: Kind::LeftDelim,
                text: self.left.to_owned(),
                pos: delim,
                line: self.line_at(delim),
            });
            self.paren_depth = 0;
            self.action()?;
        }
    }

    /// `/* ... */` up to the closing delimiter; comments produce no token.
    fn comment(&mut self, open: usize) -> Result<(), LexError> {
        let Some(end) = self.rest().find("*/") else {
            self.pos = open;
            return self.fail("unclosed comment");
        };
        self.pos += end + 2;
        match self.at_right_delim() {
            Some(trim) => {
                self.pos += self.right.len() + if trim { 2 } else { 0 };
                if trim {
                    self.skip_spaces();
                }
                Ok(())
            }
            None => self.fail("comment ends before closing delimiter"),
        }
    }

    /// Whether the right delimiter starts here, and whether with a trim marker.
    fn at_right_delim(&self) -> Option<bool> {
        let rest = self.rest();
        if has_right_trim(rest) && rest[2..].starts_with(self.right) {
            return Some(true);
        }
        rest.starts_with(self.right).then_some(false)
    }

    fn skip_spaces(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start_matches(is_space).len();
    }

    fn action(&mut self) -> Result<(), LexError> {
        loop {
            if let Some(trim) = self.at_right_delim() {
                if self.paren_depth > 0 {
                    return self.fail("unclosed left paren");
                }
                let start = self.pos + if trim { 2 } else { 0 };
                self.pos = start + self.right.len();
                self.emit(Kind::RightDelim, start);
                if trim {
                    self.skip_spaces();
                }
                return Ok(());
            }
            let start = self.pos;
            let Some(c) = self.peek() else {
                return self.fail("unclosed action");
            };
            self.pos += c.len_utf8();
            match c {
                c if is_space(c) => self.space(start),
                '=' => self.emit(Kind::Assign, start),
                ':' => {
                    if self.peek() != Some('=') {
                        return self.fail("expected :=");
                    }
                    self.pos += 1;
                    self.emit(Kind::Declare, start);
                }
                '|' => self.emit(Kind::Pipe, start),
                '"' => self.quoted(start, '"', "unterminated quoted string")?,
                '\'' => self.quoted(start, '\'', "unterminated character constant")?,
                '`' => {
                    let Some(end) = self.rest().find('`') else {
                        return self.fail("unterminated raw quoted string");
                    };
                    self.pos += end + 1;
                    self.emit(Kind::Str, start);
                }
                '$' => self.word(start, Kind::Variable)?,
                '.' if self.peek().is_some_and(|d| d.is_ascii_digit()) => {
                    self.pos = start;
                    self.number(start)?;
                }
                '.' => {
                    if self.peek().is_some_and(is_alnum) {
                        self.word(start, Kind::Field)?;
                    } else {
                        self.emit(Kind::Dot, start);
                    }
                }
                '+' | '-' | '0'..='9' => {
                    self.pos = start;
                    self.number(start)?;
                }
                c if is_alnum(c) => self.identifier(start)?,
                '(' => {
                    self.paren_depth += 1;
                    self.emit(Kind::LeftParen, start);
                }
                ')' => {
                    if self.paren_depth == 0 {
                        return self.fail("unexpected right paren");
                    }
                    self.paren_depth -= 1;
                    self.emit(Kind::RightParen, start);
                }
                c if c.is_ascii_graphic() => self.emit(Kind::Other, start),
                c => {
                    return self.fail(format!(
                        "unrecognized character in action: U+{:04X}",
                        u32::from(c)
                    ));
                }
            }
        }
    }

    /// A run of spaces; one that begins ` -}}` is left for the delimiter.
    fn space(&mut self, start: usize) {
        while self.peek().is_some_and(is_space) {
            if self.at_right_delim() == Some(true) {
                break;
            }
            self.pos += 1;
        }
        if self.pos > start {
            self.emit(Kind::Space, start);
        }
    }

    fn quoted(&mut self, start: usize, quote: char, unterminated: &str) -> Result<(), LexError> {
        let mut chars = self.rest().char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                // The guard consumes the escaped character; a good escape goes on.
                '\\' if chars.next().is_none_or(|(_, e)| e == '\n') => {
                    self.pos += i;
                    return self.fail(unterminated);
                }
                '\n' => {
                    self.pos += i;
                    return self.fail(unterminated);
                }
                c if c == quote => {
                    self.pos += i + 1;
                    let kind = if quote == '"' { Kind::Str } else { Kind::Char };
                    self.emit(kind, start);
                    return Ok(());
                }
                _ => {}
            }
        }
        self.pos = self.src.len();
        self.fail(unterminated)
    }

    /// The alphanumeric rest of a `$var` or `.Field`, which must end at a terminator.
    fn word(&mut self, start: usize, kind: Kind) -> Result<(), LexError> {
        while self.peek().is_some_and(is_alnum) {
            self.pos += self.peek().map_or(1, char::len_utf8);
        }
        self.check_terminator()?;
        self.emit(kind, start);
        Ok(())
    }

    fn check_terminator(&self) -> Result<(), LexError> {
        match self.peek() {
            None => Ok(()),
            Some(c) if is_space(c) || matches!(c, '.' | ',' | '|' | ':' | ')' | '(') => Ok(()),
            Some(_) if self.rest().starts_with(self.right) => Ok(()),
            Some(c) => self.fail(format!("bad character U+{:04X} '{c}'", u32::from(c))),
        }
    }

    fn identifier(&mut self, start: usize) -> Result<(), LexError> {
        while self.peek().is_some_and(is_alnum) {
            self.pos += self.peek().map_or(1, char::len_utf8);
        }
        self.check_terminator()?;
        let word = &self.src[start..self.pos];
        let kind = match word {
            "true" | "false" => Kind::Bool,
            "nil" => Kind::Nil,
            w if KEYWORDS.contains(&w) => Kind::Keyword,
            _ => Kind::Ident,
        };
        self.emit(kind, start);
        Ok(())
    }

    /// A number as Go scans one (sign, base prefix, digits with `_`, fraction,
    /// exponent); the parser decides what it means.
    fn number(&mut self, start: usize) -> Result<(), LexError> {
        if matches!(self.peek(), Some('+' | '-')) {
            self.pos += 1;
        }
        let rest = self.rest();
        let (digits, exp): (&str, &[char]) = if rest.starts_with("0x") || rest.starts_with("0X") {
            self.pos += 2;
            ("0123456789abcdefABCDEF_", &['p', 'P'])
        } else if rest.starts_with("0o") || rest.starts_with("0O") {
            self.pos += 2;
            ("01234567_", &[])
        } else if rest.starts_with("0b") || rest.starts_with("0B") {
            self.pos += 2;
            ("01_", &[])
        } else {
            ("0123456789_", &['e', 'E'])
        };
        let accept = |l: &mut Self, set: &str| {
            while l.peek().is_some_and(|c| set.contains(c)) {
                l.pos += 1;
            }
        };
        accept(self, digits);
        if self.peek() == Some('.') {
            self.pos += 1;
            accept(self, digits);
        }
        if self.peek().is_some_and(|c| exp.contains(&c)) {
            self.pos += 1;
            if matches!(self.peek(), Some('+' | '-')) {
                self.pos += 1;
            }
            accept(self, "0123456789_");
        }
        if self.peek() == Some('i') {
            self.pos += 1;
        }
        if self.peek().is_some_and(is_alnum) {
            self.pos += self.peek().map_or(1, char::len_utf8);
            return self.fail(format!(
                "bad number syntax: {:?}",
                &self.src[start..self.pos]
            ));
        }
        self.emit(Kind::Number, start);
        Ok(())
    }
}

/// `- ` right after a left delimiter.
fn has_left_trim(s: &str) -> bool {
    let mut c = s.chars();
    c.next() == Some('-') && c.next().is_some_and(is_space)
}

/// ` -` right before a right delimiter.
fn has_right_trim(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(is_space) && c.next() == Some('-')
}
