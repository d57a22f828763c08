//! SPDY/3.1 framing as client-go's remote-command streams use it: the
//! frame layouts, and the zlib header-block compression whose state lasts
//! for the whole connection (one context per direction, preset with the
//! SPDY/3 dictionary, sync-flushed after every block). Pure: bytes in,
//! frames out, no sockets.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The SPDY/3 header dictionary, from the protocol's specification.
const HEADER_DICTIONARY: &[u8] = include_bytes!("header-dictionary.bin");

/// The only version spoken (the `Upgrade: SPDY/3.1` of the handshake).
const VERSION: u16 = 3;
const CONTROL_BIT: u8 = 0x80;
const FLAG_FIN: u8 = 0x01;
/// Every frame header is eight bytes.
const FRAME_HEADER_LEN: usize = 8;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// A client's frame may not be longer than this: remote-command frames are
/// at most a few tens of KiB (client-go writes stdin in 32 KiB pieces).
pub const MAX_FRAME_LEN: usize = 1 << 20;
/// A decompressed header block may not be longer than this, so a small
/// compressed block cannot expand without bound.
const MAX_HEADER_BLOCK_LEN: usize = 64 * 1024;

/// Why a connection is given up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SPDY protocol error: {0}")]
pub struct SpdyError(pub String);

fn error(message: impl Into<String>) -> SpdyError {
    SpdyError(message.into())
}

/// A header block: lower-case names, values as sent (several values of one
/// name are NUL-separated in SPDY and stay so here).
pub type Headers = Vec<(String, String)>;

/// The frames a remote-command server reads. Settings and unknown control
/// frames are read and dropped, as SPDY asks of a receiver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    SynStream {
        stream_id: u32,
        fin: bool,
        headers: Headers,
    },
    Data {
        stream_id: u32,
        fin: bool,
        data: Bytes,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good_stream_id: u32,
    },
    /// SYN_REPLY, HEADERS, SETTINGS, WINDOW_UPDATE and unknown control
    /// frames: nothing a server of client-created streams acts on.
    Ignored,
}

/// One connection's framing state: the two header-compression contexts.
pub struct Codec {
    inflater: Decompress,
    deflater: Compress,
}

impl Default for Codec {
    fn default() -> Self {
        Self::new()
    }
}

impl Codec {
    pub fn new() -> Self {
        let mut deflater = Compress::new(Compression::default(), true);
        // The dictionary of a fresh compressor is always accepted; a
        // failure would only mean a block compressed without it, which
        // readers still decode.
        let _ = deflater.set_dictionary(HEADER_DICTIONARY);
        Self {
            inflater: Decompress::new(true),
            deflater,
        }
    }

