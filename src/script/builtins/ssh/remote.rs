//! The work done on each host (a command, an SCP upload or download), and running it
//! on every host at once or one after another (`exec_policy`). This runs on the
//! runtime; the script's thread waits for it ([`super::pump`]).

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use russh::ChannelMsg;
use tokio::io::AsyncReadExt;

use super::command::{self, Header};
use super::dial::{Dialer, split_host_port};
use super::incoming::Incoming;

/// The most of stdout or stderr one command may return.
pub const MAX_OUTPUT: usize = 16 << 20;
/// Hosts worked on at once under the concurrent policy.
const AT_ONCE: usize = 32;

/// What a command did on one host.
#[derive(Debug)]
pub struct Ran {
    pub stdout: String,
    pub stderr: String,
    pub code: i64,
}

/// What to do on each host.
#[derive(Clone)]
pub enum Job {
    Exec(String),
    Upload {
        src: PathBuf,
        dst: String,
        mode: String,
    },
    Download {
        src: String,
        /// The local path; with several hosts, `<dst>.<host>` each (as upstream).
        dst: PathBuf,
    },
}

/// One host's outcome: a command's, or the bytes a transfer moved.
pub enum Done {
    Ran(Ran),
    Moved(u64),
}

/// Runs `job` on every host; the first failure (in host order) fails the call, naming
/// the host, as upstream does.
pub async fn on_all(dialer: Arc<Dialer>, job: Job) -> Result<Vec<Done>, String> {
    let hosts = dialer.settings.hosts.clone();
    let many = hosts.len() > 1;
    let work = hosts.into_iter().map(|host| {
        let (dialer, job) = (dialer.clone(), job.clone());
        async move {
            let out = on_host(&dialer, &host, job, many).await;
            out.map_err(|e| format!("host {host}: {e}"))
        }
    });
    let outs: Vec<Result<Done, String>> = if dialer.settings.linear {
        let mut outs = Vec::new();
        for w in work {
            let out = w.await;
            let failed = out.is_err();
            outs.push(out);
            if failed {
                break;
            }
        }
        outs
    } else {
        futures::stream::iter(work)
            .buffered(AT_ONCE)
            .collect()
            .await
    };
    outs.into_iter().collect()
}

async fn on_host(dialer: &Dialer, host: &str, job: Job, many: bool) -> Result<Done, String> {
    let (name, port) = split_host_port(host, dialer.settings.port);
    // Open the local file before connecting: a missing file is not the host's fault.
    let upload = match &job {
        Job::Upload { src, .. } => Some(
            tokio::fs::File::open(src)
                .await
                .map_err(|e| format!("reading {}: {e}", src.display()))?,
        ),
        _ => None,
    };
    let conn = dialer.connect_to(&name, port).await?;
    let out = match job {
        Job::Exec(cmd) => exec(&conn.handle, &cmd).await.map(Done::Ran),
        Job::Upload { src, dst, mode } => {
            let file = upload.ok_or("internal error: no file")?;
            upload_file(&conn.handle, file, &src, &dst, &mode)
                .await
                .map(Done::Moved)
        }
        Job::Download { src, dst } => {
            let dst = if many {
                let mut d = dst.into_os_string();
                d.push(format!(".{host}"));
                PathBuf::from(d)
            } else {
                dst
            };
            download_file(&conn.handle, &src, &dst)
                .await
                .map(Done::Moved)
        }
    };
    conn.close().await;
    out
}

type Client = russh::client::Handle<super::dial::Verifier>;

async fn session(client: &Client, cmd: &str) -> Result<russh::Channel<russh::client::Msg>, String> {
    let ch = client
        .channel_open_session()
        .await
        .map_err(|e| format!("opening a session: {e}"))?;
    ch.exec(true, cmd)
        .await
        .map_err(|e| format!("starting the command: {e}"))?;
    Ok(ch)
}

/// Appends `data` to `buf`, refusing output past [`MAX_OUTPUT`].
fn keep(buf: &mut Vec<u8>, data: &[u8], which: &str) -> Result<(), String> {
    if buf.len() + data.len() > MAX_OUTPUT {
        return Err(format!("the command's {which} passed 16 MiB"));
    }
    buf.extend_from_slice(data);
    Ok(())
}

