//! Delivers the reducer bench's stream (`benches/reducer.rs`) to a fresh receiver, then
//! makes the `baseline_dense` upserts over it, pass after pass, and prints each pass's times
//! and their ratio: a same-process comparison on a machine whose speed drifts, and a small
//! binary to profile (`decide` and `dense` are not inlined, so
//! `valgrind --tool=callgrind --toggle-collect=decide_profile::decide` counts one of them).
//!
//! `cargo bench --bench decide_profile -- [DELIVERIES [CARDS [PASSES]]]` (default 1,000,000
//! deliveries on 10,000 cards, 11 passes); the binary for a profiler is the one under
//! `target/release/deps/decide_profile-*`.

use arrival::card::generate::{self, GenOptions};
use arrival::card::policy::Spec;
use arrival::card::receiver::{Card, Receiver};
use arrival::card::wire::{Catalog, Event, Version};
use serde_json::Value;
use std::hint::black_box;
use std::time::Instant;

#[path = "shared/mix.rs"]
mod shared;

/// The `index`th number given (from 1), past the flags cargo adds (`--bench`).
fn argument(index: usize, default: usize) -> usize {
    std::env::args()
        .skip(1)
        .filter(|word| !word.starts_with("--"))
        .nth(index - 1)
        .map_or(default, |text| text.parse().expect("a whole number"))
}

fn main() {
    let options = GenOptions {
        cards: argument(2, 10_000),
        deliveries: argument(1, 1_000_000),
        dup_rate: 0.1,
        conflict_rate: 0.001,
        seed: 1,
        out: None,
    };
    let passes = argument(3, 11).max(1);
    let mut catalog = Catalog::new();
    let cards: Vec<_> = generate::initial_cards(options.cards)
        .into_iter()
        .map(|(name, card)| {
            let state = catalog.state(&Value::Object(card.state));
            (catalog.sym(&name), Card::new(card.version, state))
        })
        .collect();
    let events: Vec<Event> = generate::events(&options)
        .iter()
        .map(|value| catalog.event(value))
        .collect();
    let receiver = Receiver::new(cards.iter().copied());
    let mut versions = Vec::new();
    for (sym, card) in &cards {
        let slot = sym.0 as usize;
        if slot >= versions.len() {
            versions.resize(slot + 1, None);
        }
        versions[slot] = Some(card.version);
    }
    let (after, mix) = shared::decision_mix(&receiver, &events);
    println!(
        "{} deliveries: {mix}; {} cards paused at the end",
        events.len(),
        after.paused().count()
    );
    drop(after);
    let mut ratios = Vec::new();
    for _ in 0..passes {
        let copy = receiver.clone();
        let (faults, kernel) = faults_and_kernel_ms();
        let start = Instant::now();
        let decided = decide(copy, &events);
        let decide_ms = start.elapsed().as_secs_f64() * 1e3;
        let (decide_faults, decide_kernel) = since(faults, kernel);
        drop(decided);
        let copy = versions.clone();
        let (faults, kernel) = faults_and_kernel_ms();
        let start = Instant::now();
        let upserted = dense(copy, &events);
        let dense_ms = start.elapsed().as_secs_f64() * 1e3;
        let (dense_faults, dense_kernel) = since(faults, kernel);
        drop(upserted);
        ratios.push(dense_ms / decide_ms);
        println!(
            "decide {decide_ms:.1} ms ({decide_faults} page faults, {decide_kernel:.0} ms in the kernel), \
             dense {dense_ms:.1} ms ({dense_faults}, {dense_kernel:.0} ms), ratio {:.3}",
            dense_ms / decide_ms
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!("median ratio dense/decide {:.3}", ratios[ratios.len() / 2]);
}

/// This process's minor page faults and kernel time so far, from `/proc/self/stat` (zeros
/// where there is no such file).
fn faults_and_kernel_ms() -> (u64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's closing parenthesis: minflt is the 8th, stime the 13th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let number = |index: usize| fields.get(index).and_then(|f| f.parse::<u64>().ok());
    // stime counts clock ticks, 100 a second on Linux (`getconf CLK_TCK`): 10 ms each.
    let ticks = number(12).unwrap_or(0) as f64;
    (number(7).unwrap_or(0), ticks * 10.0)
}

/// Page faults and kernel milliseconds since an earlier [`faults_and_kernel_ms`].
fn since(faults: u64, kernel_ms: f64) -> (u64, f64) {
    let (now, now_ms) = faults_and_kernel_ms();
    (now - faults, now_ms - kernel_ms)
}

/// `reducer/decide`'s loop.
#[inline(never)]
fn decide(mut receiver: Receiver, events: &[Event]) -> Receiver {
    for (index, event) in events.iter().enumerate() {
        let delivery = u32::try_from(index + 1).expect("fewer than 2^32 deliveries");
        black_box(receiver.deliver(Spec, delivery, None, event));
    }
    receiver
}

/// `reducer/baseline_dense`'s loop.
#[inline(never)]
fn dense(
    mut versions: Vec<Option<u64>>,
    events: &[Event],
) -> (Vec<Option<Event>>, Vec<Option<u64>>) {
    let mut records: Vec<Option<Event>> = Vec::new();
    for event in events {
        if let Some(id) = event.event_id {
            let slot = id.0 as usize;
            if slot >= records.len() {
                records.resize(slot + 1, None);
            }
            black_box(records[slot].replace(*event));
        }
        if let (Some(card), Version::Valid(version)) = (event.object_id, event.version) {
            let slot = card.0 as usize;
            if slot >= versions.len() {
                versions.resize(slot + 1, None);
            }
            let newest = versions[slot].get_or_insert(version);
            *newest = (*newest).max(version);
        }
    }
    (records, versions)
}
