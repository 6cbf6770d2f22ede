//! The answer to "why is this application (not) READY", and where an event went, as a pure
//! function of the rows [`super::load`] read once: no I/O, no clock (the load time is in
//! the [`Evidence`]). For each kind READY needs it says which fact is held for which
//! material version, or that none is, and for a missing one what *was* seen last: a refused
//! request (its status, reason, key id and time), a 202 whose entry waits in a consumer's
//! pending list, an entry not yet read, kept aside, dead-lettered or lost, or nothing at
//! all. The chain lists every row in time order.

use super::{AppRow, DeadRow, EntryRow, Evidence, FactRow, HistoryRow, Target};
use crate::facts::application::AppKey;
use crate::facts::envelope::{FactId, FactKind, Source};
use crate::facts::inbox::describe;
use crate::harness::timestamp::format_rfc3339;
use serde::Serialize;

/// The whole answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// What was explained, in words (`T/A` or `T/SOURCE/EVENT_ID`).
    pub target: String,
    /// For an event: what became of each request and entry that carried it.
    pub event: Option<EventFate>,
    /// Each application concerned, with its READY answer.
    pub applications: Vec<AppAnswer>,
    /// Every row, in time order.
    pub chain: Vec<Link>,
}

/// What became of one event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventFate {
    /// Its source.
    pub source: Source,
    /// Each request and entry that carried it, at its furthest point, in time order.
    pub seen: Vec<Seen>,
}

/// One application's READY answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AppAnswer {
    /// `T/A`.
    pub application: String,
    /// Whether it is registered.
    pub registered: bool,
    /// Its current material version.
    pub material_version: Option<u64>,
    /// Whether it is marked READY.
    pub ready: bool,
    /// `reason (at TIME)` once terminated.
    pub terminated: Option<String>,
    /// The identities whose open conflict stops it.
    pub open_conflicts: Vec<String>,
    /// Its entries waiting in quarantine.
    pub quarantined: Vec<String>,
    /// Each kind READY needs.
    pub kinds: Vec<KindAnswer>,
    /// The plain answer.
    pub answer: String,
    /// Its READY history.
    pub history: Vec<HistoryRow>,
}

/// One kind of fact for one application.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KindAnswer {
    /// `payment` or `signature`.
    pub kind: FactKind,
    /// The source that reports it.
    pub source: Source,
    /// Held, or missing and what was seen.
    pub state: KindState,
}

/// Whether a kind's fact is held for the current material version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum KindState {
    /// Held: an accepted, unwithdrawn fact for the current version.
    Held {
        /// Its event id.
        event_id: String,
        /// Its material version.
        material_version: u64,
        /// The entry it was filed under.
        entry: String,
    },
    /// Missing.
    Missing {
        /// Facts for the current version that a withdrawal names: `(event id, withdrawal)`.
        withdrawn: Vec<(String, String)>,
        /// Facts held for other material versions: `(event id, version)`.
        other_versions: Vec<(String, u64)>,
        /// The last thing seen from the source for this application.
        seen: Seen,
    },
}

/// What was seen of a request or an entry, at its furthest point.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "seen")]
pub enum Seen {
    /// Nothing at all.
    Nothing,
    /// A request refused (never in the stream).
    Refused {
        /// HTTP status.
        status: u16,
        /// Reason word.
        reason: String,
        /// What was wrong.
        detail: Option<String>,
        /// The key whose signature matched (none for a bad signature).
        key_id: Option<String>,
        /// When (Unix milliseconds).
        at_ms: i64,
    },
    /// Accepted and delivered, not decided: pending in a consumer.
    Pending {
        /// The entry.
        entry: String,
        /// The consumer holding it.
        consumer: String,
        /// Milliseconds since its last delivery.
        idle_ms: u64,
        /// Deliveries so far.
        deliveries: u32,
        /// When it was received.
        at_ms: Option<i64>,
    },
    /// Accepted, in the stream, neither pending nor decided: not read by the group yet.
    Unread {
        /// The entry.
        entry: String,
        /// When it was received.
        at_ms: Option<i64>,
    },
    /// Decided by a consumer.
    Decided {
        /// The entry.
        entry: String,
        /// The verdict word.
        verdict: String,
        /// The consumer.
        consumer: Option<String>,
        /// When it committed.
        at_ms: i64,
    },
    /// Kept aside by the inbox.
    Parked {
        /// The entry.
        entry: String,
        /// Its state word.
        state: String,
        /// A late mismatch's kind.
        mismatch: Option<String>,
    },
    /// Dead-lettered.
    DeadLettered {
        /// The entry.
        entry: String,
        /// `unparseable` or `undecidable`.
        category: String,
        /// The error.
        reason: String,
    },
    /// Answered 202, and now neither in the stream, pending, decided nor dead-lettered.
    Lost {
        /// The entry.
        entry: String,
        /// When it was accepted.
        at_ms: Option<i64>,
    },
}

