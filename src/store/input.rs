//! What the store reads: fixtures, `ingest` lines and snapshot lines, as store inputs.
//!
//! A fixture's cards, deliveries and authority as the store takes them, `ingest`'s JSON
//! lines and `reconcile`'s snapshot lines; each bad line is an [`InputError`] naming the
//! source and the line.

use crate::card::fixture::Scenario;
use crate::harness::timestamp::parse_rfc3339;
use crate::harness::InputError;
use crate::store::{unkeepable_name, AuthoritySnapshot, DbUrl, Incoming};
use serde_json::Value;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::Path;

/// The default database.
pub const DEFAULT_DB: &str = "sqlite:arrival.db";

/// Reads `--db`.
pub fn db_url(text: &str) -> Result<DbUrl, InputError> {
    DbUrl::parse(text)
        .map_err(|message| InputError::invalid(Path::new("--db"), "command line", message))
}

/// A fixture's initial cards, as the store seeds them.
pub fn initial_cards(scenario: &Scenario) -> Vec<(String, u64, Value)> {
    scenario
        .raw
        .initial
        .iter()
        .map(|(name, card)| {
            (
                name.clone(),
                card.version,
                Value::Object(card.state.clone()),
            )
        })
        .collect()
}

/// A fixture's deliveries, in array order.
pub fn fixture_deliveries(scenario: &Scenario) -> Vec<Incoming> {
    scenario
        .raw
        .deliveries
        .iter()
        .map(|delivery| Incoming {
            delivery: delivery.delivery,
            numbered: true,
            received_at: delivery.received_at.as_deref().and_then(parse_rfc3339),
            event: delivery.event.clone(),
        })
        .collect()
}

/// A fixture's authority snapshots, in file order.
pub fn authority(scenario: &Scenario) -> Vec<AuthoritySnapshot> {
    scenario
        .raw
        .authority
        .iter()
        .map(|snapshot| AuthoritySnapshot {
            object_id: snapshot.object_id.clone(),
            version: snapshot.version,
            state: Value::Object(snapshot.state.clone()),
        })
        .collect()
}

/// The keys of a delivery wrapper. `ack_lost` is accepted (and ignored) so a fixture's
/// delivery entry can be pasted as a line.
pub const WRAPPER_KEYS: [&str; 4] = ["delivery", "event", "received_at", "ack_lost"];

/// One JSON line of `ingest`; blank lines are skipped (`None`). A line is one of two
/// things, told apart by its keys alone:
///
/// - a **wrapper**, any object with at least one key of [`WRAPPER_KEYS`]: then it has
///   `delivery` (an integer, 0 to 2^32-1) and `event`, optionally `received_at` (RFC 3339
///   or Unix seconds) and `ack_lost`, and no other key;
/// - a **raw event**, any other object: it must carry a string `event_id`, which is its
///   identity; the line number stands in as its delivery number, which then only labels
///   the acknowledgement.
///
/// An input without a string `event_id` has no identity but its delivery number, so it
/// must come in a wrapper that gives one: a line number would repeat in the next file.
/// Anything else (not JSON, not an object, a wrapper with a missing or unknown key) is bad
/// input naming the source and the line.
pub fn parse_delivery(
    source: &Path,
    line_number: usize,
    line: &str,
) -> Result<Option<Incoming>, InputError> {
    if line.trim().is_empty() {
        return Ok(None);
    }
    let bad = |message: String| InputError::invalid(source, format!("line {line_number}"), message);
    let value = parse_line(line).map_err(bad)?;
    let Some(object) = value.as_object() else {
        return Err(bad(
            "not a JSON object: a line is {\"delivery\": N, \"event\": {...}} or an event \
             object with a string `event_id`"
                .into(),
        ));
    };
    let wrapped = object
        .keys()
        .any(|key| WRAPPER_KEYS.contains(&key.as_str()));
    if !wrapped {
        if !object.get("event_id").is_some_and(Value::is_string) {
            return Err(bad(
                "an event without a string `event_id` needs a wrapper with its delivery \
                 number: {\"delivery\": N, \"event\": {...}}"
                    .into(),
            ));
        }
        let delivery = u32::try_from(line_number)
            .map_err(|_| bad("too many lines for a delivery number".into()))?;
        return Ok(Some(Incoming {
            delivery,
            numbered: false,
            received_at: None,
            event: value,
        }));
    }
    if let Some(unknown) = object
        .keys()
        .find(|key| !WRAPPER_KEYS.contains(&key.as_str()))
    {
        return Err(bad(format!(
            "unknown key `{unknown}` in a delivery wrapper (its keys are delivery, event, \
             received_at, ack_lost)"
        )));
    }
    let Some(event) = object.get("event") else {
        return Err(bad("a delivery wrapper without `event`".into()));
    };
    let delivery = match object.get("delivery") {
        None => return Err(bad("a delivery wrapper without `delivery`".into())),
        Some(number) => number
            .as_u64()
            .and_then(|number| u32::try_from(number).ok())
            .ok_or_else(|| bad("`delivery` must be an integer from 0 to 4294967295".into()))?,
    };
    if !matches!(object.get("ack_lost"), None | Some(Value::Bool(_))) {
        return Err(bad("`ack_lost` must be true or false".into()));
    }
    let received_at = match object.get("received_at") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(
            parse_rfc3339(text)
                .ok_or_else(|| bad(format!("`received_at` is not RFC 3339: {text}")))?,
        ),
        // `i64::MIN` is a record's "no receive time" (`RecordedAt`); no real time is there.
        Some(Value::Number(number)) if number.as_i64().is_some_and(|at| at != i64::MIN) => {
            number.as_i64()
        }
        Some(Value::Number(_)) => {
            return Err(bad(format!(
                "`received_at` in Unix seconds must be an integer from {} to {}",
                i64::MIN + 1,
                i64::MAX
            )))
        }
        Some(_) => {
            return Err(bad(
                "`received_at` must be an RFC 3339 string or Unix seconds".into(),
            ))
        }
    };
    Ok(Some(Incoming {
        delivery,
        numbered: true,
        received_at,
        event: event.clone(),
    }))
}

