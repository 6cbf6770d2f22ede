//! Throughput of the decision function (issue "Performance", item 1).
//!
//! Group `reducer`, three functions over the same synthetic stream, measured side by side so
//! their ratios mean something (criterion reports `thrpt` in deliveries per second):
//!
//! - `decide`: [`Receiver::deliver`] under [`Spec`] over typed events parsed beforehand;
//! - `parse_and_decide`: the same stream from raw JSON bytes: [`Catalog::event_from_bytes`]
//!   (the receiver's edge), then `deliver`, both timed;
//! - `baseline`: a bare `std::collections::HashMap` upsert of event id -> record plus
//!   card -> version over the same typed events: the speed of light for the bookkeeping;
//! - `baseline_dense`: the same upserts into vectors indexed by the interned symbols, the
//!   speed of light for a receiver keyed by dense ids;
//! - `parse_floor_ignored`: serde_json reading the same bytes and building nothing
//!   (`IgnoredAny`): the floor of any parser that validates JSON;
//! - `parse_floor_value`: serde_json building a `serde_json::Value` from each delivery and
//!   dropping it: what a receiver that parses into a tree pays before deciding anything.
//!
//! Group `reconcile`: one paused card with 1 k or 10 k `held_paused` events, then one
//! [`Receiver::reconcile`] (throughput: holds settled per second).
//!
//! The stream comes from [`arrival::card::generate::events`]: by default 1 M deliveries over 10 k
//! cards, 10% exact redeliveries, 0.1% changed payloads (and a quarter as many missing
//! versions), which pause their card, so a few percent of the stream is held. Override with
//! `ARRIVAL_BENCH_DELIVERIES`, `ARRIVAL_BENCH_CARDS`, `ARRIVAL_BENCH_DUP_RATE`,
//! `ARRIVAL_BENCH_CONFLICT_RATE` and `ARRIVAL_BENCH_SEED`. It is generated lazily, once, the
//! first time a function of the `reducer` group runs (so `cargo bench --bench reducer
//! reconcile` does not build it), and its decision mix is printed then.
//!
//! Run time: building the stream takes 20-60 s on two shared cores (it also checks that
//! `Catalog::event_from_bytes` gives the same event as `Catalog::event` for every delivery);
//! a pass of `parse_and_decide` takes about 0.8 s. Skip it with
//! `cargo bench --bench reducer -- '^reducer/(decide|baseline)'`.
//!
//! ## Bytes in: figures (issue 12, item 5)
//!
//! `cargo bench -j1 --bench reducer -- --quick decide` (runs `decide` and `parse_and_decide`
//! in one criterion run), default stream (1 M deliveries, 170.5 MB of JSON, about 170 bytes
//! each), two shared cores:
//!
//! | step | `decide` | `parse_and_decide` | ratio |
//! |---|---|---|---|
//! | before: `serde_json::from_slice` into a `Value`, `Catalog::event` (canonical text rebuilt with `to_string`, SipHash maps of owned strings, states stored as `Value` clones) | 26.4 M/s | 305 k/s | 87x |
//! | `Catalog::event_from_bytes`: one-pass recognition of canonical bytes, lookups by borrowed text, states parsed lazily | 27.7 M/s | 640 k/s | 43x |
//! | texts end to end in chunks, `HashTable<(hash, id)>` with seeded foldhash (one hash per lookup, no allocation per new text) | 23.4 M/s | 1.25 M/s | 19x |
//!
//! (The "60 k/s" was measured on a busier machine; the before row here is the same
//! code on this run's machine.) What limits it now, from `perf` on the last row: about 55%
//! of the time is hash-table probing into three tables of ~1 M texts each (contents, event
//! ids, states), i.e. cache misses on the table and on the stored text compared on a hit;
//! `deliver` about 10%; the byte scanner about 8%; hashing itself about 2%. A new event id,
//! content or state has to be stored somewhere, so the stream's ~900 k new ids and
//! contents cannot be free; known ids, contents and states allocate nothing.
//!
//! Every timed iteration starts from a clone of the initial receiver (or catalog, or maps),
//! made by `iter_batched` outside the measurement; the final state is returned, so dropping
//! it is not timed either.

