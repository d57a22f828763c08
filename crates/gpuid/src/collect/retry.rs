//! How the worker loop counts and retries a failed collection.
//!
//! A failed collection is retried through the queue's rate limiter (5 ms
//! doubling up to 1000 s), as a client-go controller retries a key that
//! failed: nvidia-smi timing out, exiting non-zero or printing output the
//! parser cannot use, a Node read and an export pipeline that refused the
//! records are all states of the node or of the exporter that heal without
//! any change to the pod, so waiting for a pod event would wait forever.
//! The one exception is an optimistic-concurrency conflict on the Node
//! patch: the Node's watch brings the new version, and the pod is tried
//! again after [`CONFLICT_RETRY`] without growing its backoff.
//!
//! The label is the same reason `gpuid_exec_errors` counts, so the two
//! series can be read side by side; a conflict is labelled `conflict`.

use std::time::Duration;

use controller_kit::error::is_status;
use controller_kit::{ReconcileFailure, Retry};

use super::CollectError;

/// How long a pod whose Node patch met a conflict waits before it is
/// collected again.
pub const CONFLICT_RETRY: Duration = Duration::from_secs(1);

fn conflict(error: &CollectError) -> bool {
    matches!(error, CollectError::NodePatch { source, .. } if is_status(source, 409))
}

impl ReconcileFailure for CollectError {
    fn metric_label(&self) -> &'static str {
        if conflict(self) {
            "conflict"
        } else {
            self.reason()
        }
    }

    fn retry(&self) -> Retry {
        if conflict(self) {
            Retry::After(CONFLICT_RETRY)
        } else {
            Retry::Backoff
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::ExecError;

    fn answer(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("refused", "Refused")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn a_failed_collection_backs_off_and_only_a_node_conflict_retries_at_a_fixed_delay() {
        let cases = [
            (
                CollectError::Exec(ExecError::Timeout {
                    pod: "ns/plugin".to_string(),
                    timeout: Duration::from_secs(30),
                }),
                "timeout",
                Retry::Backoff,
            ),
            (
                CollectError::Exec(ExecError::Failed {
                    pod: "ns/plugin".to_string(),
                    message: "exit code 9".to_string(),
                    stderr: String::new(),
                }),
                "exit_code",
                Retry::Backoff,
            ),
            (
                CollectError::NodeRead {
                    node: "gpu-1".to_string(),
                    source: answer(503),
                },
                "node_read",
                Retry::Backoff,
            ),
            (
                CollectError::NodePatch {
                    node: "gpu-1".to_string(),
                    source: answer(500),
                },
                "node_patch",
                Retry::Backoff,
            ),
            (
                CollectError::NodePatch {
                    node: "gpu-1".to_string(),
                    source: answer(409),
                },
                "conflict",
                Retry::After(CONFLICT_RETRY),
            ),
            (
                CollectError::Submit {
                    node: "gpu-1".to_string(),
                    message: "pipeline is shut down".to_string(),
                },
                "submit",
                Retry::Backoff,
            ),
        ];
        for (error, label, retry) in cases {
            assert_eq!(
                (error.metric_label(), error.retry()),
                (label, retry),
                "{error}"
            );
        }
    }
}
