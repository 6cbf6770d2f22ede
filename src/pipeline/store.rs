//! The durable inbox in one SQLite file: the applications, the facts keyed by
//! `(tenant_id, source, event_id)`, conflict evidence, late mismatches, open conflicts, READY marks,
//! counters and one verdict row per stream entry: how the part of the inbox one decision
//! needs is loaded and written back, the operator's upgrade, and the snapshots reports
//! read. A batch's transaction is [`batch`](super::batch)'s; the schema and its migrations
//! are [`schema`]'s.

use super::schema::{self, SchemaError};
use super::sql::{Db, InboxAt, Pg, Row, SqlError};
use crate::args;
use crate::facts::application::{AppKey, Application, Applications, Mismatch, Termination};
use crate::facts::envelope::{Envelope, FactId, Source};
use crate::facts::inbox::{
    Conflict, Counters, EntryId, Inbox, Kept, LateMismatch, Parked, Parking, Parts,
};
use rusqlite::Connection;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The default busy timeout: how long a writer waits for the lock.
pub const DEFAULT_BUSY_TIMEOUT_MS: u64 = 5_000;

/// Opens (and creates) the inbox: an SQLite file ([`open_sqlite`]) or a PostgreSQL
/// database, its schema brought to the current version; an inbox written by a newer
/// arrival is refused.
pub fn open(at: &InboxAt, busy_timeout_ms: u64) -> Result<Db, SchemaError> {
    match at {
        InboxAt::Sqlite(path) => Ok(Db::Sqlite(open_sqlite(path, busy_timeout_ms)?)),
        InboxAt::Postgres(url) => {
            let db = Db::Postgres(Box::new(Pg::connect(url)?));
            schema::migrate_postgres(&db)?;
            Ok(db)
        }
    }
}

/// Opens (and creates) an SQLite inbox: WAL, `synchronous=FULL`, a busy timeout, and the
/// schema brought to the current version ([`schema::migrate`]).
pub fn open_sqlite(path: &Path, busy_timeout_ms: u64) -> Result<Connection, SchemaError> {
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_millis(busy_timeout_ms))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    schema::migrate(&mut conn)?;
    Ok(conn)
}

/// A source's wire name read back from the inbox.
pub fn source_of(text: &str) -> Result<Source, SqlError> {
    Source::from_wire(text)
        .ok_or_else(|| SqlError::Data(format!("unknown source `{text}` in the inbox")))
}

fn envelope_of(source: &str, canonical: &str) -> Result<Envelope, SqlError> {
    Envelope::parse(canonical.as_bytes(), source_of(source)?)
        .map_err(|error| SqlError::Data(format!("a stored envelope no longer parses: {error}")))
}

fn mismatch_of(text: &str) -> Mismatch {
    match text {
        "unknown_application" => Mismatch::UnknownApplication,
        "business_key_mismatch" => Mismatch::BusinessKeyMismatch,
        _ => Mismatch::MaterialVersionMismatch,
    }
}

/// Whether a failed transaction may simply run again: only a database's refusal of a race
/// ([`SqlError::is_retryable`]), and only for work with no effect outside the database.
pub trait Retry {
    /// Run the whole transaction again.
    fn retry(&self) -> bool;
}

impl Retry for SqlError {
    fn retry(&self) -> bool {
        self.is_retryable()
    }
}

/// How often [`in_transaction`] runs work that a race refused before it gives up.
const TRANSACTION_ATTEMPTS: u32 = 20;

/// Runs `work` in one write transaction ([`Db::begin`]): committed when it returns `Ok`,
/// rolled back otherwise. A transaction PostgreSQL refused as a race with the consumers
/// (SERIALIZABLE) runs again from the start, up to 20 times, when `E` says it may.
pub fn in_transaction<T, E: From<SqlError> + Retry>(
    db: &Db,
    mut work: impl FnMut(&Db) -> Result<T, E>,
) -> Result<T, E> {
    let mut attempt = 1;
    loop {
        let result = db.begin().map_err(E::from).and_then(|()| {
            let value = work(db)?;
            db.commit().map_err(E::from)?;
            Ok(value)
        });
        match result {
            Ok(value) => return Ok(value),
            Err(error) => {
                db.rollback();
                if !error.retry() || attempt >= TRANSACTION_ATTEMPTS {
                    return Err(error);
                }
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(u64::from(attempt) * 5));
            }
        }
    }
}

