//! Mokka pure-core benchmarks at upstream's scale contract: 100,000 Nodes in
//! GB300 NVL72-shaped racks (18 Nodes x 4 GPUs, 5,556 racks).
//!
//! Run: `cargo bench -p mokka`

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mokka::allocate::{AllocationInput, Allocator, GroupInput, GroupKey, NodeInput, allocate};
use mokka::api::*;
use mokka::fixtures::{example_default_runtime, gb300_nvl72_profile};
use mokka::policy::{Evaluation, EvaluationInput, GpuCoordinate};
use mokka::render::{RackCoordinate, ResolvedProfile, render_resolved_rack};

const NODES: usize = 100_000;
const RACKS: i32 = 5_556;
const NODES_PER_RACK: i32 = 18;
const GPUS_PER_NODE: i32 = 4;
const POLICIES: usize = 1_000;
const QUERIES: usize = 4_000_000;

fn time(seconds: i64) -> Option<Time> {
    k8s_openapi::jiff::Timestamp::from_second(seconds)
        .ok()
        .map(Time)
}

fn node(index: usize) -> NodeInput {
    NodeInput {
        name: format!("node-{index:06}"),
        uid: format!("uid-{index:06}"),
        created: time(1_700_000_000 + index as i64),
        labels: std::sync::Arc::new(BTreeMap::from([
            (LABEL_SGPU_NODE.to_string(), "true".to_string()),
            (
                "mokka.nvidia.com/sgpu-group".to_string(),
                "compute".to_string(),
            ),
        ])),
        terminating: false,
    }
}

fn group_key() -> GroupKey {
    GroupKey::new("fleet", "fleet-uid", "compute")
}

/// Median of `runs` timings of `work`.
fn measure<T>(runs: usize, work: impl FnMut() -> T) -> Duration {
    measure_with_cpu(runs, work).0
}

/// Nanoseconds this thread has spent on a CPU, from the scheduler's own
/// accounting (`/proc/thread-self/schedstat`); `None` where unavailable.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Medians of `runs` wall-clock timings of `work` and of the thread's
/// on-CPU time during them: on a shared machine the wall clock includes
/// time spent waiting for a core, the on-CPU time does not.
fn measure_with_cpu<T>(runs: usize, mut work: impl FnMut() -> T) -> (Duration, Option<Duration>) {
    measure_with_setup(runs, || (), |()| work())
}

/// Like `measure_with_cpu`, but each run first gets a fresh value from
/// `setup`, which is not timed.
fn measure_with_setup<S, T>(
    runs: usize,
    mut setup: impl FnMut() -> S,
    mut work: impl FnMut(S) -> T,
) -> (Duration, Option<Duration>) {
    let mut wall = Vec::with_capacity(runs);
    let mut cpu = Vec::with_capacity(runs);
    for _ in 0..runs {
        let prepared = setup();
        let cpu_start = thread_cpu_ns();
        let start = Instant::now();
        let output = black_box(work(prepared));
        wall.push(start.elapsed());
        if let (Some(before), Some(after)) = (cpu_start, thread_cpu_ns()) {
            cpu.push(Duration::from_nanos(after.saturating_sub(before)));
        }
        // Dropping what the run returns is not part of the measurement.
        drop(output);
    }
    wall.sort();
    cpu.sort();
    let cpu_median = (cpu.len() == runs).then(|| cpu[runs / 2]);
    (wall[runs / 2], cpu_median)
}

