//! The durable inbox in one SQLite file: the applications, the facts keyed by
//! `(tenant_id, source, event_id)`, conflict evidence, late mismatches, open conflicts, READY marks,
//! counters and one verdict row per stream entry: how the part of the inbox one decision
//! needs is loaded and written back, the operator's upgrade, and the snapshots reports
//! read. A batch's transaction is [`batch`](super::batch)'s; the schema and its migrations
//! are [`schema`]'s.

use super::schema::{self, SchemaError};
use crate::facts::application::{AppKey, Application, Applications, Mismatch, Termination};
use crate::facts::envelope::{Envelope, FactId, Source};
use crate::facts::inbox::{
    Conflict, Counters, EntryId, Inbox, Kept, LateMismatch, Parked, Parking, Parts,
};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The default busy timeout: how long a writer waits for the lock.
pub const DEFAULT_BUSY_TIMEOUT_MS: u64 = 5_000;

/// Opens (and creates) the inbox database: WAL, `synchronous=FULL`, a busy timeout, and
/// the schema brought to the current version ([`schema::migrate`]); an inbox written by a
/// newer arrival is refused.
pub fn open(path: &Path, busy_timeout_ms: u64) -> Result<Connection, SchemaError> {
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_millis(busy_timeout_ms))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    schema::migrate(&mut conn)?;
    Ok(conn)
}

fn source_of(text: &str) -> rusqlite::Result<Source> {
    Source::from_wire(text).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("unknown source `{text}` in the inbox").into(),
        )
    })
}

fn envelope_of(source: &str, canonical: &str) -> rusqlite::Result<Envelope> {
    Envelope::parse(canonical.as_bytes(), source_of(source)?).map_err(|error| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("a stored envelope no longer parses: {error}").into(),
        )
    })
}

fn mismatch_of(text: &str) -> Mismatch {
    match text {
        "unknown_application" => Mismatch::UnknownApplication,
        "business_key_mismatch" => Mismatch::BusinessKeyMismatch,
        _ => Mismatch::MaterialVersionMismatch,
    }
}

/// Registers new applications, all or none, bumping the version ingress caches against.
/// An application already there is an error (a constraint violation), never replaced: a
/// replacement could move its material version backwards behind READY's back.
pub fn put_applications(conn: &mut Connection, apps: &Applications) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for (key, app) in apps.iter() {
        tx.execute(
            "INSERT INTO applications (tenant_id, application_id, business_key, material_version)
             VALUES (?1, ?2, ?3, ?4)",
            params![
                key.tenant_id,
                key.application_id,
                app.business_key,
                app.material_version as i64
            ],
        )?;
    }
    bump_applications(&tx)?;
    tx.commit()
}

/// Bumps the version of the application table, which ingress caches against.
pub(super) fn bump_applications(tx: &Connection) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO meta VALUES ('applications', 1)
         ON CONFLICT DO UPDATE SET value = value + 1",
        [],
    )?;
    Ok(())
}

/// The version of the application table (changes on every registration or upgrade).
pub fn applications_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row(
        "SELECT value FROM meta WHERE name = 'applications'",
        [],
        |row| row.get(0),
    )
    .optional()
    .map(|value| value.unwrap_or(0))
}

/// Every application.
pub fn applications(conn: &Connection) -> rusqlite::Result<Applications> {
    let mut statement = conn.prepare_cached(
        "SELECT business_key, material_version, terminated_reason, terminated_at,
                tenant_id, application_id FROM applications",
    )?;
    let rows = statement.query_map([], |row| {
        Ok((
            AppKey {
                tenant_id: row.get(4)?,
                application_id: row.get(5)?,
            },
            application_of(row)?,
        ))
    })?;
    let mut apps = Applications::new();
    for row in rows {
        let (key, app) = row?;
        apps.insert(key, app);
    }
    Ok(apps)
}

fn application(conn: &Connection, key: &AppKey) -> rusqlite::Result<Option<Application>> {
    conn.prepare_cached(
        "SELECT business_key, material_version, terminated_reason, terminated_at
         FROM applications WHERE tenant_id = ?1 AND application_id = ?2",
    )?
    .query_row(params![key.tenant_id, key.application_id], application_of)
    .optional()
}

