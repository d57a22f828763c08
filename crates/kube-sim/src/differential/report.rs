//! Judging scenarios and printing the agreement table (pure).

use std::fmt::Write as _;

use serde::Serialize;

use super::compare::{Difference, compare_step};
use super::corpus::{Corpus, Scenario};
use super::replay::Recorded;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Outcome {
    /// Every compared answer agrees.
    Identical,
    /// Every compared answer agrees, yet `known-differences.yaml` still
    /// keeps a reason for this scenario: the entry is out of date and must
    /// go, so the list only ever names real differences.
    StaleReason { reason: String },
    /// They differ, in a way `known-differences.yaml` keeps with a reason.
    Explained {
        reason: String,
        differences: Vec<String>,
    },
    /// They differ and nobody has said why: a defect to fix.
    Differing { differences: Vec<String> },
    /// The scenario needs something only kube-sim has.
    SimOnly,
    /// A server could not be driven through the scenario.
    Error { message: String },
}

#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    pub area: String,
    pub name: String,
    #[serde(flatten)]
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub results: Vec<ScenarioResult>,
}

/// The two servers' answers to one scenario, each a list per step or the
/// replay's error.
pub type Answers = Result<Vec<Option<Recorded>>, String>;

/// What one scenario's answers amount to.
pub fn judge(corpus: &Corpus, scenario: &Scenario, sim: Answers, real: Option<Answers>) -> Outcome {
    let sim = match sim {
        Ok(sim) => sim,
        Err(message) => {
            return Outcome::Error {
                message: format!("kube-sim: {message}"),
            };
        }
    };
    let Some(real) = real else {
        return Outcome::SimOnly;
    };
    let real = match real {
        Ok(real) => real,
        Err(message) => {
            return Outcome::Error {
                message: format!("kube-apiserver: {message}"),
            };
        }
    };
    let mut differences: Vec<Difference> = Vec::new();
    for (index, (step, (a, b))) in scenario.steps.iter().zip(sim.iter().zip(&real)).enumerate() {
        if let (Some(a), Some(b)) = (a, b) {
            differences.extend(compare_step(index, step, a, b));
        }
    }
    if differences.is_empty() {
        return match corpus.known_reason(&scenario.name) {
            Some(reason) => Outcome::StaleReason {
                reason: reason.to_owned(),
            },
            None => Outcome::Identical,
        };
    }
    let differences = differences.iter().map(ToString::to_string).collect();
    match corpus.known_reason(&scenario.name) {
        Some(reason) => Outcome::Explained {
            reason: reason.to_owned(),
            differences,
        },
        None => Outcome::Differing { differences },
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub identical: usize,
    pub explained: usize,
    pub differing: usize,
    pub sim_only: usize,
    pub errors: usize,
    /// Identical scenarios that still have a reason in the list.
    pub stale_reasons: usize,
}

impl Report {
    pub fn totals(&self) -> Totals {
        let mut totals = Totals::default();
        for result in &self.results {
            match result.outcome {
                Outcome::Identical => totals.identical += 1,
                Outcome::StaleReason { .. } => {
                    totals.identical += 1;
                    totals.stale_reasons += 1;
                }
                Outcome::Explained { .. } => totals.explained += 1,
                Outcome::Differing { .. } => totals.differing += 1,
                Outcome::SimOnly => totals.sim_only += 1,
                Outcome::Error { .. } => totals.errors += 1,
            }
        }
        totals
    }

    /// Nothing differs without a written reason, every scenario ran, and
    /// no reason is kept for a difference that is gone.
    pub fn agrees(&self) -> bool {
        let totals = self.totals();
        totals.differing == 0 && totals.errors == 0 && totals.stale_reasons == 0
    }

    /// The agreement table: a row a scenario (with its first differences
    /// unless `brief`), then the figure.
    pub fn table(&self, brief: bool) -> String {
        let mut out = String::new();
        let width = self
            .results
            .iter()
            .map(|r| r.area.len() + r.name.len() + 3)
            .max()
            .unwrap_or(20);
        for result in &self.results {
            let label = format!("{} / {}", result.area, result.name);
            let (word, details): (&str, Vec<String>) = match &result.outcome {
                Outcome::Identical => ("identical", vec![]),
                Outcome::StaleReason { reason } => (
                    "STALE-REASON",
                    vec![format!(
                        "identical now; remove from known-differences.yaml: {reason}"
                    )],
                ),
                Outcome::Explained {
                    reason,
                    differences,
                } => {
                    let mut details = vec![format!("kept: {reason}")];
                    details.extend(differences.iter().take(3).cloned());
                    ("explained", details)
                }
                Outcome::Differing { differences } => {
                    ("DIFFERING", differences.iter().take(5).cloned().collect())
                }
                Outcome::SimOnly => ("kube-sim-only", vec![]),
                Outcome::Error { message } => ("ERROR", vec![message.clone()]),
            };
            let _ = writeln!(out, "{label:<width$}  {word}");
            if !brief {
                for detail in details {
                    let _ = writeln!(out, "{:width$}    {detail}", "");
                }
            }
        }
        let totals = self.totals();
        let compared = totals.identical + totals.explained + totals.differing;
        let _ = writeln!(
            out,
            "\n{} scenarios: {} identical, {} differing with a written reason, {} differing without one, {} kube-sim-only, {} errors, {} stale reasons ({} of {} compared agree)",
            self.results.len(),
            totals.identical,
            totals.explained,
            totals.differing,
            totals.sim_only,
            totals.errors,
            totals.stale_reasons,
            totals.identical,
            compared,
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn answer(status: u16, body: serde_json::Value) -> Option<Recorded> {
        Some(Recorded {
            status,
            body,
            headers: BTreeMap::new(),
            events: None,
        })
    }

    fn corpus_with(known: Option<&str>) -> (Corpus, Scenario) {
        let mut corpus = Corpus::default();
        let scenario: Scenario = serde_saphyr::from_str(
            "name: s\nsteps:\n  - {method: GET, path: /api}\n  - {method: GET, path: /api, setup: true}\n",
        )
        .unwrap();
        corpus.scenarios.push(scenario.clone());
        if let Some(reason) = known {
            corpus.known.push(super::super::corpus::KnownDifference {
                scenario: "s".into(),
                reason: reason.into(),
            });
        }
        (corpus, scenario)
    }

    #[test]
    fn a_difference_without_a_reason_fails_agreement_and_one_with_a_reason_does_not() {
        let (corpus, scenario) = corpus_with(None);
        let sim = Ok(vec![answer(200, json!({"a": 1})), None]);
        let real = Ok(vec![answer(200, json!({"a": 2})), None]);
        let outcome = judge(&corpus, &scenario, sim.clone(), Some(real.clone()));
        assert!(matches!(outcome, Outcome::Differing { .. }), "{outcome:?}");
        let report = Report {
            results: vec![ScenarioResult {
                area: "t".into(),
                name: "s".into(),
                outcome,
            }],
        };
        assert!(!report.agrees());
        assert!(report.table(false).contains("DIFFERING"));

        let (corpus, scenario) = corpus_with(Some("kube-sim keeps less history"));
        let outcome = judge(&corpus, &scenario, sim, Some(real));
        assert!(matches!(outcome, Outcome::Explained { .. }), "{outcome:?}");
    }

    #[test]
    fn setup_steps_are_not_compared_and_a_missing_real_server_means_sim_only() {
        let (corpus, scenario) = corpus_with(None);
        let sim = Ok(vec![answer(200, json!({})), None]);
        let real = Ok(vec![answer(200, json!({})), None]);
        assert_eq!(
            judge(&corpus, &scenario, sim.clone(), Some(real)),
            Outcome::Identical
        );
        assert_eq!(judge(&corpus, &scenario, sim, None), Outcome::SimOnly);
    }

    #[test]
    fn a_reason_kept_for_a_difference_that_is_gone_fails_agreement() {
        let (corpus, scenario) = corpus_with(Some("kube-sim used to differ"));
        let same = Ok(vec![answer(200, json!({"a": 1})), None]);
        let outcome = judge(&corpus, &scenario, same.clone(), Some(same));
        assert!(
            matches!(outcome, Outcome::StaleReason { .. }),
            "{outcome:?}"
        );
        let report = Report {
            results: vec![ScenarioResult {
                area: "t".into(),
                name: "s".into(),
                outcome,
            }],
        };
        assert!(!report.agrees());
        assert_eq!(report.totals().stale_reasons, 1);
        assert!(report.table(false).contains("STALE-REASON"));
    }
}
