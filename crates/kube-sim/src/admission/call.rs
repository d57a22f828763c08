//! Calling a webhook: where it is (a URL, or a Service resolved through its
//! EndpointSlices), TLS trusting only the configuration's `caBundle`, one
//! POST of the AdmissionReview bounded by `timeoutSeconds`.
//!
//! kube-sim has no Pod network, so a `service` reference is resolved as
//! kube-apiserver resolves it with `--enable-aggregator-routing`: the
//! Service's port, then a ready address of an EndpointSlice labelled
//! `kubernetes.io/service-name` (or the Endpoints object of that name),
//! dialled directly. A webhook server on this machine is reached by giving
//! its Service a slice with one of the machine's own addresses (loopback
//! ones are refused in slices, as kube-apiserver refuses them). The TLS
//! server name is
//! still `<service>.<namespace>.svc`, the name certificates are made for.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;

use super::webhooks::Endpoint;
use crate::store::Store;

/// Largest answer read from a webhook (kube-apiserver reads at most this
/// much of an AdmissionReview response too).
const MAX_RESPONSE_BYTES: usize = 3 * 1024 * 1024;

/// Where one call goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Destination {
    /// `host:port` to dial.
    pub address: String,
    /// The name the server's certificate must carry.
    pub server_name: String,
    /// The URL as error messages show it (`?timeout=` included).
    pub url: String,
    /// Path and query sent in the request line.
    pub path_and_query: String,
}

/// Resolves a webhook's endpoint; the error says what is missing, in the
/// words kube-apiserver's resolver uses.
pub(crate) fn destination(
    store: &Store,
    endpoint: &Endpoint,
    timeout: Duration,
) -> Result<Destination, String> {
    let timeout_query = format!("timeout={}s", timeout.as_secs());
    match endpoint {
        Endpoint::Url(url) => {
            let uri: http::Uri = url
                .parse()
                .map_err(|e| format!("invalid URL {url:?}: {e}"))?;
            let host = uri
                .host()
                .ok_or_else(|| format!("URL {url:?} has no host"))?;
            let port = uri.port_u16().unwrap_or(443);
            let path = match uri.path() {
                "" => "/",
                p => p,
            };
            let path_and_query = match uri.query() {
                Some(q) => format!("{path}?{q}&{timeout_query}"),
                None => format!("{path}?{timeout_query}"),
            };
            let bare_host = host.trim_start_matches('[').trim_end_matches(']');
            Ok(Destination {
                address: format!("{host}:{port}"),
                server_name: bare_host.to_string(),
                url: format!("https://{host}:{port}{path_and_query}"),
                path_and_query,
            })
        }
        Endpoint::Service {
            namespace,
            name,
            path,
            port,
        } => {
            let address = service_address(store, namespace, name, *port)?;
            let path = if path.is_empty() { "/" } else { path };
            let path_and_query = format!("{path}?{timeout_query}");
            Ok(Destination {
                address,
                server_name: format!("{name}.{namespace}.svc"),
                url: format!("https://{name}.{namespace}.svc:{port}{path_and_query}"),
                path_and_query,
            })
        }
    }
}

