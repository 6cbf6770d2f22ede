//! The facts oracle of `arrival conform` without processes: the wire bytes it sends (a
//! request re-signed for the receiver's clock with its age kept, one bad on purpose sent as
//! it is), the names it gives, the walks, and whole campaigns against an in-process
//! receiver built from the pure ingress and inbox under the contract or a mutant.

use arrival::facts::campaign::{
    campaign, model_plans, FactsTarget, Options, Sending, Settings, TargetError,
};
use arrival::facts::conform::{
    describe_action, name_state, playable, walk_actions, wire, Action, Answer, Bytes, FactsState,
    Fault, WalkBudgets, Wire,
};
use arrival::facts::envelope::Envelope;
use arrival::facts::fixture::{RawFixture, Scenario};
use arrival::facts::inbox::{At, Inbox};
use arrival::facts::ingress::{Admission, Request, Response, WebhookHeaders};
use arrival::facts::mutants::{admit_under, consume_under, Mutant};
use arrival::harness::conform::Verdict;
use serde_json::{json, Value};
use std::time::Duration;

/// 2026-12-02T09:00:00.250Z, the receiver's clock in these tests.
const NOW_MS: i64 = 1_796_202_000_250;

fn scenario(name: &str) -> Scenario {
    Scenario::load(&crate::util::root().join("fixtures").join(name)).expect("a fixture")
}

fn header<'a>(wire: &'a Wire, name: &str) -> Option<&'a str> {
    wire.headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

fn request(wire: &Wire) -> Request<'_> {
    let webhook = WebhookHeaders {
        id: header(wire, "webhook-id"),
        timestamp: header(wire, "webhook-timestamp"),
        signature: header(wire, "webhook-signature"),
    };
    Request {
        source: header(wire, "x-acme-source"),
        signature: header(wire, "x-acme-signature"),
        webhook: (webhook != WebhookHeaders::default()).then_some(webhook),
        body: &wire.body,
    }
}

fn answer_at(scenario: &Scenario, wire: &Wire, now: i64) -> Response {
    match admit_under(
        None,
        &request(wire),
        now,
        &scenario.setup.config,
        &scenario.applications,
    ) {
        Admission::Accept(admitted) => admitted.response(),
        Admission::Reject(rejection) => rejection.response(),
    }
}

#[test]
fn every_request_gets_at_the_real_clock_the_answer_it_gets_in_the_fixture() {
    for name in [
        "facts-retries.json",
        "acmeflow-wf14.json",
        "facts-standard-webhooks.json",
        "facts-two-tenants.json",
    ] {
        let scenario = scenario(name);
        for (number, posted) in &scenario.setup.requests {
            let in_fixture = answer_at(
                &scenario,
                &wire(
                    &scenario,
                    posted,
                    posted.received_at * 1000,
                    Bytes::Resigned,
                ),
                posted.received_at,
            );
            let fixture_answer = match admit_under(
                None,
                &posted.request(),
                posted.received_at,
                &scenario.setup.config,
                &scenario.applications,
            ) {
                Admission::Accept(admitted) => admitted.response(),
                Admission::Reject(rejection) => rejection.response(),
            };
            assert_eq!(in_fixture, fixture_answer, "{name} request {number}");
            for bytes in [Bytes::Resigned, Bytes::Reencoded] {
                let sent = wire(&scenario, posted, NOW_MS, bytes);
                let now = answer_at(&scenario, &sent, NOW_MS / 1000);
                assert_eq!(now, fixture_answer, "{name} request {number} {bytes:?}");
            }
        }
    }
}

