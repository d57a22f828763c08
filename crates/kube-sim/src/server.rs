//! The embeddable server: `KubeSim::builder()...start()` gives an in-process
//! `kube::Client`, a loopback URL and kubeconfig for outside clients, and a
//! graceful shutdown. Every instance is independent; tests run many at once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::http::{AppState, router};
use crate::store::{Stats, Store, StoreConfig};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot read the bound address: {0}")]
    LocalAddr(std::io::Error),
    #[error(transparent)]
    DataDir(#[from] crate::store::DataDirError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error(transparent)]
    Credentials(#[from] crate::credentials::CredentialsError),
}

/// Configures a kube-sim instance before it starts.
#[derive(Debug, Clone)]
pub struct KubeSimBuilder {
    config: StoreConfig,
    port: u16,
    default_namespace: String,
    data_dir: Option<std::path::PathBuf>,
    // exec + kubelet
    exec_handlers: crate::exec::ExecHandlers,
    kubelet: crate::kubelet::KubeletConfig,
    static_tokens: Vec<crate::tokens::StaticToken>,
    // security defaults (docs/kube-sim.md): off for the embedded server
    admin_token: Option<String>,
    /// Generate an admin token at start (kept with `--data-dir`) unless
    /// `admin_token` names one.
    generate_token: bool,
    tls: bool,
    authorization: crate::Authorization,
    timeouts: crate::timeouts::ConnectionTimeouts,
}

impl Default for KubeSimBuilder {
    fn default() -> Self {
        Self {
            config: StoreConfig::default(),
            port: 0,
            default_namespace: "default".into(),
            data_dir: None,
            // exec + kubelet
            exec_handlers: Default::default(),
            kubelet: Default::default(),
            static_tokens: Vec::new(),
            admin_token: None,
            generate_token: false,
            tls: false,
            authorization: crate::Authorization::AlwaysAllow,
            timeouts: Default::default(),
        }
    }
}

impl KubeSimBuilder {
    /// Watch events kept per resource (default 10,000). A watch resuming from
    /// an older resourceVersion gets an in-stream 410 Expired and must relist.
    pub fn watch_history(mut self, events: usize) -> Self {
        self.config.history_per_resource = events.max(1);
        self
    }

    /// Interval of BOOKMARK events on idle watches that asked for them (default 60 s).
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.config.bookmark_interval = interval;
        self
    }

    /// How long paged-list snapshots stay valid for `continue` (default 5 min).
    pub fn snapshot_ttl(mut self, ttl: Duration) -> Self {
        self.config.snapshot_ttl = ttl;
        self
    }

    /// Keeps the store in this directory (SQLite; see `docs/kube-sim.md`):
    /// objects, CRDs and the resourceVersion survive a restart and every
    /// acknowledged write survives `kill -9`. Without it the store is in
    /// memory only.
    pub fn data_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// Loopback port to listen on; 0 (the default) picks a free one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Namespace the in-process client uses by default.
    pub fn default_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.default_namespace = namespace.into();
        self
    }

    // exec + kubelet: builder options
    /// Registers an exec handler before start (see [`crate::exec`]).
    pub fn exec_handler(
        self,
        matcher: crate::exec::ExecMatcher,
        handler: impl crate::exec::ExecHandler,
    ) -> Self {
        self.exec_handlers.register(matcher, handler);
        self
    }

    /// Settings of the simulated kubelet and scheduler;
    /// [`crate::KubeletConfig::disabled`] turns them off.
    pub fn kubelet(mut self, config: crate::kubelet::KubeletConfig) -> Self {
        self.kubelet = config;
        self
    }
    // end exec + kubelet

    /// Static bearer tokens a TokenReview authenticates, like the lines of
    /// kube-apiserver's `--token-auth-file` ([`crate::tokens::StaticToken::parse_file`]).
    /// kube-sim itself still does not authenticate requests with them.
    pub fn static_tokens(
        mut self,
        tokens: impl IntoIterator<Item = crate::tokens::StaticToken>,
    ) -> Self {
        self.static_tokens.extend(tokens);
        self
    }

    /// Requires `token` as a bearer token on the loopback listener: without
    /// it (or with a wrong one) a request is 401 Unauthorized, except a GET
    /// of `/healthz`, `/livez`, `/readyz` or `/version`. `kubeconfig()` and
    /// `http_client()` carry it; the in-process client needs none.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.admin_token = Some(token.into());
        self
    }

    /// Like [`Self::bearer_token`] with a random token generated at the
    /// first start (see [`KubeSim::token`]); with a data directory, later
    /// starts on it reuse that token.
    pub fn require_token(mut self) -> Self {
        self.generate_token = true;
        self
    }

    /// Serves HTTPS with a CA and serving certificate generated at the
    /// first start (for `localhost`, `127.0.0.1`, `::1`) and, with a data
    /// directory, kept there for later starts; the kubeconfig carries the CA.
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// How authenticated loopback requests are authorized. `Rbac` enforces
    /// the stored Roles and bindings for ServiceAccount and static tokens
    /// (the admin token stays allowed everything) and turns on
    /// [`Self::require_token`].
    pub fn authorization(mut self, authorization: crate::Authorization) -> Self {
        self.authorization = authorization;
        if authorization == crate::Authorization::Rbac {
            self = self.require_token();
        }
        self
    }

    /// How long a client may take to send a request's headers on the
    /// loopback listener before the connection is closed (default 32 s,
    /// kube-apiserver's `ReadHeaderTimeout`). The first request's headers
    /// are timed from the accept, a later one's from its first byte.
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.header_read = timeout;
        self
    }

    /// How long a keep-alive connection may wait for its next request
    /// before it is closed (default 90 s, kube-apiserver's `IdleTimeout`).
    /// A request in flight, a watch say, is never cut by either timeout.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.idle = timeout;
        self
    }

    /// The tokens a TokenReview authenticates: the static ones and the
    /// admin token, as kube-apiserver reviews every token it accepts
    /// itself (`kubectl auth whoami` and a TokenReview of the same token
    /// name the same user).
    fn take_reviewable_tokens(&mut self) -> Vec<crate::tokens::StaticToken> {
        let mut tokens = std::mem::take(&mut self.static_tokens);
        if let Some(admin) = &self.admin_token {
            let user = crate::http::auth::admin();
            let groups: Vec<&str> = user
                .groups
                .iter()
                .map(String::as_str)
                .filter(|g| *g != "system:authenticated")
                .collect();
            tokens.push(crate::tokens::StaticToken::new(
                admin,
                &user.username,
                "",
                &groups,
            ));
        }
        tokens
    }

    /// Starts serving on 127.0.0.1 and builds the in-process client.
    /// Must be called inside a Tokio runtime.
    pub async fn start(mut self) -> Result<KubeSim, Error> {
        let wanted = crate::credentials::Wanted {
            admin_token: self.generate_token && self.admin_token.is_none(),
            tls: self.tls,
        };
        // Without a kubelet nobody would finish graceful pod deletions, so
        // they complete at once, as if the pods had stopped immediately.
        self.config.graceful_pod_deletion = self.kubelet.enabled;
        // The store first: it refuses a directory that is not kube-sim's
        // before anything is written into it.
        let config = std::mem::take(&mut self.config);
        let (store, credentials) = match &self.data_dir {
            Some(dir) => {
                let store = Store::open(config, dir)?;
                (
                    store,
                    crate::credentials::Credentials::load_or_create(dir, wanted)?,
                )
            }
            None => (
                Store::new(config),
                crate::credentials::Credentials::fresh(wanted)?,
            ),
        };
        if let Some(token) = credentials.admin_token {
            self.admin_token = Some(token);
        }
        let reviewable_tokens = self.take_reviewable_tokens();
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let faults = Arc::new(crate::http::faults::Faults::new(metrics.clone()));
        let state = AppState {
            store: store.clone(),
            server_address: Default::default(),
            faults: faults.clone(),
            metrics: metrics.clone(),
            tokens: Arc::new(crate::tokens::Tokens::new(
                reviewable_tokens,
                &credentials.service_account_key,
            )),
            openapi_v2: Default::default(),
            admission: Default::default(),
        };
        let certificates = credentials.certificates;
        let admin_token: Option<Arc<str>> = self.admin_token.as_deref().map(Arc::from);
        let guard = Arc::new(crate::http::auth::Guard {
            app: state.clone(),
            admin_token: admin_token.clone(),
            authorization: self.authorization,
        });
        let app = router(state.clone())
            // exec + kubelet: pods/exec and pods/binding routes
            .merge(crate::exec::endpoint::routes(
                crate::exec::endpoint::ExecState {
                    store: store.clone(),
                    handlers: self.exec_handlers.clone(),
                },
            ))
            .merge(crate::exec::portforward::routes(
                crate::exec::portforward::PortForwardState {
                    store: store.clone(),
                },
            ))
            .merge(crate::kubelet::binding::routes(store.clone()))
            .merge(crate::http::eviction::routes(store.clone()))
            // faults: in front of every Kubernetes route, merged ones included
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                crate::http::faults::layer,
            ));
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { addr, source })?;
        let local = listener.local_addr().map_err(Error::LocalAddr)?;
        *state.server_address.write() = local.to_string();
        let shutdown = store.shutdown.clone();
        // Only the listener is guarded (Host, token, RBAC): the in-process
        // client is the test's own process.
        let serve_app = app.clone().layer(axum::middleware::from_fn_with_state(
            guard,
            crate::http::auth::layer,
        ));
        let scheme = if certificates.is_some() {
            "https"
        } else {
            "http"
        };
        let server = match &certificates {
            Some(certificates) => {
                let config = certificates.server_config()?;
                let listener =
                    crate::tls::TlsListener::spawn(listener, config, shutdown.child_token())
                        .map_err(Error::LocalAddr)?;
                spawn_server(listener, serve_app, self.timeouts, shutdown)
            }
            // Nagle's algorithm holds back the small frames of exec streams
            // and watch events until the peer ACKs, and clients delay ACKs
            // by up to 40 ms: kube-apiserver (Go) disables it on every
            // connection, and so does kube-sim (the TLS listener too).
            None => spawn_server(
                listener.tap_io(|stream| {
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!(error = %e, "cannot set TCP_NODELAY on a kube-sim connection");
                    }
                }),
                serve_app,
                self.timeouts,
                shutdown,
            ),
        };
        let client = kube::Client::new(app, self.default_namespace.clone());
        // exec + kubelet: the simulated kubelet and scheduler use the in-process client
        if self.kubelet.enabled && self.kubelet.workloads {
            crate::workloads::token_secrets::spawn(
                client.clone(),
                certificates.as_ref().map(|c| c.ca_pem.clone()),
                store.shutdown.clone(),
            );
            crate::workloads::namespace_defaults::spawn(
                client.clone(),
                certificates.as_ref().map(|c| c.ca_pem.clone()),
                local.port(),
                store.shutdown.clone(),
            )
            .await;
        }
        crate::kubelet::spawn(client.clone(), self.kubelet, store.clone());
        tracing::debug!(url = %format!("{scheme}://{local}"), "kube-sim started");
        Ok(KubeSim {
            store,
            client,
            addr: local,
            server: Some(server),
            faults,
            metrics,
            exec_handlers: self.exec_handlers,
            admin_token,
            certificates,
        })
    }
}

