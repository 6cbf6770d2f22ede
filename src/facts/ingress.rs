//! The ingress decision: one HTTP `POST` checked against the facts contract (checks 1 to 9,
//! in order, the first that fails decides) and answered with an [`Admission`].
//!
//! Pure: the receiver's clock is a parameter and appending to the stream (check 10) is the
//! caller's job; [`Response`] carries the answers it gives afterwards (202 or 503).
//!
//! Two signature schemes: `acme` (`X-Acme-Source`, `X-Acme-Signature`: lowercase hex of
//! HMAC-SHA256 over the raw body) and Standard Webhooks (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature`: a space-separated list of `v1,<base64>` HMAC-SHA256 tags over
//! `id.timestamp.body`, keys written `whsec_<base64>`). The Standard Webhooks check is done
//! here with `hmac`, `sha2` and `base64` rather than the `standardwebhooks` crate, whose
//! `verify` reads the wall clock and judges the timestamp before the signature (this
//! module takes the clock as a parameter and answers freshness at check 8, after parsing).

use super::application::{Applications, Mismatch};
use super::envelope::{Envelope, EnvelopeError, Source};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::collections::BTreeMap;
use std::fmt;

/// The default body size limit: 64 KiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;
/// The default freshness window, in seconds either side of the receiver's clock.
pub const DEFAULT_FRESHNESS_SECONDS: i64 = 300;
/// The length of a signature header: lowercase hex of 32 bytes.
pub const SIGNATURE_HEX_LEN: usize = 64;

/// The prefix of a Standard Webhooks secret as written (`whsec_<base64>`).
pub const WHSEC_PREFIX: &str = "whsec_";
/// The shortest Standard Webhooks secret, in decoded bytes.
pub const MIN_WEBHOOK_SECRET_BYTES: usize = 24;

/// One incoming `POST`: the headers the contract reads, and the raw body.
#[derive(Clone, Copy, Debug, Default)]
pub struct Request<'a> {
    /// `X-Acme-Source`, when present. With the Standard Webhooks headers it names the
    /// route's source: only that source's keys are tried.
    pub source: Option<&'a str>,
    /// `X-Acme-Signature`, when present.
    pub signature: Option<&'a str>,
    /// The Standard Webhooks headers, when any of them is present.
    pub webhook: Option<WebhookHeaders<'a>>,
    /// The body exactly as received.
    pub body: &'a [u8],
}

/// The three Standard Webhooks headers as received (each may be missing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WebhookHeaders<'a> {
    /// `webhook-id`: signed, kept as evidence, never a fact identity.
    pub id: Option<&'a str>,
    /// `webhook-timestamp`: Unix seconds, signed; freshness is judged on it.
    pub timestamp: Option<&'a str>,
    /// `webhook-signature`: space-separated `v1,<base64>` tags.
    pub signature: Option<&'a str>,
}

/// The signature scheme a key belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    /// `X-Acme-Signature`: hex HMAC-SHA256 of the body.
    Acme,
    /// Standard Webhooks: base64 HMAC-SHA256 of `id.timestamp.body`.
    StandardWebhooks,
}

/// A source's secret key and the scheme it signs in. Its `Debug` form never shows the key.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Secret {
    scheme: Scheme,
    bytes: Vec<u8>,
}

impl Secret {
    /// An `acme` key from its bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Secret {
        Secret {
            scheme: Scheme::Acme,
            bytes: bytes.into(),
        }
    }

    /// A key as written in a fixture or keys file: `whsec_<base64>` is a Standard Webhooks
    /// key (its secret is the decoded bytes, at least 24 of them); anything else is an
    /// `acme` key whose secret is the text's bytes.
    pub fn from_config(text: &str) -> Result<Secret, String> {
        if text.is_empty() {
            return Err("an empty key signs nothing".into());
        }
        let Some(encoded) = text.strip_prefix(WHSEC_PREFIX) else {
            return Ok(Secret::new(text.as_bytes()));
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|error| format!("a `whsec_` key is base64 after the prefix: {error}"))?;
        if bytes.len() < MIN_WEBHOOK_SECRET_BYTES {
            return Err(format!(
                "a Standard Webhooks secret has at least {MIN_WEBHOOK_SECRET_BYTES} bytes, this one {}",
                bytes.len()
            ));
        }
        Ok(Secret {
            scheme: Scheme::StandardWebhooks,
            bytes,
        })
    }

    /// The scheme it signs in.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({:?}, {} bytes)", self.scheme, self.bytes.len())
    }
}

