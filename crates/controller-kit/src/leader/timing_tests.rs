//! The elector's deadlines against a fake Lease API on a paused clock: exact instants,
//! no real server and no real waiting. kube-sim tests (tests/it/leader_outage.rs) cover
//! the same rules against a real server and kube's client stack.

use std::convert::Infallible;
use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::{Value, json};

use super::*;

const LEASE_DURATION: Duration = Duration::from_secs(4);
const RENEW_DEADLINE: Duration = Duration::from_secs(3);
const RETRY_PERIOD: Duration = Duration::from_millis(500);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Answer,
    /// Every request waits forever.
    Hang,
    /// Every request is answered 500 at once.
    Refuse,
}

struct FakeState {
    mode: Mode,
    lease: Option<Value>,
    resource_version: u64,
    /// Every accepted write: when, and the holder it wrote.
    writes: Vec<(Instant, String)>,
}

/// One Lease behind a GET/POST/PUT API with resourceVersion checks.
#[derive(Clone)]
struct FakeApi(Arc<Mutex<FakeState>>);

fn answer(code: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Body::from(body.to_string().into_bytes()));
    *response.status_mut() = code;
    response
}

fn status(code: StatusCode, reason: &str) -> Response<Body> {
    answer(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": reason, "reason": reason, "code": code.as_u16()}),
    )
}

impl FakeApi {
    fn new() -> Self {
        Self(Arc::new(Mutex::new(FakeState {
            mode: Mode::Answer,
            lease: None,
            resource_version: 0,
            writes: Vec::new(),
        })))
    }

    fn client(&self) -> kube::Client {
        let api = self.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let api = api.clone();
            async move { Ok::<_, Infallible>(api.serve(request).await) }
        });
        kube::Client::new(service, "default")
    }

    fn set_mode(&self, mode: Mode) {
        self.0.lock().mode = mode;
    }

    fn writes(&self) -> Vec<(Instant, String)> {
        self.0.lock().writes.clone()
    }

    fn holder(&self) -> Option<String> {
        let state = self.0.lock();
        let holder = state.lease.as_ref()?.pointer("/spec/holderIdentity")?;
        holder.as_str().map(str::to_string)
    }

    /// Another replica takes the lease, as if it had seen ours expire.
    fn steal(&self, holder: &str) {
        let mut state = self.0.lock();
        state.resource_version += 1;
        let version = state.resource_version.to_string();
        if let Some(lease) = state.lease.as_mut() {
            lease["metadata"]["resourceVersion"] = json!(version);
            lease["spec"]["holderIdentity"] = json!(holder);
            lease["spec"]["renewTime"] = json!(Timestamp::now().to_string());
        }
    }

    async fn serve(&self, request: Request<Body>) -> Response<Body> {
        let mode = self.0.lock().mode;
        match mode {
            Mode::Answer => {}
            Mode::Hang => return std::future::pending().await,
            Mode::Refuse => return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
        }
        let method = request.method().clone();
        let body = match request.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(_) => return status(StatusCode::BAD_REQUEST, "BadRequest"),
        };
        let sent: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let mut state = self.0.lock();
        match method {
            Method::GET => match &state.lease {
                Some(lease) => answer(StatusCode::OK, lease),
                None => status(StatusCode::NOT_FOUND, "NotFound"),
            },
            Method::POST | Method::PUT => {
                let current = state
                    .lease
                    .as_ref()
                    .and_then(|lease| lease.pointer("/metadata/resourceVersion").cloned());
                let stale = match method {
                    Method::POST => state.lease.is_some(),
                    _ => sent.pointer("/metadata/resourceVersion") != current.as_ref(),
                };
                if stale {
                    return status(StatusCode::CONFLICT, "Conflict");
                }
                state.resource_version += 1;
                let mut lease = sent;
                lease["metadata"]["resourceVersion"] = json!(state.resource_version.to_string());
                let holder = lease
                    .pointer("/spec/holderIdentity")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                state.writes.push((Instant::now(), holder));
                state.lease = Some(lease.clone());
                answer(StatusCode::OK, &lease)
            }
            _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
        }
    }
}

