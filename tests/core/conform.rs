//! The conformance oracle without processes: receivers inside the test, driven through
//! the `CardTarget` trait (what a user's `#[test]` would do), checked by the same campaign
//! `arrival conform` runs. The receivers are the crate's own pure receiver under the
//! contract and under two of its mutants; what is under test here is the oracle (the
//! candidate worlds, the naming, shrinking), not the receivers.

use crate::util::root;
use arrival::card::campaign::{
    campaign, cover_plans, state_cover_plans, trace_plans, walk_plans, ConformReport, Options, Plan,
};
use arrival::card::conform::{
    Answer, CardTarget, Channels, HarnessError, Observed, Sending, Settings,
};
use arrival::card::fixture::Scenario;
use arrival::card::model_file::load_model;
use arrival::card::mutants::Mutant;
use arrival::card::receiver::{
    Card, Decision, FirstCardReading, InputRef, Receiver, Verdict as CardVerdict,
};
use arrival::card::replay::CardReport;
use arrival::card::step::{Action, External};
use arrival::card::wire::{Catalog, Snapshot};
use arrival::harness::conform::{Status, Verdict};
use serde_json::Value;
use std::collections::BTreeMap;

/// The pure receiver under a policy, as a target that keeps everything in memory (so it
/// cannot be killed: kills become disconnects and restarts are skipped).
struct InProcess {
    policy: Option<Mutant>,
    catalog: Catalog,
    receiver: Receiver,
    /// Answer a changed payload `ignored` (its record and hold kept as the contract says).
    misword_changed_payloads: bool,
    /// Give acknowledgements without their meaning.
    bare_acks: bool,
    /// File a changed payload's hold under its id's first card (the contract's other
    /// reading), not the variant's.
    first_card: bool,
    /// Drop the next reconciliation unheard and answer it indefinite (a receiver that
    /// died before it read the request).
    lose_next_reconcile: bool,
    /// Never answer this delivery (a receiver that hangs on it): indefinite.
    hang_on: Option<u32>,
}

impl InProcess {
    fn new(policy: Option<Mutant>) -> InProcess {
        InProcess {
            policy,
            catalog: Catalog::new(),
            receiver: Receiver::default(),
            misword_changed_payloads: false,
            bare_acks: false,
            first_card: false,
            lose_next_reconcile: false,
            hang_on: None,
        }
    }
}

impl CardTarget for InProcess {
    fn start(
        &mut self,
        initial: &BTreeMap<String, CardReport>,
        fresh: bool,
    ) -> Result<(), HarnessError> {
        if fresh {
            let catalog = &mut self.catalog;
            let cards: Vec<_> = initial
                .iter()
                .map(|(name, card)| {
                    let card = Card::new(card.version, catalog.state(&card.state));
                    (catalog.sym(name), card)
                })
                .collect();
            self.receiver = Receiver::new(cards);
        }
        Ok(())
    }

    fn deliver(
        &mut self,
        delivery: u32,
        body: &[u8],
        send: Sending,
    ) -> Result<Answer, HarnessError> {
        if self.hang_on == Some(delivery) {
            return Ok(Answer::Indefinite("timed out".into()));
        }
        let event = self
            .catalog
            .event_from_bytes(body)
            .expect("fixtures send JSON");
        let delivered = match self.first_card {
            true => self
                .receiver
                .deliver(FirstCardReading, delivery, None, &event),
            false => self.receiver.deliver(self.policy, delivery, None, &event),
        };
        let changed_payload =
            delivered.verdict == CardVerdict::Decided(Decision::ConflictChangedPayload);
        let word = match () {
            _ if self.bare_acks => None,
            _ if self.misword_changed_payloads && changed_payload => Some("ignored".to_owned()),
            _ => Some(delivered.ack.name().to_owned()),
        };
        Ok(match send {
            Sending::Wait => Answer::Ack(word),
            _ => Answer::Indefinite("not waited for".into()),
        })
    }

    fn reconcile(&mut self, snapshot: &Value) -> Result<Answer, HarnessError> {
        if std::mem::take(&mut self.lose_next_reconcile) {
            return Ok(Answer::Indefinite("connection refused".into()));
        }
        let snapshot = Snapshot {
            object_id: self.catalog.sym(snapshot["object_id"].as_str().unwrap()),
            version: snapshot["version"].as_u64().unwrap(),
            state: self.catalog.state(&snapshot["state"]),
        };
        let reconciled = match self.first_card {
            true => self.receiver.reconcile(FirstCardReading, &snapshot),
            false => self.receiver.reconcile(self.policy, &snapshot),
        };
        Ok(Answer::Ack(Some(reconciled.outcome.name().to_owned())))
    }

