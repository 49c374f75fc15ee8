//! The daemon's control socket: how `shoal` commands ask a live mount about itself.
//!
//! The daemon listens on the Linux abstract Unix socket `\0shoal-control-<daemon pid>`: no
//! file to create or clean up, and it vanishes with the process. A client finds the pid of
//! the daemon serving a mountpoint (`mounts::daemon_pids`) and connects. One connection
//! carries one exchange: a JSON request line (`{"op": "stats"}`), then a JSON response line,
//! `{"ok": ...}` or `{"error": "..."}`. New requests are new `ControlRequest` variants.
//!
//! Streaming requests (`import`, `export`) carry bytes too: after the request line the
//! client sends its input (an archive) until it shuts down its side; the daemon answers
//! with frames (a little-endian u32 length, then that many bytes) ended by an empty frame,
//! then the response line, so an error met mid-stream still reaches the client as one.
//!
//! The peer's credentials (SO_PEERCRED) come with every request, so requests that change
//! something can be limited to root and the daemon's own user; reading is open to all.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::quota_protocol::QuotaRequest;

/// Threads answering connections: requests are short, and a stuck client only holds one.
/// An import or export holds one for its whole stream, so `stats` still gets through
/// beside two of them.
const SERVER_THREADS: usize = 4;
/// A client that sends nothing (or reads nothing) for this long is dropped.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on waiting for requests that walk the whole filesystem.
const LONG_ANSWER_TIMEOUT: Duration = Duration::from_secs(3600);
/// Bound on a request line; every request is a few dozen bytes.
const MAX_REQUEST_BYTES: u64 = 64 * 1024;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ControlRequest {
    /// The mount's live statistics (read-only).
    Stats,
    /// The same plus the allocator's heap figures (jemalloc's counters). On request only:
    /// the live view and scrapers do not need them.
    HeapStats,
    /// Quota reports, limits, settings, project tagging, counter verification.
    Quota(QuotaRequest),
    /// The store directory and usage, for `shoal info` (read-only).
    Info,
    /// Write a backup of a snapshot to a new file at `path` (`shoal backup`). It creates a
    /// file as the daemon's user, so it is limited as a change is.
    Backup { path: std::path::PathBuf },
    /// Send a backup of a snapshot in frames (`shoal backup MNT -`).
    BackupStream,
    /// Take the tree at `path` (from the mount's root) out of the namespace; it is
    /// deleted in the background (`shoal rmtree`).
    Rmtree { path: String },
    /// What detached trees are still being deleted (read-only).
    ReclaimStatus,
    /// Apply the tar archive that follows as the new directory `path` (`shoal import`).
    Import { path: String },
    /// Send the tree at `path` as a tar archive in frames (`shoal export`).
    Export { path: String },
}

impl ControlRequest {
    /// Whether the request changes anything (and so needs root or the daemon's user).
    pub fn mutates(&self) -> bool {
        match self {
            ControlRequest::Stats
            | ControlRequest::HeapStats
            | ControlRequest::Info
            | ControlRequest::ReclaimStatus => false,
            ControlRequest::Backup { .. } | ControlRequest::BackupStream => true,
            ControlRequest::Quota(quota) => quota.mutates(),
            ControlRequest::Rmtree { .. } | ControlRequest::Import { .. } => true,
            // It reads every file whatever its permissions: as privileged as a change.
            ControlRequest::Export { .. } => true,
        }
    }

    /// Whether bytes follow the request line and precede the answer (see the module
    /// comment).
    pub fn streams(&self) -> bool {
        matches!(
            self,
            ControlRequest::Import { .. }
                | ControlRequest::Export { .. }
                | ControlRequest::BackupStream
        )
    }