/// One row of the chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Link {
    /// When (Unix milliseconds), if the row says.
    pub at_ms: Option<i64>,
    /// `receipt`, `entry`, `pending`, `verdict`, `fact`, `withdrawal`, `conflict`,
    /// `parked`, `dead_letter`, `ready`.
    pub what: &'static str,
    /// The row in words.
    pub text: String,
}

/// The answer for `evidence`.
pub fn explain(evidence: &Evidence) -> Explanation {
    let (target, event) = match &evidence.target {
        Target::Application { key } => (key.to_string(), None),
        Target::Event { id } => (describe(id), Some(event_fate(evidence, id))),
    };
    let applications = evidence
        .concerned
        .iter()
        .map(|key| app_answer(evidence, key))
        .collect();
    Explanation {
        target,
        event,
        applications,
        chain: chain(evidence),
    }
}

/// Milliseconds of a stream entry id (`ms-seq`).
fn entry_ms(entry: &str) -> Option<i64> {
    entry.split_once('-').and_then(|(ms, _)| ms.parse().ok())
}

/// What became of `entry`, at its furthest point.
fn resolve(evidence: &Evidence, entry: &str, at_ms: Option<i64>) -> Seen {
    if let Some(dead) = evidence.dead.iter().find(|d| d.entry == entry) {
        return Seen::DeadLettered {
            entry: entry.to_owned(),
            category: dead.category.clone(),
            reason: dead.reason.clone(),
        };
    }
    if let Some(parked) = evidence.parked.iter().find(|p| p.entry == entry) {
        return Seen::Parked {
            entry: entry.to_owned(),
            state: parked.state.clone(),
            mismatch: parked.mismatch.clone(),
        };
    }
    if let Some(verdict) = evidence.verdicts.iter().find(|v| v.entry == entry) {
        return Seen::Decided {
            entry: entry.to_owned(),
            verdict: verdict.verdict.clone(),
            consumer: verdict.consumer.clone(),
            at_ms: verdict.committed_ms,
        };
    }
    if let Some(pending) = evidence.pending.iter().find(|p| p.entry == entry) {
        return Seen::Pending {
            entry: entry.to_owned(),
            consumer: pending.consumer.clone(),
            idle_ms: pending.idle_ms,
            deliveries: pending.deliveries,
            at_ms,
        };
    }
    let entry = entry.to_owned();
    if evidence.entries.iter().any(|e| e.id == entry) {
        Seen::Unread { entry, at_ms }
    } else {
        Seen::Lost { entry, at_ms }
    }
}