    fn read(&mut self) -> Result<Observed, HarnessError> {
        let catalog = &self.catalog;
        let cards = self
            .receiver
            .cards()
            .iter()
            .map(|(id, card)| {
                let report = CardReport {
                    version: card.version,
                    state: catalog.state_value(card.state).clone(),
                };
                (catalog.name(id).to_owned(), report)
            })
            .collect();
        let paused = self.receiver.paused().map(|c| catalog.name(c).to_owned());
        let unresolved = self
            .receiver
            .unresolved()
            .into_iter()
            .map(|input| match input {
                InputRef::Event(id) => catalog.name(id).to_owned(),
                InputRef::Delivery(number) => format!("delivery-{number}"),
            });
        Ok(Observed {
            cards,
            paused: Some(paused.collect()),
            unresolved: Some(unresolved.collect()),
        })
    }

    fn kill(&mut self) -> Result<(), HarnessError> {
        Ok(())
    }

    fn can_kill(&self) -> bool {
        false
    }
}

fn run(policy: Option<Mutant>, channels: Channels, walks: usize) -> ConformReport {
    let loaded = load_model(&root().join("models/b62-15.toml"), None).unwrap();
    let scenario = Scenario::clone(&loaded.scenario);
    let (mut plans, _) = trace_plans(&scenario, &root().join("fixtures/regressions"), false);
    plans.extend(walk_plans(&loaded, walks, 7, false));
    let options = Options {
        settings: Settings {
            channels,
            max_retries: 3,
            kill_window_ms: 1,
            seed: 7,
        },
        shrink_budget: 100,
        confirm: 3,
        target: "in-process".into(),
        source: "models/b62-15.toml".into(),
    };
    campaign(&scenario, &plans, &mut InProcess::new(policy), &options).unwrap()
}

fn shrunk(report: &ConformReport) -> (String, Vec<String>, String) {
    let found = report.failure.as_ref().expect("a failure");
    (
        found.property.clone(),
        found.steps.clone(),
        found.reproduced.clone(),
    )
}

fn cards_only(every_step: bool) -> Channels {
    Channels {
        ack: false,
        paused: false,
        unresolved: false,
        every_step,
    }
}

#[test]
fn the_contract_s_own_receiver_passes_every_kept_trace_and_walk_and_is_only_sampled() {
    let report = run(None, Channels::ALL, 20);
    assert_eq!(report.verdict, Verdict::Sampled, "{}", report.text());
    assert_eq!(report.schedules, report.passed);
    // The 14 kept traces of B62-15's fixture, less the two that need an expiry step, and
    // the 20 walks.
    assert_eq!(report.schedules, 12 + 20);
    assert!(report.as_expected("pass"));
    let status = |name: &str| {
        report
            .properties
            .iter()
            .find(|p| p.0 == name)
            .unwrap()
            .1
            .clone()
    };
    assert_eq!(status("version-monotonic"), Status::Sampled);
    assert!(matches!(
        status("first-record-immutable"),
        Status::Unobserved(_)
    ));
    // Nothing here can be killed, so nothing says what a kill does.
    assert!(matches!(
        status("ack-implies-recorded"),
        Status::NotExercised(_)
    ));
}

#[test]
fn last_arrival_wins_is_caught_by_version_monotonic_with_the_kept_trace_s_two_deliveries() {
    let report = run(Some(Mutant::LastArrivalWins), Channels::ALL, 0);
    assert_eq!(
        shrunk(&report),
        (
            "version-monotonic".into(),
            vec!["deliver #1".into(), "deliver #3".into()],
            "3/3".into()
        )
    );
    let fixture = &report.failure.as_ref().unwrap().fixture;
    let schedule = serde_json::to_value(fixture.schedule.as_ref().unwrap()).unwrap();
    assert_eq!(
        schedule,
        serde_json::json!([{"deliver": 1}, {"deliver": 3}])
    );
}

