//! Standard Webhooks beside `acme` at facts ingress: requests signed by the reference
//! implementation (the `standardwebhooks` crate, used here only as the sender) are admitted
//! by the pure ingress decision; freshness is judged on the signed `webhook-timestamp`, so a
//! retry keeps its body byte for byte; the headers' edge cases are `bad_signature`.

use arrival::facts::application::{AppKey, Application, Applications};
use arrival::facts::envelope::Source;
use arrival::facts::ingress::{
    admit, Admission, IngressConfig, Key, Reason, Request, Secret, WebhookHeaders,
};
use serde_json::json;
use standardwebhooks::Webhook;
use std::collections::BTreeMap;

/// 2024-06-03T09:00:00Z.
const NOW: i64 = 1_717_405_200;
const FINANCE_KEY: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// 32 bytes of `f`, base64.
const FINANCE_NEXT: &str = "whsec_ZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmY=";
const CONTRACTS_KEY: &str = "whsec_Y2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2M=";
const ACME_FINANCE: &str = "finance-demo-secret-2024";
const APP: &str = "3f6b2c1e-8d4a-4f7b-9c2e-5a1d0e7f9b34";

fn config(finance: &[&str]) -> IngressConfig {
    let keys = |list: &[&str]| {
        list.iter()
            .map(|key| Secret::from_config(key).unwrap())
            .collect()
    };
    IngressConfig::new(BTreeMap::from([
        (Source::Finance, keys(finance)),
        (Source::Contracts, keys(&[CONTRACTS_KEY])),
    ]))
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
    apps
}

fn payment(sent_at: &str) -> Vec<u8> {
    json!({
        "schema_version": "1",
        "source": "finance",
        "event_id": "PAY-014",
        "event_type": "PAYMENT_CONFIRMED",
        "sent_at": sent_at,
        "tenant_id": "xinghe-demo",
        "application_id": APP,
        "business_key": "APP-EVENT-014",
        "material_version": 1,
        "data": {"amount": "120000.00", "currency": "CNY"}
    })
    .to_string()
    .into_bytes()
}

/// What a Standard Webhooks sender puts on the wire, signed by the reference library.
struct Sent {
    id: String,
    timestamp: String,
    signature: String,
    body: Vec<u8>,
}

fn send(secret: &str, id: &str, timestamp: i64, body: Vec<u8>) -> Sent {
    let signature = Webhook::new(secret)
        .unwrap()
        .sign(id, timestamp, &body)
        .unwrap();
    Sent {
        id: id.into(),
        timestamp: timestamp.to_string(),
        signature,
        body,
    }
}

fn decide_with(sent: &Sent, route: Option<&str>, now: i64, config: &IngressConfig) -> Admission {
    let request = Request {
        source: route,
        signature: None,
        webhook: Some(WebhookHeaders {
            id: Some(&sent.id),
            timestamp: Some(&sent.timestamp),
            signature: Some(&sent.signature),
        }),
        body: &sent.body,
    };
    admit(&request, now, config, &apps())
}

fn reason(admission: &Admission) -> Option<Reason> {
    match admission {
        Admission::Accept(_) => None,
        Admission::Reject(rejection) => Some(rejection.reason),
    }
}

#[test]
fn a_request_signed_by_a_standard_webhooks_sender_is_admitted() {
    let sent = send(FINANCE_KEY, "msg_2Xy", NOW, payment("2024-06-03T09:00:00Z"));
    let Admission::Accept(admitted) = decide_with(&sent, None, NOW, &config(&[FINANCE_KEY])) else {
        panic!("refused")
    };
    let envelope = admitted.envelope;
    assert_eq!(envelope.source(), Source::Finance, "the key's source");
    assert_eq!(envelope.event_id(), "PAY-014", "the identity is the body's");
    // The route (X-Acme-Source) narrows the keys tried; the right route still matches.
    let routed = decide_with(&sent, Some("finance"), NOW, &config(&[FINANCE_KEY]));
    assert_eq!(reason(&routed), None);
}

#[test]
fn freshness_is_judged_on_the_signed_timestamp() {
    // A retry two days later: the same bytes (sent_at included) with a new timestamp and a
    // new signature. Standard Webhooks senders retry this way, so it is fresh.
    let body = payment("2024-06-01T09:00:00Z");
    let retry = send(FINANCE_KEY, "msg_2Xy", NOW, body.clone());
    assert_eq!(
        reason(&decide_with(&retry, None, NOW, &config(&[FINANCE_KEY]))),
        None
    );
    // The same request held back 301 s: not fresh, whatever sent_at says.
    let late = send(
        FINANCE_KEY,
        "msg_2Xy",
        NOW - 301,
        payment("2024-06-03T09:00:00Z"),
    );
    let admission = decide_with(&late, None, NOW, &config(&[FINANCE_KEY]));
    assert_eq!(reason(&admission), Some(Reason::NotFresh));
    let Admission::Reject(rejection) = admission else {
        unreachable!()
    };
    assert!(
        rejection.detail.unwrap().contains("webhook-timestamp"),
        "the detail names what was judged"
    );
    let edge = send(FINANCE_KEY, "msg_2Xy", NOW - 300, body);
    assert_eq!(
        reason(&decide_with(&edge, None, NOW, &config(&[FINANCE_KEY]))),
        None,
        "300 s passes, as with sent_at"
    );
}

