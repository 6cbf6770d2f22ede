//! The operator's steps on a real inbox: register, upgrade, terminate, resolve a
//! conflict, expire quarantine, each one `BEGIN IMMEDIATE` transaction that loads what the
//! step needs, runs the pure step of [`crate::facts::operator`] (READY recomputed inside
//! it) and writes back, with the READY history naming the step; and the lists an operator
//! reads before acting (quarantine, conflicts). A refusal is `Ok(Err(why))`: the inbox is
//! left as it was.

use super::store::{
    self, bump_applications, insert_fact, load, now_ms, sort_stream_ids, write_back,
};
use crate::facts::application::{AppKey, LifecycleError};
use crate::facts::envelope::{Envelope, FactId, Source};
use crate::facts::inbox::{describe, EntryId, Kept, Verdict};
use crate::facts::mutants::{upgrade_refreshes_ready, Mutant};
use crate::facts::operator::{self, Registration};
use crate::facts::world::Policy;
use rusqlite::{params, Connection, TransactionBehavior};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// What a registration did, with the stream entries it released.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Registered {
    /// `new`, `unchanged` or `upgraded`.
    pub registered: crate::facts::application::Registered,
    /// Each quarantined entry decided again: its stream id and verdict.
    pub released: Vec<(String, Verdict)>,
}

fn immediate(conn: &mut Connection) -> rusqlite::Result<rusqlite::Transaction<'_>> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
}