/// An application from a row `(business_key, material_version, terminated_reason,
/// terminated_at)`.
fn application_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<Application> {
    let mut application =
        Application::active(row.get::<_, String>(0)?, row.get::<_, i64>(1)? as u64);
    let reason: Option<String> = row.get(2)?;
    application.terminated = reason.map(|reason| Termination {
        reason,
        at: row.get::<_, Option<i64>>(3).ok().flatten().unwrap_or(0),
    });
    Ok(application)
}

fn counters(conn: &Connection) -> rusqlite::Result<Counters> {
    let mut counters = Counters::default();
    let mut statement = conn.prepare_cached("SELECT name, value FROM counters")?;
    let rows = statement.query_map([], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
    })?;
    for row in rows {
        let (name, value) = row?;
        let value = value as u32;
        match name.as_str() {
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

fn parked_row(conn: &Connection, entry: &str) -> rusqlite::Result<Option<Parked>> {
    let row = conn
        .prepare_cached(
            "SELECT state, mismatch, source, canonical, since FROM parked WHERE entry = ?1",
        )?
        .query_row([entry], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, Option<String>>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
                row.get::<_, i64>(4)?,
            ))
        })
        .optional()?;
    let Some((state, mismatch, source, canonical, since)) = row else {
        return Ok(None);
    };
    Ok(Some(Parked {
        envelope: Arc::new(envelope_of(&source, &canonical)?),
        why: parking_of(&state, mismatch.as_deref()),
        since,
    }))
}

fn first_fact(conn: &Connection, id: &FactId) -> rusqlite::Result<Option<Envelope>> {
    let row = conn
        .prepare_cached(
            "SELECT source, canonical FROM facts
             WHERE tenant_id = ?1 AND source = ?2 AND event_id = ?3",
        )?
        .query_row(
            params![id.tenant_id, id.source.as_str(), id.event_id],
            |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)),
        )
        .optional()?;
    row.map(|(source, canonical)| envelope_of(&source, &canonical))
        .transpose()
}

/// The applications a conflict on `id` stops.
fn conflict_apps(conn: &Connection, id: &FactId) -> rusqlite::Result<BTreeSet<AppKey>> {
    let mut statement = conn.prepare_cached(
        "SELECT application_id FROM conflicts
         WHERE tenant_id = ?1 AND source = ?2 AND event_id = ?3",
    )?;
    let rows = statement.query_map(
        params![id.tenant_id, id.source.as_str(), id.event_id],
        |row| row.get::<_, String>(0),
    )?;
    rows.map(|row| {
        row.map(|application_id| AppKey {
            tenant_id: id.tenant_id.clone(),
            application_id,
        })
    })
    .collect()
}

/// The last state change of the conflict on `id`: `None` when it never changed (open).
fn resolution(conn: &Connection, id: &FactId) -> rusqlite::Result<Option<(Kept, Arc<str>)>> {
    let row = conn
        .prepare_cached(
            "SELECT kept, reason FROM resolutions
             WHERE tenant_id = ?1 AND source = ?2 AND event_id = ?3
             ORDER BY seq DESC LIMIT 1",
        )?
        .query_row(
            params![id.tenant_id, id.source.as_str(), id.event_id],
            |row| Ok((row.get::<_, Option<String>>(0)?, row.get::<_, String>(1)?)),
        )
        .optional()?;
    Ok(row.and_then(|(kept, reason)| {
        let kept = match kept.as_deref()? {
            "variant" => Kept::Variant,
            _ => Kept::First,
        };
        Some((kept, Arc::from(reason)))
    }))
}

/// The identities with a conflict on `key`.
fn conflicts_of(conn: &Connection, key: &AppKey) -> rusqlite::Result<Vec<FactId>> {
    let mut statement = conn.prepare_cached(
        "SELECT source, event_id FROM conflicts WHERE tenant_id = ?1 AND application_id = ?2",
    )?;
    let rows = statement.query_map(params![key.tenant_id, key.application_id], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
    })?;
    let mut ids = Vec::new();
    for row in rows {
        let (source, event_id) = row?;
        ids.push(FactId {
            tenant_id: key.tenant_id.clone(),
            source: source_of(&source)?,
            event_id,
        });
    }
    Ok(ids)
}