use arrival::card::generate::{self, GenOptions};
use arrival::card::policy::Spec;
use arrival::card::receiver::{Card, Receiver};
use arrival::card::wire::{Catalog, Event, Snapshot, Sym, Version};
use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[path = "shared/mix.rs"]
mod shared;

/// The synthetic stream in every form the benchmarks read.
struct Stream {
    /// The generator's initial cards, interned, and nothing else: where parsing starts.
    catalog: Catalog,
    /// The receiver the stream is delivered to: every card known, nothing recorded.
    receiver: Receiver,
    /// Each delivery parsed into a typed event (with a clone of `catalog`).
    events: Vec<Event>,
    /// Each delivery's envelope as JSON bytes.
    raw: Vec<Vec<u8>>,
    /// The baseline's initial card -> version map.
    versions: HashMap<Sym, u64>,
    /// The same, indexed by the card's symbol.
    dense_versions: Vec<Option<u64>>,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}=`{text}` does not parse")),
        Err(_) => default,
    }
}

fn options() -> GenOptions {
    GenOptions {
        cards: env_or("ARRIVAL_BENCH_CARDS", 10_000),
        deliveries: env_or("ARRIVAL_BENCH_DELIVERIES", 1_000_000),
        dup_rate: env_or("ARRIVAL_BENCH_DUP_RATE", 0.1),
        conflict_rate: env_or("ARRIVAL_BENCH_CONFLICT_RATE", 0.001),
        seed: env_or("ARRIVAL_BENCH_SEED", 1),
        out: None,
    }
}

/// Interns the generator's initial cards; returns the catalog and the cards.
fn initial(cards: usize) -> (Catalog, Vec<(Sym, Card)>) {
    let mut catalog = Catalog::new();
    let cards = generate::initial_cards(cards)
        .into_iter()
        .map(|(name, card)| {
            let state = catalog.state(&Value::Object(card.state));
            (catalog.sym(&name), Card::new(card.version, state))
        })
        .collect();
    (catalog, cards)
}

fn build(options: &GenOptions) -> Stream {
    let start = Instant::now();
    let (catalog, cards) = initial(options.cards);
    let values = generate::events(options);
    let generated = start.elapsed();
    let raw: Vec<Vec<u8>> = values
        .iter()
        .map(|value| serde_json::to_vec(value).expect("events serialise"))
        .collect();
    drop(values);
    // Parse exactly as the timed `parse_and_decide` loop does, from the same catalog, so
    // both paths see the same symbols.
    let mut parsing = catalog.clone();
    let events: Vec<Event> = raw
        .iter()
        .map(|bytes| {
            let value: Value = serde_json::from_slice(bytes).expect("events parse");
            parsing.event(&value)
        })
        .collect();
    drop(parsing);
    // The timed loop reads the bytes with `Catalog::event_from_bytes`: it must give the very
    // same events (tests/wire_bytes.rs checks this on generated envelopes; this is the bench's
    // own stream).
    let mut from_bytes = catalog.clone();
    for (bytes, event) in raw.iter().zip(&events) {
        let fast = from_bytes.event_from_bytes(bytes).expect("events parse");
        assert_eq!(&fast, event, "event_from_bytes differs from event");
    }
    drop(from_bytes);
    let receiver = Receiver::new(cards.iter().copied());
    let versions = cards
        .iter()
        .map(|(sym, card)| (*sym, card.version))
        .collect();
    let mut dense_versions = Vec::new();
    for (sym, card) in &cards {
        let slot = sym.0 as usize;
        if slot >= dense_versions.len() {
            dense_versions.resize(slot + 1, None);
        }
        dense_versions[slot] = Some(card.version);
    }
    let stream = Stream {
        catalog,
        receiver,
        events,
        raw,
        versions,
        dense_versions,
    };
    report_mix(options, &stream, generated, start.elapsed());
    stream
}

