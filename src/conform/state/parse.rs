//! The `state` setting of a target file read from its TOML value: a table (one source), a
//! list of tables (sources merged), or a list of strings (a command, the facts target
//! file's older form); every problem names the file and the key.

use super::{Database, Part, Protocol, Source, StateSetting};
use crate::harness::InputError;
use std::path::Path;

const FORMS: &str = "a table with one of `url`, `command`, `sqlite` or `postgres` \
                     (docs/conform.md), or a list of such tables";

/// Reads the whole setting.
pub fn setting(
    value: &toml::Value,
    file: &Path,
    protocol: Protocol,
) -> Result<StateSetting, InputError> {
    let bad = |key: &str, message: String| InputError::invalid(file, key, message);
    let sources = match value {
        toml::Value::Table(table) => vec![source(table, "state", file, protocol)?],
        toml::Value::Array(items) if items.iter().all(toml::Value::is_str) => {
            vec![Source::Command(command(value, "state", file)?)]
        }
        toml::Value::Array(items) => {
            let mut sources = Vec::new();
            for (n, item) in items.iter().enumerate() {
                let key = format!("state[{n}]");
                let Some(table) = item.as_table() else {
                    return Err(bad(&key, format!("is not a table: write {FORMS}")));
                };
                sources.push(source(table, &key, file, protocol)?);
            }
            sources
        }
        _ => return Err(bad("state", format!("write {FORMS}"))),
    };
    if sources.is_empty() {
        return Err(bad("state", format!("is an empty list: write {FORMS}")));
    }
    let all_sql = sources.iter().all(|s| matches!(s, Source::Sql { .. }));
    if all_sql {
        for part in protocol.parts().iter().filter(|part| part.required) {
            let given = sources.iter().any(|source| match source {
                Source::Sql { queries, .. } => queries.iter().any(|(name, _)| name == part.name),
                _ => false,
            });
            if !given {
                return Err(bad(
                    &format!("state.{}", part.name),
                    format!(
                        "is missing: the state document needs `{}` ({}), and no other \
                         source gives it",
                        part.name,
                        columns(part)
                    ),
                ));
            }
        }
    }
    Ok(StateSetting { sources })
}

/// A part's columns in words.
fn columns(part: &Part) -> String {
    let names: Vec<&str> = part.columns.iter().map(|(name, _)| *name).collect();
    match part.shape {
        super::Shape::Number => format!("a query returning one row with one count, {}", names[0]),
        _ => format!("a query returning rows ({})", names.join(", ")),
    }
}

/// A list of strings, not empty.
fn command(value: &toml::Value, key: &str, file: &Path) -> Result<Vec<String>, InputError> {
    let words: Option<Vec<String>> = value.as_array().and_then(|items| {
        items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect()
    });
    match words {
        Some(words) if !words.is_empty() => Ok(words),
        Some(_) => Err(InputError::invalid(
            file,
            key,
            "is empty: give the program and its arguments",
        )),
        None => Err(InputError::invalid(
            file,
            key,
            "is not a list of strings: give the program and its arguments",
        )),
    }
}

/// One source from its table (`key` names the table in errors).
fn source(
    table: &toml::Table,
    key: &str,
    file: &Path,
    protocol: Protocol,
) -> Result<Source, InputError> {
    let bad =
        |field: &str, message: String| InputError::invalid(file, format!("{key}.{field}"), message);
    let kinds: Vec<&str> = ["url", "command", "sqlite", "postgres"]
        .into_iter()
        .filter(|kind| table.contains_key(*kind))
        .collect();
    let [kind] = kinds[..] else {
        let message = if kinds.is_empty() {
            format!("names no source: write {FORMS}")
        } else {
            format!(
                "names {} sources at once: one per table",
                kinds.join(" and ")
            )
        };
        return Err(InputError::invalid(file, key, message));
    };
    let text = |field: &str| match table.get(field).and_then(toml::Value::as_str) {
        Some(text) if !text.trim().is_empty() => Ok(text.to_owned()),
        _ => Err(bad(field, "is not a non-empty string".into())),
    };
    let source = match kind {
        "url" => {
            let url = text("url")?;
            if !url.starts_with('/') && !url.starts_with("http://") {
                return Err(bad(
                    "url",
                    format!(
                        "`{url}`: give a path on the receiver (`/_arrival/state`) or an \
                         http:// URL (`http://127.0.0.1:{{port}}/state`)"
                    ),
                ));
            }
            Source::Url(url)
        }
        "command" => Source::Command(command(&table["command"], &format!("{key}.command"), file)?),
        "sqlite" => sql(
            table,
            Database::Sqlite(text("sqlite")?),
            key,
            file,
            protocol,
        )?,
        _ => {
            let url = text("postgres")?;
            if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
                return Err(bad(
                    "postgres",
                    "is not a URL: write postgres://USER@HOST:PORT/DATABASE".into(),
                ));
            }
            // Placeholders are filled in later; a URL without them is checked now.
            if !url.contains('{') && url.parse::<postgres::Config>().is_err() {
                return Err(bad(
                    "postgres",
                    "is not a PostgreSQL URL the client can read (host, port, database and \
                     options): write postgres://USER@HOST:PORT/DATABASE"
                        .into(),
                ));
            }
            sql(table, Database::Postgres(url), key, file, protocol)?
        }
    };
    if !matches!(source, Source::Sql { .. }) {
        if let Some(other) = table.keys().find(|field| *field != kind) {
            return Err(bad(other, format!("unknown beside `{kind}`")));
        }
    }
    Ok(source)
}

/// An SQL source: its other keys are the protocol's parts, each a query.
fn sql(
    table: &toml::Table,
    database: Database,
    key: &str,
    file: &Path,
    protocol: Protocol,
) -> Result<Source, InputError> {
    let db_key = match database {
        Database::Sqlite(_) => "sqlite",
        Database::Postgres(_) => "postgres",
    };
    let names: Vec<&str> = protocol.parts().iter().map(|part| part.name).collect();
    for field in table.keys().filter(|field| *field != db_key) {
        if !names.contains(&field.as_str()) {
            return Err(InputError::invalid(
                file,
                format!("{key}.{field}"),
                format!(
                    "is not a part of the state document: the queries are named {}",
                    names.join(", ")
                ),
            ));
        }
    }
    let mut queries = Vec::new();
    for part in protocol.parts() {
        let Some(value) = table.get(part.name) else {
            continue;
        };
        match value.as_str() {
            Some(query) if !query.trim().is_empty() => {
                queries.push((part.name.to_owned(), query.to_owned()));
            }
            _ => {
                return Err(InputError::invalid(
                    file,
                    format!("{key}.{}", part.name),
                    format!("is not a query: write {}", columns(part)),
                ))
            }
        }
    }
    if queries.is_empty() {
        return Err(InputError::invalid(
            file,
            key,
            format!(
                "has a database and no query: name them {}",
                names.join(", ")
            ),
        ));
    }
    Ok(Source::Sql { database, queries })
}
