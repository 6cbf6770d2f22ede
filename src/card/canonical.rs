//! Recognises an envelope whose bytes are already its canonical text, in one pass.
//!
//! The canonical text of an envelope ([`crate::card::wire`]) is what serde_json writes for its
//! parsed value: object keys in byte order, no whitespace, strings escaped the way serde_json
//! escapes them, numbers as serde_json writes them, `-0.0` as `0.0`. A sender that writes
//! envelopes with serde_json (or any writer with sorted keys and compact output) produces
//! exactly that text, so the receiver can take the bytes themselves as the identity, with no
//! `Value` tree and no second string.
//!
//! [`scan`] accepts only a strict subset of JSON whose text is certainly canonical:
//!
//! - the input is valid UTF-8 and is one object, with nothing before or after it;
//! - no whitespace anywhere outside strings;
//! - the keys of every object are strictly increasing in byte order (so no duplicates);
//! - strings contain no backslash and no control character (so no escape to normalise);
//! - numbers are integers `0`, `[1-9][0-9]*` (at most 19 digits) or `-[1-9][0-9]*` (at most
//!   18 digits): they fit serde_json's `u64`/`i64` and are written back unchanged. Any
//!   fraction or exponent, `-0`, and longer integers are left to the slow path;
//! - nesting at most [`MAX_DEPTH`] deep (serde_json refuses beyond 128).
//!
//! Anything else, valid or not, returns `None`, and the caller parses the bytes with
//! serde_json into a `Value` (the slow path, which also reports malformed input). A `Some`
//! is therefore always the right answer and a `None` never a wrong one: the fast path can
//! only be slower, never different.

/// How deep objects and arrays may nest on the fast path.
pub(crate) const MAX_DEPTH: usize = 64;

/// A top-level field's value, as much of it as an [`crate::card::wire::Event`] needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Token<'a> {
    /// A string (its text between the quotes, which has no escapes).
    Str(&'a str),
    /// A non-negative integer.
    Unsigned(u64),
    /// An object: its whole text, canonical like the envelope's.
    Object(&'a str),
    /// Anything else: a negative integer, `true`, `false`, `null`, an array.
    Other,
}

impl<'a> Token<'a> {
    /// The string, when the value is one.
    pub(crate) fn as_str(self) -> Option<&'a str> {
        match self {
            Token::Str(text) => Some(text),
            _ => None,
        }
    }
}

/// An envelope whose bytes are canonical, with the top-level fields the receiver reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Envelope<'a> {
    /// The whole text: the envelope's canonical text.
    pub(crate) text: &'a str,
    /// `event_id`.
    pub(crate) event_id: Option<Token<'a>>,
    /// `object_id`.
    pub(crate) object_id: Option<Token<'a>>,
    /// `object_version`.
    pub(crate) object_version: Option<Token<'a>>,
    /// `occurred_at`.
    pub(crate) occurred_at: Option<Token<'a>>,
    /// `type`.
    pub(crate) kind: Option<Token<'a>>,
    /// `state`.
    pub(crate) state: Option<Token<'a>>,
}

/// The envelope, when `bytes` are certainly its canonical text; `None` otherwise (the
/// caller then takes the slow path).
pub(crate) fn scan(bytes: &[u8]) -> Option<Envelope<'_>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut scanner = Scanner { bytes, at: 0 };
    let mut envelope = Envelope {
        text,
        ..Envelope::default()
    };
    if scanner.peek()? != b'{' {
        return None;
    }
    scanner.at += 1;
    if scanner.peek()? != b'}' {
        let mut previous = None;
        loop {
            let key = scanner.key(previous)?;
            previous = Some(key);
            let start = scanner.at;
            let value = scanner.value(1)?;
            let mut other = None;
            let slot = match key {
                b"event_id" => &mut envelope.event_id,
                b"object_id" => &mut envelope.object_id,
                b"object_version" => &mut envelope.object_version,
                b"occurred_at" => &mut envelope.occurred_at,
                b"state" => &mut envelope.state,
                b"type" => &mut envelope.kind,
                _ => &mut other,
            };
            *slot = Some(match value {
                Value::Str(from, to) => Token::Str(&text[from..to]),
                Value::Unsigned(number) => Token::Unsigned(number),
                Value::Object => Token::Object(&text[start..scanner.at]),
                Value::Other => Token::Other,
            });
            if !scanner.separator()? {
                break;
            }
        }
    } else {
        scanner.at += 1;
    }
    (scanner.at == bytes.len()).then_some(envelope)
}

