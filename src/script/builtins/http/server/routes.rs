//! The route patterns of `http.server`, read as Go's `ServeMux` reads them (upstream
//! hands them to it): `[METHOD ][HOST]/path`, where a segment `{name}` matches one
//! segment, a last `{name...}` or a trailing `/` matches the rest, and `{$}` after a
//! trailing `/` matches only that path. The most specific matching pattern wins.

/// One segment of a pattern's path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Wild(String),
}

/// What a pattern matches after its segments.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tail {
    /// Nothing more: `/a/b`.
    End,
    /// Exactly a trailing slash: `/a/{$}`.
    Slash,
    /// Anything, possibly named: `/a/` or `/a/{rest...}`.
    Rest(Option<String>),
}

/// A parsed pattern.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// As written, for messages.
    pub text: String,
    method: Option<String>,
    host: Option<String>,
    segments: Vec<Segment>,
    tail: Tail,
}

/// Where a request goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Routed {
    /// The pattern at `index`, with the values of its wildcards.
    Found {
        index: usize,
        params: Vec<(String, String)>,
    },
    /// Some pattern matches the path, none the method: these methods would.
    MethodNotAllowed(Vec<String>),
    NotFound,
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

impl Pattern {
    /// Reads a pattern.
    ///
    /// # Errors
    /// What is wrong with it, as Go's `ServeMux` would refuse it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: &str| Err(format!("bad pattern {text:?}: {why}"));
        let (method, rest) = match text.split_once([' ', '\t']) {
            Some((m, rest)) => (Some(m), rest.trim_start_matches([' ', '\t'])),
            None => (None, text),
        };
        if let Some(m) = method
            && (m.is_empty() || !m.bytes().all(|b| b.is_ascii_graphic() && b != b'/'))
        {
            return bad("the method is not a token");
        }
        let Some(slash) = rest.find('/') else {
            return bad("the path must start with /");
        };
        let (host, path) = rest.split_at(slash);
        let mut segments = Vec::new();
        let mut tail = Tail::End;
        let parts: Vec<&str> = path[1..].split('/').collect();
        let mut names: Vec<&str> = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            if part.is_empty() {
                if last {
                    tail = Tail::Rest(None);
                    continue;
                }
                return bad("empty path segment");
            }
            let Some(inner) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) else {
                if part.contains(['{', '}']) {
                    return bad("a wildcard must be a whole segment");
                }
                segments.push(Segment::Literal(decode(part)));
                continue;
            };
            if inner == "$" {
                if !last {
                    return bad("{$} must be the last segment");
                }
                tail = Tail::Slash;
                continue;
            }
            let (name, rest_wild) = match inner.strip_suffix("...") {
                Some(n) => (n, true),
                None => (inner, false),
            };
            if !is_name(name) {
                return bad("a wildcard's name must be an identifier");
            }
            if names.contains(&name) {
                return bad("a wildcard's name appears twice");
            }
            names.push(name);
            if rest_wild {
                if !last {
                    return bad("a {name...} wildcard must be the last segment");
                }
                tail = Tail::Rest(Some(name.to_owned()));
            } else {
                segments.push(Segment::Wild(name.to_owned()));
            }
        }
        Ok(Pattern {
            text: text.to_owned(),
            method: method.map(str::to_owned),
            host: (!host.is_empty()).then(|| host.to_ascii_lowercase()),
            segments,
            tail,
        })
    }

    /// The same requests as `other` (two registrations of one route).
    pub fn same_as(&self, other: &Pattern) -> bool {
        self.method == other.method
            && self.host == other.host
            && self.segments.len() == other.segments.len()
            && self
                .segments
                .iter()
                .zip(&other.segments)
                .all(|pair| match pair {
                    (Segment::Literal(a), Segment::Literal(b)) => a == b,
                    (Segment::Wild(_), Segment::Wild(_)) => true,
                    _ => false,
                })
            && matches!(
                (&self.tail, &other.tail),
                (Tail::End, Tail::End)
                    | (Tail::Slash, Tail::Slash)
                    | (Tail::Rest(_), Tail::Rest(_))
            )
    }

    fn method_matches(&self, method: &str) -> bool {
        match &self.method {
            None => true,
            // As Go's: a GET route answers HEAD too.
            Some(m) => m == method || (m == "GET" && method == "HEAD"),
        }
    }

    /// The wildcards' values when the path (split into decoded segments) matches.
    fn match_path(&self, parts: &[String]) -> Option<Vec<(String, String)>> {
        let n = self.segments.len();
        let fits = match self.tail {
            Tail::End => parts.len() == n,
            Tail::Slash => parts.len() == n + 1 && parts[n].is_empty(),
            Tail::Rest(_) => parts.len() > n,
        };
        if !fits {
            return None;
        }
        let mut params = Vec::new();
        for (segment, part) in self.segments.iter().zip(parts) {
            match segment {
                Segment::Literal(l) if l == part => {}
                Segment::Wild(name) if !part.is_empty() => {
                    params.push((name.clone(), part.clone()));
                }
                _ => return None,
            }
        }
        if let Tail::Rest(Some(name)) = &self.tail {
            params.push((name.clone(), parts[n..].join("/")));
        }
        Some(params)
    }

    /// How specific the pattern's path is, for picking among matches: segment by
    /// segment a literal beats a wildcard, then a path that ends beats one that takes
    /// the rest, and a longer rest-taking prefix beats a shorter one.
    fn rank(&self) -> (Vec<u8>, u8, usize) {
        let segments = self
            .segments
            .iter()
            .map(|s| u8::from(matches!(s, Segment::Literal(_))))
            .collect();
        let ends = u8::from(!matches!(self.tail, Tail::Rest(_)));
        (segments, ends, self.segments.len())
    }
}

