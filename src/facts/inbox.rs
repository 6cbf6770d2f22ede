//! The inbox: the consumer's decision on one stream entry inside one inbox transaction
//! ([`consume`]), what it keeps (facts by identity, the other contents recorded under an
//! identity, conflicts, entries parked without a fact identity), READY as a function of
//! the set of facts ([`ready`]), and the poison rule ([`on_unprocessable`]).
//!
//! Choices where the contract is silent:
//! - every processing of an entry is counted under its verdict: an entry read again after
//!   a crash between commit and acknowledgement counts one more duplicate (the acceptance
//!   run's two duplicates are that re-read and the resent payment);
//! - an entry kept without a fact identity (quarantined, late mismatch, after termination)
//!   is kept once per stream entry: its redelivery rewrites its own row, and it never
//!   occupies the identity, so a later, correctly correlated envelope with the same identity
//!   is accepted as the first fact;
//! - a conflict is filed under the identity; it opens on the application the variant names
//!   and on the application of the fact (the identity includes the tenant, so both are the
//!   same tenant's, and the same application unless the source reused an event id across
//!   two applications of one tenant); each distinct content is kept once; a content never
//!   seen under an identity whose conflict was resolved opens it again;
//! - a withdrawal withdraws the fact of its tenant and source with the event id it names,
//!   whichever application that fact names (a wrong application in a reversal errs towards
//!   "not READY", never towards READY).

use super::application::{AppKey, Applications, Mismatch};
use super::envelope::{Envelope, FactId, FactKind};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A stream entry id: 1, 2, 3... in append order.
pub type EntryId = u32;

/// The consumer's verdict on one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A new identity: the fact is kept.
    Accepted,
    /// The identity is known with a content already recorded under it: nothing new.
    Duplicate,
    /// The identity is known with a content never recorded under it: the first fact
    /// stands, the variant is evidence, the application has an open conflict.
    Conflict,
    /// The envelope no longer correlates with its application (kept as history only).
    LateMismatch,
    /// Its application is not known (yet): kept, correlated again at registration.
    Quarantined,
    /// Its application is terminated: kept for reconciliation, never counted.
    AfterTermination,
}

impl Verdict {
    /// Every verdict.
    pub const ALL: [Verdict; 6] = [
        Verdict::Accepted,
        Verdict::Duplicate,
        Verdict::Conflict,
        Verdict::LateMismatch,
        Verdict::Quarantined,
        Verdict::AfterTermination,
    ];

    /// The verdict's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::Duplicate => "duplicate",
            Verdict::Conflict => "conflict",
            Verdict::LateMismatch => "late_mismatch",
            Verdict::Quarantined => "quarantined",
            Verdict::AfterTermination => "after_termination",
        }
    }

    /// The verdict with this word.
    pub fn from_word(word: &str) -> Option<Verdict> {
        Verdict::ALL
            .into_iter()
            .find(|verdict| verdict.as_str() == word)
    }
}

/// How many processings ended in each verdict.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Counters {
    /// New facts.
    pub accepted: u32,
    /// Deliveries of a known fact with a recorded content.
    pub duplicates: u32,
    /// Deliveries of a known identity with a new content.
    pub conflicts: u32,
    /// Deliveries that no longer correlated.
    pub late_mismatches: u32,
    /// Deliveries for an unknown application.
    #[serde(default)]
    pub quarantined: u32,
    /// Deliveries for a terminated application.
    #[serde(default)]
    pub after_termination: u32,
}

impl Counters {
    fn count(&mut self, verdict: Verdict) {
        let counter = match verdict {
            Verdict::Accepted => &mut self.accepted,
            Verdict::Duplicate => &mut self.duplicates,
            Verdict::Conflict => &mut self.conflicts,
            Verdict::LateMismatch => &mut self.late_mismatches,
            Verdict::Quarantined => &mut self.quarantined,
            Verdict::AfterTermination => &mut self.after_termination,
        };
        *counter += 1;
    }
}

/// Why an entry is kept without a fact identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Parking {
    /// Its application is unknown; correlated again when it is registered.
    Quarantined,
    /// Quarantined longer than the quarantine period: listed for a person, never a fact.
    QuarantineExpired,
    /// It no longer correlates with its application.
    LateMismatch(Mismatch),
    /// Its application is terminated.
    AfterTermination,
}

