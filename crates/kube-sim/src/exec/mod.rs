//! Simulated `pods/exec`: commands are answered by handlers registered
//! through the library, chosen by namespace, pod labels, container and
//! command prefix. Served over WebSocket (`v5.channel.k8s.io`, then
//! `v4.channel.k8s.io`) on the loopback listener; kubectl and kube-rs
//! `Api::<Pod>::exec` both drive it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use kube_sim::exec::{ExecMatcher, ExecOutput, ExecRequest};
//! let sim = kube_sim::KubeSim::builder().start().await?;
//! sim.exec_handlers().register(
//!     ExecMatcher::any()
//!         .labels([("app", "nvidia-device-plugin-daemonset")])
//!         .command(["nvidia-smi", "-q", "-x"]),
//!     |req: ExecRequest| async move {
//!         let node = req.node_name().unwrap_or_default().to_string();
//!         ExecOutput::stdout(format!("<nvidia_smi_log><!-- {node} --></nvidia_smi_log>"))
//!     },
//! );
//! # Ok(()) }
//! ```

pub(crate) mod endpoint;
mod matcher;
pub(crate) mod portforward;
pub(crate) mod protocol;
mod spdy;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use k8s_openapi::api::core::v1::Pod;
use parking_lot::RwLock;
use tokio::sync::mpsc;

pub use matcher::{ExecMatcher, ExecTarget, InvalidSelector};

/// One command to answer.
#[derive(Debug)]
pub struct ExecRequest {
    /// `pods/attach` rather than `pods/exec`: `command` is then the
    /// container's own `command` and `args`.
    pub attach: bool,
    pub namespace: String,
    /// The pod as stored when the exec started.
    pub pod: Pod,
    pub container: String,
    pub command: Vec<String>,
    pub tty: bool,
    /// The client's stdin; at EOF at once unless the client asked for stdin.
    pub stdin: ExecStdin,
}

impl ExecRequest {
    pub fn pod_name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }

    /// The node the pod is bound to (`spec.nodeName`), if any.
    pub fn node_name(&self) -> Option<&str> {
        self.pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
    }
}

/// The stdin stream of an exec. It ends when the client closes stdin (the
/// v5 close signal) or disconnects.
#[derive(Debug)]
pub struct ExecStdin {
    receiver: Option<mpsc::UnboundedReceiver<Bytes>>,
}

impl ExecStdin {
    /// A stdin already at EOF.
    pub fn empty() -> Self {
        Self { receiver: None }
    }

    pub(crate) fn channel() -> (mpsc::UnboundedSender<Bytes>, Self) {
        let (tx, rx) = mpsc::unbounded_channel();
        (tx, Self { receiver: Some(rx) })
    }

    /// The next chunk the client sent, or None at EOF.
    pub async fn next_chunk(&mut self) -> Option<Bytes> {
        match self.receiver.as_mut() {
            Some(rx) => rx.recv().await,
            None => None,
        }
    }

    /// Everything until EOF.
    pub async fn read_to_end(&mut self) -> Vec<u8> {
        let mut all = Vec::new();
        while let Some(chunk) = self.next_chunk().await {
            all.extend_from_slice(&chunk);
        }
        all
    }
}

/// What a command printed and how it exited.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i32,
}

impl ExecOutput {
    /// Exit 0 with this stdout.
    pub fn stdout(stdout: impl Into<Vec<u8>>) -> Self {
        Self {
            stdout: stdout.into(),
            ..Self::default()
        }
    }

    /// Exit with `exit_code` and this stderr.
    pub fn failure(exit_code: i32, stderr: impl Into<Vec<u8>>) -> Self {
        Self {
            stderr: stderr.into(),
            exit_code,
            ..Self::default()
        }
    }

    pub fn with_stderr(mut self, stderr: impl Into<Vec<u8>>) -> Self {
        self.stderr = stderr.into();
        self
    }

    pub fn with_exit_code(mut self, exit_code: i32) -> Self {
        self.exit_code = exit_code;
        self
    }

    /// What a shell prints for a program it cannot find (exit 127).
    pub fn command_not_found(command: &[String]) -> Self {
        let program = command.first().map(String::as_str).unwrap_or_default();
        Self::failure(127, format!("{program}: command not found\n"))
    }
}

pub type ExecFuture = Pin<Box<dyn Future<Output = ExecOutput> + Send>>;

/// Answers exec commands. Implemented for every
/// `Fn(ExecRequest) -> impl Future<Output = ExecOutput>`; dropping the
/// future cancels the command (the client went away or the server stopped).
pub trait ExecHandler: Send + Sync + 'static {
    fn handle(&self, request: ExecRequest) -> ExecFuture;
}

