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