/// Every request and entry that matches, each resolved, in time order: receipts first
/// (a 202's entry resolved), then entries, verdicts and dead letters no receipt named.
fn sightings(
    evidence: &Evidence,
    receipt_matches: impl Fn(&super::Receipt) -> bool,
    entry_matches: impl Fn(Option<&str>, Option<&str>, Option<&str>, Option<&str>) -> bool,
) -> Vec<(i64, Seen)> {
    let mut seen = Vec::new();
    let mut entries = std::collections::BTreeSet::new();
    for r in evidence.receipts.iter().filter(|r| receipt_matches(r)) {
        let found = match &r.entry {
            Some(entry) if r.status == 202 => {
                entries.insert(entry.clone());
                resolve(evidence, entry, Some(r.at_ms))
            }
            _ => Seen::Refused {
                status: r.status,
                reason: r.reason.clone(),
                detail: r.detail.clone(),
                key_id: r.key_id.clone(),
                at_ms: r.at_ms,
            },
        };
        seen.push((r.at_ms, found));
    }
    let mut more: Vec<(String, Option<i64>)> = Vec::new();
    for e in &evidence.entries {
        let (t, a, s, v) = (&e.tenant_id, &e.application_id, &e.source, &e.event_id);
        if entry_matches(t.as_deref(), a.as_deref(), s.as_deref(), v.as_deref()) {
            more.push((e.id.clone(), e.received_ms));
        }
    }
    for v in &evidence.verdicts {
        let (t, a, s, e) = (&v.tenant_id, &v.application_id, &v.source, &v.event_id);
        if entry_matches(t.as_deref(), a.as_deref(), s.as_deref(), e.as_deref()) {
            more.push((v.entry.clone(), v.received_ms));
        }
    }
    for d in &evidence.dead {
        let (t, a, s, e) = (&d.tenant_id, &d.application_id, &d.source, &d.event_id);
        if entry_matches(t.as_deref(), a.as_deref(), s.as_deref(), e.as_deref()) {
            more.push((d.entry.clone(), None));
        }
    }
    for (entry, at_ms) in more {
        if entries.insert(entry.clone()) {
            let at = at_ms.or_else(|| entry_ms(&entry)).unwrap_or(0);
            seen.push((at, resolve(evidence, &entry, at_ms)));
        }
    }
    seen.sort_by_key(|(at, _)| *at);
    seen
}

/// What became of each request and entry carrying the event `id`.
fn event_fate(evidence: &Evidence, id: &FactId) -> EventFate {
    let source = id.source.as_str();
    let same = |t: Option<&str>, s: Option<&str>, e: Option<&str>| {
        t == Some(id.tenant_id.as_str()) && s == Some(source) && e == Some(id.event_id.as_str())
    };
    let seen = sightings(
        evidence,
        |r| {
            same(
                r.tenant_id.as_deref(),
                r.source.as_deref(),
                r.event_id.as_deref(),
            )
        },
        |t, _, s, e| same(t, s, e),
    )
    .into_iter()
    .map(|(_, seen)| seen)
    .collect();
    EventFate {
        source: id.source,
        seen,
    }
}

/// The last thing seen from `source` for application `key`.
fn last_seen(evidence: &Evidence, key: &AppKey, source: Source) -> Seen {
    let tenant = Some(key.tenant_id.as_str());
    let app = Some(key.application_id.as_str());
    let source_name = Some(source.as_str());
    sightings(
        evidence,
        |r| {
            r.tenant_id.as_deref() == tenant
                && r.application_id.as_deref() == app
                && r.source.as_deref() == source_name
        },
        |t, a, s, _| t == tenant && a == app && s == source_name,
    )
    .pop()
    .map_or(Seen::Nothing, |(_, seen)| seen)
}

fn withdrawal_of<'e>(evidence: &'e Evidence, fact: &FactRow) -> Option<&'e FactRow> {
    evidence.facts.iter().find(|w| {
        w.withdraws.as_deref() == Some(fact.id.event_id.as_str())
            && w.id.tenant_id == fact.id.tenant_id
            && w.id.source == fact.id.source
    })
}

/// Held, or missing with what was seen, for one kind of `app`.
fn kind_state(evidence: &Evidence, app: &AppRow, source: Source) -> KindState {
    let confirming = evidence.facts.iter().filter(|f| {
        f.id.tenant_id == app.key.tenant_id
            && f.application_id == app.key.application_id
            && f.id.source == source
            && f.event_type == source.fact_type().as_str()
    });
    let (mut withdrawn, mut other_versions) = (Vec::new(), Vec::new());
    for fact in confirming {
        if fact.material_version != app.material_version {
            other_versions.push((fact.id.event_id.clone(), fact.material_version));
        } else if let Some(withdrawal) = withdrawal_of(evidence, fact) {
            withdrawn.push((fact.id.event_id.clone(), withdrawal.id.event_id.clone()));
        } else {
            return KindState::Held {
                event_id: fact.id.event_id.clone(),
                material_version: fact.material_version,
                entry: fact.entry.clone(),
            };
        }
    }
    KindState::Missing {
        withdrawn,
        other_versions,
        seen: last_seen(evidence, &app.key, source),
    }
}