#[test]
fn a_resigned_request_keeps_its_age_and_every_other_byte() {
    let scenario = scenario("facts-retries.json");
    let posted = &scenario.setup.requests[&21];
    let sent = wire(&scenario, posted, NOW_MS, Bytes::Resigned);
    let text = String::from_utf8(sent.body.clone()).unwrap();
    // Received one second after it was sent in the fixture: so it is now.
    assert!(
        text.contains("\"sent_at\": \"2026-12-02T08:59:59.250Z\""),
        "{text}"
    );
    let original = String::from_utf8(posted.body.clone()).unwrap();
    assert_eq!(
        text.replace("2026-12-02T08:59:59.250Z", "2024-06-03T09:20:00Z"),
        original
    );
    let envelope = Envelope::parse(&sent.body, arrival::facts::envelope::Source::Finance).unwrap();
    assert_eq!(
        envelope.content(),
        Envelope::parse(&posted.body, arrival::facts::envelope::Source::Finance)
            .unwrap()
            .content()
    );
    // A re-encoded copy: other bytes, the same content.
    let copy = wire(&scenario, posted, NOW_MS, Bytes::Reencoded);
    assert_ne!(copy.body, sent.body);
    let parsed = Envelope::parse(&copy.body, arrival::facts::envelope::Source::Finance).unwrap();
    assert_eq!(parsed.content(), envelope.content());
}

#[test]
fn a_request_bad_on_purpose_goes_as_it_is() {
    let scenario = scenario("acmeflow-wf14.json");
    let posted = &scenario.setup.requests[&4];
    let sent = wire(&scenario, posted, NOW_MS, Bytes::Resigned);
    assert_eq!(sent.body, posted.body);
    assert_eq!(
        header(&sent, "x-acme-signature"),
        posted.signature.as_deref()
    );
}

#[test]
fn a_standard_webhooks_retry_keeps_its_body_and_moves_its_timestamp() {
    let scenario = scenario("facts-standard-webhooks.json");
    let posted = &scenario.setup.requests[&3];
    let sent = wire(&scenario, posted, NOW_MS, Bytes::Resigned);
    assert_eq!(sent.body, posted.body);
    let age = posted.received_at
        - posted.webhook[1]
            .as_deref()
            .unwrap()
            .parse::<i64>()
            .unwrap();
    assert_eq!(
        header(&sent, "webhook-timestamp").unwrap(),
        (NOW_MS / 1000 - age).to_string()
    );
}

fn state(
    facts: &[(&str, &str)],
    open: &[&str],
    ready: &[(&str, bool)],
    pending: usize,
) -> FactsState {
    FactsState {
        facts: facts
            .iter()
            .map(|(id, content)| ((*id).to_owned(), (*content).to_owned()))
            .collect(),
        open_conflicts: open.iter().map(|app| (*app).to_owned()).collect(),
        ready: ready
            .iter()
            .map(|(app, ready)| ((*app).to_owned(), *ready))
            .collect(),
        pending,
        dead_letters: 0,
    }
}

#[test]
fn a_settled_state_is_named_only_by_what_every_candidate_agrees_on() {
    let ready = state(
        &[("t/finance/P", "p"), ("t/contracts/S", "s")],
        &[],
        &[("A", true)],
        0,
    );
    let rows: Vec<(FactsState, Vec<FactsState>, &str)> = vec![
        // A fact every candidate holds is missing.
        (
            state(&[("t/finance/P", "p")], &[], &[("A", false)], 0),
            vec![ready.clone()],
            "no-loss",
        ),
        // Still owed after the settle time.
        (
            state(
                &[("t/finance/P", "p"), ("t/contracts/S", "s")],
                &[],
                &[("A", true)],
                1,
            ),
            vec![ready.clone()],
            "no-loss",
        ),
        // A conflict no candidate has: a retry taken for a second content.
        (
            state(
                &[("t/finance/P", "p"), ("t/contracts/S", "s")],
                &["A"],
                &[("A", false)],
                0,
            ),
            vec![ready.clone()],
            "retry-invisible",
        ),
        // No conflict where every candidate has one.
        (
            ready.clone(),
            vec![state(
                &[("t/finance/P", "p"), ("t/contracts/S", "s")],
                &["A"],
                &[("A", false)],
                0,
            )],
            "conflict-visible",
        ),
        // READY the rule does not give, on the same facts.
        (
            state(&[("t/finance/P", "p")], &[], &[("A", true)], 0),
            vec![state(&[("t/finance/P", "p")], &[], &[("A", false)], 0)],
            "ready-sound",
        ),
        (
            state(
                &[("t/finance/P", "p"), ("t/contracts/S", "s")],
                &[],
                &[("A", false)],
                0,
            ),
            vec![ready.clone()],
            "ready-converges",
        ),
        // Candidates that disagree pin nothing.
        (
            state(&[("t/finance/P", "p")], &[], &[("A", false)], 0),
            vec![ready.clone(), state(&[], &[], &[("A", false)], 0)],
            "diverged",
        ),
        // A fact nobody expected.
        (
            state(
                &[
                    ("t/finance/P", "p"),
                    ("t/finance/X", "x"),
                    ("t/contracts/S", "s"),
                ],
                &[],
                &[("A", true)],
                0,
            ),
            vec![ready.clone()],
            "diverged",
        ),
    ];
    for (real, expected, name) in rows {
        assert_eq!(
            name_state(&real, &expected),
            name,
            "{real:?} against {expected:?}"
        );
    }
}

