//! How a target is named: a target file (`--target FILE.toml`: `kind`, `command` with
//! `{port}` and `{data_dir}`, timeouts, the expected result, where the state is read) or a
//! shorthand
//! (`--target http:COMMAND...`, `--target stdio:COMMAND...`, words split on spaces).

use super::http::HttpTarget;
use super::process::Reset;
use super::state::{Protocol, StateSetting};
use super::stdio::StdioTarget;
use crate::card::conform::{CardTarget, HarnessError};
use crate::harness::InputError;
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;

/// The kinds of target.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `POST /webhook` and friends.
    Http,
    /// JSON lines on standard input and output.
    Stdio,
}

fn default_timeout() -> u64 {
    2_000
}

fn default_ready() -> u64 {
    10_000
}

fn default_expect() -> String {
    "pass".into()
}

/// How a reconciliation reaches an HTTP receiver.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Reconcile {
    /// The snapshot in the body of `POST /_arrival/reconcile`.
    #[default]
    Push,
    /// `{"object_id", "authority": URL}`: the receiver fetches the snapshot from arrival's
    /// authority ([`super::authority`]).
    Pull,
}

/// A target file.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TargetFile {
    /// `http` or `stdio`.
    pub kind: Kind,
    /// The command and its arguments, with `{port}` and `{data_dir}`.
    #[serde(deserialize_with = "command_words")]
    pub command: Vec<String>,
    /// How long one request may take (milliseconds).
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// How long the receiver may take to be ready (milliseconds).
    #[serde(default = "default_ready")]
    pub ready_timeout_ms: u64,
    /// `pass`, or the property a known-broken receiver must be caught by.
    #[serde(default = "default_expect")]
    pub expect: String,
    /// The `state` setting as written (read into [`TargetFile::reader`]).
    #[serde(default)]
    state: Option<toml::Value>,
    /// Where the state is read: a URL, a command or SQL (docs/conform.md); when `None`,
    /// `GET /_arrival/state` (http) or the `read` message (stdio).
    #[serde(skip)]
    pub reader: Option<StateSetting>,
    /// `push` (the default) or `pull` (HTTP only).
    #[serde(default)]
    pub reconcile: Reconcile,
    /// A reset beyond a fresh data directory: a command (an array) or a URL (a string).
    #[serde(default)]
    reset: Option<toml::Value>,
    /// The reset as read.
    #[serde(skip)]
    pub resetting: Option<Reset>,
}

impl TargetFile {
    /// Reads `--target`: a `.toml` file, or `http:...` / `stdio:...`.
    pub fn parse(text: &str) -> Result<TargetFile, InputError> {
        let shorthand = |kind, rest: &str| TargetFile {
            kind,
            command: rest.split_whitespace().map(str::to_owned).collect(),
            timeout_ms: default_timeout(),
            ready_timeout_ms: default_ready(),
            expect: default_expect(),
            state: None,
            reader: None,
            reconcile: Reconcile::Push,
            reset: None,
            resetting: None,
        };
        let file = if let Some(rest) = text.strip_prefix("http:") {
            shorthand(Kind::Http, rest)
        } else if let Some(rest) = text.strip_prefix("stdio:") {
            shorthand(Kind::Stdio, rest)
        } else {
            let path = Path::new(text);
            if !text.ends_with(".toml") {
                return Err(InputError::invalid(
                    Path::new("--target"),
                    "command line",
                    format!(
                        "`{text}` is neither a target file (FILE.toml) nor `http:COMMAND` or \
                         `stdio:COMMAND`"
                    ),
                ));
            }
            let mut file: TargetFile = crate::harness::model_file::parse(path)?;
            if let Some(value) = &file.state {
                file.reader = Some(StateSetting::from_toml(value, path, Protocol::Card)?);
            }
            if let Some(value) = &file.reset {
                file.resetting = Some(reset_setting(value, path, file.kind)?);
            }
            file
        };
        if file
            .command
            .first()
            .is_none_or(|program| program.trim().is_empty())
        {
            return Err(InputError::invalid(
                Path::new(text),
                "command",
                "the command is empty or names no program: give the program and its arguments",
            ));
        }
        for (field, value) in [
            ("timeout_ms", file.timeout_ms),
            ("ready_timeout_ms", file.ready_timeout_ms),
        ] {
            if value == 0 {
                return Err(InputError::invalid(
                    Path::new(text),
                    field,
                    "0 ms leaves no time to answer: give a positive number of milliseconds",
                ));
            }
        }
        if file.reconcile == Reconcile::Pull && file.kind != Kind::Http {
            return Err(InputError::invalid(
                Path::new(text),
                "reconcile",
                "`pull` is for `kind = \"http\"` targets: a JSON-lines receiver gets the snapshot \
                 in its `reconcile` message",
            ));
        }
        Ok(file)
    }