/// One application's answer.
fn app_answer(evidence: &Evidence, key: &AppKey) -> AppAnswer {
    let quarantined: Vec<String> = evidence
        .parked
        .iter()
        .filter(|p| p.id.tenant_id == key.tenant_id && p.application_id == key.application_id)
        .filter(|p| p.state == "quarantined")
        .map(|p| p.entry.clone())
        .collect();
    let history: Vec<HistoryRow> = evidence
        .history
        .iter()
        .filter(|h| h.key == *key)
        .cloned()
        .collect();
    let Some(app) = evidence.applications.iter().find(|a| a.key == *key) else {
        let answer = unregistered_answer(key, &quarantined);
        return AppAnswer {
            application: key.to_string(),
            registered: false,
            material_version: None,
            ready: false,
            terminated: None,
            open_conflicts: Vec::new(),
            quarantined,
            kinds: Vec::new(),
            answer,
            history,
        };
    };
    let open_conflicts: Vec<String> = evidence
        .conflicts
        .iter()
        .filter(|c| c.open && c.applications.contains(&key.application_id))
        .filter(|c| c.id.tenant_id == key.tenant_id)
        .map(|c| describe(&c.id))
        .collect();
    let kinds: Vec<KindAnswer> = Source::ALL
        .into_iter()
        .map(|source| KindAnswer {
            kind: source.kind(),
            source,
            state: kind_state(evidence, app, source),
        })
        .collect();
    let terminated = app
        .terminated
        .as_ref()
        .map(|(reason, at)| format!("{reason} (at {})", format_rfc3339(*at)));
    let answer = answer(
        app,
        terminated.as_deref(),
        &open_conflicts,
        &kinds,
        evidence.now_ms,
    );
    AppAnswer {
        application: key.to_string(),
        registered: true,
        material_version: Some(app.material_version),
        ready: app.ready,
        terminated,
        open_conflicts,
        quarantined,
        kinds,
        answer,
        history,
    }
}

fn unregistered_answer(key: &AppKey, quarantined: &[String]) -> String {
    if quarantined.is_empty() {
        format!("not READY: {key} is not registered, and no entry waits for it")
    } else {
        format!(
            "not READY: {key} is not registered; {} entr{} wait{} in quarantine for it ({}): \
             `pipeline applications register` decides them again",
            quarantined.len(),
            if quarantined.len() == 1 { "y" } else { "ies" },
            if quarantined.len() == 1 { "s" } else { "" },
            quarantined.join(", ")
        )
    }
}

/// The plain answer: READY with what holds it, or every reason it is not.
fn answer(
    app: &AppRow,
    terminated: Option<&str>,
    conflicts: &[String],
    kinds: &[KindAnswer],
    now_ms: i64,
) -> String {
    let version = app.material_version;
    let mut reasons = Vec::new();
    if let Some(terminated) = terminated {
        reasons.push(format!("terminated: {terminated}; READY is false for ever"));
    }
    for conflict in conflicts {
        reasons.push(format!(
            "open conflict on {conflict} (`pipeline conflicts resolve` settles it)"
        ));
    }
    let mut held = Vec::new();
    for kind in kinds {
        match &kind.state {
            KindState::Held {
                event_id, entry, ..
            } => held.push(format!(
                "{} {}/{event_id} (entry {entry})",
                kind.kind.as_str(),
                kind.source
            )),
            KindState::Missing {
                withdrawn,
                other_versions,
                seen,
            } => reasons.push(missing(
                kind,
                version,
                withdrawn,
                other_versions,
                seen,
                now_ms,
            )),
        }
    }
    // The mark is what consumers and operator steps wrote; the reasons are read from the
    // rows. They agree unless something wrote one without the other: say so.
    match (reasons.is_empty(), app.ready) {
        (true, true) => format!(
            "READY: {} held for v{version}, no open conflict",
            held.join(" and ")
        ),
        (true, false) => format!(
            "not marked READY, although {} are held for v{version} and no conflict is open: \
             the mark disagrees with the facts",
            held.join(" and ")
        ),
        (false, false) => format!("not READY: {}", reasons.join("; ")),
        (false, true) => format!(
            "marked READY, although: {}; the mark disagrees with the facts",
            reasons.join("; ")
        ),
    }
}

