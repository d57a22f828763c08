//! The differential corpus (crates/kube-sim/differential). On the default
//! lane every scenario must run on kube-sim; on the real lane
//! (GPUFLEET_TEST_CLUSTER=real) kube-sim's answers are compared with
//! kube-apiserver's and nothing may differ without a written reason.

use kube_sim::KubeSim;
use kube_sim::differential::{Corpus, Outcome, compare_servers};
use kube_sim::lane::{Lane, client_from_kubeconfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_corpus_runs_on_kube_sim_and_agrees_with_kube_apiserver_on_the_real_lane() {
    let lane = Lane::from_env().unwrap();
    let corpus = Corpus::embedded().unwrap();
    let sim = KubeSim::builder().start().await.unwrap();
    let real = match &lane {
        Lane::Sim => None,
        Lane::Real(cluster) => Some(
            client_from_kubeconfig(&cluster.admin_kubeconfig)
                .await
                .unwrap(),
        ),
    };
    let report = compare_servers(&corpus, &sim.client(), real.as_ref(), None).await;
    sim.shutdown().await;
    let table = report.table(false);
    println!("{table}");
    assert_eq!(report.results.len(), corpus.scenarios.len());
    let errors: Vec<_> = report
        .results
        .iter()
        .filter(|result| matches!(result.outcome, Outcome::Error { .. }))
        .collect();
    assert!(errors.is_empty(), "scenarios that did not run:\n{table}");
    if lane.is_real() {
        assert!(report.agrees(), "unexplained differences:\n{table}");
    }
}