/// What [`Scanner::value`] found, without borrowing.
enum Value {
    /// A string between these byte offsets (quotes excluded).
    Str(usize, usize),
    /// A non-negative integer.
    Unsigned(u64),
    /// An object.
    Object,
    /// Anything else.
    Other,
}

struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// After an object member: `true` on `,` (another follows), `false` on `}` (consumed),
    /// `None` on anything else.
    fn separator(&mut self) -> Option<bool> {
        let byte = self.peek()?;
        self.at += 1;
        match byte {
            b',' => Some(true),
            b'}' => Some(false),
            _ => None,
        }
    }

    /// A string, its opening quote at `self.at`: the offsets of its text.
    fn string(&mut self) -> Option<(usize, usize)> {
        if self.peek()? != b'"' {
            return None;
        }
        let from = self.at + 1;
        let mut at = from;
        loop {
            let byte = *self.bytes.get(at)?;
            if byte == b'"' {
                self.at = at + 1;
                return Some((from, at));
            }
            if byte == b'\\' || byte < 0x20 {
                return None;
            }
            at += 1;
        }
    }

    /// An object key and its colon; the key must sort strictly after `previous` (the
    /// object's previous key, `None` for its first).
    fn key(&mut self, previous: Option<&[u8]>) -> Option<&'a [u8]> {
        let (from, to) = self.string()?;
        let key = &self.bytes[from..to];
        if previous.is_some_and(|previous| previous >= key) || self.peek()? != b':' {
            return None;
        }
        self.at += 1;
        Some(key)
    }

    /// One value at `self.at`, nested `depth` deep.
    fn value(&mut self, depth: usize) -> Option<Value> {
        match self.peek()? {
            b'"' => {
                let (from, to) = self.string()?;
                Some(Value::Str(from, to))
            }
            b'{' => {
                self.object(depth + 1)?;
                Some(Value::Object)
            }
            b'[' => {
                self.array(depth + 1)?;
                Some(Value::Other)
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' => {
                self.at += 1;
                let digits = self.integer()?;
                // `-0` is the float -0.0 to serde_json; 19 digits may not fit an i64.
                (self.bytes[self.at - digits] != b'0' && digits <= 18).then_some(Value::Other)
            }
            b'0'..=b'9' => {
                let from = self.at;
                let digits = self.integer()?;
                if digits > 19 {
                    return None;
                }
                let number = self.bytes[from..self.at]
                    .iter()
                    .fold(0u64, |number, digit| number * 10 + u64::from(digit - b'0'));
                Some(Value::Unsigned(number))
            }
            _ => None,
        }
    }

    /// The digits of an integer with no leading zero, followed by neither a fraction nor
    /// an exponent: how many.
    fn integer(&mut self) -> Option<usize> {
        let from = self.at;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        let digits = self.at - from;
        if digits == 0 || (digits > 1 && self.bytes[from] == b'0') {
            return None;
        }
        match self.peek() {
            Some(b'.' | b'e' | b'E') => None,
            _ => Some(digits),
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<Value> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word).then(|| {
            self.at = end;
            Value::Other
        })
    }

    /// An object, its `{` at `self.at`.
    fn object(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        let mut previous = None;
        loop {
            previous = Some(self.key(previous)?);
            self.value(depth)?;
            if !self.separator()? {
                return Some(());
            }
        }
    }

    /// An array, its `[` at `self.at`.
    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.value(depth)?;
            let byte = self.peek()?;
            self.at += 1;
            match byte {
                b',' => {}
                b']' => return Some(()),
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// serde_json's own text of a parsed value.
    fn reference(text: &str) -> Option<String> {
        serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .map(|value| value.to_string())
    }

    #[test]
    fn what_serde_json_writes_is_recognised() {
        let value = json!({
            "event_id": "e-1", "object_id": "card-7", "object_version": 12,
            "occurred_at": "2024-01-01T08:00:00Z", "type": "card.snapshot",
            "state": {"stage": "s1", "n": [0, -3, true, null, {}, []], "é": "日本", "": {"b": 1, "a": 2}},
            "zz": 9999999999999999999u64, "a": -999999999999999999i64,
        });
        let text = value.to_string();
        let envelope = scan(text.as_bytes()).expect("canonical text");
        assert_eq!(envelope.text, text);
        assert_eq!(envelope.event_id, Some(Token::Str("e-1")));
        assert_eq!(envelope.object_id, Some(Token::Str("card-7")));
        assert_eq!(envelope.object_version, Some(Token::Unsigned(12)));
        assert_eq!(envelope.kind, Some(Token::Str("card.snapshot")));
        assert_eq!(
            envelope.occurred_at,
            Some(Token::Str("2024-01-01T08:00:00Z"))
        );
        assert_eq!(
            envelope.state,
            Some(Token::Object(value["state"].to_string().as_str()))
        );
    }

    #[test]
    fn everything_else_is_left_to_the_slow_path() {
        for text in [
            r#"{"b":1,"a":2}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a":1, "b":2}"#,
            r#" {"a":1}"#,
            r#"{"a":1} "#,
            r#"{"a":"\n"}"#,
            r#"{"a":"\u0041"}"#,
            r#"{"a":1.0}"#,
            r#"{"a":1e2}"#,
            r#"{"a":-0}"#,
            r#"{"a":-0.0}"#,
            r#"{"a":01}"#,
            r#"{"a":12345678901234567890}"#,
            r#"{"a":-1234567890123456789}"#,
            r#"{"a":[1,]}"#,
            r#"{"a":tru}"#,
            r#"{"a":1}{}"#,
            "[1]",
            "\"x\"",
            "",
            "{",
        ] {
            assert_eq!(scan(text.as_bytes()), None, "{text}");
        }
        let deep = format!(
            "{{\"a\":{}{}}}",
            "[".repeat(MAX_DEPTH),
            "]".repeat(MAX_DEPTH)
        );
        assert_eq!(scan(deep.as_bytes()), None);
        let shallow = format!(
            "{{\"a\":{}{}}}",
            "[".repeat(MAX_DEPTH - 1),
            "]".repeat(MAX_DEPTH - 1)
        );
        assert!(scan(shallow.as_bytes()).is_some());
        assert!(scan(b"{}").is_some());
        assert!(scan(br#"{"":0,"a":-1}"#).is_some());
    }

    fn tree() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-zé\"\\\\\n\u{1}\u{7f}/]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[a-z_é]{0,3}", inner, 0..5)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// A recognised text is its own canonical text; an integer-only value's canonical
        /// text is recognised unless it needs escapes or a long integer.
        #[test]
        fn recognised_means_canonical(
            state in tree(),
            other in tree(),
        ) {
            let value = json!({"state": state, "type": other});
            let text = value.to_string();
            let long = text
                .split(|c: char| !c.is_ascii_digit())
                .any(|digits| digits.len() > 18);
            match scan(text.as_bytes()) {
                Some(envelope) => {
                    prop_assert_eq!(reference(envelope.text), Some(text.clone()));
                }
                None => prop_assert!(text.contains('\\') || long, "{}", text),
            }
            // Any text built from the same pieces in another spelling: recognised only
            // when it is canonical.
            let pretty = serde_json::to_string_pretty(&value).expect("serialises");
            if let Some(envelope) = scan(pretty.as_bytes()) {
                prop_assert_eq!(reference(envelope.text), Some(pretty.clone()));
            }
        }
    }
}
