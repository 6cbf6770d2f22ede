//! The pipeline commands' shared edge: refusing a `--db` that is not an inbox (bad input,
//! exit 2), naming a pipeline part that failed (the environment, exit 3), and where Redis
//! is with the stream and group to use (`--redis-url`, `--stream`, `--group`).

use super::{EnvironmentError, Error};
use crate::harness::InputError;
use crate::pipeline::sql::{Db, InboxAt, Pg};
use crate::pipeline::stream::Names;
use clap::Args;
use std::path::Path;

/// The environment failed while working on `what` (the inbox, Redis, a fixture's run).
pub(super) fn env_error(what: &dyn std::fmt::Display, error: impl std::fmt::Display) -> Error {
    EnvironmentError::new(format!("pipeline {what}"), error).into()
}

/// Reads `--db`: `postgres://...` is a PostgreSQL inbox, anything else an SQLite file.
pub(super) fn inbox_at(text: &str) -> Result<InboxAt, String> {
    if text.is_empty() {
        return Err("an empty path: give an SQLite file or postgres://USER@HOST:PORT/DB".into());
    }
    // A PostgreSQL URL is checked by [`checked`] when a command uses it, not here: clap
    // would quote the whole text, password included, in its refusal.
    Ok(InboxAt::parse(text))
}

/// Refuses a PostgreSQL `--db` that does not parse as a URL (exit 2), quoting it with its
/// password hidden.
pub(super) fn checked(db: &InboxAt) -> Result<(), InputError> {
    if let InboxAt::Postgres(url) = db {
        url.parse::<postgres::Config>().map_err(|error| {
            InputError::invalid(
                Path::new("--db"),
                "command line",
                format!("`{db}` is not a PostgreSQL URL: {error}"),
            )
        })?;
    }
    Ok(())
}

/// Opens an inbox that `pipeline init` made ([`existing_inbox`]); a database that does not
/// answer is the environment (exit 3).
pub(super) fn open_existing(db: &InboxAt) -> Result<Db, Error> {
    existing(db)?;
    crate::pipeline::store::open(db, crate::pipeline::store::DEFAULT_BUSY_TIMEOUT_MS)
        .map_err(|error| env_error(db, error))
}

/// [`existing_inbox`] for either backend: a PostgreSQL inbox is one whose database has the
/// `applications` table.
pub(super) fn existing(db: &InboxAt) -> Result<(), Error> {
    checked(db)?;
    match db {
        InboxAt::Sqlite(path) => Ok(existing_inbox(path)?),
        InboxAt::Postgres(url) => {
            let pg = Db::Postgres(Box::new(
                Pg::connect(url).map_err(|error| env_error(db, error))?,
            ));
            let found = pg
                .row(
                    "SELECT count(*) FROM information_schema.tables
                     WHERE table_schema = current_schema() AND table_name = 'applications'",
                    &[],
                )
                .and_then(|row| row.map_or(Ok(0), |row| row.int(0)))
                .map_err(|error| env_error(db, error))?;
            if found == 0 {
                return Err(InputError::invalid(
                    Path::new("--db"),
                    "command line",
                    format!(
                        "{db} is not an arrival inbox (it has no applications table): run \
                         `arrival pipeline init --db URL --fixture FIXTURE --keys-out KEYS` first"
                    ),
                )
                .into());
            }
            Ok(())
        }
    }
}

/// Refuses a `--db` that is not an inbox yet: only `pipeline init` creates one, so a
/// mistyped path, or another file (empty, or a database of something else), is bad input
/// (exit 2) rather than becoming a new, empty inbox with no applications registered. An
/// inbox is a SQLite database with the `applications` table; the check opens the file
/// without the right to create it and only reads. An inbox written by a newer arrival
/// (a schema version this build does not know) is bad input too.
pub(super) fn existing_inbox(db: &Path) -> Result<(), InputError> {
    use rusqlite::OpenFlags;
    let refuse = |what: String| {
        InputError::invalid(
            Path::new("--db"),
            "command line",
            format!(
                "{what}: run `arrival pipeline init --db {} --fixture FIXTURE --keys-out KEYS` first",
                db.display()
            ),
        )
    };
    if !db.exists() {
        return Err(refuse(format!("no inbox at {}", db.display())));
    }
    let version = rusqlite::Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .and_then(|conn| crate::pipeline::schema::version(&conn))
    .map_err(|error| {
        refuse(format!(
            "{} is not an arrival inbox ({error})",
            db.display()
        ))
    })?;
    if version == 0 {
        return Err(refuse(format!(
            "{} is not an arrival inbox (it has no applications table)",
            db.display()
        )));
    }
    let known = crate::pipeline::schema::CURRENT;
    if version > known {
        let newer = crate::pipeline::schema::SchemaError::Newer {
            found: version,
            known,
        };
        return Err(InputError::invalid(db, "--db", newer.to_string()));
    }
    Ok(())
}

/// Where Redis is and which stream and group to use.
#[derive(Args, Clone, Debug)]
pub struct RedisArgs {
    /// Redis URL.
    #[arg(
        long,
        env = "ARRIVAL_REDIS_URL",
        value_parser = redis_url,
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,
    /// The stream ingress appends to (the dead-letter stream is `<stream>:dead`).
    #[arg(long, env = "ARRIVAL_STREAM", default_value = "arrival:facts")]
    pub stream: String,
    /// The consumer group.
    #[arg(long, env = "ARRIVAL_GROUP", default_value = "arrival-inbox")]
    pub group: String,
}

impl RedisArgs {
    pub(crate) fn names(&self) -> Names {
        Names {
            stream: self.stream.clone(),
            group: self.group.clone(),
        }
    }
}

/// Reads `--redis-url`: a URL that does not parse is bad input (exit 2), not a Redis that
/// does not answer.
pub(super) fn redis_url(text: &str) -> Result<String, String> {
    redis::Client::open(text)
        .map(|_| text.to_owned())
        .map_err(|error| format!("not a Redis URL: {error}"))
}
