//! The durable inbox in one SQLite file: the applications, the facts keyed by
//! `(tenant_id, source, event_id)`, conflict evidence, late mismatches, open conflicts, READY marks,
//! counters and one verdict row per stream entry: how the part of the inbox one decision
//! needs is loaded and written back, the operator's upgrade, and the snapshots reports
//! read. A batch's transaction is [`batch`](super::batch)'s; the schema and its migrations
//! are [`schema`]'s.

use super::schema::{self, SchemaError};
use crate::facts::application::{AppKey, Application, Applications, Mismatch};
use crate::facts::envelope::{Envelope, FactId, Source};
use crate::facts::inbox::{Conflict, Counters, Inbox, LateMismatch, Parts};
use crate::facts::mutants::{upgrade_refreshes_ready, Mutant};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
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
            "INSERT INTO applications VALUES (?1, ?2, ?3, ?4)",
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

fn bump_applications(tx: &Connection) -> rusqlite::Result<()> {
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
        "SELECT tenant_id, application_id, business_key, material_version FROM applications",
    )?;
    let rows = statement.query_map([], |row| {
        Ok((
            AppKey {
                tenant_id: row.get(0)?,
                application_id: row.get(1)?,
            },
            Application::active(row.get::<_, String>(2)?, row.get::<_, i64>(3)? as u64),
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
        "SELECT business_key, material_version FROM applications
         WHERE tenant_id = ?1 AND application_id = ?2",
    )?
    .query_row(params![key.tenant_id, key.application_id], |row| {
        Ok(Application::active(
            row.get::<_, String>(0)?,
            row.get::<_, i64>(1)? as u64,
        ))
    })
    .optional()
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

fn has_key(conn: &Connection, table: &str, key: &AppKey) -> rusqlite::Result<bool> {
    let sql = format!("SELECT 1 FROM {table} WHERE tenant_id = ?1 AND application_id = ?2");
    conn.prepare_cached(&sql)?
        .query_row(params![key.tenant_id, key.application_id], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
}

/// The part of the inbox a decision on `envelope` (or an upgrade of `keys`) needs: the
/// applications named, their facts, the fact already filed under the envelope's identity,
/// their open conflicts and READY marks, and the counters.
pub(super) fn load(
    conn: &Connection,
    keys: &BTreeSet<AppKey>,
    identity: Option<&FactId>,
) -> rusqlite::Result<(Applications, Inbox, BTreeSet<AppKey>)> {
    let mut keys = keys.clone();
    let mut facts = Vec::new();
    let mut evidence = Vec::new();
    if let Some(id) = identity {
        let first = conn
            .prepare_cached(
                "SELECT source, canonical FROM facts
                 WHERE tenant_id = ?1 AND source = ?2 AND event_id = ?3",
            )?
            .query_row(
                params![id.tenant_id, id.source.as_str(), id.event_id],
                |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)),
            )
            .optional()?;
        if let Some((source, canonical)) = first {
            let fact = envelope_of(&source, &canonical)?;
            keys.insert(AppKey::of(&fact));
        }
        evidence = evidence_of(conn, id)?;
    }
    let mut apps = Applications::new();
    let mut open_conflicts = BTreeSet::new();
    let mut ready = BTreeSet::new();
    let mut loaded = BTreeSet::new();
    for key in &keys {
        let Some(app) = application(conn, key)? else {
            continue;
        };
        apps.insert(key.clone(), app);
        loaded.insert(key.clone());
        let mut statement = conn.prepare_cached(
            "SELECT source, canonical FROM facts WHERE tenant_id = ?1 AND application_id = ?2",
        )?;
        let rows = statement.query_map(params![key.tenant_id, key.application_id], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })?;
        for row in rows {
            let (source, canonical) = row?;
            facts.push(envelope_of(&source, &canonical)?);
        }
        if has_key(conn, "open_conflicts", key)? {
            open_conflicts.insert(key.clone());
        }
        if has_key(conn, "ready", key)? {
            ready.insert(key.clone());
        }
    }
    // The pipeline never resolves a conflict yet: an identity with variants has an open
    // one, on the applications of its fact and of its variants.
    let mut conflicts: BTreeMap<FactId, Conflict> = BTreeMap::new();
    for variant in &evidence {
        let conflict = conflicts.entry(variant.fact_id()).or_default();
        conflict.applications.insert(AppKey::of(variant));
        let first = facts
            .iter()
            .find(|fact| fact.fact_id() == variant.fact_id());
        conflict.applications.extend(first.map(AppKey::of));
    }
    conflicts.retain(|_, conflict| {
        conflict
            .applications
            .iter()
            .any(|key| open_conflicts.contains(key))
    });
    let unloaded_conflicts = open_conflicts
        .iter()
        .filter(|key| !conflicts.values().any(|c| c.applications.contains(*key)))
        .cloned()
        .collect();
    let inbox = Inbox::restore(Parts {
        facts,
        variants: evidence,
        conflicts,
        parked: BTreeMap::new(),
        ready,
        counters: counters(conn)?,
        unloaded_conflicts,
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

/// Writes back what a decision changed: new facts, evidence, late mismatches, conflicts,
/// the READY marks of the applications loaded, the counters.
pub(super) fn write_back(
    conn: &Connection,
    inbox: &Inbox,
    loaded: &BTreeSet<AppKey>,
    entry: &str,
) -> rusqlite::Result<()> {
    for fact in inbox.facts() {
        conn.prepare_cached(
            "INSERT INTO facts VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
        )?
        .execute(params![
            fact.source().as_str(),
            fact.event_id(),
            fact.tenant_id(),
            fact.application_id(),
            fact.canonical(),
            entry
        ])?;
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
    for parked in inbox.parked().values() {
        let envelope = &parked.envelope;
        conn.prepare_cached(
            "INSERT INTO parked VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT DO UPDATE SET state = ?2",
        )?
        .execute(params![
            entry,
            parked.why.as_str(),
            envelope.tenant_id(),
            envelope.source().as_str(),
            envelope.event_id(),
            envelope.application_id(),
            envelope.canonical(),
            parked.since
        ])?;
    }
    for key in inbox.open_conflicts() {
        conn.prepare_cached("INSERT INTO open_conflicts VALUES (?1, ?2) ON CONFLICT DO NOTHING")?
            .execute(params![key.tenant_id, key.application_id])?;
    }
    for key in loaded {
        if inbox.marked_ready(key) {
            conn.prepare_cached("INSERT INTO ready VALUES (?1, ?2) ON CONFLICT DO NOTHING")?
                .execute(params![key.tenant_id, key.application_id])?;
        } else {
            conn.prepare_cached("DELETE FROM ready WHERE tenant_id = ?1 AND application_id = ?2")?
                .execute(params![key.tenant_id, key.application_id])?;
        }
    }
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

/// Now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// A material upgrade in one transaction: the application's version moves forward and its
/// READY mark is recomputed. `Ok(Err(why))` when the upgrade is refused.
pub fn upgrade(
    conn: &mut Connection,
    key: &AppKey,
    to: u64,
    mutant: Option<Mutant>,
) -> rusqlite::Result<Result<u64, String>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let (mut apps, mut inbox, loaded) = load(&tx, &BTreeSet::from([key.clone()]), None)?;
    let from = match apps.upgrade(key, to) {
        Ok(from) => from,
        Err(error) => return Ok(Err(error.to_string())),
    };
    tx.execute(
        "UPDATE applications SET material_version = ?3 WHERE tenant_id = ?1 AND application_id = ?2",
        params![key.tenant_id, key.application_id, to as i64],
    )?;
    if upgrade_refreshes_ready(mutant) {
        inbox.refresh_ready(&apps);
    }
    write_back(&tx, &inbox, &loaded, "")?;
    bump_applications(&tx)?;
    tx.commit()?;
    Ok(Ok(from))
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