fn facts_of(conn: &Connection, key: &AppKey) -> rusqlite::Result<Vec<Envelope>> {
    let mut statement = conn.prepare_cached(
        "SELECT source, canonical FROM facts WHERE tenant_id = ?1 AND application_id = ?2",
    )?;
    rows_of(&mut statement, params![key.tenant_id, key.application_id])
}

fn is_ready(conn: &Connection, key: &AppKey) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM ready WHERE tenant_id = ?1 AND application_id = ?2")?
        .query_row(params![key.tenant_id, key.application_id], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
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

fn rows_of(
    statement: &mut rusqlite::CachedStatement<'_>,
    args: impl rusqlite::Params,
) -> rusqlite::Result<Vec<Envelope>> {
    let rows = statement.query_map(args, |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (source, canonical) = row?;
        out.push(envelope_of(&source, &canonical)?);
    }
    Ok(out)
}

/// The accepted withdrawals naming `id` (from any application of its tenant).
fn withdrawals_naming(conn: &Connection, id: &FactId) -> rusqlite::Result<Vec<Envelope>> {
    let mut statement = conn.prepare_cached(
        "SELECT source, canonical FROM facts WHERE tenant_id = ?1 AND source = ?2 AND withdraws = ?3",
    )?;
    rows_of(
        &mut statement,
        params![id.tenant_id, id.source.as_str(), id.event_id],
    )
}

/// The accepted withdrawals naming any fact of `key` (from any application of its tenant).
fn withdrawals_of(conn: &Connection, key: &AppKey) -> rusqlite::Result<Vec<Envelope>> {
    let mut statement = conn.prepare_cached(
        "SELECT w.source, w.canonical FROM facts f JOIN facts w
           ON w.tenant_id = f.tenant_id AND w.source = f.source AND w.withdraws = f.event_id
         WHERE f.tenant_id = ?1 AND f.application_id = ?2",
    )?;
    rows_of(&mut statement, params![key.tenant_id, key.application_id])
}

/// The part of the inbox a transaction needs: the stream `entries` kept parked (as the
/// pure inbox's entries 1, 2, ...), the `identities` it decides or resolves (their first
/// facts, every other content recorded under them, the withdrawals naming them), and every
/// application those name, by their facts, entries and conflicts, each loaded whole: its
/// facts, the withdrawals naming them (and those withdrawals' applications, in turn), its
/// READY mark and every conflict on it with its resolution; and the counters.
pub(super) fn load(
    conn: &Connection,
    keys: &BTreeSet<AppKey>,
    identities: &[FactId],
    entries: &[String],
) -> rusqlite::Result<(Applications, Inbox, Loaded)> {
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
fn evidence_of(conn: &Connection, id: &FactId) -> rusqlite::Result<Vec<Envelope>> {
    let mut statement = conn.prepare_cached(
        "SELECT source, canonical FROM evidence WHERE source = ?1 AND event_id = ?2",
    )?;
    let rows = statement.query_map(params![id.source.as_str(), id.event_id], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
    })?;
    let mut variants = Vec::new();
    for row in rows {
        let (source, canonical) = row?;
        let variant = envelope_of(&source, &canonical)?;
        if variant.tenant_id() == id.tenant_id {
            variants.push(variant);
        }
    }
    Ok(variants)
}

/// Files a fact under the stream entry (or step) that made it, unless its identity holds one.
pub(super) fn insert_fact(conn: &Connection, fact: &Envelope, entry: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO facts (source, event_id, tenant_id, application_id, canonical, entry, withdraws)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT DO NOTHING",
    )?
    .execute(params![
        fact.source().as_str(),
        fact.event_id(),
        fact.tenant_id(),
        fact.application_id(),
        fact.canonical(),
        entry,
        fact.withdraws()
    ])?;
    Ok(())
}