/// `%41` as `A`; anything not a valid escape stays as written.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            // Two hex digits make one byte.
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Routes requests among patterns.
#[derive(Debug, Default)]
pub struct Router(pub Vec<Pattern>);

impl Router {
    /// Where a request for `method host path` (`host` without its port) goes.
    pub fn route(&self, method: &str, host: &str, path: &str) -> Routed {
        let parts: Vec<String> = path
            .strip_prefix('/')
            .unwrap_or(path)
            .split('/')
            .map(decode)
            .collect();
        let host = host.to_ascii_lowercase();
        let mut best: Option<(usize, Vec<(String, String)>)> = None;
        let mut allowed: Vec<String> = Vec::new();
        for (index, p) in self.0.iter().enumerate() {
            if p.host.as_ref().is_some_and(|h| *h != host) {
                continue;
            }
            let Some(params) = p.match_path(&parts) else {
                continue;
            };
            if !p.method_matches(method) {
                if let Some(m) = &p.method {
                    allowed.push(m.clone());
                }
                continue;
            }
            let better = best.as_ref().is_none_or(|(b, _)| {
                let b = &self.0[*b];
                // A host first, then the path, then a method (as Go's precedence).
                (p.host.is_some(), p.rank(), p.method.is_some())
                    > (b.host.is_some(), b.rank(), b.method.is_some())
            });
            if better {
                best = Some((index, params));
            }
        }
        match best {
            Some((index, params)) => Routed::Found { index, params },
            None if !allowed.is_empty() => {
                if allowed.iter().any(|m| m == "GET") {
                    allowed.push("HEAD".to_owned());
                }
                allowed.sort();
                allowed.dedup();
                Routed::MethodNotAllowed(allowed)
            }
            None => Routed::NotFound,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(patterns: &[&str]) -> Router {
        Router(
            patterns
                .iter()
                .map(|p| Pattern::parse(p).unwrap())
                .collect(),
        )
    }

    fn found(r: &Router, method: &str, path: &str) -> Option<(usize, Vec<(String, String)>)> {
        match r.route(method, "localhost", path) {
            Routed::Found { index, params } => Some((index, params)),
            _ => None,
        }
    }

    #[test]
    fn patterns_match_as_go_serve_mux() {
        let r = router(&[
            "/hello",
            "GET /users/{id}",
            "/static/",
            "/files/{path...}",
            "/{$}",
        ]);
        assert_eq!(found(&r, "GET", "/hello"), Some((0, vec![])));
        assert_eq!(found(&r, "POST", "/hello"), Some((0, vec![])));
        assert_eq!(found(&r, "GET", "/hello/x"), None);
        assert_eq!(
            found(&r, "HEAD", "/users/42"),
            Some((1, vec![("id".into(), "42".into())]))
        );
        assert_eq!(
            r.route("POST", "h", "/users/42"),
            Routed::MethodNotAllowed(vec!["GET".into(), "HEAD".into()])
        );
        assert_eq!(found(&r, "GET", "/static/css/a.css"), Some((2, vec![])));
        assert_eq!(found(&r, "GET", "/static/"), Some((2, vec![])));
        assert_eq!(found(&r, "GET", "/static"), None);
        assert_eq!(
            found(&r, "GET", "/files/a/b%20c"),
            Some((3, vec![("path".into(), "a/b c".into())]))
        );
        assert_eq!(found(&r, "GET", "/"), Some((4, vec![])));
        assert_eq!(r.route("GET", "h", "/nope"), Routed::NotFound);
    }

    #[test]
    fn the_most_specific_pattern_wins() {
        let r = router(&["/", "/users/{id}", "/users/me", "/users/", "GET /users/me"]);
        assert_eq!(found(&r, "GET", "/users/me").map(|f| f.0), Some(4));
        assert_eq!(found(&r, "PUT", "/users/me").map(|f| f.0), Some(2));
        assert_eq!(found(&r, "GET", "/users/7").map(|f| f.0), Some(1));
        assert_eq!(found(&r, "GET", "/users/7/x").map(|f| f.0), Some(3));
        assert_eq!(found(&r, "GET", "/other").map(|f| f.0), Some(0));
        let hosts = router(&["/", "example.com/"]);
        assert_eq!(
            hosts.route("GET", "example.com", "/a"),
            Routed::Found {
                index: 1,
                params: vec![]
            }
        );
    }

    #[test]
    fn bad_patterns_are_refused() {
        for p in [
            "",
            "hello",
            "GET",
            "/a/{b",
            "/a/x{b}",
            "/{a}/{a}",
            "/{a...}/b",
            "/a/{$}/b",
            "/{1x}",
            "/a//b",
        ] {
            assert!(Pattern::parse(p).is_err(), "{p}");
        }
        assert!(Pattern::parse("/a/{$}").is_ok());
        assert!(Pattern::parse("POST  /x").is_ok());
        assert!(
            Pattern::parse("/a")
                .unwrap()
                .same_as(&Pattern::parse("/a").unwrap())
        );
        assert!(
            Pattern::parse("/{x}")
                .unwrap()
                .same_as(&Pattern::parse("/{y}").unwrap())
        );
        assert!(
            !Pattern::parse("GET /a")
                .unwrap()
                .same_as(&Pattern::parse("/a").unwrap())
        );
    }
}
