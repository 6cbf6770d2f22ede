//! The inbox's schema under versioned migrations, kept the way the card store keeps its
//! own (`src/store/db.rs`): numbered SQL files applied in order, each recorded in
//! `schema_migrations (version, name)`, all that are missing in ONE `BEGIN IMMEDIATE`
//! transaction, so a failing migration leaves the inbox at the version it had. An inbox
//! whose version is newer than this build knows was written by a newer arrival and is
//! refused, never guessed at.
//!
//! SQLite's migrations are the numbered files of `migrations/`; PostgreSQL's, of
//! `migrations/postgres/`, start at the schema SQLite reached at its version 7 and are
//! applied under an advisory lock ([`migrate_postgres`]).

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

/// One versioned schema migration of the inbox.
#[derive(Clone, Copy, Debug)]
pub struct Migration {
    /// Applied in increasing order; recorded in `schema_migrations`.
    pub version: i64,
    /// A short name.
    pub name: &'static str,
    /// The SQL, several statements.
    pub sql: &'static str,
    /// A step in Rust after the SQL, in the same transaction (data the SQL cannot rewrite).
    pub then: Option<fn(&Connection) -> rusqlite::Result<()>>,
}

/// The inbox's migrations, in order. Version 1 is the schema from before versioning.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "inbox",
        sql: include_str!("migrations/0001_inbox.sql"),
        then: None,
    },
    Migration {
        version: 2,
        name: "decision_failures",
        sql: include_str!("migrations/0002_decision_failures.sql"),
        then: None,
    },
    Migration {
        version: 3,
        name: "parked",
        sql: include_str!("migrations/0003_parked.sql"),
        then: None,
    },
    Migration {
        version: 4,
        name: "lifecycle",
        sql: include_str!("migrations/0004_lifecycle.sql"),
        then: Some(recanonicalize),
    },
    Migration {
        version: 5,
        name: "receipts",
        sql: include_str!("migrations/0005_receipts.sql"),
        then: None,
    },
    Migration {
        version: 6,
        name: "chain",
        sql: include_str!("migrations/0006_chain.sql"),
        then: None,
    },
    Migration {
        version: 7,
        name: "dead_letter_actions",
        sql: include_str!("migrations/0007_dead_letter_actions.sql"),
        then: None,
    },
];