#[test]
fn a_walk_posts_every_request_and_posts_again_what_it_did_not_see_answered() {
    let budgets = WalkBudgets {
        lost: 2,
        kills: 2,
        copies: 1,
    };
    let requests = [1, 2, 11, 21, 22];
    for walk in 0..20 {
        let actions = walk_actions(&requests, budgets, 7, walk);
        assert_eq!(actions, walk_actions(&requests, budgets, 7, walk));
        let mut last_fault = std::collections::BTreeMap::new();
        let (mut kills, mut lost) = (0, 0);
        for action in &actions {
            match action {
                Action::Post { request, fault, .. } => {
                    last_fault.insert(*request, *fault);
                    match fault {
                        Some(Fault::LostAnswer | Fault::Disconnect) => lost += 1,
                        Some(Fault::KillInFlight | Fault::KillAfterAnswer) => kills += 1,
                        None => {}
                    }
                }
                Action::Restart => kills += 1,
            }
        }
        assert!(kills <= 2 && lost <= 2, "walk {walk}: {actions:?}");
        for request in requests {
            let fault = last_fault.get(&request).expect("every request posted");
            assert!(
                matches!(fault, None | Some(Fault::KillAfterAnswer)),
                "walk {walk}: request {request} ends unanswered: {actions:?}"
            );
        }
    }
}

/// A receiver in this process: the pure ingress and inbox under a policy, every entry
/// decided at once (so it settles at every read). Kills change nothing: it is durable.
struct InProcess {
    scenario: Scenario,
    mutant: Option<Mutant>,
    inbox: Inbox,
    entries: u32,
    /// Moves on 137 ms at each look, as a real clock does between posts.
    clock: std::cell::Cell<i64>,
}

impl InProcess {
    fn new(scenario: &Scenario, mutant: Option<Mutant>) -> InProcess {
        InProcess {
            scenario: scenario.clone(),
            mutant,
            inbox: Inbox::new(),
            entries: 0,
            clock: std::cell::Cell::new(NOW_MS),
        }
    }
}

impl FactsTarget for InProcess {
    fn reset(&mut self, _: &RawFixture) -> Result<(), TargetError> {
        self.inbox = Inbox::new();
        Ok(())
    }

    fn post(&mut self, wire: &Wire, sending: Sending) -> Result<Answer, TargetError> {
        let now = self.clock.get() / 1000;
        let apps = &self.scenario.applications;
        let response = match admit_under(
            self.mutant,
            &request(wire),
            now,
            &self.scenario.setup.config,
            apps,
        ) {
            Admission::Accept(admitted) => {
                self.entries += 1;
                let at = At {
                    entry: self.entries,
                    received_at: now,
                };
                consume_under(
                    self.mutant,
                    &mut self.inbox,
                    apps,
                    at,
                    &admitted.envelope,
                    false,
                );
                admitted.response()
            }
            Admission::Reject(rejection) => rejection.response(),
        };
        Ok(match sending {
            Sending::Wait => Answer::Definite(response),
            _ => Answer::Indefinite("cut off".into()),
        })
    }

    fn read(&mut self) -> Result<Value, TargetError> {
        let facts: Vec<Value> = self
            .inbox
            .facts()
            .map(|fact| {
                json!({"source": fact.source().as_str(), "event_id": fact.event_id(),
                       "content": fact.canonical()})
            })
            .collect();
        let open = self.inbox.open_conflicts();
        let apps: Vec<Value> = self
            .scenario
            .applications
            .iter()
            .map(|(key, _)| {
                json!({"tenant_id": key.tenant_id, "application_id": key.application_id,
                       "ready": self.inbox.marked_ready(key), "open_conflict": open.contains(key)})
            })
            .collect();
        Ok(json!({"fact_contents": facts, "applications": apps, "pending": 0}))
    }

