//! Messages whose JSON form is not an object of their fields: timestamps,
//! durations, quantities, int-or-string, embedded JSON, Go named slices and
//! apiextensions' schema unions.

use serde_json::Value;

use super::schema::{Message, Schema, Special, Type};
use super::wire::{self, Reader, Value as Wire};
use super::{EncodeError, ProtoError, decode, encode};

pub fn decode(
    schema: &Schema,
    msg: &Message,
    bytes: &[u8],
    depth: usize,
) -> Result<Value, ProtoError> {
    let fields = Reader::new(bytes).collect::<Result<Vec<_>, _>>()?;
    let varint = |n: u32| {
        fields
            .iter()
            .rev()
            .find_map(|(number, w)| match (number, w) {
                (k, Wire::Varint(v)) if *k == n => Some(*v),
                _ => None,
            })
    };
    let bytes_of = |n: u32| {
        fields
            .iter()
            .rev()
            .find_map(|(number, w)| match (number, w) {
                (k, Wire::Bytes(b)) if *k == n => Some(*b),
                _ => None,
            })
    };
    Ok(match msg.special {
        Special::Time | Special::MicroTime => {
            // Go writes nothing for the zero time.
            if fields.is_empty() {
                return Ok(Value::Null);
            }
            let seconds = varint(1).unwrap_or(0) as i64;
            let nanos = varint(2).unwrap_or(0) as i64 as i32;
            Value::String(format_time(
                seconds,
                nanos,
                msg.special == Special::MicroTime,
            )?)
        }
        Special::Duration => Value::String(format_duration(varint(1).unwrap_or(0) as i64)),
        Special::Quantity => Value::String(decode::text(bytes_of(1).unwrap_or_default())?),
        Special::IntOrString => {
            if varint(1) == Some(1) {
                Value::String(decode::text(bytes_of(3).unwrap_or_default())?)
            } else {
                Value::from(varint(2).unwrap_or(0) as i64 as i32)
            }
        }
        Special::RawJson => raw_json(bytes_of(1).unwrap_or_default())?,
        Special::Array => {
            let ty = msg.fields.first().map_or(Type::String, |f| f.ty);
            let mut items = Vec::new();
            for (number, w) in &fields {
                if *number != 1 {
                    return Err(unknown(schema, msg, *number));
                }
                items.push(decode::scalar(ty, *w)?);
            }
            Value::Array(items)
        }
        Special::SchemaOrArray | Special::SchemaOrBool | Special::SchemaOrStrings => {
            union(schema, msg, &fields, depth)?
        }
        Special::None => {
            return Err(ProtoError::Invalid(format!(
                "{} has no special form",
                msg.name
            )));
        }
    })
}

fn unknown(schema: &Schema, msg: &Message, number: u32) -> ProtoError {
    ProtoError::UnknownField {
        message: msg.name.clone(),
        number,
        kubernetes: schema.kubernetes_version.clone(),
    }
}