/// Writes back what a transaction changed: new facts and evidence (filed under `cause`,
/// the stream entry decided or the operator step), late mismatches, the parked entries it
/// loaded or made, conflicts and every change of their state, the READY marks of the
/// applications loaded (each change a READY history row naming `cause`), the counters.
pub(super) fn write_back(
    conn: &Connection,
    inbox: &Inbox,
    loaded: &Loaded,
    cause: &str,
) -> rusqlite::Result<()> {
    for fact in inbox.facts() {
        insert_fact(conn, fact, cause)?;
    }
    for variant in inbox.evidence() {
        conn.prepare_cached("INSERT INTO evidence VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING")?
            .execute(params![
                variant.canonical(),
                variant.source().as_str(),
                variant.event_id()
            ])?;
    }
    for late in inbox.late_mismatches() {
        conn.prepare_cached(
            "INSERT INTO late_mismatches VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
        )?
        .execute(params![
            late.fact.source.as_str(),
            late.fact.event_id,
            late.application.tenant_id,
            late.application.application_id,
            late.material_version as i64,
            late.mismatch.as_str()
        ])?;
    }
    write_parked(conn, inbox, loaded, cause)?;
    write_conflicts(conn, inbox, loaded, cause)?;
    write_ready(conn, inbox, loaded, cause)?;
    let counters = inbox.counters();
    for (name, value) in [
        ("accepted", counters.accepted),
        ("duplicates", counters.duplicates),
        ("conflicts", counters.conflicts),
        ("late_mismatches", counters.late_mismatches),
        ("quarantined", counters.quarantined),
        ("after_termination", counters.after_termination),
    ] {
        conn.prepare_cached(
            "INSERT INTO counters VALUES (?1, ?2) ON CONFLICT DO UPDATE SET value = ?2",
        )?
        .execute(params![name, value as i64])?;
    }
    Ok(())
}

fn write_parked(
    conn: &Connection,
    inbox: &Inbox,
    loaded: &Loaded,
    cause: &str,
) -> rusqlite::Result<()> {
    for (&id, parked) in inbox.parked() {
        let envelope = &parked.envelope;
        let mismatch = match parked.why {
            Parking::LateMismatch(mismatch) => Some(mismatch.as_str()),
            _ => None,
        };
        conn.prepare_cached(
            "INSERT INTO parked VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT DO UPDATE SET state = ?2, mismatch = ?9",
        )?
        .execute(params![
            loaded.entry(id).unwrap_or(cause),
            parked.why.as_str(),
            envelope.tenant_id(),
            envelope.source().as_str(),
            envelope.event_id(),
            envelope.application_id(),
            envelope.canonical(),
            parked.since,
            mismatch
        ])?;
    }
    for (index, entry) in loaded.entries.iter().enumerate() {
        if !inbox.parked().contains_key(&(index as EntryId + 1)) {
            conn.prepare_cached("DELETE FROM parked WHERE entry = ?1")?
                .execute([entry])?;
        }
    }
    Ok(())
}

