//! Glob patterns as upstream's paths take them: `*` and `?` within one name, `[...]`
//! classes, and `**` for any number of directories; and finding the files they match.

use std::path::{Path, PathBuf};

/// The most paths one listing, walk or glob returns: past it the script gets an error,
/// not a list that exhausts its memory.
pub const MAX_ENTRIES: usize = 100_000;

/// True when the name `name` matches the one-name pattern `pattern`.
pub fn match_name(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    match_from(&p, &n)
}

fn match_from(p: &[char], n: &[char]) -> bool {
    // Iterative with one backtrack point for the last `*`: linear in practice, never
    // exponential on hostile patterns.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ni));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                '[' => {
                    if let Some((matched, next)) = class(&p[pi..], n[ni]) {
                        if matched {
                            pi += next;
                            ni += 1;
                            continue;
                        }
                    } else if n[ni] == '[' {
                        pi += 1;
                        ni += 1;
                        continue;
                    }
                }
                '\\' if pi + 1 < p.len() && p[pi + 1] == n[ni] => {
                    pi += 2;
                    ni += 1;
                    continue;
                }
                c if c == n[ni] => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, sn)) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Matches `c` against the class at the start of `p` (`[abc]`, `[a-z]`, `[!x]`/`[^x]`):
/// whether it matched and the class's length; None when `p` holds no closed class.
fn class(p: &[char], c: char) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(p.get(1), Some('!' | '^'));
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == ']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            if p[i] <= c && c <= p[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if p[i] == c {
                matched = true;
            }
            i += 1;
        }
    }
    None
}

fn has_magic(segment: &str) -> bool {
    segment.contains(['*', '?', '['])
}

/// The paths under `base` that `pattern` (relative to `base`) matches, sorted; `shown`
/// turns a found path back into what the script wrote.
///
/// # Errors
/// More than [`MAX_ENTRIES`] results or visited entries.
pub fn find(base: &Path, pattern: &str) -> Result<Vec<PathBuf>, String> {
    let segments: Vec<&str> = pattern
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    let mut found = Vec::new();
    let mut visited = 0usize;
    walk(base, PathBuf::new(), &segments, &mut found, &mut visited)?;
    found.sort();
    found.dedup();
    Ok(found)
}

fn walk(
    dir: &Path,
    rel: PathBuf,
    segments: &[&str],
    found: &mut Vec<PathBuf>,
    visited: &mut usize,
) -> Result<(), String> {
    let Some((first, rest)) = segments.split_first() else {
        found.push(rel);
        return check(found.len());
    };
    if *first == "**" {
        // Zero directories, then each subdirectory in turn.
        walk(dir, rel.clone(), rest, found, visited)?;
        for (name, is_dir) in entries(&dir.join(&rel), visited)? {
            if is_dir && !name.starts_with('.') {
                walk(dir, rel.join(&name), segments, found, visited)?;
            }
        }
        return Ok(());
    }
    if !has_magic(first) {
        let next = rel.join(first);
        if rest.is_empty() {
            if dir.join(&next).symlink_metadata().is_ok() {
                found.push(next);
                return check(found.len());
            }
            return Ok(());
        }
        if dir.join(&next).is_dir() {
            walk(dir, next, rest, found, visited)?;
        }
        return Ok(());
    }
    for (name, is_dir) in entries(&dir.join(&rel), visited)? {
        // As shells do, a wildcard does not match a leading dot unless written.
        if name.starts_with('.') && !first.starts_with('.') {
            continue;
        }
        if match_name(first, &name) && (rest.is_empty() || is_dir) {
            walk(dir, rel.join(&name), rest, found, visited)?;
        }
    }
    Ok(())
}

/// A directory's entries (name, is a directory); an unreadable one has none.
fn entries(dir: &Path, visited: &mut usize) -> Result<Vec<(String, bool)>, String> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in read.flatten() {
        *visited += 1;
        check(*visited)?;
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        out.push((entry.file_name().to_string_lossy().into_owned(), is_dir));
    }
    out.sort();
    Ok(out)
}

fn check(n: usize) -> Result<(), String> {
    if n > MAX_ENTRIES {
        return Err(format!(
            "more than {MAX_ENTRIES} entries; narrow the pattern"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_like_a_shell() {
        assert!(match_name("*.log", "app.log"));
        assert!(!match_name("*.log", "app.txt"));
        assert!(match_name("a?c", "abc"));
        assert!(match_name("[a-c]x", "bx"));
        assert!(!match_name("[!a-c]x", "bx"));
        assert!(match_name("*", ""));
        assert!(!match_name("a*b*c", "aXbY"));
        assert!(match_name("a*b*c", "aXbYc"));
        assert!(match_name("[x", "[x"));
    }
}