impl Parking {
    /// The word in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Parking::Quarantined => "quarantined",
            Parking::QuarantineExpired => "quarantine_expired",
            Parking::LateMismatch(_) => "late_mismatch",
            Parking::AfterTermination => "after_termination",
        }
    }
}

/// A stream entry kept without a fact identity.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Parked {
    /// The envelope.
    pub envelope: Arc<Envelope>,
    /// Why it is kept so.
    pub why: Parking,
    /// When its request was received (Unix seconds): the quarantine period counts from it.
    pub since: i64,
}

/// The late mismatch view of a parked entry (for reports).
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

/// What a person chose for a conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kept {
    /// The first content stays the fact.
    First,
    /// A variant became the fact (the first stays recorded as evidence).
    Variant,
}

/// A conflict on one identity.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Conflict {
    /// The applications it stops (READY false while it is open).
    pub applications: BTreeSet<AppKey>,
    /// The person's resolution; `None` while open.
    pub resolution: Option<(Kept, Arc<str>)>,
}

impl Conflict {
    /// Whether it still needs review.
    pub fn is_open(&self) -> bool {
        self.resolution.is_none()
    }
}

/// Where a delivery is being decided: its stream entry and its request's receive time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At {
    /// The stream entry.
    pub entry: EntryId,
    /// When its request was received (Unix seconds).
    pub received_at: i64,
}

/// The inbox: accepted facts by identity, the other contents recorded under an identity,
/// conflicts, parked entries, the READY marks committed with the last transaction, and
/// counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Inbox {
    facts: BTreeMap<FactId, Arc<Envelope>>,
    variants: BTreeMap<FactId, BTreeSet<Arc<Envelope>>>,
    conflicts: BTreeMap<FactId, Conflict>,
    parked: BTreeMap<EntryId, Parked>,
    ready: BTreeSet<AppKey>,
    counters: Counters,
    deliveries: BTreeSet<(FactId, i64)>,
    unloaded_conflicts: BTreeSet<AppKey>,
}

/// An inbox as a durable store keeps it (see [`Inbox::restore`]).
#[derive(Clone, Debug, Default)]
pub struct Parts {
    /// The facts.
    pub facts: Vec<Envelope>,
    /// The other contents recorded under the facts' identities.
    pub variants: Vec<Envelope>,
    /// Conflicts by identity.
    pub conflicts: BTreeMap<FactId, Conflict>,
    /// Parked entries.
    pub parked: BTreeMap<EntryId, Parked>,
    /// The READY marks.
    pub ready: BTreeSet<AppKey>,
    /// The counters.
    pub counters: Counters,
    /// Applications with an open conflict on an identity this transaction did not load (a
    /// durable store loads only the identity it decides); always empty in a model.
    pub unloaded_conflicts: BTreeSet<AppKey>,
}

impl Inbox {
    /// An empty inbox.
    pub fn new() -> Inbox {
        Inbox::default()
    }

    /// An inbox rebuilt from its parts, as a durable store keeps them (the part a decision
    /// needs, loaded inside its transaction). Facts and variants are filed under their own
    /// identity.
    pub fn restore(parts: Parts) -> Inbox {
        let mut variants: BTreeMap<FactId, BTreeSet<Arc<Envelope>>> = BTreeMap::new();
        for variant in parts.variants {
            variants
                .entry(variant.fact_id())
                .or_default()
                .insert(Arc::new(variant));
        }
        Inbox {
            facts: parts
                .facts
                .into_iter()
                .map(|fact| (fact.fact_id(), Arc::new(fact)))
                .collect(),
            variants,
            conflicts: parts.conflicts,
            parked: parts.parked,
            ready: parts.ready,
            counters: parts.counters,
            deliveries: BTreeSet::new(),
            unloaded_conflicts: parts.unloaded_conflicts,
        }
    }

    /// Evidence of each delivery that reached the identity rule: the identity and the
    /// `sent_at` it carried (never compared; a durable store adds the receive time and the
    /// signature).
    pub fn deliveries(&self) -> &BTreeSet<(FactId, i64)> {
        &self.deliveries
    }

    /// The applications marked READY by the last transaction.
    pub fn ready_marks(&self) -> &BTreeSet<AppKey> {
        &self.ready
    }

    /// The accepted facts (confirming facts and withdrawals), in identity order.
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

