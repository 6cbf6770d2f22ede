//! Fuzz target `ingress`: arbitrary headers and body bytes through every ingress check of
//! `facts::ingress::admit`, under both signature schemes.
//!
//! The input is lines: the receiver's clock (Unix seconds; anything else takes the body's
//! `sent_at`, or 2024-06-03T09:00:01Z), `X-Acme-Source`, `X-Acme-Signature`, `webhook-id`,
//! `webhook-timestamp`, `webhook-signature` (a line `-` is a header not sent, a line that
//! is not UTF-8 too), a line of choice bytes, then the body (every byte after the seventh
//! newline). Each input is admitted three times: as sent (almost always `bad_signature`,
//! unless it came from a signed seed), re-signed `acme` with one of the keys, and re-signed
//! Standard Webhooks with one of the keys at a timestamp near the clock, so the checks
//! after the signature (3 to 10) see arbitrary bodies too. The choice bytes pick the keys,
//! the timestamp's offset and a facts mutant.
//!
//! After each admission the answer is checked against the contract, independently of the
//! code that made it: an accepted request is within the size limit, signed by the key its
//! answer names (recomputed here), that key is active at the clock and may report for the
//! tenant, the envelope is the body's, the signed time is fresh, and the application
//! correlates or is unknown (quarantined); a refusal carries its reason's status, names a
//! key exactly when the signature had passed, gives no detail for a correlation mismatch,
//! and answers a body of JSON naming the reason. The same admission twice gives the same
//! answer, a re-signed request under an active key never fails at the signature, and the
//! receipt of the body stays within its bounds. A mutant's admission must not panic.

#![no_main]

use arrival::facts::application::{AppKey, Application, Applications};
use arrival::facts::envelope::{Envelope, Source};
use arrival::facts::ingress::{
    admit, sign, sign_standard, Admission, IngressConfig, Key, Reason, Request, Scheme, Secret,
    Tenants, WebhookHeaders,
};
use arrival::facts::mutants::{admit_under, Mutant};
use arrival::harness::timestamp::parse_rfc3339;
use arrival::pipeline::receipts::{Receipt, MAX_TEXT_BYTES};
use libfuzzer_sys::fuzz_target;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

/// A small body limit, so inputs of `-max_len=4096` reach check 1 both ways.
const MAX_BODY_BYTES: usize = 2048;
/// 2024-06-03T09:00:01Z, the fixtures' first receive time.
const DEFAULT_NOW: i64 = 1_717_405_201;

fuzz_target!(|data: &[u8]| {
    let (world, keys) = world();
    let input = Input::read(data);
    let now = input.now();
    let as_sent = input.request();
    check(world, &as_sent, now);
    let mutant = Mutant::ALL[usize::from(input.choice(3)) % Mutant::ALL.len()];
    let _ = admit_under(Some(mutant), &as_sent, now, &world.config, &world.apps);

    let acme = &keys.acme[usize::from(input.choice(0)) % keys.acme.len()];
    let (source, key) = (acme.0, &acme.1);
    let signature = sign(key.secret.bytes(), input.body);
    let resigned = Request {
        source: Some(source.as_str()),
        signature: Some(&signature),
        webhook: None,
        body: input.body,
    };
    let answer = check(world, &resigned, now);
    let fits = input.body.len() <= MAX_BODY_BYTES;
    if fits && key.active_at(now) {
        assert!(
            !refused_at_signature(&answer),
            "{answer:?} for a good acme signature"
        );
    }

    let standard = &keys.standard[usize::from(input.choice(1)) % keys.standard.len()];
    let (source, key) = (standard.0, &standard.1);
    let stamp = now.saturating_add(i64::from(input.choice(2) as i8) * 5);
    let stamp_text = stamp.to_string();
    let id = input.headers[2].unwrap_or("msg_fuzz");
    let tag = sign_standard(key.secret.bytes(), id, stamp, input.body);
    let resigned = Request {
        source: input.headers[0],
        signature: None,
        webhook: Some(WebhookHeaders {
            id: Some(id),
            timestamp: Some(&stamp_text),
            signature: Some(&tag),
        }),
        body: input.body,
    };
    let answer = check(world, &resigned, now);
    let route_fits = input.headers[0].is_none_or(|route| route == source.as_str());
    // The contract's timestamp: Unix seconds, at most 12 decimal digits, not negative.
    let canonical = stamp >= 0 && stamp_text.len() <= 12;
    if fits && key.active_at(now) && !id.is_empty() && canonical && route_fits {
        assert!(
            !refused_at_signature(&answer),
            "{answer:?} for a good webhook signature"
        );
    }
    if input.headers[0].is_some_and(|route| Source::from_wire(route).is_none()) {
        assert!(
            refused_at_signature(&answer) || !fits,
            "an unknown route: {answer:?}"
        );
    }
});

