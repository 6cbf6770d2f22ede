//! Property tests of the real decision function (proptest): generated fixtures over a few
//! cards go through the fixture path (`Scenario::from_raw`, so every envelope is parsed by
//! `Catalog::event`) and are stepped by `arrival::card::world::transition` under the SPEC
//! policy, the very step function `replay` and the model checker use.
//!
//! The generated inputs mix valid snapshots (versions in a small range, so applied, stale and
//! equal all occur; states from a small set), exact redeliveries, copies of an envelope under
//! a new delivery number, same-id variants, ids reused across cards, missing and invalid
//! versions (negative, float, string, null, boolean), unsupported or missing types, unknown
//! cards, malformed envelopes (missing or non-string `event_id`/`object_id`, a state that is
//! not an object, an event that is not an object) and authority snapshots. Every envelope
//! travels as text with shuffled keys, random whitespace and random `\u` escapes, and is
//! parsed back with `serde_json::from_str`, as a fixture file's would be.
//!
//! A failing property writes its shrunk case as a SPEC fixture with the `schedule` it ran,
//! `fixtures/regressions/proptest-<property>.json` (the path is in the panic message), so
//! `arrival replay` shows it step by step. Failures found with the SPEC receiver are kept by
//! proptest in `proptest-regressions/properties.txt` and replayed first by every later run.
//!
//! Two environment variables help show the properties have teeth:
//! - `ARRIVAL_PROPTEST_POLICY=<mutant>` runs every property under that mutant (e.g.
//!   `last-arrival-wins`); failures are then expected and not persisted;
//! - `ARRIVAL_PROPTEST_FIXTURES=<dir>` writes the failure fixtures there instead.

use crate::util::SplitMix;
use arrival::card::fixture::{
    RawAuthority, RawCard, RawDelivery, RawExpect, RawFixture, Scenario, TraceOrigin,
};
use arrival::card::model::describe_step;
use arrival::card::policy::{Mutant, PolicyName, Spec};
use arrival::card::properties::checked_transition;
use arrival::card::property::{Properties, Property};
use arrival::card::receiver::{Decision, Receiver, Verdict};
use arrival::card::replay::{replay_steps, Report, StepReport};
use arrival::card::step::{Budgets, Fault, Step};
use arrival::card::trace::raw_step;
use arrival::card::wire::Catalog;
use arrival::card::world::{Effect, World};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{FileFailurePersistence, TestCaseError, TestRunner};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

// ---------------------------------------------------------------------------------------
// Policy and configuration
// ---------------------------------------------------------------------------------------

/// The policy under test: SPEC, or the mutant named by `ARRIVAL_PROPTEST_POLICY`.
fn policy() -> Option<Mutant> {
    static POLICY: OnceLock<Option<Mutant>> = OnceLock::new();
    *POLICY.get_or_init(|| match std::env::var("ARRIVAL_PROPTEST_POLICY") {
        Ok(name) => {
            let name: PolicyName = name
                .parse()
                .unwrap_or_else(|error| panic!("ARRIVAL_PROPTEST_POLICY: {error}"));
            name.0
        }
        Err(_) => None,
    })
}

fn policy_name() -> String {
    PolicyName(policy()).to_string()
}

/// `cases` cases (unless `PROPTEST_CASES` says otherwise). Failures of the SPEC receiver are
/// persisted to a file, so that every later run (CI included) replays them first; failures
/// of a mutant are the point of the exercise and are not kept.
fn config(cases: u32) -> ProptestConfig {
    let base = ProptestConfig::default();
    ProptestConfig {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() {
            base.cases
        } else {
            cases
        },
        // A file, as by default, but named directly: the default (`SourceParallel`) looks for
        // a `lib.rs` or `main.rs` in the test file's folder or above it, finds none (ours
        // are in `src/`), warns on every run and falls back to a file beside the test.
        // `PROPTEST_DISABLE_FAILURE_PERSISTENCE` still turns it off.
        failure_persistence: match (policy(), &base.failure_persistence) {
            (None, Some(_)) => Some(Box::new(FileFailurePersistence::Direct(
                "proptest-regressions/properties.txt",
            ))),
            _ => None,
        },
        ..base
    }
}

/// One step through the transition function the model checker uses (monomorphised for
/// `Spec` exactly as the checker does).
fn advance(scenario: &Scenario, world: &World, step: Step) -> (World, Effect) {
    match policy() {
        None => checked_transition(scenario, Spec, Properties::SPEC, world, step),
        Some(mutant) => checked_transition(scenario, Some(mutant), Properties::SPEC, world, step),
    }
}

fn replay_under_policy(scenario: &Scenario, steps: &[Step]) -> Report {
    match policy() {
        None => replay_steps(scenario, Spec, "spec", steps),
        Some(mutant) => replay_steps(scenario, Some(mutant), mutant.name(), steps),
    }
}

// ---------------------------------------------------------------------------------------
// Generated inputs
// ---------------------------------------------------------------------------------------

const KNOWN: [&str; 4] = ["card-1", "card-2", "card-3", "card-4"];
/// Never an initial card; it exists only if its authority snapshot creates it.
const UNKNOWN: &str = "card-9";
const STATES: usize = 5;

/// A small set of complete card states (nested objects, so key order matters at depth).
fn state(index: usize) -> Map<String, Value> {
    let value = match index % STATES {
        0 => json!({"stage": "queued", "title": "Map"}),
        1 => json!({"stage": "ready", "title": "Map"}),
        2 => json!({
            "stage": "ready", "title": "Map",
            "meta": {"owner": "ana", "tags": ["x", "y"]}
        }),
        3 => json!({
            "meta": {"tags": ["y", "x"], "owner": "ana"},
            "stage": "archived", "title": "Map v2", "weight": 1.5
        }),
        _ => json!({"stage": "ready", "title": "Chart", "done": null}),
    };
    value.as_object().cloned().expect("states are objects")
}

/// The state a consistent sender sends for `card` at `version`.
fn canonical(card: &str, version: u64) -> usize {
    let seed: u64 = card.bytes().map(u64::from).sum();
    ((seed + 2 * version) % STATES as u64) as usize
}

#[derive(Clone, Debug)]
enum Id {
    /// `e-N`: a small pool, so ids collide (variants, ids reused across cards).
    Named(u8),
    Missing,
    NotString(Value),
}

#[derive(Clone, Debug)]
enum Target {
    /// A known card (modulo the number of cards).
    Known(usize),
    Unknown,
    Missing,
    NotString(Value),
}

#[derive(Clone, Debug)]
enum Ver {
    Valid(u64),
    Missing,
    Invalid(Value),
}

#[derive(Clone, Debug)]
enum Body {
    /// One of the small set of states.
    State(usize),
    /// The state a consistent sender has for this card and version (makes `equal` common).
    Canonical,
    NotObject(Value),
    Missing,
}

#[derive(Clone, Debug)]
enum Kind {
    Snapshot,
    Other,
    Missing,
}

#[derive(Clone, Debug)]
struct Envelope {
    id: Id,
    target: Target,
    version: Ver,
    kind: Kind,
    body: Body,
    occurred: u8,
}

#[derive(Clone, Debug)]
enum Change {
    Version(Ver),
    Body(Body),
    Target(Target),
    Occurred(u8),
    Kind(Kind),
}