    /// Takes one whole frame off the front of `buf`, or `None` until more
    /// bytes arrive.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, SpdyError> {
        if buf.len() < FRAME_HEADER_LEN {
            return Ok(None);
        }
        let flags = buf[4];
        let length = usize::from(buf[5]) << 16 | usize::from(buf[6]) << 8 | usize::from(buf[7]);
        if length > MAX_FRAME_LEN {
            return Err(error(format!(
                "a frame of {length} bytes is longer than the {MAX_FRAME_LEN} accepted"
            )));
        }
        if buf.len() < FRAME_HEADER_LEN + length {
            buf.reserve(FRAME_HEADER_LEN + length - buf.len());
            return Ok(None);
        }
        let head = buf.split_to(FRAME_HEADER_LEN);
        let mut body = buf.split_to(length).freeze();
        let fin = flags & FLAG_FIN != 0;
        if head[0] & CONTROL_BIT == 0 {
            let stream_id = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            return Ok(Some(Frame::Data {
                stream_id,
                fin,
                data: body,
            }));
        }
        let version = u16::from_be_bytes([head[0] & !CONTROL_BIT, head[1]]);
        if version != VERSION {
            return Err(error(format!(
                "SPDY version {version} is not spoken; only version {VERSION}"
            )));
        }
        let kind = u16::from_be_bytes([head[2], head[3]]);
        let need = |n: usize, name: &str| {
            if body.len() < n {
                Err(error(format!(
                    "a {name} frame of {} bytes is shorter than its {n}-byte fixed part",
                    body.len()
                )))
            } else {
                Ok(())
            }
        };
        let frame = match kind {
            SYN_STREAM => {
                need(10, "SYN_STREAM")?;
                let stream_id = body.get_u32() & 0x7fff_ffff;
                body.advance(6); // associated stream, priority, slot
                if stream_id == 0 {
                    return Err(error("SYN_STREAM for stream 0"));
                }
                let headers = self.inflate_headers(&body)?;
                Frame::SynStream {
                    stream_id,
                    fin,
                    headers,
                }
            }
            SYN_REPLY | HEADERS => {
                need(4, "SYN_REPLY or HEADERS")?;
                body.advance(4);
                // Decoded all the same: the compression context is shared by
                // every block of the connection.
                self.inflate_headers(&body)?;
                Frame::Ignored
            }
            RST_STREAM => {
                need(8, "RST_STREAM")?;
                Frame::RstStream {
                    stream_id: body.get_u32() & 0x7fff_ffff,
                    status: body.get_u32(),
                }
            }
            PING => {
                need(4, "PING")?;
                Frame::Ping { id: body.get_u32() }
            }
            GOAWAY => {
                need(4, "GOAWAY")?;
                Frame::GoAway {
                    last_good_stream_id: body.get_u32() & 0x7fff_ffff,
                }
            }
            SETTINGS | WINDOW_UPDATE => Frame::Ignored,
            _ => Frame::Ignored,
        };
        Ok(Some(frame))
    }

    fn inflate_headers(&mut self, block: &[u8]) -> Result<Headers, SpdyError> {
        let mut out: Vec<u8> = Vec::with_capacity(256);
        let mut input = block;
        loop {
            if out.len() == out.capacity() {
                if out.len() >= MAX_HEADER_BLOCK_LEN {
                    return Err(error(format!(
                        "a header block decompresses to more than {MAX_HEADER_BLOCK_LEN} bytes"
                    )));
                }
                out.reserve(out.len().max(256));
            }
            let before_in = self.inflater.total_in();
            let before_out = self.inflater.total_out();
            match self
                .inflater
                .decompress_vec(input, &mut out, FlushDecompress::Sync)
            {
                Ok(status) => {
                    let read = (self.inflater.total_in() - before_in) as usize;
                    input = &input[read..];
                    let wrote = self.inflater.total_out() - before_out;
                    let stuck = read == 0 && wrote == 0 && out.len() < out.capacity();
                    if input.is_empty() && out.len() < out.capacity() {
                        break;
                    }
                    if status == Status::StreamEnd || stuck {
                        if input.is_empty() {
                            break;
                        }
                        return Err(error("the header block ends inside its zlib stream"));
                    }
                }
                Err(e) if e.needs_dictionary().is_some() => {
                    let read = (self.inflater.total_in() - before_in) as usize;
                    input = &input[read..];
                    self.inflater
                        .set_dictionary(HEADER_DICTIONARY)
                        .map_err(|e| error(format!("the header dictionary was refused: {e}")))?;
                }
                Err(e) => return Err(error(format!("the header block does not inflate: {e}"))),
            }
        }
        parse_header_block(&out)
    }

    fn deflate_headers(&mut self, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut plain = BytesMut::new();
        plain.put_u32(headers.len() as u32);
        for (name, value) in headers {
            plain.put_u32(name.len() as u32);
            plain.put_slice(name.as_bytes());
            plain.put_u32(value.len() as u32);
            plain.put_slice(value.as_bytes());
        }
        let mut out = Vec::with_capacity(plain.len() + 64);
        let mut input: &[u8] = &plain;
        loop {
            out.reserve(256);
            let before = self.deflater.total_in();
            // Compression into memory cannot fail; the loop ends when all of
            // the input is in and the sync flush left spare room.
            let _ = self
                .deflater
                .compress_vec(input, &mut out, FlushCompress::Sync);
            let read = (self.deflater.total_in() - before) as usize;
            input = &input[read..];
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
        }
        out
    }

    /// The answer to a client's SYN_STREAM: accepted, with no headers (what
    /// the kubelet sends), or refused with FIN.
    pub fn syn_reply(&mut self, stream_id: u32) -> Vec<u8> {
        let block = self.deflate_headers(&[]);
        let mut body = BytesMut::with_capacity(4 + block.len());
        body.put_u32(stream_id & 0x7fff_ffff);
        body.put_slice(&block);
        control_frame(SYN_REPLY, 0, &body)
    }
}