#[test]
fn id_only_dedupe_is_unseen_in_final_cards_seen_in_cards_after_every_step_named_with_unresolved() {
    // Final cards only: every order ends where the contract ends.
    let end = run(Some(Mutant::IdOnlyDedupe), cards_only(false), 5);
    assert_eq!(end.verdict, Verdict::Sampled, "{}", end.text());
    assert!(!end.warnings.is_empty());
    // Cards after every step: three deliveries, and no property can be named from cards.
    let every = run(Some(Mutant::IdOnlyDedupe), cards_only(true), 0);
    assert_eq!(
        shrunk(&every),
        (
            "diverged".into(),
            vec![
                "deliver #4".into(),
                "deliver #6".into(),
                "deliver #7".into()
            ],
            "3/3".into()
        )
    );
    // The acknowledgement's meaning: two deliveries, the changed payload acknowledged
    // `applied` where the contract holds it; kept or swallowed, only the unresolved inputs
    // tell, so no name.
    let ack = Channels {
        ack: true,
        ..cards_only(true)
    };
    let word = run(Some(Mutant::IdOnlyDedupe), ack, 0);
    assert_eq!(
        shrunk(&word),
        (
            "diverged".into(),
            vec!["deliver #4".into(), "deliver #6".into()],
            "3/3".into()
        )
    );
    assert_eq!(word.counts.changed_payloads_swallowed, 0);
    // With the unresolved inputs too, the state shows it swallowed.
    let named = run(Some(Mutant::IdOnlyDedupe), Channels::ALL, 0);
    assert_eq!(
        shrunk(&named),
        (
            "evidence-retained".into(),
            vec!["deliver #4".into(), "deliver #6".into()],
            "3/3".into()
        )
    );
    // Counted over every kept trace run (each runs), not only the shrunk one.
    assert_eq!(named.counts.changed_payloads_swallowed, 11);
}

#[test]
fn a_plan_is_the_same_for_the_same_seed() {
    let loaded = load_model(&root().join("models/b62-15.toml"), None).unwrap();
    let first: Vec<Plan> = walk_plans(&loaded, 10, 3, true);
    assert_eq!(first, walk_plans(&loaded, 10, 3, true));
    assert_ne!(first, walk_plans(&loaded, 10, 4, true));
}

#[test]
fn the_mutants_caught_on_b62_15_within_the_limit_each_get_a_shortest_schedule() {
    let loaded = load_model(&root().join("models/b62-15.toml"), None).unwrap();
    let (plans, missed) = arrival::card::campaign::mutant_plans(&loaded, 50_000, &[], true);
    let ids: Vec<(&str, usize)> = plans
        .iter()
        .map(|plan| (plan.id.as_str(), plan.actions.len()))
        .collect();
    // Shortest first; timestamp-ordering's schedule is last-arrival-wins's and
    // overwrite-first-record's is id-only-dedupe's, so each runs once.
    assert_eq!(
        ids,
        [
            ("mutants/create-unknown-card.no-unknown-card", 1),
            ("mutants/ack-before-record.ack-implies-recorded", 1),
            ("mutants/last-arrival-wins.version-monotonic", 2),
            ("mutants/id-only-dedupe.evidence-retained", 2),
            ("mutants/ignore-pause.paused-frozen", 2),
            ("mutants/apply-equal-version-conflict.version-monotonic", 2),
            ("mutants/pause-on-redelivery.duplicate-no-effect", 2),
            (
                "mutants/forget-held-after-reconcile.reconciliation-settles-holds",
                3
            ),
            ("mutants/dedupe-against-first-record.duplicate-no-effect", 3),
        ]
    );
    // Three cannot break on B62-15 under its budgets (no unsupported type is delivered, no
    // re-encoded copy is allowed, no input lacks an event id); two need deeper schedules
    // than the limit reaches (reevaluate-conflicted-first, re-evaluate-past-re-pause).
    assert_eq!(missed.len(), 5, "{missed:?}");
}

/// The in-process receiver that keeps nothing across a kill: a restart starts it from
/// the initial cards again.
struct Forgetful {
    inner: InProcess,
    initial: BTreeMap<String, CardReport>,
}

impl CardTarget for Forgetful {
    fn start(
        &mut self,
        initial: &BTreeMap<String, CardReport>,
        fresh: bool,
    ) -> Result<(), HarnessError> {
        if fresh {
            self.initial = initial.clone();
        }
        let initial = self.initial.clone();
        self.inner.start(&initial, true)
    }

    fn deliver(
        &mut self,
        delivery: u32,
        body: &[u8],
        send: Sending,
    ) -> Result<Answer, HarnessError> {
        let send = match send {
            Sending::KillAfter(_) => Sending::Disconnect,
            other => other,
        };
        self.inner.deliver(delivery, body, send)
    }

    fn reconcile(&mut self, snapshot: &Value) -> Result<Answer, HarnessError> {
        self.inner.reconcile(snapshot)
    }

    fn read(&mut self) -> Result<Observed, HarnessError> {
        self.inner.read()
    }

    fn kill(&mut self) -> Result<(), HarnessError> {
        Ok(())
    }