    /// How long the client waits for the answer: tagging a big tree or scanning millions
    /// of inodes takes longer than a statistics snapshot.
    fn answer_timeout(&self) -> Duration {
        match self {
            ControlRequest::Quota(
                QuotaRequest::SetProject { .. } | QuotaRequest::VerifyCounters { .. },
            )
            | ControlRequest::Backup { .. }
            | ControlRequest::BackupStream
            | ControlRequest::Import { .. }
            | ControlRequest::Export { .. }
            // One batch, but it may wait behind a checkpoint held up in the store.
            | ControlRequest::Rmtree { .. } => LONG_ANSWER_TIMEOUT,
            _ => IO_TIMEOUT,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlResponse {
    Ok(serde_json::Value),
    Error(String),
}

/// Who is asking, from the kernel (SO_PEERCRED), not from anything the client says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCredentials {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

pub struct RequestContext {
    pub peer: PeerCredentials,
    pub daemon_uid: u32,
}

impl RequestContext {
    /// Only root and the user running the daemon may change a mount.
    pub fn may_mutate(&self) -> bool {
        self.peer.uid == 0 || self.peer.uid == self.daemon_uid
    }
}

/// Answers requests; the daemon's implementation holds the engine and the FUSE statistics.
pub trait ControlHandler: Send + Sync {
    fn handle(
        &self,
        request: &ControlRequest,
        context: &RequestContext,
    ) -> Result<serde_json::Value, String>;

    /// A streaming request: `input` is what the client sends after the request line,
    /// `output` goes back to it in frames.
    fn handle_stream(
        &self,
        request: &ControlRequest,
        context: &RequestContext,
        _input: &mut dyn Read,
        _output: &mut dyn Write,
    ) -> Result<serde_json::Value, String> {
        self.handle(request, context)
    }
}

pub fn socket_name(daemon_pid: u32) -> String {
    format!("shoal-control-{daemon_pid}")
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("cannot reach the daemon (pid {pid}) on its control socket: {source}")]
    Unreachable { pid: u32, source: io::Error },
    #[error("the daemon (pid {pid}) did not answer: {source}")]
    Exchange { pid: u32, source: io::Error },
    #[error("the daemon (pid {pid}) answered something unreadable: {detail}")]
    Protocol { pid: u32, detail: String },
    #[error("the daemon (pid {pid}) refused: {message}")]
    Refused { pid: u32, message: String },
}

/// Binds the control socket of this process and serves it from background threads until
/// the process exits.
pub fn serve(handler: Arc<dyn ControlHandler>) -> io::Result<()> {
    let address = SocketAddr::from_abstract_name(socket_name(std::process::id()))?;
    let listener = UnixListener::bind_addr(&address)?;
    let daemon_uid = shoal_sys::identity::effective_uid();
    for index in 0..SERVER_THREADS {
        let listener = listener.try_clone()?;
        let handler = handler.clone();
        std::thread::Builder::new()
            .name(format!("shoal-control-{index}"))
            .spawn(move || accept_loop(&listener, handler.as_ref(), daemon_uid))?;
    }
    Ok(())
}

fn accept_loop(listener: &UnixListener, handler: &dyn ControlHandler, daemon_uid: u32) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(error) = answer(stream, handler, daemon_uid) {
                    tracing::debug!("control connection: {error}");
                }
            }
            Err(error) => {
                tracing::warn!("control socket accept: {error}");
                // EMFILE and the like: do not spin.
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn answer(stream: UnixStream, handler: &dyn ControlHandler, daemon_uid: u32) -> io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let context = RequestContext {
        peer: peer_credentials(&stream)?,
        daemon_uid,
    };
    // As large as the client's writes: an archive's headers and small files then cost
    // one read per 256 KiB instead of one per 8 KiB (a tenth of import's daemon CPU).
    let mut reader = BufReader::with_capacity(FRAME_BYTES, &stream);
    let mut line = String::new();
    (&mut reader).take(MAX_REQUEST_BYTES).read_line(&mut line)?;
    let request = serde_json::from_str::<ControlRequest>(&line);
    let streams = request.as_ref().is_ok_and(ControlRequest::streams);
    let response = match request {
        Err(error) => ControlResponse::Error(format!("bad request: {error}")),
        Ok(request) if request.mutates() && !context.may_mutate() => {
            ControlResponse::Error(format!(
                "permission denied: uid {} may not change this mount",
                context.peer.uid
            ))
        }
        Ok(request) if streams => {
            // A client streams as fast as its source: a pipe from a slow tar, a slow disk.
            stream.set_read_timeout(Some(LONG_ANSWER_TIMEOUT))?;
            stream.set_write_timeout(Some(LONG_ANSWER_TIMEOUT))?;
            let mut output = io::BufWriter::with_capacity(FRAME_BYTES, FrameWriter(&stream));
            let answered = handler.handle_stream(&request, &context, &mut reader, &mut output);
            output.flush()?;
            match answered {
                Ok(value) => ControlResponse::Ok(value),
                Err(message) => ControlResponse::Error(message),
            }
        }
        Ok(request) => match handler.handle(&request, &context) {
            Ok(value) => ControlResponse::Ok(value),
            Err(message) => ControlResponse::Error(message),
        },
    };
    if streams {
        // The empty frame: the stream is over, the response line follows.
        (&stream).write_all(&0u32.to_le_bytes())?;
    }
    let mut text = serde_json::to_string(&response).map_err(io::Error::other)?;
    text.push('\n');
    (&stream).write_all(text.as_bytes())
}

/// Bytes per frame of a streaming answer (the buffer before the frame writer).
const FRAME_BYTES: usize = 256 * 1024;

/// Writes each buffer it is given as one frame.
struct FrameWriter<'a>(&'a UnixStream);

