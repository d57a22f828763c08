//! kube-sim's security defaults seen from outside clients: raw HTTP/1.1
//! over TCP (so the Host and Authorization headers are exactly what the
//! test writes), kube-rs over the loopback (plain and TLS), and kubectl.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Secret, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};
use kube_sim::{Authorization, KubeSim};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{kubectl_path, status_of};

/// One HTTP/1.1 exchange on a fresh connection: (status, body as JSON or
/// as a string). `headers` are written as given, Host included.
async fn exchange(
    sim: &KubeSim,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value) {
    let mut stream = tokio::net::TcpStream::connect(sim.addr())
        .await
        .expect("kube-sim listens");
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .expect("kube-sim answers within 10 s")
        .expect("the answer reads");
    let text = String::from_utf8_lossy(&response).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    // Chunked bodies (axum streams some answers) carry a size line first.
    let json = serde_json::from_str(body)
        .or_else(|_| {
            let inner = body.split_once("\r\n").map(|(_, rest)| rest).unwrap_or("");
            let inner = inner
                .rsplit_once("\r\n0\r\n")
                .map(|(b, _)| b)
                .unwrap_or(inner);
            serde_json::from_str(inner.trim())
        })
        .unwrap_or_else(|_| Value::String(body.to_string()));
    (status, json)
}

fn loopback_host(sim: &KubeSim) -> String {
    format!("127.0.0.1:{}", sim.addr().port())
}

fn unauthorized() -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401,
    })
}

#[tokio::test]
async fn without_the_token_or_with_a_wrong_one_requests_are_401_but_health_and_version_are_public()
{
    let sim = KubeSim::builder().require_token().start().await.unwrap();
    let token = sim.token().expect("a token was generated").to_string();
    assert_eq!(token.len(), 64, "32 random bytes, hex");
    let host = loopback_host(&sim);
    let bearer = format!("Bearer {token}");
    let wrong = format!("Bearer {}x", &token[..63]);

    for path in ["/api/v1/namespaces", "/api", "/metrics", "/openapi/v3"] {
        let (code, body) = exchange(&sim, "GET", path, &[("Host", &host)], "").await;
        assert_eq!(
            (code, &body),
            (401, &unauthorized()),
            "{path} without a token"
        );
        let (code, body) = exchange(
            &sim,
            "GET",
            path,
            &[("Host", &host), ("Authorization", &wrong)],
            "",
        )
        .await;
        assert_eq!(
            (code, &body),
            (401, &unauthorized()),
            "{path} with a wrong token"
        );
        let (code, _) = exchange(
            &sim,
            "GET",
            path,
            &[("Host", &host), ("Authorization", "Basic YWRtaW46YWRtaW4=")],
            "",
        )
        .await;
        assert_eq!(code, 401, "{path} with basic auth");
        let (code, _) = exchange(
            &sim,
            "GET",
            path,
            &[("Host", &host), ("Authorization", &bearer)],
            "",
        )
        .await;
        assert_eq!(code, 200, "{path} with the token");
    }
    for path in ["/healthz", "/livez", "/readyz", "/version"] {
        let (code, _) = exchange(&sim, "GET", path, &[("Host", &host)], "").await;
        assert_eq!(code, 200, "{path} is readable anonymously");
        // As on kube-apiserver, a token that does not authenticate is
        // refused even where no token is needed.
        let (code, body) = exchange(
            &sim,
            "GET",
            path,
            &[("Host", &host), ("Authorization", &wrong)],
            "",
        )
        .await;
        assert_eq!(
            (code, &body),
            (401, &unauthorized()),
            "{path} with a wrong token"
        );
    }
    let (code, _) = exchange(&sim, "POST", "/healthz", &[("Host", &host)], "").await;
    assert_eq!(code, 401, "only GET is public");

    // The clients the server hands out carry the token; the in-process one needs none.
    let namespaces: Api<Namespace> = Api::all(sim.http_client().unwrap());
    assert!(namespaces.get("default").await.is_ok());
    let anonymous: Api<Namespace> = Api::all(sim.http_client_with_token(None).unwrap());
    assert_eq!(status_of(anonymous.get("default").await).code, 401);
    let in_process: Api<Namespace> = Api::all(sim.client());
    assert!(in_process.get("default").await.is_ok());
    let kubeconfig = sim.kubeconfig();
    assert!(
        kubeconfig.contains(&format!("token: \"{token}\"")),
        "{kubeconfig}"
    );
}

