//! Fixture files (the SPEC format) read, validated and turned into a typed [`Scenario`].
//!
//! Every error names the file, the place (a JSON path, and line:column when the JSON itself
//! is at fault) and what is wrong. Protocol anomalies inside a delivery's `event` are not
//! fixture errors: they are what the receiver must hold.

use crate::card::receiver::{Card, InputRef};
use crate::card::step::{Action, External, Fault, Step};
use crate::card::wire::{Catalog, Event, Snapshot, StateId, Sym};
use crate::harness::timestamp::parse_rfc3339;
use crate::harness::InputError;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A card in `initial` or `expect.final`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawCard {
    /// Non-negative integer version.
    pub version: u64,
    /// The complete state.
    pub state: Map<String, Value>,
}

/// One delivery: transport facts beside the raw event.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawDelivery {
    /// The delivery number, unique in the fixture.
    pub delivery: u32,
    /// When it was received (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_at: Option<String>,
    /// Whether its acknowledgement was lost (default order only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ack_lost: bool,
    /// The envelope exactly as sent; anything goes here.
    pub event: Value,
}

/// An authority snapshot.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuthority {
    /// The card.
    pub object_id: String,
    /// Non-negative integer version.
    pub version: u64,
    /// The complete state.
    pub state: Map<String, Value>,
    /// When the authority said so (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<String>,
}

/// Replacement counts.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Replacements {
    /// By applied events (including re-evaluated holds).
    pub event: u32,
    /// By authority snapshots (created or replaced).
    pub authority: u32,
}

/// What `replay` checks at the end.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawExpect {
    /// Final cards.
    #[serde(rename = "final")]
    pub final_cards: BTreeMap<String, RawCard>,
    /// Replacement counts (optional: they depend on arrival order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacements: Option<Replacements>,
    /// Unresolved inputs (event ids, or `delivery-N`).
    pub unresolved: Vec<String>,
    /// Paused cards at the end (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Vec<String>>,
}

/// One schedule step as written.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RawStep {
    /// Deliver this delivery number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver: Option<u32>,
    /// The acknowledgement of this delivery is lost.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ack_lost: bool,
    /// An extra copy made by the network (nobody waits for its acknowledgement).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
    /// The receiver crashes before the decision is recorded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub crash: bool,
    /// An extra copy made by the network, re-encoded (keys in another order, other
    /// whitespace; nobody waits for its acknowledgement).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reencoded: bool,
    /// Apply this card's authority snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconcile: Option<String>,
    /// The retention window passes here: every event id whose records are all settled is
    /// forgotten (`{"expire": true}`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expire: bool,
}

pub use crate::harness::model_file::TraceOrigin;

/// A fixture file as written.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawFixture {
    /// A short name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// How long identity records are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_seconds: Option<u64>,
    /// Cards known at the start.
    pub initial: BTreeMap<String, RawCard>,
    /// Deliveries, in arrival order.
    pub deliveries: Vec<RawDelivery>,
    /// Authority snapshots, at most one per card.
    #[serde(default)]
    pub authority: Vec<RawAuthority>,
    /// One explicit arrival order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Vec<RawStep>>,
    /// For counterexample fixtures: where they came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceOrigin>,
    /// What replay checks at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<RawExpect>,
    /// For a schedule `arrival conform` found against a real receiver: the external
    /// actions it took (kills, restarts, disconnects included), which `schedule` shows
    /// from the model's side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conform: Option<ConformBlock>,
}

/// One action of a conformance schedule as written: a `deliver` with at most one
/// external fault, a `reconcile`, or a `restart`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RawAction {
    /// Send this delivery number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver: Option<u32>,
    /// Read the whole acknowledgement, then drop it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ack_lost: bool,
    /// An extra copy of an acknowledged delivery.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
    /// An extra copy in other bytes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reencoded: bool,
    /// Close the connection right after sending.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disconnect: bool,
    /// Kill the receiver while the request is in flight, then restart it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kill: bool,
    /// Kill the receiver right after its acknowledgement is read, then restart it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kill_after_ack: bool,
    /// Send this card's authority snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconcile: Option<String>,
    /// Kill the receiver between steps and start it again on the same data.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restart: bool,
}

