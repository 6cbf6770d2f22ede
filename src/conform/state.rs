//! Where a target's state document comes from, for both protocols: the target file's
//! `state` setting (a URL, a command printing JSON, or SQL on the receiver's SQLite or
//! PostgreSQL database, or a list of these merged key by key), read at every observation
//! into the JSON document each protocol's oracle already parses.

use crate::harness::InputError;
use serde_json::{Map, Value};
use std::path::Path;
use std::time::Duration;

/// Which protocol's document the SQL parts build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `{"cards": {...}, "paused"?, "unresolved"?}`.
    Card,
    /// `{"fact_contents": [...], "applications": [...], "pending", "dead_letters"?}`.
    Facts,
}

/// What a column holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Text,
    /// A non-negative integer (an SQL integer, or text of digits: versions pass 2^63).
    Count,
    /// `true`/`false`, or an integer 0/1.
    Bool,
    /// JSON text, or a PostgreSQL `json`/`jsonb` value.
    Json,
}

/// How a part's rows become its value in the document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// An object keyed by the first column, of objects of the other columns.
    Map,
    /// A list of objects, one per row.
    List,
    /// A list of the one column's values.
    Column,
    /// One row, one column: a count.
    Number,
}

/// One part of a protocol's document and the query that gives it.
struct Part {
    name: &'static str,
    columns: &'static [(&'static str, Kind)],
    shape: Shape,
    required: bool,
}

const CARD_PARTS: &[Part] = &[
    Part {
        name: "cards",
        columns: &[
            ("object_id", Kind::Text),
            ("version", Kind::Count),
            ("state", Kind::Json),
        ],
        shape: Shape::Map,
        required: true,
    },
    Part {
        name: "paused",
        columns: &[("object_id", Kind::Text)],
        shape: Shape::Column,
        required: false,
    },
    Part {
        name: "unresolved",
        columns: &[("input", Kind::Text)],
        shape: Shape::Column,
        required: false,
    },
];

const FACTS_PARTS: &[Part] = &[
    Part {
        name: "fact_contents",
        columns: &[
            ("source", Kind::Text),
            ("event_id", Kind::Text),
            ("content", Kind::Text),
        ],
        shape: Shape::List,
        required: true,
    },
    Part {
        name: "applications",
        columns: &[
            ("tenant_id", Kind::Text),
            ("application_id", Kind::Text),
            ("ready", Kind::Bool),
            ("open_conflict", Kind::Bool),
        ],
        shape: Shape::List,
        required: true,
    },
    Part {
        name: "pending",
        columns: &[("pending", Kind::Count)],
        shape: Shape::Number,
        required: true,
    },
    Part {
        name: "dead_letters",
        columns: &[("dead_letters", Kind::Count)],
        shape: Shape::Number,
        required: false,
    },
];

impl Protocol {
    fn parts(self) -> &'static [Part] {
        match self {
            Protocol::Card => CARD_PARTS,
            Protocol::Facts => FACTS_PARTS,
        }
    }
}

/// Which database SQL parts run on (placeholders not filled yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Database {
    /// An SQLite file.
    Sqlite(String),
    /// A PostgreSQL URL.
    Postgres(String),
}

/// One state source (placeholders not filled yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `GET` this URL, or this path on the receiver's own address: 200 and the document.
    Url(String),
    /// Run this command: exit 0 and the document on standard output.
    Command(Vec<String>),
    /// One query per part of the document, all in one read-only transaction.
    Sql {
        /// The database.
        database: Database,
        /// The parts' names and queries, in the protocol's order.
        queries: Vec<(String, String)>,
    },
}

/// The `state` setting: one source, or several whose documents are merged (a key from the
/// first source that has it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateSetting {
    /// The sources, in order.
    pub sources: Vec<Source>,
}

/// A state source that failed: what it is and what went wrong (a harness failure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateError {
    /// The source, placeholders filled in (a PostgreSQL password redacted).
    pub what: String,
    /// What is wrong.
    pub message: String,
}

/// What a read needs from the running target.
pub struct Context<'a> {
    /// Fills in the target's placeholders.
    pub fill: &'a dyn Fn(&str) -> String,
    /// `GET`s a URL (or a path on the receiver's own address): the body of a 200 answer.
    /// The HTTP client lives with the HTTP target ([`super::http::get`]); the reader is
    /// handed it so that it stays below the targets that use it.
    pub get: &'a dyn Fn(&str) -> Result<Vec<u8>, String>,
    /// How long one SQL read may take.
    pub timeout: Duration,
}

mod parse;
mod sql;

impl StateSetting {
    /// Reads the `state` value of `file` for `protocol`; every problem is bad input naming
    /// the file and the key.
    pub fn from_toml(
        value: &toml::Value,
        file: &Path,
        protocol: Protocol,
    ) -> Result<StateSetting, InputError> {
        parse::setting(value, file, protocol)
    }