fn elector(api: &FakeApi) -> LeaderElector {
    let config = LeaderElectionConfig {
        identity: "me".to_string(),
        lease_duration: LEASE_DURATION,
        renew_deadline: RENEW_DEADLINE,
        retry_period: RETRY_PERIOD,
        ..LeaderElectionConfig::new("ns", "lease")
    };
    LeaderElector::new(api.client(), config, &LeaderElectionMetrics::default())
        .expect("valid config")
}

/// When the leader work's token fired and when the work future was dropped or returned.
#[derive(Clone, Default)]
struct WorkLog(Arc<Mutex<(Option<Instant>, Option<Instant>)>>);

impl WorkLog {
    fn told(&self) -> Option<Instant> {
        self.0.lock().0
    }
    fn stopped(&self) -> Option<Instant> {
        self.0.lock().1
    }
}

struct StoppedOnDrop(WorkLog);

impl Drop for StoppedOnDrop {
    fn drop(&mut self) {
        (self.0).0.lock().1 = Some(Instant::now());
    }
}

/// Leader work that notes when it is told to stop, then takes `linger` to return
/// (`None`: never returns by itself).
fn work(
    log: &WorkLog,
    linger: Option<Duration>,
) -> impl FnOnce(CancellationToken) -> futures::future::BoxFuture<'static, ()> {
    let log = log.clone();
    move |token: CancellationToken| {
        Box::pin(async move {
            let _stopped = StoppedOnDrop(log.clone());
            token.cancelled().await;
            log.0.lock().0 = Some(Instant::now());
            match linger {
                Some(linger) => tokio::time::sleep(linger).await,
                None => std::future::pending().await,
            }
        })
    }
}

fn last_write_by(api: &FakeApi, holder: &str) -> Instant {
    api.writes()
        .iter()
        .rev()
        .find(|(_, who)| who == holder)
        .map(|(at, _)| *at)
        .expect("a write by the holder")
}

#[tokio::test(start_paused = true)]
async fn hanging_lease_calls_end_leadership_exactly_at_the_renew_deadline_and_stuck_work_is_aborted()
 {
    let api = FakeApi::new();
    let elector = elector(&api);
    let log = WorkLog::default();
    let shutdown = CancellationToken::new();
    let run = elector.run(&shutdown, &|_: &str| {}, work(&log, None));
    let watch = async {
        // Three renews, then the server stops answering.
        while api.writes().len() < 4 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        api.set_mode(Mode::Hang);
    };
    let (outcome, ()) = tokio::join!(run, watch);
    assert_eq!(outcome, ElectionOutcome::LeadershipLost);
    let last_renew = last_write_by(&api, "me");
    assert_eq!(log.told(), Some(last_renew + RENEW_DEADLINE));
    // Half of the 1 s between renew deadline and lease duration.
    assert_eq!(
        log.stopped(),
        Some(last_renew + RENEW_DEADLINE + Duration::from_millis(500))
    );
    assert!(log.stopped() < Some(last_renew + LEASE_DURATION));
}

#[tokio::test(start_paused = true)]
async fn work_that_returns_when_told_stops_at_the_renew_deadline_without_waiting_for_the_grace() {
    let api = FakeApi::new();
    let elector = elector(&api);
    let log = WorkLog::default();
    let shutdown = CancellationToken::new();
    let run = elector.run(&shutdown, &|_: &str| {}, work(&log, Some(Duration::ZERO)));
    let watch = async {
        while api.writes().len() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        api.set_mode(Mode::Hang);
    };
    let (outcome, ()) = tokio::join!(run, watch);
    assert_eq!(outcome, ElectionOutcome::LeadershipLost);
    let deadline = last_write_by(&api, "me") + RENEW_DEADLINE;
    assert_eq!(
        (log.told(), log.stopped()),
        (Some(deadline), Some(deadline))
    );
}

