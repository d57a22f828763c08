//! Just enough of the Kubernetes protobuf encoding to accept what kubectl
//! sends in protobuf: its generator commands (`kubectl create configmap`,
//! `create secret`, `create namespace`, `create serviceaccount`, `create
//! role`, `create clusterrole`, `create rolebinding`, `create
//! clusterrolebinding`, `create deployment`, `create service …`, `create
//! job`) encode the new object as `application/vnd.kubernetes.protobuf`,
//! and client-go has no JSON fallback for protobuf. kube-sim answers in
//! JSON, which kubectl accepts.
//!
//! Wire format: the magic `k8s\0`, then a `runtime.Unknown` message whose
//! `raw` field holds the object message. Unsupported kinds get a 415.

mod messages;
mod schema;

use serde_json::{Map, Value, json};

pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
const MAGIC: &[u8] = b"k8s\0";
const RBAC_V1: &str = "rbac.authorization.k8s.io/v1";

#[derive(Debug, PartialEq)]
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// Iterates over the (field number, value) pairs of one message.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.buf.split_first().ok_or("truncated varint")?;
            self.buf = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn next_field(&mut self) -> Option<Result<(u64, Field<'a>), String>> {
        if self.buf.is_empty() {
            return None;
        }
        Some(self.read_field())
    }

    fn read_field(&mut self) -> Result<(u64, Field<'a>), String> {
        let key = self.varint()?;
        let number = key >> 3;
        let field = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.skip(8)?;
                Field::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| "length overflow")?;
                if len > self.buf.len() {
                    return Err("truncated length-delimited field".into());
                }
                let (bytes, rest) = self.buf.split_at(len);
                self.buf = rest;
                Field::Bytes(bytes)
            }
            5 => {
                self.skip(4)?;
                Field::Fixed
            }
            other => return Err(format!("unsupported wire type {other}")),
        };
        Ok((number, field))
    }

    fn skip(&mut self, n: usize) -> Result<(), String> {
        if n > self.buf.len() {
            return Err("truncated fixed-width field".into());
        }
        self.buf = &self.buf[n..];
        Ok(())
    }
}

fn fields(buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>, String> {
    let mut reader = Reader { buf };
    let mut out = Vec::new();
    while let Some(field) = reader.next_field() {
        out.push(field?);
    }
    Ok(out)
}

fn text(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a string field is not UTF-8".to_string())
}

/// `ObjectMeta`: the fields a client may set on create; server-owned ones
/// are accepted only empty.
fn object_meta(bytes: &[u8]) -> Result<Value, String> {
    schema::decode(&messages::OBJECT_META, bytes).map(Value::Object)
}

fn push(obj: &mut Map<String, Value>, name: &str, value: Value) {
    let list = obj.entry(name).or_insert_with(|| Value::Array(Vec::new()));
    if let Some(list) = list.as_array_mut() {
        list.push(value);
    }
}

/// A message whose fields are all strings, `repeated` ones collected into
/// lists: `names[n - 1]` is field `n`'s JSON name.
fn strings_message(bytes: &[u8], names: &[(&str, bool)]) -> Result<Value, String> {
    let mut obj = Map::new();
    for (number, field) in fields(bytes)? {
        let Field::Bytes(b) = field else { continue };
        let Some(&(name, repeated)) = usize::try_from(number)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| names.get(i))
        else {
            continue;
        };
        if repeated {
            push(&mut obj, name, text(b)?.into());
        } else if !b.is_empty() {
            obj.insert(name.into(), text(b)?.into());
        }
    }
    Ok(Value::Object(obj))
}

const AUTHORIZATION_V1: &str = "authorization.k8s.io/v1";
const AUTHENTICATION_V1: &str = "authentication.k8s.io/v1";

/// authorization/v1 `ResourceAttributes` and `NonResourceAttributes`
/// inside an access review's spec: resourceAttributes = 1,
/// nonResourceAttributes = 2, then (SubjectAccessReview only) user = 3,
/// groups = 4, uid = 6.
fn access_review_spec(bytes: &[u8]) -> Result<Value, String> {
    let mut spec = Map::new();
    for (number, field) in fields(bytes)? {
        let Field::Bytes(b) = field else { continue };
        match number {
            1 => drop(spec.insert(
                "resourceAttributes".into(),
                strings_message(
                    b,
                    &[
                        ("namespace", false),
                        ("verb", false),
                        ("group", false),
                        ("version", false),
                        ("resource", false),
                        ("subresource", false),
                        ("name", false),
                    ],
                )?,
            )),
            2 => drop(spec.insert(
                "nonResourceAttributes".into(),
                strings_message(b, &[("path", false), ("verb", false)])?,
            )),
            3 => drop(spec.insert("user".into(), text(b)?.into())),
            4 => push(&mut spec, "groups", text(b)?.into()),
            6 => drop(spec.insert("uid".into(), text(b)?.into())),
            _ => {}
        }
    }
    Ok(Value::Object(spec))
}