/// Migration 4's data step: stored contents rewritten in the canonical text of this build
/// (numbers by the value they denote), and every variant whose content now equals its
/// identity's fact dropped with the conflict it alone had opened: an older build could
/// record `100.0` beside `100` as a conflict; this one reads them as one content.
fn recanonicalize(conn: &Connection) -> rusqlite::Result<()> {
    use crate::facts::envelope::{Envelope, Source};
    let parse = |source: &str, canonical: &str| {
        Source::from_wire(source)
            .and_then(|source| Envelope::parse(canonical.as_bytes(), source).ok())
    };
    let rows = |sql: &str| -> rusqlite::Result<Vec<(String, String, String)>> {
        let mut statement = conn.prepare(sql)?;
        let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
        rows.collect()
    };
    for (key, source, canonical) in
        rows("SELECT CAST(rowid AS TEXT), source, canonical FROM facts")?
    {
        if let Some(envelope) = parse(&source, &canonical).filter(|e| e.canonical() != canonical) {
            conn.execute(
                "UPDATE facts SET canonical = ?1 WHERE rowid = ?2",
                params![envelope.canonical(), key.parse::<i64>().unwrap_or(-1)],
            )?;
        }
    }
    for (key, source, canonical) in rows("SELECT entry, source, canonical FROM parked")? {
        if let Some(envelope) = parse(&source, &canonical).filter(|e| e.canonical() != canonical) {
            conn.execute(
                "UPDATE parked SET canonical = ?1 WHERE entry = ?2",
                params![envelope.canonical(), key],
            )?;
        }
    }
    for (canonical, source, _) in rows("SELECT canonical, source, '' FROM evidence")? {
        let Some(variant) = parse(&source, &canonical) else {
            continue;
        };
        let id = variant.fact_id();
        let fact: Option<(String, String)> = conn
            .query_row(
                "SELECT source, canonical FROM facts WHERE tenant_id = ?1 AND source = ?2 AND event_id = ?3",
                params![id.tenant_id, id.source.as_str(), id.event_id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?;
        let same = fact
            .and_then(|(source, text)| parse(&source, &text))
            .is_some_and(|fact| fact.same_content(&variant));
        if same || variant.canonical() != canonical {
            conn.execute("DELETE FROM evidence WHERE canonical = ?1", [&canonical])?;
        }
        if !same && variant.canonical() != canonical {
            conn.execute(
                "INSERT OR IGNORE INTO evidence VALUES (?1, ?2, ?3)",
                params![variant.canonical(), source, id.event_id],
            )?;
        }
    }
    conn.execute_batch(
        "DELETE FROM conflicts WHERE NOT EXISTS (
           SELECT 1 FROM evidence e
           WHERE e.source = conflicts.source AND e.event_id = conflicts.event_id
             AND json_extract(e.canonical, '$.tenant_id') = conflicts.tenant_id)",
    )
}

/// The schema version this build writes: the last migration's.
pub const CURRENT: i64 = MIGRATIONS[MIGRATIONS.len() - 1].version;

/// Why the inbox's schema could not be brought to [`CURRENT`].
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The database failed.
    #[error("inbox database: {0}")]
    Db(#[from] rusqlite::Error),
    /// The database failed (either backend, through [`Db`](super::sql::Db)).
    #[error("inbox database: {0}")]
    Sql(#[from] super::sql::SqlError),
    /// The inbox was written by a newer arrival.
    #[error(
        "the inbox has schema version {found}, and this arrival knows versions up to {known}: \
         it was written by a newer arrival; use that version (or a newer one) with it"
    )]
    Newer {
        /// The inbox's version.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
}

fn has_table(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [name],
        |_| Ok(()),
    )
    .optional()
    .map(|found| found.is_some())
}

/// The inbox's schema version: the highest recorded in `schema_migrations`; 1 for an inbox
/// from before versioning (it has `applications` and no `schema_migrations`); 0 for a
/// database with neither (new).
pub fn version(conn: &Connection) -> rusqlite::Result<i64> {
    if has_table(conn, "schema_migrations")? {
        return conn.query_row(
            "SELECT coalesce(max(version), 0) FROM schema_migrations",
            [],
            |row| row.get(0),
        );
    }
    Ok(i64::from(has_table(conn, "applications")?))
}

/// Brings the inbox to [`CURRENT`]; the version after.
pub fn migrate(conn: &mut Connection) -> Result<i64, SchemaError> {
    migrate_with(conn, MIGRATIONS)
}

/// Applies the `migrations` the inbox lacks, in order, in one transaction. A first look
/// outside any transaction lets an inbox that is current (the usual case) open without
/// taking the write lock; the version is read again under the lock, so two processes
/// opening a new inbox at once take turns and the second finds it made.
pub fn migrate_with(conn: &mut Connection, migrations: &[Migration]) -> Result<i64, SchemaError> {
    let known = migrations.last().map_or(0, |last| last.version);
    let found = version(conn)?;
    if found > known {
        return Err(SchemaError::Newer { found, known });
    }
    if found == known {
        return Ok(found);
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found = version(&tx)?;
    if found > known {
        return Err(SchemaError::Newer { found, known });
    }
    let unrecorded = !has_table(&tx, "schema_migrations")?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations \
         (version INTEGER PRIMARY KEY, name TEXT NOT NULL)",
    )?;
    for migration in migrations {
        if migration.version > found {
            tx.execute_batch(migration.sql)?;
            if let Some(then) = migration.then {
                then(&tx)?;
            }
        }
        // A version-1 inbox from before versioning has no record of what it already has.
        if migration.version > found || unrecorded {
            tx.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (?1, ?2)",
                params![migration.version, migration.name],
            )?;
        }
    }
    tx.commit()?;
    Ok(known)
}