/// The address behind port `port` of Service `namespace/name`.
fn service_address(
    store: &Store,
    namespace: &str,
    name: &str,
    port: u16,
) -> Result<String, String> {
    let service = store
        .object_value("", "services", namespace, name)
        .ok_or_else(|| format!("service \"{name}\" not found"))?;
    let service_port = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .and_then(|ports| {
            ports
                .iter()
                .find(|p| p.get("port").and_then(Value::as_u64) == Some(u64::from(port)))
        })
        .ok_or_else(|| format!("no service port {port} found for service {name:?}"))?;
    let port_name = service_port
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let slices = store.values_of("discovery.k8s.io", "endpointslices", Some(namespace));
    for slice in slices.iter().filter(|s| {
        s.pointer("/metadata/labels/kubernetes.io~1service-name")
            .and_then(Value::as_str)
            == Some(name)
    }) {
        let Some(slice_port) = slice
            .get("ports")
            .and_then(Value::as_array)
            .and_then(|ports| {
                ports.iter().find(|p| {
                    p.get("name").and_then(Value::as_str).unwrap_or_default() == port_name
                })
            })
            .and_then(|p| p.get("port").and_then(Value::as_u64))
        else {
            continue;
        };
        let ready = slice
            .get("endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|e| e.pointer("/conditions/ready").and_then(Value::as_bool) != Some(false))
            .filter_map(|e| e.pointer("/addresses/0").and_then(Value::as_str))
            .next();
        if let Some(address) = ready {
            return Ok(join_host_port(address, slice_port));
        }
    }
    // Services whose addresses are kept in an Endpoints object (kube-sim
    // does not mirror them into slices as kube-controller-manager does).
    if let Some(endpoints) = store.object_value("", "endpoints", namespace, name) {
        for subset in endpoints
            .get("subsets")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let subset_port = subset
                .get("ports")
                .and_then(Value::as_array)
                .and_then(|ports| {
                    ports.iter().find(|p| {
                        p.get("name").and_then(Value::as_str).unwrap_or_default() == port_name
                    })
                })
                .and_then(|p| p.get("port").and_then(Value::as_u64));
            let address = subset.pointer("/addresses/0/ip").and_then(Value::as_str);
            if let (Some(port), Some(address)) = (subset_port, address) {
                return Ok(join_host_port(address, port));
            }
        }
    }
    Err(format!("no endpoints available for service {name:?}"))
}

fn join_host_port(host: &str, port: u64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The TLS client for one webhook: only its `caBundle` is trusted.
fn tls_config(ca_bundle: &[u8]) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_bundle) {
        let cert = cert.map_err(|e| format!("caBundle: {e}"))?;
        roots.add(cert).map_err(|e| format!("caBundle: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// POSTs `review` to the destination and returns the answer's body; the
/// error reads like Go's `Post "<url>": <cause>`.
pub(crate) async fn post(
    destination: &Destination,
    ca_bundle: &[u8],
    review: &Value,
    timeout: Duration,
) -> Result<Bytes, String> {
    let url = &destination.url;
    let attempt = async {
        let config = tls_config(ca_bundle)?;
        let tcp = tokio::net::TcpStream::connect(&destination.address)
            .await
            .map_err(|e| format!("dial tcp {}: {e}", destination.address))?;
        let server_name = ServerName::try_from(destination.server_name.clone())
            .map_err(|e| format!("invalid server name {:?}: {e}", destination.server_name))?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(server_name, tcp)
            .await
            .map_err(|e| format!("tls: failed to verify certificate: {e}"))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(tls))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let request = http::Request::post(destination.path_and_query.as_str())
            .header(http::header::HOST, destination.server_name.as_str())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json")
            .body(Full::new(Bytes::from(review.to_string())))
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        if !status.is_success() {
            return Err(format!(
                "the server answered {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(512)])
            ));
        }
        Ok(body)
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(cause)) => Err(format!("Post {url:?}: {cause}")),
        Err(_) => Err(format!("Post {url:?}: context deadline exceeded")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_keeps_its_path_and_query_and_gets_the_timeout() {
        let store = Store::new(Default::default());
        let d = destination(
            &store,
            &Endpoint::Url("https://127.0.0.1:8443/validate?x=1".into()),
            Duration::from_secs(5),
        );
        let d = d.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.address, "127.0.0.1:8443");
        assert_eq!(d.server_name, "127.0.0.1");
        assert_eq!(d.path_and_query, "/validate?x=1&timeout=5s");
    }

    #[test]
    fn a_missing_service_is_named() {
        let store = Store::new(Default::default());
        let endpoint = Endpoint::Service {
            namespace: "default".into(),
            name: "hooks".into(),
            path: String::new(),
            port: 443,
        };
        assert_eq!(
            destination(&store, &endpoint, Duration::from_secs(1)),
            Err("service \"hooks\" not found".to_string())
        );
    }
}
