//! Running a command in a container through the API server's `exec` subresource (a
//! websocket), collecting its output and exit code.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::AttachParams;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::pods::{self, PodRef};

/// How much of stdout or stderr one call keeps, so a chatty command cannot exhaust memory.
pub const MAX_OUTPUT: usize = 64 << 20;

/// Why a command could not be run (a command that ran and failed is an [`Output`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Pod(#[from] pods::Error),
    #[error("exec in {target}: {}", describe(source))]
    Start {
        target: String,
        #[source]
        source: kube::Error,
    },
    #[error("exec in {target}: reading {stream}: {source}")]
    Read {
        target: String,
        stream: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("exec in {target}: writing stdin: {source}")]
    Write {
        target: String,
        #[source]
        source: std::io::Error,
    },
    #[error("exec in {target}: {stream} is over {limit} bytes")]
    Overflow {
        target: String,
        stream: &'static str,
        limit: usize,
    },
    #[error("exec in {target}: {message}")]
    Run { target: String, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a finished command left.
#[derive(Debug, Default)]
pub struct Output {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i64,
}

/// The API server's answer in a message: `<message> (<code>)`.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}

/// Runs `command` (argv) in the pod's container, feeding it `stdin` if given.
///
/// # Errors
/// The API server or kubelet refusing the exec, a broken stream, output over `limit`,
/// or the runtime failing to start the command (a missing binary, for one).
pub async fn run(
    pod: &PodRef,
    command: &[String],
    stdin: Option<Vec<u8>>,
    limit: usize,
) -> Result<Output> {
    let target = pod.display();
    let params = AttachParams::default()
        .container(pod.container.clone())
        .stdin(stdin.is_some())
        .stdout(true)
        .stderr(true);
    let mut proc = pod
        .streaming
        .exec(&pod.name, command.to_vec(), &params)
        .await
        .map_err(|source| Error::Start {
            target: target.clone(),
            source,
        })?;
    let status = proc.take_status();
    let (input, stdout, stderr) = (proc.stdin(), proc.stdout(), proc.stderr());
    let write = async {
        if let (Some(mut w), Some(data)) = (input, stdin) {
            w.write_all(&data).await?;
            w.shutdown().await?;
        }
        Ok::<_, std::io::Error>(())
    };
    let (out, err, written) = tokio::join!(
        read_capped(stdout, limit, &target, "stdout"),
        read_capped(stderr, limit, &target, "stderr"),
        write,
    );
    let (stdout, stderr) = (out?, err?);
    written.map_err(|source| Error::Write {
        target: target.clone(),
        source,
    })?;
    let status = match status {
        Some(s) => s.await,
        None => None,
    };
    // The message loop has finished once both streams ended; its own error is the
    // status already read, or a dropped connection the missing status reports.
    let _ = proc.join().await;
    let exit_code = exit_code(status.as_ref()).map_err(|message| Error::Run {
        target: target.clone(),
        message,
    })?;
    Ok(Output {
        stdout,
        stderr,
        exit_code,
    })
}

async fn read_capped(
    reader: Option<impl AsyncRead + Unpin>,
    limit: usize,
    target: &str,
    stream: &'static str,
) -> Result<Vec<u8>> {
    let Some(reader) = reader else {
        return Ok(Vec::new());
    };
    let mut buf = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(&mut buf)
        .await
        .map_err(|source| Error::Read {
            target: target.to_owned(),
            stream,
            source,
        })?;
    if buf.len() > limit {
        return Err(Error::Overflow {
            target: target.to_owned(),
            stream,
            limit,
        });
    }
    Ok(buf)
}

/// The exit code in the status the kubelet sends when the command ends: Success is 0,
/// a non-zero exit is a `NonZeroExitCode` failure whose `ExitCode` cause holds the code.
///
/// # Errors
/// No status at all, or a failure that is not an exit code (the command did not start).
pub fn exit_code(status: Option<&Status>) -> Result<i64, String> {
    let Some(status) = status else {
        return Err("the connection closed before the command's exit status arrived".into());
    };
    if status.status.as_deref() == Some("Success") {
        return Ok(0);
    }
    if status.reason.as_deref() == Some("NonZeroExitCode") {
        let code = status
            .details
            .iter()
            .flat_map(|d| d.causes.iter().flatten())
            .find(|c| c.reason.as_deref() == Some("ExitCode"))
            .and_then(|c| c.message.as_deref()?.parse().ok());
        if let Some(code) = code {
            return Ok(code);
        }
    }
    match status.message.as_deref() {
        Some(m) if !m.is_empty() => Err(m.to_owned()),
        _ => Err(format!(
            "the command failed ({})",
            status.reason.as_deref().unwrap_or("no reason given")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(v: serde_json::Value) -> Status {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn exit_codes_come_from_the_status() {
        assert_eq!(
            exit_code(Some(&status(serde_json::json!({"status": "Success"})))),
            Ok(0)
        );
        let failed = status(serde_json::json!({
            "status": "Failure", "reason": "NonZeroExitCode",
            "message": "command terminated with non-zero exit code",
            "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
        }));
        assert_eq!(exit_code(Some(&failed)), Ok(3));
        let not_started = status(serde_json::json!({
            "status": "Failure", "reason": "InternalError",
            "message": "exec: \"nope\": executable file not found in $PATH",
        }));
        assert!(
            exit_code(Some(&not_started))
                .unwrap_err()
                .contains("executable file not found")
        );
        assert!(exit_code(None).unwrap_err().contains("exit status"));
    }
}
