//! Synthetic fixtures for benchmarks and for scaling the checker.
//!
//! A seeded generator writes SPEC fixtures with a realistic mix (newer snapshots, stale and
//! equal ones, exact redeliveries, a few changed payloads, a few missing versions), one
//! authority snapshot per card equal to its newest delivered snapshot, and an `expect`
//! computed by replaying the fixture through the real receiver.

use crate::card::fixture::{RawAuthority, RawCard, RawDelivery, RawFixture, Scenario};
use crate::card::policy::Spec;
use crate::card::replay::replay;
use crate::harness::InputError;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `arrival gen` options.
#[derive(Clone, Debug)]
pub struct GenOptions {
    /// Number of cards.
    pub cards: usize,
    /// Number of deliveries.
    pub deliveries: usize,
    /// Share of deliveries that are exact redeliveries of an earlier one.
    pub dup_rate: f64,
    /// Share of deliveries that reuse an earlier event id with a changed payload.
    pub conflict_rate: f64,
    /// Seed of the generator.
    pub seed: u64,
    /// Write here instead of standard output.
    pub out: Option<PathBuf>,
}

use crate::harness::rng::SplitMix;

fn card_state(stage: u64, card: usize) -> Map<String, Value> {
    let value = json!({"stage": format!("s{stage}"), "label": format!("card {card}")});
    value.as_object().cloned().expect("an object")
}

/// Generates the raw events of a synthetic stream (no authority, no expect).
pub fn events(options: &GenOptions) -> Vec<Value> {
    let mut rng = SplitMix::new(options.seed);
    let cards = options.cards.max(1);
    let mut newest = vec![1u64; cards];
    let mut sent: Vec<Value> = Vec::with_capacity(options.deliveries);
    let mut next_id = 0u64;
    for _ in 0..options.deliveries {
        if !sent.is_empty() && rng.chance(options.dup_rate) {
            let earlier = sent[rng.below(sent.len() as u64) as usize].clone();
            sent.push(earlier);
            continue;
        }
        if !sent.is_empty() && rng.chance(options.conflict_rate) {
            let mut variant = sent[rng.below(sent.len() as u64) as usize].clone();
            variant["state"]["stage"] = json!(format!("changed-{}", rng.below(1000)));
            sent.push(variant);
            continue;
        }
        let card = rng.below(cards as u64) as usize;
        // Mostly newer, sometimes older or equal: arrival order is not version order.
        let version = match rng.below(10) {
            0 | 1 => newest[card].saturating_sub(1 + rng.below(3)),
            2 => newest[card],
            _ => newest[card] + 1 + rng.below(2),
        };
        newest[card] = newest[card].max(version);
        let mut event = json!({
            "event_id": format!("e-{next_id}"),
            "object_id": format!("card-{card}"),
            "object_version": version,
            "occurred_at": "2024-01-01T08:00:00Z",
            "type": "card.snapshot",
            "state": card_state(version, card),
        });
        if rng.chance(options.conflict_rate / 4.0) {
            event
                .as_object_mut()
                .expect("an object")
                .remove("object_version");
        }
        next_id += 1;
        sent.push(event);
    }
    sent
}

/// The initial cards of a generated fixture: `card-0` .. `card-{cards - 1}`, each at version 1
/// with the state the generator's version-1 snapshots carry. With [`events`], this is what a
/// benchmark needs to build the receiver the stream was generated for, without a fixture.
pub fn initial_cards(cards: usize) -> BTreeMap<String, RawCard> {
    (0..cards.max(1))
        .map(|card| {
            let raw = RawCard {
                version: 1,
                state: card_state(1, card),
            };
            (format!("card-{card}"), raw)
        })
        .collect()
}

/// Generates a whole fixture with an `expect` computed by the real receiver.
pub fn fixture(options: &GenOptions) -> Result<RawFixture, InputError> {
    let cards = options.cards.max(1);
    let events = events(options);
    let mut newest = vec![1u64; cards];
    for event in &events {
        let card = event["object_id"]
            .as_str()
            .and_then(|name| name.strip_prefix("card-"))
            .and_then(|number| number.parse::<usize>().ok());
        if let (Some(card), Some(version)) = (card, event["object_version"].as_u64()) {
            newest[card] = newest[card].max(version);
        }
    }
    let initial = initial_cards(cards);
    let deliveries = events
        .into_iter()
        .enumerate()
        .map(|(index, event)| RawDelivery {
            delivery: u32::try_from(index + 1).expect("fewer than 2^32 deliveries"),
            received_at: None,
            ack_lost: false,
            event,
        })
        .collect();
    let authority = (0..cards)
        .map(|card| RawAuthority {
            object_id: format!("card-{card}"),
            // The newest delivered snapshot itself: the model reconciles only paused
            // cards, so an authority newer than every event would make the final state
            // depend on whether the card happened to be paused.
            version: newest[card],
            state: card_state(newest[card], card),
            as_of: None,
        })
        .collect();
    let mut raw = RawFixture {
        name: Some(format!(
            "gen-c{}-d{}-s{}",
            cards, options.deliveries, options.seed
        )),
        description: Some(format!(
            "Generated by `arrival gen --cards {} --deliveries {} --dup-rate {} --conflict-rate {} --seed {}`.",
            cards, options.deliveries, options.dup_rate, options.conflict_rate, options.seed
        )),
        retention_seconds: Some(86_400),
        initial,
        deliveries,
        authority,
        schedule: None,
        trace: None,
        conform: None,
        expect: None,
    };
    let scenario = Scenario::from_raw(Path::new("(generated)"), raw.clone())?;
    let report = replay(&scenario, Spec, "spec");
    raw.expect = Some(report.as_expect());
    Ok(raw)
}

