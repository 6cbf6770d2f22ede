//! The command line's one error type: bad input (exit 2) apart from the environment (3).

use crate::harness::InputError;
use std::fmt;

/// Why a command did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input: a file, a flag, a line (exit 2).
    #[error(transparent)]
    Input(#[from] InputError),
    /// Something the command needs failed or did not answer (exit 3).
    #[error(transparent)]
    Environment(#[from] EnvironmentError),
}

/// A database, Redis, a port, a runtime or a child process that failed.
#[derive(Debug)]
pub struct EnvironmentError {
    /// What failed, as the user knows it: `database postgres://...`, `Redis redis://...`.
    pub what: String,
    /// What it said.
    pub message: String,
}

impl EnvironmentError {
    /// `what` failed with `error`.
    pub fn new(what: impl Into<String>, error: impl fmt::Display) -> EnvironmentError {
        EnvironmentError {
            what: what.into(),
            message: error.to_string(),
        }
    }
}

impl fmt::Display for EnvironmentError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.message)
    }
}

impl std::error::Error for EnvironmentError {}

impl From<crate::store::drill::DrillError> for Error {
    fn from(error: crate::store::drill::DrillError) -> Error {
        use crate::store::drill::DrillError;
        match error {
            DrillError::Input(error) => Error::Input(error),
            DrillError::Environment { what, message } => {
                Error::Environment(EnvironmentError { what, message })
            }
        }
    }
}

/// `Ok(true)`: as expected; `Ok(false)`: not as expected; an error otherwise.
pub type Outcome = Result<bool, Error>;