/// Registers new applications, all or none, bumping the version ingress caches against.
/// An application already there is an error (a constraint violation), never replaced: a
/// replacement could move its material version backwards behind READY's back.
pub fn put_applications(db: &Db, apps: &Applications) -> Result<(), SqlError> {
    in_transaction(db, |db| {
        for (key, app) in apps.iter() {
            db.exec(
                "INSERT INTO applications (tenant_id, application_id, business_key, material_version)
                 VALUES (?1, ?2, ?3, ?4)",
                args![
                    &key.tenant_id,
                    &key.application_id,
                    &app.business_key,
                    app.material_version as i64
                ],
            )?;
        }
        bump_applications(db)
    })
}

/// Empties a scratch inbox (a load run's or a drill's `--scratch-db`): every row of every
/// table the inbox writes. Never called on an inbox someone named as theirs.
pub fn empty_scratch(db: &Db) -> Result<(), SqlError> {
    const TABLES: &[&str] = &[
        "applications",
        "facts",
        "evidence",
        "late_mismatches",
        "ready",
        "counters",
        "verdicts",
        "meta",
        "decision_failures",
        "parked",
        "conflicts",
        "resolutions",
        "ready_history",
        "receipts",
        "dead_letter_actions",
    ];
    for table in TABLES {
        db.exec(&format!("DELETE FROM {table}"), &[])?;
    }
    Ok(())
}

/// Bumps the version of the application table, which ingress caches against.
pub(super) fn bump_applications(db: &Db) -> Result<(), SqlError> {
    db.exec(
        "INSERT INTO meta VALUES ('applications', 1)
         ON CONFLICT (name) DO UPDATE SET value = meta.value + 1",
        &[],
    )?;
    Ok(())
}

/// The version of the application table (changes on every registration or upgrade).
pub fn applications_version(db: &Db) -> Result<i64, SqlError> {
    db.row("SELECT value FROM meta WHERE name = 'applications'", &[])?
        .map_or(Ok(0), |row| row.int(0))
}

/// Every application.
pub fn applications(db: &Db) -> Result<Applications, SqlError> {
    let mut apps = Applications::new();
    for row in db.rows(
        "SELECT business_key, material_version, terminated_reason, terminated_at,
                tenant_id, application_id FROM applications",
        &[],
    )? {
        let key = AppKey {
            tenant_id: row.text(4)?,
            application_id: row.text(5)?,
        };
        apps.insert(key, application_of(&row)?);
    }
    Ok(apps)
}

fn application(db: &Db, key: &AppKey) -> Result<Option<Application>, SqlError> {
    db.row(
        "SELECT business_key, material_version, terminated_reason, terminated_at
         FROM applications WHERE tenant_id = ?1 AND application_id = ?2",
        args![&key.tenant_id, &key.application_id],
    )?
    .map(|row| application_of(&row))
    .transpose()
}

/// An application from a row `(business_key, material_version, terminated_reason,
/// terminated_at)`.
fn application_of(row: &Row) -> Result<Application, SqlError> {
    let mut application = Application::active(row.text(0)?, row.int(1)? as u64);
    application.terminated = row.opt_text(2)?.map(|reason| Termination {
        reason,
        at: row.opt_int(3).ok().flatten().unwrap_or(0),
    });
    Ok(application)
}

fn counters(db: &Db) -> Result<Counters, SqlError> {
    let mut counters = Counters::default();
    for row in db.rows("SELECT name, value FROM counters", &[])? {
        let value = row.int(1)? as u32;
        match row.text(0)?.as_str() {
            "accepted" => counters.accepted = value,
            "duplicates" => counters.duplicates = value,
            "conflicts" => counters.conflicts = value,
            "quarantined" => counters.quarantined = value,
            "after_termination" => counters.after_termination = value,
            _ => counters.late_mismatches = value,
        }
    }
    Ok(counters)
}

