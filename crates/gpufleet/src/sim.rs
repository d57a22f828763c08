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
///
/// The temporary file gets a fresh random name (`.NAME.XXXXXX.tmp`) next to
/// `path`, created only if no file has that name: a fixed name such as
/// `work.tmp` for `work.yaml` would delete, then replace, a file of the
/// user's that happens to be called so. If anything fails, the temporary
/// file is removed and `path` is left as it was.
pub(crate) fn write_kubeconfig(path: &std::path::Path, yaml: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    // The rename must stay within one file system, so the temporary file
    // lives in the kubeconfig's own directory.
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => std::path::Path::new("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?
        .to_string_lossy();
    let mut file = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)
        .with_context(|| {
            format!(
                "creating a temporary file (mode 0600) for the kubeconfig in {}",
                dir.display()
            )
        })?;
    file.write_all(yaml.as_bytes())
        .and_then(|()| file.as_file().sync_all())
        .with_context(|| format!("writing kubeconfig to {}", file.path().display()))?;
    file.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("moving kubeconfig to {}", path.display()))?;
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn writing_the_kubeconfig_leaves_a_file_of_the_same_stem_ending_in_tmp_alone() {
        let dir = tempfile::tempdir().unwrap();
        let unrelated = dir.path().join("work.tmp");
        std::fs::write(&unrelated, "the user's own notes").unwrap();
        let kubeconfig = dir.path().join("work.yaml");

        write_kubeconfig(&kubeconfig, "apiVersion: v1\n").unwrap();
        // Twice: the second write replaces the first in place.
        write_kubeconfig(&kubeconfig, "apiVersion: v1\nkind: Config\n").unwrap();

        assert_eq!(
            std::fs::read_to_string(&unrelated).unwrap(),
            "the user's own notes"
        );
        assert_eq!(
            std::fs::read_to_string(&kubeconfig).unwrap(),
            "apiVersion: v1\nkind: Config\n"
        );
        let mode = std::fs::metadata(&kubeconfig).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["work.tmp", "work.yaml"], "no temporary file left");
    }
}
