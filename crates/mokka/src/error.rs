use thiserror::Error;

/// Errors of the crate's fallible, non-validation operations.
#[derive(Debug, Error)]
pub enum MokkaError {
    /// A CRD could not be serialized to YAML.
    #[error("serialize CRD {name:?} to YAML: {message}")]
    CrdYaml { name: String, message: String },
    /// A value could not be encoded as JSON.
    #[error("encode {what} as JSON: {source}")]
    Json {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}
