//! One batch's inbox transaction, decided entry by entry: a write transaction (SQLite's
//! `BEGIN IMMEDIATE`, PostgreSQL's SERIALIZABLE) in which each entry is decided by
//! [`facts::inbox::consume`](crate::facts::inbox::consume) under a savepoint of its own.
//! An entry whose decision fails while the inbox works (undecidable: a stored fact it
//! needs no longer parses, a panic, a test's injected failure) is rolled back to its
//! savepoint, its failure is recorded in `decision_failures`, and the batch goes on without
//! it. A failure of the inbox itself (busy, locked, I/O, full, corrupt, a broken schema)
//! ends the whole transaction: it is nobody's entry's fault, and the caller keeps every
//! entry pending.

use super::sql::{printable, Db, SqlError};
use super::store::{identities_of, load, now_ms, write_back};
use crate::args;
use crate::facts::application::AppKey;
use crate::facts::envelope::Envelope;
use crate::facts::inbox::{At, Verdict};
use crate::facts::mutants::{consume_under, Mutant};
use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// One stream entry to decide.
#[derive(Clone, Debug)]
pub struct Item {
    /// The stream entry id.
    pub entry: String,
    /// Its envelope.
    pub envelope: Envelope,
    /// When ingress received it (Unix milliseconds), if the entry says.
    pub received_ms: Option<i64>,
    /// The consumer deciding it (kept in its verdict row), when a consumer reads it.
    pub consumer: Option<String>,
    /// This delivery's count as Redis keeps it (this delivery included), when known.
    pub deliveries: Option<u32>,
}

/// A batch's transaction, begun: every item decided or found undecidable, not yet
/// committed. Dropping it rolls back.
pub struct Decided<'c> {
    db: &'c Db,
    open: bool,
    /// Each item's verdict, or why it could not be decided, in order.
    pub outcomes: Vec<Result<Verdict, String>>,
}

impl Decided<'_> {
    /// Commits the batch.
    pub fn commit(mut self) -> Result<(), SqlError> {
        self.open = false;
        let committed = self.db.commit();
        if committed.is_err() {
            self.db.rollback();
        }
        committed
    }
}

impl Drop for Decided<'_> {
    fn drop(&mut self) {
        if self.open {
            self.db.rollback();
        }
    }
}

/// A test's hook: the reason an item's decision must fail, or `None` (production).
pub type FailHook<'h> = &'h dyn Fn(&Item) -> Option<String>;

/// Why deciding one entry failed.
#[derive(Debug)]
enum EntryError {
    /// The inbox failed: the batch stops.
    Inbox(SqlError),
    /// This entry cannot be decided; the batch goes on without it.
    Undecidable(String),
}

impl From<SqlError> for EntryError {
    fn from(error: SqlError) -> EntryError {
        if error.is_entry_fault() {
            EntryError::Undecidable(error.to_string())
        } else {
            EntryError::Inbox(error)
        }
    }
}

/// Decides every item of a batch in one write transaction, each under its own savepoint,
/// and returns it uncommitted, so the caller commits (and only then acknowledges). `Err`
/// only when the inbox itself failed (on PostgreSQL, a serialization failure too: the
/// caller retries the batch).
pub fn decide<'c>(
    db: &'c Db,
    mutant: Option<Mutant>,
    items: &[Item],
    fail: FailHook<'_>,
) -> Result<Decided<'c>, SqlError> {
    db.begin()?;
    let mut decided = Decided {
        db,
        open: true,
        outcomes: Vec::with_capacity(items.len()),
    };
    for item in items {
        let outcome = decide_isolated(db, mutant, item, fail)?;
        decided.outcomes.push(outcome);
    }
    Ok(decided)
}