/// An access review (metadata = 1, spec = 2) or a SelfSubjectReview
/// (metadata = 1 only matters).
fn review(raw: &[u8]) -> Result<Map<String, Value>, String> {
    let mut obj = Map::new();
    for (number, field) in fields(raw)? {
        match (number, field) {
            (1, Field::Bytes(b)) => drop(obj.insert("metadata".into(), object_meta(b)?)),
            (2, Field::Bytes(b)) => drop(obj.insert("spec".into(), access_review_spec(b)?)),
            _ => {}
        }
    }
    Ok(obj)
}

/// Decodes a protobuf-encoded object into its JSON form.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or("missing the k8s protobuf magic prefix")?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), None);
    for (number, field) in fields(envelope)? {
        match (number, field) {
            (1, Field::Bytes(type_meta)) => {
                for (n, f) in fields(type_meta)? {
                    match (n, f) {
                        (1, Field::Bytes(b)) => api_version = text(b)?,
                        (2, Field::Bytes(b)) => kind = text(b)?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(b)) => raw = Some(b),
            _ => {}
        }
    }
    let raw = raw.ok_or("protobuf envelope without an object")?;
    let mut obj = match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => schema::decode(&messages::CONFIG_MAP, raw)?,
        ("v1", "Secret") => schema::decode(&messages::SECRET, raw)?,
        ("v1", "Namespace") => schema::decode(&messages::NAMESPACE, raw)?,
        ("v1", "ServiceAccount") => schema::decode(&messages::SERVICE_ACCOUNT, raw)?,
        (RBAC_V1, "Role") => schema::decode(&messages::ROLE, raw)?,
        (RBAC_V1, "ClusterRole") => schema::decode(&messages::CLUSTER_ROLE, raw)?,
        (RBAC_V1, "RoleBinding" | "ClusterRoleBinding") => {
            schema::decode(&messages::ROLE_BINDING, raw)?
        }
        (
            AUTHORIZATION_V1,
            "SelfSubjectAccessReview" | "SubjectAccessReview" | "LocalSubjectAccessReview",
        ) => review(raw)?,
        ("apps/v1", "Deployment") => schema::decode(&messages::DEPLOYMENT, raw)?,
        ("v1", "Service") => schema::decode(&messages::SERVICE, raw)?,
        ("batch/v1", "Job") => schema::decode(&messages::JOB, raw)?,
        (AUTHENTICATION_V1, "TokenRequest") => schema::decode(&messages::TOKEN_REQUEST, raw)?,
        (AUTHENTICATION_V1, "SelfSubjectReview") => {
            let mut obj = review(raw)?;
            obj.remove("spec");
            obj
        }
        _ => {
            return Err(format!(
                "kube-sim decodes protobuf only for v1 ConfigMap, Secret, Namespace, ServiceAccount and Service, apps/v1 Deployment, batch/v1 Job, {RBAC_V1} Role, ClusterRole, RoleBinding and ClusterRoleBinding, TokenRequest, and the access and self-subject reviews, not {api_version} {kind}; send JSON"
            ));
        }
    };
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn bytes_field(number: u64, payload: &[u8], out: &mut Vec<u8>) {
        varint(number << 3 | 2, out);
        varint(payload.len() as u64, out);
        out.extend_from_slice(payload);
    }

    fn entry(k: &str, v: &[u8]) -> Vec<u8> {
        let mut e = Vec::new();
        bytes_field(1, k.as_bytes(), &mut e);
        bytes_field(2, v, &mut e);
        e
    }

    #[test]
    fn a_protobuf_configmap_decodes_to_its_json_form() {
        let mut meta = Vec::new();
        bytes_field(1, b"c1", &mut meta);
        bytes_field(11, &entry("app", b"web"), &mut meta);
        let mut cm = Vec::new();
        bytes_field(1, &meta, &mut cm);
        bytes_field(2, &entry("a", b"b"), &mut cm);
        bytes_field(3, &entry("bin", &[0, 1]), &mut cm);
        let mut type_meta = Vec::new();
        bytes_field(1, b"v1", &mut type_meta);
        bytes_field(2, b"ConfigMap", &mut type_meta);
        let mut body = MAGIC.to_vec();
        bytes_field(1, &type_meta, &mut body);
        bytes_field(2, &cm, &mut body);
        let value = decode(&body).unwrap();
        assert_eq!(
            value,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c1", "labels": {"app": "web"}},
                "data": {"a": "b"},
                "binaryData": {"bin": "AAE="},
            })
        );
    }

    #[test]
    fn truncated_or_foreign_bodies_are_errors_not_panics() {
        assert!(decode(b"nope").is_err());
        assert!(decode(b"k8s\0\x0a\x05ab").is_err());
        let mut body = MAGIC.to_vec();
        let mut type_meta = Vec::new();
        bytes_field(1, b"apps/v1", &mut type_meta);
        bytes_field(2, b"StatefulSet", &mut type_meta);
        bytes_field(1, &type_meta, &mut body);
        bytes_field(2, b"", &mut body);
        assert!(decode(&body).unwrap_err().contains("StatefulSet"));
    }
}

#[cfg(test)]
mod vectors;
