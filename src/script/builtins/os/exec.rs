//! `os.exec` / `os.try_exec`: running a program with a timeout and capped output, on
//! the runtime, while the script's thread waits under its time budget.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use starlark::eval::Evaluator;
use starlark::values::dict::UnpackDictEntries;
use starlark::values::none::NoneOr;
use starlark::values::structs::AllocStruct;
use starlark::values::{Heap, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::{Overlay, text_of};
use crate::script::budget;
use crate::script::host::Host;
use crate::script::permissions::Access;

/// The most of stdout, and of stderr, kept from one program: beyond it the program is
/// killed, so a runaway one cannot exhaust kite's memory.
pub(super) const OUTPUT_CAP: usize = 16 << 20;

/// How long a program may run unless the script says otherwise (upstream's default).
const DEFAULT_TIMEOUT: Duration = Duration::from_mins(1);

/// What to run, and how.
#[derive(Debug)]
pub(super) struct Options {
    program: String,
    args: Vec<String>,
    /// What messages call it: the command line as the script wrote it.
    shown: String,
    env: Vec<(String, String)>,
    cwd: Option<String>,
    timeout: Duration,
    uid: Option<u32>,
    gid: Option<u32>,
    input: Option<Vec<u8>>,
}

/// The shell a command line runs in unless `shell=` names another (upstream's).
const SHELL: &str = "/bin/sh";

impl Options {
    /// Reads the arguments of `os.exec` / `os.try_exec`.
    ///
    /// # Errors
    /// A bad argument, named with `call`.
    #[expect(
        clippy::too_many_arguments,
        reason = "upstream's signature, one argument each"
    )]
    pub(super) fn unpack<'v>(
        call: &str,
        cmd: &str,
        args: &[Value<'v>],
        shell: NoneOr<&str>,
        env: NoneOr<UnpackDictEntries<&str, Value<'v>>>,
        cwd: NoneOr<&str>,
        timeout: NoneOr<Value<'v>>,
        userid: NoneOr<Value<'v>>,
        groupid: NoneOr<Value<'v>>,
        input: NoneOr<Value<'v>>,
        output: NoneOr<Value<'v>>,
    ) -> anyhow::Result<Options> {
        if cmd.trim().is_empty() {
            anyhow::bail!("{call}: no command given");
        }
        let shown: String = if cmd.chars().count() > 200 {
            cmd.chars().take(200).chain("...".chars()).collect()
        } else {
            cmd.to_owned()
        };
        // A command line runs in a shell, as upstream runs it (`sh -c "echo $HOME"`);
        // with `args` (kite's addition) the program runs directly, with no shell.
        let (program, args) = if args.is_empty() {
            let shell = shell
                .into_option()
                .filter(|s| !s.is_empty())
                .unwrap_or(SHELL);
            (shell.to_owned(), vec!["-c".to_owned(), cmd.to_owned()])
        } else {
            if shell.into_option().is_some() {
                anyhow::bail!(
                    "{call}: shell= runs a command line; with args the program {cmd:?} runs directly"
                );
            }
            (cmd.to_owned(), args.iter().map(|a| text_of(*a)).collect())
        };
        if output.into_option().is_some() {
            anyhow::bail!(
                "{call}: output= streams are not supported by kite (it has no reader or writer values); use the returned stdout"
            );
        }
        let env = env.into_option().map_or_else(Vec::new, |e| {
            e.entries
                .into_iter()
                .map(|(k, v)| (k.to_owned(), text_of(v)))
                .collect()
        });
        let timeout = match timeout.into_option() {
            None => DEFAULT_TIMEOUT,
            Some(v) => duration(v).map_err(|e| anyhow::anyhow!("{call}: timeout: {e}"))?,
        };
        Ok(Options {
            program,
            args,
            shown,
            env,
            cwd: cwd.into_option().map(str::to_owned),
            timeout,
            uid: id(call, "userid", userid)?,
            gid: id(call, "groupid", groupid)?,
            input: input
                .into_option()
                .map(|v| bytes(v).map_err(|e| anyhow::anyhow!("{call}: input: {e}")))
                .transpose()?,
        })
    }
}

