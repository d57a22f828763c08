//! `gpufleet sim serve`'s security defaults, seen by kubectl and curl: a
//! kubeconfig readable by its owner only, holding a random token and the
//! generated CA; 401 without the token; `--authorization rbac` answering a
//! ServiceAccount token from deploy/'s RBAC with the real 403; and the
//! plain-HTTP and insecure modes.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use base64::Engine;

use crate::support::{SimServer, http_get};

/// A value of the kubeconfig `sim serve` wrote, read back with kubectl.
fn kubeconfig_value(sim: &SimServer, jsonpath: &str) -> String {
    sim.kubectl_ok(&[
        "config",
        "view",
        "--raw",
        "-o",
        &format!("jsonpath={{{jsonpath}}}"),
    ])
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|port| port.trim_end_matches('/').parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"))
}

/// curl against the server, trusting the kubeconfig's CA: (status, body).
fn curl(sim: &SimServer, args: &[&str], path: &str) -> (u16, String) {
    let server = kubeconfig_value(sim, ".clusters[0].cluster.server");
    let ca = base64::engine::general_purpose::STANDARD
        .decode(kubeconfig_value(
            sim,
            ".clusters[0].cluster.certificate-authority-data",
        ))
        .expect("certificate-authority-data is base64");
    let ca_file = sim.dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca).unwrap();
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "20",
            "-w",
            "\n%{http_code}",
            "--cacert",
        ])
        .arg(&ca_file)
        .args(args)
        .arg(format!("{server}{path}"))
        .output()
        .expect("curl runs (Debian package curl)");
    assert!(
        out.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').expect("curl printed the code");
    (code.trim().parse().expect("an HTTP code"), body.to_string())
}

const UNAUTHORIZED: &str = r#"{"apiVersion":"v1","code":401,"kind":"Status","message":"Unauthorized","metadata":{},"reason":"Unauthorized","status":"Failure"}"#;

fn same_json(a: &str, b: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(a).ok()
        == serde_json::from_str::<serde_json::Value>(b).ok()
}

#[test]
fn sim_serve_writes_an_owner_only_kubeconfig_with_a_token_and_ca_and_refuses_requests_without_it() {
    let sim = SimServer::start();
    let mode = std::fs::metadata(&sim.kubeconfig)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "kubeconfig mode {mode:o}");
    let server = kubeconfig_value(&sim, ".clusters[0].cluster.server");
    assert!(server.starts_with("https://127.0.0.1:"), "{server}");
    let token = kubeconfig_value(&sim, ".users[0].user.token");
    assert_eq!(token.len(), 64, "a 32-byte random token, hex: {token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));

    // kubectl works with the kubeconfig as written...
    sim.kubectl_ok(&["get", "ns", "default"]);
    // ...and is told Unauthorized with a wrong token.
    let out = sim.kubectl_output(&["get", "ns", "--token=0123456789abcdef"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("You must be logged in to the server (Unauthorized)"),
        "{stderr}"
    );

    let (code, body) = curl(&sim, &[], "/api/v1/namespaces");
    assert_eq!(code, 401);
    assert!(same_json(&body, UNAUTHORIZED), "{body}");
    // The token with its last hex digit changed (never to itself).
    let last = if token.ends_with('0') { '1' } else { '0' };
    let wrong = format!("Authorization: Bearer {}{last}", &token[..63]);
    let (code, body) = curl(&sim, &["-H", &wrong], "/api/v1/namespaces");
    assert_eq!(code, 401);
    assert!(same_json(&body, UNAUTHORIZED), "{body}");
    let right = format!("Authorization: Bearer {token}");
    let (code, _) = curl(&sim, &["-H", &right], "/api/v1/namespaces");
    assert_eq!(code, 200);
    for path in ["/healthz", "/livez", "/readyz", "/version"] {
        let (code, _) = curl(&sim, &[], path);
        assert_eq!(code, 200, "{path} is public");
    }
    for path in ["/metrics", "/sim/faults"] {
        let (code, _) = curl(&sim, &[], path);
        assert_eq!(code, 401, "{path} needs the token");
    }
    // The fault endpoint: JSON only, with the token.
    let fault =
        r#"{"verbs":["list"],"resource":"pods","action":{"type":"error","code":503},"times":1}"#;
    let (code, _) = curl(
        &sim,
        &[
            "-X",
            "POST",
            "-H",
            &right,
            "-H",
            "Content-Type: text/plain",
            "-d",
            fault,
        ],
        "/sim/faults",
    );
    assert_eq!(code, 415);
    let (code, _) = curl(
        &sim,
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            fault,
        ],
        "/sim/faults",
    );
    assert_eq!(code, 401);
    let (code, _) = curl(
        &sim,
        &[
            "-X",
            "POST",
            "-H",
            &right,
            "-H",
            "Content-Type: application/json",
            "-d",
            fault,
        ],
        "/sim/faults",
    );
    assert_eq!(code, 201);
    // A host name that is not loopback, even with the token.
    let (code, _) = curl(
        &sim,
        &["-H", &right, "-H", "Host: rebound.example"],
        "/api/v1/namespaces",
    );
    assert_eq!(code, 421);
    // Plain HTTP to the HTTPS port gets no HTTP answer.
    assert_eq!(http_get(port_of(&server), "/healthz"), None);
}

