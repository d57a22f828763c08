//! `…/pods/{name}/exec`: the checks the apiserver makes before upgrading
//! (404 for a missing pod, 400 for a bad container or options), then one
//! session per exec, over WebSocket (`v5`/`v4.channel.k8s.io`) or SPDY/3.1
//! (`v4.channel.k8s.io`), whichever the client's upgrade asks for.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::protocol::{self, ClientFrame, ExecParams, Protocol};
use super::{ExecFuture, ExecHandlers, ExecOutput, ExecRequest, ExecStdin, ExecTarget};
use crate::error::ApiError;
use crate::store::Store;

#[derive(Clone)]
pub(crate) struct ExecState {
    pub store: Arc<Store>,
    pub handlers: ExecHandlers,
}

/// Routes merged into the main router; they win over its fallback.
pub(crate) fn routes(state: ExecState) -> Router {
    Router::new()
        .route("/api/v1/namespaces/{namespace}/pods/{name}/exec", any(exec))
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/attach",
            any(attach),
        )
        .with_state(state)
}

/// Which subresource a session serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// `pods/exec`: run the query's command.
    Exec,
    /// `pods/attach`: join the container's own process, its `command` and
    /// `args` as far as handlers are concerned.
    Attach,
}

/// An exec or attach that passed the apiserver's checks.
pub(super) struct Prepared {
    mode: Mode,
    namespace: String,
    pod: Pod,
    labels: BTreeMap<String, String>,
    container: String,
    pub(super) params: ExecParams,
}

/// The upgrade a request asks for.
enum Upgrade {
    WebSocket,
    Spdy,
    None,
}

fn upgrade_of(request: &Request) -> Upgrade {
    let asked = |value: &str| {
        request
            .headers()
            .get_all(header::UPGRADE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|v| v.trim().eq_ignore_ascii_case(value))
    };
    if asked("websocket") {
        Upgrade::WebSocket
    } else if asked(super::spdy::UPGRADE) {
        Upgrade::Spdy
    } else {
        Upgrade::None
    }
}

async fn exec(
    State(state): State<ExecState>,
    Path((namespace, name)): Path<(String, String)>,
    request: Request,
) -> Response {
    connect(state, Mode::Exec, namespace, name, request).await
}

async fn attach(
    State(state): State<ExecState>,
    Path((namespace, name)): Path<(String, String)>,
    request: Request,
) -> Response {
    connect(state, Mode::Attach, namespace, name, request).await
}

async fn connect(
    state: ExecState,
    mode: Mode,
    namespace: String,
    name: String,
    request: Request,
) -> Response {
    let params = ExecParams::parse(request.uri().query().unwrap_or_default());
    let prepared = match prepare(&state.store, mode, &namespace, &name, params) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let handlers = state.handlers.clone();
    let shutdown = state.store.shutdown.clone();
    match upgrade_of(&request) {
        Upgrade::Spdy => super::spdy::upgrade(request, prepared, handlers, shutdown),
        Upgrade::WebSocket => {
            let (mut parts, _body) = request.into_parts();
            match WebSocketUpgrade::from_request_parts(&mut parts, &state).await {
                Ok(upgrade) => websocket(upgrade, prepared, handlers, shutdown),
                Err(rejection) => rejection.into_response(),
            }
        }
        Upgrade::None => ApiError::bad_request(
            "Upgrade request required: kube-sim serves exec and attach over WebSocket (v5.channel.k8s.io or v4.channel.k8s.io) and SPDY/3.1 (v4.channel.k8s.io)",
        )
        .into_response(),
    }
}

fn websocket(
    upgrade: WebSocketUpgrade,
    prepared: Prepared,
    handlers: ExecHandlers,
    shutdown: CancellationToken,
) -> Response {
    let upgrade = upgrade.protocols(protocol::SUPPORTED);
    let Some(protocol) = upgrade
        .selected_protocol()
        .and_then(|p| Protocol::from_header(p.as_bytes()))
    else {
        return ApiError::bad_request(format!(
            "no supported WebSocket subprotocol was offered; kube-sim speaks {}",
            protocol::SUPPORTED.join(", ")
        ))
        .into_response();
    };
    upgrade.on_upgrade(move |socket| session(socket, protocol, prepared, handlers, shutdown))
}