    /// Every content recorded under identities other than the facts' own (conflict
    /// evidence, and first contents a resolution replaced).
    pub fn evidence(&self) -> impl Iterator<Item = &Envelope> {
        self.variants.values().flatten().map(|variant| &**variant)
    }

    /// The other contents recorded under `id`.
    pub fn variants_of(&self, id: &FactId) -> impl Iterator<Item = &Envelope> {
        self.variants.get(id).into_iter().flatten().map(|v| &**v)
    }

    /// Conflicts by identity, open and resolved.
    pub fn conflicts(&self) -> &BTreeMap<FactId, Conflict> {
        &self.conflicts
    }

    /// Entries kept without a fact identity, by entry.
    pub fn parked(&self) -> &BTreeMap<EntryId, Parked> {
        &self.parked
    }

    /// Late mismatches kept as history.
    pub fn late_mismatches(&self) -> BTreeSet<LateMismatch> {
        self.parked
            .values()
            .filter_map(|parked| match parked.why {
                Parking::LateMismatch(mismatch) => Some(LateMismatch {
                    fact: parked.envelope.fact_id(),
                    application: AppKey::of(&parked.envelope),
                    material_version: parked.envelope.material_version(),
                    mismatch,
                }),
                _ => None,
            })
            .collect()
    }

    /// Applications with an open conflict.
    pub fn open_conflicts(&self) -> BTreeSet<AppKey> {
        self.conflicts
            .values()
            .filter(|conflict| conflict.is_open())
            .flat_map(|conflict| conflict.applications.iter().cloned())
            .chain(self.unloaded_conflicts.iter().cloned())
            .collect()
    }

    /// Whether `app` has an open conflict.
    pub fn has_open_conflict(&self, app: &AppKey) -> bool {
        self.unloaded_conflicts.contains(app)
            || self
                .conflicts
                .values()
                .any(|conflict| conflict.is_open() && conflict.applications.contains(app))
    }

