//! `Catalog::event_from_bytes` (envelope bytes in, the receiver's edge) gives exactly the
//! event `Catalog::event` gives for `serde_json::from_slice` of the same bytes: the same
//! content, symbols, state, version classification and `supported` flag, interned in the
//! same order, and fails exactly when serde_json does.
//!
//! The envelopes are generated as JSON text from a small tree with raw number literals
//! (integers, `-0`, floats, `-0.0`, exponents, integers beyond `u64` and `i64`), written
//! either as serde_json would write them (keys sorted, compact, canonical escapes: the fast
//! path) or with shuffled keys, random whitespace, `\u` escapes and duplicate keys (the
//! slow path), with every field of the envelope present, missing or of the wrong type.
//! Each case runs a sequence of such envelopes, with repeats in both spellings, through two
//! catalogs side by side, one per path.

use crate::util::SplitMix;
use arrival::card::wire::{Catalog, Event};
use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::Value;

/// A JSON tree whose numbers are kept as the literal text to write.
#[derive(Clone, Debug)]
enum Json {
    Null,
    Bool(bool),
    /// A number literal, written as is.
    Number(&'static str),
    Str(String),
    Array(Vec<Json>),
    /// Members in generation order; duplicates allowed (the text then repeats a key).
    Object(Vec<(String, Json)>),
}

const NUMBERS: &[&str] = &[
    "0",
    "3",
    "42",
    "-7",
    "100",
    "65536",
    "-0",
    "1",
    "-1",
    "7",
    "12",
    "-12",
    "12.0",
    "1.5",
    "0.0",
    "-0.0",
    "0.1",
    "1e30",
    "1E2",
    "1.0e2",
    "1e-300",
    "-1e-300",
    "100000000000000000000.0",
    "9999999999999999999",
    "-999999999999999999",
    "-9999999999999999999",
    "9223372036854775807",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "123456789012345678901234567890",
];

const STRINGS: &[&str] = &[
    "",
    "e-1",
    "e-2",
    "card-0",
    "card-1",
    "card.snapshot",
    "card.deleted",
    "2024-01-01T08:00:00Z",
    "2024-01-01T08:00:00+02:00",
    "yesterday",
    "s1",
    "changed",
    "é",
    "日本",
    "a\"b",
    "back\\slash",
    "tab\there",
    "line\nbreak",
    "\u{1}",
    "\u{7f}",
    "/",
];

const KEYS: &[&str] = &[
    "event_id",
    "object_id",
    "object_version",
    "occurred_at",
    "type",
    "state",
    "stage",
    "label",
    "",
    "a",
    "A",
    "é",
    "zz",
    "event_id ",
];

fn leaf() -> impl Strategy<Value = Json> {
    prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        prop::sample::select(NUMBERS).prop_map(Json::Number),
        prop::sample::select(STRINGS).prop_map(|text| Json::Str(text.to_owned())),
    ]
}

fn tree() -> impl Strategy<Value = Json> {
    leaf().prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Json::Array),
            vec((prop::sample::select(KEYS), inner), 0..4).prop_map(|members| {
                Json::Object(
                    members
                        .into_iter()
                        .map(|(key, value)| (key.to_owned(), value))
                        .collect(),
                )
            }),
        ]
    })
}

/// One envelope field: usually well typed, sometimes absent or of another type.
fn field(
    key: &'static str,
    good: BoxedStrategy<Json>,
) -> impl Strategy<Value = Option<(String, Json)>> {
    prop_oneof![
        6 => good.prop_map(move |value| Some((key.to_owned(), value))),
        1 => Just(None),
        1 => tree().prop_map(move |value| Some((key.to_owned(), value))),
    ]
}

fn string_of(texts: &'static [&'static str]) -> BoxedStrategy<Json> {
    prop::sample::select(texts)
        .prop_map(|text| Json::Str(text.to_owned()))
        .boxed()
}

fn envelope() -> impl Strategy<Value = Json> {
    let state = prop_oneof![
        vec(
            (
                prop::sample::select(&["stage", "label", "n", "w", "é", ""][..]),
                tree()
            ),
            0..4
        )
        .prop_map(|members| Json::Object(
            members
                .into_iter()
                .map(|(key, value)| (key.to_owned(), value))
                .collect()
        )),
        Just(Json::Object(vec![(
            "stage".to_owned(),
            Json::Str("s1".to_owned())
        )])),
    ]
    .boxed();
    (
        field(
            "event_id",
            string_of(&["e-1", "e-2", "e-3", "é", "a\"b", ""]),
        ),
        field("object_id", string_of(&["card-0", "card-1", "card\u{1}"])),
        field(
            "object_version",
            prop::sample::select(NUMBERS).prop_map(Json::Number).boxed(),
        ),
        field(
            "occurred_at",
            string_of(&["2024-01-01T08:00:00Z", "2024-01-01T08:00:00+02:00", "soon"]),
        ),
        field("type", string_of(&["card.snapshot", "card.deleted"])),
        field("state", state),
        vec((prop::sample::select(KEYS), tree()), 0..2),
    )
        .prop_map(
            |(event_id, object_id, version, occurred_at, kind, state, extra)| {
                let mut members: Vec<(String, Json)> =
                    [event_id, object_id, version, occurred_at, kind, state]
                        .into_iter()
                        .flatten()
                        .collect();
                members.extend(
                    extra
                        .into_iter()
                        .map(|(key, value)| (key.to_owned(), value)),
                );
                Json::Object(members)
            },
        )
}