#[test]
fn sim_serve_no_tls_keeps_the_token_and_insecure_no_auth_drops_both() {
    let sim = SimServer::start_with(&["--no-tls"]);
    let server = kubeconfig_value(&sim, ".clusters[0].cluster.server");
    assert!(server.starts_with("http://127.0.0.1:"), "{server}");
    let port = port_of(&server);
    let (code, body) = http_get(port, "/api/v1/namespaces").expect("an answer");
    assert_eq!(code, 401);
    assert!(same_json(&body, UNAUTHORIZED), "{body}");
    assert_eq!(http_get(port, "/healthz").map(|(code, _)| code), Some(200));

    let open = SimServer::start_with(&["--insecure-no-auth"]);
    let server = kubeconfig_value(&open, ".clusters[0].cluster.server");
    assert!(server.starts_with("http://127.0.0.1:"), "{server}");
    assert_eq!(kubeconfig_value(&open, ".users[0].user.token"), "");
    open.kubectl_ok(&["get", "ns", "default"]);
    let (code, _) = http_get(port_of(&server), "/api/v1/namespaces").expect("an answer");
    assert_eq!(code, 200);

    // RBAC needs tokens: the combination is refused at start, naming the flags.
    let out = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args([
            "sim",
            "serve",
            "--insecure-no-auth",
            "--authorization",
            "rbac",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--insecure-no-auth") && stderr.contains("--authorization"),
        "{stderr}"
    );
}

#[test]
fn sim_serve_tls_names_the_default_and_cannot_be_combined_with_no_tls() {
    let sim = SimServer::start_with(&["--tls"]);
    let server = kubeconfig_value(&sim, ".clusters[0].cluster.server");
    assert!(server.starts_with("https://127.0.0.1:"), "{server}");
    sim.kubectl_ok(&["get", "ns", "default"]);

    let out = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["sim", "serve", "--tls", "--no-tls"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--tls") && stderr.contains("--no-tls"),
        "{stderr}"
    );
}

#[test]
fn sim_serve_with_rbac_gives_the_tfjob_service_account_what_deploy_grants_and_the_real_403() {
    let sim = SimServer::start_with(&["--authorization", "rbac"]);
    let rbac = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/tfjob/01-rbac.yaml");
    sim.kubectl_ok(&["apply", "-f", rbac.to_str().unwrap()]);
    // A TokenRequest for the operator's ServiceAccount, as a JSON body
    // (`kubectl create token` sends the same request as protobuf; that path
    // has its own test in kube-sim's tokens module).
    let request = sim.dir.path().join("token-request.json");
    std::fs::write(
        &request,
        r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}"#,
    )
    .unwrap();
    let issued = sim.kubectl_ok(&[
        "create",
        "--raw",
        "/api/v1/namespaces/kubeflow/serviceaccounts/tfjob/token",
        "-f",
        request.to_str().unwrap(),
    ]);
    let issued: serde_json::Value = serde_json::from_str(&issued).expect("a TokenRequest");
    let token = issued["status"]["token"].as_str().expect("a token");
    let as_operator = format!("--token={token}");

    // Granted by the ClusterRole: pods and services everywhere, tfjobs.
    sim.kubectl_ok(&["get", "pods", "-A", &as_operator]);
    sim.kubectl_ok(&["get", "services", "-n", "default", &as_operator]);
    let who = sim.kubectl_ok(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
        &as_operator,
    ]);
    assert_eq!(who, "system:serviceaccount:kubeflow:tfjob");

    // Not granted: the real Forbidden, as kubectl prints it.
    let out = sim.kubectl_output(&["get", "secrets", "-n", "kubeflow", &as_operator]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        r#"Error from server (Forbidden): secrets is forbidden: User "system:serviceaccount:kubeflow:tfjob" cannot list resource "secrets" in API group "" in the namespace "kubeflow""#
    );
    let out = sim.kubectl_output(&["delete", "node", "n1", &as_operator]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        r#"Error from server (Forbidden): nodes "n1" is forbidden: User "system:serviceaccount:kubeflow:tfjob" cannot delete resource "nodes" in API group "" at the cluster scope"#
    );
    // The kubeconfig's admin token is allowed everything.
    sim.kubectl_ok(&["get", "secrets", "-n", "kubeflow"]);
}