/// How one delivery's envelope comes about.
#[derive(Clone, Debug)]
enum Op {
    New(Envelope),
    /// The same envelope as the delivery `back + 1` places earlier (a new delivery number,
    /// other text). Relative, so that shrinking away an earlier delivery keeps the link.
    Again(usize),
    /// The envelope `back + 1` places earlier with one field changed (same event id: a
    /// changed payload).
    Variant(usize, Change),
    /// An event that is not a JSON object at all.
    NotAnObject(Value),
}

fn id() -> impl Strategy<Value = Id> {
    prop_oneof![
        12 => (0u8..5).prop_map(Id::Named),
        1 => Just(Id::Missing),
        1 => prop_oneof![Just(json!(201)), Just(Value::Null), Just(json!(["e-1"]))]
            .prop_map(Id::NotString),
    ]
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        12 => (0usize..4).prop_map(Target::Known),
        2 => Just(Target::Unknown),
        1 => Just(Target::Missing),
        1 => prop_oneof![Just(json!(7)), Just(json!({"id": "card-1"}))].prop_map(Target::NotString),
    ]
}

fn ver() -> impl Strategy<Value = Ver> {
    prop_oneof![
        14 => (0u64..=6).prop_map(Ver::Valid),
        1 => Just(Ver::Missing),
        2 => prop_oneof![
            Just(json!(-1)),
            Just(json!(-4)),
            Just(json!(1.5)),
            Just(json!(3.0)),
            Just(json!("3")),
            Just(Value::Null),
            Just(json!(true)),
        ]
        .prop_map(Ver::Invalid),
    ]
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        6 => Just(Body::Canonical),
        6 => (0..STATES).prop_map(Body::State),
        1 => Just(Body::Missing),
        1 => prop_oneof![Just(json!("ready")), Just(json!(["ready"])), Just(Value::Null)]
            .prop_map(Body::NotObject),
    ]
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![14 => Just(Kind::Snapshot), 1 => Just(Kind::Other), 1 => Just(Kind::Missing)]
}

fn envelope() -> impl Strategy<Value = Envelope> {
    (id(), target(), ver(), kind(), body(), 0u8..4).prop_map(
        |(id, target, version, kind, body, occurred)| Envelope {
            id,
            target,
            version,
            kind,
            body,
            occurred,
        },
    )
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => ver().prop_map(Change::Version),
        3 => body().prop_map(Change::Body),
        2 => target().prop_map(Change::Target),
        1 => (0u8..4).prop_map(Change::Occurred),
        1 => kind().prop_map(Change::Kind),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => envelope().prop_map(Op::New),
        2 => (0usize..12).prop_map(Op::Again),
        3 => (0usize..12, change()).prop_map(|(back, change)| Op::Variant(back, change)),
        1 => prop_oneof![Just(json!([1, 2])), Just(json!("card.snapshot")), Just(Value::Null)]
            .prop_map(Op::NotAnObject),
    ]
}

fn set(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    match value {
        Some(value) => {
            map.insert(key.to_owned(), value);
        }
        None => {
            map.remove(key);
        }
    }
}

fn set_target(map: &mut Map<String, Value>, target: &Target, cards: usize) {
    let value = match target {
        Target::Known(index) => Some(json!(KNOWN[index % cards])),
        Target::Unknown => Some(json!(UNKNOWN)),
        Target::Missing => None,
        Target::NotString(value) => Some(value.clone()),
    };
    set(map, "object_id", value);
}

fn set_version(map: &mut Map<String, Value>, version: &Ver) {
    let value = match version {
        Ver::Valid(version) => Some(json!(version)),
        Ver::Missing => None,
        Ver::Invalid(value) => Some(value.clone()),
    };
    set(map, "object_version", value);
}

fn set_kind(map: &mut Map<String, Value>, kind: &Kind) {
    let value = match kind {
        Kind::Snapshot => Some(json!("card.snapshot")),
        Kind::Other => Some(json!("card.deleted")),
        Kind::Missing => None,
    };
    set(map, "type", value);
}

fn set_body(map: &mut Map<String, Value>, body: &Body) {
    let value = match body {
        Body::State(index) => Some(Value::Object(state(*index))),
        Body::Canonical => {
            let card = map.get("object_id").and_then(Value::as_str).unwrap_or("");
            let version = map
                .get("object_version")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            Some(Value::Object(state(canonical(card, version))))
        }
        Body::NotObject(value) => Some(value.clone()),
        Body::Missing => None,
    };
    set(map, "state", value);
}

fn occurred_at(second: u8) -> String {
    format!("2024-01-01T08:00:{second:02}Z")
}

impl Envelope {
    fn value(&self, cards: usize) -> Value {
        let mut map = Map::new();
        match &self.id {
            Id::Named(number) => set(&mut map, "event_id", Some(json!(format!("e-{number}")))),
            Id::Missing => {}
            Id::NotString(value) => set(&mut map, "event_id", Some(value.clone())),
        }
        set_target(&mut map, &self.target, cards);
        set_version(&mut map, &self.version);
        set(
            &mut map,
            "occurred_at",
            Some(json!(occurred_at(self.occurred))),
        );
        set_kind(&mut map, &self.kind);
        set_body(&mut map, &self.body);
        Value::Object(map)
    }
}

impl Change {
    fn apply(&self, event: &mut Value, cards: usize) {
        let Some(map) = event.as_object_mut() else {
            return;
        };
        match self {
            Change::Version(version) => set_version(map, version),
            Change::Body(body) => set_body(map, body),
            Change::Target(target) => set_target(map, target, cards),
            Change::Occurred(second) => set(map, "occurred_at", Some(json!(occurred_at(*second)))),
            Change::Kind(kind) => set_kind(map, kind),
        }
    }
}

/// The cards and the deliveries (no authority).
#[derive(Clone, Debug)]
struct Board {
    /// Known cards: `KNOWN[..cards]`.
    cards: usize,
    /// Initial version and state index of each known card (the first `cards` are used).
    initial: Vec<(u64, usize)>,
    /// Each delivery's envelope, and where it arrives in each of the shuffled orders the
    /// convergence property tries (kept with the delivery, so that shrinking it away leaves
    /// the others' arrivals as they were).
    ops: Vec<(Op, [Arrival; ORDERS])>,
    /// Seeds the text rendering of the envelopes.
    text_seed: u64,
}

fn board() -> impl Strategy<Value = Board> {
    (
        2usize..=4,
        vec((0u64..=4, 0..STATES), 4),
        vec((op(), proptest::array::uniform3(arrival())), 1..=10),
        any::<u64>(),
    )
        .prop_map(|(cards, initial, ops, text_seed)| Board {
            cards,
            initial,
            ops,
            text_seed,
        })
}

