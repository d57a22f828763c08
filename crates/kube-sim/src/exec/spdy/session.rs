//! One exec on an upgraded SPDY connection: wait for the client's streams,
//! run the command while feeding it stdin and answering pings, send the
//! output and the exit Status, then let the client hang up.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio_util::sync::CancellationToken;

use super::frame::{self, Codec, Frame};
use crate::exec::ExecHandlers;
use crate::exec::endpoint::{self, Prepared};
use crate::exec::protocol::{self, ExecParams};

/// How long the client has to open its streams after the upgrade (the
/// kubelet's stream-creation timeout).
const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the client has to hang up once the Status is sent.
const LINGER: Duration = Duration::from_secs(5);

/// Why a session ended early.
#[derive(Debug, thiserror::Error)]
enum End {
    #[error(transparent)]
    Read(#[from] super::ReadError),
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("the client did not open its streams within {0:?}")]
    StreamsTimedOut(Duration),
    /// The client hung up or said GOAWAY; the command is cancelled with it.
    #[error("the client left")]
    ClientLeft,
    #[error("kube-sim is shutting down")]
    Shutdown,
}

/// The client's streams, by `streamType`.
#[derive(Debug, Default)]
struct Streams {
    error: Option<u32>,
    stdin: Option<u32>,
    stdout: Option<u32>,
    stderr: Option<u32>,
    resize: Option<u32>,
}

impl Streams {
    fn record(&mut self, stream_type: &str, id: u32) {
        let slot = match stream_type {
            "error" => &mut self.error,
            "stdin" => &mut self.stdin,
            "stdout" => &mut self.stdout,
            "stderr" => &mut self.stderr,
            "resize" => &mut self.resize,
            _ => return,
        };
        slot.get_or_insert(id);
    }

    /// Every stream the options call for exists. A terminal has no stderr
    /// stream (client-go opens none), and its resize stream is optional.
    fn complete(&self, params: &ExecParams) -> bool {
        self.error.is_some()
            && (!params.stdin || self.stdin.is_some())
            && (!params.stdout || self.stdout.is_some())
            && (!params.stderr || params.tty || self.stderr.is_some())
    }
}

struct Connection<IO> {
    reader: ReadHalf<IO>,
    writer: WriteHalf<IO>,
    codec: Codec,
    buf: BytesMut,
}

impl<IO: AsyncRead + AsyncWrite> Connection<IO> {
    fn new(io: IO) -> Self {
        let (reader, writer) = tokio::io::split(io);
        Self {
            reader,
            writer,
            codec: Codec::new(),
            buf: BytesMut::with_capacity(16 * 1024),
        }
    }

    /// The next frame, `None` when the client hung up. Cancel-safe: bytes
    /// read stay in the buffer.
    async fn read_frame(&mut self) -> Result<Option<Frame>, End> {
        Ok(super::read_frame(&mut self.reader, &mut self.codec, &mut self.buf).await?)
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), End> {
        self.writer.write_all(bytes).await?;
        Ok(())
    }

    /// Answers what every phase answers alike: a new stream gets its
    /// SYN_REPLY and is recorded, a PING its echo. Returns the frame when
    /// the phase has to look at it.
    async fn common(&mut self, frame: Frame, streams: &mut Streams) -> Result<Option<Frame>, End> {
        match frame {
            Frame::SynStream {
                stream_id, headers, ..
            } => {
                if let Some(kind) = frame::header(&headers, "streamtype") {
                    streams.record(kind, stream_id);
                }
                let reply = self.codec.syn_reply(stream_id);
                self.write(&reply).await?;
                Ok(None)
            }
            Frame::Ping { id } => {
                self.write(&frame::ping_frame(id)).await?;
                Ok(None)
            }
            Frame::GoAway { .. } => Err(End::ClientLeft),
            Frame::Ignored => Ok(None),
            other => Ok(Some(other)),
        }
    }
}

pub(super) async fn serve<IO>(
    io: IO,
    job: Prepared,
    handlers: ExecHandlers,
    shutdown: CancellationToken,
) where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let mut connection = Connection::new(io);
    match run(&mut connection, job, &handlers, &shutdown).await {
        Ok(()) | Err(End::ClientLeft) | Err(End::Shutdown) => {}
        Err(e) => tracing::debug!(error = %e, "SPDY exec session ended"),
    }
    let _ = connection.writer.shutdown().await;
}