/// How a tree is written.
#[derive(Clone, Copy, Debug)]
struct Style {
    /// As serde_json writes a parsed value: sorted keys (the last of duplicates), compact,
    /// canonical escapes.
    canonical: bool,
    /// Drives the noise of a non-canonical text.
    seed: u64,
}

struct Writer {
    style: Style,
    rng: SplitMix,
    out: String,
}

impl Writer {
    fn below(&mut self, bound: u64) -> u64 {
        self.rng.below(bound)
    }

    fn space(&mut self) {
        const SPACES: [&str; 6] = ["", "", "", " ", "\n\t", "\r\n  "];
        if !self.style.canonical {
            let index = self.below(SPACES.len() as u64) as usize;
            self.out.push_str(SPACES[index]);
        }
    }

    fn string(&mut self, text: &str) {
        if self.style.canonical || self.below(3) != 0 {
            self.out
                .push_str(&serde_json::to_string(text).expect("strings serialise"));
            return;
        }
        self.out.push('"');
        for ch in text.chars() {
            if self.below(2) == 0 {
                let mut units = [0u16; 2];
                for unit in ch.encode_utf16(&mut units) {
                    self.out.push_str(&format!("\\u{unit:04X}"));
                }
            } else {
                let quoted = serde_json::to_string(&ch.to_string()).expect("strings serialise");
                self.out.push_str(&quoted[1..quoted.len() - 1]);
            }
        }
        self.out.push('"');
    }

    fn value(&mut self, value: &Json) {
        self.space();
        match value {
            Json::Null => self.out.push_str("null"),
            Json::Bool(flag) => self.out.push_str(if *flag { "true" } else { "false" }),
            Json::Number(text) => self.out.push_str(text),
            Json::Str(text) => self.string(text),
            Json::Array(items) => {
                self.out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        self.out.push(',');
                    }
                    self.value(item);
                }
                self.space();
                self.out.push(']');
            }
            Json::Object(members) => {
                let mut members: Vec<&(String, Json)> = members.iter().collect();
                if self.style.canonical {
                    // serde_json keeps the last of duplicate keys, in key order.
                    let mut last = std::collections::BTreeMap::new();
                    for member in members {
                        last.insert(member.0.as_str(), member);
                    }
                    members = last.into_values().collect();
                } else {
                    for index in (1..members.len()).rev() {
                        let other = self.below(index as u64 + 1) as usize;
                        members.swap(index, other);
                    }
                }
                self.out.push('{');
                for (index, (key, item)) in members.into_iter().enumerate() {
                    if index > 0 {
                        self.out.push(',');
                    }
                    self.space();
                    self.string(key);
                    self.space();
                    self.out.push(':');
                    self.value(item);
                }
                self.space();
                self.out.push('}');
            }
        }
        self.space();
    }
}

fn write(value: &Json, style: Style) -> String {
    let mut writer = Writer {
        style,
        rng: SplitMix::new(style.seed),
        out: String::new(),
    };
    writer.value(value);
    writer.out
}