    fn kill(&mut self) -> Result<(), TargetError> {
        Ok(())
    }

    fn start(&mut self) -> Result<(), TargetError> {
        Ok(())
    }

    fn now_ms(&self) -> i64 {
        self.clock.set(self.clock.get() + 137);
        self.clock.get()
    }

    fn settle_timeout(&self) -> Duration {
        Duration::ZERO
    }

    fn log_tail(&self) -> Vec<String> {
        Vec::new()
    }
}

fn options() -> Options {
    Options {
        settings: Settings {
            every_step: true,
            kill_window_ms: 0,
            seed: 1,
        },
        shrink_budget: 100,
        confirm: 3,
        target: "in-process".into(),
        source: "test".into(),
    }
}

fn run(
    model: &str,
    mutant: Option<Mutant>,
    walks: usize,
) -> arrival::facts::campaign::FactsConformReport {
    let loaded = arrival::facts::model_file::load_model(
        &crate::util::root().join("models").join(model),
        Some("spec"),
    )
    .unwrap();
    let scenario = (*loaded.model.scenario).clone();
    let (plans, _) = model_plans(&loaded, walks, 1, None);
    let raw: RawFixture =
        serde_json::from_str(&std::fs::read_to_string(&scenario.file).unwrap()).unwrap();
    let mut target = InProcess::new(&scenario, mutant);
    campaign(&scenario, &raw, &plans, &mut target, &options()).unwrap()
}

#[test]
fn the_contracts_pipeline_in_process_is_sampled_on_every_walk() {
    let report = run("acmeflow-retries.toml", None, 10);
    assert_eq!(report.verdict, Verdict::Sampled);
    // The fixture's own schedule and ten walks.
    assert_eq!((report.schedules, report.passed), (11, 11));
    assert_eq!(report.counts.lost, 0);
    let report = run("acmeflow-conflict.toml", None, 10);
    assert_eq!(
        (report.schedules, report.passed),
        (10, 10),
        "{}",
        report.text()
    );
}

#[test]
fn a_resigned_retry_taken_for_a_second_content_is_retry_invisible_in_two_posts() {
    let report = run("acmeflow-retries.toml", Some(Mutant::SentAtInContent), 10);
    let found = report.failure.expect("caught");
    assert_eq!(found.property, "retry-invisible");
    assert_eq!(found.found_by, "fixture");
    assert_eq!(found.steps, ["post #1 (answer lost)", "post #21"]);
    assert_eq!(found.reproduced, "3/3");
}

#[test]
fn a_second_payload_taken_for_a_duplicate_is_conflict_visible() {
    let report = run("acmeflow-conflict.toml", Some(Mutant::IdOnlyDedupe), 10);
    let found = report.failure.expect("caught");
    assert_eq!(found.property, "conflict-visible", "{}", found.detail);
    assert_eq!(found.steps.len(), 2, "{:?}", found.steps);
}

#[test]
fn a_request_whose_answer_needs_a_key_window_is_left_out() {
    let scenario = scenario("acmeflow-production.json");
    let (ok, skipped) = playable(&scenario, 2);
    assert_eq!(ok, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 21]);
    assert_eq!(skipped.len(), 1);
    assert!(skipped[0].starts_with("request 20: "), "{skipped:?}");
}

#[test]
fn an_answer_is_definite_only_when_the_contract_has_it() {
    use arrival::facts::conform::classify;
    use arrival::facts::ingress::Reason;
    let rows: [(u16, &str, Answer); 6] = [
        (
            202,
            r#"{"status":"accepted"}"#,
            Answer::Definite(Response::Accepted),
        ),
        (
            202,
            r#"{"status":"quarantined"}"#,
            Answer::Definite(Response::Quarantined),
        ),
        (
            400,
            r#"{"error":"tenant_not_allowed"}"#,
            Answer::Definite(Response::Rejected(Reason::TenantNotAllowed)),
        ),
        // A contract status whose reason cannot be read is compared by status alone.
        (400, "bad request", Answer::Status(400)),
        // 503 (nothing appended, says the contract, but arrival cannot tell) and anything
        // outside the contract are indefinite.
        (
            503,
            r#"{"error":"unavailable"}"#,
            Answer::Indefinite("HTTP 503".into()),
        ),
        (500, "", Answer::Indefinite("HTTP 500".into())),
    ];
    for (status, body, answer) in rows {
        assert_eq!(classify(status, body.as_bytes()), answer, "{status} {body}");
    }
}