/// The quarantined entries of `key`, in stream order.
fn quarantined_of(conn: &Connection, key: &AppKey) -> rusqlite::Result<Vec<String>> {
    let mut statement = conn.prepare_cached(
        "SELECT entry FROM parked
         WHERE tenant_id = ?1 AND application_id = ?2 AND state = 'quarantined'",
    )?;
    let mut entries = statement
        .query_map(params![key.tenant_id, key.application_id], |row| {
            row.get::<_, String>(0)
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    sort_stream_ids(&mut entries);
    Ok(entries)
}

/// Registers an application (new, unchanged, or moved forward; never backwards, never
/// another business key, never a terminated one) and decides its quarantined entries
/// again in stream order, in the same transaction.
pub fn register(
    conn: &mut Connection,
    key: &AppKey,
    business_key: &str,
    material_version: u64,
    mutant: Option<Mutant>,
) -> rusqlite::Result<Result<Registered, LifecycleError>> {
    let tx = immediate(conn)?;
    let entries = quarantined_of(&tx, key)?;
    let (mut apps, mut inbox, mut loaded) =
        load(&tx, &BTreeSet::from([key.clone()]), &[], &entries)?;
    let identities: BTreeMap<EntryId, FactId> = inbox
        .parked()
        .iter()
        .map(|(&id, parked)| (id, parked.envelope.fact_id()))
        .collect();
    let Registration {
        registered,
        released,
    } = match mutant.register(&mut apps, &mut inbox, key, business_key, material_version) {
        Ok(registration) => registration,
        Err(error) => return Ok(Err(error)),
    };
    let app = apps
        .get(key)
        .expect("a registered application is in the registry");
    tx.execute(
        "INSERT INTO applications (tenant_id, application_id, business_key, material_version)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT DO UPDATE SET business_key = excluded.business_key,
                                   material_version = excluded.material_version",
        params![
            key.tenant_id,
            key.application_id,
            app.business_key,
            app.material_version as i64
        ],
    )?;
    loaded.apps.insert(key.clone());
    let mut out = Vec::new();
    for (id, verdict) in released {
        let entry = loaded.entry(id).unwrap_or_default().to_owned();
        // A released entry that became a fact is filed under its own stream entry.
        if verdict == Verdict::Accepted {
            if let Some(fact) = identities.get(&id).and_then(|fact| inbox.fact(fact)) {
                insert_fact(&tx, fact, &entry)?;
            }
        }
        tx.execute(
            "UPDATE verdicts SET verdict = ?2 WHERE entry = ?1",
            params![entry, verdict.as_str()],
        )?;
        out.push((entry, verdict));
    }
    write_back(
        &tx,
        &inbox,
        &loaded,
        &format!("register {key} v{material_version}"),
    )?;
    bump_applications(&tx)?;
    tx.commit()?;
    Ok(Ok(Registered {
        registered,
        released: out,
    }))
}

/// A material upgrade: the version moves forward (never for a terminated application) and
/// READY is recomputed. Returns the version before.
pub fn upgrade(
    conn: &mut Connection,
    key: &AppKey,
    to: u64,
    mutant: Option<Mutant>,
) -> rusqlite::Result<Result<u64, LifecycleError>> {
    let tx = immediate(conn)?;
    let (mut apps, mut inbox, loaded) = load(&tx, &BTreeSet::from([key.clone()]), &[], &[])?;
    let from = match apps.upgrade(key, to) {
        Ok(from) => from,
        Err(error) => return Ok(Err(error)),
    };
    tx.execute(
        "UPDATE applications SET material_version = ?3 WHERE tenant_id = ?1 AND application_id = ?2",
        params![key.tenant_id, key.application_id, to as i64],
    )?;
    if upgrade_refreshes_ready(mutant) {
        inbox.refresh_ready(&apps);
    }
    write_back(&tx, &inbox, &loaded, &format!("upgrade {key} to v{to}"))?;
    bump_applications(&tx)?;
    tx.commit()?;
    Ok(Ok(from))
}

/// Terminates an application (final): READY becomes false and stays false; later facts
/// for it are `after_termination`.
pub fn terminate(
    conn: &mut Connection,
    key: &AppKey,
    reason: &str,
    at: i64,
) -> rusqlite::Result<Result<(), LifecycleError>> {
    let tx = immediate(conn)?;
    let (mut apps, mut inbox, loaded) = load(&tx, &BTreeSet::from([key.clone()]), &[], &[])?;
    if let Err(error) = operator::terminate(&mut apps, &mut inbox, key, reason, at) {
        return Ok(Err(error));
    }
    tx.execute(
        "UPDATE applications SET terminated_reason = ?3, terminated_at = ?4
         WHERE tenant_id = ?1 AND application_id = ?2",
        params![key.tenant_id, key.application_id, reason, at],
    )?;
    write_back(&tx, &inbox, &loaded, &format!("terminate {key}"))?;
    bump_applications(&tx)?;
    tx.commit()?;
    Ok(Ok(()))
}

/// Which content a person keeps.
#[derive(Clone, Debug)]
pub enum Keep {
    /// The first content.
    First,
    /// The only variant recorded (refused when there are several).
    OnlyVariant,
    /// The recorded variant with this content.
    Variant(Box<Envelope>),
}

/// Resolves the open conflict of `id`. Both contents stay recorded; keeping a variant
/// makes it the fact and files the first content as evidence.
pub fn resolve(
    conn: &mut Connection,
    id: &FactId,
    keep: &Keep,
    reason: &str,
) -> rusqlite::Result<Result<Kept, String>> {
    let tx = immediate(conn)?;
    let (apps, mut inbox, loaded) = load(&tx, &BTreeSet::new(), std::slice::from_ref(id), &[])?;
    let variant = match keep {
        Keep::First => None,
        Keep::OnlyVariant => match operator::only_variant(&inbox, id) {
            Ok(variant) => Some(variant),
            Err(why) => return Ok(Err(why)),
        },
        Keep::Variant(content) => Some((**content).clone()),
    };
    let kept = match operator::resolve(&apps, &mut inbox, id, variant.as_ref(), reason) {
        Ok(kept) => kept,
        Err(why) => return Ok(Err(why)),
    };
    let cause = format!("resolve {}", describe(id));
    if kept == Kept::Variant {
        let fact = inbox.fact(id).expect("a resolved identity holds a fact");
        tx.execute(
            "UPDATE facts SET canonical = ?4, application_id = ?5, entry = ?6, withdraws = ?7
             WHERE tenant_id = ?1 AND source = ?2 AND event_id = ?3",
            params![
                id.tenant_id,
                id.source.as_str(),
                id.event_id,
                fact.canonical(),
                fact.application_id(),
                cause,
                fact.withdraws()
            ],
        )?;
        tx.execute(
            "DELETE FROM evidence WHERE canonical = ?1",
            [fact.canonical()],
        )?;
    }
    write_back(&tx, &inbox, &loaded, &cause)?;
    tx.commit()?;
    Ok(Ok(kept))
}

/// Expires, at `now` (Unix seconds), every entry quarantined for longer than `period`
/// seconds: each becomes `quarantine_expired`, kept for a person, never a fact. Returns
/// the stream entries expired.
pub fn expire_quarantine(
    conn: &mut Connection,
    now: i64,
    period: i64,
) -> rusqlite::Result<Vec<String>> {
    let tx = immediate(conn)?;
    let mut entries = {
        let mut statement =
            tx.prepare("SELECT entry FROM parked WHERE state = 'quarantined' AND since <= ?1")?;
        let rows = statement.query_map([now.saturating_sub(period)], |row| row.get(0))?;
        rows.collect::<rusqlite::Result<Vec<String>>>()?
    };
    sort_stream_ids(&mut entries);
    let (_, mut inbox, loaded) = load(&tx, &BTreeSet::new(), &[], &entries)?;
    let expired = operator::expire_quarantine(&mut inbox, now, period);
    write_back(&tx, &inbox, &loaded, "expire quarantine")?;
    tx.commit()?;
    Ok(expired
        .into_iter()
        .filter_map(|id| loaded.entry(id).map(str::to_owned))
        .collect())
}

/// One entry kept without a fact identity, as `pipeline quarantine list` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ParkedRow {
    /// The stream entry.
    pub entry: String,
    /// `quarantined`, `quarantine_expired`, `late_mismatch` or `after_termination`.
    pub state: String,
    /// `tenant/source/event_id`.
    pub identity: String,
    /// The application it names.
    pub application_id: String,
    /// When its request was received (Unix seconds).
    pub since: i64,
}

/// Every parked entry in `states`, oldest first.
pub fn parked(conn: &Connection, states: &[&str]) -> rusqlite::Result<Vec<ParkedRow>> {
    let mut statement = conn.prepare(
        "SELECT entry, state, tenant_id, source, event_id, application_id, since FROM parked
         ORDER BY since, entry",
    )?;
    let rows = statement.query_map([], |row| {
        Ok(ParkedRow {
            entry: row.get(0)?,
            state: row.get(1)?,
            identity: format!(
                "{}/{}/{}",
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
                row.get::<_, String>(4)?
            ),
            application_id: row.get(5)?,
            since: row.get(6)?,
        })
    })?;
    let mut out = Vec::new();
    for row in rows {
        let row = row?;
        if states.contains(&row.state.as_str()) {
            out.push(row);
        }
    }
    Ok(out)
}

/// One conflict, as `pipeline conflicts list` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConflictRow {
    /// `tenant/source/event_id`.
    pub identity: String,
    /// The applications it stops.
    pub applications: Vec<String>,
    /// `open`, or the resolution's `first` / `variant`.
    pub state: String,
    /// The resolution's reason, if resolved.
    pub reason: Option<String>,
    /// The content held as the fact.
    pub fact: Option<String>,
    /// The other contents recorded under the identity.
    pub variants: Vec<String>,
}