/// What ingress is set up with: keys of both schemes (with tenants and windows), the
/// fixtures' applications.
struct World {
    config: IngressConfig,
    apps: Applications,
}

/// The keys a request is re-signed with, by scheme.
struct SigningKeys {
    acme: Vec<(Source, Key)>,
    standard: Vec<(Source, Key)>,
}

fn world() -> (&'static World, &'static SigningKeys) {
    static WORLD: OnceLock<(World, SigningKeys)> = OnceLock::new();
    let (world, keys) = WORLD.get_or_init(|| {
        let time = |text| parse_rfc3339(text).expect("a time");
        let key =
            |id: &str, secret: &str, tenants: &[&str], window: (Option<i64>, Option<i64>)| Key {
                id: id.into(),
                tenants: if tenants.is_empty() {
                    Tenants::All
                } else {
                    Tenants::Only(
                        tenants
                            .iter()
                            .map(|t| t.to_string())
                            .collect::<BTreeSet<_>>(),
                    )
                },
                secret: Secret::from_config(secret).expect("a valid key"),
                not_before: window.0,
                not_after: window.1,
            };
        let finance = vec![
            key(
                "fin-demo",
                "finance-demo-secret-2024",
                &["xinghe-demo", "other-t"],
                (None, None),
            ),
            key(
                "fin-rotated",
                "finance-demo-secret-2025-rotated",
                &["xinghe-demo"],
                (
                    Some(time("2024-06-03T09:25:00Z")),
                    Some(time("2024-12-31T00:00:00Z")),
                ),
            ),
            key(
                "fin-beiming",
                "beiming-finance-secret-0001",
                &["beiming-labs"],
                (None, None),
            ),
            key(
                "fin-other",
                "finance-other-secret-2024x",
                &["other-tenant"],
                (None, Some(time("2024-06-03T09:30:00Z"))),
            ),
            key(
                "fin-wh",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                &[],
                (None, None),
            ),
        ];
        let contracts = vec![
            key("con-demo", "contracts-demo-secret-2024", &[], (None, None)),
            key(
                "con-other",
                "contracts-other-secret-24x",
                &["other-tenant"],
                (None, None),
            ),
            // base64 of "contracts-standard-webhooks-key!" (32 bytes)
            key(
                "con-wh",
                "whsec_Y29udHJhY3RzLXN0YW5kYXJkLXdlYmhvb2tzLWtleSE=",
                &["xinghe-demo"],
                (Some(time("2024-01-01T00:00:00Z")), None),
            ),
        ];
        let mut config = IngressConfig::with_keys(BTreeMap::from([
            (Source::Finance, finance),
            (Source::Contracts, contracts),
        ]));
        config.max_body_bytes = MAX_BODY_BYTES;
        let mut apps = Applications::new();
        for (tenant, app, business_key, version) in [
            (
                "xinghe-demo",
                "3f6b2c1e-8d4a-4f7b-9c2e-5a1d0e7f9b34",
                "APP-EVENT-014",
                1,
            ),
            (
                "xinghe-demo",
                "5e4d3c2b-1a09-4f8e-b7d6-c5b4a3928170",
                "APP-EVENT-017",
                1,
            ),
            (
                "xinghe-demo",
                "9f8e7d6c-5b4a-4392-a1b0-c9d8e7f6a5b4",
                "APP-EVENT-016",
                2,
            ),
            (
                "beiming-labs",
                "0a9b8c7d-6e5f-4a3b-9c2d-1e0f2a3b4c5d",
                "BM-7",
                1,
            ),
            (
                "other-tenant",
                "9a0b7c55-0000-4000-8000-000000000001",
                "APP-OTHER-1",
                1,
            ),
            ("xinghe-demo", "app-A", "BK-A", 9_007_199_254_740_993),
            ("xinghe-demo", "app-B", "BK-B", 1),
        ] {
            let key = AppKey {
                tenant_id: tenant.into(),
                application_id: app.into(),
            };
            apps.insert(key, Application::active(business_key, version));
        }
        let mut keys = SigningKeys {
            acme: Vec::new(),
            standard: Vec::new(),
        };
        for (source, list) in &config.keys {
            for key in list {
                match key.secret.scheme() {
                    Scheme::Acme => keys.acme.push((*source, key.clone())),
                    Scheme::StandardWebhooks => keys.standard.push((*source, key.clone())),
                }
            }
        }
        (World { config, apps }, keys)
    });
    (world, keys)
}

