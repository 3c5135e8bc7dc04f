//! Deeply nested scripts against recursion: Starlark's parser, compiler and every walk
//! of the syntax tree recurse once per level, and a stack overflow aborts the process.
//! Untrusted scripts get a nesting check before they are parsed, and are parsed and
//! analysed on a thread whose stack fits anything the size cap lets through.

/// The deepest nesting of brackets a script may have before it is parsed.
pub const MAX_NESTING: usize = 100;

/// The stack of a thread that parses, analyses or runs the top level of an untrusted
/// script: reserved, not committed, so it costs only what the recursion touches. A
/// 256 KiB script is at most 128 Ki levels deep (an operator and an operand each), and
/// a level costs at most a few KiB of stack in a debug build.
pub const STACK: usize = 1 << 30;

/// `file:line:col: ...` for the first bracket nested deeper than [`MAX_NESTING`], or for
/// a chain of prefix operators (`- - - x`, `not not x`) that long; None when the text is
/// shallow enough. Strings and comments are skipped; the scan is linear.
pub fn too_deep(file: &str, text: &str) -> Option<String> {
    let (mut depth, mut prefix_run) = (0usize, 0usize);
    let (mut line, mut col) = (1usize, 0usize);
    let mut chars = text.chars().peekable();
    let mut quote: Option<(char, bool)> = None;
    while let Some(c) = chars.next() {
        col += 1;
        if c == '\n' {
            line += 1;
            col = 0;
        }
        if let Some((q, triple)) = quote {
            if c == '\\' {
                chars.next();
                col += 1;
            } else if c == q {
                if !triple {
                    quote = None;
                } else if chars.peek() == Some(&q) {
                    chars.next();
                    if chars.peek() == Some(&q) {
                        chars.next();
                        quote = None;
                    }
                }
            }
            continue;
        }
        match c {
            '#' => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        line += 1;
                        col = 0;
                        break;
                    }
                }
            }
            '"' | '\'' => {
                let triple = chars.peek() == Some(&c) && {
                    let mut ahead = chars.clone();
                    ahead.next();
                    ahead.peek() == Some(&c)
                };
                if triple {
                    chars.next();
                    chars.next();
                }
                quote = Some((c, triple));
                prefix_run = 0;
            }
            '(' | '[' | '{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Some(format!(
                        "{file}:{line}:{col}: brackets nested more than {MAX_NESTING} deep"
                    ));
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            '-' | '+' | '~' => {
                prefix_run += 1;
                if prefix_run > MAX_NESTING {
                    return Some(format!(
                        "{file}:{line}:{col}: more than {MAX_NESTING} operators in a row"
                    ));
                }
            }
            c if c.is_whitespace() => {}
            c if c.is_alphabetic() || c == '_' => {
                let mut word = String::from(c);
                while let Some(&n) = chars.peek() {
                    if !(n.is_alphanumeric() || n == '_') {
                        break;
                    }
                    word.push(n);
                    chars.next();
                    col += 1;
                }
                if word == "not" {
                    prefix_run += 1;
                    if prefix_run > MAX_NESTING {
                        return Some(format!(
                            "{file}:{line}:{col}: more than {MAX_NESTING} operators in a row"
                        ));
                    }
                } else {
                    prefix_run = 0;
                }
            }
            _ => prefix_run = 0,
        }
    }
    None
}

/// Starts `f` on a new thread with a [`STACK`]-sized stack; its result arrives on the
/// receiver (which reports a closed channel if `f` panicked).
///
/// # Errors
/// The thread could not be started.
pub fn spawn_deep<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<tokio::sync::oneshot::Receiver<T>, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("kite-deep".into())
        .stack_size(STACK)
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| format!("starting a thread for the script: {e}"))?;
    Ok(rx)
}

/// Runs `f` on a new thread with a [`STACK`]-sized stack and waits for it.
///
/// # Errors
/// The thread could not be started, or `f` panicked.
#[cfg(test)]
pub fn on_deep_stack<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    std::thread::Builder::new()
        .name("kite-deep".into())
        .stack_size(STACK)
        .spawn(f)
        .map_err(|e| format!("starting a thread for the script: {e}"))?
        .join()
        .map_err(|_| "the script's analysis panicked".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_measured_outside_strings_and_comments() {
        assert_eq!(too_deep("a.star", "x = [[[1]]]\n"), None);
        let deep = format!("x = {}1{}\n", "(".repeat(101), ")".repeat(101));
        assert_eq!(
            too_deep("a.star", &deep).as_deref(),
            Some("a.star:1:105: brackets nested more than 100 deep")
        );
        let quoted = format!("x = \"{}\"  # {}\n", "(".repeat(500), "[".repeat(500));
        assert_eq!(too_deep("a.star", &quoted), None);
        let triple = format!("x = '''\n{}\n'''\ny = 1\n", "{".repeat(500));
        assert_eq!(too_deep("a.star", &triple), None);
        let nots = format!("x = {}True\n", "not ".repeat(200));
        assert!(
            too_deep("a.star", &nots)
                .unwrap()
                .contains("operators in a row")
        );
        let words = format!("x = [{}]\n", "nothing, not_a, ".repeat(200));
        assert_eq!(too_deep("a.star", &words), None);
        let unary = format!("x = {}1\n", "- ".repeat(200));
        assert!(
            too_deep("a.star", &unary)
                .unwrap()
                .contains("operators in a row")
        );
        // Ordinary arithmetic is not a run of prefix operators.
        let sum = format!("x = {}1\n", "1 + ".repeat(5000));
        assert_eq!(too_deep("a.star", &sum), None);
    }

    /// A 20 000-term sum is 20 000 levels deep once parsed: the deep stack holds it.
    #[test]
    fn a_long_chain_parses_and_lints_on_the_deep_stack() {
        let sum = format!("x = {}1\n", "1 + ".repeat(20_000));
        let r = on_deep_stack(move || {
            crate::script::check::check_text(
                crate::script::library::Library::standard(),
                "sum.star",
                &sum,
            )
            .is_ok()
        });
        assert_eq!(r, Ok(true));
    }
}