/// Both paths over the same bytes, each with its own catalog: equal results, and equal
/// interned text and states behind the ids.
fn same_event(slow: &mut Catalog, fast: &mut Catalog, bytes: &[u8]) -> Result<(), TestCaseError> {
    let expected: Result<Event, String> = serde_json::from_slice::<Value>(bytes)
        .map(|value| slow.event(&value))
        .map_err(|error| error.to_string());
    let got = fast
        .event_from_bytes(bytes)
        .map_err(|error| error.to_string());
    let text = String::from_utf8_lossy(bytes);
    // The byte identity is the one field the paths may differ in: the bytes path keeps
    // bytes that are not the canonical text as they came, and names the canonical text by
    // its content id.
    if let Ok(event) = &got {
        prop_assert_eq!(fast.bytes_text(event.bytes), &*text);
        prop_assert_eq!(
            event.canonical_bytes(),
            fast.content_text(event.content) == text
        );
    }
    let expected = match (&got, expected) {
        (Ok(got), Ok(event)) => Ok(Event {
            bytes: got.bytes,
            ..event
        }),
        (_, expected) => expected,
    };
    prop_assert_eq!(&got, &expected, "bytes: {}", text);
    if let Ok(event) = got {
        prop_assert_eq!(
            fast.content_text(event.content),
            slow.content_text(event.content)
        );
        if let Some(state) = event.state {
            prop_assert_eq!(fast.state_value(state), slow.state_value(state));
        }
        for sym in [event.event_id, event.object_id].into_iter().flatten() {
            prop_assert_eq!(fast.name(sym), slow.name(sym));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A sequence of envelopes, each written canonically or noisily (and some written both
    /// ways), gives the same events on both paths.
    #[test]
    fn bytes_and_value_paths_give_the_same_event(
        envelopes in vec((envelope(), any::<bool>(), any::<u64>(), any::<bool>()), 1..8),
    ) {
        let (mut slow, mut fast) = (Catalog::new(), Catalog::new());
        for (envelope, canonical, seed, twice) in &envelopes {
            let style = Style { canonical: *canonical, seed: *seed };
            same_event(&mut slow, &mut fast, write(envelope, style).as_bytes())?;
            if *twice {
                let other = Style { canonical: !*canonical, seed: seed.rotate_left(7) };
                same_event(&mut slow, &mut fast, write(envelope, other).as_bytes())?;
            }
        }
    }

    /// Damaged bytes (cut short, a byte replaced or appended) fail on both paths or give
    /// the same event on both.
    #[test]
    fn damaged_bytes_fail_alike(
        envelope in envelope(),
        canonical in any::<bool>(),
        seed in any::<u64>(),
        damage in 0u8..3,
        at in any::<prop::sample::Index>(),
        byte in prop::sample::select(&b"{}[]\",:0-. \x00\xff\\ea"[..]),
    ) {
        let mut bytes = write(&envelope, Style { canonical, seed }).into_bytes();
        let at = at.index(bytes.len() + 1);
        match damage {
            0 => bytes.truncate(at),
            1 if at < bytes.len() => bytes[at] = byte,
            _ => bytes.insert(at, byte),
        }
        let (mut slow, mut fast) = (Catalog::new(), Catalog::new());
        same_event(&mut slow, &mut fast, &bytes)?;
    }
}

#[test]
fn malformed_bytes_are_errors_on_both_paths() {
    let deep = format!("{{\"state\":{}1{}}}", "[".repeat(200), "]".repeat(200));
    let cases: Vec<&[u8]> = vec![
        b"",
        b"not json",
        b"{",
        b"{\"event_id\":\"e-1\"",
        b"{\"event_id\":\"e-1\"} x",
        b"{\"event_id\":\"e-1\"}{}",
        b"{\"event_id\":\"e-1\"},",
        b"{\"event_id\":\"e-\xff\"}",
        b"{\"event_id\":\"e-\x01\"}",
        b"{\"object_version\":01}",
        b"{\"object_version\":1.}",
        b"{\"object_version\":-}",
        b"{\"object_version\":1e400}",
        b"{\"state\":{\"a\":1,}}",
        b"{\"state\":{\"a\" 1}}",
        b"{\"a\":tru}",
        deep.as_bytes(),
    ];
    for bytes in cases {
        let mut catalog = Catalog::new();
        assert!(
            serde_json::from_slice::<Value>(bytes).is_err(),
            "{}",
            String::from_utf8_lossy(bytes)
        );
        assert!(
            catalog.event_from_bytes(bytes).is_err(),
            "{}",
            String::from_utf8_lossy(bytes)
        );
    }
}

#[test]
fn odd_but_valid_bytes_give_the_value_paths_event() {
    let cases: Vec<&[u8]> = vec![
        b"{\"event_id\":\"e-1\"} \n",
        b" {\"event_id\":\"e-1\"}",
        b"[1,2]",
        b"\"card.snapshot\"",
        b"{}",
        b"{\"\":1,\"event_id\":\"e-1\"}",
        b"{\"event_id\":\"e-1\",\"event_id\":\"e-2\"}",
        b"{\"object_version\":-0}",
        b"{\"object_version\":18446744073709551615}",
        b"{\"object_version\":18446744073709551616}",
        b"{\"object_version\":-5}",
        b"{\"state\":{\"x\":-0.0},\"type\":\"card.snapshot\"}",
        b"{\"state\":{\"x\":0.0},\"type\":\"card.snapshot\"}",
    ];
    let (mut slow, mut fast) = (Catalog::new(), Catalog::new());
    for bytes in cases {
        same_event(&mut slow, &mut fast, bytes).unwrap();
    }
}
