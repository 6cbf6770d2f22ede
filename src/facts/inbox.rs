//! The inbox: the consumer's decision on one stream entry inside one inbox transaction
//! ([`consume`]), the facts it keeps, READY as a function of the set of facts ([`ready`]),
//! and the rule for entries that cannot be processed ([`on_unprocessable`]).
//!
//! Choices where the contract is silent:
//! - every processing of an entry is counted under its verdict: an entry read again after
//!   a crash between commit and acknowledgement counts one more duplicate (the acceptance
//!   run's two duplicates are that re-read and the resent payment);
//! - a redelivered entry whose correlation fails now is answered `late_mismatch` again and
//!   counted again, but its history record (fact id, application, why) is kept once; a late
//!   mismatch never occupies the fact identity, so a later, correctly correlated envelope
//!   with the same identity is accepted as the first fact;
//! - a conflict opens on the application the variant names and on the application of the
//!   first fact; the identity includes the tenant (contract v2), so both are the same
//!   tenant's, and the same application unless the source reused an event id across two
//!   applications of one tenant; each distinct variant is kept once as evidence; nothing
//!   here closes a conflict (that is a reviewer's act).

use super::application::{AppKey, Applications, Mismatch};
use super::envelope::{Envelope, FactId, FactType};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The consumer's verdict on one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A new identity: the fact is kept.
    Accepted,
    /// The identity is known with semantically equal content: nothing new.
    Duplicate,
    /// The identity is known with other content: the first fact stands, the variant is
    /// evidence, the application has an open conflict.
    Conflict,
    /// The envelope no longer correlates with its application (kept as history only).
    LateMismatch,
}

impl Verdict {
    /// The verdict's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::Duplicate => "duplicate",
            Verdict::Conflict => "conflict",
            Verdict::LateMismatch => "late_mismatch",
        }
    }
}

/// How many processings ended in each verdict.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Counters {
    /// New facts.
    pub accepted: u32,
    /// Deliveries of a known fact with equal content.
    pub duplicates: u32,
    /// Deliveries of a known identity with other content.
    pub conflicts: u32,
    /// Deliveries that no longer correlated.
    pub late_mismatches: u32,
}

/// A late mismatch kept as history.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LateMismatch {
    /// The envelope's identity.
    pub fact: FactId,
    /// The application it named.
    pub application: AppKey,
    /// The material version it referred to.
    pub material_version: u64,
    /// Why it did not correlate.
    pub mismatch: Mismatch,
}

/// The inbox: accepted facts by identity, conflict evidence, late-mismatch history, open
/// conflicts, the READY marks committed with the last transaction, and counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Inbox {
    facts: BTreeMap<FactId, Arc<Envelope>>,
    evidence: BTreeSet<Arc<Envelope>>,
    late: BTreeSet<LateMismatch>,
    open_conflicts: BTreeSet<AppKey>,
    ready: BTreeSet<AppKey>,
    counters: Counters,
    deliveries: BTreeSet<(FactId, i64)>,
}

impl Inbox {
    /// An empty inbox.
    pub fn new() -> Inbox {
        Inbox::default()
    }

    /// An inbox rebuilt from its parts, as a durable store keeps them (the part a decision
    /// needs, loaded inside its transaction). Facts are filed under their own identity.
    pub fn restore(
        facts: impl IntoIterator<Item = Envelope>,
        evidence: impl IntoIterator<Item = Envelope>,
        late: BTreeSet<LateMismatch>,
        open_conflicts: BTreeSet<AppKey>,
        ready: BTreeSet<AppKey>,
        counters: Counters,
    ) -> Inbox {
        Inbox {
            facts: facts
                .into_iter()
                .map(|fact| (fact.fact_id(), Arc::new(fact)))
                .collect(),
            evidence: evidence.into_iter().map(Arc::new).collect(),
            late,
            open_conflicts,
            ready,
            counters,
            deliveries: BTreeSet::new(),
        }
    }

    /// Evidence of each delivery that reached the identity rule: the identity and the
    /// `sent_at` it carried (never compared; a durable store would add the receive time
    /// and the signature).
    pub fn deliveries(&self) -> &BTreeSet<(FactId, i64)> {
        &self.deliveries
    }

    /// The applications marked READY by the last transaction.
    pub fn ready_marks(&self) -> &BTreeSet<AppKey> {
        &self.ready
    }

    /// The accepted facts, in identity order.
    pub fn facts(&self) -> impl Iterator<Item = &Envelope> {
        self.facts.values().map(|fact| &**fact)
    }

    /// How many facts are held.
    pub fn fact_count(&self) -> usize {
        self.facts.len()
    }

    /// The fact held for an identity.
    pub fn fact(&self, id: &FactId) -> Option<&Envelope> {
        self.facts.get(id).map(|fact| &**fact)
    }