    /// Whether an accepted withdrawal of the fact's tenant and source names its event id.
    pub fn withdrawn(&self, fact: &Envelope) -> bool {
        self.facts.values().any(|withdrawal| {
            withdrawal.withdraws() == Some(fact.event_id())
                && withdrawal.tenant_id() == fact.tenant_id()
                && withdrawal.source() == fact.source()
        })
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
    /// that changed the facts, or an operator step's).
    pub fn refresh_ready(&mut self, apps: &Applications) {
        let marks = apps
            .iter()
            .map(|(key, _)| key)
            .filter(|key| ready(self, apps, key))
            .cloned()
            .collect();
        self.ready = marks;
    }

    /// The inbox invariants: each fact and variant is filed under its own identity, each
    /// counted fact names a real application, every mark agrees with the rule. Returns the
    /// first broken one.
    pub fn check_invariants(&self, apps: &Applications) -> Result<(), String> {
        if let Some((id, fact)) = self.facts.iter().find(|(id, fact)| **id != fact.fact_id()) {
            return Err(format!("fact {:?} filed under {id:?}", fact.fact_id()));
        }
        let misfiled = self
            .variants
            .iter()
            .find(|(id, set)| set.iter().any(|variant| variant.fact_id() != **id));
        if let Some((id, _)) = misfiled {
            return Err(format!("a variant filed under {id:?} has another identity"));
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

/// READY(app) (contract v2): the application is active, has no open conflict, and for each
/// kind (payment, signature) holds an accepted confirming fact for its current material
/// version that no accepted withdrawal names. A function of the set of facts only.
pub fn ready(inbox: &Inbox, apps: &Applications, app: &AppKey) -> bool {
    let Some(application) = apps.get(app) else {
        return false;
    };
    if !application.is_active() || inbox.has_open_conflict(app) {
        return false;
    }
    let holds = |kind: FactKind| {
        inbox.facts().any(|fact| {
            fact.confirms() == Some(kind)
                && apps.correlate(fact).is_ok_and(|key| key == *app)
                && !inbox.withdrawn(fact)
        })
    };
    FactKind::ALL.into_iter().all(holds)
}

/// The application an envelope names, as it stands now (consumer step 1).
enum Now {
    /// Unknown in its tenant.
    Unknown,
    /// Known, but the business key or material version no longer matches.
    Mismatch(Mismatch),
    /// Known and terminated.
    Terminated,
    /// Known, active, matching.
    Active(AppKey),
}

fn now_of(apps: &Applications, envelope: &Envelope) -> Now {
    match apps.correlate(envelope) {
        Err(Mismatch::UnknownApplication) => Now::Unknown,
        Err(mismatch) => Now::Mismatch(mismatch),
        Ok(key) if apps.get(&key).is_some_and(|app| !app.is_active()) => Now::Terminated,
        Ok(key) => Now::Active(key),
    }
}

/// Decides one stream entry inside one inbox transaction: correlation re-checked against
/// the application now, then the identity, then READY recomputed.
pub fn consume(inbox: &mut Inbox, apps: &Applications, at: At, entry: &Envelope) -> Verdict {
    let id = entry.fact_id();
    let first_before = inbox.facts.get(&id).cloned();
    let verdict = decide(inbox, apps, at, entry);
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

/// Consumer steps 1 and 2 (READY is not recomputed here): park the entry when its
/// application is unknown, no longer matches or is terminated; else the identity rule.
pub(super) fn decide(inbox: &mut Inbox, apps: &Applications, at: At, entry: &Envelope) -> Verdict {
    // An expired quarantine entry stays expired, whatever a redelivery finds now.
    let expired = inbox
        .parked
        .get(&at.entry)
        .is_some_and(|parked| parked.why == Parking::QuarantineExpired);
    if expired {
        inbox.counters.count(Verdict::Quarantined);
        return Verdict::Quarantined;
    }
    let (verdict, parking) = match now_of(apps, entry) {
        Now::Unknown => (Verdict::Quarantined, Parking::Quarantined),
        Now::Mismatch(mismatch) => (Verdict::LateMismatch, Parking::LateMismatch(mismatch)),
        Now::Terminated => (Verdict::AfterTermination, Parking::AfterTermination),
        Now::Active(key) => return identity(inbox, key, entry),
    };
    // A redelivery of an entry whose content already counted (accepted before a
    // termination or an upgrade) is not parked: it is that fact, not history beside it.
    if !inbox.holds_content(entry) {
        inbox.park(at, entry, parking);
    }
    inbox.counters.count(verdict);
    verdict
}

impl Inbox {
    /// Whether `entry`'s content is recorded under its identity (as the fact or a variant).
    pub fn holds_content(&self, entry: &Envelope) -> bool {
        let id = entry.fact_id();
        self.facts
            .get(&id)
            .is_some_and(|fact| fact.same_content(entry))
            || self
                .variants_of(&id)
                .any(|variant| variant.same_content(entry))
    }

    /// Keeps `entry` parked under its stream entry (a redelivery rewrites its own row).
    pub(super) fn park(&mut self, at: At, entry: &Envelope, why: Parking) {
        let parked = Parked {
            envelope: Arc::new(entry.clone()),
            why,
            since: at.received_at,
        };
        self.parked.insert(at.entry, parked);
    }

    /// Takes the quarantined entries of `app` out of the quarantine (for registration).
    pub(super) fn unquarantine(&mut self, app: &AppKey) -> Vec<(EntryId, Parked)> {
        let mine: Vec<EntryId> = self
            .parked
            .iter()
            .filter(|(_, parked)| {
                parked.why == Parking::Quarantined && AppKey::of(&parked.envelope) == *app
            })
            .map(|(&entry, _)| entry)
            .collect();
        mine.into_iter()
            .filter_map(|entry| self.parked.remove(&entry).map(|parked| (entry, parked)))
            .collect()
    }

    /// Marks quarantined entries received at or before `cutoff` as expired; returns them.
    pub(super) fn expire_quarantine(&mut self, cutoff: i64) -> Vec<EntryId> {
        let mut expired = Vec::new();
        for (&entry, parked) in self.parked.iter_mut() {
            if parked.why == Parking::Quarantined && parked.since <= cutoff {
                parked.why = Parking::QuarantineExpired;
                expired.push(entry);
            }
        }
        expired
    }

    /// Closes the open conflict of `id` keeping the first content, or the recorded
    /// `variant` (which becomes the fact; the first stays recorded).
    pub(super) fn resolve(
        &mut self,
        id: &FactId,
        variant: Option<&Envelope>,
        reason: &str,
    ) -> Result<Kept, String> {
        let open = self.conflicts.get(id).is_some_and(Conflict::is_open);
        if !open {
            return Err(format!("no open conflict on {}", describe(id)));
        }
        let kept = match variant {
            None => Kept::First,
            Some(variant) => {
                let recorded = self
                    .variants
                    .get(id)
                    .and_then(|set| set.iter().find(|v| v.same_content(variant)).cloned())
                    .ok_or_else(|| {
                        format!(
                            "that content is not a variant recorded under {}",
                            describe(id)
                        )
                    })?;
                let set = self.variants.entry(id.clone()).or_default();
                set.remove(&recorded);
                if let Some(first) = self.facts.insert(id.clone(), recorded) {
                    set.insert(first);
                }
                Kept::Variant
            }
        };
        if let Some(conflict) = self.conflicts.get_mut(id) {
            conflict.resolution = Some((kept, Arc::from(reason)));
        }
        Ok(kept)
    }
}

/// `tenant/source/event_id`, for messages.
pub fn describe(id: &FactId) -> String {
    format!("{}/{}/{}", id.tenant_id, id.source, id.event_id)
}

/// The identity rule for an envelope that correlates with active application `key`: a new
/// `(tenant_id, source, event_id)` is accepted, a content recorded under it is a
/// duplicate, another content is a conflict. READY is not recomputed here.
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
        same(first, entry) || inbox.variants_of(&id).any(|variant| same(variant, entry))
    };
    let verdict = match first {
        None => {
            inbox.facts.insert(id, Arc::new(entry.clone()));
            Verdict::Accepted
        }
        Some(first) if recorded(inbox, &first) => Verdict::Duplicate,
        Some(first) => {
            let variant = Arc::new(entry.clone());
            inbox
                .variants
                .entry(id.clone())
                .or_default()
                .insert(variant);
            let conflict = inbox.conflicts.entry(id).or_default();
            conflict.applications.insert(key);
            conflict.applications.insert(AppKey::of(&first));
            conflict.resolution = None;
            Verdict::Conflict
        }
    };
    inbox.counters.count(verdict);
    verdict
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

    /// For the mutant catalogue only: counts a processing under `verdict` and changes
    /// nothing else.
    pub(super) fn count_only(&mut self, verdict: Verdict) {
        self.counters.count(verdict);
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

    /// For the mutant catalogue only: forgets a parked entry.
    pub(super) fn unpark(&mut self, entry: EntryId) {
        self.parked.remove(&entry);
    }

    /// For the mutant catalogue only: this inbox without its withdrawals.
    pub(super) fn without_withdrawals(&self) -> Inbox {
        let mut copy = self.clone();
        copy.facts.retain(|_, fact| fact.withdraws().is_none());
        copy
    }

    /// For the mutant catalogue only: sets the READY marks.
    pub(super) fn set_marks(&mut self, marks: BTreeSet<AppKey>) {
        self.ready = marks;
    }
}

/// What kind of entry could not be decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoisonCategory {
    /// Its body is not a valid envelope.
    Unparseable,
    /// A valid envelope whose decision fails while the inbox works.
    Undecidable,
}

impl PoisonCategory {
    /// The word in dead letters.
    pub fn as_str(self) -> &'static str {
        match self {
            PoisonCategory::Unparseable => "unparseable",
            PoisonCategory::Undecidable => "undecidable",
        }
    }
}

/// A dead-letter copy of an entry that could not be decided.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Its category.
    pub category: PoisonCategory,
    /// The error text.
    pub reason: String,
    /// Its delivery count when it was dead-lettered.
    pub deliveries: u32,
    /// Its identity, when it parsed.
    pub identity: Option<FactId>,
}

/// What to do with an entry that cannot be decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoisonAction {
    /// Leave it pending (no acknowledgement): it will be delivered again.
    Retry,
    /// Copy it to the dead-letter stream with its details, then acknowledge it.
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

