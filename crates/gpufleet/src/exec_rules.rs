//! `gpufleet sim serve --exec-rules FILE`: exec answers from a YAML file,
//! so kube-sim can answer `nvidia-smi` (or any command) without Rust.
//!
//! ```yaml
//! - podSelector: app=nvidia-device-plugin-daemonset   # label selector, "" for every pod
//!   container: nvidia-device-plugin                    # optional: any container
//!   command: [nvidia-smi, -q, -x]                      # the exact argv
//!   stdoutFile: captures/h100.xml                      # optional, relative to this file
//!   stderr: "some text"                                # optional
//!   exitCode: 0                                        # optional, default 0
//! ```
//!
//! Rules are tried in file order and the first match answers; an exec no
//! rule matches gets what a shell prints for an unknown program (exit 127).
//! Stdout files are read when the rules are loaded, so a missing file fails
//! at start (or at reload, which then keeps the previous rules), naming the
//! rule; edit the files and send SIGHUP to re-read everything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kube_sim::ExecOutput;
use kube_sim::exec::{ExecMatcher, ExecTarget};
use serde::Deserialize;

/// One rule as written in the file.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RuleSpec {
    pod_selector: String,
    #[serde(default)]
    container: Option<String>,
    command: Vec<String>,
    #[serde(default)]
    stdout_file: Option<PathBuf>,
    #[serde(default)]
    stderr: Option<String>,
    #[serde(default)]
    exit_code: i32,
}

/// A loaded rule: its matcher, argv and the answer.
#[derive(Debug, Clone)]
pub struct ExecRule {
    matcher: ExecMatcher,
    command: Vec<String>,
    output: ExecOutput,
}

/// The rules of one file, in order.
#[derive(Debug, Clone, Default)]
pub struct ExecRules {
    rules: Vec<ExecRule>,
}

/// Why a rules file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ExecRulesError {
    #[error("cannot read exec rules file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("exec rules file {path} is not a YAML list of rules: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("exec rules file {path}, rule {number}: {problem}")]
    Rule {
        path: PathBuf,
        /// 1-based position in the file.
        number: usize,
        problem: String,
    },
}