/// Delivers the stream once, untimed, and prints what it is made of.
fn report_mix(options: &GenOptions, stream: &Stream, generated: Duration, built: Duration) {
    let start = Instant::now();
    let (receiver, mix) = shared::decision_mix(&stream.receiver, &stream.events);
    let once = start.elapsed();
    let total = stream.events.len().max(1) as f64;
    let bytes: usize = stream.raw.iter().map(Vec::len).sum();
    eprintln!(
        "stream: {} deliveries over {} cards (dup rate {}, conflict rate {}, seed {}), {:.1} MB of JSON; \
         generated in {:.1} s, serialised and parsed by {:.1} s",
        stream.events.len(),
        options.cards,
        options.dup_rate,
        options.conflict_rate,
        options.seed,
        bytes as f64 / 1e6,
        generated.as_secs_f64(),
        built.as_secs_f64(),
    );
    eprintln!("stream mix: {mix}");
    eprintln!(
        "stream: one untimed delivery pass took {:.3} s ({:.2} M decisions/s); {} cards paused at the end",
        once.as_secs_f64(),
        total / once.as_secs_f64() / 1e6,
        receiver.paused().count(),
    );
}

fn delivery_number(index: usize) -> u32 {
    u32::try_from(index + 1).expect("fewer than 2^32 deliveries")
}

fn stream() -> &'static Stream {
    static STREAM: OnceLock<Stream> = OnceLock::new();
    STREAM.get_or_init(|| build(&options()))
}

fn reducer(c: &mut Criterion) {
    let deliveries = options().deliveries;
    let mut group = c.benchmark_group("reducer");
    group
        .throughput(Throughput::Elements(deliveries as u64))
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));

    group.bench_function("decide", |b| {
        let stream = stream();
        b.iter_batched(
            || stream.receiver.clone(),
            |mut receiver| {
                for (index, event) in stream.events.iter().enumerate() {
                    black_box(receiver.deliver(Spec, delivery_number(index), None, event));
                }
                receiver
            },
            BatchSize::LargeInput,
        );
    });

    group.bench_function("parse_and_decide", |b| {
        let stream = stream();
        b.iter_batched(
            || (stream.catalog.clone(), stream.receiver.clone()),
            |(mut catalog, mut receiver)| {
                for (index, bytes) in stream.raw.iter().enumerate() {
                    let event = catalog.event_from_bytes(bytes).expect("events parse");
                    black_box(receiver.deliver(Spec, delivery_number(index), None, &event));
                }
                (catalog, receiver)
            },
            BatchSize::LargeInput,
        );
    });

    group.bench_function("baseline", |b| {
        let stream = stream();
        b.iter_batched(
            || (HashMap::<Sym, Event>::new(), stream.versions.clone()),
            |(mut records, mut versions)| {
                for event in &stream.events {
                    if let Some(id) = event.event_id {
                        black_box(records.insert(id, *event));
                    }
                    if let (Some(card), Version::Valid(version)) = (event.object_id, event.version)
                    {
                        let newest = versions.entry(card).or_insert(version);
                        *newest = (*newest).max(version);
                    }
                }
                (records, versions)
            },
            BatchSize::LargeInput,
        );
    });
    // Not in the brief's list: the same bookkeeping with the interned ids used as indexes
    // into vectors (no hashing, arrival-ordered event ids land next to each other), the
    // speed of light for a receiver keyed by dense symbols.
    group.bench_function("baseline_dense", |b| {
        let stream = stream();
        b.iter_batched(
            || (Vec::<Option<Event>>::new(), stream.dense_versions.clone()),
            |(mut records, mut versions)| {
                for event in &stream.events {
                    if let Some(id) = event.event_id {
                        let slot = id.0 as usize;
                        if slot >= records.len() {
                            records.resize(slot + 1, None);
                        }
                        black_box(records[slot].replace(*event));
                    }
                    if let (Some(card), Version::Valid(version)) = (event.object_id, event.version)
                    {
                        let slot = card.0 as usize;
                        if slot >= versions.len() {
                            versions.resize(slot + 1, None);
                        }
                        let newest = versions[slot].get_or_insert(version);
                        *newest = (*newest).max(version);
                    }
                }
                (records, versions)
            },
            BatchSize::LargeInput,
        );
    });
    // The floors for bytes in: serde_json over the same bytes, validating only, and building
    // the tree a naive receiver would decide on (each `Value` dropped inside the loop).
    group.bench_function("parse_floor_ignored", |b| {
        let stream = stream();
        b.iter(|| {
            for bytes in &stream.raw {
                let parsed: serde::de::IgnoredAny =
                    serde_json::from_slice(bytes).expect("events parse");
                black_box(parsed);
            }
        });
    });
    group.bench_function("parse_floor_value", |b| {
        let stream = stream();
        b.iter(|| {
            for bytes in &stream.raw {
                let parsed: Value = serde_json::from_slice(bytes).expect("events parse");
                black_box(&parsed);
            }
        });
    });
    group.finish();
}

