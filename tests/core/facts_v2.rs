//! Contract v2's pure rules, as rows: withdrawals and limits at parse time, keys bound to
//! tenants and windows at ingress, and the operator steps (register, upgrade, terminate,
//! resolve, expire) on the registry and the inbox, each with READY recomputed.

use arrival::facts::application::{AppKey, Application, Applications, LifecycleError};
use arrival::facts::envelope::{Envelope, EnvelopeError, FactId, Source};
use arrival::facts::inbox::{consume, ready, At, Inbox, Kept, Parking, Verdict};
use arrival::facts::ingress::{admit, sign, Admission, IngressConfig, Key, Reason, Request};
use arrival::facts::ingress::{Secret, Tenants};
use arrival::facts::operator::{expire_quarantine, register, resolve, terminate, upgrade};
use serde_json::{json, Value};
use std::collections::BTreeMap;

const T: &str = "xinghe-demo";
const APP: &str = "app-1";
const NOW: i64 = 1_717_405_200; // 2024-06-03T09:00:00Z

fn body(source: &str, event_id: &str, kind: &str, changes: Value) -> Vec<u8> {
    let mut object = json!({
        "schema_version": "1", "source": source, "event_id": event_id, "event_type": kind,
        "sent_at": "2024-06-03T09:00:00Z", "tenant_id": T, "application_id": APP,
        "business_key": "K", "material_version": 1
    });
    for (key, value) in changes.as_object().unwrap() {
        object[key] = value.clone();
    }
    object.to_string().into_bytes()
}

fn envelope(source: Source, event_id: &str, kind: &str, changes: Value) -> Envelope {
    let bytes = body(source.as_str(), event_id, kind, changes);
    Envelope::parse(&bytes, source).unwrap_or_else(|error| panic!("{error}"))
}

fn payment(id: &str) -> Envelope {
    envelope(Source::Finance, id, "PAYMENT_CONFIRMED", json!({}))
}

fn signature(id: &str) -> Envelope {
    envelope(Source::Contracts, id, "CONTRACT_SIGNED", json!({}))
}

fn reversal(id: &str, of: &str) -> Envelope {
    let data = json!({"data": {"withdraws": of}});
    envelope(Source::Finance, id, "PAYMENT_REVERSED", data)
}

fn key() -> AppKey {
    AppKey {
        tenant_id: T.into(),
        application_id: APP.into(),
    }
}

fn apps() -> Applications {
    let mut apps = Applications::new();
    apps.insert(key(), Application::active("K", 1));
    apps
}

fn at(entry: u32) -> At {
    At {
        entry,
        received_at: NOW,
    }
}

/// Feeds envelopes in order; returns the verdicts.
fn feed(inbox: &mut Inbox, apps: &Applications, envelopes: &[Envelope]) -> Vec<Verdict> {
    (1..)
        .zip(envelopes)
        .map(|(entry, envelope)| consume(inbox, apps, at(entry), envelope))
        .collect()
}