/// What a transaction loaded, so that its write-back knows which rows it owns.
#[derive(Clone, Debug, Default)]
pub(super) struct Loaded {
    /// The applications read from the registry (their READY marks are written back).
    pub apps: BTreeSet<AppKey>,
    /// The stream entries loaded as parked: entry `n` of the pure inbox is `entries[n - 1]`.
    pub entries: Vec<String>,
    /// Each loaded conflict's state as it was read (`true`: open).
    conflicts: BTreeMap<FactId, bool>,
}

impl Loaded {
    /// The stream entry behind the pure inbox's entry `id`, if it was loaded.
    pub fn entry(&self, id: EntryId) -> Option<&str> {
        let index = (id as usize).checked_sub(1)?;
        self.entries.get(index).map(String::as_str)
    }
}

/// Stream ids in stream order (`ms-seq`, compared as numbers, not as text).
pub(super) fn sort_stream_ids(ids: &mut [String]) {
    ids.sort_by(|a, b| super::stream::id_order(a, b));
}

fn parking_of(state: &str, mismatch: Option<&str>) -> Parking {
    match state {
        "quarantined" => Parking::Quarantined,
        "quarantine_expired" => Parking::QuarantineExpired,
        "after_termination" => Parking::AfterTermination,
        _ => Parking::LateMismatch(mismatch.map_or(Mismatch::MaterialVersionMismatch, mismatch_of)),
    }
}

fn parked_row(db: &Db, entry: &str) -> Result<Option<Parked>, SqlError> {
    let Some(row) = db.row(
        "SELECT state, mismatch, source, canonical, since FROM parked WHERE entry = ?1",
        args![entry],
    )?
    else {
        return Ok(None);
    };
    Ok(Some(Parked {
        envelope: Arc::new(envelope_of(&row.text(2)?, &row.text(3)?)?),
        why: parking_of(&row.text(0)?, row.opt_text(1)?.as_deref()),
        since: row.int(4)?,
    }))
}

fn first_fact(db: &Db, id: &FactId) -> Result<Option<Envelope>, SqlError> {
    db.row(
        "SELECT source, canonical FROM facts
         WHERE tenant_id = ?1 AND source = ?2 AND event_id = ?3",
        args![&id.tenant_id, id.source.as_str(), &id.event_id],
    )?
    .map(|row| envelope_of(&row.text(0)?, &row.text(1)?))
    .transpose()
}

/// The applications a conflict on `id` stops.
fn conflict_apps(db: &Db, id: &FactId) -> Result<BTreeSet<AppKey>, SqlError> {
    db.rows(
        "SELECT application_id FROM conflicts
         WHERE tenant_id = ?1 AND source = ?2 AND event_id = ?3",
        args![&id.tenant_id, id.source.as_str(), &id.event_id],
    )?
    .iter()
    .map(|row| {
        Ok(AppKey {
            tenant_id: id.tenant_id.clone(),
            application_id: row.text(0)?,
        })
    })
    .collect()
}

/// The last state change of the conflict on `id`: `None` when it never changed (open).
fn resolution(db: &Db, id: &FactId) -> Result<Option<(Kept, Arc<str>)>, SqlError> {
    let Some(row) = db.row(
        "SELECT kept, reason FROM resolutions
         WHERE tenant_id = ?1 AND source = ?2 AND event_id = ?3
         ORDER BY seq DESC LIMIT 1",
        args![&id.tenant_id, id.source.as_str(), &id.event_id],
    )?
    else {
        return Ok(None);
    };
    let kept = match row.opt_text(0)?.as_deref() {
        None => return Ok(None),
        Some("variant") => Kept::Variant,
        Some(_) => Kept::First,
    };
    Ok(Some((kept, Arc::from(row.text(1)?))))
}

/// The identities with a conflict on `key`.
fn conflicts_of(db: &Db, key: &AppKey) -> Result<Vec<FactId>, SqlError> {
    db.rows(
        "SELECT source, event_id FROM conflicts WHERE tenant_id = ?1 AND application_id = ?2",
        args![&key.tenant_id, &key.application_id],
    )?
    .iter()
    .map(|row| {
        Ok(FactId {
            tenant_id: key.tenant_id.clone(),
            source: source_of(&row.text(0)?)?,
            event_id: row.text(1)?,
        })
    })
    .collect()
}