fn prepare(
    store: &Store,
    mode: Mode,
    namespace: &str,
    name: &str,
    mut params: ExecParams,
) -> Result<Prepared, ApiError> {
    let rt = store
        .resolve("", "v1", "pods")
        .ok_or_else(ApiError::no_such_resource)?;
    let stored = store.get(&rt, Some(namespace), name)?;
    match mode {
        Mode::Exec => params.validate(),
        Mode::Attach => params.validate_streams(),
    }
    .map_err(ApiError::bad_request)?;
    let pod: Pod = serde_json::from_slice(&stored.json)
        .map_err(|e| ApiError::internal(format!("stored pod {namespace}/{name}: {e}")))?;
    let container =
        choose_container(&pod, name, params.container.as_deref()).map_err(ApiError::bad_request)?;
    if let Some(phase) = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .filter(|p| matches!(*p, "Succeeded" | "Failed"))
    {
        return Err(ApiError::bad_request(format!(
            "cannot exec into a container in a completed pod; current phase is {phase}"
        )));
    }
    if mode == Mode::Attach {
        params.command = entrypoint(&pod, &container);
    }
    Ok(Prepared {
        mode,
        namespace: namespace.to_string(),
        labels: stored.labels.clone(),
        pod,
        container,
        params,
    })
}

/// A container's `command` followed by its `args`, as written in the pod
/// (empty when the image's own entrypoint runs).
fn entrypoint(pod: &Pod, container: &str) -> Vec<String> {
    let spec = pod.spec.as_ref();
    let all = spec.into_iter().flat_map(|s| {
        let init = s.init_containers.iter().flatten();
        s.containers.iter().chain(init)
    });
    all.filter(|c| c.name == container)
        .map(|c| {
            let command = c.command.iter().flatten();
            command.chain(c.args.iter().flatten()).cloned().collect()
        })
        .next()
        .unwrap_or_default()
}

/// The container an exec addresses: the named one if the pod has it, or the
/// only container when none is named, with the apiserver's messages.
fn choose_container(pod: &Pod, pod_name: &str, wanted: Option<&str>) -> Result<String, String> {
    let spec = pod.spec.as_ref();
    let main: Vec<&str> = spec
        .map(|s| s.containers.iter().map(|c| c.name.as_str()).collect())
        .unwrap_or_default();
    let others = spec.into_iter().flat_map(|s| {
        let init = s.init_containers.iter().flatten().map(|c| c.name.as_str());
        let ephemeral = s
            .ephemeral_containers
            .iter()
            .flatten()
            .map(|c| c.name.as_str());
        init.chain(ephemeral)
    });
    match wanted {
        Some(name) if main.contains(&name) || others.clone().any(|c| c == name) => {
            Ok(name.to_string())
        }
        Some(name) => Err(format!("container {name} is not valid for pod {pod_name}")),
        None => match main.as_slice() {
            [only] => Ok(only.to_string()),
            _ => Err(format!(
                "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                main.join(" ")
            )),
        },
    }
}

/// A command handed to its handler: the exec's options, the sender of its
/// stdin (when the client asked for stdin) and the running handler.
pub(super) struct Started {
    pub params: ExecParams,
    pub stdin_tx: Option<mpsc::UnboundedSender<Bytes>>,
    pub running: ExecFuture,
}

/// Finds the handler for `job` and starts it; a command no handler answers
/// exits 127 as a shell's "command not found" does.
pub(super) fn start(job: Prepared, handlers: &ExecHandlers) -> Started {
    let params = job.params;
    let target = ExecTarget {
        namespace: &job.namespace,
        labels: &job.labels,
        container: &job.container,
        command: &params.command,
    };
    let handler = handlers.find(&target);
    let (stdin_tx, stdin) = if params.stdin {
        let (tx, rx) = ExecStdin::channel();
        (Some(tx), rx)
    } else {
        (None, ExecStdin::empty())
    };
    let request = ExecRequest {
        attach: job.mode == Mode::Attach,
        namespace: job.namespace,
        pod: job.pod,
        container: job.container,
        command: params.command.clone(),
        tty: params.tty,
        stdin,
    };
    let running = match handler {
        Some(handler) => handler.handle(request),
        // A simulated container prints nothing: an attach no handler
        // answers ends at once, successfully.
        None if job.mode == Mode::Attach => Box::pin(async { ExecOutput::default() }) as ExecFuture,
        None => {
            let output = ExecOutput::command_not_found(&params.command);
            Box::pin(async move { output }) as ExecFuture
        }
    };
    Started {
        params,
        stdin_tx,
        running,
    }
}