    fn can_kill(&self) -> bool {
        true
    }
}

#[test]
fn a_receiver_that_forgets_across_a_kill_fails_ack_implies_recorded_on_one_delivery() {
    let loaded = load_model(&root().join("models/b62-15.toml"), None).unwrap();
    let scenario = Scenario::clone(&loaded.scenario);
    let plans = walk_plans(&loaded, 20, 1, true);
    let options = Options {
        settings: Settings {
            channels: Channels::ALL,
            max_retries: 3,
            kill_window_ms: 1,
            seed: 1,
        },
        shrink_budget: 100,
        confirm: 3,
        target: "forgetful".into(),
        source: "models/b62-15.toml".into(),
    };
    let mut target = Forgetful {
        inner: InProcess::new(None),
        initial: BTreeMap::new(),
    };
    let report = campaign(&scenario, &plans, &mut target, &options).unwrap();
    let (property, steps, reproduced) = shrunk(&report);
    assert_eq!(property, "ack-implies-recorded");
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert!(steps[0].ends_with("(kill after ack)"), "{steps:?}");
    assert_eq!(reproduced, "3/3");
    assert_eq!(report.counts.lost, 1);
}

/// Options for one fixed schedule: nothing shrunk, so the failure is named at its own step.
fn fixed(channels: Channels) -> Options {
    Options {
        settings: Settings {
            channels,
            max_retries: 3,
            kill_window_ms: 1,
            seed: 1,
        },
        shrink_budget: 0,
        confirm: 1,
        target: "in-process".into(),
        source: "models/b62-15.toml".into(),
    }
}

fn b62_15() -> Scenario {
    Scenario::clone(
        &load_model(&root().join("models/b62-15.toml"), None)
            .unwrap()
            .scenario,
    )
}

/// One schedule of B62-15 against a receiver that keeps its state in memory only (a kill
/// forgets everything), every channel read.
fn against_forgetful(actions: Vec<Action>) -> ConformReport {
    let plan = Plan {
        id: "fixture".into(),
        actions,
    };
    let mut target = Forgetful {
        inner: InProcess::new(None),
        initial: BTreeMap::new(),
    };
    campaign(&b62_15(), &[plan], &mut target, &fixed(Channels::ALL)).unwrap()
}

fn deliver(delivery: u32, fault: Option<External>) -> Action {
    Action::Deliver { delivery, fault }
}

#[test]
fn a_kill_that_loses_an_earlier_acknowledged_delivery_is_ack_implies_recorded() {
    // Found by review: deliver #1, then #4 killed right after its acknowledgement, against a
    // receiver that keeps nothing across a kill. Card-7 goes back below what the read after
    // #1 showed, but not to #4's version: the kill lost it, which the old naming called
    // version-monotonic.
    let report = against_forgetful(vec![
        deliver(1, None),
        deliver(4, Some(External::KillAfterAck)),
    ]);
    let found = report.failure.as_ref().expect("caught");
    assert_eq!(
        (found.property.as_str(), found.step),
        ("ack-implies-recorded", 2)
    );
}

#[test]
fn a_changed_payload_kept_but_answered_ignored_is_diverged_whatever_is_read() {
    // Found by review: #4 then its changed payload #6, recorded and held as the contract
    // says but acknowledged `ignored`. With the unresolved inputs read, the state shows the
    // evidence kept: only the word is wrong (`diverged`). Without them (third review, F6),
    // nothing shows it kept or swallowed: `diverged` too, with a note, never
    // `evidence-retained`.
    let plan = Plan {
        id: "fixture".into(),
        actions: vec![deliver(4, None), deliver(6, None)],
    };
    let mut seen = Vec::new();
    for channels in [
        Channels::ALL,
        Channels {
            ack: true,
            paused: true,
            unresolved: false,
            every_step: true,
        },
    ] {
        let mut target = InProcess::new(None);
        target.misword_changed_payloads = true;
        let report = campaign(
            &b62_15(),
            std::slice::from_ref(&plan),
            &mut target,
            &fixed(channels),
        )
        .unwrap();
        let found = report.failure.as_ref().expect("caught");
        seen.push((
            found.property.clone(),
            found.step,
            report.counts.changed_payloads_swallowed,
        ));
    }
    assert_eq!(seen, [("diverged".into(), 2, 0), ("diverged".into(), 2, 0)]);
}

