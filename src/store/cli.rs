//! `arrival store`: the durable receiver's commands (init, ingest, reconcile, show, drills).
//!
//! Bad input (a malformed JSON line, an unknown database scheme, an unreadable file) is an
//! [`InputError`] naming the source and the line; a database failure is reported the same
//! way, naming the database. Both end in exit status 2.

use crate::card::fixture::Scenario;
use crate::harness::timestamp::parse_rfc3339;
use crate::harness::InputError;
use crate::store::drill::{self, ConcurrentOptions, CrashOptions};
use crate::store::{
    unkeepable_name, Acknowledgement, AuthoritySnapshot, DbUrl, Incoming, Store, StoreError,
    StoreMutant,
};
use clap::Subcommand;
use serde_json::Value;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// The default database.
pub const DEFAULT_DB: &str = "sqlite:arrival.db";

/// `arrival store ...`
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Create or upgrade the schema and add a fixture's initial cards.
    Init {
        /// `sqlite:PATH` or `postgres://USER@HOST:PORT/DATABASE`.
        #[arg(long, default_value = DEFAULT_DB)]
        db: String,
        /// Add this fixture's `initial` cards (those not there yet).
        #[arg(long)]
        fixture: Option<PathBuf>,
        /// Drop every table of the store first.
        #[arg(long)]
        reset: bool,
    },
    /// Decide deliveries, one transaction each; one acknowledgement JSON line out per
    /// delivery, in order, each written after its commit.
    Ingest {
        /// `sqlite:PATH` or `postgres://USER@HOST:PORT/DATABASE`.
        #[arg(long, default_value = DEFAULT_DB)]
        db: String,
        /// JSON lines, each `{"delivery": N, "event": {...}}` or an event with a string
        /// `event_id` (standard input when neither this nor `--fixture` is given).
        #[arg(long, conflicts_with = "fixture")]
        file: Option<PathBuf>,
        /// Take the deliveries of this fixture, in array order.
        #[arg(long)]
        fixture: Option<PathBuf>,
        /// Deliveries per transaction (acknowledgements still only after the commit).
        #[arg(long, default_value_t = 1)]
        batch: usize,
        /// Run a deliberately broken store (for the drills): ack-before-commit,
        /// two-transactions or no-lock.
        #[arg(long)]
        mutant: Option<String>,
    },
    /// Apply authority snapshots in the default order's passes, one transaction each.
    Reconcile {
        /// `sqlite:PATH` or `postgres://USER@HOST:PORT/DATABASE`.
        #[arg(long, default_value = DEFAULT_DB)]
        db: String,
        /// Take the fixture's `authority` snapshots.
        #[arg(long, conflicts_with = "file")]
        fixture: Option<PathBuf>,
        /// JSON lines, each `{"object_id": ..., "version": N, "state": {...}}`.
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Print the cards, paused cards, holds, unresolved inputs and counters.
    Show {
        /// `sqlite:PATH` or `postgres://USER@HOST:PORT/DATABASE`.
        #[arg(long, default_value = DEFAULT_DB)]
        db: String,
        /// As JSON (the shape of replay's final report).
        #[arg(long)]
        json: bool,
    },
    /// Drills that kill receivers or run several at once, checked against the model.
    #[command(subcommand)]
    Drill(DrillCommand),
}

/// `arrival store drill ...`
#[derive(Debug, Subcommand)]
pub enum DrillCommand {
    /// Kill an ingesting receiver with SIGKILL at random points while a sender retries.
    Crash {
        /// The fixture whose deliveries are sent.
        fixture: PathBuf,
        /// How many kills in all.
        #[arg(long, default_value_t = 500)]
        kills: usize,
        /// The database (default: a fresh SQLite file in a temporary folder).
        #[arg(long)]
        db: Option<String>,
        /// Seed of the schedules and kill times.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Drill a deliberately broken store: ack-before-commit or two-transactions.
        #[arg(long)]
        mutant: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
        /// Also write the result as JUnit XML to this file (one suite, one case per check).
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
    },
    /// Run K receiver processes on one database, duplicates spread across them.
    Concurrent {
        /// The fixture whose deliveries are sent.
        fixture: PathBuf,
        /// Receiver processes per run.
        #[arg(long, default_value_t = 4)]
        receivers: usize,
        /// Runs, each on a fresh schema.
        #[arg(long, default_value_t = 200)]
        runs: usize,
        /// The database (default: a fresh SQLite file in a temporary folder).
        #[arg(long)]
        db: Option<String>,
        /// Seed of the splits.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Drill a deliberately broken store: no-lock.
        #[arg(long)]
        mutant: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
        /// Also write the result as JUnit XML to this file (one suite, one case per check).
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
    },
}

/// Reads `--db`.
pub fn db_url(text: &str) -> Result<DbUrl, InputError> {
    DbUrl::parse(text)
        .map_err(|message| InputError::invalid(Path::new("--db"), "command line", message))
}

/// A store failure as the command line reports it.
pub fn store_error(url: &DbUrl, error: StoreError) -> InputError {
    InputError::invalid(Path::new(&url.to_string()), "database", error.to_string())
}