fn missing(
    kind: &KindAnswer,
    version: u64,
    withdrawn: &[(String, String)],
    other_versions: &[(String, u64)],
    seen: &Seen,
    now_ms: i64,
) -> String {
    let mut text = format!("no {} for v{version}", kind.kind.as_str());
    for (fact, by) in withdrawn {
        text += &format!(
            " ({}/{fact} was withdrawn by {}/{by})",
            kind.source, kind.source
        );
    }
    for (fact, other) in other_versions {
        text += &format!(" ({}/{fact} is held for v{other} only)", kind.source);
    }
    if withdrawn.is_empty() {
        text += &format!(": {}", seen_text(seen, kind.source, now_ms));
    }
    text
}

fn time(at_ms: i64) -> String {
    format_rfc3339(at_ms.div_euclid(1000))
}

fn at(at_ms: Option<i64>) -> String {
    at_ms.map_or(String::new(), |ms| format!(" at {}", time(ms)))
}

/// What was seen, in words (`now_ms` is unused by the words but kept for ages to come).
pub fn seen_text(seen: &Seen, source: Source, _now_ms: i64) -> String {
    match seen {
        Seen::Nothing => format!(
            "nothing at all was seen from {source} for it (no request, no entry): ask {source} \
             for its send log"
        ),
        Seen::Refused {
            status,
            reason,
            detail,
            key_id,
            at_ms,
        } => {
            let key = match (key_id, reason.as_str()) {
                (Some(key), _) => format!(" with key id {key}"),
                (None, "bad_signature") => format!(" (no key of {source} matched it)"),
                (None, _) => String::new(),
            };
            let detail = detail.as_ref().map_or(String::new(), |d| format!(": {d}"));
            format!(
                "the last request was refused {status} {reason} at {}{key}{detail}",
                time(*at_ms)
            )
        }
        Seen::Pending {
            entry,
            consumer,
            idle_ms,
            deliveries,
            at_ms,
        } => format!(
            "a 202{} whose entry {entry} is still pending in consumer {consumer} for {} s \
             ({deliveries} deliver{}), not decided yet",
            at(*at_ms),
            idle_ms / 1000,
            if *deliveries == 1 { "y" } else { "ies" }
        ),
        Seen::Unread { entry, at_ms } => format!(
            "a 202{} whose entry {entry} is in the stream, not yet read by the group",
            at(*at_ms)
        ),
        Seen::Decided {
            entry,
            verdict,
            consumer,
            at_ms,
        } => format!(
            "entry {entry} was decided {verdict}{} at {}",
            consumer
                .as_ref()
                .map_or(String::new(), |c| format!(" by consumer {c}")),
            time(*at_ms)
        ),
        Seen::Parked {
            entry,
            state,
            mismatch,
        } => format!(
            "entry {entry} is kept aside: {state}{}",
            mismatch
                .as_ref()
                .map_or(String::new(), |m| format!(" ({m})"))
        ),
        Seen::DeadLettered {
            entry,
            category,
            reason,
        } => format!("entry {entry} was dead-lettered ({category}: {reason})"),
        Seen::Lost { entry, at_ms } => format!(
            "a 202{} for entry {entry}, which is neither in the stream nor pending, decided or \
             dead-lettered: the stream lost it (was Redis restarted without persistence?)",
            at(*at_ms)
        ),
    }
}

/// Whether a row with these ids belongs to the chain of `target`.
fn in_target(
    target: &Target,
    tenant: Option<&str>,
    source: Option<&str>,
    event: Option<&str>,
) -> bool {
    match target {
        Target::Application { .. } => true,
        Target::Event { id } => {
            tenant == Some(id.tenant_id.as_str())
                && source == Some(id.source.as_str())
                && event == Some(id.event_id.as_str())
        }
    }
}