fn facts_of(db: &Db, key: &AppKey) -> Result<Vec<Envelope>, SqlError> {
    envelopes(db.rows(
        "SELECT source, canonical FROM facts WHERE tenant_id = ?1 AND application_id = ?2",
        args![&key.tenant_id, &key.application_id],
    )?)
}

fn is_ready(db: &Db, key: &AppKey) -> Result<bool, SqlError> {
    Ok(db
        .row(
            "SELECT 1 FROM ready WHERE tenant_id = ?1 AND application_id = ?2",
            args![&key.tenant_id, &key.application_id],
        )?
        .is_some())
}

/// The identities a decision on `envelope` reads: its own, and for a withdrawal the one it
/// names (whose application's READY the withdrawal changes).
pub(super) fn identities_of(envelope: &Envelope) -> Vec<FactId> {
    let mut ids = vec![envelope.fact_id()];
    if let Some(event_id) = envelope.withdraws() {
        ids.push(FactId {
            tenant_id: envelope.tenant_id().to_owned(),
            source: envelope.source(),
            event_id: event_id.to_owned(),
        });
    }
    ids
}

/// Envelopes from rows `(source, canonical)`.
fn envelopes(rows: Vec<Row>) -> Result<Vec<Envelope>, SqlError> {
    rows.iter()
        .map(|row| envelope_of(&row.text(0)?, &row.text(1)?))
        .collect()
}

/// The accepted withdrawals naming `id` (from any application of its tenant).
fn withdrawals_naming(db: &Db, id: &FactId) -> Result<Vec<Envelope>, SqlError> {
    envelopes(db.rows(
        "SELECT source, canonical FROM facts WHERE tenant_id = ?1 AND source = ?2 AND withdraws = ?3",
        args![&id.tenant_id, id.source.as_str(), &id.event_id],
    )?)
}

/// The accepted withdrawals naming any fact of `key` (from any application of its tenant).
fn withdrawals_of(db: &Db, key: &AppKey) -> Result<Vec<Envelope>, SqlError> {
    envelopes(db.rows(
        "SELECT w.source, w.canonical FROM facts f JOIN facts w
           ON w.tenant_id = f.tenant_id AND w.source = f.source AND w.withdraws = f.event_id
         WHERE f.tenant_id = ?1 AND f.application_id = ?2",
        args![&key.tenant_id, &key.application_id],
    )?)
}

