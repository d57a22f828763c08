use super::*;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use prometheus_client::registry::Registry;
use proptest::prelude::*;

fn queue() -> WorkQueue<&'static str> {
    WorkQueue::new("test")
}

async fn get_now<K: QueueKey>(queue: &WorkQueue<K>) -> Option<K> {
    tokio::time::timeout(Duration::from_millis(1), queue.get())
        .await
        .ok()
        .flatten()
}

#[tokio::test(start_paused = true)]
async fn a_key_added_twice_is_queued_once() {
    let queue = queue();
    queue.add("a");
    queue.add("a");
    queue.add("b");
    assert_eq!(queue.len(), 2);
    assert_eq!(queue.get().await, Some("a"));
    assert_eq!(queue.get().await, Some("b"));
    assert_eq!(get_now(&queue).await, None);
}

#[tokio::test(start_paused = true)]
async fn a_key_in_flight_is_not_handed_out_again_until_done() {
    let queue = queue();
    queue.add("a");
    let key = queue.get().await;
    assert_eq!(key, Some("a"));
    queue.add("a");
    queue.add("a");
    assert_eq!(queue.len(), 0, "re-added key waits for done");
    assert_eq!(get_now(&queue).await, None);
    queue.done(&"a");
    assert_eq!(
        queue.len(),
        1,
        "re-added key is queued exactly once after done"
    );
    assert_eq!(queue.get().await, Some("a"));
    queue.done(&"a");
    assert_eq!(get_now(&queue).await, None);
}

#[tokio::test(start_paused = true)]
async fn add_after_queues_the_key_when_its_delay_has_passed() {
    let queue = queue();
    let start = Instant::now();
    queue.add_after("a", Duration::from_secs(3));
    assert_eq!(queue.len(), 0);
    assert_eq!(queue.delayed_len(), 1);
    assert_eq!(queue.get().await, Some("a"));
    assert_eq!(start.elapsed(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn add_after_keeps_the_earliest_deadline_of_a_key() {
    let queue = queue();
    let start = Instant::now();
    queue.add_after("a", Duration::from_secs(10));
    queue.add_after("a", Duration::from_secs(2));
    queue.add_after("a", Duration::from_secs(5));
    assert_eq!(queue.delayed_len(), 1);
    assert_eq!(queue.get().await, Some("a"));
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    queue.done(&"a");
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(queue.len(), 0, "the superseded deadlines add nothing");
}

#[tokio::test(start_paused = true)]
async fn add_rate_limited_waits_by_per_key_backoff_and_forget_resets() {
    let queue = queue();
    let mut waits = Vec::new();
    for _ in 0..4 {
        let start = Instant::now();
        queue.add_rate_limited("a");
        let key = queue.get().await;
        assert_eq!(key, Some("a"));
        waits.push(start.elapsed());
        queue.done(&"a");
    }
    let expected: Vec<Duration> = [5, 10, 20, 40]
        .iter()
        .map(|ms| Duration::from_millis(*ms))
        .collect();
    assert_eq!(waits, expected);
    assert_eq!(queue.num_requeues(&"a"), 4);
    queue.forget(&"a");
    assert_eq!(queue.num_requeues(&"a"), 0);
}

#[tokio::test(start_paused = true)]
async fn shut_down_ignores_new_adds_but_hands_out_what_is_queued() {
    let queue = queue();
    queue.add("a");
    queue.add_after("late", Duration::from_secs(1));
    queue.shut_down();
    queue.add("b");
    assert!(queue.is_shutting_down());
    assert_eq!(queue.get().await, Some("a"));
    assert_eq!(queue.get().await, None);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        queue.get().await,
        None,
        "delayed keys are dropped by shutdown"
    );
}

#[tokio::test(start_paused = true)]
async fn shut_down_wakes_every_waiting_worker() {
    let queue = queue();
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move { queue.get().await })
        })
        .collect();
    tokio::task::yield_now().await;
    queue.shut_down();
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), None);
    }
}