/// Serves `app` on `listener` until `shutdown`, on its own task, closing
/// connections that are slow with their headers or idle (timeouts.rs).
fn spawn_server<L>(
    listener: L,
    app: axum::Router,
    timeouts: crate::timeouts::ConnectionTimeouts,
    shutdown: tokio_util::sync::CancellationToken,
) -> JoinHandle<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let listener = crate::timeouts::Timed::new(listener, timeouts);
    let app = crate::timeouts::PerConnection::new(app);
    tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "kube-sim server stopped with an error");
        }
    })
}

/// A running kube-sim instance.
pub struct KubeSim {
    store: Arc<Store>,
    client: kube::Client,
    addr: SocketAddr,
    server: Option<JoinHandle<()>>,
    faults: Arc<crate::http::faults::Faults>,
    metrics: Arc<crate::metrics::Metrics>,
    // exec + kubelet
    exec_handlers: crate::exec::ExecHandlers,
    admin_token: Option<Arc<str>>,
    certificates: Option<crate::tls::ServingCertificates>,
}

impl KubeSim {
    pub fn builder() -> KubeSimBuilder {
        KubeSimBuilder::default()
    }

    /// A client talking to this instance in-process (no socket). Watches,
    /// lists and writes all work; exec needs the loopback URL instead.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// `http://127.0.0.1:PORT`, or `https://` with [`KubeSimBuilder::tls`].
    pub fn url(&self) -> String {
        let scheme = if self.certificates.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// The admin bearer token the loopback listener requires, if any.
    pub fn token(&self) -> Option<&str> {
        self.admin_token.as_deref()
    }

    /// The PEM of the CA that signed the serving certificate (with `tls`).
    pub fn ca_pem(&self) -> Option<&str> {
        self.certificates.as_ref().map(|c| c.ca_pem.as_str())
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig pointing at the loopback URL, for kubectl and other
    /// clients, with the admin token and the CA when the server has them.
    /// It holds a credential: write it with owner-only permissions.
    pub fn kubeconfig(&self) -> String {
        kubeconfig_for(&self.url(), self.token(), self.ca_pem())
    }

    /// A client that goes through the loopback socket, like an outside
    /// process, with the admin token and trusting the CA.
    pub fn http_client(&self) -> Result<kube::Client, kube::Error> {
        self.http_client_with_token(self.token())
    }

    /// Like [`Self::http_client`] but presenting `token` (a ServiceAccount's
    /// from a TokenRequest, say), or none.
    pub fn http_client_with_token(&self, token: Option<&str>) -> Result<kube::Client, kube::Error> {
        let uri = self
            .url()
            .parse()
            .map_err(|e: http::uri::InvalidUri| kube::Error::Service(Box::new(e)))?;
        let mut config = kube::Config::new(uri);
        if let Some(certificates) = &self.certificates {
            config.root_cert = Some(vec![certificates.ca_der.clone()]);
        }
        if let Some(token) = token {
            config.auth_info.token = Some(secrecy::SecretString::from(token.to_string()));
        }
        kube::Client::try_from(config)
    }

    /// The global resourceVersion right now.
    pub fn resource_version(&self) -> u64 {
        self.store.current_rv()
    }

    /// What the server has done so far (writes, lists, watches, 410s sent).
    pub fn stats(&self) -> &Stats {
        &self.store.stats
    }

    /// Fault injection for this instance (also at `/sim/faults`).
    pub fn faults(&self) -> &crate::http::faults::Faults {
        &self.faults
    }

    /// Request and fault counters (also at `/metrics`).
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }

    // exec + kubelet
    /// The exec handlers answering `pods/exec`; register more at any time.
    pub fn exec_handlers(&self) -> &crate::exec::ExecHandlers {
        &self.exec_handlers
    }

    /// Stops serving: open watches end, the listener closes.
    pub async fn shutdown(mut self) {
        self.store.shutdown.cancel();
        if let Some(server) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
        }
        self.store.close_data_dir();
    }
}