#[test]
fn withdrawals_and_limits_are_checked_when_the_body_is_parsed() {
    let long = "x".repeat(129);
    let big = "y".repeat(16 * 1024);
    let rows: [(&str, &str, &str, Value, Option<&str>); 9] = [
        (
            "a reversal naming its payment",
            "finance",
            "PAYMENT_REVERSED",
            json!({"data": {"withdraws": "P-1"}}),
            None,
        ),
        (
            "a reversal naming nothing",
            "finance",
            "PAYMENT_REVERSED",
            json!({}),
            Some("type"),
        ),
        (
            "a reversal naming itself",
            "finance",
            "PAYMENT_REVERSED",
            json!({"data": {"withdraws": "E"}}),
            Some("type"),
        ),
        (
            "a reversal naming a number",
            "finance",
            "PAYMENT_REVERSED",
            json!({"data": {"withdraws": 7}}),
            Some("type"),
        ),
        (
            "a confirmation naming a withdrawal",
            "finance",
            "PAYMENT_CONFIRMED",
            json!({"data": {"withdraws": "P-1"}}),
            Some("type"),
        ),
        (
            "finance revoking a contract",
            "finance",
            "CONTRACT_REVOKED",
            json!({"data": {"withdraws": "S-1"}}),
            Some("type"),
        ),
        (
            "a revocation by contracts",
            "contracts",
            "CONTRACT_REVOKED",
            json!({"data": {"withdraws": "S-1"}}),
            None,
        ),
        (
            "an event id of 129 bytes",
            "finance",
            "PAYMENT_CONFIRMED",
            json!({"event_id": long}),
            Some("event_id"),
        ),
        (
            "data over 16 KiB",
            "finance",
            "PAYMENT_CONFIRMED",
            json!({"data": {"note": big}}),
            Some("data"),
        ),
    ];
    let mut failures = Vec::new();
    for (name, source, kind, changes, expected) in rows {
        let source_typed = Source::from_wire(source).unwrap();
        let bytes = body(source, "E", kind, changes);
        let got = match Envelope::parse(&bytes, source_typed) {
            Ok(_) => None,
            Err(EnvelopeError::TypeNotAllowed { .. }) => Some("type"),
            Err(EnvelopeError::Field { field, .. }) => Some(field),
            Err(other) => panic!("{name}: {other}"),
        };
        if got != expected {
            failures.push(format!("{name}: expected {expected:?}, got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn config(keys: Vec<Key>) -> IngressConfig {
    IngressConfig::with_keys(BTreeMap::from([(Source::Finance, keys)]))
}

fn bound(id: &str, secret: &str, tenants: &[&str], window: (Option<i64>, Option<i64>)) -> Key {
    Key {
        id: id.into(),
        tenants: Tenants::Only(tenants.iter().map(|t| (*t).to_owned()).collect()),
        secret: Secret::new(secret),
        not_before: window.0,
        not_after: window.1,
    }
}

fn answer(
    config: &IngressConfig,
    secret: &str,
    tenant: &str,
    now: i64,
) -> (String, Option<String>) {
    let bytes = body(
        "finance",
        "P-1",
        "PAYMENT_CONFIRMED",
        json!({"tenant_id": tenant}),
    );
    let signature = sign(secret.as_bytes(), &bytes);
    let request = Request {
        source: Some("finance"),
        signature: Some(&signature),
        webhook: None,
        body: &bytes,
    };
    let mut apps = apps();
    apps.insert(
        AppKey {
            tenant_id: "other".into(),
            application_id: APP.into(),
        },
        Application::active("OTHER", 4),
    );
    match admit(&request, now, config, &apps) {
        Admission::Accept(admitted) => (
            admitted.response().reason().to_owned(),
            Some(admitted.key_id),
        ),
        Admission::Reject(rejection) => (rejection.reason.as_str().to_owned(), rejection.key_id),
    }
}

#[test]
fn keys_answer_for_their_tenants_inside_their_window_and_name_themselves() {
    let old = "old-finance-key-000000000000";
    let new = "new-finance-key-000000000000";
    let config = config(vec![
        bound("fin-2023", old, &[T], (None, Some(NOW - 1))),
        bound("fin-2024", new, &[T], (Some(NOW - 600), None)),
    ]);
    let rows = [
        ("the new key now", new, T, NOW, "accepted", Some("fin-2024")),
        (
            "the old key after its window",
            old,
            T,
            NOW,
            "bad_signature",
            None,
        ),
        (
            "the old key inside its window",
            old,
            T,
            NOW - 300,
            "accepted",
            Some("fin-2023"),
        ),
        (
            "the new key before its window",
            new,
            T,
            NOW - 601,
            "bad_signature",
            None,
        ),
        // Another tenant's application exists with another business key and version: the
        // answer is the key's alone, never business_key_mismatch.
        (
            "the new key for another tenant",
            new,
            "other",
            NOW,
            "tenant_not_allowed",
            Some("fin-2024"),
        ),
        (
            "a tenant nobody has",
            new,
            "nobody",
            NOW,
            "tenant_not_allowed",
            Some("fin-2024"),
        ),
    ];
    for (name, secret, tenant, now, reason, key_id) in rows {
        let got = answer(&config, secret, tenant, now);
        assert_eq!(
            got,
            (reason.to_owned(), key_id.map(str::to_owned)),
            "{name}"
        );
    }
    let open = IngressConfig::new(BTreeMap::from([(Source::Finance, vec![Secret::new(new)])]));
    assert_eq!(
        answer(&open, new, "nobody", NOW),
        ("quarantined".to_owned(), Some("finance-1".to_owned())),
        "a version-1 key reports for every tenant: an unknown application is quarantined"
    );
    assert_eq!(Reason::TenantNotAllowed.status(), 400);
}

#[test]
fn a_withdrawal_applies_whichever_of_it_and_its_fact_arrives_first() {
    let orders: [[usize; 3]; 6] = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    let all = [payment("P-1"), signature("S-1"), reversal("R-1", "P-1")];
    for order in orders {
        let apps = apps();
        let mut inbox = Inbox::new();
        let envelopes: Vec<Envelope> = order.iter().map(|&i| all[i].clone()).collect();
        let verdicts = feed(&mut inbox, &apps, &envelopes);
        assert_eq!(verdicts, [Verdict::Accepted; 3], "{order:?}");
        assert!(
            !inbox.marked_ready(&key()),
            "{order:?}: the payment is reversed"
        );
    }
    // A second payment makes it READY again; a reversal of a signature by finance does not
    // withdraw the signature (same source only).
    let apps = apps();
    let mut inbox = Inbox::new();
    let stray = reversal("R-2", "S-1");
    feed(
        &mut inbox,
        &apps,
        &[
            all[0].clone(),
            all[1].clone(),
            all[2].clone(),
            payment("P-2"),
            stray,
        ],
    );
    assert!(inbox.marked_ready(&key()));
}

#[test]
fn quarantined_entries_are_decided_when_their_application_is_registered() {
    let mut apps = Applications::new();
    let mut inbox = Inbox::new();
    let verdicts = feed(
        &mut inbox,
        &apps,
        &[payment("P-1"), signature("S-1"), payment("P-1")],
    );
    assert_eq!(verdicts, [Verdict::Quarantined; 3]);
    assert_eq!(inbox.parked().len(), 3);
    assert_eq!(inbox.fact_count(), 0);
    let registration = register(&mut apps, &mut inbox, &key(), "K", 1).unwrap();
    assert_eq!(
        registration.released,
        [
            (1, Verdict::Accepted),
            (2, Verdict::Accepted),
            (3, Verdict::Duplicate)
        ]
    );
    assert!(inbox.parked().is_empty());
    assert!(
        inbox.marked_ready(&key()),
        "READY recomputed in the registration"
    );
    // Registering again: same version is a no-op, newer moves forward, older is refused.
    assert!(register(&mut apps, &mut inbox, &key(), "K", 1).is_ok());
    assert!(matches!(
        register(&mut apps, &mut inbox, &key(), "K2", 1),
        Err(LifecycleError::OtherBusinessKey { .. })
    ));
    assert!(register(&mut apps, &mut inbox, &key(), "K", 2).is_ok());
    assert!(
        !inbox.marked_ready(&key()),
        "version-1 facts do not count for version 2"
    );
    assert!(matches!(
        register(&mut apps, &mut inbox, &key(), "K", 1),
        Err(LifecycleError::Backwards { current: 2, to: 1 })
    ));
    assert_eq!(apps.get(&key()).unwrap().material_version, 2);
}

#[test]
fn quarantine_expires_after_its_period_and_is_never_a_fact() {
    let mut apps = Applications::new();
    let mut inbox = Inbox::new();
    consume(&mut inbox, &apps, at(1), &payment("P-1"));
    let later = At {
        entry: 2,
        received_at: NOW + 3600,
    };
    consume(&mut inbox, &apps, later, &signature("S-1"));
    let period = 72 * 3600;
    assert_eq!(
        expire_quarantine(&mut inbox, NOW + period - 1, period),
        Vec::<u32>::new()
    );
    assert_eq!(expire_quarantine(&mut inbox, NOW + period, period), [1]);
    register(&mut apps, &mut inbox, &key(), "K", 1).unwrap();
    assert_eq!(inbox.parked()[&1].why, Parking::QuarantineExpired);
    assert_eq!(
        inbox.fact_count(),
        1,
        "only the unexpired signature was released"
    );
}

#[test]
fn a_terminated_application_keeps_its_facts_and_is_never_ready() {
    let mut apps = apps();
    let mut inbox = Inbox::new();
    feed(&mut inbox, &apps, &[payment("P-1"), signature("S-1")]);
    assert!(inbox.marked_ready(&key()));
    terminate(
        &mut apps,
        &mut inbox,
        &key(),
        "withdrawn by the customer",
        NOW,
    )
    .unwrap();
    assert!(!inbox.marked_ready(&key()));
    let late = consume(&mut inbox, &apps, at(3), &payment("P-2"));
    assert_eq!(late, Verdict::AfterTermination);
    assert_eq!(inbox.fact_count(), 2);
    assert!(!ready(&inbox, &apps, &key()));
    for refused in [
        terminate(&mut apps, &mut inbox, &key(), "again", NOW).err(),
        upgrade(&mut apps, &mut inbox, &key(), 2).err(),
        register(&mut apps, &mut inbox, &key(), "K", 1).err(),
    ] {
        assert!(
            matches!(refused, Some(LifecycleError::Terminated(_))),
            "{refused:?}"
        );
    }
}

#[test]
fn a_resolution_keeps_one_content_and_both_stay_recorded() {
    let apps = apps();
    let first = payment("P-1");
    let variant = envelope(
        Source::Finance,
        "P-1",
        "PAYMENT_CONFIRMED",
        json!({"data": {"amount": 2}}),
    );
    let other = envelope(
        Source::Finance,
        "P-1",
        "PAYMENT_CONFIRMED",
        json!({"data": {"amount": 3}}),
    );
    let id: FactId = first.fact_id();
    let mut inbox = Inbox::new();
    let verdicts = feed(
        &mut inbox,
        &apps,
        &[first.clone(), signature("S-1"), variant.clone()],
    );
    assert_eq!(verdicts[2], Verdict::Conflict);
    assert!(!inbox.marked_ready(&key()));
    let mut kept_first = inbox.clone();
    assert_eq!(
        resolve(&apps, &mut kept_first, &id, None, "bank statement"),
        Ok(Kept::First)
    );
    assert!(kept_first.marked_ready(&key()));
    assert_eq!(kept_first.fact(&id), Some(&first));
    assert_eq!(
        resolve(&apps, &mut inbox, &id, Some(&variant), "corrected"),
        Ok(Kept::Variant)
    );
    assert_eq!(
        inbox.fact(&id),
        Some(&variant),
        "the variant is the fact now"
    );
    assert_eq!(
        inbox.variants_of(&id).collect::<Vec<_>>(),
        [&first],
        "the first is kept"
    );
    assert!(inbox.marked_ready(&key()));
    assert!(
        resolve(&apps, &mut inbox, &id, None, "twice").is_err(),
        "nothing open"
    );
    // Either recorded content is a duplicate now; a third content opens the conflict again.
    assert_eq!(
        consume(&mut inbox, &apps, at(4), &first),
        Verdict::Duplicate
    );
    assert_eq!(consume(&mut inbox, &apps, at(5), &other), Verdict::Conflict);
    assert!(!inbox.marked_ready(&key()));
}

/// A payment whose `data.amount` is the raw JSON number text `amount`.
fn payment_with_amount(amount: &str) -> Envelope {
    let text = format!(
        r#"{{"schema_version":"1","source":"finance","event_id":"PAY-N","event_type":"PAYMENT_CONFIRMED","sent_at":"2024-06-03T09:00:00Z","tenant_id":"{T}","application_id":"{APP}","business_key":"K","material_version":1,"data":{{"amount":{amount}}}}}"#
    );
    Envelope::parse(text.as_bytes(), Source::Finance).unwrap_or_else(|error| panic!("{error}"))
}

#[test]
fn numbers_are_one_content_when_they_denote_one_value() {
    let apps = apps();
    let cases: &[(&str, &[&str], &[Verdict])] = &[
        (
            "one value, three spellings",
            &["100", "100.0", "1e2"],
            &[Verdict::Accepted, Verdict::Duplicate, Verdict::Duplicate],
        ),
        (
            "a fraction and its exponent form",
            &["0.25", "2.5e-1"],
            &[Verdict::Accepted, Verdict::Duplicate],
        ),
        (
            "minus zero is zero",
            &["0", "-0.0"],
            &[Verdict::Accepted, Verdict::Duplicate],
        ),
        (
            "another value is a conflict",
            &["100", "100.5"],
            &[Verdict::Accepted, Verdict::Conflict],
        ),
        (
            "an integer keeps every digit, beyond 2^53 too",
            &["9007199254740993", "9007199254740992"],
            &[Verdict::Accepted, Verdict::Conflict],
        ),
    ];
    for (what, amounts, verdicts) in cases {
        let envelopes: Vec<Envelope> = amounts
            .iter()
            .map(|amount| payment_with_amount(amount))
            .collect();
        let mut inbox = Inbox::new();
        assert_eq!(feed(&mut inbox, &apps, &envelopes), *verdicts, "{what}");
    }
    assert!(payment_with_amount("1e2")
        .canonical()
        .contains(r#""amount":100"#));
}
