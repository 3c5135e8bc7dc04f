//! `k8s.cp`: copying files to and from a container as kubectl does, by running `tar` in
//! it over `exec` and packing or unpacking the archive locally.

pub mod tar;

use std::path::{Component, Path, PathBuf};

use self::tar::{Body, Entry};
use super::exec::{self, MAX_OUTPUT};
use super::pods::PodRef;

/// Why a copy failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    ParseSpec(String),
    #[error(transparent)]
    Pod(#[from] super::pods::Error),
    #[error(transparent)]
    Exec(#[from] exec::Error),
    #[error("tar in {target} exited with {code}: {stderr}")]
    RemoteTar {
        target: String,
        code: i64,
        stderr: String,
    },
    #[error(transparent)]
    Archive(#[from] tar::Error),
    #[error("{path}: {source}")]
    Local {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the archive from the pod holds {0:?}, which would land outside the destination")]
    UnsafePath(String),
    #[error("{0} does not exist in the pod (the archive was empty)")]
    Missing(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which way a copy goes, with the container path and the local one.
#[derive(Debug, PartialEq, Eq)]
pub enum Direction {
    FromPod { remote: String, local: String },
    ToPod { local: String, remote: String },
}

/// Reads `src` and `dst`: exactly one is `pod:path` (the pod part may be empty or must
/// be `pod`).
///
/// # Errors
/// Both or neither naming the pod, another pod's name, or an empty path.
pub fn direction(pod: &str, src: &str, dst: &str) -> Result<Direction> {
    let remote = |spec: &str| -> Result<Option<String>> {
        let Some((name, path)) = spec.split_once(':') else {
            return Ok(None);
        };
        if !name.is_empty() && name != pod {
            return Err(Error::ParseSpec(format!(
                "{spec:?} names pod {name:?}, but the call is for pod {pod:?}"
            )));
        }
        if path.is_empty() {
            return Err(Error::ParseSpec(format!(
                "{spec:?} has no path after the colon"
            )));
        }
        Ok(Some(path.to_owned()))
    };
    match (remote(src)?, remote(dst)?) {
        (Some(_), Some(_)) => Err(Error::ParseSpec(
            "cannot copy between two pod paths; one of src and dst must be local".into(),
        )),
        (None, None) => Err(Error::ParseSpec(
            "one of src and dst must be pod:path (e.g. \"web-1:/etc/app.conf\")".into(),
        )),
        (Some(remote), None) if !dst.is_empty() => Ok(Direction::FromPod {
            remote,
            local: dst.to_owned(),
        }),
        (None, Some(remote)) if !src.is_empty() => Ok(Direction::ToPod {
            local: src.to_owned(),
            remote,
        }),
        _ => Err(Error::ParseSpec("the local path is empty".into())),
    }
}

/// The parent directory and last component of a container path (`/a/b` → `/a`, `b`).
fn split_remote(path: &str) -> (String, String) {
    let trimmed = path.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some(("", base)) => ("/".into(), base.into()),
        Some((dir, base)) => (dir.into(), base.into()),
        None => (".".into(), trimmed.into()),
    }
}

/// Copies `remote` out of the container to `local` (a file, or a directory's
/// contents into `local`); returns how many files were written.
///
/// # Errors
/// `tar` failing in the container, an unsafe archive, or a local write failing.
pub async fn download(pod: &PodRef, remote: &str, local: &str) -> Result<usize> {
    let (dir, base) = split_remote(remote);
    let command = ["tar", "cf", "-", "-C", &dir, &base].map(str::to_owned);
    let out = exec::run(pod, &command, None, MAX_OUTPUT).await?;
    if out.exit_code != 0 {
        return Err(remote_failure(pod, &out));
    }
    let archive = tar::read(&out.stdout)?;
    if archive.entries.is_empty() {
        return Err(Error::Missing(remote.to_owned()));
    }
    let mut target = PathBuf::from(local);
    let single_file = matches!(archive.entries.as_slice(), [e] if matches!(e.body, Body::File(_)));
    if single_file && target.is_dir() {
        target.push(&base);
    }
    let mut files = 0;
    for entry in &archive.entries {
        let rel = if entry.path == base {
            ""
        } else {
            entry
                .path
                .strip_prefix(&format!("{base}/"))
                .ok_or_else(|| Error::UnsafePath(entry.path.clone()))?
        };
        let path = safe_join(&target, rel).ok_or_else(|| Error::UnsafePath(entry.path.clone()))?;
        let local_err = |source| Error::Local {
            path: path.display().to_string(),
            source,
        };
        match &entry.body {
            Body::Dir => std::fs::create_dir_all(&path).map_err(local_err)?,
            Body::File(data) => {
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent).map_err(local_err)?;
                }
                std::fs::write(&path, data).map_err(local_err)?;
                files += 1;
            }
        }
    }
    Ok(files)
}

/// Copies the local file or directory `local` into the container at `remote` (a path
/// ending in `/` means into that directory); returns how many files were sent.
///
/// # Errors
/// A local read failing, or `tar` failing in the container (a missing directory, no
/// `tar` binary, a read-only filesystem).
pub async fn upload(pod: &PodRef, local: &str, remote: &str) -> Result<usize> {
    let (dir, base) = if remote.ends_with('/') {
        let name = Path::new(local)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| Error::ParseSpec(format!("{local:?} has no file name")))?;
        (remote.trim_end_matches('/').to_owned(), name)
    } else {
        split_remote(remote)
    };
    let dir = if dir.is_empty() { "/".to_owned() } else { dir };
    let mut entries = Vec::new();
    collect(Path::new(local), &base, &mut entries)?;
    let files = entries
        .iter()
        .filter(|e| matches!(e.body, Body::File(_)))
        .count();
    let archive = tar::write(&entries)?;
    let command = ["tar", "xmf", "-", "-C", &dir].map(str::to_owned);
    let out = exec::run(pod, &command, Some(archive), MAX_OUTPUT).await?;
    if out.exit_code != 0 {
        return Err(remote_failure(pod, &out));
    }
    Ok(files)
}

fn remote_failure(pod: &PodRef, out: &exec::Output) -> Error {
    Error::RemoteTar {
        target: pod.display(),
        code: out.exit_code,
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    }
}

/// Adds `path` (file or directory, recursively) to `out` under the archive name `name`.
/// Symlinks are followed as kubectl does; other special files are refused.
fn collect(path: &Path, name: &str, out: &mut Vec<Entry>) -> Result<()> {
    let local_err = |source| Error::Local {
        path: path.display().to_string(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(local_err)?;
    let mode = mode_of(&meta);
    if meta.is_dir() {
        out.push(Entry {
            path: name.to_owned(),
            mode,
            body: Body::Dir,
        });
        let mut children: Vec<_> = std::fs::read_dir(path)
            .map_err(local_err)?
            .collect::<Result<_, _>>()
            .map_err(local_err)?;
        children.sort_by_key(std::fs::DirEntry::file_name);
        for child in children {
            let child_name = format!("{name}/{}", child.file_name().to_string_lossy());
            collect(&child.path(), &child_name, out)?;
        }
    } else if meta.is_file() {
        let data = std::fs::read(path).map_err(local_err)?;
        out.push(Entry {
            path: name.to_owned(),
            mode,
            body: Body::File(data),
        });
    } else {
        return Err(local_err(std::io::Error::other(
            "not a regular file or directory",
        )));
    }
    Ok(())
}

#[cfg(unix)]
fn mode_of(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o7777
}

#[cfg(not(unix))]
fn mode_of(meta: &std::fs::Metadata) -> u32 {
    if meta.is_dir() { 0o755 } else { 0o644 }
}

/// `base/rel` if `rel` stays inside `base` (no absolute part, no `..`).
fn safe_join(base: &Path, rel: &str) -> Option<PathBuf> {
    let mut out = base.to_path_buf();
    for c in Path::new(rel).components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pod_side_sets_the_direction() {
        assert_eq!(
            direction("web", "web:/var/log/a.log", "./a.log").unwrap(),
            Direction::FromPod {
                remote: "/var/log/a.log".into(),
                local: "./a.log".into()
            }
        );
        assert_eq!(
            direction("web", "conf", ":/etc/conf").unwrap(),
            Direction::ToPod {
                local: "conf".into(),
                remote: "/etc/conf".into()
            }
        );
        let msg = |r: Result<Direction>| r.unwrap_err().to_string();
        assert!(msg(direction("web", "a", "b")).contains("pod:path"));
        assert!(msg(direction("web", "web:/a", "web:/b")).contains("two pod paths"));
        assert!(msg(direction("web", "db:/a", "b")).contains("names pod \"db\""));
        assert!(msg(direction("web", "web:", "b")).contains("no path"));
    }

    #[test]
    fn remote_paths_split_into_directory_and_name() {
        assert_eq!(
            split_remote("/var/log/a.log"),
            ("/var/log".into(), "a.log".into())
        );
        assert_eq!(split_remote("/etc/"), ("/".into(), "etc".into()));
        assert_eq!(split_remote("rel"), (".".into(), "rel".into()));
    }

    #[test]
    fn archive_paths_cannot_escape() {
        let base = Path::new("/tmp/x");
        assert_eq!(safe_join(base, "a/b"), Some(PathBuf::from("/tmp/x/a/b")));
        assert_eq!(safe_join(base, ""), Some(PathBuf::from("/tmp/x")));
        assert_eq!(safe_join(base, "../etc/passwd"), None);
        assert_eq!(safe_join(base, "/etc/passwd"), None);
    }

    #[test]
    fn a_local_tree_is_archived_under_the_remote_name() {
        let dir = std::env::temp_dir().join(format!("kite-cp-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("a.txt"), b"a").unwrap();
        std::fs::write(dir.join("sub/b.txt"), b"bb").unwrap();
        let mut entries = Vec::new();
        collect(&dir, "conf", &mut entries).unwrap();
        let names: Vec<_> = entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(names, ["conf", "conf/a.txt", "conf/sub", "conf/sub/b.txt"]);
        let back = tar::read(&tar::write(&entries).unwrap()).unwrap();
        assert_eq!(back.entries, entries);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