#[test]
fn requests_whose_rewritten_bytes_the_contract_answers_otherwise_are_left_out() {
    // Found by review: a `sent_at` inside `data` before the top-level one (the rewrite
    // missed the real one, so the correct pipeline answered not_fresh), and a valid
    // signature without `X-Acme-Source` (the rewrite added the header, so a 202 where the
    // contract answers bad_signature). Both are skipped, with the reason.
    for name in [
        "facts-conform-nested-sent-at.json",
        "facts-conform-no-source-header.json",
    ] {
        let scenario =
            Scenario::load(&crate::util::root().join("tests/inputs").join(name)).unwrap();
        let (ok, skipped) = arrival::facts::conform::playable(&scenario, 2);
        assert!(ok.is_empty(), "{name}: {ok:?}");
        assert_eq!(skipped.len(), 1, "{name}: {skipped:?}");
        assert!(skipped[0].contains("re-signed"), "{name}: {skipped:?}");
    }
    // The bundled fixtures keep every request they played before.
    let (ok, skipped) = arrival::facts::conform::playable(&scenario("facts-retries.json"), 2);
    assert_eq!((ok.len(), skipped.len()), (5, 0), "{skipped:?}");
}

/// An exact copy keeps the bytes, and so the `sent_at`, of the attempt it repeats: sent
/// later it is older on the real clock than in the fixture. Until it comes within 2 s of
/// the freshness window's edge it goes as it is; from there on arrival re-signs it.
#[test]
fn an_exact_copy_that_would_turn_stale_on_the_way_is_not_sent_as_it_is() {
    use arrival::facts::conform::{age, exact_copy_keeps_its_age, signing_key};
    let scenario = scenario("facts-retries.json");
    let freshness = scenario.setup.config.freshness_seconds;
    let posted = &scenario.setup.requests[&1];
    let (_, key) = signing_key(&scenario, posted).expect("request 1 is signed");
    let age = age(posted, key.secret.scheme()).expect("it has an age");
    let to_edge_ms = (freshness - age) * 1000;
    assert!(
        to_edge_ms > 5_000,
        "request 1 is {age} s old of {freshness} s"
    );
    let keeps = |elapsed_ms| exact_copy_keeps_its_age(&scenario, posted, elapsed_ms, 2);
    assert!(keeps(0));
    assert!(keeps(to_edge_ms - 3_000));
    assert!(!keeps(to_edge_ms - 2_000));
    assert!(!keeps(to_edge_ms + 60_000));
}

fn load(model: &str) -> arrival::facts::model_file::LoadedModel {
    let path = crate::util::root().join("models").join(model);
    arrival::facts::model_file::load_model(&path, Some("spec")).unwrap()
}

/// The `mutants/` plans of a model file, as (id, actions in words).
fn mutant_plans(model: &str) -> (Vec<(String, Vec<String>)>, Vec<String>) {
    let (plans, skipped) = model_plans(&load(model), 0, 1, Some(50_000));
    let plans = plans
        .iter()
        .filter(|plan| plan.id.starts_with("mutants/"))
        .map(|plan| {
            let words = plan.actions.iter().map(describe_action).collect();
            (plan.id.clone(), words)
        })
        .collect();
    (plans, skipped)
}

