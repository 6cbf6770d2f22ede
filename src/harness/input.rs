//! Bad input, typed: a file that cannot be read, or one that does not follow its format,
//! named with the place and the problem. The command line maps it to exit status 2.

use std::path::{Path, PathBuf};

/// Bad input: a file that cannot be read or does not follow its format.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Io {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid for its format.
    #[error("{file}: {place}: {message}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// Where: a JSON or TOML path, with line:column where known.
        place: String,
        /// What is wrong.
        message: String,
    },
}

impl InputError {
    /// A file that does not follow its format: where, and what is wrong.
    pub fn invalid(file: &Path, place: impl Into<String>, message: impl Into<String>) -> Self {
        InputError::Invalid {
            file: file.to_owned(),
            place: place.into(),
            message: message.into(),
        }
    }
}

/// Says serde's Rust type names (`u64`, `a map`) in the words of the file formats.
pub fn plain_types(message: &str) -> String {
    message
        .replace("expected u64", "expected a non-negative integer")
        .replace("expected usize", "expected a non-negative integer")
        .replace(
            "expected u32",
            "expected a non-negative integer up to 4294967295",
        )
        .replace("expected u8", "expected an integer from 0 to 255")
        .replace("expected a map", "expected a JSON object")
        .replace("expected a sequence", "expected a JSON array")
        .replace("invalid type: sequence", "invalid type: array")
        .replace("invalid type: map", "invalid type: object")
}