/// A card id as an error message shows it: quoted, cut after 40 characters.
pub fn shown_id(name: &str) -> String {
    let mut shown: String = name.chars().take(40).collect();
    let cut = shown.len() < name.len();
    shown = format!("{shown:?}");
    if cut {
        shown += "...";
    }
    shown
}

/// Reads JSON lines one at a time, as bytes: a line that is not UTF-8 is bad input naming
/// that line (the lines before it are already handed out), and a UTF-8 byte order mark at
/// the start of the input is skipped. A caller that holds answers back can ask for the
/// next line only if it is there without waiting for the writer
/// ([`JsonLines::next_delivery`] with `may_wait` false), so that `ingest --batch` never
/// waits for input, a whole line or the rest of one, while answers are held back.
pub struct JsonLines<'a> {
    source: &'a Path,
    reader: BufReader<File>,
    number: usize,
    /// The line being read: bytes up to its newline, kept across a [`Next::WouldWait`].
    buffer: Vec<u8>,
}

/// What reading on gave.
#[derive(Debug, PartialEq)]
pub enum Next<T> {
    /// A line (or what it was read as).
    Line(T),
    /// The end of the input.
    End,
    /// The next bytes are not there yet: reading on would wait for the writer.
    WouldWait,
}

impl<'a> JsonLines<'a> {
    /// Lines of `file`, named `source` in errors.
    pub fn new(source: &'a Path, file: File) -> JsonLines<'a> {
        JsonLines {
            source,
            reader: BufReader::new(file),
            number: 0,
            buffer: Vec::new(),
        }
    }

    /// Lines of standard input. The file is a duplicate of descriptor 0, read without
    /// the standard library's own stdin buffer, so that what is buffered is all in
    /// this reader's view.
    pub fn stdin(source: &'a Path) -> std::io::Result<JsonLines<'a>> {
        let file = File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
        Ok(JsonLines::new(source, file))
    }

    /// The next line and its number (from 1), without its line ending; `None` at the end.
    pub fn next_line(&mut self) -> Result<Option<(usize, String)>, InputError> {
        match self.read_line(true)? {
            Next::Line(line) => Ok(Some(line)),
            Next::End | Next::WouldWait => Ok(None),
        }
    }

    /// The next line as a delivery ([`parse_delivery`]): `None` for a blank line. With
    /// `may_wait` false, [`Next::WouldWait`] instead of waiting for the writer (a partial
    /// line read so far is kept for the next call).
    pub fn next_delivery(&mut self, may_wait: bool) -> Result<Next<Option<Incoming>>, InputError> {
        Ok(match self.read_line(may_wait)? {
            Next::Line((number, line)) => Next::Line(parse_delivery(self.source, number, &line)?),
            Next::End => Next::End,
            Next::WouldWait => Next::WouldWait,
        })
    }

    /// Reads up to the next newline (or the end), refilling the buffer as needed; before a
    /// refill that would wait, gives [`Next::WouldWait`] unless `may_wait`.
    fn read_line(&mut self, may_wait: bool) -> Result<Next<(usize, String)>, InputError> {
        let io = |source| InputError::Io {
            file: self.source.to_owned(),
            source,
        };
        loop {
            if self.reader.buffer().is_empty()
                && !may_wait
                && !ready_now(self.reader.get_ref().as_fd())
            {
                return Ok(Next::WouldWait);
            }
            let chunk = self.reader.fill_buf().map_err(io)?;
            if chunk.is_empty() {
                if self.buffer.is_empty() {
                    return Ok(Next::End);
                }
                break;
            }
            match chunk.iter().position(|&byte| byte == b'\n') {
                Some(at) => {
                    self.buffer.extend_from_slice(&chunk[..=at]);
                    self.reader.consume(at + 1);
                    break;
                }
                None => {
                    let taken = chunk.len();
                    self.buffer.extend_from_slice(chunk);
                    self.reader.consume(taken);
                }
            }
        }
        let line = self.decode_line();
        self.buffer.clear();
        line.map(Next::Line)
    }

    /// The buffered line, numbered, without its line ending or a leading byte order mark.
    fn decode_line(&mut self) -> Result<(usize, String), InputError> {
        self.number += 1;
        let mut bytes = self.buffer.as_slice();
        if self.number == 1 {
            bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
        }
        bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        let line = std::str::from_utf8(bytes).map_err(|error| {
            InputError::invalid(
                self.source,
                format!("line {}", self.number),
                format!(
                    "not UTF-8 (an invalid byte at byte {} of the line)",
                    error.valid_up_to() + 1
                ),
            )
        })?;
        Ok((self.number, line.to_owned()))
    }
}

/// Whether a read of `fd` would return at once (bytes, the end, or an error) rather than
/// wait: `poll` with no timeout (`POLLHUP` and `POLLERR` count, as `poll` always reports
/// them).
fn ready_now(fd: BorrowedFd) -> bool {
    let mut poll = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, borrowed for the call; a zero timeout never blocks.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    // An error of poll itself (-1) counts as not ready: the caller answers what it holds
    // first, and the read that follows reports whatever is wrong.
    ready > 0
}

/// One line's JSON value. An object with the same key twice (at any depth) is refused:
/// `serde_json` would keep the last one silently, and which one the sender meant is
/// anyone's guess.
pub fn parse_line(line: &str) -> Result<Value, String> {
    serde_json::from_str::<UniqueKeys>(line)
        .map(|value| value.0)
        .map_err(|error| format!("not valid JSON: {error}"))
}

/// A JSON value read like `serde_json`'s own, but refusing an object with a repeated key.
struct UniqueKeys(Value);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueKeysVisitor)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, value: bool) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys(Value::Bool(value)))
    }
    fn visit_i64<E>(self, value: i64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys(Value::from(value)))
    }
    fn visit_u64<E>(self, value: u64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys(Value::from(value)))
    }
    fn visit_f64<E>(self, value: f64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys(
            serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number),
        ))
    }
    fn visit_str<E>(self, value: &str) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys(Value::String(value.to_owned())))
    }
    fn visit_string<E>(self, value: String) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys(Value::String(value)))
    }
    fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys(Value::Null))
    }
    fn visit_none<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys(Value::Null))
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<UniqueKeys, D::Error> {
        serde::Deserialize::deserialize(d)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueKeys, A::Error> {
        let mut items = Vec::new();
        while let Some(UniqueKeys(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(UniqueKeys(Value::Array(items)))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!(
                    "the key `{key}` appears twice in one object"
                )));
            }
            let UniqueKeys(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(UniqueKeys(Value::Object(object)))
    }
}