    /// Variants kept as conflict evidence.
    pub fn evidence(&self) -> impl Iterator<Item = &Envelope> {
        self.evidence.iter().map(|variant| &**variant)
    }

    /// Late mismatches kept as history.
    pub fn late_mismatches(&self) -> &BTreeSet<LateMismatch> {
        &self.late
    }

    /// Applications with an open conflict.
    pub fn open_conflicts(&self) -> &BTreeSet<AppKey> {
        &self.open_conflicts
    }

    /// The counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The READY mark committed for `app` by the last transaction (what a reader of the
    /// inbox sees); [`ready`] is the rule it must agree with.
    pub fn marked_ready(&self, app: &AppKey) -> bool {
        self.ready.contains(app)
    }

    /// Recomputes every application's READY mark from the facts (inside the transaction
    /// that changed the facts, or the one that upgraded an application's material).
    pub fn refresh_ready(&mut self, apps: &Applications) {
        let marks = apps
            .iter()
            .map(|(key, _)| key)
            .filter(|key| ready(self, apps, key))
            .cloned()
            .collect();
        self.ready = marks;
    }

    /// The inbox invariants: each fact is filed under its own identity, each counted fact
    /// correlated when it was accepted (it names a real application), every mark agrees
    /// with the rule. Returns the first broken one.
    pub fn check_invariants(&self, apps: &Applications) -> Result<(), String> {
        if let Some((id, fact)) = self.facts.iter().find(|(id, fact)| **id != fact.fact_id()) {
            return Err(format!("fact {:?} filed under {id:?}", fact.fact_id()));
        }
        if let Some(fact) = self
            .facts()
            .find(|fact| apps.get(&AppKey::of(fact)).is_none())
        {
            return Err(format!("fact {:?} names no application", fact.fact_id()));
        }
        if let Some((key, _)) = apps
            .iter()
            .find(|(key, _)| self.marked_ready(key) != ready(self, apps, key))
        {
            return Err(format!("READY mark of {key} disagrees with the facts"));
        }
        Ok(())
    }
}

/// READY(app): an accepted `PAYMENT_CONFIRMED` and an accepted `CONTRACT_SIGNED` that both
/// correlate with the application as it stands (so: its current material version), and no
/// open conflict. A function of the set of facts only.
pub fn ready(inbox: &Inbox, apps: &Applications, app: &AppKey) -> bool {
    if inbox.open_conflicts.contains(app) {
        return false;
    }
    let has = |wanted: FactType| {
        inbox.facts().any(|fact| {
            fact.fact_type() == wanted && apps.correlate(fact).is_ok_and(|key| key == *app)
        })
    };
    FactType::ALL.into_iter().all(has)
}

/// Decides one stream entry inside one inbox transaction: correlation re-checked against
/// the application now, then the identity, then READY recomputed.
pub fn consume(inbox: &mut Inbox, apps: &Applications, entry: &Envelope) -> Verdict {
    let id = entry.fact_id();
    let first_before = inbox.facts.get(&id).cloned();
    let verdict = match apps.correlate(entry) {
        Err(mismatch) => {
            inbox.late.insert(LateMismatch {
                fact: id.clone(),
                application: AppKey::of(entry),
                material_version: entry.material_version(),
                mismatch,
            });
            inbox.counters.late_mismatches += 1;
            Verdict::LateMismatch
        }
        Ok(key) => identity(inbox, key, entry),
    };
    inbox.refresh_ready(apps);
    debug_assert!(
        first_before
            .as_ref()
            .is_none_or(|first| inbox.facts.get(&id) == Some(first)),
        "the first fact of {id:?} was replaced"
    );
    debug_assert_eq!(inbox.check_invariants(apps), Ok(()));
    verdict
}

/// The identity rule for an envelope that correlates with application `key`: a new
/// `(tenant_id, source, event_id)` is accepted, an equal content is a duplicate, another
/// content is a conflict (the first fact stands, the variant is evidence, both
/// applications, always of the envelope's tenant, get an open conflict). READY is not
/// recomputed here.
pub(super) fn identity(inbox: &mut Inbox, key: AppKey, entry: &Envelope) -> Verdict {
    let first = inbox.facts.get(&entry.fact_id()).cloned();
    identity_against(inbox, key, entry, first, Envelope::same_content)
}

