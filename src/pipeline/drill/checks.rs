//! The end checks every drill shares: each 202 decided once, nothing pending, the model's inbox.

use super::rig::Rig;
use super::DrillReport;
use crate::facts::application::AppKey;
use crate::facts::envelope::{Envelope, Source};
use crate::facts::world::World;
use crate::pipeline::ingress::PipelineError;
use crate::pipeline::store;
use crate::pipeline::stream;
use std::collections::{BTreeMap, BTreeSet};

/// The end checks every drill shares: each 202 has exactly one verdict or dead letter,
/// no fact twice, nothing pending, the inbox equals the model's, integrity.
pub(super) fn common_checks(
    report: &mut DrillReport,
    rig: &mut Rig,
    accepted: &BTreeMap<String, u32>,
    oracle: Option<&World>,
) -> Result<(), PipelineError> {
    let conn = store::open(&rig.options.db, store::DEFAULT_BUSY_TIMEOUT_MS)?;
    let snapshot = store::snapshot(&conn)?;
    let names = &rig.options.names;
    let dead: BTreeSet<String> = stream::range_all(&mut rig.redis, &names.dead_letter())?
        .iter()
        .filter_map(|entry| entry.field("entry"))
        .map(|id| String::from_utf8_lossy(id).into_owned())
        .collect();
    report.entries = accepted.len();
    report.facts = snapshot.facts.len();
    let missing: Vec<&String> = accepted
        .keys()
        .filter(|id| !snapshot.verdicts.contains_key(*id) && !dead.contains(*id))
        .collect();
    let both: Vec<&String> = accepted
        .keys()
        .filter(|id| snapshot.verdicts.contains_key(*id) && dead.contains(*id))
        .collect();
    report.check(
        "every-202-settled-once",
        missing.is_empty() && both.is_empty(),
        format!(
            "{} accepted, {} without a verdict or dead letter{}, {} with both",
            accepted.len(),
            missing.len(),
            missing
                .first()
                .map(|id| format!(" (first: entry {id})"))
                .unwrap_or_default(),
            both.len()
        ),
    );
    report.check(
        "no-fact-twice",
        snapshot.counters.accepted as usize == snapshot.facts.len(),
        format!(
            "{} facts, {} accepted verdicts",
            snapshot.facts.len(),
            snapshot.counters.accepted
        ),
    );
    let pending = stream::pending_count(&mut rig.redis, names)?;
    report.check("pending-zero", pending == 0, format!("{pending} pending"));
    let integrity = store::integrity(&conn)?;
    report.check("integrity", integrity.starts_with("ok"), integrity);
    if let Some(world) = oracle {
        let real_ids: BTreeSet<(Source, String)> = snapshot
            .facts
            .iter()
            .map(|(source, id, _)| (*source, id.clone()))
            .collect();
        let model_ids: BTreeSet<(Source, String)> = world
            .inbox
            .facts()
            .map(|fact| (fact.source(), fact.event_id().to_owned()))
            .collect();
        report.check(
            "facts-equal-model",
            real_ids == model_ids,
            format!(
                "{} facts, the model {}; {} only here, {} only in the model",
                real_ids.len(),
                model_ids.len(),
                real_ids.difference(&model_ids).count(),
                model_ids.difference(&real_ids).count()
            ),
        );
        // Which variant of a conflicting identity came first depends on the order the
        // consumers took; the set of contents seen per identity does not.
        let real_content: BTreeSet<String> = snapshot
            .facts
            .iter()
            .map(|(_, _, canonical)| canonical.clone())
            .chain(snapshot.evidence.iter().cloned())
            .collect();
        let model_content: BTreeSet<String> = world
            .inbox
            .facts()
            .chain(world.inbox.evidence())
            .map(|envelope: &Envelope| envelope.canonical().to_owned())
            .collect();
        report.check(
            "contents-equal-model",
            real_content == model_content,
            format!(
                "{} contents (facts and evidence), the model {}",
                real_content.len(),
                model_content.len()
            ),
        );
        let model_ready: BTreeSet<AppKey> = world.inbox.ready_marks().clone();
        report.check(
            "ready-equals-model",
            snapshot.ready == model_ready,
            format!(
                "{} READY, the model {}",
                snapshot.ready.len(),
                model_ready.len()
            ),
        );
        report.check(
            "conflicts-equal-model",
            snapshot.open_conflicts == world.inbox.open_conflicts(),
            format!(
                "{} open conflicts, the model {}",
                snapshot.open_conflicts.len(),
                world.inbox.open_conflicts().len()
            ),
        );
        report.check(
            "late-equal-model",
            snapshot.late == world.inbox.late_mismatches(),
            format!(
                "{} late mismatches, the model {}",
                snapshot.late.len(),
                world.inbox.late_mismatches().len()
            ),
        );
    }
    Ok(())
}
