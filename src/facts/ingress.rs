//! The ingress decision: one HTTP `POST` checked against the facts contract (checks 1 to 9,
//! in order, the first that fails decides) and answered with an [`Admission`].
//!
//! Pure: the receiver's clock is a parameter and appending to the stream (check 10) is the
//! caller's job; [`Response`] carries the answers it gives afterwards (202 or 503).

use super::application::{Applications, Mismatch};
use super::envelope::{Envelope, EnvelopeError, Source};
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

/// One incoming `POST`: the two headers the contract reads, and the raw body.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// `X-Acme-Source`, when present.
    pub source: Option<&'a str>,
    /// `X-Acme-Signature`, when present.
    pub signature: Option<&'a str>,
    /// The body exactly as received.
    pub body: &'a [u8],
}

/// A source's secret key. Its `Debug` form never shows the key.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// A key from its bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Secret {
        Secret(bytes.into())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// How ingress is set up.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IngressConfig {
    /// Bodies longer than this are refused (check 1).
    pub max_body_bytes: usize,
    /// How far `sent_at` may be from the receiver's clock, past or future (check 8).
    pub freshness_seconds: i64,
    /// Each source's active keys: more than one during a key rotation. A source without
    /// keys can never pass check 2.
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
    /// Check 8: `sent_at` too far from the receiver's clock.
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
    let source = verify_signature(request, config)
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
    // 8. Freshness, both ways.
    let skew = envelope.sent_at().saturating_sub(now);
    if skew.unsigned_abs() > config.freshness_seconds.unsigned_abs() {
        let direction = if skew > 0 { "ahead of" } else { "behind" };
        return Err(reject(
            Reason::NotFresh,
            format!(
                "sent_at is {} s {direction} the receiver's clock (window {} s)",
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

/// Check 2: the source header names a known source, and the signature header is the
/// lowercase hex HMAC-SHA256 of the body under one of that source's active keys.
fn verify_signature(request: &Request<'_>, config: &IngressConfig) -> Result<Source, &'static str> {
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
    for key in keys {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&key.0).expect("HMAC takes keys of any length");
        mac.update(request.body);
        matched |= mac.verify_slice(&tag).is_ok();
    }
    if matched {
        Ok(source)
    } else {
        Err("no active key of the source matches")
    }
}

/// The lowercase hex HMAC-SHA256 of `body` under `key`: what a sender puts in
/// `X-Acme-Signature`.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}
