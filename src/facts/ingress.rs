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
/// The shortest secret of either scheme, in bytes (a Standard Webhooks secret: decoded
/// bytes). The Standard Webhooks lower bound, applied to `acme` keys too (contract v2).
pub const MIN_SECRET_BYTES: usize = 24;
/// The old name of [`MIN_SECRET_BYTES`].
pub const MIN_WEBHOOK_SECRET_BYTES: usize = MIN_SECRET_BYTES;

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
            if text.len() < MIN_SECRET_BYTES {
                return Err(format!(
                    "a key has at least {MIN_SECRET_BYTES} bytes, this one {}",
                    text.len()
                ));
            }
            return Ok(Secret::new(text.as_bytes()));
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|error| format!("a `whsec_` key is base64 after the prefix: {error}"))?;
        if bytes.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "a Standard Webhooks secret has at least {MIN_SECRET_BYTES} bytes, this one {}",
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

    /// The secret bytes (what a test sender signs with).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({:?}, {} bytes)", self.scheme, self.bytes.len())
    }
}

/// Which tenants a key may report for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Tenants {
    /// Every tenant (a version-1 `secrets` entry reads so).
    All,
    /// These tenants only.
    Only(std::collections::BTreeSet<String>),
}

impl Tenants {
    /// Whether `tenant` is among them.
    pub fn allow(&self, tenant: &str) -> bool {
        match self {
            Tenants::All => true,
            Tenants::Only(tenants) => tenants.contains(tenant),
        }
    }
}

/// A key of one source (contract v2): an id the receipt records, the tenants it may report
/// for, its secret, and the window in which it is active (rotation).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// Its id, unique among the keys.
    pub id: String,
    /// The tenants it may report for.
    pub tenants: Tenants,
    /// The secret and its scheme.
    pub secret: Secret,
    /// Not active before this time (Unix seconds), when set.
    pub not_before: Option<i64>,
    /// Not active after this time (Unix seconds), when set.
    pub not_after: Option<i64>,
}

impl Key {
    /// A key for every tenant, always active (how a version-1 secret reads).
    pub fn unbound(id: impl Into<String>, secret: Secret) -> Key {
        Key {
            id: id.into(),
            tenants: Tenants::All,
            secret,
            not_before: None,
            not_after: None,
        }
    }

    /// Whether it is active at `now`: inside its window, both ends included.
    pub fn active_at(&self, now: i64) -> bool {
        self.not_before.is_none_or(|start| start <= now)
            && self.not_after.is_none_or(|end| now <= end)
    }
}

/// How ingress is set up.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IngressConfig {
    /// Bodies longer than this are refused (check 1).
    pub max_body_bytes: usize,
    /// How far `sent_at` may be from the receiver's clock, past or future (check 8).
    pub freshness_seconds: i64,
    /// Each source's keys, of either scheme: more than one during a key rotation. Only the
    /// keys active at the receiver's clock are tried at check 2.
    pub keys: BTreeMap<Source, Vec<Key>>,
}

impl IngressConfig {
    /// The default limits with version-1 secrets: each reads as a key for every tenant,
    /// always active, named `<source>-<n>` (n from 1, in list order).
    pub fn new(secrets: BTreeMap<Source, Vec<Secret>>) -> IngressConfig {
        let keys = secrets
            .into_iter()
            .map(|(source, secrets)| {
                let keys = secrets
                    .into_iter()
                    .enumerate()
                    .map(|(n, secret)| Key::unbound(format!("{source}-{}", n + 1), secret))
                    .collect();
                (source, keys)
            })
            .collect();
        IngressConfig::with_keys(keys)
    }

    /// The default limits with these keys.
    pub fn with_keys(keys: BTreeMap<Source, Vec<Key>>) -> IngressConfig {
        IngressConfig {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            freshness_seconds: DEFAULT_FRESHNESS_SECONDS,
            keys,
        }
    }

    /// The key with this id.
    pub fn key(&self, id: &str) -> Option<&Key> {
        self.keys.values().flatten().find(|key| key.id == id)
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
    /// Check 9: the matching key may not report for the envelope's tenant.
    TenantNotAllowed,
    /// Check 10: the business key differs.
    BusinessKeyMismatch,
    /// Check 10: the material version is not the current one.
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
        Reason::TenantNotAllowed,
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
            Reason::TenantNotAllowed => "tenant_not_allowed",
            Reason::BusinessKeyMismatch => "business_key_mismatch",
            Reason::MaterialVersionMismatch => "material_version_mismatch",
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
    /// The id of the key whose signature matched, once check 2 has passed (for the receipt).
    pub key_id: Option<String>,
}

impl Rejection {
    /// A rejection with the status that goes with `reason`.
    pub fn new(reason: Reason, detail: Option<String>) -> Rejection {
        Rejection {
            status: reason.status(),
            reason,
            detail,
            key_id: None,
        }
    }