/// The identity rule against `first`, the fact the caller found under the envelope's
/// identity (the contract looks it up by [`FactId`]; a mutant may look elsewhere), with
/// `same` as content equality (the contract's is [`Envelope::same_content`]). A content
/// equal to the fact's or to a variant kept under the identity is a duplicate. Every
/// delivery's `sent_at` is kept as evidence of that delivery.
pub(super) fn identity_against(
    inbox: &mut Inbox,
    key: AppKey,
    entry: &Envelope,
    first: Option<Arc<Envelope>>,
    same: fn(&Envelope, &Envelope) -> bool,
) -> Verdict {
    let id = entry.fact_id();
    inbox.deliveries.insert((id.clone(), entry.sent_at()));
    let recorded = |inbox: &Inbox, first: &Envelope| {
        same(first, entry)
            || inbox
                .evidence
                .iter()
                .any(|variant| variant.fact_id() == id && same(variant, entry))
    };
    match first {
        None => {
            inbox.facts.insert(id, Arc::new(entry.clone()));
            inbox.counters.accepted += 1;
            Verdict::Accepted
        }
        Some(first) if recorded(inbox, &first) => {
            inbox.counters.duplicates += 1;
            Verdict::Duplicate
        }
        Some(first) => {
            inbox.evidence.insert(Arc::new(entry.clone()));
            inbox.open_conflicts.insert(key);
            inbox.open_conflicts.insert(AppKey::of(&first));
            inbox.counters.conflicts += 1;
            Verdict::Conflict
        }
    }
}

impl Inbox {
    /// For the mutant catalogue only: the fact held under `(source, event_id)` in any
    /// tenant (version 1's identity).
    pub(super) fn fact_in_any_tenant(&self, entry: &Envelope) -> Option<Arc<Envelope>> {
        self.facts
            .values()
            .find(|fact| fact.source() == entry.source() && fact.event_id() == entry.event_id())
            .cloned()
    }

    /// For the mutant catalogue only: keeps `entry` as the fact of its identity whatever
    /// was there (what a consumer that dedupes by something else does).
    pub(super) fn overwrite_fact(&mut self, entry: &Envelope) {
        self.facts.insert(entry.fact_id(), Arc::new(entry.clone()));
        self.counters.accepted += 1;
    }

    /// For the mutant catalogue only: counts a processing as a duplicate.
    pub(super) fn count_duplicate(&mut self) {
        self.counters.duplicates += 1;
    }

    /// For the mutant catalogue only: restores the READY marks `earlier` had (a consumer
    /// that never clears a mark).
    pub(super) fn keep_marks_of(&mut self, earlier: &Inbox) {
        self.ready.clone_from(&earlier.ready);
    }

    /// For the mutant catalogue only: marks READY where the rule holds now and never
    /// clears a mark (READY decided by the latest fact, not by the set).
    pub(super) fn add_ready_marks(&mut self, apps: &Applications) {
        let marks: Vec<AppKey> = apps
            .iter()
            .map(|(key, _)| key)
            .filter(|key| ready(self, apps, key))
            .cloned()
            .collect();
        self.ready.extend(marks);
    }
}

/// What to do with an entry that cannot be processed (its body is not a valid envelope).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoisonAction {
    /// Leave it pending (no acknowledgement): it will be delivered again.
    Retry,
    /// Copy it to the dead-letter stream with its reason, then acknowledge it.
    DeadLetter,
}