    /// Replaces a placeholder in every source's words now (`{arrival}` is known when the
    /// file is read).
    pub fn replace(&mut self, placeholder: &str, value: &str) {
        for source in &mut self.sources {
            match source {
                Source::Url(url) => *url = url.replace(placeholder, value),
                Source::Command(words) => {
                    for word in words {
                        *word = word.replace(placeholder, value);
                    }
                }
                Source::Sql { database, .. } => match database {
                    Database::Sqlite(text) | Database::Postgres(text) => {
                        *text = text.replace(placeholder, value);
                    }
                },
            }
        }
    }

    /// The setting in words, for reports.
    pub fn describe(&self) -> String {
        let one = |source: &Source| match source {
            Source::Url(url) => format!("state URL {url}"),
            Source::Command(words) => format!("state command `{}`", words.join(" ")),
            Source::Sql { database, .. } => match database {
                Database::Sqlite(path) => format!("state SQL on SQLite {path}"),
                Database::Postgres(url) => {
                    format!("state SQL on {}", crate::store::db::redact(url))
                }
            },
        };
        self.sources.iter().map(one).collect::<Vec<_>>().join(" + ")
    }

    /// Reads every source and merges their documents.
    pub fn read(&self, context: &Context, protocol: Protocol) -> Result<Value, StateError> {
        let mut merged = Map::new();
        for source in &self.sources {
            let (what, document) = read_one(source, context, protocol)?;
            let Value::Object(object) = document else {
                return Err(StateError {
                    what,
                    message: format!("gave {}, not a JSON object", snippet(&document.to_string())),
                });
            };
            for (key, value) in object {
                merged.entry(key).or_insert(value);
            }
        }
        Ok(Value::Object(merged))
    }
}

/// The first 200 characters of a text.
fn snippet(text: &str) -> String {
    let cut: String = text.chars().take(200).collect();
    if cut.len() < text.len() {
        format!("{cut}...")
    } else {
        cut
    }
}

fn read_one(
    source: &Source,
    context: &Context,
    protocol: Protocol,
) -> Result<(String, Value), StateError> {
    let fill = context.fill;
    match source {
        Source::Url(url) => {
            let url = fill(url);
            let what = format!("state URL {url}");
            let body = (context.get)(&url).map_err(|message| StateError {
                what: what.clone(),
                message,
            })?;
            json_document(what, &body)
        }
        Source::Command(words) => {
            let words: Vec<String> = words.iter().map(|word| fill(word)).collect();
            let what = format!("state command `{}`", words.join(" "));
            let out = super::process::run_command(&words, context.timeout).map_err(|message| {
                StateError {
                    what: what.clone(),
                    message,
                }
            })?;
            json_document(what, &out)
        }
        Source::Sql { database, queries } => {
            let database = match database {
                Database::Sqlite(path) => Database::Sqlite(fill(path)),
                Database::Postgres(url) => Database::Postgres(fill(url)),
            };
            let document = sql::read(&database, queries, protocol, context.timeout)?;
            Ok((String::new(), document))
        }
    }
}

fn json_document(what: String, body: &[u8]) -> Result<(String, Value), StateError> {
    match serde_json::from_slice(body) {
        Ok(value) => Ok((what, value)),
        Err(error) => Err(StateError {
            what,
            message: format!(
                "gave no JSON document ({error}): {}",
                snippet(&String::from_utf8_lossy(body))
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::{Context, Protocol, Source, StateSetting};
    use serde_json::json;
    use std::path::Path;
    use std::time::Duration;

    fn setting(text: &str) -> StateSetting {
        let table: toml::Table = text.parse().unwrap();
        StateSetting::from_toml(&table["state"], Path::new("t.toml"), Protocol::Facts).unwrap()
    }

    #[test]
    fn a_list_of_words_is_a_command_and_a_list_of_tables_is_sources_in_order() {
        let old = setting("state = [\"status\", \"--json\"]");
        assert_eq!(
            old.sources,
            vec![Source::Command(vec!["status".into(), "--json".into()])]
        );
        let two = setting(
            "[[state]]\nsqlite = \"{data_dir}/inbox.db\"\npending = \"SELECT 0\"\n\
             fact_contents = \"SELECT 1\"\n[[state]]\nurl = \"/state\"\n",
        );
        assert_eq!(two.sources.len(), 2);
        // The queries in the protocol's order, whatever the file's.
        let Source::Sql { queries, .. } = &two.sources[0] else {
            panic!("{two:?}")
        };
        let names: Vec<&str> = queries.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["fact_contents", "pending"]);
        assert_eq!(two.sources[1], Source::Url("/state".into()));
    }

    #[test]
    fn merged_documents_take_each_key_from_the_first_source_that_has_it() {
        let echo = |doc: &str| Source::Command(vec!["echo".into(), doc.into()]);
        let merged = StateSetting {
            sources: vec![
                echo(r#"{"pending": 2, "applications": []}"#),
                echo(r#"{"pending": 9, "fact_contents": []}"#),
            ],
        };
        let fill = |word: &str| word.to_owned();
        let get = |_: &str| Err("no URL here".to_owned());
        let context = Context {
            fill: &fill,
            get: &get,
            timeout: Duration::from_secs(2),
        };
        assert_eq!(
            merged.read(&context, Protocol::Facts).unwrap(),
            json!({"pending": 2, "applications": [], "fact_contents": []})
        );
    }
}