/// apiextensions' unions: whichever side the body sets.
fn union(
    schema: &Schema,
    msg: &Message,
    fields: &[(u32, Wire<'_>)],
    depth: usize,
) -> Result<Value, ProtoError> {
    let schema_index = props_index(schema, msg)
        .ok_or_else(|| ProtoError::Invalid(format!("{} has no schema field", msg.name)))?;
    let schema_number = if msg.special == Special::SchemaOrBool {
        2
    } else {
        1
    };
    let mut out = None;
    let mut list = Vec::new();
    let mut allows = None;
    for (number, w) in fields {
        match (msg.special, *number, w) {
            (_, n, Wire::Bytes(b)) if n == schema_number => {
                out = Some(decode::message(schema, schema_index, b, depth + 1)?);
            }
            (Special::SchemaOrArray, 2, Wire::Bytes(b)) => {
                list.push(decode::message(schema, schema_index, b, depth + 1)?)
            }
            (Special::SchemaOrStrings, 2, Wire::Bytes(b)) => {
                list.push(Value::String(decode::text(b)?))
            }
            (Special::SchemaOrBool, 1, Wire::Varint(v)) => allows = Some(*v != 0),
            (_, n, _) => return Err(unknown(schema, msg, n)),
        }
    }
    Ok(match msg.special {
        Special::SchemaOrBool => match out {
            Some(s) if s.as_object().is_some_and(|o| !o.is_empty()) => s,
            _ => Value::Bool(allows.unwrap_or(false)),
        },
        _ => match out {
            Some(s) if list.is_empty() => s,
            _ => Value::Array(list),
        },
    })
}

fn raw_json(bytes: &[u8]) -> Result<Value, ProtoError> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    if bytes.starts_with(super::MAGIC) {
        // An object a protobuf client embedded as protobuf.
        return super::decode_object(bytes);
    }
    serde_json::from_slice(bytes).map_err(|e| {
        ProtoError::Invalid(format!(
            "an embedded object is neither JSON nor protobuf: {e}"
        ))
    })
}

pub fn encode(
    schema: &Schema,
    msg: &Message,
    value: &Value,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), EncodeError> {
    let mismatch = || EncodeError::Shape {
        message: msg.name.clone(),
        found: value.to_string().chars().take(60).collect(),
    };
    match (msg.special, value) {
        (Special::Time | Special::MicroTime, Value::String(s)) => {
            put_time(out, s, msg.special == Special::MicroTime).ok_or_else(mismatch)?;
        }
        (Special::Duration, Value::String(s)) => {
            let nanos = parse_duration(s).ok_or_else(mismatch)?;
            wire::put_key(out, 1, 0);
            wire::put_varint(out, nanos as u64);
        }
        (Special::Quantity, Value::String(s)) => wire::put_bytes(out, 1, s.as_bytes()),
        (Special::Quantity, Value::Number(n)) => wire::put_bytes(out, 1, n.to_string().as_bytes()),
        (Special::IntOrString, Value::Number(n)) => {
            let i = n
                .as_i64()
                .and_then(|i| i32::try_from(i).ok())
                .ok_or_else(mismatch)?;
            wire::put_key(out, 1, 0);
            wire::put_varint(out, 0);
            wire::put_key(out, 2, 0);
            wire::put_varint(out, i as i64 as u64);
        }
        (Special::IntOrString, Value::String(s)) => {
            wire::put_key(out, 1, 0);
            wire::put_varint(out, 1);
            wire::put_bytes(out, 3, s.as_bytes());
        }
        (Special::RawJson, v) => {
            let bytes = serde_json::to_vec(v).map_err(|_| mismatch())?;
            wire::put_bytes(out, 1, &bytes);
        }
        (Special::Array, Value::Array(items)) => {
            for item in items {
                let s = item.as_str().ok_or_else(mismatch)?;
                wire::put_bytes(out, 1, s.as_bytes());
            }
        }
        (Special::SchemaOrBool, Value::Bool(b)) => {
            wire::put_key(out, 1, 0);
            wire::put_varint(out, u64::from(*b));
        }
        (Special::SchemaOrBool, v @ Value::Object(_)) => {
            wire::put_key(out, 1, 0);
            wire::put_varint(out, 1);
            nested_schema(schema, msg, 2, v, out, depth)?;
        }
        (Special::SchemaOrArray, v @ Value::Object(_))
        | (Special::SchemaOrStrings, v @ Value::Object(_)) => {
            nested_schema(schema, msg, 1, v, out, depth)?;
        }
        (Special::SchemaOrArray, Value::Array(items)) => {
            for item in items {
                nested_schema(schema, msg, 2, item, out, depth)?;
            }
        }
        (Special::SchemaOrStrings, Value::Array(items)) => {
            for item in items {
                let s = item.as_str().ok_or_else(mismatch)?;
                wire::put_bytes(out, 2, s.as_bytes());
            }
        }
        _ => return Err(mismatch()),
    }
    Ok(())
}

fn nested_schema(
    schema: &Schema,
    msg: &Message,
    number: u32,
    v: &Value,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), EncodeError> {
    let index = props_index(schema, msg).ok_or_else(|| EncodeError::Shape {
        message: msg.name.clone(),
        found: "a schema".into(),
    })?;
    wire::put_nested(out, number, |out| {
        encode::message(schema, index, v, out, depth + 1)
    })
}

/// A `Time` or `MicroTime` message's fields from its RFC 3339 text.
pub fn put_time(out: &mut Vec<u8>, text: &str, micro: bool) -> Option<()> {
    let (seconds, nanos) = match utc_timestamp(text) {
        Some(parsed) => parsed,
        None => {
            let ts: jiff::Timestamp = text.parse().ok()?;
            floor_seconds(ts.as_second(), ts.subsec_nanosecond())
        }
    };
    wire::put_key(out, 1, 0);
    wire::put_varint(out, seconds as u64);
    let nanos = if micro { nanos } else { 0 };
    if nanos != 0 {
        wire::put_key(out, 2, 0);
        wire::put_varint(out, nanos as i64 as u64);
    }
    Some(())
}

/// Go's `time.Unix()` and `Nanosecond()`: whole seconds rounded down and
/// nanoseconds never negative. jiff rounds a time before 1970 toward zero
/// and gives its fraction as negative nanoseconds instead.
pub(super) fn floor_seconds(seconds: i64, nanos: i32) -> (i64, i32) {
    if nanos < 0 {
        (seconds - 1, nanos + 1_000_000_000)
    } else {
        (seconds, nanos)
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z` as seconds since the epoch and
/// nanoseconds: the one form kube-sim writes, on every object twice or
/// more, read without jiff's general parser (which was a third of a small
/// object's protobuf encoding). Anything else, a valid offset or a leap
/// second included, is `None` and left to jiff.
pub(super) fn utc_timestamp(text: &str) -> Option<(i64, i32)> {
    let b = text.as_bytes();
    if b.len() < 20 || b.last() != Some(&b'Z') {
        return None;
    }
    if b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let number = |digits: &[u8]| {
        digits.iter().try_fold(0i64, |acc, c| {
            c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
        })
    };
    let (year, month, day) = (number(&b[0..4])?, number(&b[5..7])?, number(&b[8..10])?);
    let (hour, minute, second) = (
        number(&b[11..13])?,
        number(&b[14..16])?,
        number(&b[17..19])?,
    );
    let nanos = match &b[19..b.len() - 1] {
        [] => 0,
        [b'.', fraction @ ..] if (1..=9).contains(&fraction.len()) => {
            number(fraction)? * 10i64.pow(9 - fraction.len() as u32)
        }
        _ => return None,
    };
    let month_days = crate::object::days_in_month(year, month)?;
    if day == 0 || day > month_days || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    // Days from 1970-01-01 to the civil date (Howard Hinnant's algorithm:
    // years start in March, so the leap day ends a year).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second;
    Some((seconds, i32::try_from(nanos).ok()?))
}

/// The JSONSchemaProps message a union holds.
fn props_index(schema: &Schema, msg: &Message) -> Option<usize> {
    msg.fields.iter().find_map(|f| match f.ty {
        Type::Message(i) if schema.message(i).name.ends_with(".JsonSchemaProps") => Some(i),
        _ => None,
    })
}

/// RFC 3339 in UTC, with seconds (`Time`) or microseconds (`MicroTime`).
fn format_time(seconds: i64, nanos: i32, micro: bool) -> Result<String, ProtoError> {
    let ts = jiff::Timestamp::new(seconds, if micro { nanos } else { 0 }).map_err(|e| {
        ProtoError::Invalid(format!("a timestamp of {seconds} s is out of range: {e}"))
    })?;
    Ok(if micro {
        format!("{}", ts.strftime("%Y-%m-%dT%H:%M:%S.%6fZ"))
    } else {
        format!("{}", ts.strftime("%Y-%m-%dT%H:%M:%SZ"))
    })
}

/// Go's `time.Duration.String()`: `1h2m3s`, `1.5s`, `300ms`, `0s`.
pub fn format_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        let (unit, div) = if n < 1_000 {
            ("ns", 1)
        } else if n < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{sign}{}{unit}", fraction(n, div));
    }
    let hours = n / 3_600_000_000_000;
    let minutes = (n / 60_000_000_000) % 60;
    let rest = n % 60_000_000_000;
    let mut s = String::from(sign);
    if hours > 0 {
        s.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        s.push_str(&format!("{minutes}m"));
    }
    s.push_str(&format!("{}s", fraction(rest, 1_000_000_000)));
    s
}

fn fraction(n: u64, div: u64) -> String {
    let whole = n / div;
    let frac = n % div;
    if frac == 0 {
        return whole.to_string();
    }
    let width = div.to_string().len() - 1;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// Parses a Go duration string (`1h2m3.5s`, `300ms`, `-1s`).
pub fn parse_duration(s: &str) -> Option<i64> {
    let (negative, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Some(0);
    }
    let mut total: f64 = 0.0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let number: f64 = rest[..end].parse().ok()?;
        rest = &rest[end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[unit_end..];
    }
    let nanos = total.round();
    if !nanos.is_finite() || nanos > i64::MAX as f64 {
        return None;
    }
    Some(if negative {
        -(nanos as i64)
    } else {
        nanos as i64
    })
}
