//! The facts envelope: raw request bytes parsed once into a typed [`Envelope`] with its
//! canonical content, or a [`EnvelopeError`] that says which ingress check failed and why.
//!
//! Parsing follows the order of the ingress checks 3 to 7 (one JSON object, schema version,
//! required fields, source, allowed type), so the first problem found is the one ingress
//! must answer with.

use crate::harness::timestamp::parse_rfc3339;
use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

/// How deep objects and arrays may nest; the envelope object itself is level 1.
pub const MAX_DEPTH: usize = 32;
/// The longest id (`event_id`, `tenant_id`, `application_id`, `business_key`,
/// `data.withdraws`), in bytes.
pub const MAX_ID_BYTES: usize = 128;
/// The largest `data` object, in bytes of its canonical text.
pub const MAX_DATA_BYTES: usize = 16 * 1024;

/// A system that reports facts, each with the one fact type it may report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Finance: reports that a payment arrived.
    Finance,
    /// Contracts: reports that the contract was signed.
    Contracts,
}

impl Source {
    /// Every source.
    pub const ALL: [Source; 2] = [Source::Finance, Source::Contracts];

    /// The kind of fact this source reports (and may withdraw).
    pub fn kind(self) -> FactKind {
        match self {
            Source::Finance => FactKind::Payment,
            Source::Contracts => FactKind::Signature,
        }
    }

    /// The event type that makes a fact of this source's kind.
    pub fn fact_type(self) -> FactType {
        match self {
            Source::Finance => FactType::PaymentConfirmed,
            Source::Contracts => FactType::ContractSigned,
        }
    }

    /// The event type that withdraws one of this source's facts.
    pub fn withdrawal_type(self) -> FactType {
        match self {
            Source::Finance => FactType::PaymentReversed,
            Source::Contracts => FactType::ContractRevoked,
        }
    }

    /// The name on the wire (`finance`, `contracts`).
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Finance => "finance",
            Source::Contracts => "contracts",
        }
    }

    /// The source with this wire name (exact, lowercase).
    pub fn from_wire(name: &str) -> Option<Source> {
        Source::ALL
            .into_iter()
            .find(|source| source.as_str() == name)
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What READY needs one of: a payment and a signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FactKind {
    /// Reported by finance.
    Payment,
    /// Reported by contracts.
    Signature,
}

impl FactKind {
    /// Both kinds.
    pub const ALL: [FactKind; 2] = [FactKind::Payment, FactKind::Signature];

    /// The word in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            FactKind::Payment => "payment",
            FactKind::Signature => "signature",
        }
    }
}

/// An event type a source may report (contract v2): each source confirms a fact of its
/// kind and may withdraw one, naming it in `data.withdraws`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FactType {
    /// The payment arrived (finance).
    PaymentConfirmed,
    /// A payment was reversed (finance): withdraws a `PAYMENT_CONFIRMED`.
    PaymentReversed,
    /// The contract was signed (contracts).
    ContractSigned,
    /// A signature was revoked (contracts): withdraws a `CONTRACT_SIGNED`.
    ContractRevoked,
}

impl FactType {
    /// Every event type.
    pub const ALL: [FactType; 4] = [
        FactType::PaymentConfirmed,
        FactType::PaymentReversed,
        FactType::ContractSigned,
        FactType::ContractRevoked,
    ];

    /// The name on the wire (`PAYMENT_CONFIRMED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            FactType::PaymentConfirmed => "PAYMENT_CONFIRMED",
            FactType::PaymentReversed => "PAYMENT_REVERSED",
            FactType::ContractSigned => "CONTRACT_SIGNED",
            FactType::ContractRevoked => "CONTRACT_REVOKED",
        }
    }

    /// The only source that may report it.
    pub fn source(self) -> Source {
        match self {
            FactType::PaymentConfirmed | FactType::PaymentReversed => Source::Finance,
            FactType::ContractSigned | FactType::ContractRevoked => Source::Contracts,
        }
    }

    /// Whether it withdraws a fact rather than making one.
    pub fn is_withdrawal(self) -> bool {
        matches!(self, FactType::PaymentReversed | FactType::ContractRevoked)
    }

    /// The type with this wire name.
    pub fn from_wire(name: &str) -> Option<FactType> {
        FactType::ALL.into_iter().find(|kind| kind.as_str() == name)
    }
}

