//! Why a run cannot start.

/// A run that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A parameter is out of range.
    #[error("{0}")]
    Config(String),
}

impl From<runspec::ConfigError> for RunError {
    fn from(e: runspec::ConfigError) -> RunError {
        RunError::Config(e.to_string())
    }
}