/// The part of the inbox a transaction needs: the stream `entries` kept parked (as the
/// pure inbox's entries 1, 2, ...), the `identities` it decides or resolves (their first
/// facts, every other content recorded under them, the withdrawals naming them), and every
/// application those name, by their facts, entries and conflicts, each loaded whole: its
/// facts, the withdrawals naming them (and those withdrawals' applications, in turn), its
/// READY mark and every conflict on it with its resolution; and the counters.
pub(super) fn load(
    conn: &Db,
    keys: &BTreeSet<AppKey>,
    identities: &[FactId],
    entries: &[String],
) -> Result<(Applications, Inbox, Loaded), SqlError> {
    let mut pending = keys.clone();
    let mut identities: BTreeSet<FactId> = identities.iter().cloned().collect();
    let mut parked = BTreeMap::new();
    for (index, entry) in entries.iter().enumerate() {
        if let Some(row) = parked_row(conn, entry)? {
            pending.insert(AppKey::of(&row.envelope));
            identities.extend(identities_of(&row.envelope));
            parked.insert(index as EntryId + 1, row);
        }
    }
    let mut facts = BTreeMap::new();
    let mut variants = Vec::new();
    // The facts a loaded withdrawal (or a withdrawal's variant) names: their applications'
    // READY depends on it, so they are loaded too.
    let mut targets: Vec<FactId> = Vec::new();
    let mut keep = |fact: Envelope, pending: &mut BTreeSet<AppKey>, targets: &mut Vec<FactId>| {
        pending.insert(AppKey::of(&fact));
        targets.extend(identities_of(&fact).into_iter().skip(1));
        facts.insert(fact.fact_id(), fact);
    };
    for id in &identities {
        if let Some(fact) = first_fact(conn, id)? {
            keep(fact, &mut pending, &mut targets);
        }
        for withdrawal in withdrawals_naming(conn, id)? {
            keep(withdrawal, &mut pending, &mut targets);
        }
        for variant in evidence_of(conn, id)? {
            targets.extend(identities_of(&variant).into_iter().skip(1));
            variants.push(variant);
        }
        pending.extend(conflict_apps(conn, id)?);
    }
    let mut apps = Applications::new();
    let mut ready = BTreeSet::new();
    let mut loaded = Loaded {
        entries: entries.to_vec(),
        ..Loaded::default()
    };
    let mut conflict_ids: BTreeSet<FactId> = identities.clone();
    let mut seen = BTreeSet::new();
    let mut seen_targets = BTreeSet::new();
    loop {
        if let Some(target) = targets.pop() {
            if seen_targets.insert(target.clone()) {
                if let Some(fact) = first_fact(conn, &target)? {
                    keep(fact, &mut pending, &mut targets);
                }
            }
            continue;
        }
        let Some(key) = pending.pop_first() else {
            break;
        };
        if !seen.insert(key.clone()) {
            continue;
        }
        let Some(app) = application(conn, &key)? else {
            continue;
        };
        apps.insert(key.clone(), app);
        for fact in facts_of(conn, &key)?
            .into_iter()
            .chain(withdrawals_of(conn, &key)?)
        {
            keep(fact, &mut pending, &mut targets);
        }
        conflict_ids.extend(conflicts_of(conn, &key)?);
        if is_ready(conn, &key)? {
            ready.insert(key.clone());
        }
        loaded.apps.insert(key);
    }
    let mut conflicts = BTreeMap::new();
    for id in conflict_ids {
        let applications = conflict_apps(conn, &id)?;
        if applications.is_empty() {
            continue;
        }
        let conflict = Conflict {
            applications,
            resolution: resolution(conn, &id)?,
        };
        loaded.conflicts.insert(id.clone(), conflict.is_open());
        conflicts.insert(id, conflict);
    }
    let inbox = Inbox::restore(Parts {
        facts: facts.into_values().collect(),
        variants,
        conflicts,
        parked,
        ready,
        counters: counters(conn)?,
        unloaded_conflicts: BTreeSet::new(),
    });
    Ok((apps, inbox, loaded))
}

/// The variants kept as evidence under `id`: a redelivered or re-sent variant is a
/// duplicate of one of them, not a new conflict. The table has no tenant column, so the
/// tenant is read from each variant.
fn evidence_of(db: &Db, id: &FactId) -> Result<Vec<Envelope>, SqlError> {
    let variants = envelopes(db.rows(
        "SELECT source, canonical FROM evidence WHERE source = ?1 AND event_id = ?2",
        args![id.source.as_str(), &id.event_id],
    )?)?;
    Ok(variants
        .into_iter()
        .filter(|variant| variant.tenant_id() == id.tenant_id)
        .collect())
}

/// Files a fact under the stream entry (or step) that made it, unless its identity holds one.
pub(super) fn insert_fact(db: &Db, fact: &Envelope, entry: &str) -> Result<(), SqlError> {
    db.exec(
        "INSERT INTO facts (source, event_id, tenant_id, application_id, canonical, entry, withdraws)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT DO NOTHING",
        args![
            fact.source().as_str(),
            fact.event_id(),
            fact.tenant_id(),
            fact.application_id(),
            fact.canonical(),
            entry,
            fact.withdraws()
        ],
    )?;
    Ok(())
}

