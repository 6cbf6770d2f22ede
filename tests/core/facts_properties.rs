//! Properties of the facts inbox and envelope, over generated inputs:
//! - READY, the fact identities and the open conflicts depend on the set of envelopes
//!   consumed, never on their order (duplicates, conflicting variants and late mismatches
//!   included);
//! - semantic equality ignores key order and whitespace, and sees any change of value.

use arrival::facts::application::{AppKey, Application, Applications};
use arrival::facts::envelope::{Envelope, FactId, Source};
use arrival::facts::inbox::{consume, ready, At, Inbox};
use proptest::prelude::*;
use proptest::sample::subsequence;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

const TENANT: &str = "xinghe-demo";
const APPS: [&str; 2] = ["app-a", "app-b"];

fn applications() -> Applications {
    let mut apps = Applications::new();
    for (index, id) in APPS.iter().enumerate() {
        apps.insert(
            AppKey {
                tenant_id: TENANT.into(),
                application_id: (*id).into(),
            },
            // app-b is on its second material version.
            Application::active(format!("KEY-{index}"), index as u64 + 1),
        );
    }
    apps
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(object) => object,
        _ => unreachable!(),
    }
}

/// An envelope body as an object: `source` reports `event_id` about `APPS[app]` for
/// `material_version`, with `amount` in its data.
fn fact(source: Source, event_id: &str, app: usize, material_version: u64, amount: u32) -> Value {
    json!({
        "schema_version": "1",
        "source": source.as_str(),
        "event_id": event_id,
        "event_type": source.fact_type().as_str(),
        "sent_at": "2024-06-03T09:00:00Z",
        "tenant_id": TENANT,
        "application_id": APPS[app],
        "business_key": format!("KEY-{app}"),
        "material_version": material_version,
        "data": {"amount": amount, "note": "as sent"}
    })
}

fn envelope(body: &str, source: Source) -> Envelope {
    Envelope::parse(body.as_bytes(), source).expect("a valid envelope")
}

/// The pool the generator draws sets from: facts for both applications, copies written
/// with other key order and spacing, a conflicting variant, facts for a material version
/// that is not current.
fn pool() -> Vec<Envelope> {
    use Source::{Contracts, Finance};
    let plain = |value: &Value, source| envelope(&value.to_string(), source);
    let pretty = |value: &Value, source| {
        let mut reversed = Map::new();
        for (key, field) in object(value.clone()).into_iter().rev() {
            reversed.insert(key, field);
        }
        envelope(&serde_json::to_string_pretty(&reversed).unwrap(), source)
    };
    let pay_a = fact(Finance, "PAY-1", 0, 1, 100);
    let sig_a = fact(Contracts, "SIG-1", 0, 1, 7);
    let pay_b = fact(Finance, "PAY-2", 1, 2, 200);
    let sig_b = fact(Contracts, "SIG-2", 1, 2, 8);
    vec![
        plain(&pay_a, Finance),
        pretty(&pay_a, Finance),
        plain(&sig_a, Contracts),
        plain(&fact(Finance, "PAY-1", 0, 1, 101), Finance),
        plain(&pay_b, Finance),
        plain(&sig_b, Contracts),
        pretty(&sig_b, Contracts),
        plain(&fact(Contracts, "SIG-3", 1, 1, 9), Contracts),
        // Same event id as SIG-1 but reported about app-b: a conflict on both.
        plain(&fact(Contracts, "SIG-1", 1, 2, 7), Contracts),
        // The same event id from the other source: another identity.
        plain(&fact(Finance, "SIG-1", 0, 1, 5), Finance),
    ]
}

/// What must not depend on order: READY per application, fact identities, open conflicts.
type Outcome = (Vec<bool>, BTreeSet<FactId>, Vec<AppKey>);

fn run(envelopes: &[Envelope]) -> Outcome {
    let apps = applications();
    let mut inbox = Inbox::new();
    for (entry, envelope) in (1..).zip(envelopes) {
        let at = At {
            entry,
            received_at: 0,
        };
        consume(&mut inbox, &apps, at, envelope);
    }
    inbox.check_invariants(&apps).expect("inbox invariants");
    let ready = apps
        .iter()
        .map(|(key, _)| {
            let by_rule = ready(&inbox, &apps, key);
            assert_eq!(inbox.marked_ready(key), by_rule, "stale READY mark");
            by_rule
        })
        .collect();
    let ids = inbox.facts().map(Envelope::fact_id).collect();
    let conflicts = inbox.open_conflicts().iter().cloned().collect();
    (ready, ids, conflicts)
}

proptest! {
    #[test]
    fn ready_depends_on_the_set_never_the_order(
        (chosen, shuffled) in subsequence(pool(), 0..=pool().len())
            .prop_flat_map(|chosen| (Just(chosen.clone()), Just(chosen).prop_shuffle()))
    ) {
        prop_assert_eq!(run(&chosen), run(&shuffled));
    }

    #[test]
    fn semantic_equality_ignores_key_order_and_whitespace(
        data in arb_json(),
        choices in prop::collection::vec(any::<u8>(), 1..64),
    ) {
        let mut value = fact(Source::Finance, "PAY-9", 0, 1, 1);
        value["data"]["extra"] = data.clone();
        let a = envelope(&value.to_string(), Source::Finance);
        let mut scrambled = String::new();
        let mut choices = choices.iter().copied().cycle();
        write_scrambled(&value, &mut choices, &mut scrambled);
        let b = envelope(&scrambled, Source::Finance);
        prop_assert!(a.same_content(&b), "{} vs {}", a.canonical(), b.canonical());
        prop_assert_eq!(a.canonical(), b.canonical());
        // Any change of value is seen.
        value["data"]["extra"] = json!([data]);
        let c = envelope(&value.to_string(), Source::Finance);
        prop_assert!(!a.same_content(&c));
    }
}

/// JSON values without floats (their text forms are not the point here).
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-z0-9 \"\\\\é]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,3}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Writes `value` as JSON with object keys in an order and with spacing drawn from
/// `choices`.
fn write_scrambled(value: &Value, choices: &mut impl Iterator<Item = u8>, out: &mut String) {
    let space = |out: &mut String, choices: &mut dyn Iterator<Item = u8>| {
        let spaces = [" ", "\n", "\t", "  ", "", "\r\n"];
        out.push_str(spaces[choices.next().unwrap() as usize % spaces.len()]);
    };
    match value {
        Value::Object(object) => {
            let mut entries: Vec<(&String, &Value)> = object.iter().collect();
            // A rotation and maybe a reversal, both drawn.
            let turn = choices.next().unwrap() as usize % entries.len().max(1);
            entries.rotate_left(turn);
            if choices.next().unwrap() % 2 == 0 {
                entries.reverse();
            }
            out.push('{');
            for (index, (key, field)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                space(out, choices);
                out.push_str(&Value::String(key.clone()).to_string());
                space(out, choices);
                out.push(':');
                space(out, choices);
                write_scrambled(field, choices, out);
                space(out, choices);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                space(out, choices);
                write_scrambled(item, choices, out);
            }
            space(out, choices);
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}
