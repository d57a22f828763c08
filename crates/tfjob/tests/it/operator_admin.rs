//! `Operator::run` serves the admin addresses of its configuration (what
//! `gpufleet tfjob --metrics-bind-address/--health-probe-bind-address`
//! become) and reports one it could not bind. kube-sim only: not an `*_e2e`
//! module, as the real lane adds nothing to a local listener.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use tfjob::run::{Operator, OperatorConfig, RunError};
use tokio_util::sync::CancellationToken;

use crate::support::*;

/// `GET path` on `address`: the whole answer, or None while nothing
/// listens there.
async fn get(address: SocketAddr, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.ok()?;
    Some(String::from_utf8_lossy(&answer).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_serves_its_admin_addresses_and_reports_one_it_cannot_bind() {
    let cluster = test_cluster("admin").await;
    // Held for the whole test, so the operator cannot bind it.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_address = taken.local_addr().unwrap();
    let free_address = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut config = OperatorConfig::new(cluster.lease_namespace());
    config.election.name = cluster.namespace.clone();
    config.namespace = Some(cluster.namespace.clone());
    config.admin = vec![free_address, taken_address];
    let operator = Operator::new(cluster.client.clone(), config).unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(operator.run(shutdown.clone()));

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let ready = loop {
        match get(free_address, "/readyz").await {
            Some(answer) if answer.starts_with("HTTP/1.0 200") => break answer,
            answer => assert!(
                tokio::time::Instant::now() < deadline,
                "/readyz on {free_address} did not answer 200 within 30 s: {answer:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(ready.starts_with("HTTP/1.0 200"), "{ready}");
    let metrics = get(free_address, "/metrics").await.unwrap_or_default();
    assert!(
        metrics.contains("training_operator_"),
        "the operator's own metrics on /metrics: {metrics}"
    );

    // The taken port does not stop the operator; it is what gets reported
    // once the operator stops, naming the address.
    assert!(!task.is_finished());
    shutdown.cancel();
    let result = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap();
    match result {
        Err(RunError::Admin(error)) => {
            let text = error.to_string();
            assert!(text.contains(&taken_address.to_string()), "{text}");
        }
        other => panic!("expected the taken admin address to be reported: {other:?}"),
    }
    drop(taken);
}