/// A fixture's `conform` block: what `arrival conform` found and how to run it again.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConformBlock {
    /// The target it was found against, as named on the command line.
    pub target: String,
    /// The property broken, or `diverged`.
    pub violates: String,
    /// The schedule it was shrunk from.
    pub found_by: String,
    /// `every-step` or `end`.
    pub observe: String,
    /// What was read besides the cards (`ack`, `paused`, `unresolved`).
    #[serde(default)]
    pub channels: Vec<String>,
    /// The external actions, in order.
    pub actions: Vec<RawAction>,
    /// What the receiver answered and showed, step by step, the run that was kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observed: Vec<Value>,
    /// How many reruns failed the same way (`3/3`).
    pub reproduced: String,
    /// The seed of the run (with the delivery's number it times each kill in flight); a
    /// rerun uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The run's `--kill-window-ms`; a rerun uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_window_ms: Option<u64>,
}

/// One delivery, typed.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// Its number.
    pub number: u32,
    /// Receive time in Unix seconds.
    pub received_at: Option<i64>,
    /// Whether its acknowledgement is lost in the default order.
    pub ack_lost: bool,
    /// The parsed event.
    pub event: Event,
    /// The same envelope re-encoded (every object's keys in reverse order, other
    /// whitespace), as the network's [`Fault::Reencoded`] copy carries it: made when the
    /// fixture is loaded and parsed by the same wire parser, so it is the same content in
    /// other bytes.
    pub reencoded: Event,
}

/// The expectation, typed.
#[derive(Clone, Debug)]
pub struct Expect {
    /// Final cards.
    pub final_cards: BTreeMap<Sym, (u64, StateId)>,
    /// Replacement counts, when given.
    pub replacements: Option<Replacements>,
    /// Unresolved inputs, sorted, as written.
    pub unresolved: Vec<String>,
    /// The same as input references; `None` when one names an input the fixture never
    /// delivers (so no run can match it).
    pub unresolved_refs: Option<BTreeSet<InputRef>>,
    /// Paused cards at the end.
    pub paused: BTreeSet<Sym>,
}

/// A counterexample fixture's `trace` block, typed: the policy it was found under and the
/// property its schedule breaks there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shown {
    /// The policy `replay` uses unless `--policy` says otherwise.
    pub policy: crate::card::policy::PolicyName,
    /// The property the schedule violates under that policy.
    pub violates: crate::card::property::Property,
}

/// A fixture, parsed and validated: everything the receiver, replay and the model read.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The file it came from.
    pub file: PathBuf,
    /// Its name.
    pub name: String,
    /// Interned names, envelopes and states.
    pub catalog: Catalog,
    /// Cards known at the start.
    pub initial: Vec<(Sym, Card)>,
    /// Deliveries in arrival order.
    pub deliveries: Vec<Delivery>,
    /// Authority snapshots in file order.
    pub authority: Vec<Snapshot>,
    /// The explicit schedule, if any.
    pub schedule: Option<Vec<Step>>,
    /// Retention of identity records.
    pub retention_seconds: Option<u64>,
    /// What replay checks.
    pub expect: Option<Expect>,
    /// What a counterexample fixture's `trace` block says it shows, parsed.
    pub trace: Option<Shown>,
    /// The `conform` block's actions, parsed.
    pub conform: Option<Vec<Action>>,
    /// The file as read, for writing traces back out.
    pub raw: RawFixture,
}

impl Scenario {
    /// Reads and validates a fixture file.
    pub fn load(file: &Path) -> Result<Scenario, InputError> {
        let text = crate::harness::input::read_text(file)?;
        Scenario::parse(file, &text)
    }

    /// Parses and validates fixture text; `file` names it in errors.
    pub fn parse(file: &Path, text: &str) -> Result<Scenario, InputError> {
        let raw: RawFixture = crate::harness::input::parse_json(
            file,
            text,
            "a fixture is a JSON object with `initial` and `deliveries`",
        )?;
        Scenario::from_raw(file, raw)
    }

