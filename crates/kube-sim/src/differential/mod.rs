//! The differential corpus: request scenarios replayed against kube-sim and
//! a real kube-apiserver, with the answers compared after the parts that
//! differ by nature (uids, timestamps, resourceVersion values, generated
//! names, allocated IPs) are normalised away.
//!
//! The corpus is data (`crates/kube-sim/differential/*.yaml`), the comparison
//! is pure ([`compare`]), and only [`replay`] does I/O, through a
//! `kube::Client`, so the same code drives kube-sim in process and a real
//! server from a kubeconfig. `gpufleet sim diff` prints the agreement table.

pub mod compare;
pub mod corpus;
pub mod replay;
pub mod report;

pub use compare::{Difference, compare_step, normalize};
pub use corpus::{Corpus, CorpusError, KnownDifference, Scenario, Step};
pub use replay::{Recorded, ReplayError, compare_servers, replay};
pub use report::{Outcome, Report, ScenarioResult};
