//! `…/pods/{name}/portforward`: SPDY/3.1 (`portforward.k8s.io`, what
//! client-go's `portforward` package dials) and SPDY tunnelled through a
//! WebSocket (`SPDY/3.1+portforward.k8s.io`, what kubectl dials first).
//!
//! kube-sim has no pod network, so a pod says where its ports lead in the
//! annotation `kube-sim.gpufleet.dev/port-forward`: a comma-separated list
//! of `PORT=HOST:PORT`, for example `8443=127.0.0.1:18443`, where HOST must
//! be a loopback address (kube-sim never dials off the machine). A port the
//! annotation does not name fails as a closed port does: a message on the
//! connection's error stream.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use futures::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::store::Store;

/// The pod annotation naming where forwarded ports lead.
pub const PORT_FORWARD_ANNOTATION: &str = "kube-sim.gpufleet.dev/port-forward";
/// The stream protocol of port-forward over SPDY.
const PROTOCOL: &str = "portforward.k8s.io";
/// The WebSocket subprotocol that tunnels it.
const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";

/// Where a pod's forwarded ports lead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Targets {
    pod: String,
    ports: BTreeMap<u16, SocketAddr>,
}

impl Targets {
    /// Reads the annotation's value; an entry that is not `PORT=HOST:PORT`
    /// with a loopback HOST is an error naming it.
    pub fn parse(pod: &str, annotation: Option<&str>) -> Result<Self, String> {
        let mut ports = BTreeMap::new();
        for entry in annotation
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            let bad = |why: &str| {
                format!(
                    "annotation {PORT_FORWARD_ANNOTATION}: entry {entry:?} {why}; write PORT=HOST:PORT, e.g. 8443=127.0.0.1:18443"
                )
            };
            let (port, address) = entry.split_once('=').ok_or_else(|| bad("has no '='"))?;
            let port: u16 = port
                .trim()
                .parse()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| bad("does not start with a port from 1 to 65535"))?;
            let address: SocketAddr = address
                .trim()
                .parse()
                .map_err(|_| bad("does not name HOST:PORT as an IP address and port"))?;
            if !address.ip().is_loopback() {
                return Err(bad("names an address that is not loopback"));
            }
            ports.insert(port, address);
        }
        Ok(Self {
            pod: pod.to_string(),
            ports,
        })
    }

    /// The address `port` leads to, or why it leads nowhere.
    pub fn address(&self, port: u16) -> Result<SocketAddr, String> {
        self.ports.get(&port).copied().ok_or_else(|| {
            format!(
                "pod {} has no port {port} in annotation {PORT_FORWARD_ANNOTATION}",
                self.pod
            )
        })
    }
}

#[derive(Clone)]
pub(crate) struct PortForwardState {
    pub store: Arc<Store>,
}

/// Routes merged into the main router; they win over its fallback.
pub(crate) fn routes(state: PortForwardState) -> Router {
    Router::new()
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/portforward",
            any(port_forward),
        )
        .with_state(state)
}