/// How ingress is set up.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IngressConfig {
    /// Bodies longer than this are refused (check 1).
    pub max_body_bytes: usize,
    /// How far `sent_at` may be from the receiver's clock, past or future (check 8).
    pub freshness_seconds: i64,
    /// Each source's active keys, of either scheme: more than one during a key rotation. A
    /// source without keys of a request's scheme can never pass check 2.
    pub keys: BTreeMap<Source, Vec<Secret>>,
}

impl IngressConfig {
    /// The default limits with these keys.
    pub fn new(keys: BTreeMap<Source, Vec<Secret>>) -> IngressConfig {
        IngressConfig {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            freshness_seconds: DEFAULT_FRESHNESS_SECONDS,
            keys,
        }
    }
}

/// Why ingress refused a request; the serde names are the wire reason strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Check 1: the body is over the size limit (413).
    BodyTooLarge,
    /// Check 2: unknown or missing source, missing signature, or no active key matches.
    BadSignature,
    /// Checks 3 and 5: not one JSON object, or a required field missing or mistyped.
    Malformed,
    /// Check 4: `schema_version` is not `"1"`.
    UnsupportedSchema,
    /// Check 6: the body's source differs from the header's.
    SourceMismatch,
    /// Check 7: the source may not report this event type.
    TypeNotAllowed,
    /// Check 8: `sent_at` (or the signed `webhook-timestamp`) too far from the receiver's
    /// clock.
    NotFresh,
    /// Check 9: no such application in this tenant.
    UnknownApplication,
    /// Check 9: the business key differs.
    BusinessKeyMismatch,
    /// Check 9: the material version is not the current one.
    MaterialVersionMismatch,
}

impl Reason {
    /// Every reason, in check order.
    pub const ALL: [Reason; 10] = [
        Reason::BodyTooLarge,
        Reason::BadSignature,
        Reason::Malformed,
        Reason::UnsupportedSchema,
        Reason::SourceMismatch,
        Reason::TypeNotAllowed,
        Reason::NotFresh,
        Reason::UnknownApplication,
        Reason::BusinessKeyMismatch,
        Reason::MaterialVersionMismatch,
    ];

    /// The HTTP status that goes with it.
    pub fn status(self) -> u16 {
        match self {
            Reason::BodyTooLarge => 413,
            _ => 400,
        }
    }

    /// The wire reason string.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::BodyTooLarge => "body_too_large",
            Reason::BadSignature => "bad_signature",
            Reason::Malformed => "malformed",
            Reason::UnsupportedSchema => "unsupported_schema",
            Reason::SourceMismatch => "source_mismatch",
            Reason::TypeNotAllowed => "type_not_allowed",
            Reason::NotFresh => "not_fresh",
            Reason::UnknownApplication => "unknown_application",
            Reason::BusinessKeyMismatch => "business_key_mismatch",
            Reason::MaterialVersionMismatch => "material_version_mismatch",
        }
    }
}

impl From<Mismatch> for Reason {
    fn from(mismatch: Mismatch) -> Reason {
        match mismatch {
            Mismatch::UnknownApplication => Reason::UnknownApplication,
            Mismatch::BusinessKeyMismatch => Reason::BusinessKeyMismatch,
            Mismatch::MaterialVersionMismatch => Reason::MaterialVersionMismatch,
        }
    }
}

/// A refused request: never enters the stream.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rejection {
    /// The HTTP status (always `reason.status()`).
    pub status: u16,
    /// Why.
    pub reason: Reason,
    /// For people and logs: which field, what was wrong. Never sent to the caller in a
    /// way that reveals another tenant's data (correlation gives no detail).
    pub detail: Option<String>,
}

impl Rejection {
    /// A rejection with the status that goes with `reason`.
    pub fn new(reason: Reason, detail: Option<String>) -> Rejection {
        Rejection {
            status: reason.status(),
            reason,
            detail,
        }
    }

    /// The answer the sender gets.
    pub fn response(&self) -> Response {
        Response::Rejected(self.reason)
    }
}