#[test]
fn a_rotation_list_verifies_with_either_key() {
    let body = payment("2024-06-03T09:00:00Z");
    let old = send(FINANCE_KEY, "msg_r", NOW, body.clone());
    let new = send(FINANCE_NEXT, "msg_r", NOW, body.clone());
    let both = Sent {
        signature: format!("{} {}", old.signature, new.signature),
        ..send(FINANCE_KEY, "msg_r", NOW, body)
    };
    for keys in [
        &[FINANCE_KEY][..],
        &[FINANCE_NEXT],
        &[FINANCE_NEXT, FINANCE_KEY],
    ] {
        assert_eq!(reason(&decide_with(&both, None, NOW, &config(keys))), None);
    }
    assert_eq!(
        reason(&decide_with(&new, None, NOW, &config(&[FINANCE_KEY]))),
        Some(Reason::BadSignature),
        "a key that is not active signs nothing"
    );
}

#[test]
fn the_headers_edge_cases_are_bad_signatures() {
    let body = payment("2024-06-03T09:00:00Z");
    let good = send(FINANCE_KEY, "msg_e", NOW, body.clone());
    let config = config(&[FINANCE_KEY]);
    let bad = |sent: &Sent, route: Option<&str>| reason(&decide_with(sent, route, NOW, &config));
    // Another route's keys are not tried.
    assert_eq!(bad(&good, Some("contracts")), Some(Reason::BadSignature));
    assert_eq!(bad(&good, Some("hr")), Some(Reason::BadSignature));
    // The id is signed.
    let other_id = Sent {
        id: "msg_f".into(),
        ..send(FINANCE_KEY, "msg_e", NOW, body.clone())
    };
    assert_eq!(bad(&other_id, None), Some(Reason::BadSignature));
    // The timestamp is signed, and written as plain decimal.
    for timestamp in [format!("{}", NOW + 1), format!("0{NOW}"), String::new()] {
        let moved = Sent {
            timestamp,
            ..send(FINANCE_KEY, "msg_e", NOW, body.clone())
        };
        assert_eq!(bad(&moved, None), Some(Reason::BadSignature));
    }
    // Another body under the same headers.
    let changed = Sent {
        body: payment("2024-06-03T09:00:01Z"),
        ..send(FINANCE_KEY, "msg_e", NOW, body.clone())
    };
    assert_eq!(bad(&changed, None), Some(Reason::BadSignature));
    // Only a tag of another version.
    let v1a = Sent {
        signature: good.signature.replacen("v1,", "v1a,", 1),
        ..send(FINANCE_KEY, "msg_e", NOW, body.clone())
    };
    assert_eq!(bad(&v1a, None), Some(Reason::BadSignature));
    // A header missing.
    let request = Request {
        source: None,
        signature: None,
        webhook: Some(WebhookHeaders {
            id: Some("msg_e"),
            timestamp: None,
            signature: Some(&good.signature),
        }),
        body: &body,
    };
    assert_eq!(
        reason(&admit(&request, NOW, &config, &apps())),
        Some(Reason::BadSignature)
    );
    // Both schemes at once.
    let acme = arrival::facts::ingress::sign(ACME_FINANCE.as_bytes(), &body);
    let request = Request {
        source: Some("finance"),
        signature: Some(&acme),
        webhook: Some(WebhookHeaders {
            id: Some("msg_e"),
            timestamp: Some(&good.timestamp),
            signature: Some(&good.signature),
        }),
        body: &body,
    };
    let mut mixed = config.clone();
    mixed
        .keys
        .get_mut(&Source::Finance)
        .unwrap()
        .push(Key::unbound("finance-acme", Secret::new(ACME_FINANCE)));
    assert_eq!(
        reason(&admit(&request, NOW, &mixed, &apps())),
        Some(Reason::BadSignature)
    );
    // The same request without the Standard Webhooks headers passes as acme.
    let acme_only = Request {
        webhook: None,
        ..request
    };
    assert_eq!(reason(&admit(&acme_only, NOW, &mixed, &apps())), None);
}

#[test]
fn a_key_signs_only_in_its_own_scheme() {
    let body = payment("2024-06-03T09:00:00Z");
    // An acme request whose "secret" is the text of a whsec key: the key's secret is its
    // decoded bytes and it signs only Standard Webhooks requests.
    let acme = arrival::facts::ingress::sign(FINANCE_KEY.as_bytes(), &body);
    let request = Request {
        source: Some("finance"),
        signature: Some(&acme),
        webhook: None,
        body: &body,
    };
    assert_eq!(
        reason(&admit(&request, NOW, &config(&[FINANCE_KEY]), &apps())),
        Some(Reason::BadSignature)
    );
    // A Standard Webhooks request under an acme key's bytes.
    let mut acme_keys = config(&[]);
    acme_keys.keys.insert(
        Source::Finance,
        vec![Key::unbound("finance-acme", Secret::new(ACME_FINANCE))],
    );
    let sent = send(
        &format!(
            "whsec_{}",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ACME_FINANCE)
        ),
        "msg_k",
        NOW,
        body,
    );
    assert_eq!(
        reason(&decide_with(&sent, None, NOW, &acme_keys)),
        Some(Reason::BadSignature)
    );
}

#[test]
fn the_signature_is_checked_before_the_body_is_read() {
    // Not UTF-8: the reference library will not sign it, so sign it here; the signature
    // passes and the body is malformed (check 3), never a signature failure.
    let body = b"\xff\xfe not json".to_vec();
    let secret = Secret::from_config(FINANCE_KEY).unwrap();
    let _ = secret;
    let key = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        &FINANCE_KEY["whsec_".len()..],
    )
    .unwrap();
    let signature = arrival::facts::ingress::sign_standard(&key, "msg_u", NOW, &body);
    let sent = Sent {
        id: "msg_u".into(),
        timestamp: NOW.to_string(),
        signature,
        body,
    };
    assert_eq!(
        reason(&decide_with(&sent, None, NOW, &config(&[FINANCE_KEY]))),
        Some(Reason::Malformed)
    );
}