#[test]
fn what_the_target_never_shows_is_unobserved_and_nothing_run_is_not_exercised() {
    let status = |report: &ConformReport, name: &str| {
        let status = &report.properties.iter().find(|p| p.0 == name).unwrap().1;
        status.word().to_owned()
    };
    let mut target = InProcess::new(None);
    target.bare_acks = true;
    let plan = Plan {
        id: "fixture".into(),
        actions: vec![deliver(1, None), deliver(2, None)],
    };
    let report = campaign(&b62_15(), &[plan], &mut target, &fixed(Channels::ALL)).unwrap();
    assert_eq!(report.verdict, Verdict::Sampled);
    assert_eq!(
        [
            status(&report, "held-changes-nothing"),
            status(&report, "evidence-retained"),
            status(&report, "version-monotonic"),
        ],
        ["unobserved", "unobserved", "sampled"]
    );
    // The header names what was compared: acknowledgements carried no meaning.
    assert_eq!(report.channels, ["paused", "unresolved"]);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.starts_with("asked to compare ack but the target never reported it")),
        "{:?}",
        report.warnings
    );
    let none = campaign(&b62_15(), &[], &mut target, &fixed(Channels::ALL)).unwrap();
    assert_eq!(none.verdict, Verdict::Incomplete);
    assert!(none
        .properties
        .iter()
        .all(|(_, status)| matches!(status, Status::NotExercised(_))));
}

#[test]
fn an_indefinite_reconciliation_then_another_keeps_both_answers_open() {
    // Found by review: deliver #4, #5, #9 (card-8 paused), a reconciliation of card-8 the
    // receiver never heard (indefinite), then the same again. Whether the first landed or
    // not, the second reaches one world, answered `confirmed` or `replaced`; the oracle
    // kept only the first way there, and the receiver's `replaced` was a false `diverged`.
    let scenario = b62_15();
    let card = scenario.catalog.find("card-8").unwrap();
    let plan = Plan {
        id: "fixture".into(),
        actions: vec![
            deliver(4, None),
            deliver(5, None),
            deliver(9, None),
            Action::Reconcile(card),
            Action::Reconcile(card),
        ],
    };
    for every_step in [false, true] {
        let mut target = InProcess::new(None);
        target.lose_next_reconcile = true;
        let channels = Channels {
            every_step,
            ..Channels::ALL
        };
        let report = campaign(
            &scenario,
            std::slice::from_ref(&plan),
            &mut target,
            &fixed(channels),
        )
        .unwrap();
        assert_eq!(report.verdict, Verdict::Sampled, "{:?}", report.failure);
        assert_eq!(report.counts.indefinite, 1);
    }
}

#[test]
fn a_schedule_the_model_does_not_allow_is_skipped_not_passed() {
    // Found by review: a reconciliation of a card no world could reconcile, first.
    let scenario = b62_15();
    let card = scenario.catalog.find("card-7").unwrap();
    let plan = Plan {
        id: "fixture".into(),
        actions: vec![Action::Reconcile(card), deliver(5, None), deliver(6, None)],
    };
    let mut target = InProcess::new(None);
    let report = campaign(&scenario, &[plan], &mut target, &fixed(Channels::ALL)).unwrap();
    assert_eq!((report.schedules, report.passed), (0, 0));
    assert_eq!(report.verdict, Verdict::Incomplete);
    assert_eq!(report.skipped.len(), 1, "{:?}", report.skipped);
    assert!(!report.as_expected("pass"));
}

#[test]
fn a_skipped_schedule_s_requests_are_counted_and_its_timeouts_named() {
    // Found by review: a receiver that hung inside a schedule later skipped showed
    // `attempted 0`, and nothing said it had hung.
    let scenario = b62_15();
    let card = scenario.catalog.find("card-7").unwrap();
    let plan = Plan {
        id: "fixture".into(),
        actions: vec![deliver(1, None), Action::Reconcile(card)],
    };
    let mut target = InProcess::new(None);
    target.hang_on = Some(1);
    let report = campaign(&scenario, &[plan], &mut target, &fixed(Channels::ALL)).unwrap();
    assert_eq!((report.schedules, report.passed), (0, 0));
    assert_eq!((report.counts.attempted, report.counts.indefinite), (1, 1));
    assert_eq!(report.skipped.len(), 1, "{:?}", report.skipped);
    assert!(
        report.skipped[0].ends_with(
            "; before that, 1 of its 1 request(s) had no definite answer from the receiver \
             (timeouts, resets, errors)"
        ),
        "{:?}",
        report.skipped
    );
    assert!(
        report
            .text()
            .contains("schedules: 0 run, 0 passed, 1 set aside (their requests are counted)"),
        "{}",
        report.text()
    );
}

