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
    /// The file could not be written.
    #[error("{file}: cannot write: {source}")]
    Write {
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

/// Reads a whole text file, or says which file could not be read.
pub fn read_text(file: &Path) -> Result<String, InputError> {
    std::fs::read_to_string(file).map_err(|source| InputError::Io {
        file: file.to_owned(),
        source,
    })
}

/// The `.json` files directly in `dir`, sorted by path; none when it cannot be read (a
/// folder of kept counterexamples that does not exist holds none).
pub fn json_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// Checks, before any work, that the file an output flag names can be written: its folder
/// exists and the file can be created (or, if it exists, opened for writing). A file this
/// creates is removed again. The error names the flag and says `cannot write`.
pub fn writable_file(flag: &str, file: &Path) -> Result<(), InputError> {
    let existed = file.exists();
    match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(file)
    {
        Ok(_) => {
            if !existed {
                let _ = std::fs::remove_file(file);
            }
            Ok(())
        }
        Err(source) => Err(cannot_write(flag, file, &source)),
    }
}

/// Checks, before any work, that the folder an output flag names can be created and written
/// into (it is created if missing). The error names the flag and says `cannot write`.
pub fn writable_dir(flag: &str, dir: &Path) -> Result<(), InputError> {
    std::fs::create_dir_all(dir).map_err(|source| cannot_write(flag, dir, &source))?;
    let probe = dir.join(format!(".arrival-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|source| cannot_write(flag, dir, &source))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

fn cannot_write(flag: &str, path: &Path, source: &std::io::Error) -> InputError {
    InputError::invalid(
        Path::new(flag),
        "command line",
        format!("cannot write {}: {source}", path.display()),
    )
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

/// Parses a JSON file's text into `T`, with errors that name the place (a JSON path with
/// line:column) and say the problem in the file's words: not JSON, truncated, empty, not an
/// object (`what` says what the file should be), a byte-order mark, trailing content.
pub fn parse_json<T: serde::de::DeserializeOwned>(
    file: &Path,
    text: &str,
    what: &str,
) -> Result<T, InputError> {
    use serde_json::Value;
    if text.starts_with('\u{feff}') {
        return Err(InputError::invalid(
                file,
                "line 1:1",
                "the file starts with a UTF-8 byte-order mark, which JSON does not allow; save it without one",
            ));
    }
    let deserializer = &mut serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(&mut *deserializer).map_err(|error| {
        // Valid JSON that is not an object: serde would talk about `struct RawFixture`.
        if let Ok(value) = serde_json::from_str::<Value>(text) {
            if !value.is_object() {
                let kind = match value {
                    Value::Null => "null",
                    Value::Bool(_) => "a boolean",
                    Value::Number(_) => "a number",
                    Value::String(_) => "a string",
                    Value::Array(_) => "an array",
                    Value::Object(_) => unreachable!("checked"),
                };
                return InputError::invalid(file, "top level", format!("{what}, not {kind}"));
            }
        }
        let inner = error.inner();
        // serde_path_to_error writes `?` for a map key not read yet: drop it.
        let path = error.path().to_string();
        let path = path.trim_end_matches(".?");
        let category = inner.classify();
        let at_root = path == "." || path == "?" || path.is_empty();
        let place = if at_root && category == serde_json::error::Category::Data {
            format!("top level (line {}:{})", inner.line(), inner.column())
        } else if at_root {
            format!("line {}:{}", inner.line(), inner.column())
        } else {
            format!("{path} (line {}:{})", inner.line(), inner.column())
        };
        let message = plain_types(&strip_position(&inner.to_string()));
        let message = match category {
            serde_json::error::Category::Syntax => format!("not valid JSON: {message}"),
            serde_json::error::Category::Eof if text.trim().is_empty() => {
                "the file is empty (expected a JSON object)".to_owned()
            }
            serde_json::error::Category::Eof => {
                format!("the JSON ends early (truncated?): {message}")
            }
            _ => message,
        };
        InputError::invalid(file, place, message)
    })?;
    deserializer.end().map_err(|error| {
        InputError::invalid(
            file,
            format!("line {}:{}", error.line(), error.column()),
            "more content after the JSON object",
        )
    })?;
    Ok(value)
}

/// serde_json appends " at line L column C"; the place already says it.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}