/// One input, cut into its lines.
struct Input<'a> {
    now: Option<i64>,
    /// `X-Acme-Source`, `X-Acme-Signature`, `webhook-id`, `webhook-timestamp`,
    /// `webhook-signature`.
    headers: [Option<&'a str>; 5],
    choices: &'a [u8],
    body: &'a [u8],
}

impl<'a> Input<'a> {
    fn read(data: &'a [u8]) -> Input<'a> {
        let mut rest = data;
        let mut line = || -> &'a [u8] {
            match rest.iter().position(|&byte| byte == b'\n') {
                Some(end) => {
                    let (line, tail) = rest.split_at(end);
                    rest = &tail[1..];
                    line
                }
                None => std::mem::take(&mut rest),
            }
        };
        let now = std::str::from_utf8(line())
            .ok()
            .and_then(|text| text.parse().ok());
        let mut header = || match std::str::from_utf8(line()) {
            Ok("-") | Err(_) => None,
            Ok(text) => Some(text),
        };
        let headers = [header(), header(), header(), header(), header()];
        let choices = line();
        Input {
            now,
            headers,
            choices,
            body: rest,
        }
    }

    /// The clock: the input's, else the body's `sent_at` when it is an envelope.
    fn now(&self) -> i64 {
        self.now.unwrap_or_else(|| {
            Source::ALL
                .iter()
                .find_map(|source| Envelope::parse(self.body, *source).ok())
                .map_or(DEFAULT_NOW, |envelope| envelope.sent_at())
        })
    }

    fn choice(&self, at: usize) -> u8 {
        self.choices.get(at).copied().unwrap_or(0)
    }

    fn request(&self) -> Request<'a> {
        let webhook = WebhookHeaders {
            id: self.headers[2],
            timestamp: self.headers[3],
            signature: self.headers[4],
        };
        Request {
            source: self.headers[0],
            signature: self.headers[1],
            webhook: (webhook != WebhookHeaders::default()).then_some(webhook),
            body: self.body,
        }
    }
}

fn refused_at_signature(answer: &Admission) -> bool {
    matches!(answer, Admission::Reject(r) if matches!(r.reason, Reason::BadSignature | Reason::BodyTooLarge))
}