async fn port_forward(
    State(state): State<PortForwardState>,
    Path((namespace, name)): Path<(String, String)>,
    request: Request,
) -> Response {
    let targets = match prepare(&state.store, &namespace, &name) {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let shutdown = state.store.shutdown.clone();
    let upgrade = request
        .headers()
        .get_all(header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .find_map(|v| {
            if v.eq_ignore_ascii_case("websocket") {
                Some(true)
            } else if v.eq_ignore_ascii_case(super::spdy::UPGRADE) {
                Some(false)
            } else {
                None
            }
        });
    match upgrade {
        Some(true) => {
            let (mut parts, _body) = request.into_parts();
            match WebSocketUpgrade::from_request_parts(&mut parts, &state).await {
                Ok(upgrade) => tunnel(upgrade, targets, shutdown),
                Err(rejection) => rejection.into_response(),
            }
        }
        Some(false) => spdy(request, targets, shutdown),
        None => ApiError::bad_request(format!(
            "Upgrade request required: kube-sim serves port-forward over SPDY/3.1 ({PROTOCOL}) and WebSocket ({TUNNEL_PROTOCOL})"
        ))
        .into_response(),
    }
}

/// The apiserver's checks: the pod exists and is bound to a node. The
/// annotation is kube-sim's own and is checked here too.
fn prepare(store: &Store, namespace: &str, name: &str) -> Result<Targets, ApiError> {
    let rt = store
        .resolve("", "v1", "pods")
        .ok_or_else(ApiError::no_such_resource)?;
    let stored = store.get(&rt, Some(namespace), name)?;
    let pod: Pod = serde_json::from_slice(&stored.json)
        .map_err(|e| ApiError::internal(format!("stored pod {namespace}/{name}: {e}")))?;
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_none_or(str::is_empty)
    {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let annotation = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PORT_FORWARD_ANNOTATION))
        .map(String::as_str);
    Targets::parse(&format!("{namespace}/{name}"), annotation).map_err(ApiError::bad_request)
}

fn spdy(request: Request, targets: Targets, shutdown: CancellationToken) -> Response {
    super::spdy::negotiate_and_upgrade(request, PROTOCOL, move |io| {
        super::spdy::portforward::serve(io, targets, shutdown)
    })
}

/// SPDY inside WebSocket binary messages: the messages are pumped through
/// an in-memory pipe into the same SPDY session.
fn tunnel(upgrade: WebSocketUpgrade, targets: Targets, shutdown: CancellationToken) -> Response {
    let upgrade = upgrade.protocols([TUNNEL_PROTOCOL]);
    if upgrade.selected_protocol().is_none() {
        return ApiError::bad_request(format!(
            "no supported WebSocket subprotocol was offered; kube-sim speaks {TUNNEL_PROTOCOL}"
        ))
        .into_response();
    }
    upgrade.on_upgrade(move |socket| async move {
        let (session_end, pump_end) = tokio::io::duplex(64 * 1024);
        let session = tokio::spawn(super::spdy::portforward::serve(
            session_end,
            targets,
            shutdown,
        ));
        pump(socket, pump_end).await;
        let _ = session.await;
    })
}

async fn pump(socket: WebSocket, pipe: tokio::io::DuplexStream) {
    let (mut sink, mut stream) = socket.split();
    let (mut pipe_reader, mut pipe_writer) = tokio::io::split(pipe);
    let inbound = async {
        while let Some(Ok(message)) = stream.next().await {
            match message {
                Message::Binary(bytes) if pipe_writer.write_all(&bytes).await.is_err() => break,
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = pipe_writer.shutdown().await;
    };
    let outbound = async {
        let mut chunk = vec![0u8; 32 * 1024];
        loop {
            match pipe_reader.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let message = Message::Binary(bytes::Bytes::copy_from_slice(&chunk[..n]));
                    if sink.send(message).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = sink.send(Message::Close(None)).await;
    };
    tokio::join!(inbound, outbound);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotation_maps_ports_to_loopback_addresses() {
        let t = Targets::parse("ns/p", Some("8443=127.0.0.1:18443, 9090=[::1]:19090")).unwrap();
        assert_eq!(t.address(8443), Ok("127.0.0.1:18443".parse().unwrap()));
        assert_eq!(t.address(9090), Ok("[::1]:19090".parse().unwrap()));
        assert_eq!(
            t.address(80),
            Err("pod ns/p has no port 80 in annotation kube-sim.gpufleet.dev/port-forward".into())
        );
        assert_eq!(Targets::parse("ns/p", None).unwrap().ports.len(), 0);
    }

    #[test]
    fn bad_entries_are_named() {
        for (value, why) in [
            ("8443", "has no '='"),
            ("0=127.0.0.1:1", "port from 1 to 65535"),
            ("http=127.0.0.1:1", "port from 1 to 65535"),
            ("80=localhost:8080", "as an IP address and port"),
            ("80=10.0.0.1:8080", "not loopback"),
        ] {
            let err = Targets::parse("ns/p", Some(value)).unwrap_err();
            assert!(err.contains(why) && err.contains(value), "{value}: {err}");
        }
    }
}