/// Writes back what a transaction changed: new facts and evidence (filed under `cause`,
/// the stream entry decided or the operator step), late mismatches, the parked entries it
/// loaded or made, conflicts and every change of their state, the READY marks of the
/// applications loaded (each change a READY history row naming `cause`), the counters.
pub(super) fn write_back(
    db: &Db,
    inbox: &Inbox,
    loaded: &Loaded,
    cause: &str,
) -> Result<(), SqlError> {
    for fact in inbox.facts() {
        insert_fact(db, fact, cause)?;
    }
    for variant in inbox.evidence() {
        db.exec(
            "INSERT INTO evidence VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
            args![
                variant.canonical(),
                variant.source().as_str(),
                variant.event_id()
            ],
        )?;
    }
    for late in inbox.late_mismatches() {
        db.exec(
            "INSERT INTO late_mismatches VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
            args![
                late.fact.source.as_str(),
                &late.fact.event_id,
                &late.application.tenant_id,
                &late.application.application_id,
                late.material_version as i64,
                late.mismatch.as_str()
            ],
        )?;
    }
    write_parked(db, inbox, loaded, cause)?;
    write_conflicts(db, inbox, loaded, cause)?;
    write_ready(db, inbox, loaded, cause)?;
    let counters = inbox.counters();
    for (name, value) in [
        ("accepted", counters.accepted),
        ("duplicates", counters.duplicates),
        ("conflicts", counters.conflicts),
        ("late_mismatches", counters.late_mismatches),
        ("quarantined", counters.quarantined),
        ("after_termination", counters.after_termination),
    ] {
        db.exec(
            "INSERT INTO counters VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            args![name, value],
        )?;
    }
    Ok(())
}

fn write_parked(db: &Db, inbox: &Inbox, loaded: &Loaded, cause: &str) -> Result<(), SqlError> {
    for (&id, parked) in inbox.parked() {
        let envelope = &parked.envelope;
        let mismatch = match parked.why {
            Parking::LateMismatch(mismatch) => Some(mismatch.as_str()),
            _ => None,
        };
        db.exec(
            "INSERT INTO parked VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (entry) DO UPDATE SET state = excluded.state, mismatch = excluded.mismatch",
            args![
                loaded.entry(id).unwrap_or(cause),
                parked.why.as_str(),
                envelope.tenant_id(),
                envelope.source().as_str(),
                envelope.event_id(),
                envelope.application_id(),
                envelope.canonical(),
                parked.since,
                mismatch
            ],
        )?;
    }
    for (index, entry) in loaded.entries.iter().enumerate() {
        if !inbox.parked().contains_key(&(index as EntryId + 1)) {
            db.exec("DELETE FROM parked WHERE entry = ?1", args![entry])?;
        }
    }
    Ok(())
}

fn write_conflicts(db: &Db, inbox: &Inbox, loaded: &Loaded, cause: &str) -> Result<(), SqlError> {
    for (id, conflict) in inbox.conflicts() {
        for key in &conflict.applications {
            db.exec(
                "INSERT INTO conflicts VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
                args![
                    &id.tenant_id,
                    id.source.as_str(),
                    &id.event_id,
                    &key.application_id
                ],
            )?;
        }
        let was_open = loaded.conflicts.get(id).copied();
        let (kept, reason) = match (&conflict.resolution, was_open) {
            // Resolved in this transaction.
            (Some((kept, reason)), None | Some(true)) => {
                (Some(kept_word(*kept)), reason.to_string())
            }
            // Opened again by a content never seen under the identity.
            (None, Some(false)) => (None, format!("reopened by {cause}")),
            _ => continue,
        };
        db.exec(
            "INSERT INTO resolutions (tenant_id, source, event_id, kept, reason, at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            args![
                &id.tenant_id,
                id.source.as_str(),
                &id.event_id,
                kept,
                &reason,
                now_ms()
            ],
        )?;
    }
    Ok(())
}

/// The word a resolution is stored under.
pub fn kept_word(kept: Kept) -> &'static str {
    match kept {
        Kept::First => "first",
        Kept::Variant => "variant",
    }
}