impl Board {
    fn known(&self) -> &'static [&'static str] {
        &KNOWN[..self.cards]
    }

    /// The envelopes, in delivery order.
    fn events(&self) -> Vec<Value> {
        let mut events: Vec<Value> = Vec::new();
        for (op, _) in &self.ops {
            let event = match op {
                Op::New(envelope) => envelope.value(self.cards),
                Op::Again(back) if !events.is_empty() => {
                    events[events.len() - 1 - back % events.len()].clone()
                }
                Op::Variant(back, change) if !events.is_empty() => {
                    let mut event = events[events.len() - 1 - back % events.len()].clone();
                    change.apply(&mut event, self.cards);
                    event
                }
                Op::NotAnObject(value) => value.clone(),
                Op::Again(_) | Op::Variant(..) => Envelope {
                    id: Id::Named(0),
                    target: Target::Known(0),
                    version: Ver::Valid(1),
                    kind: Kind::Snapshot,
                    body: Body::Canonical,
                    occurred: 0,
                }
                .value(self.cards),
            };
            events.push(event);
        }
        events
    }

    /// A fixture of these cards and deliveries: every envelope is rendered as text (its own
    /// key order and whitespace) and parsed back with `serde_json::from_str`.
    fn fixture(
        &self,
        initial: BTreeMap<String, RawCard>,
        events: Vec<Value>,
        authority: Vec<RawAuthority>,
    ) -> RawFixture {
        let deliveries = events
            .into_iter()
            .enumerate()
            .map(|(index, event)| {
                let mut rng =
                    SplitMix::new(self.text_seed ^ (index as u64).wrapping_mul(0x2545_F491));
                let text = render(&event, &mut rng);
                let parsed: Value = serde_json::from_str(&text).expect("rendered JSON parses");
                assert_eq!(parsed, event, "rendering keeps the value: {text}");
                RawDelivery {
                    delivery: u32::try_from(index + 1).expect("few deliveries"),
                    received_at: Some(format!("2024-01-01T08:01:{index:02}Z")),
                    ack_lost: false,
                    event: parsed,
                }
            })
            .collect();
        RawFixture {
            name: Some("proptest".into()),
            description: None,
            retention_seconds: Some(86_400),
            initial,
            deliveries,
            authority,
            schedule: None,
            trace: None,
            conform: None,
            expect: None,
        }
    }

    fn initial(&self, state_of: impl Fn(&str, u64, usize) -> usize) -> BTreeMap<String, RawCard> {
        self.known()
            .iter()
            .zip(&self.initial)
            .map(|(&name, &(version, index))| {
                let card = RawCard {
                    version,
                    state: state(state_of(name, version, index)),
                };
                (name.to_owned(), card)
            })
            .collect()
    }
}

/// One step of a free schedule: picks are taken modulo what exists.
#[derive(Clone, Debug)]
enum Choice {
    Deliver(usize, Option<Fault>),
    Reconcile(usize),
}

fn fault() -> impl Strategy<Value = Option<Fault>> {
    prop_oneof![
        10 => Just(None),
        1 => Just(Some(Fault::AckLost)),
        1 => Just(Some(Fault::Duplicate)),
        1 => Just(Some(Fault::Crash)),
    ]
}

fn choice() -> impl Strategy<Value = Choice> {
    prop_oneof![
        6 => (0usize..16, fault()).prop_map(|(pick, fault)| Choice::Deliver(pick, fault)),
        1 => (0usize..8).prop_map(Choice::Reconcile),
    ]
}

/// A board, authority snapshots (any version, any state: behind, equal, ahead), and a free
/// schedule of deliveries (repeats, faults) and reconciliations at any time.
#[derive(Clone, Debug)]
struct Case {
    board: Board,
    /// Per known card, then the unknown card: an authority snapshot (version, and a state
    /// index or, for `None`, the state a consistent sender has at that version).
    authority: Vec<Option<(u64, Option<usize>)>>,
    choices: Vec<Choice>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        board(),
        vec(
            proptest::option::weighted(0.8, (0u64..=7, proptest::option::of(0..STATES))),
            5,
        ),
        vec(choice(), 0..=24),
    )
        .prop_map(|(board, authority, choices)| Case {
            board,
            authority,
            choices,
        })
}

impl Case {
    fn fixture(&self) -> RawFixture {
        // Slots 0-3 belong to the known cards, slot 4 to the unknown card.
        let slots = self.board.known().iter().copied().enumerate();
        let authority = slots
            .chain([(4, UNKNOWN)])
            .filter_map(|(slot, name)| {
                self.authority[slot].map(|(version, index)| RawAuthority {
                    object_id: name.to_owned(),
                    version,
                    state: state(index.unwrap_or_else(|| canonical(name, version))),
                    as_of: None,
                })
            })
            .collect();
        let initial = self.board.initial(|_, _, index| index);
        self.board.fixture(initial, self.board.events(), authority)
    }

    fn steps(&self, scenario: &Scenario) -> Vec<Step> {
        let deliveries = &scenario.deliveries;
        let authority = &scenario.authority;
        self.choices
            .iter()
            .filter_map(|choice| match *choice {
                Choice::Deliver(pick, fault) if !deliveries.is_empty() => Some(Step::Deliver {
                    delivery: deliveries[pick % deliveries.len()].number,
                    fault,
                }),
                Choice::Reconcile(pick) if !authority.is_empty() => {
                    Some(Step::Reconcile(authority[pick % authority.len()].object_id))
                }
                _ => None,
            })
            .collect()
    }
}

fn scenario(raw: RawFixture) -> Scenario {
    Scenario::from_raw(Path::new("(proptest)"), raw).expect("generated fixtures are valid")
}

// ---------------------------------------------------------------------------------------
// JSON text with shuffled keys and random whitespace
// ---------------------------------------------------------------------------------------

/// The JSON text of `value` with keys in a random order, random whitespace between tokens
/// and some characters of strings written as `\u` escapes: the same value, other text.
fn render(value: &Value, rng: &mut SplitMix) -> String {
    let mut out = String::new();
    write_value(value, rng, &mut out);
    out
}

fn space(rng: &mut SplitMix, out: &mut String) {
    const SPACES: [&str; 8] = ["", "", " ", "  ", "\n", "\t", "\r\n  ", " \n\t"];
    out.push_str(SPACES[rng.below(SPACES.len() as u64) as usize]);
}

fn write_string(text: &str, rng: &mut SplitMix, out: &mut String) {
    if rng.below(4) != 0 {
        out.push_str(&serde_json::to_string(text).expect("strings serialise"));
        return;
    }
    out.push('"');
    for ch in text.chars() {
        if ch.is_ascii_alphanumeric() && rng.below(2) == 0 {
            out.push_str(&format!("\\u{:04x}", u32::from(ch)));
        } else {
            let quoted = serde_json::to_string(&ch.to_string()).expect("strings serialise");
            out.push_str(&quoted[1..quoted.len() - 1]);
        }
    }
    out.push('"');
}

fn write_value(value: &Value, rng: &mut SplitMix, out: &mut String) {
    space(rng, out);
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            for index in (1..entries.len()).rev() {
                entries.swap(index, rng.below(index as u64 + 1) as usize);
            }
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                space(rng, out);
                write_string(key, rng, out);
                space(rng, out);
                out.push(':');
                write_value(item, rng, out);
            }
            space(rng, out);
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_value(item, rng, out);
            }
            space(rng, out);
            out.push(']');
        }
        Value::String(text) => write_string(text, rng, out),
        other => out.push_str(&other.to_string()),
    }
    space(rng, out);
}

// ---------------------------------------------------------------------------------------
// Failures as fixtures
// ---------------------------------------------------------------------------------------

fn regression_dir() -> PathBuf {
    match std::env::var_os("ARRIVAL_PROPTEST_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/regressions"),
    }
}

/// What the SPEC receiver ends with after exactly these steps, as a fixture's `expect`.
fn spec_expect(scenario: &Scenario, steps: &[Step]) -> RawExpect {
    let report = replay_steps(scenario, Spec, "spec", steps);
    RawExpect {
        final_cards: report
            .final_cards
            .iter()
            .map(|(name, card)| {
                let state = card.state.as_object().cloned().unwrap_or_default();
                let card = RawCard {
                    version: card.version,
                    state,
                };
                (name.clone(), card)
            })
            .collect(),
        replacements: Some(report.replacements),
        unresolved: report.unresolved.clone(),
        paused: (!report.paused.is_empty()).then(|| report.paused.clone()),
    }
}

