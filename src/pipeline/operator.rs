//! The operator's steps on a real inbox: register, upgrade, terminate, resolve a
//! conflict, expire quarantine, each one write transaction that loads what the
//! step needs, runs the pure step of [`crate::facts::operator`] (READY recomputed inside
//! it) and writes back, with the READY history naming the step; and the lists an operator
//! reads before acting (quarantine, conflicts). A refusal is `Ok(Err(why))`: the inbox is
//! left as it was.

use super::sql::{Db, SqlError};
use super::store::{
    self, bump_applications, in_transaction, insert_fact, load, now_ms, sort_stream_ids, write_back,
};
use crate::args;
use crate::facts::application::{AppKey, LifecycleError};
use crate::facts::envelope::{Envelope, FactId, Source};
use crate::facts::inbox::{describe, EntryId, Kept, Verdict};
use crate::facts::mutants::{upgrade_refreshes_ready, Mutant};
use crate::facts::operator::{self, Registration};
use crate::facts::world::Policy;
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

/// The quarantined entries of `key`, in stream order.
fn quarantined_of(db: &Db, key: &AppKey) -> Result<Vec<String>, SqlError> {
    let mut entries = db
        .rows(
            "SELECT entry FROM parked
             WHERE tenant_id = ?1 AND application_id = ?2 AND state = 'quarantined'",
            args![&key.tenant_id, &key.application_id],
        )?
        .iter()
        .map(|row| row.text(0))
        .collect::<Result<Vec<_>, _>>()?;
    sort_stream_ids(&mut entries);
    Ok(entries)
}

/// Registers an application (new, unchanged, or moved forward; never backwards, never
/// another business key, never a terminated one) and decides its quarantined entries
/// again in stream order, in the same transaction.
pub fn register(
    db: &Db,
    key: &AppKey,
    business_key: &str,
    material_version: u64,
    mutant: Option<Mutant>,
) -> Result<Result<Registered, LifecycleError>, SqlError> {
    in_transaction(db, |tx| {
        register_in(tx, key, business_key, material_version, mutant)
    })
}

fn register_in(
    tx: &Db,
    key: &AppKey,
    business_key: &str,
    material_version: u64,
    mutant: Option<Mutant>,
) -> Result<Result<Registered, LifecycleError>, SqlError> {
    let entries = quarantined_of(tx, key)?;
    let (mut apps, mut inbox, mut loaded) =
        load(tx, &BTreeSet::from([key.clone()]), &[], &entries)?;
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
    tx.exec(
        "INSERT INTO applications (tenant_id, application_id, business_key, material_version)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (tenant_id, application_id) DO UPDATE
         SET business_key = excluded.business_key, material_version = excluded.material_version",
        args![
            &key.tenant_id,
            &key.application_id,
            &app.business_key,
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
                insert_fact(tx, fact, &entry)?;
            }
        }
        tx.exec(
            "UPDATE verdicts SET verdict = ?2 WHERE entry = ?1",
            args![&entry, verdict.as_str()],
        )?;
        out.push((entry, verdict));
    }
    write_back(
        tx,
        &inbox,
        &loaded,
        &format!("register {key} v{material_version}"),
    )?;
    bump_applications(tx)?;
    Ok(Ok(Registered {
        registered,
        released: out,
    }))
}

/// A material upgrade: the version moves forward (never for a terminated application) and
/// READY is recomputed. Returns the version before.
pub fn upgrade(
    db: &Db,
    key: &AppKey,
    to: u64,
    mutant: Option<Mutant>,
) -> Result<Result<u64, LifecycleError>, SqlError> {
    in_transaction(db, |tx| {
        let (mut apps, mut inbox, loaded) = load(tx, &BTreeSet::from([key.clone()]), &[], &[])?;
        let from = match apps.upgrade(key, to) {
            Ok(from) => from,
            Err(error) => return Ok(Err(error)),
        };
        tx.exec(
            "UPDATE applications SET material_version = ?3 WHERE tenant_id = ?1 AND application_id = ?2",
            args![&key.tenant_id, &key.application_id, to as i64],
        )?;
        if upgrade_refreshes_ready(mutant) {
            inbox.refresh_ready(&apps);
        }
        write_back(tx, &inbox, &loaded, &format!("upgrade {key} to v{to}"))?;
        bump_applications(tx)?;
        Ok(Ok(from))
    })
}