fn write_ready(db: &Db, inbox: &Inbox, loaded: &Loaded, cause: &str) -> Result<(), SqlError> {
    for key in &loaded.apps {
        let ready = inbox.marked_ready(key);
        let changed = if ready {
            db.exec(
                "INSERT INTO ready VALUES (?1, ?2) ON CONFLICT DO NOTHING",
                args![&key.tenant_id, &key.application_id],
            )?
        } else {
            db.exec(
                "DELETE FROM ready WHERE tenant_id = ?1 AND application_id = ?2",
                args![&key.tenant_id, &key.application_id],
            )?
        };
        if changed > 0 {
            db.exec(
                "INSERT INTO ready_history (tenant_id, application_id, ready, cause, at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                args![&key.tenant_id, &key.application_id, ready, cause, now_ms()],
            )?;
        }
    }
    Ok(())
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// What the inbox holds, read in one snapshot: for reports, drills and `status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// `(source, event_id, canonical content)` of every fact.
    pub facts: Vec<(Source, String, String)>,
    /// Canonical content of every evidence variant.
    pub evidence: BTreeSet<String>,
    /// Late mismatches.
    pub late: BTreeSet<LateMismatch>,
    /// Applications with an open conflict.
    pub open_conflicts: BTreeSet<AppKey>,
    /// Applications marked READY.
    pub ready: BTreeSet<AppKey>,
    /// The counters.
    pub counters: Counters,
    /// Entry id -> (verdict word, processings).
    pub verdicts: std::collections::BTreeMap<String, (String, u32)>,
}

/// Reads the whole inbox, in one read transaction.
pub fn snapshot(db: &Db) -> Result<Snapshot, SqlError> {
    db.begin_read()?;
    let snapshot = read_snapshot(db);
    db.rollback();
    snapshot
}

fn read_snapshot(db: &Db) -> Result<Snapshot, SqlError> {
    let mut snapshot = Snapshot {
        counters: counters(db)?,
        ..Snapshot::default()
    };
    for row in db.rows(
        "SELECT source, event_id, canonical FROM facts ORDER BY source, event_id",
        &[],
    )? {
        snapshot
            .facts
            .push((source_of(&row.text(0)?)?, row.text(1)?, row.text(2)?));
    }
    for row in db.rows("SELECT canonical FROM evidence", &[])? {
        snapshot.evidence.insert(row.text(0)?);
    }
    for row in db.rows(
        "SELECT source, event_id, tenant_id, application_id, material_version, mismatch FROM late_mismatches",
        &[],
    )? {
        let tenant_id = row.text(2)?;
        snapshot.late.insert(LateMismatch {
            fact: FactId {
                tenant_id: tenant_id.clone(),
                source: source_of(&row.text(0)?)?,
                event_id: row.text(1)?,
            },
            application: AppKey {
                tenant_id,
                application_id: row.text(3)?,
            },
            material_version: row.int(4)? as u64,
            mismatch: mismatch_of(&row.text(5)?),
        });
    }
    for (table, set) in [
        ("open_conflicts", &mut snapshot.open_conflicts),
        ("ready", &mut snapshot.ready),
    ] {
        for row in db.rows(
            &format!("SELECT tenant_id, application_id FROM {table}"),
            &[],
        )? {
            set.insert(AppKey {
                tenant_id: row.text(0)?,
                application_id: row.text(1)?,
            });
        }
    }
    for row in db.rows("SELECT entry, verdict, processings FROM verdicts", &[])? {
        snapshot
            .verdicts
            .insert(row.text(0)?, (row.text(1)?, row.int(2)? as u32));
    }
    Ok(snapshot)
}

/// How many entries have a committed verdict.
pub fn verdict_count(db: &Db) -> Result<usize, SqlError> {
    db.row("SELECT count(*) FROM verdicts", &[])?
        .map_or(Ok(0), |row| row.int(0).map(|count| count as usize))
}

/// Request-to-commit latencies in milliseconds (first commit of each entry), sorted, with
/// the first receive and last commit times.
pub fn latencies(db: &Db) -> Result<(Vec<i64>, i64, i64), SqlError> {
    let mut latencies = Vec::new();
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    for row in db.rows(
        "SELECT committed_ms - received_ms, received_ms, committed_ms FROM verdicts
         WHERE received_ms IS NOT NULL",
        &[],
    )? {
        latencies.push(row.int(0)?);
        first = first.min(row.int(1)?);
        last = last.max(row.int(2)?);
    }
    latencies.sort_unstable();
    Ok((latencies, first, last))
}

/// The backend's consistency check: `ok`, or what is wrong ([`Db::integrity`]).
pub fn integrity(db: &Db) -> Result<String, SqlError> {
    db.integrity()
}