/// Every row in time order (an event's own rows only, for an event).
fn chain(evidence: &Evidence) -> Vec<Link> {
    let target = &evidence.target;
    let mut links = Vec::new();
    let mut entries = std::collections::BTreeSet::new();
    for r in &evidence.receipts {
        let (t, s, e) = (
            r.tenant_id.as_deref(),
            r.source.as_deref(),
            r.event_id.as_deref(),
        );
        if in_target(target, t, s, e) {
            entries.extend(r.entry.clone());
            links.push(receipt_link(r));
        }
    }
    for e in &evidence.entries {
        let (t, s, v) = (
            e.tenant_id.as_deref(),
            e.source.as_deref(),
            e.event_id.as_deref(),
        );
        if in_target(target, t, s, v) {
            entries.insert(e.id.clone());
            links.push(entry_link(e));
        }
    }
    for v in &evidence.verdicts {
        let (t, s, e) = (
            v.tenant_id.as_deref(),
            v.source.as_deref(),
            v.event_id.as_deref(),
        );
        if in_target(target, t, s, e) || entries.contains(&v.entry) {
            entries.insert(v.entry.clone());
            links.push(Link {
                at_ms: Some(v.committed_ms),
                what: "verdict",
                text: format!(
                    "entry {} decided {}{}{} ({} processing{})",
                    v.entry,
                    v.verdict,
                    v.consumer
                        .as_ref()
                        .map_or(String::new(), |c| format!(" by {c}")),
                    v.deliveries
                        .map_or(String::new(), |d| format!(" on delivery {d}")),
                    v.processings,
                    if v.processings == 1 { "" } else { "s" }
                ),
            });
        }
    }
    links.extend(other_links(evidence, &entries));
    links.sort_by_key(|link| link.at_ms.unwrap_or(i64::MAX));
    links
}

fn receipt_link(r: &super::Receipt) -> Link {
    let named = match (&r.tenant_id, &r.event_id) {
        (Some(t), Some(e)) => format!(" {t}/{}/{e}", r.source.as_deref().unwrap_or("?")),
        _ => String::new(),
    };
    Link {
        at_ms: Some(r.at_ms),
        what: "receipt",
        text: format!(
            "{} {}{named}{}{}{}",
            r.status,
            r.reason,
            r.key_id
                .as_ref()
                .map_or(String::new(), |k| format!(" key {k}")),
            r.entry
                .as_ref()
                .map_or(String::new(), |e| format!(" entry {e}")),
            r.detail
                .as_ref()
                .map_or(String::new(), |d| format!(": {d}"))
        ),
    }
}

fn entry_link(e: &EntryRow) -> Link {
    Link {
        at_ms: e.received_ms.or_else(|| entry_ms(&e.id)),
        what: "entry",
        text: format!(
            "stream entry {} {}/{}/{} for application {}",
            e.id,
            e.tenant_id.as_deref().unwrap_or("?"),
            e.source.as_deref().unwrap_or("?"),
            e.event_id.as_deref().unwrap_or("?"),
            e.application_id.as_deref().unwrap_or("?")
        ),
    }
}

/// Pending entries, facts, withdrawals, conflicts, parked entries, dead letters and READY
/// history of the chain (`entries`: the chain's stream entries).
fn other_links(evidence: &Evidence, entries: &std::collections::BTreeSet<String>) -> Vec<Link> {
    let target = &evidence.target;
    let mut links = Vec::new();
    for p in evidence
        .pending
        .iter()
        .filter(|p| entries.contains(&p.entry))
    {
        links.push(Link {
            at_ms: Some(evidence.now_ms - p.idle_ms as i64),
            what: "pending",
            text: format!(
                "entry {} delivered to {} ({} deliver{}), not acknowledged for {} s",
                p.entry,
                p.consumer,
                p.deliveries,
                if p.deliveries == 1 { "y" } else { "ies" },
                p.idle_ms / 1000
            ),
        });
    }
    for f in &evidence.facts {
        let id = &f.id;
        let named = in_target(
            target,
            Some(&id.tenant_id),
            Some(id.source.as_str()),
            Some(&id.event_id),
        ) || f.withdraws.as_deref().is_some_and(|w| {
            in_target(
                target,
                Some(&id.tenant_id),
                Some(id.source.as_str()),
                Some(w),
            )
        });
        if named {
            links.push(fact_link(f));
        }
    }
    for c in &evidence.conflicts {
        let id = &c.id;
        if in_target(
            target,
            Some(&id.tenant_id),
            Some(id.source.as_str()),
            Some(&id.event_id),
        ) {
            links.push(Link {
                at_ms: None,
                what: "conflict",
                text: format!(
                    "conflict on {} ({}), stops {}{}",
                    describe(id),
                    if c.open { "open" } else { "resolved" },
                    c.applications.join(", "),
                    c.last
                        .as_ref()
                        .map_or(String::new(), |l| format!("; last: {l}"))
                ),
            });
        }
    }
    for p in &evidence.parked {
        let id = &p.id;
        if in_target(
            target,
            Some(&id.tenant_id),
            Some(id.source.as_str()),
            Some(&id.event_id),
        ) {
            links.push(Link {
                at_ms: Some(p.since * 1000),
                what: "parked",
                text: format!(
                    "entry {} {} since {}: {}{}",
                    p.entry,
                    p.state,
                    format_rfc3339(p.since),
                    describe(id),
                    p.mismatch
                        .as_ref()
                        .map_or(String::new(), |m| format!(" ({m})"))
                ),
            });
        }
    }
    links.extend(dead_and_history(evidence, entries));
    links
}

