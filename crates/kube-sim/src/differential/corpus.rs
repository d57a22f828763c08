//! The corpus format: YAML files of scenarios, each a list of HTTP steps.
//!
//! ```yaml
//! scenarios:
//!   - name: configmap create and get
//!     steps:
//!       - method: POST
//!         path: /api/v1/namespaces/$NS/configmaps
//!         body: {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}
//!       - {method: GET, path: /api/v1/namespaces/$NS/configmaps/a}
//! ```
//!
//! Every scenario runs in a namespace of its own (`$NS`); `$U` is a suffix
//! unique to the run for cluster-scoped names, and `$name` is a value an
//! earlier step saved (`save: {name: /json/pointer}`); `$MIBPLUS` is a
//! string one byte over the 1 MiB ConfigMap and Secret limit, `$BODYPLUS`
//! one that makes a body longer than the 3 MiB request limit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// The corpus shipped with kube-sim, embedded so the binary needs no files.
const EMBEDDED: &[(&str, &str)] = &[
    ("crud", include_str!("../../differential/crud.yaml")),
    ("streams", include_str!("../../differential/streams.yaml")),
    ("patch", include_str!("../../differential/patch.yaml")),
    ("apply", include_str!("../../differential/apply.yaml")),
    ("crd", include_str!("../../differential/crd.yaml")),
    ("status", include_str!("../../differential/status.yaml")),
    (
        "lifecycle",
        include_str!("../../differential/lifecycle.yaml"),
    ),
    (
        "selectors",
        include_str!("../../differential/selectors.yaml"),
    ),
    ("paging", include_str!("../../differential/paging.yaml")),
    ("watch", include_str!("../../differential/watch.yaml")),
    ("events", include_str!("../../differential/events.yaml")),
    (
        "discovery",
        include_str!("../../differential/discovery.yaml"),
    ),
    ("errors", include_str!("../../differential/errors.yaml")),
    ("protobuf", include_str!("../../differential/protobuf.yaml")),
    ("defaults", include_str!("../../differential/defaults.yaml")),
    (
        "admission",
        include_str!("../../differential/admission.yaml"),
    ),
];

/// The differences we know of and keep, each with its reason.
const EMBEDDED_KNOWN: &str = include_str!("../../differential/known-differences.yaml");

