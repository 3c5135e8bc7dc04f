//! The remote command line `exec` sends (upstream's `sudo`, `as_user`, `cwd`, `env`
//! wrapping, with shell quoting), and the SCP protocol's small text parts.

use std::collections::BTreeMap;

/// What wraps one `exec` command, after the client's defaults are applied.
#[derive(Debug, Default, Clone)]
pub struct Wrap {
    pub sudo: bool,
    pub as_user: String,
    pub cwd: String,
    pub env: BTreeMap<String, String>,
}

/// `text` as one word of a POSIX shell: left alone when it has nothing the shell would
/// read specially, else in single quotes.
pub fn quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:=@%+,".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Whether `name` may be set as a shell variable (anything else could smuggle in code).
fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The command line the remote shell runs: the variables exported, then `cd` into
/// `cwd`, then `cmd`; with sudo, all of it under `sh -c` so that every part runs as the
/// other user (upstream prefixes `sudo` to the first word only).
///
/// # Errors
/// A variable name that is not a shell identifier, or a NUL anywhere.
pub fn build(cmd: &str, wrap: &Wrap) -> Result<String, String> {
    if cmd.contains('\0') || wrap.cwd.contains('\0') || wrap.as_user.contains('\0') {
        return Err("the command, cwd and as_user may not contain NUL".into());
    }
    let mut line = String::new();
    for (name, value) in &wrap.env {
        if !valid_env_name(name) {
            return Err(format!(
                "env: {name:?} is not a valid variable name (letters, digits, _)"
            ));
        }
        if value.contains('\0') {
            return Err(format!("env: the value of {name} contains NUL"));
        }
        line.push_str(&format!("export {name}={}; ", quote(value)));
    }
    if !wrap.cwd.is_empty() {
        line.push_str(&format!("cd {} && ", quote(&wrap.cwd)));
    }
    line.push_str(cmd);
    if !wrap.sudo {
        return Ok(line);
    }
    let sudo = if wrap.as_user.is_empty() {
        "sudo".to_owned()
    } else {
        format!("sudo -u {}", quote(&wrap.as_user))
    };
    // A lone command needs no shell of its own.
    if wrap.env.is_empty() && wrap.cwd.is_empty() {
        return Ok(format!("{sudo} {cmd}"));
    }
    Ok(format!("{sudo} sh -c {}", quote(&line)))
}

/// A mode as SCP's header writes it (four octal digits), from "0644", "644" or "755".
///
/// # Errors
/// Not an octal permission.
pub fn scp_mode(mode: &str) -> Result<String, String> {
    let digits = mode.strip_prefix("0o").unwrap_or(mode);
    match u32::from_str_radix(digits, 8) {
        Ok(m) if !digits.is_empty() && m <= 0o7777 => Ok(format!("{m:04o}")),
        _ => Err(format!(
            "mode {mode:?} is not an octal file mode such as \"0644\""
        )),
    }
}

/// An SCP file header, `C<mode> <size> <name>`, without its newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub mode: String,
    pub size: u64,
    pub name: String,
}

impl Header {
    /// Reads a header line (its leading `C` included).
    ///
    /// # Errors
    /// Anything else, quoted.
    pub fn parse(line: &str) -> Result<Header, String> {
        let bad = || format!("malformed SCP header {line:?}");
        let rest = line.strip_prefix('C').ok_or_else(bad)?;
        let mut parts = rest.splitn(3, ' ');
        let mode = parts.next().ok_or_else(bad)?;
        let size = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let name = parts.next().filter(|n| !n.is_empty()).ok_or_else(bad)?;
        if mode.is_empty() || !mode.chars().all(|c| c.is_digit(8)) {
            return Err(bad());
        }
        Ok(Header {
            mode: mode.to_owned(),
            size,
            name: name.to_owned(),
        })
    }

    pub fn line(&self) -> String {
        format!("C{} {} {}\n", self.mode, self.size, self.name)
    }
}

/// The path an `scp -t PATH` / `scp -f PATH` command names (quoted as [`quote`] quotes).
pub fn scp_target(cmd: &str, flag: &str) -> Option<String> {
    let rest = cmd
        .strip_prefix("scp ")?
        .strip_prefix(flag)?
        .strip_prefix(' ')?;
    Some(unquote(rest))
}

/// Undoes [`quote`].
fn unquote(word: &str) -> String {
    match word.strip_prefix('\'').and_then(|w| w.strip_suffix('\'')) {
        Some(inner) => inner.replace(r"'\''", "'"),
        None => word.to_owned(),
    }
}