/// A duration as upstream takes it: "90s", "2m", or a number of seconds.
fn duration(v: Value<'_>) -> Result<Duration, String> {
    if let Some(s) = v.unpack_str() {
        return crate::duration::parse(s).map_err(|e| e.to_string());
    }
    if let Some(n) = v.unpack_i32() {
        return u64::try_from(n)
            .map(Duration::from_secs)
            .map_err(|_| format!("{n} is negative"));
    }
    Err(format!(
        "expected a duration like \"30s\" or seconds, not {}",
        v.get_type()
    ))
}

/// A numeric user or group id (upstream also takes names; kite does not look them up).
fn id(call: &str, what: &str, v: NoneOr<Value<'_>>) -> anyhow::Result<Option<u32>> {
    let Some(v) = v.into_option() else {
        return Ok(None);
    };
    let parsed = match v.unpack_str() {
        Some(s) => s.trim().parse::<u32>().ok(),
        None => v.unpack_i32().and_then(|n| u32::try_from(n).ok()),
    };
    parsed.map(Some).ok_or_else(|| {
        anyhow::anyhow!("{call}: {what} {v} is not a numeric id (kite does not look up names)")
    })
}

/// Bytes for a program's stdin or a file: `bytes`, a string, or a list of integers
/// 0..255.
pub(crate) fn bytes(v: Value<'_>) -> Result<Vec<u8>, String> {
    if let Some(b) =
        starlark::values::ValueLike::downcast_ref::<starlark::values::bytes::StarlarkBytes>(v)
    {
        return Ok(b.as_bytes().to_vec());
    }
    if let Some(s) = v.unpack_str() {
        return Ok(s.as_bytes().to_vec());
    }
    let list = starlark::values::list::ListRef::from_value(v).ok_or_else(|| {
        format!(
            "expected bytes, a string or a list of integers 0..255, not {}",
            v.get_type()
        )
    })?;
    list.content()
        .iter()
        .enumerate()
        .map(|(i, b)| {
            b.unpack_i32()
                .and_then(|n| u8::try_from(n).ok())
                .ok_or_else(|| format!("item {i} ({b}) is not an integer 0..255"))
        })
        .collect()
}

/// What a finished program left.
#[derive(Debug)]
pub(super) struct Captured {
    /// The exit code, or 128 + the signal that killed it (as shells report it).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The program `name` names: a path (against the script's directory) when it has a
/// slash, else the first executable of that name on `$PATH` as the script sees it.
pub(super) fn find_program(overlay: &Overlay, name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let path = overlay.resolve(Path::new(name));
        return is_executable(&path).then_some(path);
    }
    let path = overlay.var("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| overlay.resolve(&dir).join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs the program, waiting under the script's budget.
///
/// # Errors
/// The permission, a program that cannot be found or started, the timeout, or output
/// beyond [`OUTPUT_CAP`], each naming `call` and the program.
pub(super) fn run(
    eval: &Evaluator<'_, '_, '_>,
    call: &str,
    opts: Options,
) -> anyhow::Result<Captured> {
    let host = Host::of(eval)?;
    host.allow(call, Access::Exec)?;
    let overlay = host.ext::<Overlay>();
    let program = find_program(&overlay, &opts.program).ok_or_else(|| {
        anyhow::anyhow!(
            "{call}: program {:?} not found (or not executable)",
            opts.program
        )
    })?;
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(&opts.args)
        .envs(overlay.vars())
        .envs(opts.env.iter().map(|(k, v)| (k, v)))
        .stdin(if opts.input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let dir = match &opts.cwd {
        Some(dir) => Some(overlay.resolve(Path::new(dir))),
        None => overlay.cwd().ok(),
    };
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    if let Some(uid) = opts.uid {
        cmd.uid(uid);
    }
    if let Some(gid) = opts.gid {
        cmd.gid(gid);
    }
    let shown = opts.shown.clone();
    let (timeout, input) = (opts.timeout, opts.input);
    let waited = budget::block_on(&host.runtime, async move {
        tokio::time::timeout(timeout, supervise(cmd, input))
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "timed out after {} and was killed",
                    crate::duration::format(timeout)
                ))
            })
    });
    match waited {
        Ok(Ok(captured)) => Ok(captured),
        Ok(Err(e)) => Err(anyhow::anyhow!("{call}: {shown}: {e}")),
        Err(e) => Err(anyhow::anyhow!("{call}: {shown}: {e}")),
    }
}

