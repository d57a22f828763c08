//! Running `nvidia-smi -q -x` in a device-plugin container: argv without a
//! shell, a deadline and an output cap.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::AttachParams;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The command, as an argv: no shell is needed in the target image.
pub const NVIDIA_SMI_ARGV: [&str; 3] = ["nvidia-smi", "-q", "-x"];

/// The pipe between kube's WebSocket task and our reader: one exec frame.
/// kube's default is 1 KiB, so a 212 KB document crossed it in over 200
/// task hand-offs while the connection's 32 KiB frame waited to be drained;
/// each exec then ran longer and more of them (each with its buffers) were
/// in flight at once (docs/benchmarks.md, issue #29).
const STDOUT_PIPE_BYTES: usize = 32 * 1024;

/// stderr is only kept for error messages; nvidia-smi prints benign warnings there.
const STDERR_KEEP: usize = 4096;

/// Why an exec produced no usable output. `reason()` is the metric label.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("exec in {pod} did not finish within {timeout:?}")]
    Timeout { pod: String, timeout: Duration },
    #[error("exec in {pod} printed more than {limit} bytes; output rejected")]
    OutputTooLarge { pod: String, limit: usize },
    #[error("exec in {pod} failed ({message}); stderr: {stderr:?}")]
    Failed {
        pod: String,
        message: String,
        stderr: String,
    },
    #[error("cannot start exec in {pod}: {source}")]
    Connect {
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error("exec stream of {pod} broke: {message}")]
    Stream { pod: String, message: String },
}

impl ExecError {
    pub fn reason(&self) -> &'static str {
        match self {
            ExecError::Timeout { .. } => "timeout",
            ExecError::OutputTooLarge { .. } => "output_too_large",
            ExecError::Failed { .. } => "exit_code",
            ExecError::Connect { .. } => "connect",
            ExecError::Stream { .. } => "stream",
        }
    }
}

/// Runs nvidia-smi in `container` of `namespace/name` and returns stdout.
pub async fn run_nvidia_smi(
    pods: &Api<Pod>,
    name: &str,
    container: &str,
    timeout: Duration,
    output_limit: usize,
) -> Result<Vec<u8>, ExecError> {
    let pod = name.to_owned();
    match tokio::time::timeout(timeout, exec(pods, name, container, output_limit)).await {
        Ok(result) => result,
        Err(_) => Err(ExecError::Timeout { pod, timeout }),
    }
}

async fn exec(
    pods: &Api<Pod>,
    name: &str,
    container: &str,
    output_limit: usize,
) -> Result<Vec<u8>, ExecError> {
    let params = AttachParams::default()
        .container(container)
        .stdin(false)
        .stdout(true)
        .stderr(true)
        .max_stdout_buf_size(STDOUT_PIPE_BYTES);
    let mut process = pods
        .exec(name, NVIDIA_SMI_ARGV, &params)
        .await
        .map_err(|source| ExecError::Connect {
            pod: name.to_owned(),
            source,
        })?;
    let stream_error = |message: String| ExecError::Stream {
        pod: name.to_owned(),
        message,
    };
    let stdout = process
        .stdout()
        .ok_or_else(|| stream_error("no stdout stream".into()))?;
    let stderr = process.stderr();
    let status = process.take_status();
    let (stdout, stderr) = tokio::join!(read_capped(stdout, output_limit), async move {
        match stderr {
            Some(stderr) => read_keeping_head(stderr, STDERR_KEEP).await,
            None => Vec::new(),
        }
    });
    let stdout = match stdout {
        Ok(bytes) => bytes,
        Err(ReadError::TooLarge) => {
            return Err(ExecError::OutputTooLarge {
                pod: name.to_owned(),
                limit: output_limit,
            });
        }
        Err(ReadError::Io(error)) => return Err(stream_error(error.to_string())),
    };
    let status = match status {
        Some(status) => status.await,
        None => None,
    };
    if let Some(status) = status
        && status.status.as_deref() == Some("Failure")
    {
        return Err(ExecError::Failed {
            pod: name.to_owned(),
            message: status.message.unwrap_or_else(|| "non-zero exit".into()),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        });
    }
    Ok(stdout)
}

enum ReadError {
    TooLarge,
    Io(std::io::Error),
}

/// Reads at most `limit` bytes; one more byte is an error (the reader is
/// dropped then, which ends the exec).
///
/// Reads straight into the output's own buffer, which grows as it fills:
/// with `WORKERS` execs at once a separate read chunk per exec was a
/// megabyte of the collector's peak heap at 16 workers (docs/benchmarks.md,
/// "gpuid's memory").
async fn read_capped(
    mut reader: impl AsyncRead + Unpin,
    limit: usize,
) -> Result<Vec<u8>, ReadError> {
    let mut buffer = Vec::new();
    loop {
        if buffer.len() == buffer.capacity() {
            buffer.reserve(READ_RESERVE);
        }
        let read = reader.read_buf(&mut buffer).await.map_err(ReadError::Io)?;
        if read == 0 {
            return Ok(buffer);
        }
        if buffer.len() > limit {
            return Err(ReadError::TooLarge);
        }
    }
}

/// The least a full output buffer grows by (the buffer at least doubles).
const READ_RESERVE: usize = 16 * 1024;

/// Reads to the end (so the remote side never blocks on a full pipe) and
/// keeps only the first `keep` bytes.
async fn read_keeping_head(mut reader: impl AsyncRead + Unpin, keep: usize) -> Vec<u8> {
    let mut head = Vec::new();
    let mut chunk = vec![0u8; 8 * 1024];
    while let Ok(read) = reader.read(&mut chunk).await {
        if read == 0 {
            break;
        }
        let room = keep.saturating_sub(head.len());
        head.extend_from_slice(&chunk[..read.min(room)]);
    }
    head
}
