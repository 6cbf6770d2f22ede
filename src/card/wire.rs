//! The card.snapshot wire protocol, parsed once at the edge into typed, interned events.
//!
//! A raw envelope never fails to parse: every protocol anomaly (missing or non-string ids, a
//! version that is not a non-negative integer, an unsupported type, a state that is not an
//! object) becomes a typed value that the decision function turns into a held decision.
//! Strings, whole envelopes and card states are interned in a [`Catalog`], so the decision
//! function compares small integers and never touches JSON.

use crate::card::canonical::{self, Envelope, Token};
use crate::harness::timestamp::parse_rfc3339;
use hashbrown::HashTable;
use serde_json::Value;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::OnceLock;

/// The only event type the receiver applies.
pub const SUPPORTED_TYPE: &str = "card.snapshot";

/// An interned name: an event id or a card (object) id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sym(pub u32);

/// An interned envelope: two events have the same `ContentId` exactly when their parsed
/// JSON values are equal (key order and whitespace never matter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContentId(pub u32);

/// The bytes a receiver saw: a byte-level identity that semantic equality ignores. When
/// the bytes are the envelope's canonical text (and for an envelope parsed from a JSON
/// value, which stands for its canonical writing) it is the envelope's [`ContentId`]
/// number; other bytes (keys in another order, other whitespace) are interned on their own
/// and numbered from [`BytesId::RAW`] up, so content ids are never shifted by them. Only a
/// wrong receiver reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BytesId(pub u32);

impl BytesId {
    /// The first number of bytes that are not an envelope's canonical text.
    pub const RAW: u32 = 1 << 31;
}

impl Event {
    /// Whether the bytes seen are the envelope's canonical text.
    pub fn canonical_bytes(&self) -> bool {
        self.bytes.0 == self.content.0
    }
}

/// An interned complete card state (always a JSON object).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StateId(pub u32);

/// The `object_version` field as the receiver sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// A non-negative integer that fits in 64 bits.
    Valid(u64),
    /// The field is absent.
    Missing,
    /// Present but not a non-negative integer (negative, fractional, string, null, too big).
    Invalid,
}

impl Version {
    /// Reads a version field; `None` means the key is absent.
    pub fn parse(field: Option<&Value>) -> Version {
        match field {
            None => Version::Missing,
            Some(value) => value.as_u64().map_or(Version::Invalid, Version::Valid),
        }
    }
}

/// One event envelope after parsing: everything the decision function reads, as ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Event {
    /// The whole envelope, for semantic equality.
    pub content: ContentId,
    /// The bytes as received (never read by the contract's receiver).
    pub bytes: BytesId,
    /// `event_id` when it is a string.
    pub event_id: Option<Sym>,
    /// `object_id` when it is a string.
    pub object_id: Option<Sym>,
    /// `type` is exactly [`SUPPORTED_TYPE`].
    pub supported: bool,
    /// `object_version`.
    pub version: Version,
    /// `state` when it is an object.
    pub state: Option<StateId>,
    /// `occurred_at` in Unix seconds when it parses as RFC 3339. Informational only: the
    /// real policy never reads it; the `timestamp-ordering` mutant does.
    pub occurred_at: Option<i64>,
}

/// An authority snapshot: the truth about one card at one version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Snapshot {
    /// The card.
    pub object_id: Sym,
    /// The authoritative version.
    pub version: u64,
    /// The authoritative complete state.
    pub state: StateId,
}

/// Interns JSON values by their canonical text, keeping the parsed values (card states,
/// which reports show). A value interned from its canonical text (the byte path) is parsed
/// only when first asked for.
#[derive(Clone, Debug, Default)]
struct Interner {
    texts: TextInterner,
    values: Vec<OnceLock<Value>>,
}

/// The canonical text of a value: serde_json's default map is ordered by key, so equal
/// parsed values give equal text, whatever the key order or whitespace of the input. The
/// one number serde_json calls equal to another but writes differently is `-0.0` (equal to
/// `0.0`); it is written as `0.0`.
fn canonical(value: &Value) -> String {
    if has_negative_zero(value) {
        positive_zeros(value.clone()).to_string()
    } else {
        value.to_string()
    }
}

fn is_negative_zero(number: &serde_json::Number) -> bool {
    number
        .as_f64()
        .is_some_and(|float| float == 0.0 && float.is_sign_negative() && number.is_f64())
}

fn has_negative_zero(value: &Value) -> bool {
    match value {
        Value::Number(number) => is_negative_zero(number),
        Value::Array(items) => items.iter().any(has_negative_zero),
        Value::Object(map) => map.values().any(has_negative_zero),
        Value::Null | Value::Bool(_) | Value::String(_) => false,
    }
}