    /// The answer the sender gets.
    pub fn response(&self) -> Response {
        Response::Rejected(self.reason)
    }
}

/// A request that passed ingress: the caller appends it to the stream.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Admitted {
    /// The envelope.
    pub envelope: Envelope,
    /// The id of the key whose signature matched.
    pub key_id: String,
    /// Whether its application is unknown in its tenant: appended all the same, answered
    /// `202 quarantined` (check 10).
    pub quarantined: bool,
}

impl Admitted {
    /// The answer once the entry is in the stream.
    pub fn response(&self) -> Response {
        if self.quarantined {
            Response::Quarantined
        } else {
            Response::Accepted
        }
    }
}

/// The ingress decision on one request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Admission {
    /// Checks 1 to 10 passed: the caller appends the envelope to the stream, then answers
    /// [`Admitted::response`] (or [`Response::Unavailable`] when it cannot).
    Accept(Admitted),
    /// A check failed.
    Reject(Rejection),
}

/// The HTTP answer the sender gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Response {
    /// 202: the envelope is in the stream (and only that).
    Accepted,
    /// 202: the envelope is in the stream, its application is not known yet (it is kept
    /// and correlated again when the application is registered).
    Quarantined,
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
            Response::Accepted | Response::Quarantined => 202,
            Response::Unavailable => 503,
            Response::Rejected(reason) => reason.status(),
        }
    }

    /// The reason word: `accepted`, `unavailable` or the rejection's.
    pub fn reason(self) -> &'static str {
        match self {
            Response::Accepted => "accepted",
            Response::Quarantined => "quarantined",
            Response::Unavailable => "unavailable",
            Response::Rejected(reason) => reason.as_str(),
        }
    }

    /// Whether the envelope entered the stream (202).
    pub fn is_admitted(self) -> bool {
        matches!(self, Response::Accepted | Response::Quarantined)
    }

    /// The response body: `{"status":"accepted"}`, `{"status":"quarantined"}` or
    /// `{"error":"<reason>"}`.
    pub fn body(self) -> String {
        match self {
            Response::Accepted => r#"{"status":"accepted"}"#.to_owned(),
            Response::Quarantined => r#"{"status":"quarantined"}"#.to_owned(),
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

/// Runs ingress checks 1 to 10 in order on `request`, received at `now` (Unix seconds).
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
) -> Result<Admitted, Rejection> {
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
    // 2. Signature over the raw bytes, before any parsing, by a key active now.
    let Signed {
        source,
        timestamp,
        key,
    } = verify_signature(request, now, config)
        .map_err(|detail| reject(Reason::BadSignature, detail.to_owned()))?;
    let with_key = |mut rejection: Rejection| {
        rejection.key_id = Some(key.id.clone());
        rejection
    };
    // 3 to 7. The envelope itself.
    let envelope = Envelope::parse(request.body, source).map_err(|error| {
        let reason = match &error {
            EnvelopeError::NotAnObject(_) | EnvelopeError::Field { .. } => Reason::Malformed,
            EnvelopeError::UnsupportedSchema(_) => Reason::UnsupportedSchema,
            EnvelopeError::SourceMismatch { .. } => Reason::SourceMismatch,
            EnvelopeError::TypeNotAllowed { .. } => Reason::TypeNotAllowed,
        };
        with_key(reject(reason, error.to_string()))
    })?;
    // 8. Freshness, both ways: on the signed timestamp where the scheme has one.
    fresh(timestamp, &envelope, now, config)
        .map_err(|detail| with_key(reject(Reason::NotFresh, detail)))?;
    // 9. Tenant: the key alone decides, before any application is looked up.
    if !key.tenants.allow(envelope.tenant_id()) {
        return Err(with_key(reject(
            Reason::TenantNotAllowed,
            format!("key `{}` may not report for this tenant", key.id),
        )));
    }
    // 10. Correlation within the tenant, with no detail; an unknown application is
    // quarantined, a terminated one is left to the consumer.
    let quarantined = match apps.correlate(&envelope) {
        Ok(_) => false,
        Err(Mismatch::UnknownApplication) => true,
        Err(Mismatch::BusinessKeyMismatch) => {
            return Err(with_key(Rejection::new(Reason::BusinessKeyMismatch, None)))
        }
        Err(Mismatch::MaterialVersionMismatch) => {
            return Err(with_key(Rejection::new(
                Reason::MaterialVersionMismatch,
                None,
            )))
        }
    };
    Ok(Admitted {
        envelope,
        key_id: key.id.clone(),
        quarantined,
    })
}

/// Check 8: the signed timestamp (or `sent_at`) within the window either side of `now`.
fn fresh(
    timestamp: Option<i64>,
    envelope: &Envelope,
    now: i64,
    config: &IngressConfig,
) -> Result<(), String> {
    let (stamp, what) = match timestamp {
        Some(stamp) => (stamp, "webhook-timestamp"),
        None => (envelope.sent_at(), "sent_at"),
    };
    let skew = stamp.saturating_sub(now);
    if skew.unsigned_abs() <= config.freshness_seconds.unsigned_abs() {
        return Ok(());
    }
    let direction = if skew > 0 { "ahead of" } else { "behind" };
    Err(format!(
        "{what} is {} s {direction} the receiver's clock (window {} s)",
        skew.unsigned_abs(),
        config.freshness_seconds
    ))
}

/// What check 2 established: the source, the key that matched, and the signed timestamp
/// when the scheme has one.
struct Signed<'c> {
    source: Source,
    timestamp: Option<i64>,
    key: &'c Key,
}