fn write_conflicts(
    conn: &Connection,
    inbox: &Inbox,
    loaded: &Loaded,
    cause: &str,
) -> rusqlite::Result<()> {
    for (id, conflict) in inbox.conflicts() {
        for key in &conflict.applications {
            conn.prepare_cached(
                "INSERT INTO conflicts VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
            )?
            .execute(params![
                id.tenant_id,
                id.source.as_str(),
                id.event_id,
                key.application_id
            ])?;
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
        conn.prepare_cached(
            "INSERT INTO resolutions (tenant_id, source, event_id, kept, reason, at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            id.tenant_id,
            id.source.as_str(),
            id.event_id,
            kept,
            reason,
            now_ms()
        ])?;
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

fn write_ready(
    conn: &Connection,
    inbox: &Inbox,
    loaded: &Loaded,
    cause: &str,
) -> rusqlite::Result<()> {
    for key in &loaded.apps {
        let ready = inbox.marked_ready(key);
        let changed = if ready {
            conn.prepare_cached("INSERT INTO ready VALUES (?1, ?2) ON CONFLICT DO NOTHING")?
                .execute(params![key.tenant_id, key.application_id])?
        } else {
            conn.prepare_cached("DELETE FROM ready WHERE tenant_id = ?1 AND application_id = ?2")?
                .execute(params![key.tenant_id, key.application_id])?
        };
        if changed > 0 {
            conn.prepare_cached(
                "INSERT INTO ready_history (tenant_id, application_id, ready, cause, at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                key.tenant_id,
                key.application_id,
                ready,
                cause,
                now_ms()
            ])?;
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

/// Reads the whole inbox.
pub fn snapshot(conn: &mut Connection) -> rusqlite::Result<Snapshot> {
    let tx = conn.transaction()?;
    let mut snapshot = Snapshot {
        counters: counters(&tx)?,
        ..Snapshot::default()
    };
    {
        let mut statement =
            tx.prepare("SELECT source, event_id, canonical FROM facts ORDER BY source, event_id")?;
        let rows = statement.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
            ))
        })?;
        for row in rows {
            let (source, event_id, canonical) = row?;
            snapshot
                .facts
                .push((source_of(&source)?, event_id, canonical));
        }
        let mut statement = tx.prepare("SELECT canonical FROM evidence")?;
        for row in statement.query_map([], |row| row.get::<_, String>(0))? {
            snapshot.evidence.insert(row?);
        }
        let mut statement = tx.prepare(
            "SELECT source, event_id, tenant_id, application_id, material_version, mismatch FROM late_mismatches",
        )?;
        let rows = statement.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
                row.get::<_, i64>(4)?,
                row.get::<_, String>(5)?,
            ))
        })?;
        for row in rows {
            let (source, event_id, tenant_id, application_id, version, mismatch) = row?;
            snapshot.late.insert(LateMismatch {
                fact: FactId {
                    tenant_id: tenant_id.clone(),
                    source: source_of(&source)?,
                    event_id,
                },
                application: AppKey {
                    tenant_id,
                    application_id,
                },
                material_version: version as u64,
                mismatch: mismatch_of(&mismatch),
            });
        }
        for (table, set) in [
            ("open_conflicts", &mut snapshot.open_conflicts),
            ("ready", &mut snapshot.ready),
        ] {
            let mut statement =
                tx.prepare(&format!("SELECT tenant_id, application_id FROM {table}"))?;
            let rows = statement.query_map([], |row| {
                Ok(AppKey {
                    tenant_id: row.get(0)?,
                    application_id: row.get(1)?,
                })
            })?;
            for row in rows {
                set.insert(row?);
            }
        }
        let mut statement = tx.prepare("SELECT entry, verdict, processings FROM verdicts")?;
        let rows = statement.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, i64>(2)?,
            ))
        })?;
        for row in rows {
            let (entry, verdict, processings) = row?;
            snapshot
                .verdicts
                .insert(entry, (verdict, processings as u32));
        }
    }
    tx.commit()?;
    Ok(snapshot)
}

/// How many entries have a committed verdict.
pub fn verdict_count(conn: &Connection) -> rusqlite::Result<usize> {
    conn.query_row("SELECT count(*) FROM verdicts", [], |row| {
        row.get::<_, i64>(0)
    })
    .map(|count| count as usize)
}

/// Request-to-commit latencies in milliseconds (first commit of each entry), sorted, with
/// the first receive and last commit times.
pub fn latencies(conn: &Connection) -> rusqlite::Result<(Vec<i64>, i64, i64)> {
    let mut statement = conn.prepare(
        "SELECT committed_ms - received_ms, received_ms, committed_ms FROM verdicts
         WHERE received_ms IS NOT NULL",
    )?;
    let mut latencies = Vec::new();
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    let rows = statement.query_map([], |row| {
        Ok((
            row.get::<_, i64>(0)?,
            row.get::<_, i64>(1)?,
            row.get::<_, i64>(2)?,
        ))
    })?;
    for row in rows {
        let (latency, received, committed) = row?;
        latencies.push(latency);
        first = first.min(received);
        last = last.max(committed);
    }
    latencies.sort_unstable();
    Ok((latencies, first, last))
}

/// `PRAGMA integrity_check`: `ok`, or what is wrong.
pub fn integrity(conn: &Connection) -> rusqlite::Result<String> {
    conn.query_row("PRAGMA integrity_check", [], |row| row.get(0))
}
