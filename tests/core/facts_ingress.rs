//! The facts ingress decision over crafted requests: every check, the order in which they
//! apply (the first failing check decides), and the signature edge cases. Signatures are
//! computed here with `hmac`/`sha2`, independently of the crate's own signing helper.

use arrival::facts::application::{AppKey, Application, Applications};
use arrival::facts::envelope::Source;
use arrival::facts::ingress::{admit, Admission, IngressConfig, Reason, Request, Response, Secret};
use hmac::{Hmac, Mac};
use serde_json::{json, Map, Value};
use sha2::Sha256;
use std::collections::BTreeMap;

/// 2024-06-03T09:00:00Z.
const NOW: i64 = 1_717_405_200;
const FINANCE_OLD: &str = "finance-key-2023";
const FINANCE_NEW: &str = "finance-key-2024";
const CONTRACTS: &str = "contracts-key-2024";
const APP: &str = "3f6b2c1e-8d4a-4f7b-9c2e-5a1d0e7f9b34";

fn sign(key: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn config() -> IngressConfig {
    let mut keys = BTreeMap::new();
    keys.insert(
        Source::Finance,
        vec![Secret::new(FINANCE_OLD), Secret::new(FINANCE_NEW)],
    );
    keys.insert(Source::Contracts, vec![Secret::new(CONTRACTS)]);
    IngressConfig::new(keys)
}

fn apps() -> Applications {
    let mut apps = Applications::new();
    apps.insert(
        AppKey {
            tenant_id: "xinghe-demo".into(),
            application_id: APP.into(),
        },
        Application::active("APP-EVENT-014", 1),
    );
    apps.insert(
        AppKey {
            tenant_id: "other-tenant".into(),
            application_id: "9a0b7c55-0000-4000-8000-000000000001".into(),
        },
        Application::active("APP-OTHER-1", 1),
    );
    apps
}

/// A valid payment envelope as a JSON object.
fn payment() -> Map<String, Value> {
    let Value::Object(object) = json!({
        "schema_version": "1",
        "source": "finance",
        "event_id": "PAY-1",
        "event_type": "PAYMENT_CONFIRMED",
        "sent_at": "2024-06-03T09:00:00Z",
        "tenant_id": "xinghe-demo",
        "application_id": APP,
        "business_key": "APP-EVENT-014",
        "material_version": 1,
        "data": {"amount": "120000.00", "currency": "CNY"}
    }) else {
        unreachable!()
    };
    object
}

fn signature() -> Map<String, Value> {
    let mut object = payment();
    object.insert("source".into(), json!("contracts"));
    object.insert("event_id".into(), json!("SIG-1"));
    object.insert("event_type".into(), json!("CONTRACT_SIGNED"));
    object.insert("data".into(), json!({"contract_no": "HT-1"}));
    object
}

/// A payment with fields changed (`null` removes a field).
fn payment_with(changes: Value) -> Vec<u8> {
    let mut object = payment();
    for (key, value) in changes.as_object().unwrap() {
        if value.is_null() {
            object.remove(key);
        } else {
            object.insert(key.clone(), value.clone());
        }
    }
    Value::Object(object).to_string().into_bytes()
}

/// A request as crafted by a test case.
struct Crafted {
    source: Option<String>,
    signature: Option<String>,
    body: Vec<u8>,
}

/// A finance request signed with the first finance key.
fn finance(body: Vec<u8>) -> Crafted {
    Crafted {
        source: Some("finance".into()),
        signature: Some(sign(FINANCE_OLD, &body)),
        body,
    }
}

fn decide(crafted: &Crafted) -> Admission {
    let request = Request {
        source: crafted.source.as_deref(),
        signature: crafted.signature.as_deref(),
        webhook: None,
        body: &crafted.body,
    };
    admit(&request, NOW, &config(), &apps())
}

fn reason(admission: &Admission) -> Option<Reason> {
    match admission {
        Admission::Accept(_) => None,
        Admission::Reject(rejection) => {
            assert_eq!(rejection.status, rejection.reason.status());
            Some(rejection.reason)
        }
    }
}

/// Nested arrays inside `data` so that the whole body has `levels` levels.
fn nested_body(levels: usize) -> Vec<u8> {
    // The envelope is level 1 and `data` level 2; the arrays are levels 3 and on.
    let arrays = levels - 2;
    let nest: Value = serde_json::from_str(&("[".repeat(arrays) + &"]".repeat(arrays))).unwrap();
    let mut object = payment();
    let mut data = object["data"].as_object().unwrap().clone();
    data.insert("deep".into(), nest);
    object.insert("data".into(), Value::Object(data));
    Value::Object(object).to_string().into_bytes()
}

#[test]
fn every_check_in_order() {
    use Reason::*;
    let upper = |text: String| text.to_uppercase();
    let valid = Value::Object(payment()).to_string().into_bytes();
    let cases: Vec<(&str, Crafted, Option<Reason>)> = vec![
        ("valid payment, first key", finance(valid.clone()), None),
        (
            "valid payment, second key of the rotation",
            Crafted {
                signature: Some(sign(FINANCE_NEW, &valid)),
                ..finance(valid.clone())
            },
            None,
        ),
        (
            "valid signature fact",
            {
                let body = Value::Object(signature()).to_string().into_bytes();
                Crafted {
                    source: Some("contracts".into()),
                    signature: Some(sign(CONTRACTS, &body)),
                    body,
                }
            },
            None,
        ),
        // 1. size
        (
            "body of exactly 64 KiB",
            finance({
                let mut body = valid.clone();
                body.resize(64 * 1024, b' ');
                body
            }),
            None,
        ),
        (
            "body one byte over 64 KiB",
            finance({
                let mut body = valid.clone();
                body.resize(64 * 1024 + 1, b' ');
                body
            }),
            Some(BodyTooLarge),
        ),
        (
            "too large and unsigned: size first",
            Crafted {
                source: None,
                signature: None,
                body: vec![b'x'; 70_000],
            },
            Some(BodyTooLarge),
        ),
        // 2. signature
        (
            "no source header",
            Crafted {
                source: None,
                ..finance(valid.clone())
            },
            Some(BadSignature),
        ),
        (
            "unknown source header",
            Crafted {
                source: Some("hr".into()),
                ..finance(valid.clone())
            },
            Some(BadSignature),
        ),
        (
            "source header in other case",
            Crafted {
                source: Some("Finance".into()),
                ..finance(valid.clone())
            },
            Some(BadSignature),
        ),
        (
            "no signature header",
            Crafted {
                signature: None,
                ..finance(valid.clone())
            },
            Some(BadSignature),
        ),
        (
            "empty signature header",
            Crafted {
                signature: Some(String::new()),
                ..finance(valid.clone())
            },
            Some(BadSignature),
        ),
        (
            "wrong key",
            Crafted {
                signature: Some(sign("not-the-key", &valid)),
                ..finance(valid.clone())
            },
            Some(BadSignature),
        ),
        (
            "the other source's key",
            Crafted {
                signature: Some(sign(CONTRACTS, &valid)),
                ..finance(valid.clone())
            },
            Some(BadSignature),
        ),
        (
            "uppercase hex of the right signature",
            Crafted {
                signature: Some(upper(sign(FINANCE_OLD, &valid))),
                ..finance(valid.clone())
            },
            Some(BadSignature),
        ),
        (
            "signature truncated by one digit",
            Crafted {
                signature: Some(sign(FINANCE_OLD, &valid)[..63].to_owned()),
                ..finance(valid.clone())
            },
            Some(BadSignature),
        ),
        (
            "signature truncated to half",
            Crafted {
                signature: Some(sign(FINANCE_OLD, &valid)[..32].to_owned()),
                ..finance(valid.clone())
            },
            Some(BadSignature),
        ),
        (
            "signature with a trailing newline",
            Crafted {
                signature: Some(sign(FINANCE_OLD, &valid) + "\n"),
                ..finance(valid.clone())
            },
            Some(BadSignature),
        ),
        (
            "signature not hex",
            Crafted {
                signature: Some("z".repeat(64)),
                ..finance(valid.clone())
            },
            Some(BadSignature),
        ),
        (
            "body changed by one byte after signing",
            {
                let mut crafted = finance(valid.clone());
                let at = crafted.body.iter().position(|&b| b == b'1').unwrap();
                crafted.body[at] = b'2';
                crafted
            },
            Some(BadSignature),
        ),
        (
            "bad signature over a malformed body: signature first",
            Crafted {
                signature: Some(sign("not-the-key", b"{not json")),
                ..finance(b"{not json".to_vec())
            },
            Some(BadSignature),
        ),
        // 3. one JSON object
        ("not JSON", finance(b"{not json".to_vec()), Some(Malformed)),
        (
            "invalid UTF-8",
            finance({
                let mut body = valid.clone();
                let at = body.iter().position(|&b| b == b'P').unwrap();
                body[at] = 0xff;
                body
            }),
            Some(Malformed),
        ),
        (
            "trailing content",
            finance([valid.clone(), b" x".to_vec()].concat()),
            Some(Malformed),
        ),
        (
            "two objects",
            finance([valid.clone(), b"{}".to_vec()].concat()),
            Some(Malformed),
        ),
        ("an array", finance(b"[1,2]".to_vec()), Some(Malformed)),
        ("nesting of 32 levels", finance(nested_body(32)), None),
        (
            "nesting of 33 levels",
            finance(nested_body(33)),
            Some(Malformed),
        ),
        (
            "a key twice",
            finance(
                String::from_utf8(valid.clone())
                    .unwrap()
                    .replacen('{', "{\"event_id\":\"X\",", 1)
                    .into_bytes(),
            ),
            Some(Malformed),
        ),
        // 4. schema version
        (
            "schema version 2",
            finance(payment_with(json!({"schema_version": "2"}))),
            Some(UnsupportedSchema),
        ),
        (
            "schema version as a number",
            finance(payment_with(json!({"schema_version": 1}))),
            Some(UnsupportedSchema),
        ),
        (
            "schema version 2 and a field missing: schema first",
            finance(payment_with(
                json!({"schema_version": "2", "event_id": null}),
            )),
            Some(UnsupportedSchema),
        ),
        // 5. fields
        (
            "event_id missing",
            finance(payment_with(json!({"event_id": null}))),
            Some(Malformed),
        ),
        (
            "event_id a number",
            finance(payment_with(json!({"event_id": 14}))),
            Some(Malformed),
        ),
        (
            "material_version a string",
            finance(payment_with(json!({"material_version": "1"}))),
            Some(Malformed),
        ),
        (
            "material_version 0",
            finance(payment_with(json!({"material_version": 0}))),
            Some(Malformed),
        ),
        (
            "sent_at not RFC 3339",
            finance(payment_with(json!({"sent_at": "03/06/2024 09:00"}))),
            Some(Malformed),
        ),
        (
            "data not an object",
            finance(payment_with(json!({"data": [1]}))),
            Some(Malformed),
        ),
        (
            "a field missing and the source wrong: fields first",
            finance(payment_with(
                json!({"source": "contracts", "tenant_id": null}),
            )),
            Some(Malformed),
        ),
        // 6. source
        (
            "body says contracts, header finance",
            finance(payment_with(json!({"source": "contracts"}))),
            Some(SourceMismatch),
        ),
        (
            "body names an unknown source",
            finance(payment_with(json!({"source": "hr"}))),
            Some(SourceMismatch),
        ),
        (
            "source and type both wrong: source first",
            finance(payment_with(
                json!({"source": "contracts", "event_type": "CONTRACT_SIGNED"}),
            )),
            Some(SourceMismatch),
        ),
        // 7. type
        (
            "finance reports a signature",
            finance(payment_with(json!({"event_type": "CONTRACT_SIGNED"}))),
            Some(TypeNotAllowed),
        ),
        (
            "an unknown event type",
            finance(payment_with(json!({"event_type": "PAYMENT_REVERSED"}))),
            Some(TypeNotAllowed),
        ),
        (
            "type wrong and stale: type first",
            finance(payment_with(
                json!({"event_type": "CONTRACT_SIGNED", "sent_at": "2024-06-03T08:00:00Z"}),
            )),
            Some(TypeNotAllowed),
        ),
        // 8. freshness
        (
            "sent 300 s ago",
            finance(payment_with(json!({"sent_at": "2024-06-03T08:55:00Z"}))),
            None,
        ),
        (
            "sent 301 s ago",
            finance(payment_with(json!({"sent_at": "2024-06-03T08:54:59Z"}))),
            Some(NotFresh),
        ),
        (
            "sent 300 s ahead",
            finance(payment_with(json!({"sent_at": "2024-06-03T09:05:00Z"}))),
            None,
        ),
        (
            "sent 301 s ahead",
            finance(payment_with(json!({"sent_at": "2024-06-03T09:05:01Z"}))),
            Some(NotFresh),
        ),
        (
            "same instant with an offset",
            finance(payment_with(
                json!({"sent_at": "2024-06-03T17:00:00+08:00"}),
            )),
            None,
        ),
        (
            "stale and unknown application: freshness first",
            finance(payment_with(
                json!({"sent_at": "2024-06-02T09:00:00Z", "tenant_id": "nobody"}),
            )),
            Some(NotFresh),
        ),
        // 10. correlation (an unknown application is quarantined, not refused: see below)
        (
            "business key differs",
            finance(payment_with(json!({"business_key": "APP-EVENT-015"}))),
            Some(BusinessKeyMismatch),
        ),
        (
            "material version 2",
            finance(payment_with(json!({"material_version": 2}))),
            Some(MaterialVersionMismatch),
        ),
        (
            "business key and version differ: key first",
            finance(payment_with(
                json!({"business_key": "APP-EVENT-015", "material_version": 2}),
            )),
            Some(BusinessKeyMismatch),
        ),
    ];
    let mut failures = Vec::new();
    for (name, crafted, expected) in &cases {
        let got = reason(&decide(crafted));
        if got != *expected {
            failures.push(format!("{name}: expected {expected:?}, got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn another_tenants_application_answers_exactly_like_an_unknown_one() {
    let other_tenant = decide(&finance(payment_with(json!({"tenant_id": "other-tenant"}))));
    let nowhere = decide(&finance(payment_with(
        json!({"tenant_id": "no-such-tenant", "application_id": "nothing"}),
    )));
    let (Admission::Accept(a), Admission::Accept(b)) = (&other_tenant, &nowhere) else {
        panic!("both must be quarantined: {other_tenant:?} {nowhere:?}");
    };
    assert!(a.quarantined && b.quarantined);
    assert_eq!(a.response(), b.response(), "the answers must not differ");
    assert_eq!(a.response().status(), 202);
    assert_eq!(a.response().body(), r#"{"status":"quarantined"}"#);
    let known = decide(&finance(Value::Object(payment()).to_string().into()));
    let Admission::Accept(known) = known else {
        panic!("valid payment refused");
    };
    assert!(!known.quarantined, "a known application is not quarantined");
}

#[test]
fn an_accepted_request_carries_the_typed_envelope() {
    let Admission::Accept(admitted) = decide(&finance(Value::Object(payment()).to_string().into()))
    else {
        panic!("valid payment refused");
    };
    assert_eq!(admitted.key_id, "finance-1");
    let envelope = admitted.envelope;
    assert_eq!(envelope.source(), Source::Finance);
    assert_eq!(envelope.event_id(), "PAY-1");
    assert_eq!(envelope.sent_at(), NOW);
    assert_eq!(envelope.material_version(), 1);
    assert_eq!(Response::accepted().status(), 202);
    assert_eq!(Response::accepted().body(), r#"{"status":"accepted"}"#);
    assert_eq!(Response::unavailable().status(), 503);
    assert_eq!(Response::unavailable().body(), r#"{"error":"unavailable"}"#);
}

#[test]
fn a_source_without_keys_accepts_nothing() {
    let mut config = config();
    config.keys.remove(&Source::Finance);
    let crafted = finance(Value::Object(payment()).to_string().into_bytes());
    let request = Request {
        source: crafted.source.as_deref(),
        signature: crafted.signature.as_deref(),
        webhook: None,
        body: &crafted.body,
    };
    let admission = admit(&request, NOW, &config, &apps());
    assert_eq!(reason(&admission), Some(Reason::BadSignature));
}

#[test]
fn rejections_carry_their_status() {
    let too_large = finance(vec![b' '; 64 * 1024 + 1]);
    let Admission::Reject(rejection) = decide(&too_large) else {
        panic!("accepted")
    };
    assert_eq!(
        (rejection.status, rejection.reason),
        (413, Reason::BodyTooLarge)
    );
    assert_eq!(rejection.response().body(), r#"{"error":"body_too_large"}"#);
    let bad = decide(&Crafted {
        signature: None,
        ..finance(b"{}".to_vec())
    });
    let Admission::Reject(rejection) = bad else {
        panic!("accepted")
    };
    assert_eq!(
        (rejection.status, rejection.reason),
        (400, Reason::BadSignature)
    );
}

#[test]
fn a_receiver_without_the_freshness_check_accepts_a_replayed_request() {
    // The mutant `accept-stale-signature`: a correctly signed payment captured an hour ago
    // and sent again. The contract's ingress answers not_fresh; the mutant lets it in.
    use arrival::facts::mutants::{admit_under, Mutant};
    let captured = finance(payment_with(json!({"sent_at": "2024-06-03T08:00:00Z"})));
    let request = Request {
        source: captured.source.as_deref(),
        signature: captured.signature.as_deref(),
        webhook: None,
        body: &captured.body,
    };
    let spec = admit_under(None, &request, NOW, &config(), &apps());
    assert_eq!(reason(&spec), Some(Reason::NotFresh));
    let stale = Some(Mutant::AcceptStaleSignature);
    let mutant = admit_under(stale, &request, NOW, &config(), &apps());
    assert_eq!(reason(&mutant), None, "the replayed request is accepted");
}
