//! `arrival store ...`: the command line of the durable card receiver.
//!
//! Its commands: init, ingest, reconcile, show, and the crash and concurrency drills.
//! Bad input (a malformed JSON line, an unknown database scheme, an unreadable file) is an
//! [`InputError`] naming the source and the line (exit 2); a database that fails or does
//! not answer is an [`EnvironmentError`] naming the database (exit 3).

use super::{print_line, EnvironmentError, Error, Outcome};
use crate::card::fixture::Scenario;
use crate::harness::InputError;
use crate::store::drill::{self, ConcurrentOptions, CrashOptions};
use crate::store::input::{
    authority, db_url, fixture_deliveries, initial_cards, read_snapshots, shown_id, JsonLines,
    Next, DEFAULT_DB,
};
use crate::store::{
    unkeepable_name, Acknowledgement, DbUrl, Incoming, Store, StoreError, StoreMutant,
};
use clap::Subcommand;
use std::io::Write;
use std::path::{Path, PathBuf};

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
    /// Decide deliveries, one transaction each (or per `--batch`); one acknowledgement JSON
    /// line out per delivery, in order, each written after its commit.
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
        /// At most this many deliveries per transaction (acknowledgements still only after
        /// the commit). A batch groups only lines already arrived: when no further line is
        /// ready on the input, the store commits and answers what it has.
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
    /// Speak the JSON-lines conformance protocol on standard input and output (a SQLite
    /// file in the data directory `start` names), for `arrival conform`.
    Stdio {
        /// Run a deliberately broken store: ack-before-commit or two-transactions.
        #[arg(long)]
        mutant: Option<String>,
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
        /// The receivers' `ingest --batch`: at most this many deliveries per transaction.
        #[arg(long, default_value_t = 1)]
        batch: usize,
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

/// A store failure as the command line reports it: a card id the store cannot keep is bad
/// input; anything else the database said, or a database that does not answer, is the
/// environment's failure, naming the database.
pub fn store_error(url: &DbUrl, error: StoreError) -> Error {
    match error {
        StoreError::Unkeepable(_) => {
            InputError::invalid(Path::new(&url.to_string()), "database", error.to_string()).into()
        }
        StoreError::Db(_) | StoreError::Corrupt(_) => {
            EnvironmentError::new(format!("database {url}"), error).into()
        }
    }
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
fn open(url: &DbUrl) -> Result<Store, Error> {
    if let DbUrl::Sqlite(path) = url {
        if !path.exists() {
            return Err(InputError::invalid(
                Path::new("--db"),
                "command line",
                format!(
                    "no store at {}: run `arrival store init --db {url}` first",
                    path.display()
                ),
            )
            .into());
        }
    }
    let mut store = Store::open(url).map_err(|error| store_error(url, error))?;
    store.migrate().map_err(|error| store_error(url, error))?;
    Ok(store)
}

/// Runs one `arrival store` command: `Ok(true)` when all is as expected, `Ok(false)` when
/// a drill found a broken promise.
pub fn run(command: StoreCommand) -> Outcome {
    match command {
        StoreCommand::Init { db, fixture, reset } => init(&db, fixture.as_deref(), reset),
        StoreCommand::Ingest {
            db,
            file,
            fixture,
            batch,
            mutant: broken,
        } => ingest(&db, file, fixture, batch, broken.as_deref()),
        StoreCommand::Reconcile { db, fixture, file } => reconcile(&db, fixture, file),
        StoreCommand::Show { db, json } => show(&db, json),
        StoreCommand::Stdio { mutant: broken } => stdio(broken.as_deref()),
        StoreCommand::Drill(command) => run_drill(command),
    }
}

/// `store stdio`: the conformance protocol until standard input ends; a store failure
/// ends the process (a crash, as the conformance run sees it).
fn stdio(broken: Option<&str>) -> Outcome {
    let broken = mutant(broken)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    crate::store::stdio::serve(std::io::stdin().lock(), &mut out, broken)
        .map_err(|message| EnvironmentError::new("store stdio", message))?;
    Ok(true)
}

/// `store init`: the schema, and a fixture's initial cards.
fn init(db: &str, fixture: Option<&Path>, reset: bool) -> Outcome {
    let url = db_url(db)?;
    // The fixture is read and checked before anything is written.
    let cards = match fixture {
        Some(path) => {
            let cards = initial_cards(&Scenario::load(path)?);
            for (name, _, _) in &cards {
                if let Some(why) = unkeepable_name(name) {
                    return Err(InputError::invalid(
                        path,
                        format!("initial: card id {}", shown_id(name)),
                        format!("a card id that {why}"),
                    )
                    .into());
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

/// Deliveries decided in batches of at most `batch`, each acknowledged after its commit.
struct Batcher {
    url: DbUrl,
    store: Store,
    broken: Option<StoreMutant>,
    batch: usize,
    pending: Vec<Incoming>,
}

impl Batcher {
    fn push(&mut self, incoming: Incoming) -> Result<(), Error> {
        self.pending.push(incoming);
        if self.pending.len() >= self.batch {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Error> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut unwritten = 0;
        let mut emit = |ack: &Acknowledgement| {
            let line = serde_json::to_string(ack).expect("acknowledgements serialise") + "\n";
            let mut out = std::io::stdout().lock();
            if out
                .write_all(line.as_bytes())
                .and_then(|()| out.flush())
                .is_err()
            {
                unwritten += 1;
            }
        };
        let result = match self.broken {
            None => self.store.deliver_batch(&self.pending, &mut emit),
            Some(mutant) => crate::store::mutants::deliver_batch(
                &mut self.store,
                mutant,
                &self.pending,
                &mut emit,
            ),
        };
        self.pending.clear();
        result.map_err(|error| store_error(&self.url, error))?;
        if unwritten > 0 {
            // The sender can no longer hear answers: stop rather than decide more of what it
            // will send again (those decided are committed; a resend is a duplicate).
            return Err(EnvironmentError::new(
                "standard output",
                format!(
                    "{unwritten} acknowledgement(s) could not be written (the reader closed the \
                     output); their deliveries are committed, and a resend is answered as a \
                     duplicate"
                ),
            )
            .into());
        }
        Ok(())
    }
}

/// `--batch` must be at least 1.
fn batch_size(batch: usize) -> Result<(), InputError> {
    match batch {
        0 => Err(InputError::invalid(
            Path::new("--batch"),
            "command line",
            "`--batch` is the number of deliveries per transaction: at least 1",
        )),
        _ => Ok(()),
    }
}

/// `store ingest`: deliveries from a fixture, a file of JSON lines or standard input.
fn ingest(
    db: &str,
    file: Option<PathBuf>,
    fixture: Option<PathBuf>,
    batch: usize,
    broken: Option<&str>,
) -> Outcome {
    let url = db_url(db)?;
    let broken = mutant(broken)?;
    batch_size(batch)?;
    let store = open(&url)?;
    let mut batcher = Batcher {
        url,
        store,
        broken,
        batch,
        // Grown as lines come: a batch size is a limit, not a size to set aside.
        pending: Vec::with_capacity(batch.min(1024)),
    };
    match fixture {
        Some(path) => {
            for incoming in fixture_deliveries(&Scenario::load(&path)?) {
                batcher.push(incoming)?;
            }
        }
        None => ingest_lines(&mut batcher, file)?,
    }
    batcher.flush()?;
    Ok(true)
}

/// Ingests JSON lines from `file` or standard input. A batch takes only lines that have
/// already arrived: before a read that would wait for the writer, what is pending is
/// committed and answered (a sender that waits for each answer is answered at once).
fn ingest_lines(batcher: &mut Batcher, file: Option<PathBuf>) -> Result<(), Error> {
    let source = file.clone().unwrap_or_else(|| PathBuf::from("stdin"));
    let opened = match file {
        Some(path) => std::fs::File::open(&path).map(|file| JsonLines::new(&source, file)),
        None => JsonLines::stdin(&source),
    };
    let mut lines = opened.map_err(|source_error| InputError::Io {
        file: source.clone(),
        source: source_error,
    })?;
    loop {
        // Wait for the writer only with nothing held back.
        let may_wait = batcher.pending.is_empty();
        // Bad input ends the run, but only after what came before it is committed and
        // answered.
        match lines.next_delivery(may_wait) {
            Ok(Next::Line(Some(incoming))) => batcher.push(incoming)?,
            Ok(Next::Line(None)) => {}
            Ok(Next::WouldWait) => batcher.flush()?,
            Ok(Next::End) => return Ok(()),
            Err(error) => {
                batcher.flush()?;
                return Err(error.into());
            }
        }
    }
}

/// `store reconcile`: authority snapshots from a fixture or a file of JSON lines.
fn reconcile(db: &str, fixture: Option<PathBuf>, file: Option<PathBuf>) -> Outcome {
    let url = db_url(db)?;
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
                    )
                    .into());
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
            )
            .into())
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

/// `store show`.
fn show(db: &str, json: bool) -> Outcome {
    let url = db_url(db)?;
    let mut store = open(&url)?;
    let report = store.report().map_err(|error| store_error(&url, error))?;
    if json {
        print_line(&serde_json::to_string_pretty(&report).expect("reports serialise"));
    } else {
        print_line(&render(&report));
    }
    Ok(true)
}

/// `store drill crash` and `store drill concurrent`.
fn run_drill(command: DrillCommand) -> Outcome {
    match command {
        DrillCommand::Crash {
            fixture,
            kills,
            db,
            seed,
            mutant: broken,
            batch,
            json,
            junit,
        } => {
            if let Some(file) = &junit {
                crate::harness::input::writable_file("--junit", file)?;
            }
            batch_size(batch)?;
            let options = CrashOptions {
                scenario: Scenario::load(&fixture)?,
                fixture,
                kills,
                db: db.as_deref().map(db_url).transpose()?,
                seed,
                mutant: mutant(broken.as_deref())?,
                batch,
            };
            finish_drill(&drill::crash(&options)?, json, junit.as_deref())
        }
        DrillCommand::Concurrent {
            fixture,
            receivers,
            runs,
            db,
            seed,
            mutant: broken,
            json,
            junit,
        } => {
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
fn finish_drill(report: &drill::DrillReport, json: bool, junit: Option<&Path>) -> Outcome {
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