/// Every identity with a conflict, open ones first.
pub fn conflicts(conn: &mut Connection) -> rusqlite::Result<Vec<ConflictRow>> {
    let tx = conn.transaction()?;
    let ids: Vec<(String, String, String)> = {
        let mut statement = tx.prepare(
            "SELECT DISTINCT tenant_id, source, event_id FROM conflicts ORDER BY 1, 2, 3",
        )?;
        let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let mut out = Vec::new();
    for (tenant_id, source, event_id) in ids {
        let Some(source) = Source::from_wire(&source) else {
            continue;
        };
        let id = FactId {
            tenant_id,
            source,
            event_id,
        };
        let (_, inbox, _) = load(&tx, &BTreeSet::new(), std::slice::from_ref(&id), &[])?;
        let conflict = inbox.conflicts().get(&id).cloned().unwrap_or_default();
        out.push(ConflictRow {
            identity: describe(&id),
            applications: conflict
                .applications
                .iter()
                .map(|key| key.application_id.clone())
                .collect(),
            state: conflict
                .resolution
                .as_ref()
                .map_or("open", |(kept, _)| store::kept_word(*kept))
                .to_owned(),
            reason: conflict.resolution.as_ref().map(|(_, why)| why.to_string()),
            fact: inbox.fact(&id).map(|fact| fact.canonical().to_owned()),
            variants: inbox
                .variants_of(&id)
                .map(|variant| variant.canonical().to_owned())
                .collect(),
        });
    }
    tx.commit()?;
    out.sort_by_key(|row| row.state != "open");
    Ok(out)
}

/// Now in Unix seconds (the operator's clock).
pub fn now_seconds() -> i64 {
    now_ms() / 1000
}
