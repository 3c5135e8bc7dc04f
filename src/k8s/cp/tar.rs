//! The tar subset `k8s.cp` exchanges with `tar` in a container: regular files and
//! directories, long names as GNU `L` records (GNU tar and busybox read and write them)
//! and pax `path` records on read. Links and devices are counted and skipped, as a copy
//! must not create them from a container's say-so.
//!
//! Hand-written rather than the `tar` crate: this is about 200 lines and the crate would
//! be a new dependency for one call.

const BLOCK: usize = 512;
const NAME_LEN: usize = 100;

/// Why an archive could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading the archive at byte {offset}: {reason}")]
    Read { offset: usize, reason: String },
    #[error("archiving {path:?}: {reason}")]
    Write { path: String, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    File(Vec<u8>),
    Dir,
}

/// One archive member, its path relative and `/`-separated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub mode: u32,
    pub body: Body,
}

/// An archive's entries and how many members were skipped (links, devices, fifos).
#[derive(Debug, Default)]
pub struct Archive {
    pub entries: Vec<Entry>,
    pub skipped: usize,
}

/// Writes `entries` as a tar archive.
///
/// # Errors
/// A path that is empty or not relative.
pub fn write(entries: &[Entry]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for e in entries {
        if e.path.is_empty() || e.path.starts_with('/') {
            return Err(Error::Write {
                path: e.path.clone(),
                reason: "not a relative path".into(),
            });
        }
        let (flag, data): (u8, &[u8]) = match &e.body {
            Body::File(d) => (b'0', d),
            Body::Dir => (b'5', &[]),
        };
        let mut name = e.path.clone();
        if e.body == Body::Dir && !name.ends_with('/') {
            name.push('/');
        }
        if name.len() > NAME_LEN {
            let mut long = name.as_bytes().to_vec();
            long.push(0);
            push_member(&mut out, "././@LongLink", 0o644, b'L', &long);
        }
        push_member(&mut out, &name, e.mode & 0o7777, flag, data);
    }
    out.resize(out.len() + 2 * BLOCK, 0);
    Ok(out)
}

fn push_member(out: &mut Vec<u8>, name: &str, mode: u32, flag: u8, data: &[u8]) {
    let mut h = [0u8; BLOCK];
    let name = name.as_bytes();
    let n = name.len().min(NAME_LEN);
    h[..n].copy_from_slice(&name[..n]);
    octal(&mut h[100..108], u64::from(mode));
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], data.len() as u64);
    octal(&mut h[136..148], 0);
    h[156] = flag;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    octal(&mut h[148..155], u64::from(sum));
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    let pad = (BLOCK - data.len() % BLOCK) % BLOCK;
    out.resize(out.len() + pad, 0);
}

/// Zero-padded octal, NUL-terminated, filling `field`.
fn octal(field: &mut [u8], value: u64) {
    let digits = field.len() - 1;
    let s = format!("{value:0digits$o}");
    let s = &s.as_bytes()[s.len().saturating_sub(digits)..];
    field[..digits].copy_from_slice(s);
    field[digits] = 0;
}