/// The header block's plain layout: a count, then length-prefixed names
/// and values.
fn parse_header_block(mut block: &[u8]) -> Result<Headers, SpdyError> {
    fn field(block: &mut &[u8], what: &str) -> Result<String, SpdyError> {
        if block.len() < 4 {
            return Err(error(format!("the header block ends before a {what}")));
        }
        let len = block.get_u32() as usize;
        if block.len() < len {
            return Err(error(format!(
                "a header {what} of {len} bytes runs past the block"
            )));
        }
        let text = std::str::from_utf8(&block[..len])
            .map_err(|_| error(format!("a header {what} is not UTF-8")))?
            .to_string();
        block.advance(len);
        Ok(text)
    }
    if block.len() < 4 {
        return Err(error("the header block has no pair count"));
    }
    let count = block.get_u32() as usize;
    let mut headers = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let name = field(&mut block, "name")?.to_ascii_lowercase();
        let value = field(&mut block, "value")?;
        headers.push((name, value));
    }
    Ok(headers)
}

/// The first value of header `name` in a block.
pub fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.split('\0').next().unwrap_or_default())
}

fn control_frame(kind: u16, flags: u8, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(FRAME_HEADER_LEN + body.len());
    frame.extend_from_slice(&(VERSION | u16::from(CONTROL_BIT) << 8).to_be_bytes());
    frame.extend_from_slice(&kind.to_be_bytes());
    frame.push(flags);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    frame.extend_from_slice(body);
    frame
}

/// A DATA frame; `data` must be under 16 MiB (callers send 32 KiB pieces).
pub fn data_frame(stream_id: u32, fin: bool, data: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(FRAME_HEADER_LEN + data.len());
    frame.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
    frame.push(if fin { FLAG_FIN } else { 0 });
    frame.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
    frame.extend_from_slice(data);
    frame
}

/// The echo of a client's PING.
pub fn ping_frame(id: u32) -> Vec<u8> {
    control_frame(PING, 0, &id.to_be_bytes())
}

/// GOAWAY with status OK: the server is done with the connection.
pub fn goaway_frame(last_good_stream_id: u32) -> Vec<u8> {
    let mut body = Vec::with_capacity(8);
    body.extend_from_slice(&(last_good_stream_id & 0x7fff_ffff).to_be_bytes());
    body.extend_from_slice(&0u32.to_be_bytes());
    control_frame(GOAWAY, 0, &body)
}

#[cfg(test)]
pub(crate) mod client {
    //! The client side, for tests: what client-go's spdystream writes.
    use super::*;

    /// A SYN_STREAM as spdystream sends it (priority 0, no association),
    /// its header block compressed by `codec`'s context.
    pub fn syn_stream(
        codec: &mut Codec,
        stream_id: u32,
        fin: bool,
        headers: &[(&str, &str)],
    ) -> Vec<u8> {
        let block = codec.deflate_headers(headers);
        let mut body = BytesMut::new();
        body.put_u32(stream_id);
        body.put_u32(0);
        body.put_u16(0);
        body.put_slice(&block);
        control_frame(SYN_STREAM, if fin { FLAG_FIN } else { 0 }, &body)
    }

