//! What arrives on one SSH channel, read as a byte stream (for SCP's acknowledgements,
//! header lines and file contents) while its exit status and stderr are kept aside.
//! The client and the test server read their channels through it.

use bytes::Bytes;
use russh::ChannelMsg;
use russh::ChannelReadHalf;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// The most of a channel's stderr kept for error messages.
const STDERR_KEPT: usize = 4096;
/// The longest SCP header or error line read.
const MAX_LINE: usize = 4096;

pub struct Incoming {
    rx: ChannelReadHalf,
    chunk: Bytes,
    pub exit: Option<u32>,
    /// The start of what the other side wrote to stderr.
    stderr: Vec<u8>,
    /// No more data will come (EOF or close); an exit status still may.
    data_ended: bool,
    closed: bool,
}

impl Incoming {
    pub fn new(rx: ChannelReadHalf) -> Self {
        Incoming {
            rx,
            chunk: Bytes::new(),
            exit: None,
            stderr: Vec::new(),
            data_ended: false,
            closed: false,
        }
    }

    /// Takes in one message of the channel.
    async fn next(&mut self) {
        match self.rx.wait().await {
            Some(ChannelMsg::Data { data }) => self.chunk = data,
            Some(ChannelMsg::ExtendedData { data, .. }) => {
                let room = STDERR_KEPT.saturating_sub(self.stderr.len());
                self.stderr.extend_from_slice(&data[..data.len().min(room)]);
            }
            Some(ChannelMsg::ExitStatus { exit_status }) => self.exit = Some(exit_status),
            Some(ChannelMsg::Eof) => self.data_ended = true,
            Some(ChannelMsg::Close) | None => {
                self.data_ended = true;
                self.closed = true;
            }
            Some(_) => {}
        }
    }

    /// Waits for more data; false once no more can come.
    async fn fill(&mut self) -> bool {
        while self.chunk.is_empty() {
            if self.data_ended {
                return false;
            }
            self.next().await;
        }
        true
    }

    /// Why the other side stopped talking: its stderr and exit status, if it said.
    pub fn ended(&self) -> String {
        let err = String::from_utf8_lossy(&self.stderr);
        let err = err.trim();
        match (self.exit, err.is_empty()) {
            (Some(code), true) => format!("the remote side ended with exit status {code}"),
            (Some(code), false) => {
                format!("the remote side ended with exit status {code}: {err}")
            }
            (None, false) => format!("the remote side ended: {err}"),
            (None, true) => "the remote side closed the channel".into(),
        }
    }

    pub async fn byte(&mut self) -> Result<u8, String> {
        if !self.fill().await {
            return Err(self.ended());
        }
        let b = self.chunk[0];
        self.chunk = self.chunk.slice(1..);
        Ok(b)
    }

    /// A line without its newline (at most [`MAX_LINE`] bytes).
    pub async fn line(&mut self) -> Result<String, String> {
        let mut line = Vec::new();
        loop {
            match self.byte().await? {
                b'\n' => return Ok(String::from_utf8_lossy(&line).into_owned()),
                b => line.push(b),
            }
            if line.len() > MAX_LINE {
                return Err("an SCP line is longer than 4 KiB".into());
            }
        }
    }

    /// SCP's answer to each step: 0 is fine; 1 (warning) and 2 (error) come with a line.
    pub async fn ack(&mut self) -> Result<(), String> {
        match self.byte().await? {
            0 => Ok(()),
            code @ (1 | 2) => {
                let line = self.line().await.unwrap_or_default();
                Err(format!("scp error (code {code}): {line}"))
            }
            other => Err(format!("unexpected SCP answer byte 0x{other:02x}")),
        }
    }

    /// Copies exactly `n` bytes to `sink`.
    pub async fn copy_to(
        &mut self,
        mut n: u64,
        sink: &mut (impl AsyncWrite + Unpin),
    ) -> Result<(), String> {
        while n > 0 {
            if !self.fill().await {
                return Err(format!("the file ended {n} bytes early: {}", self.ended()));
            }
            let take = usize::try_from(n)
                .unwrap_or(usize::MAX)
                .min(self.chunk.len());
            let part = self.chunk.split_to(take);
            sink.write_all(&part)
                .await
                .map_err(|e| format!("writing: {e}"))?;
            n -= take as u64;
        }
        Ok(())
    }

    /// Collects exactly `n` bytes (the caller bounds `n`).
    pub async fn take(&mut self, n: u64) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        self.copy_to(n, &mut out).await?;
        Ok(out)
    }

    /// Reads to the end of the channel; its exit status, if the other side sent one.
    pub async fn finish(mut self) -> Option<u32> {
        while !self.closed && self.exit.is_none() {
            self.next().await;
        }
        self.exit
    }
}