fn positive_zeros(value: Value) -> Value {
    match value {
        Value::Number(number) if is_negative_zero(&number) => Value::from(0.0),
        Value::Array(items) => Value::Array(items.into_iter().map(positive_zeros).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| (key, positive_zeros(value)))
                .collect(),
        ),
        other => other,
    }
}

impl Interner {
    fn intern(&mut self, value: &Value) -> u32 {
        let id = self.texts.intern(value);
        if id as usize == self.values.len() {
            self.values.push(OnceLock::from(value.clone()));
        }
        id
    }

    /// Interns a value by its text, which the caller knows is canonical.
    fn intern_text(&mut self, text: &str) -> u32 {
        let id = self.texts.intern_text(text);
        if id as usize == self.values.len() {
            self.values.push(OnceLock::new());
        }
        id
    }

    fn get(&self, id: u32) -> &Value {
        self.values[id as usize].get_or_init(|| {
            serde_json::from_str(self.texts.get(id)).expect("canonical text is JSON")
        })
    }
}

/// Interns texts (names, and JSON values by their canonical text: whole envelopes, whose
/// identity is all the receiver needs). The texts are stored end to end in large chunks, so
/// a new text costs no allocation of its own; the index holds each text's hash and id and
/// is probed with the borrowed text, hashed once. The hasher is foldhash with a seed drawn
/// per catalog (faster than SipHash on the ~170-byte envelopes the receiver sees, and still
/// seeded, so ids chosen by a sender cannot be made to collide without knowing the seed).
#[derive(Clone, Debug, Default)]
struct TextInterner {
    /// The texts, end to end; a chunk is never grown past its capacity, so never moved.
    chunks: Vec<String>,
    /// Where text `id` is: chunk, start, end.
    spans: Vec<(u32, u32, u32)>,
    /// Hash and id of every text.
    index: HashTable<(u64, u32)>,
    hasher: foldhash::fast::RandomState,
}

/// The smallest chunk a [`TextInterner`] allocates, and the largest it grows to.
const CHUNK_BYTES: (usize, usize) = (1 << 10, 1 << 20);

fn span_text(chunks: &[String], span: (u32, u32, u32)) -> &str {
    &chunks[span.0 as usize][span.1 as usize..span.2 as usize]
}

impl TextInterner {
    fn intern(&mut self, value: &Value) -> u32 {
        self.intern_text(&canonical(value))
    }

    /// The id of a text already interned.
    fn find(&self, text: &str) -> Option<u32> {
        self.find_hashed(self.hasher.hash_one(text), text)
    }

    fn find_hashed(&self, hash: u64, text: &str) -> Option<u32> {
        let (chunks, spans) = (&self.chunks, &self.spans);
        self.index
            .find(hash, |&(other, id)| {
                other == hash && span_text(chunks, spans[id as usize]) == text
            })
            .map(|&(_, id)| id)
    }

    /// Interns a text (for a value, the caller knows it is canonical): allocates nothing
    /// when the text is known.
    fn intern_text(&mut self, text: &str) -> u32 {
        let hash = self.hasher.hash_one(text);
        if let Some(id) = self.find_hashed(hash, text) {
            return id;
        }
        let id = u32::try_from(self.spans.len()).expect("fewer than 2^32 interned texts");
        let fits = self
            .chunks
            .last()
            .is_some_and(|chunk| chunk.capacity() - chunk.len() >= text.len());
        if !fits {
            let last = self.chunks.last().map_or(0, String::capacity);
            let size = (2 * last)
                .clamp(CHUNK_BYTES.0, CHUNK_BYTES.1)
                .max(text.len());
            self.chunks.push(String::with_capacity(size));
        }
        let chunk_index = self.chunks.len() - 1;
        let chunk = &mut self.chunks[chunk_index];
        let start = chunk.len();
        chunk.push_str(text);
        let offset = |at: usize| u32::try_from(at).expect("chunks under 4 GiB");
        let chunk_index = offset(chunk_index);
        self.spans
            .push((chunk_index, offset(start), offset(chunk.len())));
        self.index
            .insert_unique(hash, (hash, id), |&(hash, _)| hash);
        id
    }

    fn get(&self, id: u32) -> &str {
        span_text(&self.chunks, self.spans[id as usize])
    }
}