#[test]
fn a_model_file_gives_each_mutants_shortest_playable_counterexample_after_the_fixture() {
    let (plans, skipped) = mutant_plans("acmeflow-tenant-keys.toml");
    let ids: Vec<(&str, usize)> = plans
        .iter()
        .map(|(id, steps)| (id.as_str(), steps.len()))
        .collect();
    assert_eq!(
        ids,
        [
            ("mutants/correlation-before-tenant.tenant-isolated", 1),
            ("mutants/ack-before-commit.ack-after-commit", 2),
            ("mutants/dedupe-by-stream-entry.fact-once", 2),
            ("mutants/ready-on-signature-only.ready-converges", 4),
            ("mutants/forget-own-pending.no-loss", 5),
        ]
    );
    assert_eq!(plans[0].1, ["post #3"]);
    // A consumer crash in the model's trace is a restart of the receiver.
    assert_eq!(plans[1].1, ["post #1", "restart"]);
    // The other 15 mutants: one has no property in the model, 14 change nothing here.
    let mutants: Vec<&String> = skipped
        .iter()
        .filter(|s| s.starts_with("mutants/"))
        .collect();
    assert_eq!(mutants.len(), 15, "{skipped:#?}");
    assert!(skipped.contains(
        &"mutants/accept-stale-signature: no property of the model catches it (the ingress \
          tests do)"
            .to_owned()
    ));
}

#[test]
fn a_mutants_model_file_gives_that_mutants_schedule_only() {
    let (plans, skipped) = mutant_plans("acmeflow-mutant-sent-at-in-content.toml");
    assert_eq!(
        plans,
        [(
            "mutants/sent-at-in-content.retry-invisible".to_owned(),
            vec!["post #1 (answer lost)".to_owned(), "post #11".to_owned()]
        )]
    );
    assert!(skipped.is_empty(), "{skipped:?}");
    // One whose counterexample needs a poison entry: none without it, and said why.
    let (plans, skipped) = mutant_plans("acmeflow-mutant-ack-and-drop-poison.toml");
    assert!(plans.is_empty());
    assert_eq!(
        skipped[0],
        "mutants/ack-and-drop-poison.ack-after-commit: no counterexample without poison or \
         undecidable entries, upgrades or operator steps, which arrival cannot play"
    );
}

#[test]
fn a_mutant_schedule_catches_its_mutant_in_process_by_the_property_the_model_names() {
    let loaded = load("acmeflow-mutant-sent-at-in-content.toml");
    let scenario = (*loaded.model.scenario).clone();
    let (plans, _) = model_plans(&loaded, 0, 1, Some(50_000));
    let plans: Vec<_> = plans
        .into_iter()
        .filter(|plan| plan.id.starts_with("mutants/"))
        .collect();
    let raw: RawFixture =
        serde_json::from_str(&std::fs::read_to_string(&scenario.file).unwrap()).unwrap();
    let mut target = InProcess::new(&scenario, Some(Mutant::SentAtInContent));
    let report = campaign(&scenario, &raw, &plans, &mut target, &options()).unwrap();
    let found = report.failure.expect("caught");
    assert_eq!(found.property, "retry-invisible");
    assert_eq!(found.found_by, "mutants/sent-at-in-content.retry-invisible");
    assert_eq!(found.steps, ["post #1 (answer lost)", "post #11"]);
    // The contract's pipeline passes the same schedule.
    let mut target = InProcess::new(&scenario, None);
    let report = campaign(&scenario, &raw, &plans, &mut target, &options()).unwrap();
    assert_eq!((report.schedules, report.passed), (1, 1));
}

#[test]
fn a_facts_plan_file_reads_back_as_the_schedules_it_was_written_from() {
    use arrival::facts::plan::{load as load_plan, plan_file};
    let loaded = load("acmeflow-retries.toml");
    let scenario = (*loaded.model.scenario).clone();
    let (plans, skipped) = model_plans(&loaded, 3, 7, None);
    let raw: RawFixture =
        serde_json::from_str(&std::fs::read_to_string(&scenario.file).unwrap()).unwrap();
    let written = plan_file(
        (&raw, &scenario.file),
        "models/acmeflow-retries.toml",
        (Some(7), Some(40)),
        &plans,
        &skipped,
    );
    assert_eq!(written.protocol, "facts-plan");
    assert_eq!(written.fixture_digest.len(), 64);
    let dir = crate::util::temp_dir("facts-plan-round-trip");
    let file = dir.path().join("plan.json");
    std::fs::write(&file, serde_json::to_string_pretty(&written).unwrap()).unwrap();
    let (read, read_skipped, timing) = load_plan(&file, &scenario, &raw).unwrap();
    assert_eq!(read, plans);
    assert_eq!(read_skipped, skipped);
    assert_eq!(timing, (Some(7), Some(40)));
    // The fixture's own schedule and three walks.
    assert_eq!(read.len(), 4);
}

