//! Replaying a scenario against one server through a `kube::Client`.

use std::collections::BTreeMap;
use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::{Value, json};

use super::corpus::{Scenario, Step, substitute, substitute_json};

/// One step's answer.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub status: u16,
    /// The body as JSON; a body that is not JSON is `{"text": …}`.
    pub body: Value,
    /// Lower-case header name to its values, in order.
    pub headers: BTreeMap<String, Vec<String>>,
    /// For WATCH steps: the events read, in order.
    pub events: Option<Vec<Value>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("step {step}: {message}")]
    Step { step: usize, message: String },
    #[error("preparing namespace {namespace}: {message}")]
    Namespace { namespace: String, message: String },
}

/// Longest a single request may take; a watch reads at most this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a WAIT step polls.
const WAIT_TIMEOUT: Duration = Duration::from_secs(30);

async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    accept: Option<&str>,
    extra_headers: &BTreeMap<String, String>,
    body: Vec<u8>,
) -> Result<http::Response<kube::client::Body>, String> {
    let mut builder = http::Request::builder().method(method).uri(path);
    for (name, value) in extra_headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    if let Some(content_type) = content_type {
        builder = builder.header("content-type", content_type);
    }
    if let Some(accept) = accept {
        builder = builder.header("accept", accept);
    }
    let request = builder
        .body(kube::client::Body::from(body))
        .map_err(|e| format!("building {method} {path}: {e}"))?;
    tokio::time::timeout(REQUEST_TIMEOUT, client.send(request))
        .await
        .map_err(|_| format!("{method} {path}: no answer in {REQUEST_TIMEOUT:?}"))?
        .map_err(|e| format!("{method} {path}: {e}"))
}

fn headers_of(response: &http::Response<kube::client::Body>) -> BTreeMap<String, Vec<String>> {
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in response.headers() {
        headers
            .entry(name.as_str().to_ascii_lowercase())
            .or_default()
            .push(String::from_utf8_lossy(value.as_bytes()).into_owned());
    }
    headers
}

fn parse_body(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    // A protobuf answer is compared in its JSON form.
    if bytes.starts_with(crate::protobuf::MAGIC) {
        return crate::protobuf::decode_object(bytes)
            .unwrap_or_else(|e| json!({"text": format!("undecodable protobuf answer: {e}")}));
    }
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| json!({"text": String::from_utf8_lossy(bytes).trim().to_owned()}))
}

async fn request(
    client: &kube::Client,
    step: &Step,
    path: &str,
    vars: &BTreeMap<String, String>,
) -> Result<Recorded, String> {
    let protobuf = step.content_type.as_deref() == Some(crate::protobuf::CONTENT_TYPE);
    let repeated = step.body.as_ref().and_then(|body| {
        let times = step.repeat?;
        let items = body.as_array()?;
        Some(Value::Array(
            std::iter::repeat_n(items, times)
                .flatten()
                .cloned()
                .collect(),
        ))
    });
    let body = match (repeated.as_ref().or(step.body.as_ref()), &step.body_text) {
        // A protobuf step writes its body as JSON; it is encoded here.
        (Some(body), _) if protobuf => crate::protobuf::encode_object(&substitute_json(body, vars))
            .map_err(|e| format!("encoding the body as protobuf: {e}"))?,
        (Some(body), _) => serde_json::to_vec(&substitute_json(body, vars))
            .map_err(|e| format!("encoding the body: {e}"))?,
        (None, Some(text)) => substitute(text, vars).into_bytes(),
        (None, None) => Vec::new(),
    };
    let content_type = step.content_type.as_deref().or(match step.method.as_str() {
        "POST" | "PUT" => Some("application/json"),
        "PATCH" => Some("application/merge-patch+json"),
        _ => None,
    });
    let method = if step.method == "WATCH" {
        "GET"
    } else {
        step.method.as_str()
    };
    let response = send(
        client,
        method,
        path,
        content_type,
        step.accept.as_deref(),
        &step.request_headers,
        body,
    )
    .await?;
    let status = response.status().as_u16();
    let headers = headers_of(&response);
    if step.method == "WATCH" && status == 200 {
        let events = read_events(response.into_body(), step.events).await?;
        return Ok(Recorded {
            status,
            body: Value::Null,
            headers,
            events: Some(events),
        });
    }
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
        .to_bytes();
    Ok(Recorded {
        status,
        body: parse_body(&bytes),
        headers,
        events: None,
    })
}

/// Reads newline-separated watch events until `limit` of them, the end of
/// the stream, or the request timeout.
async fn read_events(
    mut body: kube::client::Body,
    limit: Option<usize>,
) -> Result<Vec<Value>, String> {
    let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
    let mut pending: Vec<u8> = Vec::new();
    let mut events = Vec::new();
    loop {
        if limit.is_some_and(|limit| events.len() >= limit) {
            return Ok(events);
        }
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Ok(events),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(format!("reading the watch: {e}")),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = line.trim_ascii();
            if !line.is_empty() {
                events.push(parse_body(line));
            }
            if limit.is_some_and(|limit| events.len() >= limit) {
                return Ok(events);
            }
        }
    }
    let rest = pending.trim_ascii();
    if !rest.is_empty() {
        events.push(parse_body(rest));
    }
    Ok(events)
}