impl Drop for KubeSim {
    fn drop(&mut self) {
        self.store.shutdown.cancel();
        self.store.close_data_dir();
    }
}

/// Kubeconfig YAML for a plain-HTTP server with no authentication.
pub fn kubeconfig_yaml(url: &str) -> String {
    kubeconfig_for(url, None, None)
}

/// Kubeconfig YAML for `url` with an optional bearer token and CA (PEM,
/// written as `certificate-authority-data`).
pub fn kubeconfig_for(url: &str, token: Option<&str>, ca_pem: Option<&str>) -> String {
    use base64::Engine;
    let authority = ca_pem
        .map(|pem| {
            format!(
                "\n    certificate-authority-data: {}",
                base64::engine::general_purpose::STANDARD.encode(pem)
            )
        })
        .unwrap_or_default();
    // Tokens kube-sim makes are hex; a caller's own is quoted as a YAML
    // string so no character can break the document.
    let user = match token {
        Some(token) => format!("\n    token: {}", serde_json::Value::from(token)),
        None => " {}".to_string(),
    };
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kube-sim
  cluster:
    server: {url}{authority}
contexts:
- name: kube-sim
  context:
    cluster: kube-sim
    user: kube-sim
    namespace: default
current-context: kube-sim
users:
- name: kube-sim
  user:{user}
"
    )
}