/// Reads the members of a tar archive.
///
/// # Errors
/// A truncated archive, a bad checksum or number, or a member too large to hold.
pub fn read(data: &[u8]) -> Result<Archive> {
    let mut archive = Archive::default();
    let mut offset = 0;
    let mut long_name: Option<String> = None;
    while offset + BLOCK <= data.len() {
        let h = &data[offset..offset + BLOCK];
        if h.iter().all(|&b| b == 0) {
            break;
        }
        let fail = |reason: String| Error::Read { offset, reason };
        let stored = parse_octal(&h[148..156]).ok_or_else(|| fail("bad checksum field".into()))?;
        let sum: u64 = h
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u64::from(b)
                }
            })
            .sum();
        if stored != sum {
            return Err(fail("checksum mismatch (not a tar archive?)".into()));
        }
        let size = parse_octal(&h[124..136]).ok_or_else(|| fail("bad size field".into()))?;
        let size = usize::try_from(size).map_err(|_| fail("member too large".into()))?;
        let start = offset + BLOCK;
        let end = start
            .checked_add(size)
            .filter(|&e| e <= data.len())
            .ok_or_else(|| fail(format!("truncated: a member of {size} bytes")))?;
        let body = &data[start..end];
        offset = start + size.div_ceil(BLOCK) * BLOCK;
        let flag = h[156];
        match flag {
            b'L' => {
                long_name = Some(c_string(body));
                continue;
            }
            b'x' => {
                if let Some(p) = pax_path(body) {
                    long_name = Some(p);
                }
                continue;
            }
            b'g' => continue,
            _ => {}
        }
        let path = long_name.take().unwrap_or_else(|| header_name(h));
        let mode = u32::try_from(parse_octal(&h[100..108]).unwrap_or(0o644)).unwrap_or(0o644);
        let body = match flag {
            b'0' | 0 | b'7' => Body::File(body.to_vec()),
            b'5' => Body::Dir,
            _ => {
                archive.skipped += 1;
                continue;
            }
        };
        let path = path.trim_end_matches('/').to_owned();
        archive.entries.push(Entry { path, mode, body });
    }
    Ok(archive)
}

/// The name of a ustar header: `prefix/name` when the prefix is set.
fn header_name(h: &[u8]) -> String {
    let name = c_string(&h[..NAME_LEN]);
    let prefix = if &h[257..262] == b"ustar" {
        c_string(&h[345..500])
    } else {
        String::new()
    };
    if prefix.is_empty() {
        name
    } else {
        format!("{prefix}/{name}")
    }
}

fn c_string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn parse_octal(field: &[u8]) -> Option<u64> {
    let s = c_string(field);
    let s = s.trim_matches(|c: char| c == ' ' || c == '\0');
    if s.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(s, 8).ok()
}

/// The `path` of pax extended-header records (`<len> <key>=<value>\n`).
fn pax_path(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    text.lines()
        .filter_map(|rec| rec.split_once(' ').map(|(_, kv)| kv))
        .find_map(|kv| kv.strip_prefix("path=").map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, data: &[u8]) -> Entry {
        Entry {
            path: path.into(),
            mode: 0o640,
            body: Body::File(data.to_vec()),
        }
    }

    #[test]
    fn entries_round_trip() {
        let long = format!("d/{}", "x".repeat(150));
        let entries = vec![
            Entry {
                path: "d".into(),
                mode: 0o755,
                body: Body::Dir,
            },
            file("d/a.txt", b"hello\n"),
            file("d/empty", b""),
            file(&long, &[7u8; 1000]),
        ];
        let bytes = write(&entries).unwrap();
        assert_eq!(bytes.len() % BLOCK, 0);
        let back = read(&bytes).unwrap();
        assert_eq!(back.entries, entries);
        assert_eq!(back.skipped, 0);
    }

    #[test]
    fn links_are_skipped_and_pax_paths_read() {
        let mut bytes = Vec::new();
        push_member(&mut bytes, "link", 0o777, b'2', b"");
        push_member(
            &mut bytes,
            "PaxHeaders/f",
            0o644,
            b'x',
            b"30 path=a/very/long/path.txt\n",
        );
        push_member(&mut bytes, "short", 0o600, b'0', b"data");
        let back = read(&bytes).unwrap();
        assert_eq!(back.skipped, 1);
        assert_eq!(back.entries.len(), 1);
        assert_eq!(back.entries[0].path, "a/very/long/path.txt");
    }

    #[test]
    fn damage_is_reported_with_its_offset() {
        let mut bytes = write(&[file("a", b"abc")]).unwrap();
        bytes[0] = b'b';
        let err = read(&bytes).unwrap_err().to_string();
        assert!(err.contains("byte 0") && err.contains("checksum"), "{err}");
        let bytes = write(&[file("a", &[1u8; 2000])]).unwrap();
        let err = read(&bytes[..1024]).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
        assert!(
            read(
                b"not a tar archive at all but long enough?"
                    .repeat(20)
                    .as_slice()
            )
            .is_err()
        );
    }
}