/// A failing case as a SPEC fixture that replays it.
struct Regression<'a> {
    /// This file's property name (the file is `proptest-<property>.json`).
    property: &'static str,
    /// The library property it corresponds to (`arrival::card::property::Property`), or the
    /// property name again when there is none (the fixture then has no `trace` block, whose
    /// `violates` must name a library property; its name says the policy).
    violates: &'static str,
    scenario: &'a Scenario,
    steps: &'a [Step],
    expect: RawExpect,
    description: String,
}

impl Regression<'_> {
    fn fixture(&self) -> RawFixture {
        let mut raw = self.scenario.raw.clone();
        raw.name = Some(format!(
            "proptest {} under {}",
            self.property,
            policy_name()
        ));
        raw.description = Some(self.description.clone());
        raw.schedule = Some(
            self.steps
                .iter()
                .map(|&step| raw_step(self.scenario, step))
                .collect(),
        );
        raw.trace = self
            .violates
            .parse::<Property>()
            .is_ok()
            .then(|| TraceOrigin {
                model: format!("tests/properties.rs ({})", self.property),
                policy: policy_name(),
                violates: self.violates.to_owned(),
            });
        raw.expect = Some(self.expect.clone());
        raw
    }

    /// Writes the fixture (each failure overwrites the last: the shrunk case is written
    /// last) and returns its path.
    fn write(&self) -> PathBuf {
        let text = serde_json::to_string_pretty(&self.fixture()).expect("fixtures serialise");
        write_text(&format!("proptest-{}.json", self.property), &text)
    }
}

fn write_text(file: &str, text: &str) -> PathBuf {
    let dir = regression_dir();
    std::fs::create_dir_all(&dir).expect("regression folder");
    let path = dir.join(file);
    std::fs::write(&path, format!("{text}\n")).expect("regression fixture written");
    path
}

// ---------------------------------------------------------------------------------------
// Safety properties: checked on every step of a free schedule
// ---------------------------------------------------------------------------------------

/// One step as a safety property sees it.
struct Seen<'a> {
    scenario: &'a Scenario,
    pre: &'a World,
    post: &'a World,
    step: Step,
    effect: &'a Effect,
}

impl Seen<'_> {
    fn arriving(&self) -> Option<(u32, Option<Fault>, &arrival::card::wire::Event)> {
        let Step::Deliver { delivery, fault } = self.step else {
            return None;
        };
        let index = self.scenario.delivery_index(delivery)?;
        Some((delivery, fault, &self.scenario.deliveries[index].event))
    }

    fn name(&self, card: arrival::card::wire::Sym) -> &str {
        self.scenario.catalog.name(card)
    }
}

/// The fixture without the deliveries and authority snapshots these steps never use (the
/// steps replay exactly as before: nothing else is read), and the steps in its terms.
fn pruned(scenario: &Scenario, steps: &[Step]) -> (Scenario, Vec<Step>) {
    let schedule: Vec<_> = steps.iter().map(|&step| raw_step(scenario, step)).collect();
    let delivered: BTreeSet<u32> = schedule.iter().filter_map(|step| step.deliver).collect();
    let reconciled: BTreeSet<&str> = schedule
        .iter()
        .filter_map(|step| step.reconcile.as_deref())
        .collect();
    let mut raw = scenario.raw.clone();
    raw.deliveries
        .retain(|delivery| delivered.contains(&delivery.delivery));
    raw.authority
        .retain(|snapshot| reconciled.contains(snapshot.object_id.as_str()));
    raw.schedule = Some(schedule);
    let small = self::scenario(raw);
    let steps = small.steps();
    (small, steps)
}

/// Runs the case's schedule and checks `check` on every step; a failure is written as a
/// fixture whose schedule stops at the failing step.
fn safety(
    property: &'static str,
    violates: &'static str,
    case: &Case,
    mut check: impl FnMut(&Seen) -> Result<(), String>,
) -> Result<(), TestCaseError> {
    let scenario = scenario(case.fixture());
    let steps = case.steps(&scenario);
    let mut world = World::initial(&scenario, Budgets::UNLIMITED);
    for (index, &step) in steps.iter().enumerate() {
        let (post, effect) = advance(&scenario, &world, step);
        let seen = Seen {
            scenario: &scenario,
            pre: &world,
            post: &post,
            step,
            effect: &effect,
        };
        if let Err(message) = check(&seen) {
            let what = describe_step(&scenario, &step);
            let (small, taken) = pruned(&scenario, &steps[..=index]);
            let regression = Regression {
                property,
                violates,
                scenario: &small,
                steps: &taken,
                expect: spec_expect(&small, &taken),
                description: format!(
                    "Found by proptest (tests/properties.rs, `{property}`): under policy {}, \
                     step {} ({what}) breaks it: {message}. `expect` is what the SPEC \
                     receiver ends with after exactly these steps.",
                    policy_name(),
                    index + 1
                ),
            };
            let path = regression.write();
            prop_assert!(
                false,
                "{property}: step {} ({what}): {message}\n  regression fixture: {}",
                index + 1,
                path.display()
            );
        }
        world = post;
    }
    Ok(())
}

/// Every card's version and state, and the set of cards.
fn cards_of(
    receiver: &Receiver,
) -> Vec<(arrival::card::wire::Sym, u64, arrival::card::wire::StateId)> {
    receiver
        .cards()
        .iter()
        .map(|(id, card)| (id, card.version, card.state))
        .collect()
}

