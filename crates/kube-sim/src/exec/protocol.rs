//! The Kubernetes remote-command WebSocket protocol (`v4.channel.k8s.io`,
//! `v5.channel.k8s.io`): query parameters, channel framing and the exit
//! Status. Pure: no sockets here.

use serde_json::{Value, json};

pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
/// Carries one `meta.k8s.io/v1 Status` when the command ends.
pub const STATUS: u8 = 3;
/// Terminal size changes from the client; accepted and ignored.
#[cfg(test)]
pub const RESIZE: u8 = 4;
/// v5 only: `[255, n]` announces that channel `n` reached EOF.
pub const CLOSE: u8 = 255;

pub const V5: &str = "v5.channel.k8s.io";
pub const V4: &str = "v4.channel.k8s.io";
/// Offered to clients in this order of preference.
pub const SUPPORTED: [&str; 2] = [V5, V4];

/// Output frames stay below this size so large outputs (nvidia-smi XML of
/// an eight-GPU node is about 100 KiB) stream in pieces.
pub const MAX_FRAME_PAYLOAD: usize = 32 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    V4,
    V5,
}

impl Protocol {
    pub fn from_header(value: &[u8]) -> Option<Self> {
        match value {
            v if v == V5.as_bytes() => Some(Self::V5),
            v if v == V4.as_bytes() => Some(Self::V4),
            _ => None,
        }
    }
}

/// The query parameters of `GET …/pods/{name}/exec`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecParams {
    pub command: Vec<String>,
    pub container: Option<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl ExecParams {
    pub fn parse(query: &str) -> Self {
        let mut params = Self::default();
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let flag = || matches!(value.as_ref(), "true" | "1" | "True" | "TRUE");
            match key.as_ref() {
                "command" => params.command.push(value.into_owned()),
                "container" if !value.is_empty() => params.container = Some(value.into_owned()),
                "stdin" => params.stdin = flag(),
                "stdout" => params.stdout = flag(),
                "stderr" => params.stderr = flag(),
                "tty" => params.tty = flag(),
                _ => {}
            }
        }
        params
    }

    /// The apiserver's own checks on exec options, before any pod lookup.
    pub fn validate(&self) -> Result<(), String> {
        if self.command.is_empty() {
            return Err("you must specify at least 1 command".into());
        }
        self.validate_streams()
    }

    /// The check attach shares with exec: some stream is asked for.
    pub fn validate_streams(&self) -> Result<(), String> {
        if !(self.stdin || self.stdout || self.stderr) {
            return Err("you must specify at least 1 of stdin, stdout, stderr".into());
        }
        Ok(())
    }
}

/// What a client frame means to the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientFrame {
    Stdin(Vec<u8>),
    /// EOF on a channel (v5 close signal).
    Close(u8),
    /// Terminal resize and anything unknown: accepted and ignored.
    Ignored,
}

pub fn parse_client_frame(protocol: Protocol, data: &[u8]) -> ClientFrame {
    match data {
        [STDIN, rest @ ..] if !rest.is_empty() => ClientFrame::Stdin(rest.to_vec()),
        [CLOSE, channel, ..] if protocol == Protocol::V5 => ClientFrame::Close(*channel),
        _ => ClientFrame::Ignored,
    }
}

/// Frames carrying `data` on `channel`, each under [`MAX_FRAME_PAYLOAD`];
/// nothing for empty data.
pub fn data_frames(channel: u8, data: &[u8]) -> Vec<Vec<u8>> {
    data.chunks(MAX_FRAME_PAYLOAD)
        .map(|chunk| {
            let mut frame = Vec::with_capacity(chunk.len() + 1);
            frame.push(channel);
            frame.extend_from_slice(chunk);
            frame
        })
        .collect()
}

/// The Status sent on channel 3 when the command exits, as the kubelet
/// writes it: `Success`, or `Failure` with reason `NonZeroExitCode` and the
/// code in an `ExitCode` cause (clients read the code from there).
pub fn exit_status(exit_code: i32) -> Value {
    if exit_code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: exit status {exit_code}"),
        "reason": "NonZeroExitCode",
        "details": {
            "causes": [{"reason": "ExitCode", "message": exit_code.to_string()}]
        },
    })
}

pub fn status_frame(exit_code: i32) -> Vec<u8> {
    let mut frame = vec![STATUS];
    frame.extend_from_slice(exit_status(exit_code).to_string().as_bytes());
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_repeat_command_and_read_flags() {
        let p = ExecParams::parse(
            "command=nvidia-smi&command=-q&command=-x&container=plugin&stdout=true&stderr=true&stdin=false",
        );
        assert_eq!(p.command, vec!["nvidia-smi", "-q", "-x"]);
        assert_eq!(p.container.as_deref(), Some("plugin"));
        assert!(p.stdout && p.stderr && !p.stdin && !p.tty);
        assert_eq!(p.validate(), Ok(()));
    }

    #[test]
    fn kube_rs_style_query_with_a_leading_ampersand_and_escapes_parses() {
        let p = ExecParams::parse("&stdout=true&command=sh&command=-c&command=echo%20hi%20%3E%262");
        assert_eq!(p.command, vec!["sh", "-c", "echo hi >&2"]);
        assert_eq!(p.container, None);
    }

    #[test]
    fn exec_options_need_a_command_and_a_stream() {
        assert!(ExecParams::parse("stdout=true").validate().is_err());
        assert!(ExecParams::parse("command=ls").validate().is_err());
    }

    #[test]
    fn stdin_and_close_frames_are_told_apart_by_protocol() {
        assert_eq!(
            parse_client_frame(Protocol::V5, &[STDIN, b'h', b'i']),
            ClientFrame::Stdin(b"hi".to_vec())
        );
        assert_eq!(
            parse_client_frame(Protocol::V5, &[CLOSE, STDIN]),
            ClientFrame::Close(0)
        );
        assert_eq!(
            parse_client_frame(Protocol::V4, &[CLOSE, STDIN]),
            ClientFrame::Ignored
        );
        assert_eq!(
            parse_client_frame(Protocol::V5, &[STDIN]),
            ClientFrame::Ignored
        );
        assert_eq!(
            parse_client_frame(Protocol::V5, &[RESIZE, b'{']),
            ClientFrame::Ignored
        );
    }

    #[test]
    fn large_output_is_split_into_bounded_frames_on_its_channel() {
        let data = vec![b'x'; MAX_FRAME_PAYLOAD * 2 + 5];
        let frames = data_frames(STDOUT, &data);
        assert_eq!(frames.len(), 3);
        assert!(
            frames
                .iter()
                .all(|f| f[0] == STDOUT && f.len() <= MAX_FRAME_PAYLOAD + 1)
        );
        let joined: Vec<u8> = frames.iter().flat_map(|f| f[1..].to_vec()).collect();
        assert_eq!(joined, data);
        assert!(data_frames(STDERR, b"").is_empty());
    }

    #[test]
    fn the_exit_status_carries_the_code_as_an_exit_code_cause() {
        assert_eq!(exit_status(0)["status"], "Success");
        let failed = exit_status(3);
        assert_eq!(failed["status"], "Failure");
        assert_eq!(failed["reason"], "NonZeroExitCode");
        assert_eq!(failed["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(failed["details"]["causes"][0]["message"], "3");
        let frame = status_frame(3);
        assert_eq!(frame[0], STATUS);
        let decoded: Value = serde_json::from_slice(&frame[1..]).unwrap();
        assert_eq!(decoded, failed);
    }
}