    /// Reads a SYN_REPLY's stream id and headers with `codec`'s inflater.
    pub fn read_syn_reply(codec: &mut Codec, frame: &[u8]) -> (u32, Headers) {
        assert_eq!(u16::from_be_bytes([frame[2], frame[3]]), SYN_REPLY);
        let id = u32::from_be_bytes([frame[8], frame[9], frame[10], frame[11]]);
        (id, codec.inflate_headers(&frame[12..]).unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::client::*;
    use super::*;

    fn decode_all(codec: &mut Codec, bytes: &[u8]) -> Vec<Frame> {
        let mut buf = BytesMut::from(bytes);
        let mut frames = Vec::new();
        while let Some(frame) = codec.decode(&mut buf).unwrap() {
            frames.push(frame);
        }
        assert!(buf.is_empty(), "{} bytes left over", buf.len());
        frames
    }

    #[test]
    fn the_dictionary_is_the_spdy3_one() {
        // Its Adler-32 is what a zlib stream preset with it names.
        assert_eq!(HEADER_DICTIONARY.len(), 1423);
        let mut z = Compress::new(Compression::default(), true);
        let id = z.set_dictionary(HEADER_DICTIONARY).unwrap();
        assert_eq!(id, 0xe3c6_a7c2);
    }

    #[test]
    fn syn_streams_with_a_shared_compression_context_decode_in_order() {
        let mut client = Codec::new();
        let mut bytes = syn_stream(&mut client, 1, false, &[("streamType", "error")]);
        bytes.extend(syn_stream(
            &mut client,
            3,
            false,
            &[("streamType", "stdout")],
        ));
        bytes.extend(syn_stream(
            &mut client,
            5,
            true,
            &[("streamType", "stdin"), ("x", "a\0b")],
        ));
        let mut server = Codec::new();
        let frames = decode_all(&mut server, &bytes);
        assert_eq!(frames.len(), 3);
        let Frame::SynStream {
            stream_id,
            fin,
            headers,
        } = &frames[2]
        else {
            panic!("{frames:?}");
        };
        assert_eq!((*stream_id, *fin), (5, true));
        assert_eq!(header(headers, "streamtype"), Some("stdin"));
        assert_eq!(header(headers, "x"), Some("a"));
        let Frame::SynStream { headers, .. } = &frames[0] else {
            panic!()
        };
        assert_eq!(header(headers, "streamtype"), Some("error"));
    }

    #[test]
    fn a_frame_split_across_reads_waits_for_the_rest() {
        let mut client = Codec::new();
        let frame = data_frame(7, true, b"hello");
        let mut server = Codec::new();
        let mut buf = BytesMut::from(&frame[..6]);
        assert_eq!(server.decode(&mut buf).unwrap(), None);
        buf.extend_from_slice(&frame[6..]);
        assert_eq!(
            server.decode(&mut buf).unwrap(),
            Some(Frame::Data {
                stream_id: 7,
                fin: true,
                data: Bytes::from_static(b"hello")
            })
        );
        let _ = &mut client;
    }

    #[test]
    fn replies_read_back_with_the_clients_inflater() {
        let mut server = Codec::new();
        let mut client = Codec::new();
        for id in [1, 3, 5] {
            let reply = server.syn_reply(id);
            let (got, headers) = read_syn_reply(&mut client, &reply);
            assert_eq!(got, id);
            assert!(headers.is_empty());
        }
    }

    #[test]
    fn ping_and_goaway_have_their_layouts() {
        let mut server = Codec::new();
        let frames = decode_all(&mut server, &[ping_frame(9), goaway_frame(5)].concat());
        assert_eq!(
            frames,
            vec![
                Frame::Ping { id: 9 },
                Frame::GoAway {
                    last_good_stream_id: 5
                }
            ]
        );
    }

    #[test]
    fn bad_input_is_an_error_never_a_panic() {
        let mut codec = Codec::new();
        // version 2
        let mut v2 = ping_frame(1);
        v2[1] = 2;
        assert!(codec.decode(&mut BytesMut::from(&v2[..])).is_err());
        // an oversized length
        let mut huge = data_frame(1, false, b"");
        huge[5] = 0xff;
        assert!(codec.decode(&mut BytesMut::from(&huge[..])).is_err());
        // a SYN_STREAM whose header block is not zlib
        let mut junk = BytesMut::new();
        junk.put_u32(1);
        junk.put_u32(0);
        junk.put_u16(0);
        junk.put_slice(b"not zlib at all");
        let frame = control_frame(SYN_STREAM, 0, &junk);
        assert!(
            Codec::new()
                .decode(&mut BytesMut::from(&frame[..]))
                .is_err()
        );
        // a truncated fixed part
        let short = control_frame(RST_STREAM, 0, &[0, 0, 0, 1]);
        assert!(
            Codec::new()
                .decode(&mut BytesMut::from(&short[..]))
                .is_err()
        );
        // a header block whose pair count promises more than it holds
        assert!(parse_header_block(&[0, 0, 0, 2, 0, 0, 0, 1, b'a']).is_err());
    }

    #[test]
    fn a_header_block_that_expands_without_bound_is_refused() {
        let mut client = Codec::new();
        let big = "v".repeat(MAX_HEADER_BLOCK_LEN * 2);
        let frame = syn_stream(&mut client, 1, false, &[("streamtype", &big)]);
        assert!(frame.len() < MAX_HEADER_BLOCK_LEN / 4, "compresses well");
        let err = Codec::new()
            .decode(&mut BytesMut::from(&frame[..]))
            .unwrap_err();
        assert!(err.0.contains("more than"), "{err}");
    }
}