/// The ingress decision on one request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Admission {
    /// Checks 1 to 9 passed: the caller appends the envelope to the stream, then answers
    /// [`Response::Accepted`] (or [`Response::Unavailable`] when it cannot).
    Accept(Envelope),
    /// A check failed.
    Reject(Rejection),
}

/// The HTTP answer the sender gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Response {
    /// 202: the envelope is in the stream (and only that).
    Accepted,
    /// 503: the stream could not be written; never 202 then.
    Unavailable,
    /// 400 or 413 with the reason.
    Rejected(Reason),
}

impl Response {
    /// 202 `accepted`.
    pub fn accepted() -> Response {
        Response::Accepted
    }

    /// 503 `unavailable`.
    pub fn unavailable() -> Response {
        Response::Unavailable
    }

    /// The HTTP status.
    pub fn status(self) -> u16 {
        match self {
            Response::Accepted => 202,
            Response::Unavailable => 503,
            Response::Rejected(reason) => reason.status(),
        }
    }

    /// The reason word: `accepted`, `unavailable` or the rejection's.
    pub fn reason(self) -> &'static str {
        match self {
            Response::Accepted => "accepted",
            Response::Unavailable => "unavailable",
            Response::Rejected(reason) => reason.as_str(),
        }
    }

    /// The response body: `{"status":"accepted"}` or `{"error":"<reason>"}`.
    pub fn body(self) -> String {
        match self {
            Response::Accepted => r#"{"status":"accepted"}"#.to_owned(),
            other => format!(r#"{{"error":"{}"}}"#, other.reason()),
        }
    }
}

impl Serialize for Response {
    /// As `[status, reason]`, the shape of a fixture's `expect.responses`.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (self.status(), self.reason()).serialize(serializer)
    }
}

/// Runs ingress checks 1 to 9 in order on `request`, received at `now` (Unix seconds).
pub fn admit(
    request: &Request<'_>,
    now: i64,
    config: &IngressConfig,
    apps: &Applications,
) -> Admission {
    match check(request, now, config, apps) {
        Ok(envelope) => Admission::Accept(envelope),
        Err(rejection) => Admission::Reject(rejection),
    }
}

fn check(
    request: &Request<'_>,
    now: i64,
    config: &IngressConfig,
    apps: &Applications,
) -> Result<Envelope, Rejection> {
    let reject = |reason: Reason, detail: String| Rejection::new(reason, Some(detail));
    // 1. Size, before anything is read.
    if request.body.len() > config.max_body_bytes {
        return Err(reject(
            Reason::BodyTooLarge,
            format!(
                "{} bytes, the limit is {}",
                request.body.len(),
                config.max_body_bytes
            ),
        ));
    }
    // 2. Signature over the raw bytes, before any parsing.
    let Signed { source, timestamp } = verify_signature(request, config)
        .map_err(|detail| reject(Reason::BadSignature, detail.to_owned()))?;
    // 3 to 7. The envelope itself.
    let envelope = Envelope::parse(request.body, source).map_err(|error| {
        let reason = match &error {
            EnvelopeError::NotAnObject(_) | EnvelopeError::Field { .. } => Reason::Malformed,
            EnvelopeError::UnsupportedSchema(_) => Reason::UnsupportedSchema,
            EnvelopeError::SourceMismatch { .. } => Reason::SourceMismatch,
            EnvelopeError::TypeNotAllowed { .. } => Reason::TypeNotAllowed,
        };
        reject(reason, error.to_string())
    })?;
    // 8. Freshness, both ways: on the signed timestamp where the scheme has one.
    let (stamp, what) = match timestamp {
        Some(stamp) => (stamp, "webhook-timestamp"),
        None => (envelope.sent_at(), "sent_at"),
    };
    let skew = stamp.saturating_sub(now);
    if skew.unsigned_abs() > config.freshness_seconds.unsigned_abs() {
        let direction = if skew > 0 { "ahead of" } else { "behind" };
        return Err(reject(
            Reason::NotFresh,
            format!(
                "{what} is {} s {direction} the receiver's clock (window {} s)",
                skew.unsigned_abs(),
                config.freshness_seconds
            ),
        ));
    }
    // 9. Correlation, with no detail: the answer must not tell one tenant about another.
    apps.correlate(&envelope)
        .map_err(|mismatch| Rejection::new(mismatch.into(), None))?;
    Ok(envelope)
}