impl<F, Fut> ExecHandler for F
where
    F: Fn(ExecRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ExecOutput> + Send + 'static,
{
    fn handle(&self, request: ExecRequest) -> ExecFuture {
        Box::pin(self(request))
    }
}

/// A handler that always answers with the same output.
pub fn reply(output: ExecOutput) -> impl ExecHandler {
    move |_request: ExecRequest| {
        let output = output.clone();
        async move { output }
    }
}

/// Wraps a handler so every answer comes `delay` later (latency simulation).
pub fn delayed(delay: Duration, handler: impl ExecHandler) -> impl ExecHandler {
    let handler = Arc::new(handler);
    move |request: ExecRequest| {
        let handler = handler.clone();
        async move {
            tokio::time::sleep(delay).await;
            handler.handle(request).await
        }
    }
}

/// A command that never finishes, for client timeout tests. It ends only
/// when the client disconnects or the server shuts down.
pub fn never() -> impl ExecHandler {
    |_request: ExecRequest| std::future::pending::<ExecOutput>()
}

/// Identifies one registration, for [`ExecHandlers::unregister`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExecHandlerId(u64);

struct Route {
    id: ExecHandlerId,
    matcher: ExecMatcher,
    handler: Arc<dyn ExecHandler>,
}

#[derive(Default)]
struct Routes {
    next_id: u64,
    routes: Vec<Route>,
}

/// The exec handlers of one kube-sim instance; cheap to clone, shared with
/// the server. The most recently registered matching handler answers, so a
/// test can override a broader default.
#[derive(Clone, Default)]
pub struct ExecHandlers {
    inner: Arc<RwLock<Routes>>,
}

impl fmt::Debug for ExecHandlers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let routes = self.inner.read();
        f.debug_list()
            .entries(routes.routes.iter().map(|r| (&r.id, &r.matcher)))
            .finish()
    }
}

impl ExecHandlers {
    pub fn register(&self, matcher: ExecMatcher, handler: impl ExecHandler) -> ExecHandlerId {
        self.register_arc(matcher, Arc::new(handler))
    }

    pub fn register_arc(
        &self,
        matcher: ExecMatcher,
        handler: Arc<dyn ExecHandler>,
    ) -> ExecHandlerId {
        let mut routes = self.inner.write();
        routes.next_id += 1;
        let id = ExecHandlerId(routes.next_id);
        routes.routes.push(Route {
            id,
            matcher,
            handler,
        });
        id
    }

    /// Removes a registration; false if it was already gone.
    pub fn unregister(&self, id: ExecHandlerId) -> bool {
        let mut routes = self.inner.write();
        let before = routes.routes.len();
        routes.routes.retain(|r| r.id != id);
        routes.routes.len() != before
    }

    pub fn clear(&self) {
        self.inner.write().routes.clear();
    }

    pub fn len(&self) -> usize {
        self.inner.read().routes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The handler for this exec: the latest registration that matches.
    pub fn find(&self, target: &ExecTarget<'_>) -> Option<Arc<dyn ExecHandler>> {
        self.inner
            .read()
            .routes
            .iter()
            .rev()
            .find(|r| r.matcher.matches(target))
            .map(|r| r.handler.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn request(command: &[&str]) -> ExecRequest {
        ExecRequest {
            attach: false,
            namespace: "default".into(),
            pod: Pod::default(),
            container: "c".into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            tty: false,
            stdin: ExecStdin::empty(),
        }
    }

    #[tokio::test]
    async fn the_latest_matching_registration_answers() {
        let handlers = ExecHandlers::default();
        handlers.register(ExecMatcher::any(), reply(ExecOutput::stdout("broad")));
        let narrow = handlers.register(
            ExecMatcher::any().command(["nvidia-smi"]),
            reply(ExecOutput::stdout("narrow")),
        );
        let labels = BTreeMap::new();
        let command = vec!["nvidia-smi".to_string()];
        let target = ExecTarget {
            namespace: "default",
            labels: &labels,
            container: "c",
            command: &command,
        };
        let handler = handlers.find(&target).unwrap();
        assert_eq!(
            handler.handle(request(&["nvidia-smi"])).await.stdout,
            b"narrow"
        );
        assert!(handlers.unregister(narrow));
        assert!(!handlers.unregister(narrow));
        let handler = handlers.find(&target).unwrap();
        assert_eq!(
            handler.handle(request(&["nvidia-smi"])).await.stdout,
            b"broad"
        );
        handlers.clear();
        assert!(handlers.find(&target).is_none());
    }

    #[tokio::test]
    async fn delayed_handlers_answer_after_the_delay_and_never_does_not_answer() {
        let slow = delayed(Duration::from_millis(30), reply(ExecOutput::stdout("late")));
        let started = std::time::Instant::now();
        assert_eq!(slow.handle(request(&["x"])).await.stdout, b"late");
        assert!(started.elapsed() >= Duration::from_millis(30));
        let hung = never().handle(request(&["x"]));
        assert!(
            tokio::time::timeout(Duration::from_millis(30), hung)
                .await
                .is_err()
        );
    }

    #[test]
    fn unknown_commands_exit_127_with_command_not_found() {
        let out = ExecOutput::command_not_found(&["frobnicate".to_string()]);
        assert_eq!(out.exit_code, 127);
        assert_eq!(out.stderr, b"frobnicate: command not found\n");
    }
}