/// Terminates an application (final): READY becomes false and stays false; later facts
/// for it are `after_termination`.
pub fn terminate(
    db: &Db,
    key: &AppKey,
    reason: &str,
    at: i64,
) -> Result<Result<(), LifecycleError>, SqlError> {
    in_transaction(db, |tx| {
        let (mut apps, mut inbox, loaded) = load(tx, &BTreeSet::from([key.clone()]), &[], &[])?;
        if let Err(error) = operator::terminate(&mut apps, &mut inbox, key, reason, at) {
            return Ok(Err(error));
        }
        tx.exec(
            "UPDATE applications SET terminated_reason = ?3, terminated_at = ?4
             WHERE tenant_id = ?1 AND application_id = ?2",
            args![&key.tenant_id, &key.application_id, reason, at],
        )?;
        write_back(tx, &inbox, &loaded, &format!("terminate {key}"))?;
        bump_applications(tx)?;
        Ok(Ok(()))
    })
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
    db: &Db,
    id: &FactId,
    keep: &Keep,
    reason: &str,
) -> Result<Result<Kept, String>, SqlError> {
    in_transaction(db, |tx| resolve_in(tx, id, keep, reason))
}

fn resolve_in(
    tx: &Db,
    id: &FactId,
    keep: &Keep,
    reason: &str,
) -> Result<Result<Kept, String>, SqlError> {
    let (apps, mut inbox, loaded) = load(tx, &BTreeSet::new(), std::slice::from_ref(id), &[])?;
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
        tx.exec(
            "UPDATE facts SET canonical = ?4, application_id = ?5, entry = ?6, withdraws = ?7
             WHERE tenant_id = ?1 AND source = ?2 AND event_id = ?3",
            args![
                &id.tenant_id,
                id.source.as_str(),
                &id.event_id,
                fact.canonical(),
                fact.application_id(),
                &cause,
                fact.withdraws()
            ],
        )?;
        tx.exec(
            "DELETE FROM evidence WHERE canonical = ?1",
            args![fact.canonical()],
        )?;
    }
    write_back(tx, &inbox, &loaded, &cause)?;
    Ok(Ok(kept))
}

/// Expires, at `now` (Unix seconds), every entry quarantined for longer than `period`
/// seconds: each becomes `quarantine_expired`, kept for a person, never a fact. Returns
/// the stream entries expired.
pub fn expire_quarantine(db: &Db, now: i64, period: i64) -> Result<Vec<String>, SqlError> {
    in_transaction(db, |tx| {
        let mut entries = tx
            .rows(
                "SELECT entry FROM parked WHERE state = 'quarantined' AND since <= ?1",
                args![now.saturating_sub(period)],
            )?
            .iter()
            .map(|row| row.text(0))
            .collect::<Result<Vec<_>, _>>()?;
        sort_stream_ids(&mut entries);
        let (_, mut inbox, loaded) = load(tx, &BTreeSet::new(), &[], &entries)?;
        let expired = operator::expire_quarantine(&mut inbox, now, period);
        write_back(tx, &inbox, &loaded, "expire quarantine")?;
        Ok(expired
            .into_iter()
            .filter_map(|id| loaded.entry(id).map(str::to_owned))
            .collect())
    })
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
pub fn parked(db: &Db, states: &[&str]) -> Result<Vec<ParkedRow>, SqlError> {
    let mut out = Vec::new();
    for row in db.rows(
        "SELECT entry, state, tenant_id, source, event_id, application_id, since FROM parked
         ORDER BY since, entry",
        &[],
    )? {
        let row = ParkedRow {
            entry: row.text(0)?,
            state: row.text(1)?,
            identity: format!("{}/{}/{}", row.text(2)?, row.text(3)?, row.text(4)?),
            application_id: row.text(5)?,
            since: row.int(6)?,
        };
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
pub fn conflicts(db: &Db) -> Result<Vec<ConflictRow>, SqlError> {
    db.begin_read()?;
    let rows = conflict_rows(db);
    db.rollback();
    let mut out = rows?;
    out.sort_by_key(|row| row.state != "open");
    Ok(out)
}

fn conflict_rows(tx: &Db) -> Result<Vec<ConflictRow>, SqlError> {
    let ids = tx
        .rows(
            "SELECT DISTINCT tenant_id, source, event_id FROM conflicts ORDER BY 1, 2, 3",
            &[],
        )?
        .iter()
        .map(|row| Ok((row.text(0)?, row.text(1)?, row.text(2)?)))
        .collect::<Result<Vec<_>, SqlError>>()?;
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
        let (_, inbox, _) = load(tx, &BTreeSet::new(), std::slice::from_ref(&id), &[])?;
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
    Ok(out)
}

/// Now in Unix seconds (the operator's clock).
pub fn now_seconds() -> i64 {
    now_ms() / 1000
}
