//! Reads, once, the rows an explanation needs: from the inbox (applications, receipts,
//! verdicts, facts and the withdrawals naming them, conflicts, parked entries, READY
//! history) in one read transaction, and from Redis (the stream, its pending list, the
//! dead letters). The stream and the dead letters are read whole and filtered here, so the
//! cost grows with the stream (`pipeline explain` is an operator's command, not a hot path).

use super::{
    AppRow, ConflictRow, DeadRow, EntryRow, Evidence, FactRow, HistoryRow, ParkedRow, PendingRow,
    Target, VerdictRow,
};
use crate::args;
use crate::facts::application::AppKey;
use crate::facts::envelope::{parse_json_object, FactId, Source};
use crate::pipeline::receipts::{self, Receipt};
use crate::pipeline::sql::{Arg, Db, Row, SqlError};
use crate::pipeline::stream::{self, Names, RawEntry};
use std::collections::BTreeSet;

/// Why the rows could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The inbox failed.
    #[error("inbox database: {0}")]
    Db(#[from] SqlError),
    /// Redis failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// The most pending entries read (`XPENDING - + N`).
const PENDING_LIMIT: usize = 100_000;

/// Loads everything about `target` (Unix milliseconds `now_ms` kept with it).
pub fn load(
    conn: &Db,
    redis: &mut redis::Connection,
    names: &Names,
    target: Target,
    now_ms: i64,
) -> Result<Evidence, LoadError> {
    let entries: Vec<EntryRow> = stream::range_all(redis, &names.stream)?
        .iter()
        .map(entry_row)
        .collect();
    let dead: Vec<DeadRow> = stream::range_all(redis, &names.dead_letter())?
        .iter()
        .map(dead_row)
        .collect();
    let pending = match stream::pending_range(redis, names, "-", "+", PENDING_LIMIT) {
        Ok(pending) => pending,
        Err(error) if error.code() == Some("NOGROUP") => Vec::new(),
        Err(error) => return Err(error.into()),
    };
    conn.begin_read()?;
    let loaded = load_rows(conn, target, &entries, &dead);
    conn.rollback();
    let mut evidence = loaded?;
    evidence.now_ms = now_ms;
    let concerned = evidence.concerned.clone();
    let named = |tenant: &Option<String>,
                 app: &Option<String>,
                 source: &Option<String>,
                 event: &Option<String>| {
        concerned.iter().any(|k| {
            tenant.as_deref() == Some(k.tenant_id.as_str())
                && app.as_deref() == Some(k.application_id.as_str())
        }) || is_event(&evidence.target, tenant, source, event)
    };
    evidence.entries = entries
        .into_iter()
        .filter(|e| named(&e.tenant_id, &e.application_id, &e.source, &e.event_id))
        .collect();
    evidence.dead = dead
        .into_iter()
        .filter(|d| named(&d.tenant_id, &d.application_id, &d.source, &d.event_id))
        .collect();
    let mut wanted: BTreeSet<&str> = evidence.entries.iter().map(|e| e.id.as_str()).collect();
    wanted.extend(evidence.receipts.iter().filter_map(|r| r.entry.as_deref()));
    evidence.pending = pending
        .into_iter()
        .filter(|p| wanted.contains(p.id.as_str()))
        .map(|p| PendingRow {
            entry: p.id,
            consumer: p.consumer,
            idle_ms: p.idle_ms,
            deliveries: p.deliveries,
        })
        .collect();
    dedupe(&mut evidence);
    Ok(evidence)
}

/// The inbox's rows about `target`, read in the caller's read transaction.
fn load_rows(
    tx: &Db,
    target: Target,
    entries: &[EntryRow],
    dead: &[DeadRow],
) -> Result<Evidence, SqlError> {
    let concerned = concerned(tx, &target, entries, dead)?;
    let mut evidence = Evidence {
        target,
        now_ms: 0,
        applications: Vec::new(),
        concerned: concerned.clone(),
        receipts: Vec::new(),
        entries: Vec::new(),
        pending: Vec::new(),
        verdicts: Vec::new(),
        facts: Vec::new(),
        conflicts: Vec::new(),
        parked: Vec::new(),
        dead: Vec::new(),
        history: Vec::new(),
    };
    for key in &concerned {
        load_application(tx, key, &mut evidence)?;
    }
    if let Target::Event { id } = &evidence.target.clone() {
        load_event(tx, id, &mut evidence)?;
    }
    Ok(evidence)
}

fn is_event(
    target: &Target,
    tenant: &Option<String>,
    source: &Option<String>,
    event: &Option<String>,
) -> bool {
    matches!(target, Target::Event { id } if tenant.as_deref() == Some(id.tenant_id.as_str())
        && source.as_deref() == Some(id.source.as_str())
        && event.as_deref() == Some(id.event_id.as_str()))
}

fn text(entry: &RawEntry, field: &str) -> Option<String> {
    entry
        .field(field)
        .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
}

/// The ids a body names, for an entry written before ingress wrote them beside it.
fn body_ids(entry: &RawEntry) -> (Option<String>, Option<String>, Option<String>) {
    let Some(object) = entry.field("body").and_then(|b| parse_json_object(b).ok()) else {
        return (None, None, None);
    };
    let text = |name: &str| object.get(name)?.as_str().map(str::to_owned);
    (text("tenant_id"), text("application_id"), text("event_id"))
}

fn entry_row(entry: &RawEntry) -> EntryRow {
    let (tenant, app, event) = body_ids(entry);
    EntryRow {
        id: entry.id.clone(),
        source: text(entry, "source"),
        tenant_id: text(entry, "tenant_id").or(tenant),
        application_id: text(entry, "application_id").or(app),
        event_id: text(entry, "event_id").or(event),
        received_ms: text(entry, "received_ms").and_then(|ms| ms.parse().ok()),
    }
}

fn dead_row(letter: &RawEntry) -> DeadRow {
    let (tenant, app, event) = body_ids(letter);
    DeadRow {
        entry: text(letter, "entry").unwrap_or_else(|| letter.id.clone()),
        category: text(letter, "category").unwrap_or_default(),
        reason: text(letter, "reason").unwrap_or_default(),
        deliveries: text(letter, "deliveries").and_then(|n| n.parse().ok()),
        source: text(letter, "source"),
        tenant_id: text(letter, "tenant_id").or(tenant),
        application_id: app,
        event_id: text(letter, "event_id").or(event),
    }
}

/// The applications concerned: the one named, or every application the event's rows name.
fn concerned(
    conn: &Db,
    target: &Target,
    entries: &[EntryRow],
    dead: &[DeadRow],
) -> Result<Vec<AppKey>, SqlError> {
    let id = match target {
        Target::Application { key } => return Ok(vec![key.clone()]),
        Target::Event { id } => id,
    };
    let mut apps = BTreeSet::new();
    let args = args![&id.tenant_id, id.source.as_str(), &id.event_id];
    for table in ["facts", "parked", "verdicts", "receipts"] {
        let sql = format!(
            "SELECT DISTINCT application_id FROM {table}
             WHERE tenant_id = ?1 AND source = ?2 AND event_id = ?3 AND application_id IS NOT NULL"
        );
        for row in conn.rows(&sql, args)? {
            apps.insert(row.text(0)?);
        }
    }
    for e in entries {
        if is_event(target, &e.tenant_id, &e.source, &e.event_id) {
            apps.extend(e.application_id.clone());
        }
    }
    for d in dead {
        if is_event(target, &d.tenant_id, &d.source, &d.event_id) {
            apps.extend(d.application_id.clone());
        }
    }
    Ok(apps
        .into_iter()
        .map(|application_id| AppKey {
            tenant_id: id.tenant_id.clone(),
            application_id,
        })
        .collect())
}

fn source_of(text: &str) -> Result<Source, SqlError> {
    crate::pipeline::store::source_of(text)
}

/// One application's rows.
fn load_application(conn: &Db, key: &AppKey, evidence: &mut Evidence) -> Result<(), SqlError> {
    if let Some(app) = app_row(conn, key)? {
        evidence.applications.push(app);
    }
    evidence
        .receipts
        .extend(receipts::of_application(conn, key)?);
    let by_app = "tenant_id = ?1 AND application_id = ?2";
    let args = args![&key.tenant_id, &key.application_id];
    evidence.verdicts.extend(verdicts(conn, by_app, args)?);
    evidence.facts.extend(facts(
        conn,
        "f.tenant_id = ?1 AND f.application_id = ?2",
        args,
    )?);
    evidence.parked.extend(parked(conn, by_app, args)?);
    evidence.conflicts.extend(conflicts(conn, by_app, args)?);
    evidence.history.extend(history(conn, key)?);
    Ok(())
}

/// The event's own rows (a receipt or a verdict of an application the event's other rows
/// do not name, the fact and the withdrawals naming it, its conflict and parked entries).
fn load_event(conn: &Db, id: &FactId, evidence: &mut Evidence) -> Result<(), SqlError> {
    evidence
        .receipts
        .extend(receipts::list(conn, Some(id), 1_000_000)?);
    let by_id = "tenant_id = ?1 AND source = ?2 AND event_id = ?3";
    let args = args![&id.tenant_id, id.source.as_str(), &id.event_id];
    evidence.verdicts.extend(verdicts(conn, by_id, args)?);
    let fact = "f.tenant_id = ?1 AND f.source = ?2 AND (f.event_id = ?3 OR f.withdraws = ?3)";
    evidence.facts.extend(facts(conn, fact, args)?);
    evidence.parked.extend(parked(conn, by_id, args)?);
    evidence.conflicts.extend(conflicts(conn, by_id, args)?);
    Ok(())
}

fn app_row(conn: &Db, key: &AppKey) -> Result<Option<AppRow>, SqlError> {
    let Some(row) = conn.row(
        "SELECT business_key, material_version, terminated_reason, terminated_at,
                CASE WHEN EXISTS (SELECT 1 FROM ready r WHERE r.tenant_id = a.tenant_id
                                  AND r.application_id = a.application_id) THEN 1 ELSE 0 END
         FROM applications a WHERE tenant_id = ?1 AND application_id = ?2",
        args![&key.tenant_id, &key.application_id],
    )?
    else {
        return Ok(None);
    };
    let at = row.opt_int(3)?;
    Ok(Some(AppRow {
        key: key.clone(),
        business_key: row.text(0)?,
        material_version: row.int(1)? as u64,
        terminated: row.opt_text(2)?.map(|reason| (reason, at.unwrap_or(0))),
        ready: row.int(4)? != 0,
    }))
}

fn verdicts(conn: &Db, filter: &str, args: &[Arg<'_>]) -> Result<Vec<VerdictRow>, SqlError> {
    let sql = format!(
        "SELECT entry, verdict, processings, tenant_id, application_id, source, event_id,
                consumer, deliveries, received_ms, committed_ms
         FROM verdicts WHERE {filter} ORDER BY committed_ms"
    );
    conn.rows(&sql, args)?
        .iter()
        .map(|row| {
            Ok(VerdictRow {
                entry: row.text(0)?,
                verdict: row.text(1)?,
                processings: row.int(2)? as u32,
                tenant_id: row.opt_text(3)?,
                application_id: row.opt_text(4)?,
                source: row.opt_text(5)?,
                event_id: row.opt_text(6)?,
                consumer: row.opt_text(7)?,
                deliveries: row.opt_int(8)?.map(|n| n as u32),
                received_ms: row.opt_int(9)?,
                committed_ms: row.int(10)?,
            })
        })
        .collect()
}

/// Facts matching `filter` (over `f`), and the withdrawals naming them (`w`).
fn facts(conn: &Db, filter: &str, args: &[Arg<'_>]) -> Result<Vec<FactRow>, SqlError> {
    let columns = "tenant_id, source, event_id, application_id, canonical, entry, withdraws";
    let sql = format!(
        "SELECT {columns} FROM facts f WHERE {filter}
         UNION
         SELECT w.tenant_id, w.source, w.event_id, w.application_id, w.canonical, w.entry, w.withdraws
         FROM facts f JOIN facts w
           ON w.tenant_id = f.tenant_id AND w.source = f.source AND w.withdraws = f.event_id
         WHERE {filter}"
    );
    conn.rows(&sql, args)?.iter().map(fact_row).collect()
}

fn fact_row(row: &Row) -> Result<FactRow, SqlError> {
    let canonical = row.text(4)?;
    let object = parse_json_object(canonical.as_bytes()).ok();
    let field = |name: &str| object.as_ref().and_then(|o| o.get(name).cloned());
    Ok(FactRow {
        id: FactId {
            tenant_id: row.text(0)?,
            source: source_of(&row.text(1)?)?,
            event_id: row.text(2)?,
        },
        application_id: row.text(3)?,
        event_type: field("event_type")
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        material_version: field("material_version")
            .and_then(|v| v.as_u64())
            .unwrap_or(0),
        entry: row.text(5)?,
        withdraws: row.opt_text(6)?,
    })
}

fn parked(conn: &Db, filter: &str, args: &[Arg<'_>]) -> Result<Vec<ParkedRow>, SqlError> {
    let sql = format!(
        "SELECT entry, state, tenant_id, source, event_id, application_id, since, mismatch
         FROM parked WHERE {filter} ORDER BY since"
    );
    conn.rows(&sql, args)?
        .iter()
        .map(|row| {
            Ok(ParkedRow {
                entry: row.text(0)?,
                state: row.text(1)?,
                id: FactId {
                    tenant_id: row.text(2)?,
                    source: source_of(&row.text(3)?)?,
                    event_id: row.text(4)?,
                },
                application_id: row.text(5)?,
                since: row.int(6)?,
                mismatch: row.opt_text(7)?,
            })
        })
        .collect()
}

/// The conflicts whose identity has a row matching `filter` in `conflicts`, each with every
/// application it stops and its last state change.
fn conflicts(conn: &Db, filter: &str, args: &[Arg<'_>]) -> Result<Vec<ConflictRow>, SqlError> {
    let sql = format!("SELECT DISTINCT tenant_id, source, event_id FROM conflicts WHERE {filter}");
    let ids = conn
        .rows(&sql, args)?
        .iter()
        .map(|row| {
            Ok(FactId {
                tenant_id: row.text(0)?,
                source: source_of(&row.text(1)?)?,
                event_id: row.text(2)?,
            })
        })
        .collect::<Result<Vec<_>, SqlError>>()?;
    let mut out = Vec::new();
    for id in ids {
        let key = args![&id.tenant_id, id.source.as_str(), &id.event_id];
        let applications = conn
            .rows(
                "SELECT application_id FROM conflicts
                 WHERE tenant_id = ?1 AND source = ?2 AND event_id = ?3 ORDER BY application_id",
                key,
            )?
            .iter()
            .map(|row| row.text(0))
            .collect::<Result<Vec<_>, _>>()?;
        let last = conn
            .row(
                "SELECT kept, reason FROM resolutions
                 WHERE tenant_id = ?1 AND source = ?2 AND event_id = ?3 ORDER BY seq DESC LIMIT 1",
                key,
            )?
            .map(|row| Ok::<_, SqlError>((row.opt_text(0)?, row.text(1)?)))
            .transpose()?;
        let open = !matches!(&last, Some((Some(_), _)));
        let last = last.map(|(kept, reason)| match kept {
            Some(kept) => format!("resolved, kept the {kept}: {reason}"),
            None => reason,
        });
        out.push(ConflictRow {
            id,
            applications,
            open,
            last,
        });
    }
    Ok(out)
}

fn history(conn: &Db, key: &AppKey) -> Result<Vec<HistoryRow>, SqlError> {
    conn.rows(
        "SELECT ready, cause, at_ms FROM ready_history
         WHERE tenant_id = ?1 AND application_id = ?2 ORDER BY seq",
        args![&key.tenant_id, &key.application_id],
    )?
    .iter()
    .map(|row| {
        Ok(HistoryRow {
            key: key.clone(),
            ready: row.int(0)? != 0,
            cause: row.text(1)?,
            at_ms: row.int(2)?,
        })
    })
    .collect()
}

/// Rows loaded twice (for the application and for the event) kept once.
fn dedupe(evidence: &mut Evidence) {
    fn once<T: PartialEq + Clone>(rows: &mut Vec<T>) {
        let mut kept: Vec<T> = Vec::new();
        for row in rows.drain(..) {
            if !kept.contains(&row) {
                kept.push(row);
            }
        }
        *rows = kept;
    }
    once::<Receipt>(&mut evidence.receipts);
    evidence.receipts.sort_by_key(|r| r.at_ms);
    once(&mut evidence.verdicts);
    once(&mut evidence.facts);
    once(&mut evidence.parked);
    once(&mut evidence.conflicts);
}
