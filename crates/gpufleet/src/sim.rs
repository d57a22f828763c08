//! `gpufleet sim serve`: kube-sim as a standalone server for kubectl and
//! other outside clients.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use kube_sim::exec::ExecMatcher;
use kube_sim::{ExecOutput, ExecRequest};
use parking_lot::RwLock;

use crate::cli::{DiffArgs, DiffOutput, ServeArgs};
use crate::exec_rules::ExecRules;

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    // Loaded before the server starts: a bad file fails at once.
    let rules = match &args.exec_rules {
        Some(path) => Some((path.clone(), Arc::new(RwLock::new(ExecRules::load(path)?)))),
        None => None,
    };
    let mut builder = kube_sim::KubeSim::builder()
        .port(args.port)
        .watch_history(args.watch_history);
    if let Some(dir) = &args.data_dir {
        builder = builder.data_dir(dir);
    }
    if let Some((path, rules)) = &rules {
        tracing::info!(file = %path.display(), rules = rules.read().len(), "exec rules loaded");
        let rules = Arc::clone(rules);
        builder = builder.exec_handler(ExecMatcher::any(), move |request: ExecRequest| {
            let answer = answer(&rules, &request);
            async move { answer }
        });
    }
    let sim = builder.start().await.context("starting kube-sim")?;
    write_kubeconfig(&args.kubeconfig, &sim.kubeconfig())?;
    tracing::info!(
        url = %sim.url(),
        kubeconfig = %args.kubeconfig.display(),
        "kube-sim is serving; use it with KUBECONFIG={}",
        args.kubeconfig.display()
    );
    wait_for_signal(rules).await?;
    tracing::info!("shutting down kube-sim");
    sim.shutdown().await;
    Ok(())
}

fn answer(rules: &RwLock<ExecRules>, request: &ExecRequest) -> ExecOutput {
    let labels = request.pod.metadata.labels.clone().unwrap_or_default();
    rules.read().answer(
        &request.namespace,
        &labels,
        &request.container,
        &request.command,
    )
}

/// Re-reads the rules file; a file that no longer loads keeps the rules
/// in force, so a typo never leaves the server answering nothing.
fn reload(path: &std::path::Path, rules: &RwLock<ExecRules>) {
    match ExecRules::load(path) {
        Ok(fresh) => {
            tracing::info!(file = %path.display(), rules = fresh.len(), "exec rules reloaded");
            *rules.write() = fresh;
        }
        Err(error) => {
            tracing::error!(%error, "exec rules not reloaded; the previous rules stay in force");
        }
    }
}

/// Written to a temporary file first so a reader never sees half a file.
pub(crate) fn write_kubeconfig(path: &std::path::Path, yaml: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, yaml)
        .with_context(|| format!("writing kubeconfig to {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("moving kubeconfig to {}", path.display()))
}

/// Until SIGINT or SIGTERM; SIGHUP re-reads the exec rules.
async fn wait_for_signal(rules: Option<(PathBuf, Arc<RwLock<ExecRules>>)>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut hangup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    loop {
        tokio::select! {
            r = tokio::signal::ctrl_c() => return r.context("waiting for SIGINT"),
            _ = term.recv() => return Ok(()),
            _ = hangup.recv() => match &rules {
                Some((path, rules)) => reload(path, rules),
                None => tracing::info!("SIGHUP ignored: no --exec-rules file"),
            },
        }
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