#[tokio::test]
async fn a_host_that_is_not_loopback_is_421_misdirected_with_or_without_the_token() {
    let sim = KubeSim::builder().require_token().start().await.unwrap();
    let bearer = format!("Bearer {}", sim.token().unwrap());
    let port = sim.addr().port();
    for host in [
        "evil.example".to_string(),
        format!("evil.example:{port}"),
        format!("127.0.0.1.nip.io:{port}"),
        format!("10.0.0.1:{port}"),
    ] {
        let (code, body) = exchange(
            &sim,
            "GET",
            "/api/v1/namespaces",
            &[("Host", &host), ("Authorization", &bearer)],
            "",
        )
        .await;
        assert_eq!(code, 421, "Host {host}");
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["code"], 421);
        let message = body["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("{host:?} is refused")),
            "{message}"
        );
        // Before authentication: a rebinding page learns nothing else.
        let (code, _) = exchange(&sim, "GET", "/healthz", &[("Host", &host)], "").await;
        assert_eq!(code, 421, "Host {host} on /healthz");
    }
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "localhost".to_string(),
    ] {
        let (code, _) = exchange(
            &sim,
            "GET",
            "/api/v1/namespaces",
            &[("Host", &host), ("Authorization", &bearer)],
            "",
        )
        .await;
        assert_eq!(code, 200, "Host {host}");
    }
    // HTTP/1.1 without a Host header is refused too.
    let (code, _) = exchange(
        &sim,
        "GET",
        "/api/v1/namespaces",
        &[("Authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(code, 421, "no Host");

    // The check is on without a token as well.
    let open = KubeSim::builder().start().await.unwrap();
    let (code, _) = exchange(&open, "GET", "/api", &[("Host", "evil.example")], "").await;
    assert_eq!(code, 421);
    let (code, _) = exchange(&open, "GET", "/api", &[("Host", &loopback_host(&open))], "").await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn sim_faults_takes_only_json_and_only_with_the_token() {
    let sim = KubeSim::builder().require_token().start().await.unwrap();
    let host = loopback_host(&sim);
    let bearer = format!("Bearer {}", sim.token().unwrap());
    let fault = r#"{"verbs":["list"],"resource":"configmaps","action":{"type":"error","code":503},"times":1}"#;
    let (code, body) = exchange(
        &sim,
        "POST",
        "/sim/faults",
        &[("Host", &host), ("Content-Type", "application/json")],
        fault,
    )
    .await;
    assert_eq!((code, &body), (401, &unauthorized()), "no token");
    let (code, _) = exchange(&sim, "GET", "/sim/faults", &[("Host", &host)], "").await;
    assert_eq!(code, 401, "listing needs the token too");
    let (code, _) = exchange(&sim, "DELETE", "/sim/faults", &[("Host", &host)], "").await;
    assert_eq!(code, 401, "clearing needs the token too");
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let (code, body) = exchange(
            &sim,
            "POST",
            "/sim/faults",
            &[
                ("Host", &host),
                ("Authorization", &bearer),
                ("Content-Type", content_type),
            ],
            fault,
        )
        .await;
        assert_eq!(code, 415, "{content_type}");
        assert_eq!(body["reason"], "UnsupportedMediaType", "{content_type}");
    }
    let (code, _) = exchange(
        &sim,
        "POST",
        "/sim/faults",
        &[("Host", &host), ("Authorization", &bearer)],
        fault,
    )
    .await;
    assert_eq!(code, 415, "no Content-Type");
    assert!(sim.faults().list().is_empty(), "nothing refused was added");
    let (code, body) = exchange(
        &sim,
        "POST",
        "/sim/faults",
        &[
            ("Host", &host),
            ("Authorization", &bearer),
            ("Content-Type", "application/json; charset=utf-8"),
        ],
        fault,
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(sim.faults().list().len(), 1);

    // Without authentication the media type rule still holds.
    let open = KubeSim::builder().start().await.unwrap();
    let open_host = loopback_host(&open);
    let (code, _) = exchange(
        &open,
        "POST",
        "/sim/faults",
        &[("Host", &open_host), ("Content-Type", "text/plain")],
        fault,
    )
    .await;
    assert_eq!(code, 415);
    let (code, _) = exchange(
        &open,
        "POST",
        "/sim/faults",
        &[("Host", &open_host), ("Content-Type", "application/json")],
        fault,
    )
    .await;
    assert_eq!(code, 201);
}

/// kubectl with `sim`'s kubeconfig, written owner-only as `sim serve` does.
async fn kubectl(sim: &KubeSim, dir: &tempfile::TempDir, args: &[&str]) -> std::process::Output {
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig()).unwrap();
    let run = tokio::process::Command::new(kubectl_path())
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .args(args)
        .env("HOME", dir.path())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
        .unwrap_or_else(|e| panic!("kubectl {args:?} did not start: {e}"))
}

#[tokio::test]
async fn over_tls_kube_rs_and_kubectl_work_and_plain_http_to_the_port_gets_no_answer() {
    let sim = KubeSim::builder()
        .tls()
        .require_token()
        .start()
        .await
        .unwrap();
    assert!(sim.url().starts_with("https://127.0.0.1:"), "{}", sim.url());
    let ca = sim.ca_pem().expect("a CA was generated");
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(sim.kubeconfig().contains("certificate-authority-data: "));

    let client = sim.http_client().unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("over-tls".into());
    configmaps
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    assert!(configmaps.get("over-tls").await.is_ok());
    let anonymous: Api<ConfigMap> =
        Api::namespaced(sim.http_client_with_token(None).unwrap(), "default");
    assert_eq!(status_of(anonymous.get("over-tls").await).code, 401);

    // A client that does not trust the generated CA is refused by TLS.
    let mut untrusting = kube::Config::new(sim.url().parse().unwrap());
    untrusting.auth_info.token = sim.token().map(|t| t.to_string().into());
    let untrusting: Api<ConfigMap> =
        Api::namespaced(kube::Client::try_from(untrusting).unwrap(), "default");
    assert!(
        !matches!(
            untrusting.get("over-tls").await,
            Ok(_) | Err(kube::Error::Api(_))
        ),
        "a client without the CA must fail the handshake"
    );

    let dir = tempfile::tempdir().unwrap();
    let out = kubectl(&sim, &dir, &["get", "configmap", "over-tls", "-o", "name"]).await;
    assert!(
        out.status.success(),
        "kubectl over TLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "configmap/over-tls"
    );

    // Plain HTTP to the TLS port: the handshake fails and the connection
    // closes without an HTTP answer.
    let mut stream = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    stream
        .write_all(
            format!(
                "GET /healthz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                loopback_host(&sim)
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the server closes the connection");
    assert!(
        !answer.starts_with(b"HTTP/"),
        "plain HTTP got an HTTP answer: {:?}",
        String::from_utf8_lossy(&answer)
    );
    // ...and the server still serves TLS clients afterwards.
    assert!(configmaps.get("over-tls").await.is_ok());
}

const GPUID_RBAC: &str = include_str!("../../../../deploy/gpuid/01-rbac.yaml");

/// A token for ServiceAccount `namespace/name` from kube-sim's TokenRequest.
async fn service_account_token(client: &kube::Client, namespace: &str, name: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = k8s_openapi::api::authentication::v1::TokenRequest::default();
    let issued = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("TokenRequest answers");
    issued.status.expect("a token").token
}

#[tokio::test]
async fn under_rbac_a_service_account_token_gets_what_deploy_gpuid_grants_and_the_real_403_otherwise()
 {
    // TLS because kubectl (client-go) sends a kubeconfig's token only over HTTPS.
    let sim = KubeSim::builder()
        .tls()
        .authorization(Authorization::Rbac)
        .start()
        .await
        .unwrap();
    assert!(sim.token().is_some(), "RBAC turns the token on");
    // deploy/gpuid's manifests applied with kubectl as the admin.
    let dir = tempfile::tempdir().unwrap();
    let out = kubectl(&sim, &dir, &["create", "namespace", "gpu-operator"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest = dir.path().join("rbac.yaml");
    std::fs::write(&manifest, GPUID_RBAC).unwrap();
    let out = kubectl(&sim, &dir, &["apply", "-f", manifest.to_str().unwrap()]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let admin = sim.http_client().unwrap();
    let token = service_account_token(&admin, "gpuid", "gpuid").await;
    let gpuid = sim.http_client_with_token(Some(&token)).unwrap();

    // Granted: nodes get/list/patch cluster-wide, pods in gpu-operator.
    let nodes: Api<Node> = Api::all(gpuid.clone());
    nodes
        .list(&ListParams::default())
        .await
        .expect("list nodes is granted");
    let pods: Api<Pod> = Api::namespaced(gpuid.clone(), "gpu-operator");
    pods.list(&ListParams::default())
        .await
        .expect("list pods in gpu-operator is granted");

    // Denied: the exact Status kube-apiserver sends.
    let pods_elsewhere: Api<Pod> = Api::namespaced(gpuid.clone(), "default");
    let status = status_of(pods_elsewhere.list(&ListParams::default()).await);
    assert_eq!(status.code, 403);
    assert_eq!(status.reason, "Forbidden");
    assert_eq!(
        status.message,
        r#"pods is forbidden: User "system:serviceaccount:gpuid:gpuid" cannot list resource "pods" in API group "" in the namespace "default""#
    );
    let details = status.details.expect("details");
    assert_eq!(
        (
            details.kind.as_str(),
            details.group.as_str(),
            details.name.as_str()
        ),
        ("pods", "", "")
    );

    let secrets: Api<Secret> = Api::namespaced(gpuid.clone(), "gpuid");
    let status = status_of(secrets.get("anything").await);
    assert_eq!(
        status.message,
        r#"secrets "anything" is forbidden: User "system:serviceaccount:gpuid:gpuid" cannot get resource "secrets" in API group "" in the namespace "gpuid""#
    );
    let status = status_of(nodes.delete("n1", &Default::default()).await);
    assert_eq!(
        status.message,
        r#"nodes "n1" is forbidden: User "system:serviceaccount:gpuid:gpuid" cannot delete resource "nodes" in API group "" at the cluster scope"#
    );
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(gpuid.clone(), "gpuid");
    let status = status_of(leases.list(&ListParams::default()).await);
    assert_eq!(
        status.message,
        r#"leases.coordination.k8s.io is forbidden: User "system:serviceaccount:gpuid:gpuid" cannot list resource "leases" in API group "coordination.k8s.io" in the namespace "gpuid""#
    );
    // A non-resource path the role does not name.
    let (code, body) =
        crate::support::raw(&gpuid, "GET", "/metrics", "application/json", b"").await;
    assert_eq!(code, 403);
    assert_eq!(
        body["message"],
        r#"forbidden: User "system:serviceaccount:gpuid:gpuid" cannot get path "/metrics""#
    );
    // Discovery and "who am I" are every authenticated user's.
    let (code, _) = crate::support::raw(&gpuid, "GET", "/apis", "application/json", b"").await;
    assert_eq!(code, 200);

    // The admin token is still allowed everything.
    let admin_secrets: Api<Secret> = Api::namespaced(admin.clone(), "gpuid");
    admin_secrets
        .list(&ListParams::default())
        .await
        .expect("the admin lists secrets");

    // kubectl as the ServiceAccount, by impersonation from the admin.
    let out = kubectl(
        &sim,
        &dir,
        &[
            "get",
            "secrets",
            "-n",
            "gpuid",
            "--as=system:serviceaccount:gpuid:gpuid",
        ],
    )
    .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"Error from server (Forbidden): secrets is forbidden: User "system:serviceaccount:gpuid:gpuid" cannot list resource "secrets" in API group "" in the namespace "gpuid""#),
        "{stderr}"
    );
    let out = kubectl(
        &sim,
        &dir,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
            "--as=system:serviceaccount:gpuid:gpuid",
        ],
    )
    .await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "system:serviceaccount:gpuid:gpuid",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A ServiceAccount may not impersonate without the `impersonate` verb.
    let impersonating = http::Request::builder()
        .uri("/api/v1/namespaces/gpuid/secrets")
        .header("Impersonate-User", "system:admin")
        .body(Vec::new())
        .unwrap();
    let response = gpuid
        .send(impersonating.map(kube::client::Body::from))
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
}

/// Reads until the server closes the connection (EOF or a reset), failing
/// if it has not after `limit`; answers what was read and how long it took.
async fn read_until_closed<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    limit: Duration,
) -> (String, Duration) {
    let started = std::time::Instant::now();
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    let closed = tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    let text = String::from_utf8_lossy(&received).to_string();
    assert!(
        closed.is_ok(),
        "the server kept the connection open for {limit:?}; it sent {text:?}"
    );
    (text, started.elapsed())
}

#[tokio::test]
async fn a_connection_that_never_finishes_its_headers_is_closed_after_the_header_read_timeout() {
    let sim = KubeSim::builder()
        .header_read_timeout(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    // Half a request: the blank line that ends the headers never comes.
    let mut stream = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    stream
        .write_all(format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n", loopback_host(&sim)).as_bytes())
        .await
        .unwrap();
    let (answer, after) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(answer.is_empty(), "no answer to half a request: {answer:?}");
    assert!(
        after >= Duration::from_millis(150),
        "closed after {after:?}"
    );

    // A connection that sends nothing at all is timed from its accept.
    let mut silent = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    read_until_closed(&mut silent, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_tls_connection_that_sends_no_request_is_closed_after_the_header_read_timeout() {
    let sim = KubeSim::builder()
        .tls()
        .header_read_timeout(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    let ca = sim.ca_pem().expect("a TLS server has a CA");
    let der =
        <rustls::pki_types::CertificateDer as rustls::pki_types::pem::PemObject>::from_pem_slice(
            ca.as_bytes(),
        )
        .expect("the CA is PEM");
    roots.add(der).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    // The handshake completes, then the client goes quiet.
    let mut tls = connector.connect(name, tcp).await.unwrap();
    let (answer, _) = read_until_closed(&mut tls, Duration::from_secs(5)).await;
    assert!(answer.is_empty(), "{answer:?}");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout_but_a_long_watch_is_not_cut()
 {
    let sim = KubeSim::builder()
        .header_read_timeout(Duration::from_millis(200))
        .idle_timeout(Duration::from_millis(600))
        .start()
        .await
        .unwrap();
    let host = loopback_host(&sim);
    let mut stream = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    // A watch that lasts 2 s, ten times the header timeout, comes back
    // whole: timeouts apply only between requests.
    stream
        .write_all(
            format!(
                "GET /api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=2 HTTP/1.1\r\nHost: {host}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    let started = std::time::Instant::now();
    while !received.ends_with(b"0\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("the watch ends by itself")
            .expect("the watch reads");
        assert!(n > 0, "the watch was cut after {:?}", started.elapsed());
        received.extend_from_slice(&chunk[..n]);
    }
    assert!(String::from_utf8_lossy(&received).starts_with("HTTP/1.1 200"));
    assert!(started.elapsed() >= Duration::from_millis(1900));

    // Now idle: open for longer than the header timeout (the idle time is
    // not header time), closed after the idle timeout.
    let idle_from = std::time::Instant::now();
    let (more, _) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(more.is_empty(), "{more:?}");
    let idle = idle_from.elapsed();
    assert!(
        idle >= Duration::from_millis(500),
        "closed after {idle:?}, before the idle timeout"
    );
}

/// `kube_sim_user_requests_total` counts each client's requests under the
/// user it authenticated as, so a benchmark can tell a controller's
/// requests from its driver's on one server.
#[tokio::test]
async fn requests_are_counted_by_the_user_that_sent_them() {
    let sim = KubeSim::builder()
        .tls()
        .require_token()
        .start()
        .await
        .unwrap();
    let admin = sim.http_client_with_token(sim.token()).unwrap();
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": "bench"}}));
    namespaces
        .create(&PostParams::default(), &namespace.unwrap())
        .await
        .unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "bench");
    let account = serde_json::from_value(json!({"metadata": {"name": "operator"}}));
    accounts
        .create(&PostParams::default(), &account.unwrap())
        .await
        .unwrap();
    let token = service_account_token(&admin, "bench", "operator").await;
    let operator = sim.http_client_with_token(Some(&token)).unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(operator, "bench");
    for name in ["a", "b", "c"] {
        let configmap = serde_json::from_value(json!({"metadata": {"name": name}}));
        configmaps
            .create(&PostParams::default(), &configmap.unwrap())
            .await
            .unwrap();
    }
    let metrics = sim.metrics();
    let user = "system:serviceaccount:bench:operator";
    assert_eq!(
        metrics.user_requests(user, "create", "configmaps"),
        3,
        "{}",
        metrics.encode()
    );
    assert_eq!(
        metrics.user_requests("system:admin", "create", "configmaps"),
        0
    );
    assert_eq!(
        metrics.user_requests("system:admin", "create", "namespaces"),
        1
    );
    let text = metrics.encode();
    assert!(
        text.contains(&format!(
            r#"kube_sim_user_requests_total{{user="{user}",verb="create",resource="configmaps"}} 3"#
        )),
        "{text}"
    );
    // The embedding process's own client (and kube-sim's simulated
    // kubelet and controllers) do not pass the listener.
    let in_process: Api<ConfigMap> = Api::namespaced(sim.client(), "bench");
    in_process.get("a").await.unwrap();
    assert_eq!(
        metrics.user_requests("system:admin", "get", "configmaps"),
        0
    );
    let text = metrics.encode();
    assert!(
        !text
            .lines()
            .any(|line| line.starts_with("kube_sim_user_requests_total")
                && line.contains(r#"verb="get",resource="configmaps""#)),
        "{text}"
    );
}