proptest! {
    #![proptest_config(config(1024))]

    /// Delivering anything a second time (the same delivery again, or the same content
    /// under its event id in another delivery) changes nothing at all: the receiver state
    /// is equal before and after, the verdict is `Duplicate` of the decision recorded for
    /// that content, and the acknowledgement repeats its meaning.
    #[test]
    fn redelivery_changes_nothing(case in case()) {
        let mut delivered = BTreeSet::new();
        let mut contents = BTreeSet::new();
        safety("redelivery-changes-nothing", "duplicate-no-effect", &case, |seen| {
            let Some((number, fault, event)) = seen.arriving() else {
                return Ok(());
            };
            if fault == Some(Fault::Crash) {
                return Ok(()); // nothing reaches the decision
            }
            let same_delivery = !delivered.insert(number);
            let same_content = event.event_id.is_some() && !contents.insert(event.content);
            let again = same_delivery || same_content;
            if !again {
                return Ok(());
            }
            let Effect::Delivered { delivered: Some(answer), acked } = *seen.effect else {
                return Err("no answer to a delivery".into());
            };
            let Some(recorded) = seen.pre.receiver.recorded(event, number) else {
                return Err(format!(
                    "delivered before, but no decision is recorded for this content \
                     (answered {:?})",
                    answer.verdict
                ));
            };
            if answer.verdict != Verdict::Duplicate(recorded) {
                return Err(format!(
                    "answered {:?}, not a duplicate of the recorded {recorded}",
                    answer.verdict
                ));
            }
            if answer.ack != recorded.ack() || acked.is_some_and(|ack| ack != recorded.ack()) {
                return Err(format!(
                    "acknowledged {:?}, not the meaning of {recorded}",
                    answer.ack
                ));
            }
            if *seen.pre.receiver != *seen.post.receiver {
                return Err("the receiver state changed".into());
            }
            Ok(())
        })?;
    }

    /// A held decision (any hold or conflict) changes no card: every card keeps its
    /// version and state, and no card appears or disappears.
    #[test]
    fn held_decision_changes_no_card(case in case()) {
        safety("held-changes-no-card", "held-changes-nothing", &case, |seen| {
            let Effect::Delivered { delivered: Some(answer), .. } = *seen.effect else {
                return Ok(());
            };
            match answer.verdict {
                Verdict::Decided(decision) if decision.is_hold() => {
                    let before = cards_of(&seen.pre.receiver);
                    if before != cards_of(&seen.post.receiver) {
                        return Err(format!("{decision} changed the cards"));
                    }
                    Ok(())
                }
                _ => Ok(()),
            }
        })?;
    }

    /// A card's version never decreases, over deliveries and reconciliations, and no card
    /// disappears. An event changes a card's state only with a higher version (rule 6: an
    /// equal version is `equal` or a conflict, never a replacement).
    #[test]
    fn version_never_decreases(case in case()) {
        safety("version-never-decreases", "version-monotonic", &case, |seen| {
            for (id, card) in seen.pre.receiver.cards() {
                let name = seen.name(id);
                match seen.post.receiver.cards().get(&id) {
                    None => return Err(format!("{name} disappeared")),
                    Some(now) if now.version < card.version => {
                        return Err(format!(
                            "{name} went from v{} to v{}",
                            card.version, now.version
                        ))
                    }
                    Some(now)
                        if seen.arriving().is_some()
                            && now.version == card.version
                            && now.state != card.state =>
                    {
                        return Err(format!("{name} changed state at v{}", card.version))
                    }
                    Some(_) => {}
                }
            }
            Ok(())
        })?;
    }

    /// The first record of an event id never changes: same content, same receive time.
    #[test]
    fn first_record_never_changes(case in case()) {
        safety("first-record-immutable", "first-record-immutable", &case, |seen| {
            for (id, identity) in seen.pre.receiver.identities() {
                let Some(now) = seen.post.receiver.identities().get(&id) else {
                    return Err(format!("the records of {} disappeared", seen.name(id)));
                };
                if now.first.event.content != identity.first.event.content {
                    return Err(format!("the first record of {} changed content", seen.name(id)));
                }
                if now.first.recorded_at != identity.first.recorded_at {
                    return Err(format!("the first record of {} changed its time", seen.name(id)));
                }
            }
            Ok(())
        })?;
    }

    /// A paused card changes only by reconciliation.
    #[test]
    fn paused_card_changes_only_by_reconciliation(case in case()) {
        safety("paused-card-frozen", "paused-frozen", &case, |seen| {
            if matches!(seen.step, Step::Reconcile(_)) {
                return Ok(());
            }
            for (id, card) in seen.pre.receiver.cards() {
                let now = seen.post.receiver.cards().get(&id);
                let changed =
                    now.is_none_or(|now| (now.version, now.state) != (card.version, card.state));
                if card.paused && changed {
                    return Err(format!("paused {} changed", seen.name(id)));
                }
            }
            Ok(())
        })?;
    }

    /// No event ever creates a card; a reconciliation creates only its own card.
    #[test]
    fn no_card_from_an_event(case in case()) {
        safety("no-card-from-an-event", "no-unknown-card", &case, |seen| {
            for id in seen.post.receiver.cards().keys() {
                let allowed = seen.pre.receiver.cards().contains_key(&id)
                    || seen.step == Step::Reconcile(id);
                if !allowed {
                    return Err(format!("{} appeared", seen.name(id)));
                }
            }
            Ok(())
        })?;
    }

    /// Every acknowledgement the sender gets is the meaning of the decision recorded for
    /// what arrived (a crash before record acknowledges nothing).
    #[test]
    fn acknowledgement_means_a_recorded_decision(case in case()) {
        safety("ack-matches-record", "ack-implies-recorded", &case, |seen| {
            let (Some((number, _, event)), Effect::Delivered { acked: Some(ack), .. }) =
                (seen.arriving(), seen.effect)
            else {
                return Ok(());
            };
            match seen.post.receiver.recorded(event, number) {
                Some(decision) if decision.ack() == *ack => Ok(()),
                Some(decision) => Err(format!("acknowledged {ack:?} but recorded {decision}")),
                None => Err(format!("acknowledged {ack:?} but nothing is recorded")),
            }
        })?;
    }
}

// ---------------------------------------------------------------------------------------
// Semantic equality and the report contract
// ---------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(512))]

    /// Key order and whitespace never matter: two texts of the same fixture (shuffled keys,
    /// random whitespace and escapes everywhere, the envelopes included) give every
    /// delivery the same parsed event (so the same ContentId) and the same report, step by
    /// step.
    #[test]
    fn key_order_and_whitespace_do_not_matter(
        case in case(),
        seed_a in any::<u64>(),
        seed_b in any::<u64>(),
    ) {
        let mut raw = case.fixture();
        let built = scenario(raw.clone());
        let steps = case.steps(&built);
        raw.schedule = Some(steps.iter().map(|&step| raw_step(&built, step)).collect());
        raw.expect = Some(spec_expect(&built, &steps));
        // No trace block: this check is no library property, which a block's `violates`
        // must name (the file's name says which check it is).
        let value = serde_json::to_value(&raw).expect("fixtures serialise");
        let text_a = render(&value, &mut SplitMix::new(seed_a));
        let text_b = render(&value, &mut SplitMix::new(seed_b));
        let problem = match (
            Scenario::parse(Path::new("a.json"), &text_a),
            Scenario::parse(Path::new("b.json"), &text_b),
        ) {
            (Ok(a), Ok(b)) => {
                let mut catalog = Catalog::new();
                let same_events = a.raw.deliveries.len() == b.raw.deliveries.len()
                    && a.raw.deliveries.iter().zip(&b.raw.deliveries).all(|(x, y)| {
                        catalog.event(&x.event) == catalog.event(&y.event)
                    });
                if !same_events {
                    Some("their deliveries parse to different events".to_owned())
                } else if replay_under_policy(&a, &a.steps())
                    != replay_under_policy(&b, &b.steps())
                {
                    Some("their replay reports differ".to_owned())
                } else {
                    None
                }
            }
            (a, b) => Some(format!(
                "one does not parse: {:?}",
                a.err().or(b.err()).map(|error| error.to_string())
            )),
        };
        if let Some(problem) = problem {
            let path_a = write_text("proptest-semantic-equality.json", &text_a);
            let path_b = write_text("proptest-semantic-equality.b.json", &text_b);
            prop_assert!(
                false,
                "two texts of the same fixture differ: {problem}; replay {} and {}",
                path_a.display(),
                path_b.display()
            );
        }
    }

    /// A replay report survives `--json` (pretty JSON, as the CLI prints it) and reading
    /// back unchanged, and prints the same text again.
    #[test]
    fn replay_report_survives_json(case in case()) {
        let built = scenario(case.fixture());
        let steps = case.steps(&built);
        let report = replay_under_policy(&built, &steps);
        let text = serde_json::to_string_pretty(&report).expect("reports serialise");
        let problem = match serde_json::from_str::<Report>(&text) {
            Err(error) => Some(format!("the JSON does not read back: {error}")),
            Ok(back) if back != report => {
                Some(first_difference(&report, &back))
            }
            Ok(back) => {
                let again = serde_json::to_string_pretty(&back).expect("reports serialise");
                (again != text)
                    .then(|| "the report read back prints other JSON".to_owned())
            }
        };
        if let Some(problem) = problem {
            let (small, steps) = pruned(&built, &steps);
            let path = Regression {
                property: "report-round-trip",
                violates: "report-round-trip",
                scenario: &small,
                steps: &steps,
                expect: spec_expect(&small, &steps),
                description: format!(
                    "Found by proptest (tests/properties.rs, `report-round-trip`): the \
                     `replay --json` report of this schedule under policy {} does not read \
                     back unchanged: {problem}.",
                    policy_name()
                ),
            }
            .write();
            prop_assert!(false, "{problem}\n  regression fixture: {}", path.display());
        }
    }
}