/// `tenant-isolated` is exercised when a request could cross tenants: two tenants among
/// the applications or named by the requests' bodies, or a key limited to tenants.
#[test]
fn a_fixture_crosses_tenants_by_its_applications_its_requests_or_its_keys() {
    use arrival::facts::campaign::crosses_tenants;
    let load = |name: &str| {
        let path = crate::util::root().join("fixtures").join(name);
        arrival::facts::campaign::load_fixture(&path).unwrap().1
    };
    assert!(!crosses_tenants(&load("facts-retries.json")));
    assert!(crosses_tenants(&load("facts-two-tenants.json")));
    assert!(crosses_tenants(&load("facts-tenant-keys.json")));
    let mut other = load("facts-retries.json");
    let mut body: serde_json::Value = serde_json::from_str(&other.requests[0].body).unwrap();
    body["tenant_id"] = "other-tenant".into();
    other.requests[0].body = body.to_string();
    assert!(crosses_tenants(&other));
}

/// A facts model file's kept counterexamples (`fixtures/regressions/`, same fixture) are
/// schedules when every step can be played over HTTP, and the others are listed with what
/// they need; each one played in process catches the mutant it was found under, by the
/// property the report can name, and the contract's pipeline passes them all.
#[test]
fn a_facts_model_file_s_kept_traces_are_schedules_that_catch_their_mutants() {
    use arrival::facts::campaign::trace_plans;
    let loaded = load("acmeflow-wf14.toml");
    let scenario = (*loaded.model.scenario).clone();
    let raw: RawFixture =
        serde_json::from_str(&std::fs::read_to_string(&scenario.file).unwrap()).unwrap();
    let (requests, _) = arrival::facts::conform::playable(&scenario, 2);
    let dir = crate::util::root().join("fixtures/regressions");
    let (plans, skipped) = trace_plans(&raw, &dir, &requests);
    let ids: Vec<&str> = plans.iter().map(|plan| plan.id.as_str()).collect();
    let mut caught = Vec::new();
    for plan in &plans {
        let name = plan.id.trim_start_matches("traces/acmeflow-mutant-");
        let mutant: Mutant = name.split('.').next().unwrap().parse().unwrap();
        let mut target = InProcess::new(&scenario, Some(mutant));
        let report = campaign(
            &scenario,
            &raw,
            std::slice::from_ref(plan),
            &mut target,
            &options(),
        )
        .unwrap();
        caught.push(report.failure.map(|found| found.property));
    }
    let mut contract = InProcess::new(&scenario, None);
    let passed = campaign(&scenario, &raw, &plans, &mut contract, &options()).unwrap();
    assert_eq!(
        ids,
        [
            "traces/acmeflow-mutant-business-key-correlation.correlated",
            "traces/acmeflow-mutant-ack-before-commit.ack-after-commit",
            "traces/acmeflow-mutant-dedupe-by-stream-entry.fact-once",
            "traces/acmeflow-mutant-ready-on-signature-only.ready-converges",
            "traces/acmeflow-mutant-forget-own-pending.no-loss",
        ]
    );
    assert_eq!(
        skipped,
        [
            "traces/acmeflow-mutant-ack-and-drop-poison.ack-after-commit: its schedule needs \
             an entry written straight into the stream",
            "traces/acmeflow-mutant-ingress-only-correlation.correlated: its schedule needs an \
             operator step (no operator channel to the receiver yet)",
            "traces/acmeflow-mutant-last-fact-decides-ready.ready-sound: its schedule needs an \
             operator step (no operator channel to the receiver yet)",
        ]
    );
    // Two are caught in process. The other three need what this target cannot show: a
    // kill between commit and acknowledgement, two facts under one identity, a consumer's
    // own pending entries after a crash (the real pipeline's tests kill processes).
    assert_eq!(
        caught,
        [
            Some("correlated".to_owned()),
            None,
            None,
            Some("ready-converges".to_owned()),
            None
        ]
    );
    assert_eq!((passed.schedules, passed.passed), (5, 5));
}