#[tokio::test(start_paused = true)]
async fn a_read_that_shows_another_holder_ends_leadership_at_once_not_at_the_deadline() {
    let api = FakeApi::new();
    let elector = elector(&api);
    let log = WorkLog::default();
    let shutdown = CancellationToken::new();
    let run = elector.run(&shutdown, &|_: &str| {}, work(&log, Some(Duration::ZERO)));
    let stolen_at = async {
        while api.writes().len() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        api.steal("intruder");
        Instant::now()
    };
    let (outcome, stolen_at) = tokio::join!(run, stolen_at);
    assert_eq!(outcome, ElectionOutcome::LeadershipLost);
    let told = log.told().expect("told to stop");
    assert!(
        told - stolen_at <= RETRY_PERIOD,
        "stepped down {:?} after the lease was taken",
        told - stolen_at
    );
    assert_eq!(
        api.holder().as_deref(),
        Some("intruder"),
        "the intruder's lease is not released"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_keeps_renewing_while_the_work_drains_past_the_lease_duration_then_releases() {
    let api = FakeApi::new();
    let elector = elector(&api);
    let log = WorkLog::default();
    let shutdown = CancellationToken::new();
    let drain = LEASE_DURATION * 2;
    let run = elector.run(&shutdown, &|_: &str| {}, work(&log, Some(drain)));
    let stop = async {
        while api.writes().len() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.cancel();
        Instant::now()
    };
    let (outcome, stopped_at) = tokio::join!(run, stop);
    assert_eq!(outcome, ElectionOutcome::Cancelled);
    assert_eq!(log.stopped(), Some(stopped_at + drain));
    let writes = api.writes();
    let renews_while_draining: Vec<Instant> = writes
        .iter()
        .filter(|(at, who)| who == "me" && *at > stopped_at)
        .map(|(at, _)| *at)
        .collect();
    // Never a gap of a lease duration in which a standby could have taken over.
    let mut previous = stopped_at;
    for at in renews_while_draining.iter().chain([&(stopped_at + drain)]) {
        assert!(
            *at - previous < RENEW_DEADLINE,
            "renews {renews_while_draining:?}"
        );
        previous = *at;
    }
    let (released_at, holder) = writes.last().cloned().expect("writes");
    assert_eq!(holder, "", "released after the drain");
    assert!(released_at >= stopped_at + drain);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_election_run_aborts_the_leader_work_it_no_longer_renews_for() {
    let api = FakeApi::new();
    let elector = elector(&api);
    let log = WorkLog::default();
    let shutdown = CancellationToken::new();
    let leading = async {
        while api.writes().len() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::select! {
        _ = elector.run(&shutdown, &|_: &str| {}, work(&log, None)) => {
            panic!("the run does not end by itself")
        }
        () = leading => {}
    }
    let dropped_at = Instant::now();
    for _ in 0..10 {
        if log.stopped().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        log.told(),
        None,
        "the token did not fire: the work was aborted"
    );
    let stopped = log.stopped().expect("the leader work was dropped");
    assert!(stopped - dropped_at <= Duration::from_millis(10));
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_amid_failing_renews_still_gives_up_the_work_at_the_renew_deadline() {
    let api = FakeApi::new();
    let elector = elector(&api);
    let log = WorkLog::default();
    let shutdown = CancellationToken::new();
    let run = elector.run(&shutdown, &|_: &str| {}, work(&log, None));
    let stop = async {
        while api.writes().len() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Refused at once, so the last failed renew is followed by a pause that ends
        // at the deadline, and the shutdown comes during that pause.
        api.set_mode(Mode::Refuse);
        tokio::time::sleep(RENEW_DEADLINE - Duration::from_millis(200)).await;
        shutdown.cancel();
        Instant::now()
    };
    let (outcome, stopped_at) = tokio::join!(run, stop);
    assert_eq!(outcome, ElectionOutcome::Cancelled);
    assert_eq!(log.told(), Some(stopped_at));
    let deadline = last_write_by(&api, "me") + RENEW_DEADLINE;
    assert_eq!(
        log.stopped(),
        Some(deadline + Duration::from_millis(500)),
        "work that ignores its token is aborted a stop grace after the renew deadline"
    );
}