impl Write for FrameWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let length = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        let mut stream = self.0;
        stream.write_all(&length.to_le_bytes())?;
        stream.write_all(&buf[..length as usize])?;
        Ok(length as usize)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn peer_credentials(stream: &UnixStream) -> io::Result<PeerCredentials> {
    let cred = shoal_sys::peer::credentials(std::os::fd::AsFd::as_fd(stream))?;
    Ok(PeerCredentials {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// Connects to the daemon `pid` with these timeouts and sends the request line.
fn send_request_line(
    pid: u32,
    request: &ControlRequest,
    read_timeout: Duration,
    write_timeout: Duration,
) -> Result<UnixStream, ControlError> {
    let address = SocketAddr::from_abstract_name(socket_name(pid))
        .map_err(|source| ControlError::Unreachable { pid, source })?;
    let stream = UnixStream::connect_addr(&address)
        .map_err(|source| ControlError::Unreachable { pid, source })?;
    let exchange = |source| ControlError::Exchange { pid, source };
    stream
        .set_read_timeout(Some(read_timeout))
        .map_err(exchange)?;
    stream
        .set_write_timeout(Some(write_timeout))
        .map_err(exchange)?;
    let mut line = serde_json::to_string(request).map_err(|error| ControlError::Protocol {
        pid,
        detail: error.to_string(),
    })?;
    line.push('\n');
    (&stream).write_all(line.as_bytes()).map_err(exchange)?;
    Ok(stream)
}

/// Sends one request to the daemon `pid` and returns the value of its `ok` answer.
pub fn request(pid: u32, request: &ControlRequest) -> Result<serde_json::Value, ControlError> {
    let stream = send_request_line(pid, request, request.answer_timeout(), IO_TIMEOUT)?;
    let exchange = |source| ControlError::Exchange { pid, source };
    let mut answer = String::new();
    BufReader::new(&stream)
        .read_line(&mut answer)
        .map_err(exchange)?;
    match serde_json::from_str::<ControlResponse>(&answer) {
        Ok(ControlResponse::Ok(value)) => Ok(value),
        Ok(ControlResponse::Error(message)) => Err(ControlError::Refused { pid, message }),
        Err(error) => Err(ControlError::Protocol {
            pid,
            detail: format!("{error} in {answer:?}"),
        }),
    }
}

/// Sends a streaming request: `input` (if any) after the request line, then copies the
/// daemon's frames to `output`; returns the value of its `ok` answer. `sent` hears the
/// input bytes sent so far.
pub fn stream_request(
    pid: u32,
    request: &ControlRequest,
    input: Option<&mut dyn Read>,
    output: &mut dyn Write,
    sent: &mut dyn FnMut(u64),
) -> Result<serde_json::Value, ControlError> {
    let stream = send_request_line(pid, request, LONG_ANSWER_TIMEOUT, LONG_ANSWER_TIMEOUT)?;
    let exchange = |source| ControlError::Exchange { pid, source };
    // The daemon stops reading at an error and says why: its answer explains a failed
    // send better than the broken pipe does.
    let send_error = match input {
        Some(input) => send_input(&stream, input, sent).err(),
        None => None,
    };
    // Ignored: the daemon may already have closed the connection.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut reader = BufReader::with_capacity(FRAME_BYTES, &stream);
    let answer = receive_frames(&mut reader, output).and_then(|()| {
        let mut answer = String::new();
        reader.read_line(&mut answer)?;
        Ok(answer)
    });
    let answer = match (answer, send_error) {
        (Ok(answer), _) if !answer.is_empty() => answer,
        (_, Some(error)) | (Err(error), None) => return Err(exchange(error)),
        (Ok(_), None) => {
            return Err(exchange(io::Error::from(io::ErrorKind::UnexpectedEof)));
        }
    };
    match serde_json::from_str::<ControlResponse>(&answer) {
        Ok(ControlResponse::Ok(value)) => Ok(value),
        Ok(ControlResponse::Error(message)) => Err(ControlError::Refused { pid, message }),
        Err(error) => Err(ControlError::Protocol {
            pid,
            detail: format!("{error} in {answer:?}"),
        }),
    }
}

fn send_input(
    stream: &UnixStream,
    input: &mut dyn Read,
    sent: &mut dyn FnMut(u64),
) -> io::Result<()> {
    let mut buffer = vec![0u8; FRAME_BYTES];
    let mut total = 0u64;
    loop {
        let read = match input.read(&mut buffer) {
            Ok(0) => return Ok(()),
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        let mut stream = stream;
        stream.write_all(&buffer[..read])?;
        total += read as u64;
        sent(total);
    }
}

/// Copies frames to `output` up to the empty one.
fn receive_frames(reader: &mut impl Read, output: &mut dyn Write) -> io::Result<()> {
    let mut buffer = Vec::new();
    loop {
        let mut length = [0u8; 4];
        reader.read_exact(&mut length)?;
        let length = u32::from_le_bytes(length) as usize;
        if length == 0 {
            return Ok(());
        }
        buffer.resize(length, 0);
        reader.read_exact(&mut buffer)?;
        output.write_all(&buffer)?;
    }
}

/// Sends a quota request to the daemon serving `mountpoint`.
pub fn quota_request(
    mountpoint: &std::path::Path,
    request: &QuotaRequest,
) -> anyhow::Result<serde_json::Value> {
    let daemon = crate::stats_cmd::find_daemon(mountpoint)?;
    Ok(self::request(
        daemon,
        &ControlRequest::Quota(request.clone()),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_responses_have_the_documented_shape() {
        assert_eq!(
            serde_json::to_string(&ControlRequest::Stats).unwrap(),
            r#"{"op":"stats"}"#
        );
        let ok = ControlResponse::Ok(serde_json::json!({"a": 1}));
        assert_eq!(serde_json::to_string(&ok).unwrap(), r#"{"ok":{"a":1}}"#);
        let error = ControlResponse::Error("no".into());
        assert_eq!(serde_json::to_string(&error).unwrap(), r#"{"error":"no"}"#);
        assert!(serde_json::from_str::<ControlRequest>(r#"{"op":"format_disk"}"#).is_err());
    }

    struct Echo;

    impl ControlHandler for Echo {
        fn handle(
            &self,
            request: &ControlRequest,
            context: &RequestContext,
        ) -> Result<serde_json::Value, String> {
            Ok(serde_json::json!({
                "request": request,
                "peer_pid": context.peer.pid,
                "peer_uid": context.peer.uid,
            }))
        }
    }

    /// The server binds this test process's name, so only one test may call `serve`.
    #[test]
    fn a_request_reaches_the_handler_with_the_peer_credentials() {
        serve(Arc::new(Echo)).unwrap();
        let answer = request(std::process::id(), &ControlRequest::Stats).unwrap();
        assert_eq!(answer["request"]["op"], "stats");
        assert_eq!(answer["peer_pid"], std::process::id());
        assert_eq!(answer["peer_uid"], shoal_sys::identity::effective_uid());
        match request(u32::MAX, &ControlRequest::Stats) {
            Err(ControlError::Unreachable { .. }) => {}
            other => panic!("expected unreachable, got {other:?}"),
        }
    }
}