    const AT: At = At {
        entry: 1,
        received_at: 0,
    };

    fn apps(material_version: u64) -> Applications {
        let mut apps = Applications::new();
        apps.insert(key(), Application::active("K", material_version));
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
        assert_eq!(consume(&mut inbox, &now, AT, &old), Verdict::LateMismatch);
        assert_eq!(consume(&mut inbox, &now, AT, &old), Verdict::LateMismatch);
        assert_eq!(inbox.late_mismatches().len(), 1, "kept once per entry");
        assert_eq!(
            inbox.counters().late_mismatches,
            2,
            "counted per processing"
        );
        assert_eq!(inbox.fact_count(), 0);
        let current = envelope(Source::Finance, "P", 2, 5);
        assert_eq!(consume(&mut inbox, &now, AT, &current), Verdict::Accepted);
    }

    #[test]
    fn a_conflict_keeps_the_first_fact_and_stops_ready() {
        let apps = apps(1);
        let mut inbox = Inbox::new();
        let first = envelope(Source::Finance, "P", 1, 5);
        let variant = envelope(Source::Finance, "P", 1, 6);
        let signed = envelope(Source::Contracts, "S", 1, 0);
        assert_eq!(consume(&mut inbox, &apps, AT, &first), Verdict::Accepted);
        assert_eq!(consume(&mut inbox, &apps, AT, &signed), Verdict::Accepted);
        assert!(ready(&inbox, &apps, &key()) && inbox.marked_ready(&key()));
        assert_eq!(consume(&mut inbox, &apps, AT, &variant), Verdict::Conflict);
        assert_eq!(inbox.fact(&first.fact_id()), Some(&first));
        assert_eq!(inbox.evidence().collect::<Vec<_>>(), [&variant]);
        assert!(!ready(&inbox, &apps, &key()) && !inbox.marked_ready(&key()));
        assert_eq!(consume(&mut inbox, &apps, AT, &first), Verdict::Duplicate);
    }