/// Starts the program, feeds its stdin, and collects its output until it exits.
/// Dropping the future (timeout, budget) kills the program.
async fn supervise(
    mut cmd: tokio::process::Command,
    input: Option<Vec<u8>>,
) -> Result<Captured, String> {
    let mut child = cmd.spawn().map_err(|e| format!("cannot start: {e}"))?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let feed = async move {
        if let (Some(mut w), Some(data)) = (stdin, input) {
            // A program that exits without reading all of its input is not an error.
            let _ = w.write_all(&data).await;
        }
        Ok::<(), String>(())
    };
    let ((), out, err) =
        tokio::try_join!(feed, collect(stdout, "stdout"), collect(stderr, "stderr"))?;
    let status = child
        .wait()
        .await
        .map_err(|e| format!("waiting for it: {e}"))?;
    let code = status.code().unwrap_or_else(|| {
        use std::os::unix::process::ExitStatusExt;
        128 + status.signal().unwrap_or(0)
    });
    Ok(Captured {
        code,
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
    })
}

async fn collect(stream: Option<impl AsyncRead + Unpin>, name: &str) -> Result<Vec<u8>, String> {
    let Some(stream) = stream else {
        return Ok(Vec::new());
    };
    let mut buf = Vec::new();
    let cap = u64::try_from(OUTPUT_CAP).unwrap_or(u64::MAX);
    stream
        .take(cap + 1)
        .read_to_end(&mut buf)
        .await
        .map_err(|e| format!("reading its {name}: {e}"))?;
    if buf.len() > OUTPUT_CAP {
        return Err(format!(
            "wrote more than {} MiB to {name} and was killed",
            OUTPUT_CAP >> 20
        ));
    }
    Ok(buf)
}

/// `exec`: the program's stdout, or an error when it exits non-zero.
///
/// # Errors
/// As [`run`], and a non-zero exit with the code and the end of stderr.
pub(super) fn run_checked(
    eval: &Evaluator<'_, '_, '_>,
    call: &str,
    opts: Options,
) -> anyhow::Result<String> {
    let program = opts.shown.clone();
    let captured = run(eval, call, opts)?;
    if captured.code != 0 {
        let stderr = captured.stderr.trim();
        let tail: String = {
            let chars: Vec<char> = stderr.chars().collect();
            chars[chars.len().saturating_sub(2000)..].iter().collect()
        };
        anyhow::bail!(
            "{call}: {program} exited with code {}{}",
            captured.code,
            if tail.is_empty() {
                String::new()
            } else {
                format!(": {tail}")
            }
        );
    }
    Ok(captured.stdout)
}

/// `try_exec`: `.stdout`, `.stderr`, `.code` (also `.exit_code`), `.ok`, `.error`;
/// a program that could not run at all has code -1 and the reason in `.error`.
///
/// # Errors
/// Only a missing host (a bug); every failure of the program is in the result.
pub(super) fn run_captured<'v>(
    eval: &Evaluator<'v, '_, '_>,
    call: &str,
    opts: Options,
) -> anyhow::Result<Value<'v>> {
    let program = opts.shown.clone();
    let heap = eval.heap();
    Ok(match run(eval, call, opts) {
        Ok(c) => {
            let error = if c.code == 0 {
                String::new()
            } else {
                format!("{call}: {program} exited with code {}", c.code)
            };
            exec_result(heap, c.code, &c.stdout, &c.stderr, &error)
        }
        Err(e) => exec_result(heap, -1, "", "", &format!("{e:#}")),
    })
}

fn exec_result<'v>(
    heap: Heap<'v>,
    code: i32,
    stdout: &str,
    stderr: &str,
    error: &str,
) -> Value<'v> {
    heap.alloc(AllocStruct([
        ("stdout", heap.alloc(stdout)),
        ("stderr", heap.alloc(stderr)),
        ("code", heap.alloc(code)),
        // The spelling of upstream's guide, beside the reference's `code`.
        ("exit_code", heap.alloc(code)),
        ("ok", Value::new_bool(code == 0)),
        ("error", heap.alloc(error)),
    ]))
}
