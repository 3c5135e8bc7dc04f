//! The LSP base protocol: JSON-RPC messages framed by a `Content-Length` header.

use std::io::{BufRead, Write};

use serde_json::Value as Json;

/// A message that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading a message: {0}")]
    Read(#[source] std::io::Error),
    #[error("writing a message: {0}")]
    Write(#[source] std::io::Error),
    #[error("a message header without Content-Length")]
    ReadLength,
    #[error("a message of {0} bytes, more than the {MAX_LEN} kite reads")]
    ReadTooLarge(usize),
    #[error("decoding a message: {0}")]
    Decode(#[source] serde_json::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// No editor sends a document this big; a bigger length is a broken stream.
const MAX_LEN: usize = 64 << 20;

/// Reads one message; None at the end of the input.
///
/// # Errors
/// [`Error::Read`] on I/O failure, [`Error::ReadLength`] without a length header,
/// [`Error::Decode`] for a body that is not JSON.
pub fn read(input: &mut impl BufRead) -> Result<Option<Json>> {
    let mut length = None;
    let mut headers = 0;
    let mut line = String::new();
    loop {
        line.clear();
        if input.read_line(&mut line).map_err(Error::Read)? == 0 {
            return Ok(None);
        }
        let header = line.trim_end();
        if header.is_empty() {
            if headers > 0 {
                break;
            }
            // Blank lines between messages are tolerated.
            continue;
        }
        headers += 1;
        if let Some((name, value)) = header.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse::<usize>().ok();
            if length.is_none() {
                return Err(Error::ReadLength);
            }
        }
    }
    let length = length.ok_or(Error::ReadLength)?;
    if length > MAX_LEN {
        return Err(Error::ReadTooLarge(length));
    }
    let mut body = vec![0; length];
    input.read_exact(&mut body).map_err(Error::Read)?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(Error::Decode)
}

/// Writes one message and flushes it.
///
/// # Errors
/// [`Error::Write`] when the output is closed.
pub fn write(output: &mut impl Write, message: &Json) -> Result<()> {
    let body = message.to_string();
    write!(output, "Content-Length: {}\r\n\r\n{body}", body.len()).map_err(Error::Write)?;
    output.flush().map_err(Error::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_end_of_input() {
        let mut buf = Vec::new();
        write(&mut buf, &serde_json::json!({"id": 1, "x": "é"})).unwrap();
        write(&mut buf, &serde_json::json!({"id": 2})).unwrap();
        let mut input = std::io::Cursor::new(buf);
        assert_eq!(read(&mut input).unwrap().unwrap()["x"], "é");
        assert_eq!(read(&mut input).unwrap().unwrap()["id"], 2);
        assert!(read(&mut input).unwrap().is_none());
        let mut bad = std::io::Cursor::new(b"Content-Type: x\r\n\r\n{}".to_vec());
        assert!(matches!(read(&mut bad), Err(Error::ReadLength)));
    }
}