    /// Validates a fixture already read.
    pub fn from_raw(file: &Path, raw: RawFixture) -> Result<Scenario, InputError> {
        let bad = |place: String, message: String| InputError::invalid(file, place, message);
        let mut catalog = Catalog::new();
        let mut initial = Vec::new();
        for (name, card) in &raw.initial {
            let state = catalog.state(&Value::Object(card.state.clone()));
            initial.push((catalog.sym(name), Card::new(card.version, state)));
        }
        let mut deliveries = Vec::new();
        let mut numbers = BTreeMap::new();
        for (index, raw_delivery) in raw.deliveries.iter().enumerate() {
            let number = raw_delivery.delivery;
            if let Some(earlier) = numbers.insert(number, index) {
                return Err(bad(
                    format!("deliveries[{index}].delivery"),
                    format!("delivery number {number} is used twice (also deliveries[{earlier}])"),
                ));
            }
            let received_at = match &raw_delivery.received_at {
                None => None,
                Some(text) => Some(parse_rfc3339(text).ok_or_else(|| {
                    bad(
                        format!("deliveries[{index}].received_at"),
                        format!("`{text}` is not an RFC 3339 time such as 2024-01-01T08:00:00Z"),
                    )
                })?),
            };
            let event = catalog.event(&raw_delivery.event);
            let reencoded = catalog
                .event_from_bytes(reencode(&raw_delivery.event).as_bytes())
                .expect("a re-encoded JSON value is JSON");
            debug_assert_eq!(
                Event {
                    bytes: event.bytes,
                    ..reencoded
                },
                event,
                "a re-encoding is the same content"
            );
            debug_assert_ne!(reencoded.bytes, event.bytes, "in other bytes");
            deliveries.push(Delivery {
                number,
                received_at,
                ack_lost: raw_delivery.ack_lost,
                event,
                reencoded,
            });
        }
        let mut authority = Vec::new();
        let mut with_authority = BTreeSet::new();
        for (index, snapshot) in raw.authority.iter().enumerate() {
            if !with_authority.insert(snapshot.object_id.clone()) {
                return Err(bad(
                    format!("authority[{index}].object_id"),
                    format!("a second authority snapshot for `{}`", snapshot.object_id),
                ));
            }
            authority.push(Snapshot {
                object_id: catalog.sym(&snapshot.object_id),
                version: snapshot.version,
                state: catalog.state(&Value::Object(snapshot.state.clone())),
            });
        }
        let schedule = match &raw.schedule {
            None => None,
            Some(steps) => Some(
                steps
                    .iter()
                    .enumerate()
                    .map(|(index, step)| {
                        parse_step(step, &numbers, &with_authority, &catalog)
                            .map_err(|message| bad(format!("schedule[{index}]"), message))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let expect = match &raw.expect {
            None => None,
            Some(expect) => Some(typed_expect(expect, &mut catalog, &deliveries, file)?),
        };
        // Parsed here, whether or not replay uses it (`--policy` replaces the policy): a
        // misspelt property would otherwise replay as SPEC's and show nothing.
        let trace = match &raw.trace {
            None => None,
            Some(origin) => Some(Shown {
                policy: origin
                    .policy
                    .parse()
                    .map_err(|message| bad("trace.policy".into(), message))?,
                violates: origin
                    .violates
                    .parse()
                    .map_err(|message| bad("trace.violates".into(), message))?,
            }),
        };
        if let Some(block) = &raw.conform {
            if !["every-step", "end"].contains(&block.observe.as_str()) {
                let observe = &block.observe;
                return Err(bad(
                    "conform.observe".into(),
                    format!("`{observe}`: one of every-step, end"),
                ));
            }
            let known = ["cards", "ack", "paused", "unresolved"];
            if let Some(other) = block.channels.iter().find(|c| !known.contains(&c.as_str())) {
                return Err(bad(
                    "conform.channels".into(),
                    format!("`{other}`: each one of cards, ack, paused, unresolved"),
                ));
            }
            let twice = block
                .channels
                .iter()
                .enumerate()
                .find(|(at, c)| block.channels[..*at].contains(c));
            if let Some((_, twice)) = twice {
                return Err(bad(
                    "conform.channels".into(),
                    format!("`{twice}` twice: name each channel at most once"),
                ));
            }
            if block.actions.is_empty() {
                return Err(bad(
                    "conform.actions".into(),
                    "empty: a conform block reruns at least one action".into(),
                ));
            }
        }
        let conform = match &raw.conform {
            None => None,
            Some(block) => Some(
                block
                    .actions
                    .iter()
                    .enumerate()
                    .map(|(index, action)| {
                        parse_action(action, &numbers, &with_authority, &catalog)
                            .map_err(|message| bad(format!("conform.actions[{index}]"), message))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let name = raw.name.clone().unwrap_or_else(|| {
            file.file_stem().map_or_else(
                || "fixture".into(),
                |stem| stem.to_string_lossy().into_owned(),
            )
        });
        Ok(Scenario {
            file: file.to_owned(),
            name,
            catalog,
            initial,
            deliveries,
            authority,
            schedule,
            retention_seconds: raw.retention_seconds,
            expect,
            trace,
            conform,
            raw,
        })
    }

    /// The index of a delivery number.
    pub fn delivery_index(&self, number: u32) -> Option<usize> {
        self.deliveries
            .iter()
            .position(|delivery| delivery.number == number)
    }

    /// Actions written as in a `conform` block, typed against this fixture; on the first
    /// bad one, its index and what is wrong (a delivery or card the fixture lacks, two
    /// faults on one action).
    pub fn parse_actions(&self, actions: &[RawAction]) -> Result<Vec<Action>, (usize, String)> {
        let numbers: BTreeMap<u32, usize> = self
            .deliveries
            .iter()
            .enumerate()
            .map(|(index, delivery)| (delivery.number, index))
            .collect();
        let with_authority: BTreeSet<String> = self
            .raw
            .authority
            .iter()
            .map(|snapshot| snapshot.object_id.clone())
            .collect();
        actions
            .iter()
            .enumerate()
            .map(|(index, action)| {
                parse_action(action, &numbers, &with_authority, &self.catalog)
                    .map_err(|message| (index, message))
            })
            .collect()
    }

    /// The authority snapshot of a card.
    pub fn authority_for(&self, card: Sym) -> Option<&Snapshot> {
        self.authority
            .iter()
            .find(|snapshot| snapshot.object_id == card)
    }

    /// The explicit schedule, or the first part of the default order: every delivery in
    /// array order (with its `ack_lost` flag). The default order's reconciliation until
    /// quiet depends on the receiver's state; [`crate::card::replay::schedule`] adds it.
    pub fn steps(&self) -> Vec<Step> {
        if let Some(schedule) = &self.schedule {
            return schedule.clone();
        }
        self.deliveries
            .iter()
            .map(|delivery| Step::Deliver {
                delivery: delivery.number,
                fault: delivery.ack_lost.then_some(Fault::AckLost),
            })
            .collect()
    }

    /// The name of an input (`e-204`, or `delivery-N` without an event id).
    pub fn input_name(&self, input: InputRef) -> String {
        match input {
            InputRef::Event(id) => self.catalog.name(id).to_owned(),
            InputRef::Delivery(number) => format!("delivery-{number}"),
        }
    }
}

fn parse_step(
    step: &RawStep,
    numbers: &BTreeMap<u32, usize>,
    with_authority: &BTreeSet<String>,
    catalog: &Catalog,
) -> Result<Step, String> {
    let faults = [step.ack_lost, step.duplicate, step.crash, step.reencoded];
    if faults.iter().filter(|&&set| set).count() > 1 {
        return Err(
            "at most one of `ack_lost`, `duplicate`, `crash` and `reencoded` may be set".into(),
        );
    }
    if step.expire {
        return if step.deliver.is_some() || step.reconcile.is_some() {
            Err("`expire` is a step of its own, not part of `deliver` or `reconcile`".into())
        } else if faults.iter().any(|&set| set) {
            Err(
                "`ack_lost`, `duplicate`, `crash` and `reencoded` go with `deliver`, not `expire`"
                    .into(),
            )
        } else {
            Ok(Step::Expire)
        };
    }
    match (step.deliver, &step.reconcile) {
        (Some(number), None) => {
            if !numbers.contains_key(&number) {
                return Err(format!(
                    "`deliver` names delivery {number}, which the fixture does not have"
                ));
            }
            let fault = if step.ack_lost {
                Some(Fault::AckLost)
            } else if step.duplicate {
                Some(Fault::Duplicate)
            } else if step.crash {
                Some(Fault::Crash)
            } else if step.reencoded {
                Some(Fault::Reencoded)
            } else {
                None
            };
            Ok(Step::Deliver {
                delivery: number,
                fault,
            })
        }
        (None, Some(card)) => {
            if faults.iter().any(|&set| set) {
                return Err(
                    "`ack_lost`, `duplicate`, `crash` and `reencoded` go with `deliver`, not \
                     `reconcile`"
                        .into(),
                );
            }
            if !with_authority.contains(card) {
                return Err(format!(
                    "`reconcile` names `{card}`, which has no authority snapshot"
                ));
            }
            Ok(Step::Reconcile(
                catalog.find(card).expect("authority cards are interned"),
            ))
        }
        (Some(_), Some(_)) => Err("a step is either `deliver` or `reconcile`, not both".into()),
        (None, None) => Err(
            "a step needs `deliver` (a delivery number), `reconcile` (a card) or `expire` (true)"
                .into(),
        ),
    }
}

fn parse_action(
    action: &RawAction,
    numbers: &BTreeMap<u32, usize>,
    with_authority: &BTreeSet<String>,
    catalog: &Catalog,
) -> Result<Action, String> {
    let flags = [
        (action.ack_lost, External::LostAck),
        (action.duplicate, External::Duplicate),
        (action.reencoded, External::Reencoded),
        (action.disconnect, External::Disconnect),
        (action.kill, External::Kill),
        (action.kill_after_ack, External::KillAfterAck),
    ];
    let mut set = flags.iter().filter(|(on, _)| *on).map(|&(_, fault)| fault);
    let fault = set.next();
    if set.next().is_some() {
        return Err(
            "an action sets at most one of `ack_lost`, `duplicate`, `reencoded`, \
                    `disconnect`, `kill` and `kill_after_ack`"
                .into(),
        );
    }
    match (action.deliver, &action.reconcile, action.restart) {
        (Some(number), None, false) => {
            if !numbers.contains_key(&number) {
                return Err(format!(
                    "`deliver` names delivery {number}, which the fixture does not have"
                ));
            }
            Ok(Action::Deliver {
                delivery: number,
                fault,
            })
        }
        (None, Some(card), false) if fault.is_none() => {
            if !with_authority.contains(card) {
                return Err(format!(
                    "`reconcile` names `{card}`, which has no authority snapshot"
                ));
            }
            Ok(Action::Reconcile(
                catalog.find(card).expect("authority cards are interned"),
            ))
        }
        (None, None, true) if fault.is_none() => Ok(Action::Restart),
        _ => Err(
            "an action is one of `deliver` (with at most one fault), `reconcile` (a \
                  card) or `restart` (true)"
                .into(),
        ),
    }
}

/// An envelope written in other bytes than its canonical text, with the same parsed value:
/// every object's keys in reverse order, a space after each colon, a newline and two
/// spaces after each comma, and a newline at each end (so the bytes differ even for a
/// scalar). Scalars are written as serde_json writes them, so numbers keep their form.
pub fn reencode(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                out.push('{');
                for (at, (key, item)) in map.iter().rev().enumerate() {
                    if at > 0 {
                        out.push_str(",\n  ");
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push_str(": ");
                    write(item, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (at, item) in items.iter().enumerate() {
                    if at > 0 {
                        out.push_str(",\n  ");
                    }
                    write(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::from("\n");
    write(value, &mut out);
    out.push('\n');
    out
}

fn typed_expect(
    expect: &RawExpect,
    catalog: &mut Catalog,
    deliveries: &[Delivery],
    file: &Path,
) -> Result<Expect, InputError> {
    let final_cards = expect
        .final_cards
        .iter()
        .map(|(name, card)| {
            let state = catalog.state(&Value::Object(card.state.clone()));
            (catalog.sym(name), (card.version, state))
        })
        .collect();
    let mut unresolved = expect.unresolved.clone();
    unresolved.sort();
    if let Some(pair) = unresolved.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(InputError::invalid(
            file,
            "expect.unresolved",
            format!("`{}` is listed twice", pair[0]),
        ));
    }
    let unresolved_refs = unresolved
        .iter()
        .map(|name| {
            let anonymous = name
                .strip_prefix("delivery-")
                .and_then(|number| number.parse::<u32>().ok())
                .filter(|number| {
                    deliveries.iter().any(|delivery| {
                        delivery.number == *number && delivery.event.event_id.is_none()
                    })
                });
            match anonymous {
                Some(number) => Some(InputRef::Delivery(number)),
                None => catalog.find(name).map(InputRef::Event),
            }
        })
        .collect();
    let paused = expect
        .paused
        .iter()
        .flatten()
        .map(|name| catalog.sym(name))
        .collect();
    Ok(Expect {
        final_cards,
        replacements: expect.replacements,
        unresolved,
        unresolved_refs,
        paused,
    })
}