fn fact_link(f: &FactRow) -> Link {
    let (what, text) = match &f.withdraws {
        Some(withdrawn) => (
            "withdrawal",
            format!(
                "{} {} withdraws {}/{withdrawn} (entry {})",
                describe(&f.id),
                f.event_type,
                f.id.source,
                f.entry
            ),
        ),
        None => (
            "fact",
            format!(
                "{} {} for {} v{} (entry {})",
                describe(&f.id),
                f.event_type,
                f.application_id,
                f.material_version,
                f.entry
            ),
        ),
    };
    Link {
        at_ms: entry_ms(&f.entry),
        what,
        text,
    }
}

fn dead_and_history(
    evidence: &Evidence,
    entries: &std::collections::BTreeSet<String>,
) -> Vec<Link> {
    let target = &evidence.target;
    let mut links = Vec::new();
    for d in &evidence.dead {
        let DeadRow {
            entry,
            category,
            reason,
            ..
        } = d;
        let (t, s, e) = (
            d.tenant_id.as_deref(),
            d.source.as_deref(),
            d.event_id.as_deref(),
        );
        if in_target(target, t, s, e) || entries.contains(entry) {
            links.push(Link {
                at_ms: entry_ms(entry),
                what: "dead_letter",
                text: format!(
                    "entry {entry} dead-lettered {category} after {} deliveries: {reason}",
                    d.deliveries.map_or("?".to_owned(), |n| n.to_string())
                ),
            });
        }
    }
    for h in &evidence.history {
        let caused = match target {
            Target::Application { .. } => true,
            Target::Event { id } => entries.contains(&h.cause) || h.cause.contains(&describe(id)),
        };
        if caused {
            links.push(Link {
                at_ms: Some(h.at_ms),
                what: "ready",
                text: format!(
                    "{} {} (cause {})",
                    h.key,
                    if h.ready {
                        "became READY"
                    } else {
                        "stopped being READY"
                    },
                    h.cause
                ),
            });
        }
    }
    links
}