/// The poison rule: retried until its delivery count (this delivery included) reaches
/// `max_deliveries`, then dead-lettered.
pub fn on_unprocessable(delivery_count: u32, max_deliveries: u32) -> PoisonAction {
    if delivery_count >= max_deliveries {
        PoisonAction::DeadLetter
    } else {
        PoisonAction::Retry
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::application::Application;
    use crate::facts::envelope::Source;

    fn apps(material_version: u64) -> Applications {
        let mut apps = Applications::new();
        apps.insert(
            key(),
            Application {
                business_key: "K".into(),
                material_version,
            },
        );
        apps
    }

    fn key() -> AppKey {
        AppKey {
            tenant_id: "t".into(),
            application_id: "a".into(),
        }
    }

    fn envelope(source: Source, event_id: &str, version: u64, amount: u32) -> Envelope {
        let body = format!(
            r#"{{"schema_version":"1","source":"{source}","event_id":"{event_id}","event_type":"{}","sent_at":"2024-06-03T09:00:00Z","tenant_id":"t","application_id":"a","business_key":"K","material_version":{version},"data":{{"amount":{amount}}}}}"#,
            source.fact_type().as_str()
        );
        Envelope::parse(body.as_bytes(), source).unwrap()
    }

    #[test]
    fn poison_is_retried_until_the_delivery_count_reaches_the_limit() {
        assert_eq!(on_unprocessable(1, 3), PoisonAction::Retry);
        assert_eq!(on_unprocessable(2, 3), PoisonAction::Retry);
        assert_eq!(on_unprocessable(3, 3), PoisonAction::DeadLetter);
        assert_eq!(on_unprocessable(4, 3), PoisonAction::DeadLetter);
        assert_eq!(on_unprocessable(1, 1), PoisonAction::DeadLetter);
    }

    #[test]
    fn a_late_mismatch_is_history_and_does_not_take_the_identity() {
        let mut inbox = Inbox::new();
        let old = envelope(Source::Finance, "P", 1, 5);
        let now = apps(2);
        assert_eq!(consume(&mut inbox, &now, &old), Verdict::LateMismatch);
        assert_eq!(consume(&mut inbox, &now, &old), Verdict::LateMismatch);
        assert_eq!(inbox.late_mismatches().len(), 1, "kept once");
        assert_eq!(
            inbox.counters().late_mismatches,
            2,
            "counted per processing"
        );
        assert_eq!(inbox.fact_count(), 0);
        let current = envelope(Source::Finance, "P", 2, 5);
        assert_eq!(consume(&mut inbox, &now, &current), Verdict::Accepted);
    }

    #[test]
    fn a_conflict_keeps_the_first_fact_and_stops_ready() {
        let apps = apps(1);
        let mut inbox = Inbox::new();
        let first = envelope(Source::Finance, "P", 1, 5);
        let variant = envelope(Source::Finance, "P", 1, 6);
        let signed = envelope(Source::Contracts, "S", 1, 0);
        assert_eq!(consume(&mut inbox, &apps, &first), Verdict::Accepted);
        assert_eq!(consume(&mut inbox, &apps, &signed), Verdict::Accepted);
        assert!(ready(&inbox, &apps, &key()) && inbox.marked_ready(&key()));
        assert_eq!(consume(&mut inbox, &apps, &variant), Verdict::Conflict);
        assert_eq!(inbox.fact(&first.fact_id()), Some(&first));
        assert_eq!(inbox.evidence().collect::<Vec<_>>(), [&variant]);
        assert!(!ready(&inbox, &apps, &key()) && !inbox.marked_ready(&key()));
        assert_eq!(consume(&mut inbox, &apps, &first), Verdict::Duplicate);
    }

    #[test]
    fn another_tenants_event_id_is_another_fact() {
        let mut apps = apps(1);
        let other = AppKey {
            tenant_id: "u".into(),
            application_id: "a".into(),
        };
        apps.insert(
            other.clone(),
            Application {
                business_key: "K".into(),
                material_version: 1,
            },
        );
        let mut inbox = Inbox::new();
        consume(&mut inbox, &apps, &envelope(Source::Finance, "P", 1, 5));
        consume(&mut inbox, &apps, &envelope(Source::Contracts, "S", 1, 0));
        assert!(inbox.marked_ready(&key()));
        let theirs = |source: Source, id: &str, amount: u32| {
            let body = format!(
                r#"{{"schema_version":"1","source":"{source}","event_id":"{id}","event_type":"{}","sent_at":"2024-06-03T09:00:00Z","tenant_id":"u","application_id":"a","business_key":"K","material_version":1,"data":{{"amount":{amount}}}}}"#,
                source.fact_type().as_str()
            );
            Envelope::parse(body.as_bytes(), source).unwrap()
        };
        let payment = theirs(Source::Finance, "P", 6);
        assert_eq!(consume(&mut inbox, &apps, &payment), Verdict::Accepted);
        assert_eq!(
            consume(&mut inbox, &apps, &theirs(Source::Contracts, "S", 0)),
            Verdict::Accepted
        );
        assert_eq!(inbox.fact_count(), 4);
        assert!(inbox.open_conflicts().is_empty());
        assert!(inbox.marked_ready(&key()) && inbox.marked_ready(&other));
        // A variant of the other tenant's own fact is a conflict on its application only.
        let variant = theirs(Source::Finance, "P", 7);
        assert_eq!(consume(&mut inbox, &apps, &variant), Verdict::Conflict);
        assert_eq!(inbox.open_conflicts().iter().collect::<Vec<_>>(), [&other]);
        assert!(inbox.marked_ready(&key()) && !inbox.marked_ready(&other));
    }

    #[test]
    fn an_upgrade_needs_facts_for_the_new_version() {
        let mut apps = apps(1);
        let mut inbox = Inbox::new();
        consume(&mut inbox, &apps, &envelope(Source::Finance, "P", 1, 5));
        consume(&mut inbox, &apps, &envelope(Source::Contracts, "S", 1, 0));
        assert!(inbox.marked_ready(&key()));
        assert_eq!(apps.upgrade(&key(), 2), Ok(1));
        inbox.refresh_ready(&apps);
        assert!(
            !inbox.marked_ready(&key()),
            "version-1 facts do not count for version 2"
        );
        assert_eq!(inbox.fact_count(), 2, "they are kept as history");
        consume(&mut inbox, &apps, &envelope(Source::Finance, "P2", 2, 5));
        consume(&mut inbox, &apps, &envelope(Source::Contracts, "S2", 2, 0));
        assert!(inbox.marked_ready(&key()));
        assert!(
            apps.upgrade(&key(), 2).is_err(),
            "versions only move forward"
        );
    }
}
