//! `gpufleet sim serve`: kube-sim as a standalone server for kubectl and
//! other outside clients.

use anyhow::Context;

use crate::cli::{DiffArgs, DiffOutput, ServeArgs};

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let sim = kube_sim::KubeSim::builder()
        .port(args.port)
        .watch_history(args.watch_history)
        .start()
        .await
        .context("starting kube-sim")?;
    write_kubeconfig(&args.kubeconfig, &sim.kubeconfig())?;
    tracing::info!(
        url = %sim.url(),
        kubeconfig = %args.kubeconfig.display(),
        "kube-sim is serving; use it with KUBECONFIG={}",
        args.kubeconfig.display()
    );
    wait_for_signal().await?;
    tracing::info!("shutting down kube-sim");
    sim.shutdown().await;
    Ok(())
}

/// Written to a temporary file first so a reader never sees half a file.
fn write_kubeconfig(path: &std::path::Path, yaml: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, yaml)
        .with_context(|| format!("writing kubeconfig to {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("moving kubeconfig to {}", path.display()))
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT"),
        _ = term.recv() => Ok(()),
    }
}

/// `gpufleet sim diff`: the corpus against an in-process kube-sim and, with
/// a kubeconfig, a real server. Ok(false) when they do not agree.
pub async fn diff(args: DiffArgs) -> anyhow::Result<bool> {
    use kube_sim::differential::{Corpus, compare_servers};
    let corpus = match &args.corpus {
        Some(dir) => Corpus::load(dir),
        None => Corpus::embedded(),
    }
    .context("loading the differential corpus")?;
    let real = match &args.kubeconfig {
        Some(path) => Some(kube_sim::lane::client_from_kubeconfig(path).await?),
        None => None,
    };
    let sim = kube_sim::KubeSim::builder()
        .start()
        .await
        .context("starting kube-sim")?;
    let report = compare_servers(
        &corpus,
        &sim.client(),
        real.as_ref(),
        args.filter.as_deref(),
    )
    .await;
    sim.shutdown().await;
    match args.output {
        DiffOutput::Table => print!("{}", report.table(args.brief)),
        DiffOutput::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report).context("encoding the report")?
        ),
    }
    Ok(report.agrees())
}