/// The explanation as text for people.
pub fn render(explanation: &Explanation, now_ms: i64) -> String {
    let mut out = format!("explain {}\n", explanation.target);
    if let Some(fate) = &explanation.event {
        out += "the event:\n";
        if fate.seen.is_empty() {
            out += &format!("  {}\n", seen_text(&Seen::Nothing, fate.source, now_ms));
        }
        for seen in &fate.seen {
            out += &format!("  {}\n", seen_text(seen, fate.source, now_ms));
        }
    }
    for app in &explanation.applications {
        out += &format!("application {}", app.application);
        if let Some(version) = app.material_version {
            out += &format!(" v{version}");
        }
        out += &format!("\n  {}\n", app.answer);
        for kind in &app.kinds {
            let state = match &kind.state {
                KindState::Held {
                    event_id,
                    material_version,
                    entry,
                } => format!(
                    "held: {}/{event_id} for v{material_version} (entry {entry})",
                    kind.source
                ),
                KindState::Missing { seen, .. } => {
                    format!(
                        "missing; last seen: {}",
                        seen_text(seen, kind.source, now_ms)
                    )
                }
            };
            out += &format!("  {:<9} {state}\n", kind.kind.as_str());
        }
    }
    out += "chain:\n";
    for link in &explanation.chain {
        let when = link.at_ms.map_or("-".repeat(20), time);
        out += &format!("  {when}  {:<11} {}\n", link.what, link.text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{EntryRow, Receipt};
    use super::*;

    fn key() -> AppKey {
        AppKey {
            tenant_id: "t".into(),
            application_id: "a".into(),
        }
    }

    /// Application t/a at v2, a signature held for v2, and `receipts` / `dead` for finance.
    fn evidence(receipts: Vec<Receipt>, entries: Vec<EntryRow>, dead: Vec<DeadRow>) -> Evidence {
        let fact = |source: Source, event: &str, kind: &str, version: u64| FactRow {
            id: FactId {
                tenant_id: "t".into(),
                source,
                event_id: event.into(),
            },
            application_id: "a".into(),
            event_type: kind.into(),
            material_version: version,
            entry: format!("{version}-0"),
            withdraws: None,
        };
        Evidence {
            target: Target::Application { key: key() },
            now_ms: 1_000_000,
            applications: vec![AppRow {
                key: key(),
                business_key: "BK".into(),
                material_version: 2,
                terminated: None,
                ready: false,
            }],
            concerned: vec![key()],
            receipts,
            entries,
            pending: Vec::new(),
            verdicts: Vec::new(),
            facts: vec![
                fact(Source::Contracts, "SIG", "CONTRACT_SIGNED", 2),
                fact(Source::Finance, "PAY-OLD", "PAYMENT_CONFIRMED", 1),
            ],
            conflicts: Vec::new(),
            parked: Vec::new(),
            dead,
            history: Vec::new(),
        }
    }

    fn accepted(entry: &str, at_ms: i64) -> Receipt {
        Receipt {
            at_ms,
            source: Some("finance".into()),
            key_id: Some("k".into()),
            status: 202,
            reason: "accepted".into(),
            tenant_id: Some("t".into()),
            application_id: Some("a".into()),
            event_id: Some("PAY".into()),
            entry: Some(entry.into()),
            ..Receipt::default()
        }
    }

    #[test]
    fn a_202_whose_entry_is_nowhere_any_more_is_reported_lost_beside_the_fact_of_the_older_version()
    {
        let explanation = explain(&evidence(
            vec![accepted("5-0", 5_000)],
            Vec::new(),
            Vec::new(),
        ));
        assert_eq!(
            explanation.applications[0].answer,
            "not READY: no payment for v2 (finance/PAY-OLD is held for v1 only): a 202 at \
             1970-01-01T00:00:05Z for entry 5-0, which is neither in the stream nor pending, \
             decided or dead-lettered: the stream lost it (was Redis restarted without persistence?)"
        );
    }

    #[test]
    fn a_ready_mark_the_facts_do_not_support_is_named_as_a_disagreement() {
        let mut rows = evidence(Vec::new(), Vec::new(), Vec::new());
        rows.applications[0].ready = true;
        let answer = &explain(&rows).applications[0].answer;
        assert!(
            answer.starts_with("marked READY, although: no payment for v2")
                && answer.ends_with("; the mark disagrees with the facts"),
            "{answer}"
        );
    }

    #[test]
    fn the_latest_sighting_wins_and_a_dead_letter_outranks_the_entry_it_copies() {
        let entry = EntryRow {
            id: "9-0".into(),
            source: Some("finance".into()),
            tenant_id: Some("t".into()),
            application_id: Some("a".into()),
            event_id: Some("PAY".into()),
            received_ms: Some(9_000),
        };
        let dead = DeadRow {
            entry: "9-0".into(),
            category: "undecidable".into(),
            reason: "a stored fact no longer parses".into(),
            ..DeadRow::default()
        };
        let evidence = evidence(vec![accepted("5-0", 5_000)], vec![entry], vec![dead]);
        let explanation = explain(&evidence);
        let KindState::Missing { seen, .. } = &explanation.applications[0].kinds[0].state else {
            panic!("the payment is missing");
        };
        assert_eq!(
            *seen,
            Seen::DeadLettered {
                entry: "9-0".into(),
                category: "undecidable".into(),
                reason: "a stored fact no longer parses".into(),
            }
        );
    }
}