#[test]
fn a_skipped_schedule_s_note_tells_arrival_s_own_cuts_from_the_receiver_s_silence() {
    // Found by review: the note counted arrival's own disconnects among the answers the
    // receiver never gave.
    let scenario = b62_15();
    let card = scenario.catalog.find("card-7").unwrap();
    let plan = Plan {
        id: "fixture".into(),
        actions: vec![
            deliver(1, Some(External::Disconnect)),
            Action::Reconcile(card),
        ],
    };
    let mut target = InProcess::new(None);
    let report = campaign(&scenario, &[plan], &mut target, &fixed(Channels::ALL)).unwrap();
    assert_eq!(
        (report.counts.indefinite, report.counts.cut_by_arrival),
        (1, 1)
    );
    assert_eq!(report.skipped.len(), 1, "{:?}", report.skipped);
    assert!(
        report.skipped[0].ends_with(
            "; before that, arrival cut all 1 of its request(s) itself (kills in flight, \
             disconnects)"
        ),
        "{:?}",
        report.skipped
    );
    assert!(
        report.warnings.iter().any(|warning| warning
            .starts_with("no delivery was acknowledged at all: of 1 request(s), 1 had")),
        "{:?}",
        report.warnings
    );
}

#[test]
fn a_failing_run_s_header_names_only_the_channels_the_target_reported() {
    // Found by review: after a failure the header still listed every channel asked for.
    let mut target = InProcess::new(Some(Mutant::LastArrivalWins));
    target.bare_acks = true;
    let plan = Plan {
        id: "fixture".into(),
        actions: vec![deliver(1, None), deliver(3, None)],
    };
    let report = campaign(&b62_15(), &[plan], &mut target, &fixed(Channels::ALL)).unwrap();
    let found = report.failure.as_ref().expect("caught");
    assert_eq!(found.property, "version-monotonic");
    assert_eq!(report.channels, ["paused", "unresolved"]);
    assert!(
        report.warnings.iter().any(|w| w.starts_with(
            "asked to compare ack but the target had not reported it by the end of the run"
        )),
        "{:?}",
        report.warnings
    );
}

#[test]
fn the_transition_cover_of_b62_15_takes_fifteen_kinds_by_fourteen_schedules_and_passes() {
    use arrival::card::campaign::{cover_plans, covered_kinds};
    let loaded = load_model(&root().join("models/b62-15.toml"), None).unwrap();
    let (plans, cut) = cover_plans(&loaded, 10_000, false);
    assert_eq!(cut.len(), 1, "the search is cut at 10,000 worlds: {cut:?}");
    let kinds = covered_kinds(&plans);
    assert_eq!(
        kinds,
        [
            "decision/applied",
            "decision/conflict_changed_payload",
            "decision/conflict_same_version",
            "decision/duplicate",
            "decision/equal",
            "decision/held_missing_version",
            "decision/held_paused",
            "decision/held_unknown_object",
            "decision/stale",
            "reconcile/confirmed",
            "reconcile/replaced",
            "settle/re-evaluated/held_paused/equal",
            "settle/re-evaluated/held_paused/stale",
            "settle/resolved",
            "settle/superseded",
        ]
    );
    assert_eq!(plans.len(), 14);
    // Each is a shortest witness: a kind first met at depth d has a schedule of d steps.
    assert_eq!(plans[0].actions.len(), 1);
    let report = campaign(
        &Scenario::clone(&loaded.scenario),
        &plans,
        &mut InProcess::new(None),
        &fixed(Channels::ALL),
    )
    .unwrap();
    assert_eq!(report.verdict, Verdict::Sampled, "{}", report.text());
    assert_eq!(report.cover, kinds);
    // The wrong receiver that lets the last arrival win is caught by the cover alone.
    let caught = campaign(
        &Scenario::clone(&loaded.scenario),
        &plans,
        &mut InProcess::new(Some(Mutant::LastArrivalWins)),
        &fixed(Channels::ALL),
    )
    .unwrap();
    assert_eq!(caught.verdict, Verdict::Violated);
}