fn mutant(text: Option<&str>) -> Result<Option<StoreMutant>, InputError> {
    text.map(|name| {
        name.parse()
            .map_err(|message| InputError::invalid(Path::new("--mutant"), "command line", message))
    })
    .transpose()
}

/// Opens an existing store (for everything but `init`): a SQLite file that does not
/// exist is bad input rather than a new, empty store.
fn open(url: &DbUrl) -> Result<Store, InputError> {
    if let DbUrl::Sqlite(path) = url {
        if !path.exists() {
            return Err(InputError::invalid(
                Path::new("--db"),
                "command line",
                format!(
                    "no store at {}: run `arrival store init --db {url}` first",
                    path.display()
                ),
            ));
        }
    }
    let mut store = Store::open(url).map_err(|error| store_error(url, error))?;
    store.migrate().map_err(|error| store_error(url, error))?;
    Ok(store)
}

fn print_line(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// Runs one `arrival store` command: `Ok(true)` when all is as expected, `Ok(false)` when
/// a drill found a broken promise.
pub fn run(command: StoreCommand) -> Result<bool, InputError> {
    match command {
        StoreCommand::Init { db, fixture, reset } => {
            let url = db_url(&db)?;
            // The fixture is read and checked before anything is written.
            let cards = match &fixture {
                Some(path) => {
                    let cards = initial_cards(&Scenario::load(path)?);
                    for (name, _, _) in &cards {
                        if let Some(why) = unkeepable_name(name) {
                            return Err(InputError::invalid(
                                path,
                                format!("initial: card id {}", shown_id(name)),
                                format!("a card id that {why}"),
                            ));
                        }
                    }
                    cards
                }
                None => Vec::new(),
            };
            let mut store = Store::open(&url).map_err(|error| store_error(&url, error))?;
            if reset {
                store.reset().map_err(|error| store_error(&url, error))?;
            }
            let version = store.migrate().map_err(|error| store_error(&url, error))?;
            let added = store
                .seed(&cards)
                .map_err(|error| store_error(&url, error))?;
            print_line(&format!(
                "{url}: schema version {version}, {added} initial card(s) added"
            ));
            Ok(true)
        }
        StoreCommand::Ingest {
            db,
            file,
            fixture,
            batch,
            mutant: broken,
        } => {
            let url = db_url(&db)?;
            let broken = mutant(broken.as_deref())?;
            if batch == 0 {
                return Err(InputError::invalid(
                    Path::new("--batch"),
                    "command line",
                    "`--batch` is the number of deliveries per transaction: at least 1",
                ));
            }
            let mut store = open(&url)?;
            let mut emit = |ack: &Acknowledgement| {
                print_line(&serde_json::to_string(ack).expect("acknowledgements serialise"));
            };
            let mut pending = Vec::with_capacity(batch);
            let mut flush = |store: &mut Store, pending: &mut Vec<Incoming>| {
                if pending.is_empty() {
                    return Ok(());
                }
                let result = match broken {
                    None => store.deliver_batch(pending, &mut emit),
                    Some(mutant) => {
                        crate::store::mutants::deliver_batch(store, mutant, pending, &mut emit)
                    }
                };
                pending.clear();
                result.map(|_| ()).map_err(|error| store_error(&url, error))
            };
            match fixture {
                Some(path) => {
                    for incoming in fixture_deliveries(&Scenario::load(&path)?) {
                        pending.push(incoming);
                        if pending.len() >= batch {
                            flush(&mut store, &mut pending)?;
                        }
                    }
                }
                None => {
                    let (source, reader): (PathBuf, Box<dyn BufRead>) = match &file {
                        Some(path) => {
                            let opened =
                                std::fs::File::open(path).map_err(|source| InputError::Io {
                                    file: path.clone(),
                                    source,
                                })?;
                            (path.clone(), Box::new(std::io::BufReader::new(opened)))
                        }
                        None => (PathBuf::from("stdin"), Box::new(std::io::stdin().lock())),
                    };
                    let mut lines = JsonLines::new(&source, reader);
                    loop {
                        // Bad input ends the run, but only after what came before it is
                        // committed and answered.
                        let incoming = match lines.next_delivery() {
                            Ok(Some(incoming)) => incoming,
                            Ok(None) => break,
                            Err(error) => {
                                flush(&mut store, &mut pending)?;
                                return Err(error);
                            }
                        };
                        pending.push(incoming);
                        if pending.len() >= batch {
                            flush(&mut store, &mut pending)?;
                        }
                    }
                }
            }
            flush(&mut store, &mut pending)?;
            Ok(true)
        }
        StoreCommand::Reconcile { db, fixture, file } => {
            let url = db_url(&db)?;
            let snapshots = match (fixture, file) {
                (Some(path), _) => {
                    let snapshots = authority(&Scenario::load(&path)?);
                    for (index, snapshot) in snapshots.iter().enumerate() {
                        if let Some(why) = unkeepable_name(&snapshot.object_id) {
                            return Err(InputError::invalid(
                                &path,
                                format!("authority[{index}].object_id"),
                                format!(
                                    "card id {} {why}; nothing was reconciled",
                                    shown_id(&snapshot.object_id)
                                ),
                            ));
                        }
                    }
                    snapshots
                }
                (None, Some(path)) => read_snapshots(&path)?,
                (None, None) => {
                    return Err(InputError::invalid(
                        Path::new("reconcile"),
                        "command line",
                        "give the snapshots with --fixture FIXTURE or --file LINES",
                    ))
                }
            };
            let mut store = open(&url)?;
            for report in store
                .reconcile_all(&snapshots)
                .map_err(|error| store_error(&url, error))?
            {
                print_line(&serde_json::to_string(&report).expect("reports serialise"));
            }
            Ok(true)
        }
        StoreCommand::Show { db, json } => {
            let url = db_url(&db)?;
            let mut store = open(&url)?;
            let report = store.report().map_err(|error| store_error(&url, error))?;
            if json {
                print_line(&serde_json::to_string_pretty(&report).expect("reports serialise"));
            } else {
                print_line(&render(&report));
            }
            Ok(true)
        }
        StoreCommand::Drill(DrillCommand::Crash {
            fixture,
            kills,
            db,
            seed,
            mutant: broken,
            json,
            junit,
        }) => {
            if let Some(file) = &junit {
                crate::harness::input::writable_file("--junit", file)?;
            }
            let options = CrashOptions {
                scenario: Scenario::load(&fixture)?,
                fixture,
                kills,
                db: db.as_deref().map(db_url).transpose()?,
                seed,
                mutant: mutant(broken.as_deref())?,
            };
            finish_drill(&drill::crash(&options)?, json, junit.as_deref())
        }
        StoreCommand::Drill(DrillCommand::Concurrent {
            fixture,
            receivers,
            runs,
            db,
            seed,
            mutant: broken,
            json,
            junit,
        }) => {
            if let Some(file) = &junit {
                crate::harness::input::writable_file("--junit", file)?;
            }
            let options = ConcurrentOptions {
                scenario: Scenario::load(&fixture)?,
                fixture,
                receivers: receivers.max(1),
                runs,
                db: db.as_deref().map(db_url).transpose()?,
                seed,
                mutant: mutant(broken.as_deref())?,
            };
            finish_drill(&drill::concurrent(&options)?, json, junit.as_deref())
        }
    }
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
        Some(Value::Number(number)) if number.is_i64() => number.as_i64(),
        Some(_) => {
            return Err(bad(
                "`received_at` must be an RFC 3339 string or Unix seconds".into(),
            ))
        }
    };
    Ok(Some(Incoming {
        delivery,
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
/// the start of the input is skipped.
pub struct JsonLines<'a> {
    source: &'a Path,
    reader: Box<dyn BufRead + 'a>,
    number: usize,
    buffer: Vec<u8>,
}

impl<'a> JsonLines<'a> {
    /// Lines of `reader`, named `source` in errors.
    pub fn new(source: &'a Path, reader: Box<dyn BufRead + 'a>) -> JsonLines<'a> {
        JsonLines {
            source,
            reader,
            number: 0,
            buffer: Vec::new(),
        }
    }

    /// The next line and its number (from 1), without its line ending; `None` at the end.
    pub fn next_line(&mut self) -> Result<Option<(usize, String)>, InputError> {
        self.buffer.clear();
        let read = self
            .reader
            .read_until(b'\n', &mut self.buffer)
            .map_err(|source| InputError::Io {
                file: self.source.to_owned(),
                source,
            })?;
        if read == 0 {
            return Ok(None);
        }
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
        Ok(Some((self.number, line.to_owned())))
    }

    /// The next delivery ([`parse_delivery`]), skipping blank lines; `None` at the end.
    pub fn next_delivery(&mut self) -> Result<Option<Incoming>, InputError> {
        while let Some((number, line)) = self.next_line()? {
            if let Some(incoming) = parse_delivery(self.source, number, &line)? {
                return Ok(Some(incoming));
            }
        }
        Ok(None)
    }
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
    let mut lines = JsonLines::new(path, Box::new(std::io::BufReader::new(file)));
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

/// The text form of `show`.
pub fn render(report: &crate::store::StoreReport) -> String {
    let mut out = format!("store ({})\n", report.backend);
    for (name, card) in &report.final_cards {
        out += &format!("  {name}: v{} {}\n", card.version, card.state);
    }
    out += &format!("paused: {:?}\n", report.paused);
    out += &format!("held: {:?}\n", report.held);
    out += &format!(
        "replacements: {} event, {} authority\n",
        report.replacements.event, report.replacements.authority
    );
    out += &format!("unresolved: {:?}", report.unresolved);
    out
}

/// Writes a drill's JUnit file if asked, prints its report, and says whether it passed.
fn finish_drill(
    report: &drill::DrillReport,
    json: bool,
    junit: Option<&std::path::Path>,
) -> Result<bool, InputError> {
    if let Some(file) = junit {
        crate::harness::junit::write_suite(file, &report.junit_suite())?;
    }
    if json {
        print_line(&serde_json::to_string_pretty(report).expect("reports serialise"));
    } else {
        print_line(&report.render());
    }
    Ok(report.passed)
}