/// Admits `request` twice (the answers must agree), checks the answer against the
/// contract and the body's receipt against its bounds; returns the answer.
fn check(world: &World, request: &Request<'_>, now: i64) -> Admission {
    let answer = admit(request, now, &world.config, &world.apps);
    assert_eq!(
        answer,
        admit(request, now, &world.config, &world.apps),
        "not deterministic"
    );
    assert_eq!(
        answer,
        admit_under(None, request, now, &world.config, &world.apps),
        "admit_under(None) is admit"
    );
    let too_large = request.body.len() > world.config.max_body_bytes;
    match &answer {
        Admission::Accept(admitted) => {
            assert!(!too_large, "accepted over the size limit");
            let key = world
                .config
                .key(&admitted.key_id)
                .expect("a key of the config");
            let source = world
                .config
                .keys
                .iter()
                .find(|(_, keys)| keys.iter().any(|k| k.id == key.id))
                .map(|(source, _)| *source)
                .expect("the key's source");
            assert!(
                key.active_at(now),
                "accepted under a key not active at the clock"
            );
            let stamp =
                signed_by(request, key).expect("accepted without the named key's signature");
            let envelope =
                Envelope::parse(request.body, source).expect("accepted an invalid envelope");
            assert_eq!(
                envelope, admitted.envelope,
                "the envelope is not the body's"
            );
            assert_eq!(envelope.source(), source);
            assert!(
                key.tenants.allow(envelope.tenant_id()),
                "a key outside its tenants"
            );
            let stamp = stamp.unwrap_or(envelope.sent_at());
            let window = world.config.freshness_seconds;
            assert!(
                stamp.abs_diff(now) <= window.unsigned_abs(),
                "accepted a stale request"
            );
            let correlated = world.apps.correlate(&envelope);
            assert_eq!(admitted.quarantined, correlated.is_err(), "{correlated:?}");
            assert_eq!(admitted.response().status(), 202);
        }
        Admission::Reject(rejection) => {
            assert_eq!(rejection.status, rejection.reason.status());
            assert_eq!(too_large, rejection.reason == Reason::BodyTooLarge);
            let signed = !matches!(
                rejection.reason,
                Reason::BodyTooLarge | Reason::BadSignature
            );
            assert_eq!(signed, rejection.key_id.is_some(), "{rejection:?}");
            if let Some(id) = &rejection.key_id {
                let key = world.config.key(id).expect("a key of the config");
                assert!(
                    signed_by(request, key).is_some(),
                    "names a key that did not sign"
                );
            }
            if matches!(
                rejection.reason,
                Reason::BusinessKeyMismatch | Reason::MaterialVersionMismatch
            ) {
                assert_eq!(rejection.detail, None, "correlation must not leak detail");
            }
            let body: serde_json::Value =
                serde_json::from_str(&rejection.response().body()).expect("a JSON answer");
            assert_eq!(body["error"], rejection.reason.as_str());
        }
    }
    let receipt = Receipt::for_body(request.body);
    for text in [
        &receipt.tenant_id,
        &receipt.application_id,
        &receipt.event_id,
    ] {
        let length = text.as_deref().map_or(0, str::len);
        assert!(
            length <= MAX_TEXT_BYTES + 32,
            "a receipt field of {length} bytes"
        );
    }
    answer
}

/// Whether `key` signed `request` in its scheme, recomputed here: `Some` with the signed
/// timestamp (`None` inside for `acme`, which has none).
fn signed_by(request: &Request<'_>, key: &Key) -> Option<Option<i64>> {
    match key.secret.scheme() {
        Scheme::Acme => {
            (request.signature? == sign(key.secret.bytes(), request.body)).then_some(None)
        }
        Scheme::StandardWebhooks => {
            let webhook = request.webhook?;
            let stamp_text = webhook.timestamp?;
            let stamp: i64 = stamp_text.parse().ok()?;
            let expected = sign_standard(key.secret.bytes(), webhook.id?, stamp, request.body);
            webhook
                .signature?
                .split(' ')
                .any(|tag| tag == expected)
                .then_some(Some(stamp))
        }
    }
}