#[tokio::test(start_paused = true)]
async fn shut_down_with_drain_waits_for_keys_in_flight() {
    let queue = queue();
    queue.add("a");
    let key = queue.get().await.unwrap();
    let drained = Arc::new(AtomicUsize::new(0));
    let drain = {
        let queue = queue.clone();
        let drained = Arc::clone(&drained);
        tokio::spawn(async move {
            queue.shut_down_with_drain().await;
            drained.store(1, Ordering::SeqCst);
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        drained.load(Ordering::SeqCst),
        0,
        "drain must wait for the key in flight"
    );
    queue.done(&key);
    drain.await.unwrap();
    assert_eq!(drained.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn metrics_are_reported_under_client_go_names_per_queue() {
    let mut registry = Registry::default();
    let metrics = WorkQueueMetrics::register(&mut registry);
    let queue: WorkQueue<&str> = WorkQueue::builder("racks").metrics(&metrics).build();
    queue.add("a");
    queue.add("b");
    queue.add("a");
    let key = queue.get().await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    queue.add_rate_limited(key);
    queue.done(&key);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains("workqueue_adds_total{name=\"racks\"} 2"),
        "{text}"
    );
    assert!(text.contains("workqueue_depth{name=\"racks\"} 1"), "{text}");
    assert!(
        text.contains("workqueue_retries_total{name=\"racks\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("workqueue_queue_duration_seconds_count{name=\"racks\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("workqueue_work_duration_seconds_count{name=\"racks\"} 1"),
        "{text}"
    );
    // The in-progress gauges saw the key running for about two seconds before done.
    let longest = metric_value(
        &text,
        "workqueue_longest_running_processor_seconds{name=\"racks\"}",
    );
    assert!((1.5..=2.0).contains(&longest), "{text}");
    assert!(
        text.contains("workqueue_unfinished_work_seconds{name=\"racks\"}"),
        "{text}"
    );
}

fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// Workers that record, per key, how many are processing it right now, and the
/// highest add generation a processing run has started after.
async fn run_concurrency_scenario(workers: usize, keys: u64, adds: Vec<(u64, bool)>) {
    let queue: WorkQueue<u64> = WorkQueue::new("prop");
    let generation: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
    let observed: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
    let running: Arc<Vec<AtomicUsize>> = Arc::new((0..keys).map(|_| AtomicUsize::new(0)).collect());
    let overlaps = Arc::new(AtomicUsize::new(0));

    let mut handles = Vec::new();
    for _ in 0..workers {
        let queue = queue.clone();
        let generation = Arc::clone(&generation);
        let observed = Arc::clone(&observed);
        let running = Arc::clone(&running);
        let overlaps = Arc::clone(&overlaps);
        handles.push(tokio::spawn(async move {
            while let Some(key) = queue.get().await {
                let index = key as usize;
                if running[index].fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                observed[index]
                    .fetch_max(generation[index].load(Ordering::SeqCst), Ordering::SeqCst);
                tokio::task::yield_now().await;
                running[index].fetch_sub(1, Ordering::SeqCst);
                queue.done(&key);
            }
        }));
    }

    let producers: Vec<_> = adds
        .chunks(adds.len().div_ceil(4).max(1))
        .map(|chunk| {
            let chunk = chunk.to_vec();
            let queue = queue.clone();
            let generation = Arc::clone(&generation);
            tokio::spawn(async move {
                for (key, delayed) in chunk {
                    generation[key as usize].fetch_add(1, Ordering::SeqCst);
                    if delayed {
                        queue.add_after(key, Duration::from_millis(1));
                    } else {
                        queue.add(key);
                    }
                    if key % 3 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for producer in producers {
        producer.await.unwrap();
    }
    while queue.delayed_len() > 0 || !queue.is_empty() || queue.in_flight() > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    queue.shut_down();
    for handle in handles {
        handle.await.unwrap();
    }

    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "a key was processed by two workers at once"
    );
    for key in 0..keys as usize {
        assert_eq!(
            observed[key].load(Ordering::SeqCst),
            generation[key].load(Ordering::SeqCst),
            "the last add of key {key} was never followed by processing"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn no_key_is_processed_twice_at_once_and_every_add_is_processed(
        workers in 1usize..8,
        adds in proptest::collection::vec((0u64..16, proptest::bool::weighted(0.2)), 1..400),
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(run_concurrency_scenario(workers, 16, adds));
    }
}