async fn run<IO: AsyncRead + AsyncWrite>(
    connection: &mut Connection<IO>,
    job: Prepared,
    handlers: &ExecHandlers,
    shutdown: &CancellationToken,
) -> Result<(), End> {
    let mut streams = Streams::default();
    let creation = tokio::time::sleep(STREAM_CREATION_TIMEOUT);
    tokio::pin!(creation);
    // Stdin written before the command starts waits in its channel.
    let endpoint::Started {
        params,
        mut stdin_tx,
        running,
    } = endpoint::start(job, handlers);
    let mut early_stdin: Vec<(u32, bool, Bytes)> = Vec::new();
    while !streams.complete(&params) {
        tokio::select! {
            frame = connection.read_frame() => {
                let frame = frame?.ok_or(End::ClientLeft)?;
                if let Some(Frame::Data { stream_id, fin, data }) = connection.common(frame, &mut streams).await? {
                    early_stdin.push((stream_id, fin, data));
                }
            }
            _ = &mut creation => return Err(End::StreamsTimedOut(STREAM_CREATION_TIMEOUT)),
            _ = shutdown.cancelled() => return Err(End::Shutdown),
        }
    }
    for (stream_id, fin, data) in early_stdin {
        feed_stdin(&streams, &mut stdin_tx, stream_id, fin, data);
    }
    tokio::pin!(running);
    let output = loop {
        tokio::select! {
            output = &mut running => break output,
            frame = connection.read_frame() => {
                let frame = frame?.ok_or(End::ClientLeft)?;
                match connection.common(frame, &mut streams).await? {
                    Some(Frame::Data { stream_id, fin, data }) => {
                        feed_stdin(&streams, &mut stdin_tx, stream_id, fin, data);
                    }
                    Some(Frame::RstStream { stream_id, .. }) if Some(stream_id) == streams.stdin => {
                        stdin_tx = None;
                    }
                    _ => {}
                }
            }
            _ = shutdown.cancelled() => return Err(End::Shutdown),
        }
    };
    drop(stdin_tx);
    let (stdout, stderr) = endpoint::route_output(&params, &output);
    let mut bytes = Vec::new();
    if let (Some(id), Some(data)) = (streams.stdout, stdout.as_deref()) {
        push_stream(&mut bytes, id, data);
    }
    if let (Some(id), Some(data)) = (streams.stderr, stderr) {
        push_stream(&mut bytes, id, data);
    }
    if let Some(id) = streams.error {
        let status = protocol::exit_status(output.exit_code).to_string();
        push_stream(&mut bytes, id, status.as_bytes());
    }
    connection.write(&bytes).await?;
    connection.writer.flush().await?;
    // The client reads to the error stream's FIN and hangs up; answer its
    // pings meanwhile, and go away if it does not.
    let linger = async {
        while let Some(frame) = connection.read_frame().await? {
            connection.common(frame, &mut streams).await?;
        }
        Ok::<(), End>(())
    };
    match tokio::time::timeout(LINGER, linger).await {
        Ok(result) => result,
        Err(_) => {
            let last = streams.error.unwrap_or(0);
            connection.write(&frame::goaway_frame(last)).await
        }
    }
}

/// Client data on the stdin stream goes to the command; data on any other
/// stream (a resize, say) is read and dropped.
fn feed_stdin(
    streams: &Streams,
    stdin_tx: &mut Option<tokio::sync::mpsc::UnboundedSender<Bytes>>,
    stream_id: u32,
    fin: bool,
    data: Bytes,
) {
    if Some(stream_id) != streams.stdin {
        return;
    }
    if let Some(tx) = stdin_tx.as_ref()
        && !data.is_empty()
    {
        // A handler that stopped reading just drops the rest.
        let _ = tx.send(data);
    }
    if fin {
        *stdin_tx = None;
    }
}

/// `data` on stream `id` in bounded DATA frames, the last with FIN.
fn push_stream(out: &mut Vec<u8>, id: u32, data: &[u8]) {
    let mut chunks = data.chunks(protocol::MAX_FRAME_PAYLOAD).peekable();
    if chunks.peek().is_none() {
        out.extend(frame::data_frame(id, true, b""));
        return;
    }
    while let Some(chunk) = chunks.next() {
        out.extend(frame::data_frame(id, chunks.peek().is_none(), chunk));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(query: &str) -> ExecParams {
        ExecParams::parse(query)
    }

    #[test]
    fn the_command_waits_for_every_stream_its_options_call_for() {
        let p = params("command=ls&stdin=true&stdout=true&stderr=true");
        let mut s = Streams::default();
        s.record("error", 1);
        s.record("stdin", 3);
        s.record("stdout", 5);
        assert!(!s.complete(&p));
        s.record("stderr", 7);
        assert!(s.complete(&p));
    }

    #[test]
    fn a_terminal_needs_no_stderr_stream() {
        let p = params("command=sh&stdin=true&stdout=true&stderr=true&tty=true");
        let mut s = Streams::default();
        s.record("error", 1);
        s.record("stdin", 3);
        s.record("stdout", 5);
        assert!(s.complete(&p));
    }

    #[test]
    fn an_unknown_stream_type_and_a_repeated_one_change_nothing() {
        let mut s = Streams::default();
        s.record("error", 1);
        s.record("error", 9);
        s.record("bogus", 11);
        assert_eq!(s.error, Some(1));
    }

    #[test]
    fn output_is_split_into_bounded_frames_with_fin_on_the_last() {
        let mut out = Vec::new();
        push_stream(&mut out, 5, &vec![b'x'; protocol::MAX_FRAME_PAYLOAD + 1]);
        let mut codec = Codec::new();
        let mut buf = BytesMut::from(&out[..]);
        let mut frames = Vec::new();
        while let Some(f) = codec.decode(&mut buf).unwrap() {
            frames.push(f);
        }
        let fins: Vec<(usize, bool)> = frames
            .iter()
            .map(|f| match f {
                Frame::Data { data, fin, .. } => (data.len(), *fin),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(fins, vec![(protocol::MAX_FRAME_PAYLOAD, false), (1, true)]);
        let mut empty = Vec::new();
        push_stream(&mut empty, 5, b"");
        assert_eq!(empty, frame::data_frame(5, true, b""));
    }
}