/// Milliseconds, with three decimals below 1 ms.
fn ms(duration: Duration) -> String {
    let ms = duration.as_secs_f64() * 1e3;
    if ms < 1.0 {
        format!("{ms:.3} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

/// The on-CPU median for the notes. schedstat's run time advances when the
/// scheduler accounts (about every 4 ms tick here), so runs much shorter
/// than a tick cannot be resolved and only the wall clock is reported.
fn on_cpu(wall: Duration, cpu: Option<Duration>) -> String {
    match cpu {
        _ if wall < Duration::from_millis(20) => {
            "on-CPU time below schedstat's resolution (one scheduler tick, about 4 ms)".to_string()
        }
        Some(cpu) => format!("on-CPU median {}", ms(cpu)),
        None => "on-CPU time unavailable".to_string(),
    }
}

fn row(name: &str, runs: usize, median: Duration, target: &str, extra: &str) {
    println!("| {name} | {runs} | {} | {target} | {extra} |", ms(median));
}

fn main() {
    println!("| benchmark | runs | median | target | notes |");
    println!("|---|---|---|---|---|");

    // Allocation from empty.
    let selector = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
            match_labels: Some(BTreeMap::from([(
                "mokka.nvidia.com/sgpu-group".to_string(),
                "compute".to_string(),
            )])),
            ..Default::default()
        },
    );
    let empty = AllocationInput {
        groups: vec![GroupInput {
            key: group_key(),
            selector,
            racks: RACKS,
            nodes_per_rack: NODES_PER_RACK,
        }],
        nodes: (0..NODES).map(node).collect(),
        bindings: Vec::new(),
    };
    let mut first = None;
    let (from_empty, from_empty_cpu) = measure_with_cpu(5, || {
        let allocation = allocate(&empty).expect("valid input");
        first.get_or_insert(allocation).assigned.len()
    });
    let first = first.expect("ran at least once");
    assert_eq!(first.assigned.len(), NODES);
    row(
        "allocate 100,000 Nodes from empty",
        5,
        from_empty,
        "< 1 s",
        &format!(
            "5,556 racks x 18 Nodes, 1 group; {}",
            on_cpu(from_empty, from_empty_cpu)
        ),
    );

    // One Node changed: a bound Node is replaced by a new one. The bound
    // input is the first plan written back (every Node retained).
    let bound = AllocationInput {
        bindings: first.bindings.clone(),
        ..empty.clone()
    };
    let gone_uid = bound.nodes[NODES / 2].uid.clone();
    let newcomer = NodeInput {
        name: "node-new".into(),
        uid: "uid-new".into(),
        ..node(NODES + 1)
    };
    let mut changed = bound.clone();
    changed.nodes.remove(NODES / 2);
    changed.nodes.push(newcomer.clone());
    let mut one = None;
    let (full_recompute, full_recompute_cpu) = measure_with_cpu(9, || {
        let allocation = allocate(&changed).expect("valid input");
        one.get_or_insert(allocation).assigned.len()
    });
    let one = one.expect("ran at least once");
    assert_eq!(one.retained.len(), NODES - 1);
    assert_eq!(one.released.len(), 1);
    assert!(one.assigned.len() == 1 || one.pending.len() == 1);

    // The incremental path: an Allocator holds the bound input and its
    // plan; the change arrives as two Node events.
    let (build, build_cpu) = measure_with_cpu(3, || Allocator::new(&bound).expect("valid input"));
    let base = Allocator::new(&bound).expect("valid input");
    assert_eq!(base.allocation(), &allocate(&bound).expect("valid input"));
    let (incremental, incremental_cpu) = measure_with_setup(
        9,
        || base.clone(),
        |mut allocator| {
            allocator.remove_node(&gone_uid).expect("bound Node exists");
            allocator.upsert_node(newcomer.clone()).expect("valid Node");
            black_box(allocator.allocation().assigned.len());
            // Returned, so the (benchmark-only) clone is dropped untimed.
            allocator
        },
    );
    let (updated, removal_work, upsert_work) = {
        let mut allocator = base.clone();
        allocator.remove_node(&gone_uid).expect("bound Node exists");
        let removal_work = allocator.last_update();
        allocator.upsert_node(newcomer.clone()).expect("valid Node");
        let upsert_work = allocator.last_update();
        (allocator, removal_work, upsert_work)
    };
    // Exactly the plan a full allocate() gives for the changed input.
    assert!(
        updated.allocation() == &one,
        "incremental plan differs from allocate()"
    );
    let work = |work: mokka::allocate::UpdateWork| {
        format!(
            "{} Node / {} binding re-classified, {} group re-planned, {} plan edits",
            work.nodes_reclassified,
            work.bindings_reclassified,
            work.groups_replanned,
            work.plan_edits
        )
    };
    row(
        "allocate with one Node changed (99,999 retained, 1 NodeGone, 1 new)",
        9,
        incremental,
        "< 100 ms",
        &format!(
            "incremental: Allocator::remove_node + upsert_node, plan read as &Allocation (equal to allocate()); remove_node: {}; upsert_node: {}; {}",
            work(removal_work),
            work(upsert_work),
            on_cpu(incremental, incremental_cpu)
        ),
    );
    let (owned, owned_cpu) = measure_with_cpu(9, || updated.allocation().clone().bindings.len());
    row(
        "clone the changed plan (100,000 bindings) into an owned Allocation",
        9,
        owned,
        "-",
        &format!(
            "for a caller that needs an owned copy; {}",
            on_cpu(owned, owned_cpu)
        ),
    );
    row(
        "allocate with one Node changed, full recompute",
        9,
        full_recompute,
        "-",
        &format!(
            "allocate() over the whole changed input (the reference); {}",
            on_cpu(full_recompute, full_recompute_cpu)
        ),
    );
    // Writing a from-empty plan back: every new binding arrives as a rack
    // event (18 slots), one `apply` per rack.
    let planned = Allocator::new(&empty).expect("valid input");
    let racks: Vec<Vec<mokka::allocate::Change>> = planned
        .allocation()
        .assigned
        .chunks(NODES_PER_RACK as usize)
        .map(|rack| {
            rack.iter()
                .cloned()
                .map(mokka::allocate::Change::Bind)
                .collect()
        })
        .collect();
    let (write_back, write_back_cpu) = measure_with_setup(
        3,
        || (planned.clone(), racks.clone()),
        |(mut allocator, racks)| {
            for rack in racks {
                allocator.apply(rack).expect("valid bindings");
            }
            allocator
        },
    );
    let mut written = planned.clone();
    for rack in &racks {
        written.apply(rack.clone()).expect("valid bindings");
    }
    assert!(
        written.allocation() == base.allocation(),
        "written-back plan differs from allocate() over the bound input"
    );
    row(
        "write a from-empty plan back, one Allocator::apply per rack (5,556 x 18 bindings)",
        3,
        write_back,
        "-",
        &format!(
            "total for 100,000 new bindings becoming retained; {}",
            on_cpu(write_back, write_back_cpu)
        ),
    );
    row(
        "Allocator::new over the bound input (100,000 retained)",
        3,
        build,
        "-",
        &format!(
            "once per process start or resync; {}",
            on_cpu(build, build_cpu)
        ),
    );

    // Rendering every rack.
    let profile = gb300_nvl72_profile("gb300-nvl72", "profile-uid");
    let resolved = ResolvedProfile::resolve(&profile).expect("valid profile");
    let render_all = measure(3, || {
        (0..RACKS)
            .map(|rack_index| {
                let coordinate = RackCoordinate {
                    inventory_name: "fleet",
                    inventory_uid: "fleet-uid",
                    group: "compute",
                    rack_index,
                    rack_count: RACKS,
                };
                render_resolved_rack(coordinate, &resolved)
                    .expect("renders")
                    .nodes
                    .len()
            })
            .sum::<usize>()
    });
    row(
        "render 5,556 racks (400,032 GPU identities)",
        3,
        render_all,
        "-",
        "UUIDv5 + serial per GPU, 1 MiB check",
    );

    // Policy evaluation.
    let mut inventory = SGPUInventory::new(
        "fleet",
        SGPUInventorySpec {
            rack_groups: vec![RackGroup {
                id: "compute".into(),
                count: RACKS,
                profile_ref: ProfileNameRef {
                    name: "gb300-nvl72".into(),
                },
                placement: None,
            }],
        },
    );
    inventory.metadata.uid = Some("fleet-uid".into());
    let profiles = BTreeMap::from([("gb300-nvl72".to_string(), profile.clone())]);
    let policies: Vec<SGPURuntimePolicy> = (0..POLICIES).map(policy).collect();
    let mut evaluation = None;
    let evaluate = measure(5, || {
        let built = Evaluation::new(EvaluationInput {
            inventory_name: "fleet",
            inventory: Some(&inventory),
            profiles: &profiles,
            policies: &policies,
        })
        .expect("fixture policies encode");
        evaluation.get_or_insert(built).decisions().len()
    });
    let evaluation = evaluation.expect("ran at least once");
    let accepted = evaluation
        .decisions()
        .iter()
        .filter(|d| d.outcome == mokka::policy::Outcome::Accepted)
        .count();
    row(
        "evaluate 1,000 policies over 5,556 racks",
        5,
        evaluate,
        "-",
        &format!(
            "{accepted} accepted, {} conflicted or invalid",
            POLICIES - accepted
        ),
    );

    // Per-GPU runtime queries on one core.
    let defaults = example_default_runtime();
    let total_gpus = (RACKS * NODES_PER_RACK * GPUS_PER_NODE) as usize;
    let start = Instant::now();
    let mut layered = 0usize;
    for query in 0..QUERIES {
        let flat = (query.wrapping_mul(7919)) % total_gpus;
        let gpu = (flat % GPUS_PER_NODE as usize) as i32;
        let node = ((flat / GPUS_PER_NODE as usize) % NODES_PER_RACK as usize) as i32;
        let rack = (flat / (GPUS_PER_NODE * NODES_PER_RACK) as usize) as i32;
        let state = evaluation.runtime(
            Some(&defaults),
            GpuCoordinate {
                group: "compute",
                rack,
                node,
                gpu,
            },
        );
        if state.device_state != defaults.device_state {
            layered += 1;
        }
        black_box(state);
    }
    let elapsed = start.elapsed();
    let per_second = QUERIES as f64 / elapsed.as_secs_f64();
    println!(
        "| runtime(defaults, coordinate) x {QUERIES} | 1 | {:.1} ms | >= 1,000,000/s | {:.0} queries/s on one core, {} ns/query, {layered} hit a device-state layer |",
        elapsed.as_secs_f64() * 1e3,
        per_second,
        elapsed.as_nanos() / QUERIES as u128,
    );
}

/// A mix of scopes and fields, as chaos automation would write them: every
/// policy targets a different slice of the inventory; some overlap.
fn policy(index: usize) -> SGPURuntimePolicy {
    let rack = (index * 37 % RACKS as usize) as i32;
    let (rack_indexes, node_indexes, gpu_indexes) = match index % 4 {
        0 => (Some(vec![rack]), None, None),
        1 => (Some(vec![rack]), Some(vec![(index % 18) as i32]), None),
        2 => (
            Some(vec![rack, rack + 1]),
            Some(vec![(index % 18) as i32]),
            Some(vec![(index % 4) as i32]),
        ),
        _ => (None, Some(vec![(index % 18) as i32]), Some(vec![2])),
    };
    let runtime = if index.is_multiple_of(3) {
        RuntimeState {
            device_state: Some(DeviceState::Degraded),
            ..Default::default()
        }
    } else {
        RuntimeState {
            telemetry: Some(RuntimeTelemetry {
                temperature: Some(TemperatureTelemetry {
                    gpu_celsius: Some(60 + (index % 30) as i32),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    };
    let mut policy = SGPURuntimePolicy::new(
        &format!("policy-{index:04}"),
        SGPURuntimePolicySpec {
            target_ref: PolicyTargetRef {
                group: TargetGroup::Mokka,
                kind: TargetKind::SgpuInventory,
                name: "fleet".into(),
                rack_groups: None,
                rack_indexes,
                node_indexes,
                gpu_indexes,
            },
            runtime: Some(runtime),
        },
    );
    policy.metadata.uid = Some(format!("policy-uid-{index:04}"));
    policy.metadata.creation_timestamp = time(1_700_000_000 + index as i64);
    policy
}
