//! One batch's inbox transaction, decided entry by entry: a `BEGIN IMMEDIATE` transaction
//! in which each entry is decided by
//! [`facts::inbox::consume`](crate::facts::inbox::consume) under a savepoint of its own.
//! An entry whose decision fails while the inbox works (undecidable: a stored fact it
//! needs no longer parses, a panic, a test's injected failure) is rolled back to its
//! savepoint, its failure is recorded in `decision_failures`, and the batch goes on without
//! it. A failure of the inbox itself (busy, locked, I/O, full, corrupt, a broken schema)
//! ends the whole transaction: it is nobody's entry's fault, and the caller keeps every
//! entry pending.

use super::store::{identities_of, load, now_ms, write_back};
use crate::facts::application::AppKey;
use crate::facts::envelope::Envelope;
use crate::facts::inbox::{At, Verdict};
use crate::facts::mutants::{consume_under, Mutant};
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};
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
    tx: rusqlite::Transaction<'c>,
    /// Each item's verdict, or why it could not be decided, in order.
    pub outcomes: Vec<Result<Verdict, String>>,
}

impl Decided<'_> {
    /// Commits the batch.
    pub fn commit(self) -> rusqlite::Result<()> {
        self.tx.commit()
    }
}

/// A test's hook: the reason an item's decision must fail, or `None` (production).
pub type FailHook<'h> = &'h dyn Fn(&Item) -> Option<String>;

/// Why deciding one entry failed.
#[derive(Debug)]
enum EntryError {
    /// The inbox failed: the batch stops.
    Inbox(rusqlite::Error),
    /// This entry cannot be decided; the batch goes on without it.
    Undecidable(String),
}

impl From<rusqlite::Error> for EntryError {
    fn from(error: rusqlite::Error) -> EntryError {
        if is_entry_fault(&error) {
            EntryError::Undecidable(error.to_string())
        } else {
            EntryError::Inbox(error)
        }
    }
}

/// Whether a database error is about the data one entry's decision touched rather than
/// about the inbox. Only errors known to be of that kind are: a stored value that no longer
/// converts (a fact that no longer parses), a constraint or size limit the entry's rows
/// break. Everything else, including errors not listed, is taken as the inbox failing: the
/// entries stay pending and are retried, which can stall but never drops or dead-letters a
/// whole batch because the disk filled up.
pub fn is_entry_fault(error: &rusqlite::Error) -> bool {
    use rusqlite::Error as E;
    match error {
        E::SqliteFailure(failure, _) => matches!(
            failure.code,
            ErrorCode::ConstraintViolation | ErrorCode::TooBig | ErrorCode::TypeMismatch
        ),
        E::FromSqlConversionFailure(..)
        | E::IntegralValueOutOfRange(..)
        | E::Utf8Error(..)
        | E::NulError(..)
        | E::InvalidColumnType(..)
        | E::ToSqlConversionFailure(..) => true,
        _ => false,
    }
}

/// Decides every item of a batch in one `BEGIN IMMEDIATE` transaction, each under its own
/// savepoint, and returns it uncommitted, so the caller commits (and only then
/// acknowledges). `Err` only when the inbox itself failed.
pub fn decide<'c>(
    conn: &'c mut Connection,
    mutant: Option<Mutant>,
    items: &[Item],
    fail: FailHook<'_>,
) -> rusqlite::Result<Decided<'c>> {
    let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut outcomes = Vec::with_capacity(items.len());
    for item in items {
        outcomes.push(decide_isolated(&mut tx, mutant, item, fail)?);
    }
    Ok(Decided { tx, outcomes })
}

/// One item under a savepoint: released when decided, rolled back (and the failure
/// recorded) when undecidable. A panic while deciding is an undecidable entry too.
fn decide_isolated(
    tx: &mut rusqlite::Transaction<'_>,
    mutant: Option<Mutant>,
    item: &Item,
    fail: FailHook<'_>,
) -> rusqlite::Result<Result<Verdict, String>> {
    let savepoint = tx.savepoint()?;
    let attempt = catch_unwind(AssertUnwindSafe(|| {
        decide_one(&savepoint, mutant, item, fail)
    }))
    .unwrap_or_else(|panic| Err(EntryError::Undecidable(panic_text(&*panic))));
    match attempt {
        Ok(verdict) => {
            savepoint.commit()?;
            Ok(Ok(verdict))
        }
        Err(EntryError::Inbox(error)) => Err(error),
        Err(EntryError::Undecidable(why)) => {
            savepoint.finish()?; // rolls back to the savepoint, then releases it
            record_failure(tx, item, &why)?;
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
    conn: &Connection,
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
        .prepare_cached("SELECT 1 FROM verdicts WHERE entry = ?1")?
        .query_row([&item.entry], |_| Ok(()))
        .optional()?
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
fn record_verdict(conn: &Connection, item: &Item, verdict: Verdict) -> rusqlite::Result<()> {
    let envelope = &item.envelope;
    conn.prepare_cached(
        "INSERT INTO verdicts (entry, verdict, processings, received_ms, committed_ms,
                               tenant_id, application_id, source, event_id, consumer,
                               deliveries, last_ms)
         VALUES (?1, ?2, 1, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?4)
         ON CONFLICT DO UPDATE SET processings = processings + 1, last_ms = excluded.last_ms",
    )?
    .execute(params![
        item.entry,
        verdict.as_str(),
        item.received_ms,
        now_ms(),
        envelope.tenant_id(),
        envelope.application_id(),
        envelope.source().as_str(),
        envelope.event_id(),
        item.consumer,
        item.deliveries
    ])?;
    Ok(())
}

/// Counts one more failed decision of the entry, with its identity and the last error.
fn record_failure(conn: &Connection, item: &Item, why: &str) -> rusqlite::Result<()> {
    let id = item.envelope.fact_id();
    let now = now_ms();
    conn.prepare_cached(
        "INSERT INTO decision_failures VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?6)
         ON CONFLICT (entry) DO UPDATE
         SET failures = failures + 1, error = excluded.error, last_ms = excluded.last_ms",
    )?
    .execute(params![
        item.entry,
        id.tenant_id,
        id.source.as_str(),
        id.event_id,
        why,
        now
    ])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_that_no_longer_converts_is_the_entry_s_fault_and_a_busy_inbox_is_not() {
        let conversion = rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            "a stored envelope no longer parses".into(),
        );
        assert!(is_entry_fault(&conversion));
        let failure = |code| {
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error {
                    code,
                    extended_code: 0,
                },
                None,
            )
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
            assert!(!is_entry_fault(&failure(code)), "{code:?}");
        }
        assert!(is_entry_fault(&failure(ErrorCode::ConstraintViolation)));
    }
}
