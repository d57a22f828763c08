//! Protobuf's wire format: varints, keys and length-delimited fields.

use super::ProtoError;

/// One field as it stands on the wire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

impl Value<'_> {
    pub fn wire_name(&self) -> &'static str {
        match self {
            Value::Varint(_) => "varint",
            Value::Fixed64(_) => "fixed64",
            Value::Fixed32(_) => "fixed32",
            Value::Bytes(_) => "length-delimited",
        }
    }
}

/// Iterates over the `(field number, value)` pairs of one message.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let (&byte, rest) = self
                .buf
                .split_first()
                .ok_or(ProtoError::Truncated("a varint"))?;
            self.buf = rest;
            if shift == 63 && byte > 1 {
                return Err(ProtoError::LongVarint);
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ProtoError::LongVarint)
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ProtoError> {
        if n > self.buf.len() {
            return Err(ProtoError::Truncated(what));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn read_field(&mut self) -> Result<(u32, Value<'a>), ProtoError> {
        let key = self.varint()?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|&n| n > 0 && n < (1 << 29))
            .ok_or(ProtoError::BadFieldNumber(key >> 3))?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                let b = self.take(8, "a fixed64 field")?;
                Value::Fixed64(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            }
            2 => {
                let len = usize::try_from(self.varint()?)
                    .map_err(|_| ProtoError::Truncated("a length-delimited field"))?;
                Value::Bytes(self.take(len, "a length-delimited field")?)
            }
            5 => {
                let b = self.take(4, "a fixed32 field")?;
                Value::Fixed32(u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
            }
            other => return Err(ProtoError::WireType(other)),
        };
        Ok((number, value))
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<(u32, Value<'a>), ProtoError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let item = self.read_field();
        if item.is_err() {
            // Stop after the first error: the rest cannot be framed.
            self.buf = &[];
        }
        Some(item)
    }
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_key(out: &mut Vec<u8>, number: u32, wire: u8) {
    put_varint(out, (u64::from(number) << 3) | u64::from(wire));
}

pub fn put_bytes(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    put_key(out, number, 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Writes a length-delimited field whose payload `body` writes, without a
/// second buffer: the payload is written after a one-byte length guess and
/// moved when its length needs more bytes.
pub fn put_nested<E>(
    out: &mut Vec<u8>,
    number: u32,
    body: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    put_key(out, number, 2);
    let at = out.len();
    out.push(0);
    body(out)?;
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        // Widen the one-byte guess in place, without a buffer on the heap
        // (a payload over 127 bytes is most objects' metadata).
        let mut prefix = [0u8; 10];
        let mut width = 0;
        let mut rest = len as u64;
        while rest >= 0x80 {
            prefix[width] = (rest as u8 & 0x7f) | 0x80;
            rest >>= 7;
            width += 1;
        }
        prefix[width] = rest as u8;
        width += 1;
        let end = out.len();
        out.resize(end + width - 1, 0);
        out.copy_within(at + 1..end, at + width);
        out[at..at + width].copy_from_slice(&prefix[..width]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nested_field_is_framed_as_the_same_bytes_written_directly_at_any_length() {
        for len in [0, 1, 127, 128, 300, 16_383, 16_384, 2_097_152] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut direct = vec![7];
            put_bytes(&mut direct, 3, &payload);
            let mut nested = vec![7];
            put_nested(&mut nested, 3, |out| {
                out.extend_from_slice(&payload);
                Ok::<_, ()>(())
            })
            .unwrap();
            assert_eq!(nested, direct, "a payload of {len} bytes");
        }
    }
}
