//! The decision mix of a bench stream: one untimed pass, shared by `reducer` and
//! `decide_profile` so both describe their stream the same way.

use arrival::card::policy::Spec;
use arrival::card::receiver::Receiver;
use arrival::card::wire::Event;
use std::collections::BTreeMap;

/// Delivers `events` (numbered from 1) to a copy of `receiver`; returns the copy after the
/// pass and a line such as `applied 595600 (59.56%), stale ...`, by decision name.
pub fn decision_mix(receiver: &Receiver, events: &[Event]) -> (Receiver, String) {
    let mut receiver = receiver.clone();
    let mut mix: BTreeMap<&'static str, u64> = BTreeMap::new();
    for (index, event) in events.iter().enumerate() {
        let delivery = u32::try_from(index + 1).expect("fewer than 2^32 deliveries");
        let delivered = receiver.deliver(Spec, delivery, None, event);
        *mix.entry(delivered.verdict.name()).or_default() += 1;
    }
    let total = events.len().max(1) as f64;
    let shares: Vec<String> = mix
        .iter()
        .map(|(name, count)| format!("{name} {count} ({:.2}%)", 100.0 * *count as f64 / total))
        .collect();
    (receiver, shares.join(", "))
}