/// The round trip on the minimal case proptest found: a `null` version stays `null`.
#[test]
fn null_version_survives_json() {
    let text = r#"{
        "initial": {"card-1": {"version": 0, "state": {"stage": "queued"}}},
        "deliveries": [{"delivery": 1, "event": {
            "event_id": "e-0", "object_id": "card-1", "object_version": null,
            "type": "card.snapshot", "state": {"stage": "ready"}}}]
    }"#;
    let built = Scenario::parse(Path::new("null-version.json"), text).expect("parses");
    let report = replay_steps(&built, Spec, "spec", &built.steps());
    let json = serde_json::to_string_pretty(&report).expect("reports serialise");
    let back: Report = serde_json::from_str(&json).expect("reads back");
    assert_eq!(back, report, "{json}");
}

/// The first step at which two reports differ.
fn first_difference(report: &Report, back: &Report) -> String {
    let steps = report.steps.iter().zip(&back.steps).enumerate();
    for (index, (x, y)) in steps {
        if x != y {
            return format!(
                "step {} reads back as {}, was {}",
                index + 1,
                serde_json::to_string(y).unwrap_or_default(),
                serde_json::to_string(x).unwrap_or_default()
            );
        }
    }
    "the report reads back different".into()
}

// ---------------------------------------------------------------------------------------
// Convergence
// ---------------------------------------------------------------------------------------
//
// Convergence: every arrival order of the same deliveries, followed by reconciliation from
// authority snapshots at least as new as everything delivered, ends with the same cards,
// nothing paused, and the same unresolved inputs. SPEC promises this only for inputs that
// meet three conditions, which the generator below enforces. Each was found necessary by
// running this property without it: the SPEC receiver then "fails" on inputs where SPEC's
// own rules give order-dependent results (the minimal case is described with each).
//
// 1. Every known card has an authority snapshot, with a version at least its initial
//    version and every valid version delivered for it (the unknown card may have one,
//    under the same rule). A card paused with no authority, or with one behind it, stays
//    paused (`refused_behind`), where SPEC's convergence wants nothing paused; and then
//    what is held and what was decided before the pause depends on the order: a stale
//    event that arrived before a missing-version event is `stale`, after it `held_paused`
//    and unresolved. (Minimal: an authority snapshot behind the initial card.)
//
// 2. The sender is consistent: one state per card and version, across the initial cards
//    and every delivered envelope. Otherwise whether a card is paused at all depends on the
//    order: two different v4 snapshots conflict (`conflict_same_version`, pause) if they
//    arrive before v5, but are both `stale` after it. A card never paused is never
//    reconciled (a terminal state only reconciles paused cards), so it ends at its newest
//    delivered snapshot, while the same card paused ends at its authority snapshot, which
//    may be newer or differ at the same version. (Minimal: initial v3, a different v3
//    snapshot and a v4 snapshot; v4 first makes the v3 one stale and nothing pauses.) The
//    authority snapshot itself may disagree with a delivered snapshot of its version:
//    whether that matters depends only on whether the card is paused, which these
//    conditions make order-independent.
//
// 3. (Once: the envelopes under one event id had to be all evaluable or all not. The
//    receiver now counts a changed payload that could never be decided itself as an
//    unresolved input even after its conflict is resolved, so which envelope of an id
//    arrives first no longer matters, and the generator mixes them freely.)
//
/// Shuffled arrival orders tried per convergence case, beside the fixture's own.
const ORDERS: usize = 3;

/// Where a delivery arrives in one shuffled order: its sort key (ties keep array order),
/// and perhaps one more arrival of it with its own sort key and fault (a redelivery, a
/// network copy, a lost acknowledgement, a crash before record).
type Arrival = (u8, Option<(u8, Option<Fault>)>);

fn arrival() -> impl Strategy<Value = Arrival> {
    (0u8..16, proptest::option::weighted(0.3, (0u8..16, fault())))
}

#[derive(Clone, Debug)]
struct ConvergenceCase {
    board: Board,
    /// Whether the unknown card has an authority snapshot.
    unknown_authority: bool,
    /// Per known card, then the unknown card: how far the authority is ahead of the newest
    /// version delivered (0-2), and its state index (any state).
    authority: Vec<(u64, usize)>,
    /// Per shuffled order, sort keys of the authority snapshots: which open card is
    /// reconciled first.
    reconcile_keys: Vec<[u8; 5]>,
}

fn convergence_case() -> impl Strategy<Value = ConvergenceCase> {
    (
        board(),
        any::<bool>(),
        vec((0u64..=2, 0..STATES), 5),
        vec(proptest::array::uniform5(0u8..8), ORDERS),
    )
        .prop_map(
            |(board, unknown_authority, authority, reconcile_keys)| ConvergenceCase {
                board,
                unknown_authority,
                authority,
                reconcile_keys,
            },
        )
}