/// What check 2 established: the source, and the signed timestamp when the scheme has one.
struct Signed {
    source: Source,
    timestamp: Option<i64>,
}

/// Check 2, by scheme: Standard Webhooks when any of its headers is present, else `acme`.
/// Headers of both schemes at once are refused: which one was checked must never be in
/// doubt.
fn verify_signature(request: &Request<'_>, config: &IngressConfig) -> Result<Signed, &'static str> {
    match request.webhook {
        Some(webhook) if webhook != WebhookHeaders::default() => {
            if request.signature.is_some() {
                return Err("both X-Acme-Signature and webhook-signature are present");
            }
            verify_standard(request.source, webhook, request.body, config)
        }
        _ => verify_acme(request, config).map(|source| Signed {
            source,
            timestamp: None,
        }),
    }
}

/// The `acme` scheme: the source header names a known source, and the signature header is
/// the lowercase hex HMAC-SHA256 of the body under one of that source's active keys.
fn verify_acme(request: &Request<'_>, config: &IngressConfig) -> Result<Source, &'static str> {
    let name = request.source.ok_or("no X-Acme-Source header")?;
    let source = Source::from_wire(name).ok_or("unknown source")?;
    let signature = request.signature.ok_or("no X-Acme-Signature header")?;
    let well_formed = signature.len() == SIGNATURE_HEX_LEN
        && signature
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte));
    if !well_formed {
        return Err("the signature is not 64 lowercase hex digits");
    }
    let tag = hex::decode(signature).map_err(|_| "the signature is not hex")?;
    let keys = config.keys.get(&source).map(Vec::as_slice).unwrap_or(&[]);
    // Every key is tried (no early exit), each comparison in constant time over the full
    // length.
    let mut matched = false;
    for key in keys.iter().filter(|key| key.scheme == Scheme::Acme) {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&key.bytes).expect("HMAC takes keys of any length");
        mac.update(request.body);
        matched |= mac.verify_slice(&tag).is_ok();
    }
    if matched {
        Ok(source)
    } else {
        Err("no active key of the source matches")
    }
}

/// The most `v1` tags one `webhook-signature` header may carry (rotation needs two or
/// three; a long list only makes a request expensive to check).
pub const MAX_WEBHOOK_SIGNATURES: usize = 8;

/// Standard Webhooks: all three headers, a canonical decimal timestamp, at least one
/// `v1,<base64 of 32 bytes>` tag, and a tag that one active Standard Webhooks key makes
/// over `id.timestamp.body`. The source is the one whose key matched (only the
/// `X-Acme-Source` route's source when that header is sent); keys of two sources matching
/// is refused. Tags of other versions (`v1a`, ...) are ignored.
fn verify_standard(
    route: Option<&str>,
    webhook: WebhookHeaders<'_>,
    body: &[u8],
    config: &IngressConfig,
) -> Result<Signed, &'static str> {
    let id = webhook.id.ok_or("no webhook-id header")?;
    let stamp_text = webhook.timestamp.ok_or("no webhook-timestamp header")?;
    let list = webhook.signature.ok_or("no webhook-signature header")?;
    if id.is_empty() {
        return Err("webhook-id is empty");
    }
    let canonical = !stamp_text.is_empty()
        && stamp_text.len() <= 12
        && stamp_text.bytes().all(|byte| byte.is_ascii_digit())
        && (stamp_text == "0" || !stamp_text.starts_with('0'));
    let timestamp = stamp_text
        .parse::<i64>()
        .ok()
        .filter(|_| canonical)
        .ok_or("webhook-timestamp is not Unix seconds in decimal")?;
    let tags: Vec<Vec<u8>> = list
        .split(' ')
        .filter_map(|item| item.split_once(','))
        .filter(|(version, _)| *version == "v1")
        .filter_map(|(_, tag)| base64::engine::general_purpose::STANDARD.decode(tag).ok())
        .filter(|tag| tag.len() == 32)
        .collect();
    if tags.is_empty() {
        return Err("webhook-signature has no v1 tag of 32 bytes");
    }
    if tags.len() > MAX_WEBHOOK_SIGNATURES {
        return Err("webhook-signature has too many v1 tags");
    }
    let sources: Vec<Source> = match route {
        None => Source::ALL.to_vec(),
        Some(name) => vec![Source::from_wire(name).ok_or("unknown source")?],
    };
    let mut matched: Vec<Source> = Vec::new();
    for source in sources {
        let keys = config.keys.get(&source).map(Vec::as_slice).unwrap_or(&[]);
        let mut hit = false;
        // Every key and every tag is tried, each comparison in constant time.
        for key in keys
            .iter()
            .filter(|key| key.scheme == Scheme::StandardWebhooks)
        {
            let mut mac =
                Hmac::<Sha256>::new_from_slice(&key.bytes).expect("HMAC takes keys of any length");
            mac.update(id.as_bytes());
            mac.update(b".");
            mac.update(stamp_text.as_bytes());
            mac.update(b".");
            mac.update(body);
            for tag in &tags {
                hit |= mac.clone().verify_slice(tag).is_ok();
            }
        }
        if hit {
            matched.push(source);
        }
    }
    match matched.as_slice() {
        [source] => Ok(Signed {
            source: *source,
            timestamp: Some(timestamp),
        }),
        [] => Err("no active Standard Webhooks key matches"),
        _ => Err("Standard Webhooks keys of several sources match"),
    }
}