/// PostgreSQL's migrations, in order.
pub const POSTGRES_MIGRATIONS: &[(i64, &str, &str)] = &[(
    1,
    "inbox",
    include_str!("migrations/postgres/0001_inbox.sql"),
)];

/// An advisory lock number of the inbox's schema (the card store has its own).
const PG_SCHEMA_LOCK: i64 = 0x6172_7269_7661_6c02;

/// Brings a PostgreSQL inbox to the last of [`POSTGRES_MIGRATIONS`], every missing one in
/// one transaction under an advisory lock, so consumers starting at once take turns and
/// the later ones find the schema made. A database whose recorded version is newer is
/// refused.
pub fn migrate_postgres(db: &super::sql::Db) -> Result<i64, SchemaError> {
    let known = POSTGRES_MIGRATIONS.last().map_or(0, |last| last.0);
    db.batch(&format!(
        "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock({PG_SCHEMA_LOCK});
         CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL)"
    ))?;
    let result = (|| {
        let found = db
            .row(
                "SELECT coalesce(max(version), 0) FROM schema_migrations",
                &[],
            )?
            .map_or(Ok(0), |row| row.int(0))?;
        if found > known {
            return Err(SchemaError::Newer { found, known });
        }
        for (version, name, sql) in POSTGRES_MIGRATIONS {
            if *version > found {
                db.batch(sql)?;
                db.exec(
                    "INSERT INTO schema_migrations (version, name) VALUES (?1, ?2)",
                    crate::args![*version, *name],
                )?;
            }
        }
        Ok(known)
    })();
    match result {
        Ok(version) => {
            db.commit()?;
            Ok(version)
        }
        Err(error) => {
            db.rollback();
            Err(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory() -> Connection {
        Connection::open_in_memory().unwrap()
    }

    #[test]
    fn a_new_database_gets_every_migration_recorded_in_order() {
        let mut conn = memory();
        assert_eq!(version(&conn).unwrap(), 0);
        assert_eq!(migrate(&mut conn).unwrap(), CURRENT);
        let recorded: Vec<i64> = conn
            .prepare("SELECT version FROM schema_migrations ORDER BY version")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let expected: Vec<i64> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert_eq!(recorded, expected);
        assert_eq!(
            migrate(&mut conn).unwrap(),
            CURRENT,
            "a second run is a no-op"
        );
    }

    #[test]
    fn a_failing_migration_leaves_the_inbox_at_the_version_it_had() {
        let mut conn = memory();
        migrate_with(&mut conn, &MIGRATIONS[..1]).unwrap();
        let broken = [
            MIGRATIONS[0],
            Migration {
                version: 2,
                name: "good part",
                sql: "CREATE TABLE half_done(x INTEGER);",
                then: None,
            },
            Migration {
                version: 3,
                name: "broken",
                sql: "CREATE TABLE nonsense(",
                then: None,
            },
        ];
        assert!(matches!(
            migrate_with(&mut conn, &broken),
            Err(SchemaError::Db(_))
        ));
        assert_eq!(version(&conn).unwrap(), 1);
        assert!(!has_table(&conn, "half_done").unwrap(), "rolled back whole");
    }

    #[test]
    fn an_inbox_from_a_newer_arrival_is_refused_and_left_alone() {
        let mut conn = memory();
        migrate(&mut conn).unwrap();
        conn.execute(
            "INSERT INTO schema_migrations VALUES (?1, 'from the future')",
            [CURRENT + 1],
        )
        .unwrap();
        match migrate(&mut conn) {
            Err(SchemaError::Newer { found, known }) => {
                assert_eq!((found, known), (CURRENT + 1, CURRENT));
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(version(&conn).unwrap(), CURRENT + 1);
    }
}