/// `arrival gen`: writes the fixture.
pub fn run(options: &GenOptions) -> Result<(), InputError> {
    if let Some(path) = &options.out {
        crate::harness::input::writable_file("--out", path)?;
    }
    let raw = fixture(options)?;
    let text = serde_json::to_string_pretty(&raw).expect("fixtures serialise") + "\n";
    match &options.out {
        None => print!("{text}"),
        Some(path) => std::fs::write(path, text).map_err(|source| InputError::Write {
            file: path.clone(),
            source,
        })?,
    }
    Ok(())
}

/// Every kind of input a small sweep fixture draws its deliveries from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Newer,
    Older,
    SameVersionSameState,
    SameVersionOtherState,
    Redelivery,
    Variant,
    MissingVersion,
    InvalidVersion,
    UnsupportedType,
    NoEventId,
    StateNotObject,
    UnknownCard,
    ReusedIdOtherCard,
}

const KINDS: [Kind; 13] = [
    Kind::Newer,
    Kind::Older,
    Kind::SameVersionSameState,
    Kind::SameVersionOtherState,
    Kind::Redelivery,
    Kind::Variant,
    Kind::MissingVersion,
    Kind::InvalidVersion,
    Kind::UnsupportedType,
    Kind::NoEventId,
    Kind::StateNotObject,
    Kind::UnknownCard,
    Kind::ReusedIdOtherCard,
];