    /// The target, not started yet.
    pub fn open(&self) -> Result<Box<dyn CardTarget>, HarnessError> {
        let timeout = Duration::from_millis(self.timeout_ms);
        let ready = Duration::from_millis(self.ready_timeout_ms);
        let command = self.command.clone();
        let reader = self.reader.clone();
        let reset = self.resetting.clone();
        Ok(match self.kind {
            Kind::Http => {
                let target = HttpTarget::new(command, timeout, ready, reader)?.resetting(reset);
                match self.reconcile {
                    Reconcile::Push => Box::new(target),
                    Reconcile::Pull => Box::new(target.pull_authority()?),
                }
            }
            Kind::Stdio => {
                Box::new(StdioTarget::new(command, timeout, ready, reader)?.resetting(reset))
            }
        })
    }
}

/// The `command` setting: an array of its words. A string is refused with the way to write
/// it, since arrival runs no shell to split it.
fn command_words<'de, D: serde::Deserializer<'de>>(input: D) -> Result<Vec<String>, D::Error> {
    use serde::de::Error;
    let example = "e.g. [\"python3\", \"receiver.py\", \"--port\", \"{port}\"]";
    match toml::Value::deserialize(input)? {
        toml::Value::Array(words) => words
            .into_iter()
            .enumerate()
            .map(|(index, word)| match word {
                toml::Value::String(word) => Ok(word),
                other => Err(D::Error::custom(format!(
                    "word {index} is of type {}: each word of a command is a string, {example}",
                    other.type_str()
                ))),
            })
            .collect(),
        toml::Value::String(text) => Err(D::Error::custom(format!(
            "`{text}` is one string: write the command as an array of its words, {example} \
             (arrival runs no shell to split it)"
        ))),
        other => Err(D::Error::custom(format!(
            "a value of type {}: write the command as an array of its words, {example}",
            other.type_str()
        ))),
    }
}

/// The `reset` setting: an array is a command, a string a URL (a path on the receiver, or
/// `http://HOST:PORT/PATH`; absolute for a JSON-lines target).
fn reset_setting(value: &toml::Value, path: &Path, kind: Kind) -> Result<Reset, InputError> {
    let wrong = |why: &str| InputError::invalid(path, "reset", why.to_owned());
    match value {
        toml::Value::Array(words) => {
            let words: Option<Vec<String>> = words
                .iter()
                .map(|word| word.as_str().map(str::to_owned))
                .collect();
            match words {
                Some(words) if !words.is_empty() => Ok(Reset::Command(words)),
                Some(_) => Err(wrong(
                    "the command is empty: give the program and its arguments",
                )),
                None => Err(wrong("a command is an array of strings")),
            }
        }
        toml::Value::String(url) if url.starts_with("http://") => Ok(Reset::Url(url.clone())),
        toml::Value::String(url) if url.starts_with('/') && kind == Kind::Http => {
            Ok(Reset::Url(url.clone()))
        }
        toml::Value::String(url) => Err(wrong(&format!(
            "`{url}` is no reset URL: give `http://HOST:PORT/PATH`{}",
            if kind == Kind::Http {
                " or a path on the receiver (`/reset`)"
            } else {
                ""
            }
        ))),
        _ => Err(wrong(
            "give a command (an array of strings) or a URL (a string)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{reset_setting, Kind, Reset};
    use std::path::Path;

    #[test]
    fn a_reset_is_a_command_or_a_url() {
        let file = Path::new("t.toml");
        let read = |text: &str, kind| {
            let table: toml::Table = format!("reset = {text}").parse().unwrap();
            reset_setting(&table["reset"], file, kind)
        };
        assert_eq!(
            read("[\"sh\", \"-c\", \"true\"]", Kind::Stdio).unwrap(),
            Reset::Command(vec!["sh".into(), "-c".into(), "true".into()])
        );
        assert_eq!(
            read("\"http://127.0.0.1:9/reset\"", Kind::Stdio).unwrap(),
            Reset::Url("http://127.0.0.1:9/reset".into())
        );
        assert_eq!(
            read("\"/reset\"", Kind::Http).unwrap(),
            Reset::Url("/reset".into())
        );
        for (text, kind) in [
            ("\"/reset\"", Kind::Stdio),
            ("\"https://x/reset\"", Kind::Http),
            ("[]", Kind::Http),
            ("[1]", Kind::Http),
            ("3", Kind::Http),
        ] {
            let error = read(text, kind).unwrap_err().to_string();
            assert!(error.contains("reset"), "{text}: {error}");
        }
    }

    #[test]
    fn a_command_is_an_array_of_strings_and_a_string_says_how_to_write_it() {
        let read = |command: &str| {
            toml::from_str::<super::TargetFile>(&format!("kind = \"http\"\ncommand = {command}"))
                .map(|file| file.command)
                .map_err(|error| error.to_string())
        };
        assert_eq!(read("[\"rx\", \"-v\"]").unwrap(), ["rx", "-v"]);
        for (command, says) in [
            ("\"rx -v\"", "is one string: write the command as an array"),
            ("[\"rx\", 3]", "word 1 is of type integer"),
            ("3", "a value of type integer"),
        ] {
            let error = read(command).unwrap_err();
            assert!(error.contains(says), "{command}: {error}");
        }
    }
}