/// The identity of a fact (contract v2): `(tenant_id, source, event_id)`. Two sources may
/// use the same event id, and so may two tenants: a source's ids are unique only within
/// the tenant it reports for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FactId {
    /// The tenant it is reported for.
    pub tenant_id: String,
    /// Who reported it.
    pub source: Source,
    /// The source's own id of the event.
    pub event_id: String,
}

/// A valid envelope. Its event type is one its source may report, a withdrawal always
/// names the event it withdraws (never itself), its ids are 1 to [`MAX_ID_BYTES`] bytes,
/// its `data` at most [`MAX_DATA_BYTES`], its material version is at least 1, [`Envelope::canonical`] is the whole
/// parsed body written with sorted keys and no whitespace, and [`Envelope::content`] is the
/// same without `sent_at` (contract v2: `sent_at` is delivery metadata, not content).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Envelope {
    source: Source,
    event_id: String,
    sent_at: i64,
    tenant_id: String,
    application_id: String,
    business_key: String,
    material_version: u64,
    event_type: FactType,
    withdraws: Option<String>,
    data: Option<String>,
    canonical: String,
    content: String,
}

/// Why a body is not a valid envelope, one variant per ingress check (3 to 7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvelopeError {
    /// Check 3: not one JSON object (bad UTF-8, bad JSON, trailing content, too deep).
    NotAnObject(String),
    /// Check 4: `schema_version` is not `"1"` (what it was, as JSON).
    UnsupportedSchema(String),
    /// Check 5: a required field missing or of the wrong type.
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// Check 6: the body names another source than the one it is delivered for.
    SourceMismatch {
        /// The source it is delivered for.
        expected: Source,
        /// The body's `source`, as written.
        found: String,
    },
    /// Check 7: the source may not report this event type.
    TypeNotAllowed {
        /// The source.
        source: Source,
        /// The body's `event_type`, as written.
        event_type: String,
        /// Why not.
        why: String,
    },
}

impl fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvelopeError::NotAnObject(problem) => write!(f, "not one JSON object: {problem}"),
            EnvelopeError::UnsupportedSchema(found) => {
                write!(f, "schema_version {found} is not supported (only \"1\")")
            }
            EnvelopeError::Field { field, problem } => write!(f, "`{field}`: {problem}"),
            EnvelopeError::SourceMismatch { expected, found } => {
                write!(f, "body source `{found}` differs from header `{expected}`")
            }
            EnvelopeError::TypeNotAllowed {
                source,
                event_type,
                why,
            } => write!(f, "`{source}` event type `{event_type}`: {why}"),
        }
    }
}