/// Everything interned for one scenario: names, envelopes and card states.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    names: TextInterner,
    contents: TextInterner,
    states: Interner,
    /// Envelope bytes that were not their canonical text ([`BytesId`]).
    raws: TextInterner,
}

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Catalog {
        Catalog::default()
    }

    /// Interns a name.
    pub fn sym(&mut self, name: &str) -> Sym {
        Sym(self.names.intern_text(name))
    }

    /// Looks a name up without interning it.
    pub fn find(&self, name: &str) -> Option<Sym> {
        self.names.find(name).map(Sym)
    }

    /// The text of a name.
    pub fn name(&self, sym: Sym) -> &str {
        self.names.get(sym.0)
    }

    /// Interns a card state. The caller has checked it is an object.
    pub fn state(&mut self, state: &Value) -> StateId {
        debug_assert!(state.is_object(), "card states are objects");
        StateId(self.states.intern(state))
    }

    /// The JSON of a card state.
    pub fn state_value(&self, id: StateId) -> &Value {
        self.states.get(id.0)
    }

    /// The canonical JSON text of an envelope.
    pub fn content_text(&self, id: ContentId) -> &str {
        self.contents.get(id.0)
    }

    /// The JSON of an envelope.
    pub fn content_value(&self, id: ContentId) -> Value {
        serde_json::from_str(self.content_text(id)).expect("canonical text is JSON")
    }

    /// Parses a raw envelope. Never fails: anomalies become typed values.
    pub fn event(&mut self, raw: &Value) -> Event {
        let content = ContentId(self.contents.intern(raw));
        self.event_with_bytes(raw, content, BytesId(content.0))
    }

    /// The text of the bytes an event was read from (the canonical text when they were).
    pub fn bytes_text(&self, id: BytesId) -> &str {
        match id.0.checked_sub(BytesId::RAW) {
            Some(raw) => self.raws.get(raw),
            None => self.contents.get(id.0),
        }
    }

    /// The byte identity of `text`, an envelope whose content is `content`.
    fn bytes_id(&mut self, text: &str, content: ContentId) -> BytesId {
        if text == self.contents.get(content.0) {
            return BytesId(content.0);
        }
        let raw = self.raws.intern_text(text);
        assert!(raw < BytesId::RAW, "fewer than 2^31 raw envelopes");
        BytesId(BytesId::RAW | raw)
    }

    fn event_with_bytes(&mut self, raw: &Value, content: ContentId, bytes: BytesId) -> Event {
        let field = |key: &str| raw.as_object().and_then(|object| object.get(key));
        let event_id = field("event_id")
            .and_then(Value::as_str)
            .map(|name| self.sym(name));
        let object_id = field("object_id")
            .and_then(Value::as_str)
            .map(|name| self.sym(name));
        let state = field("state")
            .filter(|state| state.is_object())
            .map(|state| self.state(state));
        Event {
            content,
            bytes,
            event_id,
            object_id,
            supported: field("type").and_then(Value::as_str) == Some(SUPPORTED_TYPE),
            version: Version::parse(field("object_version")),
            state,
            occurred_at: field("occurred_at")
                .and_then(Value::as_str)
                .and_then(parse_rfc3339),
        }
    }

    /// Parses a raw envelope from its bytes: the same [`Event`] as [`Catalog::event`] of
    /// `serde_json::from_slice(bytes)`, the same symbols, contents and states interned in
    /// the same order, but for [`Event::bytes`] when the bytes are not the canonical text
    /// (they are then kept as they came, [`BytesId`]). Fails only when the bytes are not one JSON value (serde_json's
    /// error); every protocol anomaly is still a typed value.
    ///
    /// Bytes that are already the envelope's canonical text (keys sorted, no whitespace,
    /// no escapes, integers only: what serde_json writes) are recognised in one pass and
    /// interned by their own text, so no `Value` is built and a delivery of known ids,
    /// content and state allocates nothing. Anything else takes the slow path.
    pub fn event_from_bytes(&mut self, bytes: &[u8]) -> Result<Event, serde_json::Error> {
        match canonical::scan(bytes) {
            Some(envelope) => Ok(self.event_from_canonical(&envelope)),
            None => {
                let value: Value = serde_json::from_slice(bytes)?;
                let content = ContentId(self.contents.intern(&value));
                // serde_json accepted the bytes, so they are UTF-8.
                let text = std::str::from_utf8(bytes).expect("JSON text is UTF-8");
                let seen = self.bytes_id(text, content);
                Ok(self.event_with_bytes(&value, content, seen))
            }
        }
    }

    fn event_from_canonical(&mut self, envelope: &Envelope<'_>) -> Event {
        let content = ContentId(self.contents.intern_text(envelope.text));
        let event_id = envelope
            .event_id
            .and_then(Token::as_str)
            .map(|name| self.sym(name));
        let object_id = envelope
            .object_id
            .and_then(Token::as_str)
            .map(|name| self.sym(name));
        let state = match envelope.state {
            Some(Token::Object(text)) => Some(StateId(self.states.intern_text(text))),
            _ => None,
        };
        Event {
            content,
            bytes: BytesId(content.0),
            event_id,
            object_id,
            supported: envelope.kind.and_then(Token::as_str) == Some(SUPPORTED_TYPE),
            version: match envelope.object_version {
                None => Version::Missing,
                Some(Token::Unsigned(version)) => Version::Valid(version),
                Some(_) => Version::Invalid,
            },
            state,
            occurred_at: envelope
                .occurred_at
                .and_then(Token::as_str)
                .and_then(parse_rfc3339),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Valid(version) => write!(f, "{version}"),
            Version::Missing => f.write_str("(missing)"),
            Version::Invalid => f.write_str("(invalid)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn negative_zero_is_the_same_content_as_zero() {
        let value = |text: &str| -> Value { serde_json::from_str(text).expect("JSON") };
        // serde_json calls them equal, so semantic equality must too.
        assert_eq!(value(r#"{"x": -0.0}"#), value(r#"{"x": 0.0}"#));
        let mut catalog = Catalog::new();
        let envelope = |zero: &str| {
            value(&format!(
                r#"{{"event_id": "e-1", "object_id": "card-7", "object_version": 1,
                    "type": "card.snapshot", "state": {{"w": [{zero}], "n": {{"z": {zero}}}}}}}"#
            ))
        };
        let plus = catalog.event(&envelope("0.0"));
        let minus = catalog.event(&envelope("-0.0"));
        assert_eq!(plus.content, minus.content);
        assert_eq!(plus.state, minus.state);
        // Integers and other floats keep their identity: 0 and 0.0 differ, as in serde_json.
        assert_ne!(value("0"), value("0.0"));
        let integer = catalog.event(&envelope("0"));
        assert_ne!(integer.content, plus.content);
        let tiny = catalog.event(&envelope("-1e-300"));
        assert_ne!(tiny.content, plus.content);
    }

    #[test]
    fn versions_parse_into_three_cases() {
        assert_eq!(Version::parse(Some(&json!(12))), Version::Valid(12));
        assert_eq!(Version::parse(Some(&json!(0))), Version::Valid(0));
        assert_eq!(Version::parse(None), Version::Missing);
        for invalid in [
            json!(-1),
            json!(12.0),
            json!(1.5),
            json!("12"),
            json!(null),
            json!(true),
            json!([12]),
            json!({"v": 12}),
            json!(1e30),
        ] {
            assert_eq!(
                Version::parse(Some(&invalid)),
                Version::Invalid,
                "{invalid}"
            );
        }
        let huge: Value = serde_json::from_str("18446744073709551616").unwrap();
        assert_eq!(Version::parse(Some(&huge)), Version::Invalid);
    }

    #[test]
    fn key_order_and_whitespace_do_not_change_content() {
        let mut catalog = Catalog::new();
        let a: Value = serde_json::from_str(
            r#"{"event_id":"e","object_id":"c","object_version":1,"type":"card.snapshot","state":{"a":1,"b":[1,2]}}"#,
        )
        .unwrap();
        let b: Value = serde_json::from_str(
            "{ \"state\" : { \"b\" : [1, 2], \"a\" : 1 },\n \"type\":\"card.snapshot\", \"object_version\": 1, \"object_id\":\"c\", \"event_id\":\"e\" }",
        )
        .unwrap();
        let c: Value = serde_json::from_str(
            r#"{"event_id":"e","object_id":"c","object_version":1,"type":"card.snapshot","state":{"a":1,"b":[2,1]}}"#,
        )
        .unwrap();
        let (ea, eb, ec) = (catalog.event(&a), catalog.event(&b), catalog.event(&c));
        assert_eq!(ea.content, eb.content);
        assert_eq!(ea.state, eb.state);
        assert_ne!(ea.content, ec.content, "array order is part of the value");
        assert_ne!(ea.state, ec.state);
    }

    #[test]
    fn anomalies_become_typed_values() {
        let mut catalog = Catalog::new();
        let event = catalog.event(&json!({
            "event_id": 7, "object_id": ["x"], "type": "card.deleted", "state": "gone"
        }));
        assert_eq!(event.event_id, None);
        assert_eq!(event.object_id, None);
        assert!(!event.supported);
        assert_eq!(event.version, Version::Missing);
        assert_eq!(event.state, None);
        let not_object = catalog.event(&json!([1, 2, 3]));
        assert_eq!(not_object.event_id, None);
        assert_eq!(not_object.version, Version::Missing);
    }
}