    #[test]
    fn another_tenants_event_id_is_another_fact() {
        let mut apps = apps(1);
        let other = AppKey {
            tenant_id: "u".into(),
            application_id: "a".into(),
        };
        apps.insert(other.clone(), Application::active("K", 1));
        let mut inbox = Inbox::new();
        consume(&mut inbox, &apps, AT, &envelope(Source::Finance, "P", 1, 5));
        consume(
            &mut inbox,
            &apps,
            AT,
            &envelope(Source::Contracts, "S", 1, 0),
        );
        assert!(inbox.marked_ready(&key()));
        let theirs = |source: Source, id: &str, amount: u32| {
            let body = format!(
                r#"{{"schema_version":"1","source":"{source}","event_id":"{id}","event_type":"{}","sent_at":"2024-06-03T09:00:00Z","tenant_id":"u","application_id":"a","business_key":"K","material_version":1,"data":{{"amount":{amount}}}}}"#,
                source.fact_type().as_str()
            );
            Envelope::parse(body.as_bytes(), source).unwrap()
        };
        let payment = theirs(Source::Finance, "P", 6);
        assert_eq!(consume(&mut inbox, &apps, AT, &payment), Verdict::Accepted);
        assert_eq!(
            consume(&mut inbox, &apps, AT, &theirs(Source::Contracts, "S", 0)),
            Verdict::Accepted
        );
        assert_eq!(inbox.fact_count(), 4);
        assert!(inbox.open_conflicts().is_empty());
        assert!(inbox.marked_ready(&key()) && inbox.marked_ready(&other));
        // A variant of the other tenant's own fact is a conflict on its application only.
        let variant = theirs(Source::Finance, "P", 7);
        assert_eq!(consume(&mut inbox, &apps, AT, &variant), Verdict::Conflict);
        assert_eq!(inbox.open_conflicts().iter().collect::<Vec<_>>(), [&other]);
        assert!(inbox.marked_ready(&key()) && !inbox.marked_ready(&other));
    }

    #[test]
    fn an_upgrade_needs_facts_for_the_new_version() {
        let mut apps = apps(1);
        let mut inbox = Inbox::new();
        consume(&mut inbox, &apps, AT, &envelope(Source::Finance, "P", 1, 5));
        consume(
            &mut inbox,
            &apps,
            AT,
            &envelope(Source::Contracts, "S", 1, 0),
        );
        assert!(inbox.marked_ready(&key()));
        assert_eq!(apps.upgrade(&key(), 2), Ok(1));
        inbox.refresh_ready(&apps);
        assert!(
            !inbox.marked_ready(&key()),
            "version-1 facts do not count for version 2"
        );
        assert_eq!(inbox.fact_count(), 2, "they are kept as history");
        consume(
            &mut inbox,
            &apps,
            AT,
            &envelope(Source::Finance, "P2", 2, 5),
        );
        consume(
            &mut inbox,
            &apps,
            AT,
            &envelope(Source::Contracts, "S2", 2, 0),
        );
        assert!(inbox.marked_ready(&key()));
        assert!(
            apps.upgrade(&key(), 2).is_err(),
            "versions only move forward"
        );
    }
}