#[test]
fn a_conform_failure_s_sequence_diagram_shows_restarts_disconnects_lost_acks_and_kills() {
    // A restart, a disconnect, an acknowledgement read and dropped, and a kill after an
    // acknowledgement against the receiver that forgets across a kill: the kill loses the
    // acknowledged #1, so ack-implies-recorded shows at the fourth action.
    let plan = Plan {
        id: "fixture".into(),
        actions: vec![
            Action::Restart,
            deliver(3, Some(External::Disconnect)),
            deliver(1, Some(External::LostAck)),
            deliver(4, Some(External::KillAfterAck)),
        ],
    };
    let report = against_forgetful(plan.actions);
    let found = report.failure.as_ref().expect("caught");
    assert_eq!(
        (found.property.as_str(), found.step),
        ("ack-implies-recorded", 4)
    );
    assert_eq!(
        found.diagram.mermaid(),
        "sequenceDiagram
    title B62-15: ack-implies-recorded against a real receiver
    participant L0 as arrival
    participant L1 as receiver
    Note over L1: 1. restart: SIGKILL between steps, started again on the same data
    L0->>L1: 2. deliver no. 3 e-200
    Note over L0: 2. disconnect: connection closed after sending, answer never read
    L1-xL0: 2. indefinite: not waited for
    L0->>L1: 3. deliver no. 1 e-201
    L1-xL0: 3. ack applied: ack lost (read, dropped by arrival)
    L0->>L1: 4. deliver no. 4 e-202
    L1->>L0: 4. ack applied
    Note over L1: 4. kill after the ack (SIGKILL to the process group), restart
    Note over L0,L1: VIOLATED ack-implies-recorded at step 4
"
    );
}

/// A delivery every world takes for a duplicate that pauses a card (or leaves an input
/// unresolved) changed the state: `duplicate-no-effect`, as the model checker names these
/// mutants, never `ack-implies-recorded` for the word it answered with.
#[test]
fn a_duplicate_that_pauses_its_card_is_duplicate_no_effect_whatever_it_answers() {
    for mutant in [Mutant::DedupeByBodyHash, Mutant::PauseOnRedelivery] {
        let report = run(Some(mutant), Channels::ALL, 0);
        let (property, steps, reproduced) = shrunk(&report);
        assert_eq!(
            (property.as_str(), steps.len(), reproduced.as_str()),
            ("duplicate-no-effect", 2, "3/3"),
            "{mutant:?}: {steps:?}"
        );
    }
}

/// The state cover of B62-15 within 10,000 worlds: every state a receiver can show (cards,
/// paused cards, unresolved inputs) by its shortest schedule, the schedules another one
/// extends left out. The contract's receiver passes it; the mutants it catches alone are
/// pinned.
#[test]
fn the_state_cover_of_b62_15_shows_301_states_by_181_schedules_and_catches_mutants() {
    use arrival::card::campaign::state_cover_plans;
    let loaded = load_model(&root().join("models/b62-15.toml"), None).unwrap();
    let (plans, states, cut) = state_cover_plans(&loaded, 10_000, false);
    assert_eq!((states, plans.len(), cut.len()), (301, 181, 1), "{cut:?}");
    let scenario = Scenario::clone(&loaded.scenario);
    let run = |policy| {
        campaign(
            &scenario,
            &plans,
            &mut InProcess::new(policy),
            &fixed(Channels::ALL),
        )
        .unwrap()
    };
    let report = run(None);
    assert_eq!(report.verdict, Verdict::Sampled, "{}", report.text());
    let caught: Vec<String> = Mutant::ALL
        .iter()
        .filter_map(|&mutant| {
            let report = run(Some(mutant));
            let found = report.failure.as_ref()?;
            Some(format!("{}:{}", mutant.name(), found.property))
        })
        .collect();
    // The other eight need a state beyond 10,000 worlds, an expiry step, or a channel a
    // target does not show (identity records, settlements).
    assert_eq!(
        caught,
        [
            "last-arrival-wins:version-monotonic",
            "timestamp-ordering:version-monotonic",
            "id-only-dedupe:evidence-retained",
            "create-unknown-card:no-unknown-card",
            "ignore-pause:paused-frozen",
            "apply-equal-version-conflict:version-monotonic",
            "forget-held-after-reconcile:diverged",
            "pause-on-redelivery:duplicate-no-effect",
        ]
    );
}

/// The in-process receiver that, when the connection drops, never got the request.
struct DropsOnDisconnect(InProcess);

impl CardTarget for DropsOnDisconnect {
    fn start(
        &mut self,
        initial: &BTreeMap<String, CardReport>,
        fresh: bool,
    ) -> Result<(), HarnessError> {
        self.0.start(initial, fresh)
    }

    fn deliver(
        &mut self,
        delivery: u32,
        body: &[u8],
        send: Sending,
    ) -> Result<Answer, HarnessError> {
        match send {
            Sending::Wait => self.0.deliver(delivery, body, send),
            _ => Ok(Answer::Indefinite("never arrived".into())),
        }
    }

    fn reconcile(&mut self, snapshot: &Value) -> Result<Answer, HarnessError> {
        self.0.reconcile(snapshot)
    }

