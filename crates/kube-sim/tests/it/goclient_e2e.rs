//! The Go client program (`tools/goclient`: client-go and
//! controller-runtime at the versions of Kubernetes v1.37.2, unmodified)
//! against the lane's API server: typed CRUD over protobuf, informers with
//! resync, a watch-list's end bookmark, a leaderelection Lease handover,
//! DeleteOptions preconditions, an Eviction and a controller-runtime
//! manager. It must print exactly `tools/goclient/expected.txt` on kube-sim
//! and on kube-apiserver (`scripts/test.sh --real`).

use std::time::Duration;

use kube_sim::lane::Lane;

const EXPECTED: &str = include_str!("../../../../tools/goclient/expected.txt");

fn binary() -> std::path::PathBuf {
    let path = std::env::var_os("GPUFLEET_GOCLIENT").unwrap_or_else(|| {
        panic!("GPUFLEET_GOCLIENT is not set: scripts/test.sh builds tools/goclient into ~/.cache/gpufleet/goclient and sets it (or run `go build -o goclient ./tools/goclient` and point the variable at it)")
    });
    let path = std::path::PathBuf::from(path);
    assert!(
        path.exists(),
        "GPUFLEET_GOCLIENT={} does not exist",
        path.display()
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_and_controller_runtime_run_unmodified_with_the_transcript_kube_apiserver_gives()
{
    let binary = binary();
    let dir = tempfile::tempdir().unwrap();
    // kube-sim as `gpufleet sim serve` runs it: TLS and the admin token.
    let (_sim, kubeconfig) = match Lane::from_env().expect("the lane switch") {
        Lane::Sim => {
            let sim = kube_sim::KubeSim::builder()
                .tls()
                .require_token()
                .start()
                .await
                .expect("kube-sim starts");
            let path = dir.path().join("kubeconfig");
            std::fs::write(&path, sim.kubeconfig()).unwrap();
            (Some(sim), path)
        }
        Lane::Real(real) => (None, real.admin_kubeconfig),
    };
    let run = tokio::process::Command::new(&binary)
        .arg(&kubeconfig)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("goclient finishes within 180 s")
        .expect("goclient starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "goclient failed ({}):\nstdout:\n{stdout}\nstderr (last 4000 bytes):\n{}",
        output.status,
        &stderr[stderr.len().saturating_sub(4000)..]
    );
    assert_eq!(
        stdout, EXPECTED,
        "the transcript differs from kube-apiserver's"
    );
}
