//! The pipeline commands' shared edge: refusing a `--db` that is not an inbox (bad input,
//! exit 2) and naming a pipeline part that failed (the environment, exit 3).

use super::{EnvironmentError, Error};
use crate::harness::InputError;
use std::path::Path;

/// The environment failed while working on `what` (the inbox, Redis, a fixture's run).
pub(super) fn env_error(what: &Path, error: impl std::fmt::Display) -> Error {
    EnvironmentError::new(format!("pipeline {}", what.display()), error).into()
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