async fn exec(client: &Client, cmd: &str) -> Result<Ran, String> {
    let mut ch = session(client, cmd).await?;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let (mut code, mut signal) = (None, None);
    while let Some(msg) = ch.wait().await {
        match msg {
            ChannelMsg::Data { data } => keep(&mut out, &data, "stdout")?,
            ChannelMsg::ExtendedData { data, ext: 1 } => keep(&mut err, &data, "stderr")?,
            ChannelMsg::ExitStatus { exit_status } => code = Some(i64::from(exit_status)),
            ChannelMsg::ExitSignal { signal_name, .. } => signal = Some(signal_name),
            ChannelMsg::Failure => return Err("the server refused to run the command".into()),
            _ => {}
        }
    }
    let code = match (code, signal) {
        (Some(c), _) => c,
        // As a shell reports a command a signal ended: 128 + its number.
        (None, Some(sig)) => 128 + signal_number(&sig),
        (None, None) => return Err("the command ended without an exit status".into()),
    };
    Ok(Ran {
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
        code,
    })
}

fn signal_number(sig: &russh::Sig) -> i64 {
    use russh::Sig;
    match sig {
        Sig::HUP => 1,
        Sig::INT => 2,
        Sig::QUIT => 3,
        Sig::ILL => 4,
        Sig::ABRT => 6,
        Sig::FPE => 8,
        Sig::KILL => 9,
        Sig::USR1 => 10,
        Sig::SEGV => 11,
        Sig::PIPE => 13,
        Sig::ALRM => 14,
        Sig::TERM => 15,
        Sig::Custom(_) => 127,
    }
}

/// Sends `file` as `scp -t dst` expects it; the bytes sent.
async fn upload_file(
    client: &Client,
    mut file: tokio::fs::File,
    src: &std::path::Path,
    dst: &str,
    mode: &str,
) -> Result<u64, String> {
    let local = |e: std::io::Error| format!("reading {}: {e}", src.display());
    let size = file.metadata().await.map_err(local)?.len();
    let name = src.file_name().map_or_else(
        || "file".to_owned(),
        |n| n.to_string_lossy().replace('\n', " "),
    );
    let ch = session(client, &format!("scp -t {}", command::quote(dst))).await?;
    let (rx, tx) = ch.split();
    let mut incoming = Incoming::new(rx);
    let send = |e: russh::Error| format!("sending: {e}");
    incoming.ack().await?;
    let header = Header {
        mode: mode.to_owned(),
        size,
        name,
    };
    tx.data_bytes(header.line()).await.map_err(send)?;
    incoming.ack().await?;
    let mut sent = 0u64;
    let mut buf = vec![0u8; 32 * 1024];
    while sent < size {
        let want = usize::try_from(size - sent)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = file.read(&mut buf[..want]).await.map_err(local)?;
        if n == 0 {
            return Err(format!("{} shrank while it was sent", src.display()));
        }
        tx.data_bytes(buf[..n].to_vec()).await.map_err(send)?;
        sent += n as u64;
    }
    tx.data_bytes(vec![0u8]).await.map_err(send)?;
    incoming.ack().await?;
    tx.eof().await.map_err(send)?;
    match incoming.finish().await {
        Some(0) | None => Ok(sent),
        Some(code) => Err(format!("scp ended with exit status {code}")),
    }
}

/// Fetches `src` with `scp -f` into the local file `dst` (its directory made); the
/// bytes received.
async fn download_file(client: &Client, src: &str, dst: &std::path::Path) -> Result<u64, String> {
    let ch = session(client, &format!("scp -f {}", command::quote(src))).await?;
    let (rx, tx) = ch.split();
    let mut incoming = Incoming::new(rx);
    let send = |e: russh::Error| format!("sending: {e}");
    tx.data_bytes(vec![0u8]).await.map_err(send)?;
    let header = match incoming.byte().await? {
        b'C' => Header::parse(&format!("C{}", incoming.line().await?))?,
        b'D' => {
            return Err(format!(
                "{src} is a directory; only files can be downloaded"
            ));
        }
        code @ (1 | 2) => {
            let line = incoming.line().await.unwrap_or_default();
            return Err(format!("scp error (code {code}): {line}"));
        }
        other => return Err(format!("unexpected SCP answer byte 0x{other:02x}")),
    };
    tx.data_bytes(vec![0u8]).await.map_err(send)?;
    let local = |e: std::io::Error| format!("writing {}: {e}", dst.display());
    if let Some(dir) = dst.parent().filter(|d| !d.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(dir).await.map_err(local)?;
    }
    let mut file = tokio::fs::File::create(dst).await.map_err(local)?;
    incoming.copy_to(header.size, &mut file).await?;
    tokio::io::AsyncWriteExt::flush(&mut file)
        .await
        .map_err(local)?;
    incoming.ack().await?;
    tx.data_bytes(vec![0u8]).await.map_err(send)?;
    tx.eof().await.map_err(send)?;
    match incoming.finish().await {
        Some(0) | None => Ok(header.size),
        Some(code) => Err(format!("scp ended with exit status {code}")),
    }
}