/// One item under a savepoint: released when decided, rolled back (and the failure
/// recorded) when undecidable. A panic while deciding is an undecidable entry too.
fn decide_isolated(
    db: &Db,
    mutant: Option<Mutant>,
    item: &Item,
    fail: FailHook<'_>,
) -> Result<Result<Verdict, String>, SqlError> {
    db.batch("SAVEPOINT entry")?;
    let attempt = catch_unwind(AssertUnwindSafe(|| decide_one(db, mutant, item, fail)))
        .unwrap_or_else(|panic| Err(EntryError::Undecidable(panic_text(&*panic))));
    match attempt {
        Ok(verdict) => {
            db.batch("RELEASE SAVEPOINT entry")?;
            Ok(Ok(verdict))
        }
        Err(EntryError::Inbox(error)) => Err(error),
        Err(EntryError::Undecidable(why)) => {
            db.batch("ROLLBACK TO SAVEPOINT entry; RELEASE SAVEPOINT entry")?;
            record_failure(db, item, &why)?;
            Ok(Err(why))
        }
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    format!("the decision panicked: {text}")
}

/// Loads what the decision needs, decides, writes back, records the verdict. The test hook
/// fires after the writes, so a test sees the savepoint undo them.
fn decide_one(
    conn: &Db,
    mutant: Option<Mutant>,
    item: &Item,
    fail: FailHook<'_>,
) -> Result<Verdict, EntryError> {
    let keys = BTreeSet::from([AppKey::of(&item.envelope)]);
    let (apps, mut inbox, loaded) = load(
        conn,
        &keys,
        &identities_of(&item.envelope),
        std::slice::from_ref(&item.entry),
    )?;
    let seen = conn
        .row(
            "SELECT 1 FROM verdicts WHERE entry = ?1",
            args![&item.entry],
        )?
        .is_some();
    let at = At {
        entry: 1,
        received_at: item.received_ms.unwrap_or_else(now_ms) / 1000,
    };
    let verdict = consume_under(mutant, &mut inbox, &apps, at, &item.envelope, seen);
    write_back(conn, &inbox, &loaded, &item.entry)?;
    record_verdict(conn, item, verdict)?;
    match fail(item) {
        Some(why) => Err(EntryError::Undecidable(why)),
        None => Ok(verdict),
    }
}

/// The verdict row of an entry: the first processing's verdict, identity, application,
/// consumer and delivery count; a later processing counts up and moves `last_ms`.
fn record_verdict(db: &Db, item: &Item, verdict: Verdict) -> Result<(), SqlError> {
    let envelope = &item.envelope;
    db.exec(
        "INSERT INTO verdicts (entry, verdict, processings, received_ms, committed_ms,
                               tenant_id, application_id, source, event_id, consumer,
                               deliveries, last_ms)
         VALUES (?1, ?2, 1, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?4)
         ON CONFLICT (entry) DO UPDATE
         SET processings = verdicts.processings + 1, last_ms = excluded.last_ms",
        args![
            &item.entry,
            verdict.as_str(),
            item.received_ms,
            now_ms(),
            envelope.tenant_id(),
            envelope.application_id(),
            envelope.source().as_str(),
            envelope.event_id(),
            &item.consumer,
            item.deliveries
        ],
    )?;
    Ok(())
}

/// Counts one more failed decision of the entry, with its identity and the last error.
fn record_failure(db: &Db, item: &Item, why: &str) -> Result<(), SqlError> {
    let id = item.envelope.fact_id();
    db.exec(
        "INSERT INTO decision_failures VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?6)
         ON CONFLICT (entry) DO UPDATE
         SET failures = decision_failures.failures + 1, error = excluded.error,
             last_ms = excluded.last_ms",
        args![
            &item.entry,
            &*printable(&id.tenant_id),
            id.source.as_str(),
            &*printable(&id.event_id),
            &*printable(why),
            now_ms()
        ],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::ErrorCode;

    #[test]
    fn a_value_that_no_longer_converts_is_the_entry_s_fault_and_a_busy_inbox_is_not() {
        let conversion = SqlError::Data("a stored envelope no longer parses".into());
        assert!(conversion.is_entry_fault());
        let failure = |code| {
            SqlError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error {
                    code,
                    extended_code: 0,
                },
                None,
            ))
        };
        for code in [
            ErrorCode::DatabaseBusy,
            ErrorCode::DatabaseLocked,
            ErrorCode::SystemIoFailure,
            ErrorCode::DiskFull,
            ErrorCode::DatabaseCorrupt,
            ErrorCode::CannotOpen,
            ErrorCode::Unknown,
        ] {
            assert!(!failure(code).is_entry_fault(), "{code:?}");
        }
        assert!(failure(ErrorCode::ConstraintViolation).is_entry_fault());
    }
}