/// A receiver of 10 k cards, one of them (`card-0`) paused by a delivery without a version,
/// with `holds` newer snapshots of it held behind the pause; and the authority snapshot that
/// confirms the card, so every hold is evaluated again (and applied, in arrival order).
fn paused_card(holds: usize) -> (Receiver, Snapshot) {
    let (mut catalog, cards) = initial(10_000);
    let card = catalog.find("card-0").expect("card-0 is an initial card");
    let state_of = |version: u64| json!({"stage": format!("s{version}"), "label": "card 0"});
    let mut receiver = Receiver::new(cards.iter().copied());
    let envelope = |id: usize, version: Option<u64>| {
        let mut envelope = json!({
            "event_id": format!("h-{id}"),
            "object_id": "card-0",
            "occurred_at": "2024-01-01T08:00:00Z",
            "type": "card.snapshot",
            "state": state_of(version.unwrap_or(2)),
        });
        if let Some(version) = version {
            envelope["object_version"] = json!(version);
        }
        envelope
    };
    let pause = catalog.event(&envelope(0, None));
    receiver.deliver(Spec, 1, None, &pause);
    for id in 1..=holds {
        let event = catalog.event(&envelope(id, Some(id as u64 + 1)));
        receiver.deliver(Spec, delivery_number(id), None, &event);
    }
    assert_eq!(receiver.holds()[&Some(card)].len(), holds + 1);
    let confirm = Snapshot {
        object_id: card,
        version: receiver.cards()[&card].version,
        state: receiver.cards()[&card].state,
    };
    // What the timed reconciliation does: confirm, supersede the missing version, apply
    // every held snapshot in arrival order.
    let mut trial = receiver.clone();
    let reconciled = trial.reconcile(Spec, &confirm);
    assert_eq!(reconciled.settled.len(), holds + 1);
    assert_eq!(trial.cards()[&card].version, holds as u64 + 1);
    assert!(trial.holds().is_empty());
    (receiver, confirm)
}

fn reconcile(c: &mut Criterion) {
    let mut group = c.benchmark_group("reconcile");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for holds in [1_000, 10_000] {
        let (receiver, snapshot) = paused_card(holds);
        group.throughput(Throughput::Elements(holds as u64));
        group.bench_with_input(BenchmarkId::from_parameter(holds), &holds, |b, _| {
            b.iter_batched(
                || receiver.clone(),
                |mut receiver| {
                    let reconciled = receiver.reconcile(Spec, &snapshot);
                    (receiver, reconciled)
                },
                BatchSize::LargeInput,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, reducer, reconcile);
criterion_main!(benches);