impl ConvergenceCase {
    fn fixture(&self) -> RawFixture {
        let events: Vec<Value> = self
            .board
            .events()
            .into_iter()
            .map(|mut event| {
                if let Some(map) = event.as_object_mut() {
                    // Condition 2: one state per card and version.
                    let card = map.get("object_id").and_then(Value::as_str);
                    let version = map.get("object_version").and_then(Value::as_u64);
                    let has_state = map.get("state").is_some_and(Value::is_object);
                    if let (Some(card), Some(version), true) = (card, version, has_state) {
                        let consistent = Value::Object(state(canonical(card, version)));
                        map.insert("state".into(), consistent);
                    }
                }
                event
            })
            .collect();
        let initial = self
            .board
            .initial(|name, version, _| canonical(name, version));
        // Condition 1: authority at least as new as the initial card and every delivery.
        let newest = |card: &str| {
            events
                .iter()
                .filter(|event| event.get("object_id").and_then(Value::as_str) == Some(card))
                .filter_map(|event| event.get("object_version").and_then(Value::as_u64))
                .chain(initial.get(card).map(|raw| raw.version))
                .max()
                .unwrap_or(0)
        };
        let mut authority: Vec<RawAuthority> = self
            .board
            .known()
            .iter()
            .zip(&self.authority)
            .map(|(&card, &(ahead, index))| RawAuthority {
                object_id: card.to_owned(),
                version: newest(card) + ahead,
                state: state(index),
                as_of: None,
            })
            .collect();
        if self.unknown_authority {
            let (ahead, index) = self.authority[4];
            authority.push(RawAuthority {
                object_id: UNKNOWN.to_owned(),
                version: newest(UNKNOWN) + ahead,
                state: state(index),
                as_of: None,
            });
        }
        self.board.fixture(initial, events, authority)
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
struct End {
    cards: BTreeMap<String, (u64, Value)>,
    paused: Vec<String>,
    unresolved: Vec<String>,
}

impl End {
    fn text(&self) -> String {
        let cards: Vec<String> = self
            .cards
            .iter()
            .map(|(name, (version, state))| format!("{name} v{version} {state}"))
            .collect();
        format!(
            "{}; paused {:?}; unresolved {:?}",
            cards.join(", "),
            self.paused,
            self.unresolved
        )
    }
}

/// A delivery arriving: its number and fault.
type Arriving = (u32, Option<Fault>);

/// The arrivals of one order: every delivery at its sort key, with its extra arrival if it
/// has one. `None`: the fixture's own order (array order, nothing extra).
fn arrivals(scenario: &Scenario, order: Option<&[Arrival]>) -> Vec<Arriving> {
    let mut keyed: Vec<((u8, usize, bool), Arriving)> = Vec::new();
    for (index, delivery) in scenario.deliveries.iter().enumerate() {
        let (key, extra) = order.map_or((0, None), |order| order[index]);
        keyed.push(((key, index, false), (delivery.number, None)));
        if let Some((key, fault)) = extra {
            keyed.push(((key, index, true), (delivery.number, fault)));
        }
    }
    keyed.sort_by_key(|&(key, _)| key);
    keyed.into_iter().map(|(_, arriving)| arriving).collect()
}

/// One run: the steps taken, how it ended, and whether that is a terminal state.
#[derive(Clone, Debug)]
struct Run {
    steps: Vec<Step>,
    end: End,
    terminal: bool,
}

/// The arrivals, then reconciliation of every open card until the state is terminal, as
/// `World::is_terminal` defines it: a card is open while its authority can still change it
/// (paused, or not created yet, and the authority not behind). The open card
/// with the lowest key (`reconcile_keys`, by authority index) is reconciled first.
fn converge(scenario: &Scenario, arriving: &[Arriving], reconcile_keys: &[u8]) -> Run {
    let steps: Vec<Step> = arriving
        .iter()
        .map(|&(delivery, fault)| Step::Deliver { delivery, fault })
        .collect();
    converge_steps(scenario, steps, reconcile_keys)
}

/// [`converge`] for any steps (expiry included), then reconciliation until terminal.
fn converge_steps(scenario: &Scenario, mut steps: Vec<Step>, reconcile_keys: &[u8]) -> Run {
    let mut world = World::initial(scenario, Budgets::UNLIMITED);
    for &step in &steps {
        world = advance(scenario, &world, step).0;
    }
    for _ in 0..64 {
        let open = scenario
            .authority
            .iter()
            .enumerate()
            .filter(|(_, snapshot)| world.is_open(scenario, snapshot))
            .min_by_key(|&(index, _)| (reconcile_keys[index % reconcile_keys.len()], index));
        let Some((_, snapshot)) = open else {
            break;
        };
        let step = Step::Reconcile(snapshot.object_id);
        steps.push(step);
        world = advance(scenario, &world, step).0;
    }
    let catalog = &scenario.catalog;
    let receiver = &world.receiver;
    let mut unresolved: Vec<String> = receiver
        .unresolved()
        .into_iter()
        .map(|input| scenario.input_name(input))
        .collect();
    unresolved.sort();
    let end = End {
        cards: receiver
            .cards()
            .iter()
            .map(|(id, card)| {
                let state = catalog.state_value(card.state).clone();
                (catalog.name(id).to_owned(), (card.version, state))
            })
            .collect(),
        paused: receiver
            .paused()
            .map(|id| catalog.name(id).to_owned())
            .collect(),
        unresolved,
    };
    let terminal = world.is_terminal(scenario);
    Run {
        steps,
        end,
        terminal,
    }
}

/// What keeps `run` from converging to `reference`, if anything.
fn divergence(run: &Run, reference: &End) -> Option<String> {
    if !run.terminal {
        Some("does not reach a terminal state".to_owned())
    } else if !run.end.paused.is_empty() {
        Some(format!("leaves {:?} paused", run.end.paused))
    } else if run.end != *reference {
        Some(format!(
            "ends with {}, but the fixture's own order ends with {}",
            run.end.text(),
            reference.text()
        ))
    } else {
        None
    }
}

/// A failure: what is wrong, the failing run, and the run in the fixture's own order.
type Diverged = (String, Run, Run);

/// Runs the fixture's own order and the given one; the failure, if any.
fn check_order(
    scenario: &Scenario,
    arriving: &[Arriving],
    reconcile_keys: &[u8],
) -> Option<Diverged> {
    let reference = converge(scenario, &arrivals(scenario, None), &[0]);
    if let Some(problem) = divergence(&reference, &reference.end) {
        return Some((problem, reference.clone(), reference));
    }
    let run = converge(scenario, arriving, reconcile_keys);
    divergence(&run, &reference.end).map(|problem| (problem, run, reference))
}

/// Makes a failing order smaller while it still fails: drops whole deliveries from the
/// fixture, then single extra arrivals (every delivery left keeps an acknowledged arrival,
/// so the run can still end). The generator's conditions hold for any subset of the
/// deliveries, so the smaller case is still one SPEC promises convergence for.
fn minimise(
    scenario: Scenario,
    arriving: Vec<Arriving>,
    reconcile_keys: &[u8],
    found: Diverged,
) -> (Scenario, Diverged) {
    let mut best = (scenario, arriving, found);
    'smaller: loop {
        let (scenario, arriving, _) = &best;
        for delivery in &scenario.raw.deliveries {
            let mut raw = scenario.raw.clone();
            raw.deliveries
                .retain(|other| other.delivery != delivery.delivery);
            let fewer: Vec<Arriving> = arriving
                .iter()
                .filter(|&&(number, _)| number != delivery.delivery)
                .copied()
                .collect();
            let smaller = self::scenario(raw);
            if let Some(found) = check_order(&smaller, &fewer, reconcile_keys) {
                best = (smaller, fewer, found);
                continue 'smaller;
            }
        }
        for skip in 0..arriving.len() {
            let mut fewer = arriving.clone();
            fewer.remove(skip);
            let acknowledged = scenario
                .deliveries
                .iter()
                .all(|delivery| fewer.contains(&(delivery.number, None)));
            if !acknowledged {
                continue;
            }
            if let Some(found) = check_order(scenario, &fewer, reconcile_keys) {
                best = (scenario.clone(), fewer, found);
                continue 'smaller;
            }
        }
        break;
    }
    (best.0, best.2)
}

/// What convergence expects: the cards and unresolved inputs of `end`, nothing paused.
fn end_expect(end: &End) -> RawExpect {
    RawExpect {
        final_cards: end
            .cards
            .iter()
            .map(|(name, (version, state))| {
                let card = RawCard {
                    version: *version,
                    state: state.as_object().cloned().unwrap_or_default(),
                };
                (name.clone(), card)
            })
            .collect(),
        replacements: None,
        unresolved: end.unresolved.clone(),
        paused: None, // convergence: nothing paused
    }
}

fn schedule_text(scenario: &Scenario, steps: &[Step]) -> String {
    steps
        .iter()
        .map(|step| describe_step(scenario, step))
        .collect::<Vec<_>>()
        .join(", ")
}

proptest! {
    #![proptest_config(config(1024))]

    /// Every arrival order of the same deliveries (with redeliveries, network copies, lost
    /// acknowledgements and crashes mixed in), followed by reconciliation until terminal,
    /// ends with the same cards, nothing paused, and the same unresolved inputs as the
    /// fixture's own order.
    #[test]
    fn every_order_converges(case in convergence_case()) {
        let built = scenario(case.fixture());
        for (which, reconcile_keys) in case.reconcile_keys.iter().enumerate() {
            let order: Vec<Arrival> =
                case.board.ops.iter().map(|(_, order)| order[which]).collect();
            let arriving = arrivals(&built, Some(&order));
            let Some(found) = check_order(&built, &arriving, reconcile_keys) else {
                continue;
            };
            let (small, (problem, run, reference)) =
                minimise(built.clone(), arriving, reconcile_keys, found);
            // Keep the authority snapshots either run applies or leaves a card paused with.
            let paused = run.end.paused.iter().chain(&reference.end.paused);
            let reconciled: BTreeSet<&str> = run
                .steps
                .iter()
                .chain(&reference.steps)
                .filter_map(|step| match step {
                    Step::Reconcile(card) => Some(small.catalog.name(*card)),
                    Step::Deliver { .. } | Step::Expire => None,
                })
                .chain(paused.map(String::as_str))
                .collect();
            let mut raw = small.raw.clone();
            raw.authority
                .retain(|snapshot| reconciled.contains(snapshot.object_id.as_str()));
            raw.schedule = Some(run.steps.iter().map(|&step| raw_step(&small, step)).collect());
            let written = scenario(raw);
            let path = Regression {
                property: "convergence",
                violates: "convergence",
                scenario: &written,
                steps: &written.steps(),
                expect: end_expect(&reference.end),
                description: format!(
                    "Found by proptest (tests/properties.rs, `convergence`): under policy {}, \
                     this schedule {problem}. `expect` is how the fixture's own order ends: {}.",
                    policy_name(),
                    schedule_text(&small, &reference.steps)
                ),
            }
            .write();
            prop_assert!(false, "{problem}\n  regression fixture: {}", path.display());
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// SPEC's retention section: once the window passes, duplicate recognition is lost but
    /// versions still protect the cards. With the window passing at any points of a free
    /// schedule (every identity with nothing unresolved forgotten each time), no step
    /// breaks a SPEC safety property (the transition checks them, expiry steps included),
    /// and an expiry step itself changes no card, no hold and no unresolved input.
    /// Convergence is not claimed: a changed payload that arrives after its id expired is
    /// a new event, not a conflict (`models/retention-reused-id.toml` shows it).
    #[test]
    fn expiry_keeps_cards_safe(case in case(), expiries in vec(0usize..32, 1..=3)) {
        let safety: Properties = Properties::SPEC
            .iter()
            .filter(|&property| property != Property::Convergence)
            .collect();
        let scenario = scenario(case.fixture());
        let mut steps = case.steps(&scenario);
        for &at in &expiries {
            steps.insert(at.min(steps.len()), Step::Expire);
        }
        let mut world = World::initial(&scenario, Budgets::UNLIMITED);
        for (index, &step) in steps.iter().enumerate() {
            let (post, _) = match policy() {
                None => checked_transition(&scenario, Spec, safety, &world, step),
                Some(mutant) => checked_transition(&scenario, Some(mutant), safety, &world, step),
            };
            let (before, after) = (&world.receiver, &post.receiver);
            let mut problem = post.violation.map(|property| format!("breaks {property}"));
            if step == Step::Expire && problem.is_none() {
                if before.cards() != after.cards() {
                    problem = Some("expiry changed a card".into());
                } else if before.holds() != after.holds() {
                    problem = Some("expiry changed the holds".into());
                } else if before.unresolved() != after.unresolved() {
                    problem = Some("expiry lost an unresolved input".into());
                }
            }
            if let Some(problem) = problem {
                let (small, taken) = pruned(&scenario, &steps[..=index]);
                let path = Regression {
                    property: "expiry",
                    violates: post.violation.map_or("expiry", |property| property.name()),
                    scenario: &small,
                    steps: &taken,
                    expect: spec_expect(&small, &taken),
                    description: format!(
                        "Found by proptest (tests/properties.rs, `expiry`): under policy {}, \
                         with the retention window passing, step {} {problem}. `expect` is \
                         what the SPEC receiver ends with after exactly these steps.",
                        policy_name(),
                        index + 1
                    ),
                }
                .write();
                prop_assert!(false, "{problem}\n  regression fixture: {}", path.display());
            }
            world = post;
        }
    }
}

// ---------------------------------------------------------------------------------------
// The generators reach what the properties are about
// ---------------------------------------------------------------------------------------

/// Generated cases (under the SPEC receiver) reach every decision, duplicates, every
/// reconciliation outcome and every settlement, so no property above holds vacuously.
#[test]
fn generators_reach_every_decision_and_outcome() {
    let mut runner = TestRunner::deterministic();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let strategy = case();
    for _ in 0..400 {
        let case = strategy.new_tree(&mut runner).expect("a case").current();
        let built = scenario(case.fixture());
        let report = replay_steps(&built, Spec, "spec", &case.steps(&built));
        for step in &report.steps {
            match step {
                StepReport::Deliver {
                    decision,
                    original_decision,
                    ..
                } => seen.extend(decision.iter().chain(original_decision).cloned()),
                StepReport::Reconcile {
                    outcome,
                    re_evaluated,
                    resolved,
                    superseded,
                    ..
                } => {
                    seen.insert(outcome.clone());
                    seen.extend(
                        re_evaluated
                            .iter()
                            .map(|re| format!("re-evaluated {}", re.decision)),
                    );
                    if !resolved.is_empty() {
                        seen.insert("resolved".into());
                    }
                    if !superseded.is_empty() {
                        seen.insert("superseded".into());
                    }
                }
                StepReport::Expire { .. } => {}
            }
        }
    }
    let wanted = Decision::ALL.iter().map(|decision| decision.name()).chain([
        "duplicate",
        "created",
        "refused_behind",
        "confirmed",
        "replaced",
        "resolved",
        "superseded",
        "re-evaluated applied",
        "re-evaluated stale",
        "re-evaluated equal",
    ]);
    for name in wanted {
        assert!(
            seen.contains(name),
            "no generated case reaches {name}: {seen:?}"
        );
    }

    // The convergence generator keeps the interesting parts: changed payloads, unknown
    // cards created by their authority, held events re-evaluated, unevaluable inputs.
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let strategy = convergence_case();
    for _ in 0..200 {
        let case = strategy.new_tree(&mut runner).expect("a case").current();
        let built = scenario(case.fixture());
        let steps = converge(&built, &arrivals(&built, None), &[0]).steps;
        let report = replay_steps(&built, Spec, "spec", &steps);
        for step in &report.steps {
            match step {
                StepReport::Deliver { decision, .. } => seen.extend(decision.iter().cloned()),
                StepReport::Reconcile {
                    outcome,
                    re_evaluated,
                    ..
                } => {
                    seen.insert(outcome.clone());
                    seen.extend(
                        re_evaluated
                            .iter()
                            .map(|re| format!("re-evaluated {}", re.decision)),
                    );
                }
                StepReport::Expire { .. } => {}
            }
        }
    }
    for name in [
        "applied",
        "stale",
        "equal",
        "conflict_changed_payload",
        "held_paused",
        "held_unknown_object",
        "held_missing_version",
        "held_invalid_version",
        "held_unsupported_type",
        "held_malformed",
        "created",
        "replaced",
        "confirmed",
        "re-evaluated stale",
        "re-evaluated equal",
        "re-evaluated conflict_same_version",
    ] {
        assert!(
            seen.contains(name),
            "no convergence case reaches {name}: {seen:?}"
        );
    }
}