/// Authority snapshots as JSON lines.
pub fn read_snapshots(path: &Path) -> Result<Vec<AuthoritySnapshot>, InputError> {
    let file = std::fs::File::open(path).map_err(|source| InputError::Io {
        file: path.to_owned(),
        source,
    })?;
    let mut lines = JsonLines::new(path, file);
    let mut snapshots = Vec::new();
    // Every line is read and checked before the caller writes anything.
    while let Some((number, line)) = lines.next_line()? {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| InputError::invalid(path, format!("line {number}"), message);
        let value = parse_line(&line).map_err(bad)?;
        let snapshot: AuthoritySnapshot = serde_json::from_value(value)
            .map_err(|error| bad(crate::harness::input::plain_types(&error.to_string())))?;
        if !snapshot.state.is_object() {
            return Err(bad("`state` must be a JSON object".into()));
        }
        if let Some(why) = unkeepable_name(&snapshot.object_id) {
            return Err(bad(format!(
                "`object_id`: card id {} {why}; nothing was reconciled",
                shown_id(&snapshot.object_id)
            )));
        }
        snapshots.push(snapshot);
    }
    Ok(snapshots)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Receive times at the edges of what a wrapper accepts: each line and the error's
    /// words, or `None` where the line is accepted.
    #[test]
    fn receive_times_in_unix_seconds_are_integers_above_i64_min() {
        let cases = [
            (
                r#"{"delivery": 1, "event": {}, "received_at": -9223372036854775807}"#,
                None,
            ),
            (r#"{"delivery": 1, "event": {}, "received_at": 0}"#, None),
            (
                r#"{"delivery": 1, "event": {}, "received_at": -9223372036854775808}"#,
                Some("must be an integer from -9223372036854775807"),
            ),
            (
                r#"{"delivery": 1, "event": {}, "received_at": 1.5}"#,
                Some("must be an integer from -9223372036854775807"),
            ),
            (
                r#"{"delivery": 1, "event": {}, "received_at": true}"#,
                Some("RFC 3339 string or Unix seconds"),
            ),
        ];
        for (line, refused) in cases {
            let parsed = parse_delivery(Path::new("in.jsonl"), 3, line);
            match refused {
                None => assert!(parsed.is_ok(), "{line}: {parsed:?}"),
                Some(words) => {
                    let error = parsed.expect_err(line).to_string();
                    assert!(
                        error.contains("in.jsonl") && error.contains("line 3"),
                        "{error}"
                    );
                    assert!(error.contains(words), "{line}: {error}");
                }
            }
        }
    }
}