/// The lowercase hex HMAC-SHA256 of `body` under `key`: what a sender puts in
/// `X-Acme-Signature`.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The `webhook-signature` a Standard Webhooks sender puts on `body` with message id `id`
/// at `timestamp`: `v1,` and the base64 HMAC-SHA256 of `id.timestamp.body` under `secret`
/// (the decoded bytes of `whsec_<base64>`).
pub fn sign_standard(secret: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let tag = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    format!("v1,{tag}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specification's published example.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TIMESTAMP: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn config() -> IngressConfig {
        let key = Secret::from_config(SECRET).unwrap();
        IngressConfig::new(BTreeMap::from([(Source::Finance, vec![key])]))
    }

    fn verify(id: &str, stamp: &str, list: &str, body: &[u8]) -> Result<Signed, &'static str> {
        let webhook = WebhookHeaders {
            id: Some(id),
            timestamp: Some(stamp),
            signature: Some(list),
        };
        verify_standard(None, webhook, body, &config())
    }

    #[test]
    fn the_published_vector_signs_and_verifies() {
        let key = Secret::from_config(SECRET).unwrap();
        assert_eq!(key.scheme(), Scheme::StandardWebhooks);
        assert_eq!(key.bytes.len(), 24);
        assert_eq!(sign_standard(&key.bytes, ID, TIMESTAMP, BODY), SIGNATURE);
        let signed = verify(ID, "1614265330", SIGNATURE, BODY).unwrap();
        assert_eq!(
            (signed.source, signed.timestamp),
            (Source::Finance, Some(TIMESTAMP))
        );
    }

    #[test]
    fn a_list_verifies_when_one_v1_tag_matches() {
        let list = format!("v1a,abc v1,Zm9v {SIGNATURE} v2,{}", &SIGNATURE[3..]);
        assert!(verify(ID, "1614265330", &list, BODY).is_ok());
        let only_other_versions = format!("v1a,{} v2,{}", &SIGNATURE[3..], &SIGNATURE[3..]);
        assert!(verify(ID, "1614265330", &only_other_versions, BODY).is_err());
    }

    #[test]
    fn id_timestamp_and_body_are_all_signed() {
        assert!(verify("msg_other", "1614265330", SIGNATURE, BODY).is_err());
        assert!(verify(ID, "1614265331", SIGNATURE, BODY).is_err());
        assert!(verify(ID, "1614265330", SIGNATURE, br#"{"test": 2432232315}"#).is_err());
        for stamp in [
            "01614265330",
            "+1614265330",
            " 1614265330",
            "1614265330.0",
            "",
        ] {
            assert!(verify(ID, stamp, SIGNATURE, BODY).is_err(), "{stamp:?}");
        }
    }

    #[test]
    fn short_or_bad_webhook_secrets_are_refused() {
        assert!(Secret::from_config("whsec_c2hvcnQ=").is_err(), "5 bytes");
        assert!(Secret::from_config("whsec_not base64!").is_err());
        assert!(Secret::from_config("").is_err());
        let acme = Secret::from_config("finance-demo-secret-2024").unwrap();
        assert_eq!(acme.scheme(), Scheme::Acme);
    }
}