    fn read(&mut self) -> Result<Observed, HarnessError> {
        self.0.read()
    }

    fn kill(&mut self) -> Result<(), HarnessError> {
        Ok(())
    }

    fn can_kill(&self) -> bool {
        false
    }
}

/// A written fixture shows the model path the run proved: a disconnected delivery the
/// receiver showed recorded is `ack lost`, one it never got a crash before recording. With
/// the state read only at the end nothing tells them apart (the retry of a recorded
/// delivery is acknowledged `applied` from its record, as a first delivery would be), so
/// the fixture shows the first branch, a crash before recording.
#[test]
fn the_model_path_of_an_indefinite_delivery_is_the_branch_the_receiver_showed() {
    use arrival::card::campaign::fixture_steps;
    use arrival::card::conform::run_schedule;
    use arrival::card::step::{Fault, Step};
    let scenario = b62_15();
    let actions = [Action::Deliver {
        delivery: 1,
        fault: Some(External::Disconnect),
    }];
    let step = |fault| (1, Step::Deliver { delivery: 1, fault });
    for (every_step, records, fault) in [
        (true, true, Fault::AckLost),
        (true, false, Fault::Crash),
        (false, true, Fault::Crash),
        (false, false, Fault::Crash),
    ] {
        let channels = Channels {
            every_step,
            ..Channels::ALL
        };
        let settings = fixed(channels).settings;
        let run = if records {
            run_schedule(&scenario, &mut InProcess::new(None), &actions, &settings)
        } else {
            let mut target = DropsOnDisconnect(InProcess::new(None));
            run_schedule(&scenario, &mut target, &actions, &settings)
        }
        .unwrap();
        assert!(run.failure.is_none(), "{:?}", run.failure);
        // The liveness phase retries delivery 1 when it was not recorded.
        assert_eq!(run.model_path[0], step(Some(fault)), "{:?}", run.model_path);
        let shown = fixture_steps(&actions, Some(&run));
        assert_eq!(shown, vec![step(Some(fault)).1]);
    }
}

/// Where the contract leaves open under which card a changed payload's hold is filed, the
/// oracle accepts either reading: on a fixture where one event id names two cards, the
/// contract's receiver under arrival's reading and under the other both pass every cover
/// schedule and walk, every channel read after every step.
#[test]
fn either_reading_of_where_a_changed_payload_is_held_passes() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("one-id-two-cards.toml");
    let fixture = root().join("tests/inputs/one-id-two-cards.json");
    std::fs::write(
        &model,
        format!(
            "fixture = {:?}\nlost_acks = 1\nreconciliation = \"interleaved\"\nexpect = \"pass\"\n",
            fixture.display().to_string()
        ),
    )
    .unwrap();
    let loaded = load_model(&model, None).unwrap();
    let scenario = Scenario::clone(&loaded.scenario);
    let (mut plans, _) = cover_plans(&loaded, 100_000, false);
    let (states, _, _) = state_cover_plans(&loaded, 100_000, false);
    plans.extend(states);
    plans.extend(walk_plans(&loaded, 40, 3, false));
    let options = fixed(Channels::ALL);
    for first_card in [false, true] {
        let mut target = InProcess::new(None);
        target.first_card = first_card;
        let report = campaign(&scenario, &plans, &mut target, &options).unwrap();
        assert_eq!(
            report.verdict,
            Verdict::Sampled,
            "first_card {first_card}: {:?}",
            report.failure
        );
        assert_eq!(report.schedules, plans.len());
    }
}

#[test]
fn a_fixture_whose_authority_is_behind_is_warned_about_as_replay_does() {
    // Found by review: replay warns, conform did not, and its `convergence` could then
    // fail a correct receiver with nothing said about the fixture.
    let scenario = Scenario::load(&root().join("fixtures/authority-behind.json")).unwrap();
    let report = campaign(
        &scenario,
        &[],
        &mut InProcess::new(None),
        &fixed(Channels::ALL),
    )
    .unwrap();
    let warned: Vec<&String> = report
        .warnings
        .iter()
        .filter(|w| w.starts_with("authority-current: authority for "))
        .collect();
    assert_eq!(warned.len(), 1, "{:?}", report.warnings);
    let b62 = campaign(
        &b62_15(),
        &[],
        &mut InProcess::new(None),
        &fixed(Channels::ALL),
    )
    .unwrap();
    assert!(
        !b62.warnings.iter().any(|w| w.contains("authority-current")),
        "{:?}",
        b62.warnings
    );
}