/// Check 2, by scheme: Standard Webhooks when any of its headers is present, else `acme`.
/// Headers of both schemes at once are refused: which one was checked must never be in
/// doubt. Only keys active at `now` are tried.
fn verify_signature<'c>(
    request: &Request<'_>,
    now: i64,
    config: &'c IngressConfig,
) -> Result<Signed<'c>, &'static str> {
    match request.webhook {
        Some(webhook) if webhook != WebhookHeaders::default() => {
            if request.signature.is_some() {
                return Err("both X-Acme-Signature and webhook-signature are present");
            }
            verify_standard(request.source, webhook, request.body, now, config)
        }
        _ => verify_acme(request, now, config),
    }
}

/// The active keys of `source` in `scheme`.
fn active_keys(
    config: &IngressConfig,
    source: Source,
    scheme: Scheme,
    now: i64,
) -> impl Iterator<Item = &Key> {
    config
        .keys
        .get(&source)
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .filter(move |key| key.secret.scheme == scheme && key.active_at(now))
}

/// The `acme` scheme: the source header names a known source, and the signature header is
/// the lowercase hex HMAC-SHA256 of the body under one of that source's active keys.
fn verify_acme<'c>(
    request: &Request<'_>,
    now: i64,
    config: &'c IngressConfig,
) -> Result<Signed<'c>, &'static str> {
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
    // Every active key is tried (no early exit), each comparison in constant time over the
    // full length; the first that matches is the one recorded.
    let mut matched = None;
    for key in active_keys(config, source, Scheme::Acme, now) {
        let mut mac = Hmac::<Sha256>::new_from_slice(&key.secret.bytes)
            .expect("HMAC takes keys of any length");
        mac.update(request.body);
        if mac.verify_slice(&tag).is_ok() && matched.is_none() {
            matched = Some(key);
        }
    }
    let key = matched.ok_or("no active key of the source matches")?;
    Ok(Signed {
        source,
        timestamp: None,
        key,
    })
}

/// The most `v1` tags one `webhook-signature` header may carry (rotation needs two or
/// three; a long list only makes a request expensive to check).
pub const MAX_WEBHOOK_SIGNATURES: usize = 8;

/// Standard Webhooks: all three headers, a canonical decimal timestamp, at least one
/// `v1,<base64 of 32 bytes>` tag, and a tag that one active Standard Webhooks key makes
/// over `id.timestamp.body`. The source is the one whose key matched (only the
/// `X-Acme-Source` route's source when that header is sent); keys of two sources matching
/// is refused. Tags of other versions (`v1a`, ...) are ignored.
fn verify_standard<'c>(
    route: Option<&str>,
    webhook: WebhookHeaders<'_>,
    body: &[u8],
    now: i64,
    config: &'c IngressConfig,
) -> Result<Signed<'c>, &'static str> {
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
    let mut matched: Vec<(Source, &Key)> = Vec::new();
    for source in sources {
        let mut hit = None;
        // Every key and every tag is tried, each comparison in constant time.
        for key in active_keys(config, source, Scheme::StandardWebhooks, now) {
            let mut mac = Hmac::<Sha256>::new_from_slice(&key.secret.bytes)
                .expect("HMAC takes keys of any length");
            mac.update(id.as_bytes());
            mac.update(b".");
            mac.update(stamp_text.as_bytes());
            mac.update(b".");
            mac.update(body);
            for tag in &tags {
                if mac.clone().verify_slice(tag).is_ok() && hit.is_none() {
                    hit = Some(key);
                }
            }
        }
        if let Some(key) = hit {
            matched.push((source, key));
        }
    }
    match matched.as_slice() {
        [(source, key)] => Ok(Signed {
            source: *source,
            timestamp: Some(timestamp),
            key,
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

    fn verify(id: &str, stamp: &str, list: &str, body: &[u8]) -> Result<Source, &'static str> {
        let webhook = WebhookHeaders {
            id: Some(id),
            timestamp: Some(stamp),
            signature: Some(list),
        };
        let config = config();
        verify_standard(None, webhook, body, TIMESTAMP, &config).map(|signed| {
            assert_eq!(signed.key.id, "finance-1");
            signed.source
        })
    }

    #[test]
    fn the_published_vector_signs_and_verifies() {
        let key = Secret::from_config(SECRET).unwrap();
        assert_eq!(key.scheme(), Scheme::StandardWebhooks);
        assert_eq!(key.bytes.len(), 24);
        assert_eq!(sign_standard(&key.bytes, ID, TIMESTAMP, BODY), SIGNATURE);
        assert_eq!(
            verify(ID, "1614265330", SIGNATURE, BODY),
            Ok(Source::Finance)
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
        assert!(
            Secret::from_config("finance-demo-secret-202").is_err(),
            "23 bytes"
        );
    }
}