impl Envelope {
    /// Parses raw body bytes delivered for `source` (the header's, or the stream entry's).
    pub fn parse(body: &[u8], source: Source) -> Result<Envelope, EnvelopeError> {
        let value = parse_json_object(body).map_err(EnvelopeError::NotAnObject)?;
        let Value::Object(object) = &value else {
            return Err(EnvelopeError::NotAnObject(format!(
                "the body is {}, not an object",
                kind(&value)
            )));
        };
        match object.get("schema_version") {
            Some(Value::String(version)) if version == "1" => {}
            Some(other) => return Err(EnvelopeError::UnsupportedSchema(other.to_string())),
            None => {
                return Err(EnvelopeError::Field {
                    field: "schema_version",
                    problem: "missing".into(),
                })
            }
        }
        if let Some(unknown) = object.keys().find(|key| !FIELDS.contains(&key.as_str())) {
            return Err(EnvelopeError::Field {
                field: "(object)",
                problem: format!("unknown field `{unknown}` (schema 1 has no such field)"),
            });
        }
        let body_source = text(object, "source")?;
        let event_id = text(object, "event_id")?;
        let event_type = text(object, "event_type")?;
        let sent_at_text = text(object, "sent_at")?;
        let sent_at = parse_rfc3339(sent_at_text).ok_or_else(|| EnvelopeError::Field {
            field: "sent_at",
            problem: format!("`{sent_at_text}` is not an RFC 3339 time"),
        })?;
        // Contract v2: when the source says the business event happened. Informational
        // (never an ordering key), but a sender that writes it must not be refused.
        if let Some(occurred_at) = object.get("occurred_at") {
            let valid = occurred_at.as_str().and_then(parse_rfc3339).is_some();
            if !valid {
                return Err(EnvelopeError::Field {
                    field: "occurred_at",
                    problem: format!("{occurred_at} is not an RFC 3339 time"),
                });
            }
        }
        let tenant_id = text(object, "tenant_id")?;
        let application_id = text(object, "application_id")?;
        let business_key = text(object, "business_key")?;
        let material_version = match object.get("material_version") {
            None => return Err(missing("material_version")),
            Some(value) => value
                .as_u64()
                .filter(|&version| (1..=MAX_MATERIAL_VERSION).contains(&version))
                .ok_or_else(|| EnvelopeError::Field {
                    field: "material_version",
                    problem: format!("{value} is not an integer from 1 to {MAX_MATERIAL_VERSION}"),
                })?,
        };
        let data = match object.get("data") {
            None => None,
            Some(value @ Value::Object(_)) => Some(canonical_text(value)),
            Some(other) => {
                return Err(EnvelopeError::Field {
                    field: "data",
                    problem: format!("{} is not an object", kind(other)),
                })
            }
        };
        if let Some(data) = data.as_ref().filter(|data| data.len() > MAX_DATA_BYTES) {
            return Err(EnvelopeError::Field {
                field: "data",
                problem: format!("{} bytes, the limit is {MAX_DATA_BYTES}", data.len()),
            });
        }
        if body_source != source.as_str() {
            return Err(EnvelopeError::SourceMismatch {
                expected: source,
                found: body_source.to_owned(),
            });
        }
        let not_allowed = |why: &str| EnvelopeError::TypeNotAllowed {
            source,
            event_type: event_type.to_owned(),
            why: why.to_owned(),
        };
        let fact_type = FactType::from_wire(event_type)
            .filter(|known| known.source() == source)
            .ok_or_else(|| not_allowed("the source may not report it"))?;
        let withdraws = withdrawn_id(object, fact_type, event_id).map_err(not_allowed)?;
        Ok(Envelope {
            source,
            event_type: fact_type,
            withdraws,
            event_id: event_id.to_owned(),
            sent_at,
            tenant_id: tenant_id.to_owned(),
            application_id: application_id.to_owned(),
            business_key: business_key.to_owned(),
            material_version,
            data,
            canonical: canonical_text(&value),
            content: content_text(object),
        })
    }

    /// Who reported it.
    pub fn source(&self) -> Source {
        self.source
    }

    /// The source's event id.
    pub fn event_id(&self) -> &str {
        &self.event_id
    }

    /// The fact identity `(tenant_id, source, event_id)`.
    pub fn fact_id(&self) -> FactId {
        FactId {
            tenant_id: self.tenant_id.clone(),
            source: self.source,
            event_id: self.event_id.clone(),
        }
    }

    /// Its event type (one its source may report).
    pub fn fact_type(&self) -> FactType {
        self.event_type
    }

    /// The kind of fact it confirms; `None` for a withdrawal.
    pub fn confirms(&self) -> Option<FactKind> {
        (!self.event_type.is_withdrawal()).then(|| self.source.kind())
    }

    /// The `event_id` of the fact it withdraws (same tenant, same source); `None` unless it
    /// is a withdrawal.
    pub fn withdraws(&self) -> Option<&str> {
        self.withdraws.as_deref()
    }

    /// When the source sent it, in Unix seconds.
    pub fn sent_at(&self) -> i64 {
        self.sent_at
    }

    /// The tenant.
    pub fn tenant_id(&self) -> &str {
        &self.tenant_id
    }

    /// The application, unique within its tenant.
    pub fn application_id(&self) -> &str {
        &self.application_id
    }

    /// The human-readable key the source believes the application has.
    pub fn business_key(&self) -> &str {
        &self.business_key
    }

    /// The material version the fact refers to (>= 1).
    pub fn material_version(&self) -> u64 {
        self.material_version
    }

    /// The `data` object in canonical form, when sent.
    pub fn data(&self) -> Option<&str> {
        self.data.as_deref()
    }

    /// The whole body in canonical form: equal for semantically equal envelopes.
    pub fn canonical(&self) -> &str {
        &self.canonical
    }

    /// The content in canonical form: the parsed body without `sent_at`. Equal for two
    /// deliveries of one fact, however often it was re-signed and re-encoded.
    pub fn content(&self) -> &str {
        &self.content
    }

    /// Whether two envelopes have the same content (contract v2): their parsed JSON values
    /// without `sent_at` are equal. Key order, whitespace and `sent_at` never matter.
    pub fn same_content(&self, other: &Envelope) -> bool {
        self.content == other.content
    }
}

const FIELDS: [&str; 11] = [
    "schema_version",
    "source",
    "event_id",
    "event_type",
    "sent_at",
    "occurred_at",
    "tenant_id",
    "application_id",
    "business_key",
    "material_version",
    "data",
];

