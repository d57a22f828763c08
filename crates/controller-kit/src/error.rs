//! Errors shared by several modules.

/// A setting that cannot work; the message names the setting and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {setting}: {problem}")]
pub struct ConfigError {
    /// The setting (flag or option) that is wrong.
    pub setting: String,
    /// What is wrong with it.
    pub problem: String,
}

impl ConfigError {
    pub(crate) fn invalid(setting: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            setting: setting.into(),
            problem: problem.into(),
        }
    }
}

/// Whether `error` is the API server's answer with HTTP status `code`
/// (404 gone, 409 conflict, ...), as the controllers branch on it.
pub fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_api_answer_with_that_code_is_that_status() {
        let answer = |code: u16| {
            kube::Error::Api(
                kube::core::Status::failure("gone", "NotFound")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(is_status(&answer(404), 404));
        assert!(!is_status(&answer(409), 404));
        assert!(!is_status(
            &kube::Error::LinesCodecMaxLineLengthExceeded,
            404
        ));
    }
}
