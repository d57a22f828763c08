//! `gpufleet sim serve`: kube-sim as a standalone server for kubectl and
//! other outside clients.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use kube_sim::exec::ExecMatcher;
use kube_sim::{ExecOutput, ExecRequest};
use parking_lot::RwLock;

use crate::cli::{AuthorizationMode, DiffArgs, DiffOutput, ServeArgs};
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
    // Secure by default (docs/kube-sim.md, "Security defaults"): a random
    // admin token in the kubeconfig and HTTPS with a generated CA, since
    // kubectl sends a kubeconfig's token only over HTTPS.
    if !args.insecure_no_auth {
        builder = builder.require_token();
        if !args.no_tls {
            builder = builder.tls();
        }
    }
    if args.authorization == AuthorizationMode::Rbac {
        builder = builder.authorization(kube_sim::Authorization::Rbac);
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
        token = if sim.token().is_some() { "required (in the kubeconfig)" } else { "none: every request is allowed" },
        tls = sim.ca_pem().is_some(),
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
/// The kubeconfig holds the admin token, so the file is created readable by
/// its owner only (0600) before a byte is written: a file created with the
/// umask's mode and narrowed afterwards would be readable in between.
pub(crate) fn write_kubeconfig(path: &std::path::Path, yaml: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    // A leftover from a crash may have another mode; `create_new` below
    // only ever creates, so the mode given is the mode the file gets.
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(e).with_context(|| format!("removing the stale {}", tmp.display()));
        }
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {} (mode 0600)", tmp.display()))?;
    file.write_all(yaml.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing kubeconfig to {}", tmp.display()))?;
    drop(file);
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