/// What goes to the client's stdout and stderr, by its options. A terminal
/// merges stderr into stdout, as a real TTY does.
pub(super) fn route_output<'a>(
    params: &ExecParams,
    output: &'a ExecOutput,
) -> (Option<Vec<u8>>, Option<&'a [u8]>) {
    let stdout = (params.stdout || params.tty).then(|| {
        let mut out = output.stdout.clone();
        if params.tty {
            out.extend_from_slice(&output.stderr);
        }
        out
    });
    let stderr = (params.stderr && !params.tty).then_some(output.stderr.as_slice());
    (stdout, stderr)
}

async fn session(
    socket: WebSocket,
    protocol: Protocol,
    job: Prepared,
    handlers: ExecHandlers,
    shutdown: CancellationToken,
) {
    let (mut sink, mut stream) = socket.split();
    let Started {
        params,
        mut stdin_tx,
        mut running,
    } = start(job, &handlers);
    let output = loop {
        tokio::select! {
            output = &mut running => break output,
            message = stream.next() => match message {
                Some(Ok(Message::Binary(data))) => {
                    match protocol::parse_client_frame(protocol, &data) {
                        ClientFrame::Stdin(bytes) => {
                            if let Some(tx) = &stdin_tx {
                                // A handler that stopped reading just drops the rest.
                                let _ = tx.send(Bytes::from(bytes));
                            }
                        }
                        ClientFrame::Close(protocol::STDIN) => stdin_tx = None,
                        ClientFrame::Close(_) | ClientFrame::Ignored => {}
                    }
                }
                // The client left: the command is cancelled with it.
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(_)) => {}
            },
            _ = shutdown.cancelled() => return,
        }
    };
    drop(stdin_tx);
    let mut frames = Vec::new();
    let (stdout, stderr) = route_output(&params, &output);
    if let Some(stdout) = stdout {
        frames.extend(protocol::data_frames(protocol::STDOUT, &stdout));
    }
    if let Some(stderr) = stderr {
        frames.extend(protocol::data_frames(protocol::STDERR, stderr));
    }
    frames.push(protocol::status_frame(output.exit_code));
    for frame in frames {
        if sink
            .send(Message::Binary(Bytes::from(frame)))
            .await
            .is_err()
        {
            return;
        }
    }
    // A normal-closure code: client-go treats a close without one (1005)
    // as an error on every stream.
    let close = axum::extract::ws::CloseFrame {
        code: axum::extract::ws::close_code::NORMAL,
        reason: "".into(),
    };
    let _ = sink.send(Message::Close(Some(close))).await;
    // Let the client read to the close before the socket goes away.
    let drain = async { while let Some(Ok(_)) = stream.next().await {} };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), drain).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: &[&str], init: &[&str]) -> Pod {
        let c = |names: &[&str]| -> Vec<serde_json::Value> {
            names
                .iter()
                .map(|n| json!({"name": n, "image": "x"}))
                .collect()
        };
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": c(containers), "initContainers": c(init)}
        }))
        .unwrap()
    }

    #[test]
    fn the_only_container_is_the_default() {
        assert_eq!(
            choose_container(&pod(&["a"], &[]), "p", None),
            Ok("a".into())
        );
    }

    #[test]
    fn several_containers_need_a_name() {
        assert_eq!(
            choose_container(&pod(&["a", "b"], &[]), "p", None),
            Err("a container name must be specified for pod p, choose one of: [a b]".into())
        );
    }

    #[test]
    fn unknown_containers_are_rejected_and_init_containers_accepted() {
        let p = pod(&["a"], &["setup"]);
        assert_eq!(
            choose_container(&p, "p", Some("nope")),
            Err("container nope is not valid for pod p".into())
        );
        assert_eq!(choose_container(&p, "p", Some("setup")), Ok("setup".into()));
    }
}