impl ExecRules {
    /// Reads and checks `path`; stdout files are resolved against its
    /// directory and read now.
    pub fn load(path: &Path) -> Result<ExecRules, ExecRulesError> {
        let text = std::fs::read_to_string(path).map_err(|source| ExecRulesError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        ExecRules::parse(path, &text, |file| std::fs::read(base.join(file)))
    }

    /// The rules in `text` (`path` only names the file in errors);
    /// `read_stdout` reads a `stdoutFile` as written in the rule.
    pub fn parse(
        path: &Path,
        text: &str,
        read_stdout: impl Fn(&Path) -> std::io::Result<Vec<u8>>,
    ) -> Result<ExecRules, ExecRulesError> {
        let specs: Vec<RuleSpec> = if text.trim().is_empty() {
            Vec::new()
        } else {
            serde_saphyr::from_str(text).map_err(|error| ExecRulesError::Syntax {
                path: path.to_owned(),
                message: error.to_string(),
            })?
        };
        let rule_error = |number: usize, problem: String| ExecRulesError::Rule {
            path: path.to_owned(),
            number,
            problem,
        };
        let mut rules = Vec::with_capacity(specs.len());
        for (position, spec) in specs.into_iter().enumerate() {
            let number = position + 1;
            if spec.command.is_empty() {
                return Err(rule_error(number, "command is empty".to_owned()));
            }
            let mut matcher = ExecMatcher::any()
                .selector(&spec.pod_selector)
                .map_err(|error| rule_error(number, format!("podSelector: {error}")))?;
            if let Some(container) = spec.container.filter(|c| !c.trim().is_empty()) {
                matcher = matcher.container(container.trim());
            }
            let stdout = match &spec.stdout_file {
                Some(file) => read_stdout(file).map_err(|error| {
                    rule_error(number, format!("stdoutFile {}: {error}", file.display()))
                })?,
                None => Vec::new(),
            };
            let output = ExecOutput {
                stdout,
                stderr: spec.stderr.unwrap_or_default().into_bytes(),
                exit_code: spec.exit_code,
            };
            rules.push(ExecRule {
                matcher,
                command: spec.command,
                output,
            });
        }
        Ok(ExecRules { rules })
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// The answer of the first rule matching the exec, else exit 127.
    pub fn answer(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        container: &str,
        command: &[String],
    ) -> ExecOutput {
        let target = ExecTarget {
            namespace,
            labels,
            container,
            command,
        };
        self.rules
            .iter()
            .find(|rule| rule.command == command && rule.matcher.matches(&target))
            .map(|rule| rule.output.clone())
            .unwrap_or_else(|| ExecOutput::command_not_found(command))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(path: &Path) -> std::io::Result<Vec<u8>> {
        match path.to_str() {
            Some("h100.xml") => Ok(b"<nvidia_smi_log/>".to_vec()),
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "No such file or directory",
            )),
        }
    }

    fn rules(text: &str) -> Result<ExecRules, ExecRulesError> {
        ExecRules::parse(Path::new("rules.yaml"), text, files)
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    const RULES: &str = r#"
- podSelector: app=nvidia-device-plugin-daemonset,node=broken
  command: [nvidia-smi, -q, -x]
  stderr: "NVIDIA-SMI has failed"
  exitCode: 9
- podSelector: app=nvidia-device-plugin-daemonset
  container: nvidia-device-plugin
  command: [nvidia-smi, -q, -x]
  stdoutFile: h100.xml
- podSelector: ""
  command: [hostname]
  stderr: ""
"#;

    #[test]
    fn the_first_matching_rule_answers_in_file_order() {
        let rules = rules(RULES).unwrap();
        assert_eq!(rules.len(), 3);
        let smi = strings(&["nvidia-smi", "-q", "-x"]);
        let plugin = labels(&[("app", "nvidia-device-plugin-daemonset")]);
        let ok = rules.answer("gpu-operator", &plugin, "nvidia-device-plugin", &smi);
        assert_eq!(
            (ok.stdout.as_slice(), ok.exit_code),
            (&b"<nvidia_smi_log/>"[..], 0)
        );
        let broken = labels(&[
            ("app", "nvidia-device-plugin-daemonset"),
            ("node", "broken"),
        ]);
        let failed = rules.answer("gpu-operator", &broken, "nvidia-device-plugin", &smi);
        assert_eq!(failed.exit_code, 9);
        assert_eq!(failed.stderr, b"NVIDIA-SMI has failed");
        assert!(failed.stdout.is_empty());
    }

    #[test]
    fn container_selector_and_the_exact_argv_must_all_match_else_exit_127() {
        let rules = rules(RULES).unwrap();
        let plugin = labels(&[("app", "nvidia-device-plugin-daemonset")]);
        let smi = strings(&["nvidia-smi", "-q", "-x"]);
        for (labels, container, command) in [
            (plugin.clone(), "toolkit", smi.clone()),
            (
                labels(&[("app", "other")]),
                "nvidia-device-plugin",
                smi.clone(),
            ),
            (
                plugin.clone(),
                "nvidia-device-plugin",
                strings(&["nvidia-smi", "-q"]),
            ),
            (
                plugin.clone(),
                "nvidia-device-plugin",
                strings(&["nvidia-smi", "-q", "-x", "-i", "0"]),
            ),
        ] {
            let answer = rules.answer("gpu-operator", &labels, container, &command);
            assert_eq!(answer.exit_code, 127, "{labels:?} {container} {command:?}");
            assert_eq!(answer.stderr, b"nvidia-smi: command not found\n");
        }
        let anywhere = rules.answer("x", &BTreeMap::new(), "c", &strings(&["hostname"]));
        assert_eq!(
            anywhere.exit_code, 0,
            "an empty podSelector matches every pod"
        );
    }

    #[test]
    fn mistakes_name_the_file_the_rule_and_the_field() {
        let missing = rules("- podSelector: a=b\n  command: [x]\n  stdoutFile: nope.xml\n")
            .unwrap_err()
            .to_string();
        assert!(
            missing.starts_with("exec rules file rules.yaml, rule 1: stdoutFile nope.xml: "),
            "{missing}"
        );
        let selector =
            rules("- podSelector: a=b\n  command: [x]\n- podSelector: 'a in ('\n  command: [x]\n")
                .unwrap_err()
                .to_string();
        assert!(
            selector.contains("rule 2: podSelector: invalid label selector"),
            "{selector}"
        );
        let unknown = rules("- podSelector: a=b\n  command: [x]\n  stdout: text\n")
            .unwrap_err()
            .to_string();
        assert!(unknown.contains("stdout"), "{unknown}");
        let empty = rules("- podSelector: a=b\n  command: []\n")
            .unwrap_err()
            .to_string();
        assert!(empty.contains("rule 1: command is empty"), "{empty}");
        assert!(rules("podSelector: a").is_err(), "a mapping is not a list");
        assert_eq!(rules("").unwrap().len(), 0);
    }
}