async fn wait(client: &kube::Client, path: &str, want: u16) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + WAIT_TIMEOUT;
    let mut last = 0;
    while tokio::time::Instant::now() < deadline {
        let response = send(
            client,
            "GET",
            path,
            None,
            None,
            &BTreeMap::new(),
            Vec::new(),
        )
        .await?;
        last = response.status().as_u16();
        if last == want {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "GET {path} answered {last}, not {want}, for {WAIT_TIMEOUT:?}"
    ))
}

/// Runs `scenario` in namespace `namespace` (created first, deleted after,
/// with the scenario's cluster-scoped `cleanup` paths). One entry per step:
/// the answer, or None for setup and WAIT steps.
pub async fn replay(
    client: &kube::Client,
    scenario: &Scenario,
    namespace: &str,
    unique: &str,
) -> Result<Vec<Option<Recorded>>, ReplayError> {
    let mut vars = BTreeMap::from([
        ("NS".to_owned(), namespace.to_owned()),
        ("U".to_owned(), unique.to_owned()),
        // One byte over the 1 MiB limit on ConfigMap and Secret data.
        ("MIBPLUS".to_owned(), "x".repeat((1 << 20) + 1)),
        // Past the 3 MiB request body limit.
        ("BODYPLUS".to_owned(), "x".repeat((3 << 20) + 1)),
    ]);
    let created = send(
        client,
        "POST",
        "/api/v1/namespaces",
        Some("application/json"),
        None,
        &BTreeMap::new(),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            .to_string()
            .into_bytes(),
    )
    .await
    .map_err(|message| ReplayError::Namespace {
        namespace: namespace.to_owned(),
        message,
    })?;
    if !created.status().is_success() {
        return Err(ReplayError::Namespace {
            namespace: namespace.to_owned(),
            message: format!("create answered {}", created.status()),
        });
    }
    let result = run_steps(client, scenario, &mut vars).await;
    for path in &scenario.cleanup {
        let path = substitute(path, &vars);
        let _ = send(
            client,
            "DELETE",
            &path,
            None,
            None,
            &BTreeMap::new(),
            Vec::new(),
        )
        .await;
    }
    let _ = send(
        client,
        "DELETE",
        &format!("/api/v1/namespaces/{namespace}"),
        None,
        None,
        &BTreeMap::new(),
        Vec::new(),
    )
    .await;
    result
}

async fn run_steps(
    client: &kube::Client,
    scenario: &Scenario,
    vars: &mut BTreeMap<String, String>,
) -> Result<Vec<Option<Recorded>>, ReplayError> {
    let mut answers = Vec::with_capacity(scenario.steps.len());
    for (index, step) in scenario.steps.iter().enumerate() {
        let fail = |message: String| ReplayError::Step {
            step: index,
            message,
        };
        let path = substitute(&step.path, vars);
        if step.method == "WAIT" {
            wait(client, &path, step.status.unwrap_or(200))
                .await
                .map_err(fail)?;
            answers.push(None);
            continue;
        }
        let recorded = request(client, step, &path, vars).await.map_err(fail)?;
        for (name, pointer) in &step.save {
            let value = recorded.body.pointer(pointer).ok_or_else(|| {
                fail(format!(
                    "save {name}: the answer ({}) has nothing at {pointer}",
                    recorded.status
                ))
            })?;
            let text = match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            vars.insert(name.clone(), text);
        }
        answers.push((!step.setup).then_some(recorded));
    }
    Ok(answers)
}

/// Replays every scenario of `corpus` whose name contains `filter` against
/// kube-sim and, unless the scenario is kube-sim-only, the real server, and
/// judges each. Scenarios run one after another: several touch
/// cluster-scoped state (CRDs, discovery) that others read.
pub async fn compare_servers(
    corpus: &super::Corpus,
    sim: &kube::Client,
    real: Option<&kube::Client>,
    filter: Option<&str>,
) -> super::Report {
    let run: String = {
        use rand::Rng;
        let mut rng = rand::rng();
        (0..5)
            .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
            .collect()
    };
    let mut report = super::Report::default();
    for (index, scenario) in corpus.scenarios.iter().enumerate() {
        if filter.is_some_and(|filter| !scenario.name.contains(filter)) {
            continue;
        }
        let namespace = format!("diff-{run}-{index}");
        let unique = format!("{run}{index}");
        let sim_answers = replay(sim, scenario, &namespace, &unique)
            .await
            .map_err(|e| e.to_string());
        let real_answers = match real {
            Some(real) if !scenario.sim_only() => Some(
                replay(real, scenario, &namespace, &unique)
                    .await
                    .map_err(|e| e.to_string()),
            ),
            _ => None,
        };
        let outcome = if real.is_none() && !scenario.sim_only() {
            // Without a real server the scenario is only checked to run.
            match sim_answers {
                Ok(_) => super::Outcome::SimOnly,
                Err(message) => super::Outcome::Error { message },
            }
        } else {
            super::report::judge(corpus, scenario, sim_answers, real_answers)
        };
        report.results.push(super::ScenarioResult {
            area: scenario.area.clone(),
            name: scenario.name.clone(),
            outcome,
        });
    }
    report
}
