//! The dead-letter stream (`<stream>:dead`) for people: list its letters, replay one (its
//! source and body appended to the stream again as a new entry, and the letter removed, in
//! one Lua script) or discard one (removed). Each replay and discard is a row of the
//! inbox's `dead_letter_actions` with its reason, written in a transaction that commits
//! only after Redis did the action.

use super::sql::{Db, SqlError};
use super::stream::{self, Names, RawEntry};
use crate::args;
use crate::facts::envelope::parse_json_object;
use serde::Serialize;

/// One dead letter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Letter {
    /// Its id in the dead-letter stream.
    pub id: String,
    /// The original stream entry.
    pub entry: String,
    /// `unparseable` or `undecidable`.
    pub category: String,
    /// The deliveries judged.
    pub deliveries: Option<u32>,
    /// The error.
    pub reason: String,
    /// The entry's source field.
    pub source: Option<String>,
    /// The tenant (an entry that parsed).
    pub tenant_id: Option<String>,
    /// The event id (an entry that parsed).
    pub event_id: Option<String>,
    /// The bytes of the body.
    #[serde(skip)]
    pub body: Vec<u8>,
}

fn text(entry: &RawEntry, field: &str) -> Option<String> {
    entry
        .field(field)
        .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
}

fn letter(raw: &RawEntry) -> Letter {
    Letter {
        id: raw.id.clone(),
        entry: text(raw, "entry").unwrap_or_default(),
        category: text(raw, "category").unwrap_or_default(),
        deliveries: text(raw, "deliveries").and_then(|n| n.parse().ok()),
        reason: text(raw, "reason").unwrap_or_default(),
        source: text(raw, "source"),
        tenant_id: text(raw, "tenant_id"),
        event_id: text(raw, "event_id"),
        body: raw.field("body").unwrap_or_default().to_vec(),
    }
}

/// Every dead letter, oldest first.
pub fn list(redis: &mut redis::Connection, names: &Names) -> redis::RedisResult<Vec<Letter>> {
    Ok(stream::range_all(redis, &names.dead_letter())?
        .iter()
        .map(letter)
        .collect())
}

/// Why an action could not be done.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// No dead letter holds that entry.
    #[error("no dead letter holds entry `{0}` (see `pipeline dead-letters list`)")]
    NotFound(String),
    /// Redis failed (nothing was done).
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The inbox failed (before Redis acted, nothing was done; after, see the message).
    #[error("inbox database: {0}")]
    Db(#[from] SqlError),
}

impl super::store::Retry for ActionError {
    /// Never: Redis may have acted already.
    fn retry(&self) -> bool {
        false
    }
}

const REPLAY_SCRIPT: &str = r"
local new = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))
redis.call('XDEL', KEYS[2], ARGV[1])
return new
";

fn find(redis: &mut redis::Connection, names: &Names, entry: &str) -> Result<Letter, ActionError> {
    list(redis, names)?
        .into_iter()
        .find(|letter| letter.entry == entry)
        .ok_or_else(|| ActionError::NotFound(entry.to_owned()))
}

/// Records an action in `tx` (committed by the caller after Redis acted).
fn record(
    tx: &Db,
    letter: &Letter,
    action: &str,
    new_entry: Option<&str>,
    reason: &str,
) -> Result<(), SqlError> {
    tx.exec(
        "INSERT INTO dead_letter_actions (at_ms, entry, action, new_entry, category, tenant_id,
                                          source, event_id, error, reason)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        args![
            super::store::now_ms(),
            &letter.entry,
            action,
            new_entry,
            &letter.category,
            &letter.tenant_id,
            &letter.source,
            &letter.event_id,
            &letter.reason,
            reason
        ],
    )?;
    Ok(())
}

/// Appends the dead letter of `entry` to the stream again (its source and body, a new
/// receive time, the ids the body names, and `replayed_from`), removes the letter, and
/// records it; the new entry's id. Consumers decide it like any other entry.
pub fn replay(
    redis: &mut redis::Connection,
    conn: &Db,
    names: &Names,
    entry: &str,
    reason: &str,
) -> Result<String, ActionError> {
    let letter = find(redis, names, entry)?;
    super::store::in_transaction(conn, |tx| replay_in(redis, tx, names, &letter, reason))
}

fn replay_in(
    redis: &mut redis::Connection,
    tx: &Db,
    names: &Names,
    letter: &Letter,
    reason: &str,
) -> Result<String, ActionError> {
    let script = redis::Script::new(REPLAY_SCRIPT);
    let mut invocation = script.key(&names.stream);
    invocation
        .key(names.dead_letter())
        .arg(&letter.id)
        .arg("source")
        .arg(letter.source.as_deref().unwrap_or_default())
        .arg("body")
        .arg(&letter.body)
        .arg("received_ms")
        .arg(super::store::now_ms())
        .arg("replayed_from")
        .arg(&letter.entry);
    if let Ok(object) = parse_json_object(&letter.body) {
        for name in ["tenant_id", "application_id", "event_id"] {
            if let Some(value) = object.get(name).and_then(|v| v.as_str()) {
                invocation.arg(name).arg(value);
            }
        }
    }
    let new_entry: String = invocation.invoke(redis)?;
    record(tx, letter, "replay", Some(&new_entry), reason)?;
    Ok(new_entry)
}

/// Removes the dead letter of `entry` and records why.
pub fn discard(
    redis: &mut redis::Connection,
    conn: &Db,
    names: &Names,
    entry: &str,
    reason: &str,
) -> Result<Letter, ActionError> {
    let letter = find(redis, names, entry)?;
    super::store::in_transaction(conn, |tx| {
        record(tx, &letter, "discard", None, reason)?;
        redis::cmd("XDEL")
            .arg(names.dead_letter())
            .arg(&letter.id)
            .query::<i64>(redis)?;
        Ok::<_, ActionError>(())
    })?;
    Ok(letter)
}