#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("corpus file {file}: {message}")]
    Parse { file: String, message: String },
    #[error("corpus file {file}: scenario {name:?}: {message}")]
    Invalid {
        file: String,
        name: String,
        message: String,
    },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CorpusFile {
    /// Anchors that scenarios refer to (`&name` … `*name`); not read otherwise.
    #[serde(default)]
    #[allow(dead_code)]
    definitions: Option<Value>,
    scenarios: Vec<Scenario>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Scenario {
    pub name: String,
    /// The file the scenario came from (its stem), set when loading.
    #[serde(skip)]
    pub area: String,
    /// `sim`: the scenario exercises something only kube-sim has; it is
    /// replayed against kube-sim alone and counted as kube-sim-only.
    #[serde(default)]
    pub only: Option<String>,
    /// Cluster-scoped objects the scenario creates, deleted afterwards
    /// (paths, with the same substitutions as steps).
    #[serde(default)]
    pub cleanup: Vec<String>,
    pub steps: Vec<Step>,
}

impl Scenario {
    pub fn sim_only(&self) -> bool {
        self.only.as_deref() == Some("sim")
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Step {
    /// GET, POST, PUT, PATCH, DELETE; WATCH (a GET read as an event
    /// stream); WAIT (GET polled until `status` answers, never compared).
    pub method: String,
    pub path: String,
    #[serde(default)]
    pub content_type: Option<String>,
    #[serde(default)]
    pub accept: Option<String>,
    /// A JSON body (YAML in the corpus).
    #[serde(default)]
    pub body: Option<Value>,
    /// A body sent as written (malformed JSON, YAML, …).
    #[serde(default)]
    pub body_text: Option<String>,
    /// Prepares state; its answer is not compared.
    #[serde(default)]
    pub setup: bool,
    /// Compare only these JSON pointers of the answer (default: all of it).
    #[serde(default)]
    pub compare: Option<Vec<String>>,
    /// Leave these JSON pointers out of the comparison.
    #[serde(default)]
    pub ignore: Vec<String>,
    /// Arrays at these JSON pointers compared as sets: kube-apiserver's
    /// order there follows Go map iteration, which changes run to run.
    #[serde(default)]
    pub unordered: Vec<String>,
    /// Variables taken from this step's answer for later steps.
    #[serde(default)]
    pub save: BTreeMap<String, String>,
    /// WATCH: stop reading after this many events (default: the stream's end).
    #[serde(default)]
    pub events: Option<usize>,
    /// WAIT: the status code to wait for (default 200).
    #[serde(default)]
    pub status: Option<u16>,
    /// Response headers to compare (for example `warning`).
    #[serde(default)]
    pub headers: Vec<String>,
    /// Extra request headers (for example an `upgrade` offer).
    #[serde(default)]
    pub request_headers: BTreeMap<String, String>,
    /// Send a JSON-array `body` with its items repeated this many times in
    /// order: the large JSON patches of the patch-limit scenarios, which
    /// no one would write out.
    #[serde(default)]
    pub repeat: Option<usize>,
}

/// A difference kept on purpose, matched by scenario name.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnownDifference {
    pub scenario: String,
    pub reason: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct KnownFile {
    #[serde(default)]
    differences: Vec<KnownDifference>,
}

#[derive(Debug, Clone, Default)]
pub struct Corpus {
    pub scenarios: Vec<Scenario>,
    pub known: Vec<KnownDifference>,
}

impl Corpus {
    /// The corpus compiled into kube-sim.
    pub fn embedded() -> Result<Corpus, CorpusError> {
        let mut corpus = Corpus::default();
        for (area, text) in EMBEDDED {
            corpus.add_file(area, text)?;
        }
        corpus.known = parse_known("known-differences.yaml", EMBEDDED_KNOWN)?;
        corpus.check()?;
        Ok(corpus)
    }

    /// Every `*.yaml` in `dir` (`known-differences.yaml` is the list of kept
    /// differences), in name order.
    pub fn load(dir: &Path) -> Result<Corpus, CorpusError> {
        let read_error = |source| CorpusError::Read {
            path: dir.to_owned(),
            source,
        };
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(read_error)?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
            .collect();
        paths.sort();
        let mut corpus = Corpus::default();
        for path in paths {
            let text = std::fs::read_to_string(&path).map_err(|source| CorpusError::Read {
                path: path.clone(),
                source,
            })?;
            let stem = path
                .file_stem()
                .map(|stem| stem.to_string_lossy().into_owned())
                .unwrap_or_default();
            if stem == "known-differences" {
                corpus.known = parse_known(&stem, &text)?;
            } else {
                corpus.add_file(&stem, &text)?;
            }
        }
        corpus.check()?;
        Ok(corpus)
    }

    fn add_file(&mut self, area: &str, text: &str) -> Result<(), CorpusError> {
        let file: CorpusFile = serde_saphyr::from_str(text).map_err(|e| CorpusError::Parse {
            file: area.to_owned(),
            message: e.to_string(),
        })?;
        for mut scenario in file.scenarios {
            scenario.area = area.to_owned();
            self.scenarios.push(scenario);
        }
        Ok(())
    }

    /// Names are unique (known differences refer to them) and every step is
    /// one the replayer understands.
    fn check(&self) -> Result<(), CorpusError> {
        let mut seen = std::collections::BTreeSet::new();
        for scenario in &self.scenarios {
            let invalid = |message: String| CorpusError::Invalid {
                file: scenario.area.clone(),
                name: scenario.name.clone(),
                message,
            };
            if !seen.insert(scenario.name.as_str()) {
                return Err(invalid("the name is used twice".into()));
            }
            if let Some(only) = &scenario.only
                && only != "sim"
            {
                return Err(invalid(format!(
                    "only: {only:?} (the one value is \"sim\")"
                )));
            }
            if scenario.steps.is_empty() {
                return Err(invalid("no steps".into()));
            }
            for (index, step) in scenario.steps.iter().enumerate() {
                let known = ["GET", "POST", "PUT", "PATCH", "DELETE", "WATCH", "WAIT"];
                if !known.contains(&step.method.as_str()) {
                    return Err(invalid(format!(
                        "step {index}: method {:?} is none of {}",
                        step.method,
                        known.join(", ")
                    )));
                }
                if step.repeat.is_some() && !step.body.as_ref().is_some_and(Value::is_array) {
                    return Err(invalid(format!(
                        "step {index}: repeat needs a body that is a list"
                    )));
                }
                if step.body.is_some() && step.body_text.is_some() {
                    return Err(invalid(format!(
                        "step {index}: body and bodyText are exclusive"
                    )));
                }
                if !step.path.starts_with('/') {
                    return Err(invalid(format!("step {index}: path must start with /")));
                }
                for pointer in step.compare.iter().flatten().chain(&step.ignore) {
                    if !pointer.is_empty() && !pointer.starts_with('/') {
                        return Err(invalid(format!(
                            "step {index}: {pointer:?} is not a JSON pointer"
                        )));
                    }
                }
            }
        }
        for known in &self.known {
            if !seen.contains(known.scenario.as_str()) {
                return Err(CorpusError::Invalid {
                    file: "known-differences".into(),
                    name: known.scenario.clone(),
                    message: "names no scenario of the corpus".into(),
                });
            }
        }
        Ok(())
    }

    pub fn known_reason(&self, scenario: &str) -> Option<&str> {
        self.known
            .iter()
            .find(|known| known.scenario == scenario)
            .map(|known| known.reason.as_str())
    }
}

fn parse_known(file: &str, text: &str) -> Result<Vec<KnownDifference>, CorpusError> {
    let known: KnownFile = serde_saphyr::from_str(text).map_err(|e| CorpusError::Parse {
        file: file.to_owned(),
        message: e.to_string(),
    })?;
    Ok(known.differences)
}

/// Replaces `$NS`, `$U` and saved `$name`s in `text`. Longer names first, so
/// `$NSX` is never read as `$NS` followed by `X`.
pub fn substitute(text: &str, vars: &BTreeMap<String, String>) -> String {
    let mut names: Vec<&String> = vars.keys().collect();
    names.sort_by_key(|name| std::cmp::Reverse(name.len()));
    let mut out = text.to_owned();
    for name in names {
        out = out.replace(&format!("${name}"), &vars[name]);
    }
    out
}

/// [`substitute`] in every string of a JSON value (keys included).
pub fn substitute_json(value: &Value, vars: &BTreeMap<String, String>) -> Value {
    match value {
        Value::String(text) => Value::String(substitute(text, vars)),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| substitute_json(item, vars))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, item)| (substitute(key, vars), substitute_json(item, vars)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitution_prefers_the_longest_variable_name() {
        let vars = BTreeMap::from([
            ("NS".to_owned(), "ns1".to_owned()),
            ("NSX".to_owned(), "other".to_owned()),
        ]);
        assert_eq!(substitute("/a/$NS/b/$NSX", &vars), "/a/ns1/b/other");
    }

    #[test]
    fn the_embedded_corpus_parses_and_names_are_unique() {
        let corpus = Corpus::embedded().unwrap();
        assert!(corpus.scenarios.len() >= 150, "{}", corpus.scenarios.len());
    }

    #[test]
    fn an_unknown_method_is_refused_with_the_scenario_named() {
        let mut corpus = Corpus::default();
        corpus
            .add_file(
                "t",
                "scenarios:\n  - name: x\n    steps:\n      - {method: FETCH, path: /api}\n",
            )
            .unwrap();
        let error = corpus.check().unwrap_err().to_string();
        assert!(
            error.contains("\"x\"") && error.contains("FETCH"),
            "{error}"
        );
    }
}