/// A small fixture for the sweep (`arrival check --sweep`): two known cards and an unknown
/// `card-9`, three to six deliveries drawn from every input kind (newer, older and
/// equal-version snapshots, a same-version conflict, exact redeliveries, changed payloads,
/// missing and invalid versions, an unsupported type, no event id, a state that is not an
/// object, an unknown card), `occurred_at` in random order, and authority snapshots that
/// satisfy `authority-current` (each at least as new as everything its card could reach;
/// `card-9` has one now and then). `expect` is what the SPEC receiver ends with in the
/// default order.
pub fn small(seed: u64) -> Result<RawFixture, InputError> {
    let mut rng = SplitMix::new(seed);
    let initial_version = [1 + rng.below(3), 1 + rng.below(3)];
    let state = |stage: String| -> Map<String, Value> {
        json!({ "stage": stage })
            .as_object()
            .cloned()
            .expect("an object")
    };
    let initial: BTreeMap<String, RawCard> = (0..2)
        .map(|card| {
            let raw = RawCard {
                version: initial_version[card],
                state: state(format!("initial-{card}")),
            };
            (format!("card-{card}"), raw)
        })
        .collect();
    let count = 3 + rng.below(4) as usize;
    let mut events: Vec<Value> = Vec::with_capacity(count);
    // Versions each card may reach, for the authority.
    let mut reach = [initial_version[0], initial_version[1], 0];
    // The newest snapshot each known card reaches if nothing pauses it.
    let mut newest = [
        (initial_version[0], state("initial-0".into())),
        (initial_version[1], state("initial-1".into())),
    ];
    let mut next_id = 1;
    for index in 0..count {
        let kind = KINDS[rng.below(KINDS.len() as u64) as usize];
        let card = rng.below(2) as usize;
        let occurred = format!("2024-01-01T08:00:{:02}Z", rng.below(10));
        let mut event = json!({
            "event_id": format!("e-{next_id}"),
            "object_id": format!("card-{card}"),
            "object_version": initial_version[card] + 1 + rng.below(2),
            "occurred_at": occurred,
            "type": "card.snapshot",
            "state": state(format!("s{index}")),
        });
        let earlier =
            (!events.is_empty()).then(|| events[rng.below(events.len() as u64) as usize].clone());
        match (kind, earlier) {
            (Kind::Redelivery, Some(earlier)) => event = earlier,
            (Kind::Variant, Some(earlier)) if earlier.get("event_id").is_some() => {
                event["event_id"] = earlier["event_id"].clone();
            }
            (Kind::Older, _) => {
                event["object_version"] = json!(initial_version[card].saturating_sub(1))
            }
            (Kind::SameVersionSameState, _) => {
                event["object_version"] = json!(initial_version[card]);
                event["state"] = json!(state(format!("initial-{card}")));
            }
            (Kind::SameVersionOtherState, _) => {
                event["object_version"] = json!(initial_version[card])
            }
            (Kind::MissingVersion, _) => {
                event
                    .as_object_mut()
                    .expect("object")
                    .remove("object_version");
            }
            (Kind::InvalidVersion, _) => event["object_version"] = json!("7"),
            (Kind::UnsupportedType, _) => event["type"] = json!("card.deleted"),
            (Kind::NoEventId, _) => {
                event.as_object_mut().expect("object").remove("event_id");
            }
            (Kind::StateNotObject, _) => event["state"] = json!("gone"),
            (Kind::UnknownCard, _) => event["object_id"] = json!("card-9"),
            // An event id reused for the other known card, with its own content.
            (Kind::ReusedIdOtherCard, Some(earlier)) if earlier.get("event_id").is_some() => {
                let other = if earlier["object_id"] == "card-0" {
                    1
                } else {
                    0
                };
                event["event_id"] = earlier["event_id"].clone();
                event["object_id"] = json!(format!("card-{other}"));
                event["object_version"] = json!(initial_version[other] + 1 + rng.below(2));
            }
            _ => {}
        }
        if event["event_id"] == json!(format!("e-{next_id}")) {
            next_id += 1;
        }
        let slot = match event["object_id"].as_str() {
            Some("card-0") => Some(0),
            Some("card-1") => Some(1),
            Some("card-9") => Some(2),
            _ => None,
        };
        let decidable = event["type"] == "card.snapshot"
            && event.get("event_id").is_some()
            && event["state"].is_object();
        if let (Some(slot), Some(version), true) =
            (slot, event["object_version"].as_u64(), decidable)
        {
            reach[slot] = reach[slot].max(version);
            if slot < 2 && version > newest[slot].0 {
                let snapshot = event["state"].as_object().cloned().expect("an object");
                newest[slot] = (version, snapshot);
            }
        }
        events.push(event);
    }
    let unknown_named = events.iter().any(|event| event["object_id"] == "card-9");
    let mut authority = Vec::new();
    for (slot, name) in ["card-0", "card-1", "card-9"].into_iter().enumerate() {
        // Every known card has an authority (a pausable card without one breaks
        // authority-current); the unknown card has one now and then.
        let wanted = slot < 2 || (unknown_named && rng.chance(0.7));
        if wanted {
            // Now and then a known card's authority is exactly the newest snapshot it
            // reaches, when that is its newest version too (reconciliation then confirms
            // rather than replaces).
            let confirming = slot < 2 && newest[slot].0 == reach[slot] && rng.chance(0.3);
            let (version, snapshot) = if confirming {
                newest[slot].clone()
            } else {
                (
                    reach[slot].max(1) + rng.below(2),
                    state(format!("authority-{slot}")),
                )
            };
            authority.push(RawAuthority {
                object_id: name.to_owned(),
                version,
                state: snapshot,
                as_of: None,
            });
        }
    }
    let deliveries = events
        .into_iter()
        .enumerate()
        .map(|(index, event)| RawDelivery {
            delivery: index as u32 + 1,
            received_at: None,
            ack_lost: false,
            event,
        })
        .collect();
    let mut raw = RawFixture {
        name: Some(format!("sweep-{seed}")),
        description: Some(format!(
            "Generated by the sweep (`arrival check --sweep`), fixture seed {seed}."
        )),
        retention_seconds: Some(86_400),
        initial,
        deliveries,
        authority,
        schedule: None,
        trace: None,
        conform: None,
        expect: None,
    };
    let mut scenario = Scenario::from_raw(Path::new("(generated)"), raw.clone())?;
    if crate::card::properties::authority_behind(&scenario).is_some() {
        // A known card that may never be paused must have the newest snapshot it reaches
        // as its authority, or it would end as one or the other by arrival order.
        for snapshot in &mut raw.authority {
            if let Some(slot) = ["card-0", "card-1"]
                .iter()
                .position(|name| *name == snapshot.object_id)
            {
                snapshot.version = newest[slot].0;
                snapshot.state = newest[slot].1.clone();
            }
        }
        scenario = Scenario::from_raw(Path::new("(generated)"), raw.clone())?;
        debug_assert!(crate::card::properties::authority_behind(&scenario).is_none());
    }
    let report = replay(&scenario, Spec, "spec");
    let mut expect = report.as_expect();
    expect.replacements = None;
    raw.expect = Some(expect);
    Ok(raw)
}