/// Check 7 for `data.withdraws`: a withdrawal names another event of its source, an
/// event that makes a fact names none.
fn withdrawn_id(
    object: &Map<String, Value>,
    fact_type: FactType,
    event_id: &str,
) -> Result<Option<String>, &'static str> {
    let named = object.get("data").and_then(|data| data.get("withdraws"));
    match (fact_type.is_withdrawal(), named) {
        (false, None) => Ok(None),
        (false, Some(_)) => Err("only a withdrawal names `data.withdraws`"),
        (true, None) => Err("a withdrawal names the event it withdraws in `data.withdraws`"),
        (true, Some(Value::String(id))) if id.is_empty() || id.len() > MAX_ID_BYTES => {
            Err("`data.withdraws` is an event id of 1 to 128 bytes")
        }
        (true, Some(Value::String(id))) if id == event_id => {
            Err("a withdrawal cannot withdraw itself")
        }
        (true, Some(Value::String(id))) => Ok(Some(id.clone())),
        (true, Some(_)) => Err("`data.withdraws` is not a string"),
    }
}

fn missing(field: &'static str) -> EnvelopeError {
    EnvelopeError::Field {
        field,
        problem: "missing".into(),
    }
}

/// A required non-empty string field.
fn text<'a>(object: &'a Map<String, Value>, field: &'static str) -> Result<&'a str, EnvelopeError> {
    match object.get(field) {
        None => Err(missing(field)),
        Some(Value::String(text)) if text.is_empty() => Err(EnvelopeError::Field {
            field,
            problem: "empty".into(),
        }),
        Some(Value::String(text)) if text.len() > MAX_ID_BYTES && field != "sent_at" => {
            Err(EnvelopeError::Field {
                field,
                problem: format!("{} bytes, the limit is {MAX_ID_BYTES}", text.len()),
            })
        }
        Some(Value::String(text)) => Ok(text),
        Some(other) => Err(EnvelopeError::Field {
            field,
            problem: format!("{} is not a string", kind(other)),
        }),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The envelope in `body`, parsed for the source the body itself names (no ingress, no
/// header): what a stored entry or a test step carries. `None` if it is not a valid one.
pub fn envelope_in(body: &[u8]) -> Option<Envelope> {
    let value = parse_json_object(body).ok()?;
    let source = Source::from_wire(value.get("source")?.as_str()?)?;
    Envelope::parse(body, source).ok()
}

/// Strict JSON: valid UTF-8, one value and nothing after it but whitespace, no key twice
/// in one object, at most [`MAX_DEPTH`] levels of objects and arrays.
pub fn parse_json_object(body: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(body)
        .map_err(|error| format!("not UTF-8 (byte {})", error.valid_up_to()))?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = StrictValue { depth: 1 }
        .deserialize(&mut deserializer)
        .map_err(|error| error.to_string())?;
    deserializer
        .end()
        .map_err(|error| format!("content after the JSON value: {error}"))?;
    Ok(value)
}

/// A JSON value read with a depth limit and no duplicate keys.
struct StrictValue {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl StrictValue {
    /// The seed for a value inside this one.
    fn inner(&self) -> StrictValue {
        StrictValue {
            depth: self.depth + 1,
        }
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(value)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        // `self.depth` is this array's own level; its items are one deeper.
        if self.depth > MAX_DEPTH {
            return Err(A::Error::custom(format_args!(
                "nesting deeper than {MAX_DEPTH} levels"
            )));
        }
        while let Some(item) = seq.next_element_seed(self.inner())? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        if self.depth > MAX_DEPTH {
            return Err(A::Error::custom(format_args!(
                "nesting deeper than {MAX_DEPTH} levels"
            )));
        }
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self.inner())?;
            if object.insert(key.clone(), value).is_some() {
                return Err(A::Error::custom(format_args!("key `{key}` appears twice")));
            }
        }
        Ok(Value::Object(object))
    }
}

/// The largest material version: what SQLite and PostgreSQL store as a signed 64-bit integer.
pub const MAX_MATERIAL_VERSION: u64 = i64::MAX as u64;

/// The canonical text of an envelope object without its `sent_at`.
fn content_text(object: &Map<String, Value>) -> String {
    let mut rest = object.clone();
    rest.remove("sent_at");
    canonical_text(&Value::Object(rest))
}

/// A JSON value written with object keys sorted and no whitespace: equal parsed values
/// give equal text, whatever the key order and spacing of the original.
pub fn canonical_text(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(object) => {
            let mut keys: Vec<&String> = object.keys().collect();
            keys.sort();
            out.push('{');
            for (index, key) in keys.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&object[key.as_str()], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Number(number) => write_number(number, out),
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// A number by the value it denotes: an integer written as an integer (`100`) is kept
/// exactly; a number written with a fraction or an exponent (`100.0`, `1e2`, `0.25`) is read
/// as an IEEE double, and written as an integer when that double is integral (so `100`,
/// `100.0` and `1e2` are one value and one text), else in Rust's shortest round-trip form.
fn write_number(number: &serde_json::Number, out: &mut String) {
    use std::fmt::Write;
    if number.is_u64() || number.is_i64() {
        let _ = write!(out, "{number}");
        return;
    }
    let value = number.as_f64().unwrap_or(0.0);
    if value == value.trunc() && value.abs() < 1e21 {
        let _ = write!(out, "{}", value as i128);
    } else {
        let _ = write!(out, "{value}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(material_version: &str) -> String {
        format!(
            r#"{{"schema_version":"1","source":"finance","event_id":"P-1","event_type":"PAYMENT_CONFIRMED","sent_at":"2024-06-03T09:00:00+08:00","tenant_id":"t","application_id":"a","business_key":"K","material_version":{material_version}}}"#
        )
    }

    #[test]
    fn offsets_are_applied_to_sent_at() {
        let envelope = Envelope::parse(body("1").as_bytes(), Source::Finance).unwrap();
        assert_eq!(
            envelope.sent_at(),
            parse_rfc3339("2024-06-03T01:00:00Z").unwrap()
        );
        assert_eq!(envelope.fact_type(), FactType::PaymentConfirmed);
        assert_eq!(envelope.confirms(), Some(FactKind::Payment));
    }

    #[test]
    fn material_version_must_be_a_positive_integer() {
        for bad in ["0", "1.0", "-1", "\"1\"", "null", "9223372036854775808"] {
            let error = Envelope::parse(body(bad).as_bytes(), Source::Finance).unwrap_err();
            assert!(
                matches!(
                    error,
                    EnvelopeError::Field {
                        field: "material_version",
                        ..
                    }
                ),
                "{bad}: {error:?}"
            );
        }
    }

    #[test]
    fn depth_limit_counts_the_envelope_as_level_one() {
        let nest = |levels: usize| "[".repeat(levels) + &"]".repeat(levels);
        let at = |levels: usize| format!("{{\"x\":{}}}", nest(levels));
        assert!(parse_json_object(at(MAX_DEPTH - 1).as_bytes()).is_ok());
        let error = parse_json_object(at(MAX_DEPTH).as_bytes()).unwrap_err();
        assert!(error.contains("nesting deeper"), "{error}");
    }

    #[test]
    fn an_optional_occurred_at_is_accepted_when_it_is_a_time() {
        let with = |occurred: &str| {
            body("1").replace(
                r#""tenant_id""#,
                &format!(r#""occurred_at":{occurred},"tenant_id""#),
            )
        };
        let good = with(r#""2024-06-03T08:59:00+08:00""#);
        assert!(Envelope::parse(good.as_bytes(), Source::Finance).is_ok());
        for bad in [r#""yesterday""#, "17"] {
            let refused = Envelope::parse(with(bad).as_bytes(), Source::Finance);
            assert!(
                matches!(
                    refused,
                    Err(EnvelopeError::Field {
                        field: "occurred_at",
                        ..
                    })
                ),
                "{bad}: {refused:?}"
            );
        }
    }

    #[test]
    fn sent_at_is_not_content() {
        let first = Envelope::parse(body("1").as_bytes(), Source::Finance).unwrap();
        let resigned = body("1").replace("09:00:00+08:00", "09:25:00+08:00");
        let resigned = Envelope::parse(resigned.as_bytes(), Source::Finance).unwrap();
        assert_ne!(first.canonical(), resigned.canonical());
        assert!(first.same_content(&resigned));
        assert!(!first.content().contains("sent_at"));
        let other = Envelope::parse(body("2").as_bytes(), Source::Finance).unwrap();
        assert!(!first.same_content(&other));
    }

    #[test]
    fn duplicate_keys_are_refused() {
        let error = parse_json_object(br#"{"a":1,"a":1}"#).unwrap_err();
        assert!(error.contains("appears twice"), "{error}");
    }
}
