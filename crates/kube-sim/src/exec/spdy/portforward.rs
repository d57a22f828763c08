//! Port-forward on an upgraded SPDY connection (`portforward.k8s.io`), as
//! the kubelet serves it: per forwarded connection the client opens an
//! `error` stream and a `data` stream carrying the same `port` and
//! `requestID` headers; the server dials the port and copies bytes both
//! ways, and a failure to dial is a message on the error stream.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::frame::{self, Codec, Frame};
use crate::exec::portforward::Targets;

/// Bytes read from a forwarded connection go out in DATA frames this big.
const CHUNK: usize = 32 * 1024;

/// The two streams of one forwarded connection, as they arrive.
#[derive(Debug, Default)]
struct Request {
    port: u16,
    error: Option<u32>,
    data: Option<u32>,
}

/// Serves one port-forward connection until the client hangs up.
pub(crate) async fn serve<IO>(io: IO, targets: Targets, shutdown: CancellationToken)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut reader, mut writer) = tokio::io::split(io);
    // One writer: frames of every stream, in the order they are queued.
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let writing = tokio::spawn(async move {
        while let Some(bytes) = out_rx.recv().await {
            if writer.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = writer.shutdown().await;
    });
    let mut codec = Codec::new();
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut requests: HashMap<String, Request> = HashMap::new();
    // Client bytes for each forwarded connection's data stream; `None` is
    // the client's FIN.
    let mut to_target: HashMap<u32, mpsc::UnboundedSender<Option<Bytes>>> = HashMap::new();
    // Their receivers, parked until the connection's error stream is there.
    let mut parked: HashMap<u32, mpsc::UnboundedReceiver<Option<Bytes>>> = HashMap::new();
    let connection = CancellationToken::new();
    loop {
        let frame = tokio::select! {
            frame = super::read_frame(&mut reader, &mut codec, &mut buf) => frame,
            _ = shutdown.cancelled() => break,
        };
        let frame = match frame {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(error = %e, "SPDY port-forward session ended");
                break;
            }
        };
        match frame {
            Frame::SynStream {
                stream_id, headers, ..
            } => {
                let _ = out_tx.send(codec.syn_reply(stream_id));
                let kind = frame::header(&headers, "streamtype").unwrap_or_default();
                let id = frame::header(&headers, "requestid").unwrap_or_default();
                let port = frame::header(&headers, "port").and_then(|p| p.parse::<u16>().ok());
                let Some(port) = port.filter(|p| *p > 0) else {
                    // The kubelet refuses a stream without a valid port.
                    let message = format!(
                        "invalid port in stream {stream_id}: {:?}",
                        frame::header(&headers, "port").unwrap_or_default()
                    );
                    let _ = out_tx.send(frame::data_frame(stream_id, true, message.as_bytes()));
                    continue;
                };
                let request = requests.entry(id.to_string()).or_default();
                request.port = port;
                match kind {
                    "error" => request.error = Some(stream_id),
                    "data" => {
                        request.data = Some(stream_id);
                        let (tx, rx) = mpsc::unbounded_channel();
                        to_target.insert(stream_id, tx);
                        parked.insert(stream_id, rx);
                    }
                    _ => continue,
                }
                // The parked receiver is taken once: one forward per pair.
                if let (Some(error), Some(data)) = (request.error, request.data)
                    && let Some(from_client) = parked.remove(&data)
                {
                    tokio::spawn(forward(
                        targets.address(request.port),
                        request.port,
                        (error, data),
                        out_tx.clone(),
                        from_client,
                        connection.child_token(),
                    ));
                }
            }
            Frame::Data {
                stream_id,
                fin,
                data,
            } => {
                if let Some(tx) = to_target.get(&stream_id) {
                    if !data.is_empty() {
                        let _ = tx.send(Some(data));
                    }
                    if fin {
                        let _ = tx.send(None);
                    }
                }
            }
            Frame::RstStream { stream_id, .. } => {
                to_target.remove(&stream_id);
            }
            Frame::Ping { id } => {
                let _ = out_tx.send(frame::ping_frame(id));
            }
            Frame::GoAway { .. } => break,
            Frame::Ignored => {}
        }
    }
    connection.cancel();
    drop(out_tx);
    let _ = writing.await;
}

/// One forwarded connection: dial, copy both ways, then close both streams.
async fn forward(
    address: Result<std::net::SocketAddr, String>,
    port: u16,
    (error_id, data_id): (u32, u32),
    out: mpsc::UnboundedSender<Vec<u8>>,
    mut from_client: mpsc::UnboundedReceiver<Option<Bytes>>,
    cancel: CancellationToken,
) {
    let dialed = match address {
        Ok(address) => TcpStream::connect(address)
            .await
            .map_err(|e| format!("failed to connect to port {port} ({address}): {e}")),
        Err(why) => Err(why),
    };
    let stream = match dialed {
        Ok(stream) => stream,
        Err(why) => {
            let message = format!("error forwarding port {port}: {why}");
            let _ = out.send(frame::data_frame(error_id, true, message.as_bytes()));
            let _ = out.send(frame::data_frame(data_id, true, b""));
            return;
        }
    };
    let _ = stream.set_nodelay(true);
    let (mut target_reader, mut target_writer) = stream.into_split();
    let upstream = async {
        while let Some(message) = from_client.recv().await {
            match message {
                Some(bytes) => {
                    if target_writer.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                None => break,
            }
        }
        let _ = target_writer.shutdown().await;
    };
    let downstream = async {
        let mut chunk = vec![0u8; CHUNK];
        loop {
            match target_reader.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if out
                        .send(frame::data_frame(data_id, false, &chunk[..n]))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
        let _ = out.send(frame::data_frame(data_id, true, b""));
    };
    tokio::select! {
        _ = async { tokio::join!(upstream, downstream) } => {}
        _ = cancel.cancelled() => return,
    }
    let _ = out.send(frame::data_frame(error_id, true, b""));
}
