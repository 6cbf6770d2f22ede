//! `arrival pipeline ...`: the command line of the real facts pipeline.
//!
//! Its commands: init, serve, consume, status, run, the hidden consumer step, drill, load; the
//! operator's (applications, conflicts, quarantine) are [`super::operator`]'s.
//! Bad input is an [`InputError`] (exit 2); Redis, the inbox database, a port, the tokio
//! runtime or a child process failing is an [`EnvironmentError`](super::EnvironmentError) (exit 3); a run whose
//! expectation or drill fails is `Ok(false)` (exit 1).

pub use super::inbox::RedisArgs;
use super::inbox::{env_error, redis_url};
use super::{print, Error, Outcome};
use crate::facts::mutants::Mutant;
use crate::harness::InputError;
use crate::pipeline::consume::SelfKill;
use crate::pipeline::consumer::{Consumer, ConsumerOptions, Faults, NoFaults, Point, StepMode};
use crate::pipeline::drill::{DrillName, DrillOptions, DrillReport};
use crate::pipeline::ingress::{self, ServeOptions};
use crate::pipeline::load::{LoadOptions, LoadResult};
use crate::pipeline::rate_limit::RateLimit;
use crate::pipeline::server::ConnectionLimits;
use crate::pipeline::sql::InboxAt;
use crate::pipeline::store as pstore;
use clap::{Args, Subcommand};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `arrival pipeline ...`.
#[derive(Subcommand, Debug)]
pub enum PipelineCommand {
    /// Create a new inbox database, register a facts fixture's applications and write its
    /// keys to a keys file (an existing `--db` is refused).
    Init {
        /// The inbox database (created; must not exist).
        #[arg(long, env = "ARRIVAL_DB", value_parser = super::inbox::inbox_at)]
        db: crate::pipeline::sql::InboxAt,
        /// A facts fixture whose `applications` and `secrets` to use.
        #[arg(long)]
        fixture: PathBuf,
        /// Where to write the keys file (`{"finance": [...], "contracts": [...]}`), mode 0600.
        #[arg(long)]
        keys_out: PathBuf,
    },
    /// Run ingress and consumers until SIGTERM (then finish in-flight entries, exit 0);
    /// SIGHUP reads the keys file again.
    Serve(ServeArgs),
    /// A drill target: `serve` running a wrong pipeline (`--mutant NAME`, required), for
    /// checking that a test suite or `arrival conform` catches it. Never production: it
    /// says so at start, on stderr and in every log line's target.
    ServeWrong(ServeArgs),
    /// Run consumers only, no ingress, until SIGTERM (each finishes its batch, then exit 0).
    ///
    /// More consumer processes beside `serve`, on the same inbox and group. Its consumers
    /// are named `<host>-<pid>-<index>`, as `serve` names its own, so a restarted process
    /// takes a new name and its predecessor's pending entries are taken over
    /// (`XAUTOCLAIM`) once idle for `--min-idle-ms`.
    Consume {
        /// The inbox: an SQLite file, or postgres://USER@HOST:PORT/DATABASE.
        #[arg(long, env = "ARRIVAL_DB", value_parser = super::inbox::inbox_at)]
        db: InboxAt,
        /// Redis, stream and group.
        #[command(flatten)]
        redis: RedisArgs,
        /// How many consumers (threads of this process).
        #[arg(long, default_value_t = 2)]
        consumers: usize,
        /// Entries per batch (one transaction per batch).
        #[arg(long, default_value_t = 16)]
        count: usize,
        /// Take over entries pending longer than this (ms).
        #[arg(long, default_value_t = 30_000)]
        min_idle_ms: u64,
        /// Deliveries before an unprocessable entry is dead-lettered.
        #[arg(long, default_value_t = 3)]
        max_deliveries: u32,
        /// SQLite busy timeout (ms).
        #[arg(long, default_value_t = pstore::DEFAULT_BUSY_TIMEOUT_MS)]
        busy_timeout_ms: u64,
        /// Log lines (one per batch, on stderr) as `text` or `json`.
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
        /// The process drills' faults (hidden).
        #[command(flatten)]
        drill: ConsumeDrillArgs,
    },
    /// Print the inbox: facts, counters, READY per application.
    Status {
        /// The inbox: an SQLite file, or postgres://USER@HOST:PORT/DATABASE.
        #[arg(long, env = "ARRIVAL_DB", value_parser = super::inbox::inbox_at)]
        db: crate::pipeline::sql::InboxAt,
        /// As JSON.
        #[arg(long)]
        json: bool,
        /// Also read this stream (Redis from `ARRIVAL_REDIS_URL`): entries not yet
        /// acknowledged by `--group` (pending or not yet delivered) and dead letters.
        #[arg(long)]
        stream: Option<String>,
        /// The consumer group whose pending entries `--stream` counts.
        #[arg(long, default_value = "arrival-inbox")]
        group: String,
        /// Redis URL for `--stream`.
        #[arg(
            long,
            env = "ARRIVAL_REDIS_URL",
            default_value = "redis://127.0.0.1:6379"
        )]
        redis_url: String,
    },
    /// Register, upgrade or terminate an application (one transaction each).
    #[command(subcommand)]
    Applications(super::operator::ApplicationsCommand),
    /// List conflicts, or resolve one (a person's decision, kept with its reason).
    #[command(subcommand)]
    Conflicts(super::operator::ConflictsCommand),
    /// List quarantined entries, or expire those older than the quarantine period.
    #[command(subcommand)]
    Quarantine(super::operator::QuarantineCommand),
    /// The receipts of answered requests, refusals included (newest last).
    Receipts {
        /// The inbox: an SQLite file, or postgres://USER@HOST:PORT/DATABASE.
        #[arg(long, env = "ARRIVAL_DB", value_parser = super::inbox::inbox_at)]
        db: crate::pipeline::sql::InboxAt,
        /// Only this event's, `TENANT/SOURCE/EVENT_ID`.
        #[arg(long)]
        event: Option<String>,
        /// At most this many (the newest).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stream retention: remove the entries every group has acknowledged that are older
    /// than the retention period.
    Trim {
        /// Redis and the stream (every group of the stream counts).
        #[command(flatten)]
        redis: RedisArgs,
        /// Keep entries younger than this, acknowledged or not (seconds, 0 or more).
        #[arg(long, default_value_t = 7 * 24 * 3600, value_parser = clap::value_parser!(i64).range(0..))]
        retention_seconds: i64,
        /// Also remove dead letters older than this (seconds); kept when left out, since a
        /// dead letter waits for a person.
        #[arg(long, value_parser = clap::value_parser!(i64).range(0..))]
        dead_letter_retention_seconds: Option<i64>,
        /// Also delete the inbox's receipts older than this (seconds); needs `--db`.
        #[arg(long, requires = "db", value_parser = clap::value_parser!(i64).range(0..))]
        receipts_retention_seconds: Option<i64>,
        /// The inbox whose receipts to trim.
        #[arg(long, env = "ARRIVAL_DB", value_parser = super::inbox::inbox_at)]
        db: Option<InboxAt>,
    },
    /// List, replay or discard dead letters (each action kept in the inbox).
    #[command(subcommand)]
    DeadLetters(super::operator::DeadLettersCommand),
    /// Why an application is (not) READY, or where an event went: receipts, stream
    /// entries, deliveries, verdicts, facts, conflicts, quarantine, dead letters, READY history.
    Explain(super::explain::ExplainArgs),
    /// The older spelling of `applications upgrade`.
    #[command(hide = true)]
    Upgrade {
        /// The inbox and the application.
        #[command(flatten)]
        target: super::operator::Target,
        /// The new material version.
        #[arg(long)]
        material_version: u64,
    },
    /// Play a facts fixture against real HTTP, Redis and SQLite; report like `replay`.
    Run {
        /// The facts fixture.
        fixture: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Redis URL.
        #[arg(
            long,
            env = "ARRIVAL_REDIS_URL",
            value_parser = redis_url,
            default_value = "redis://127.0.0.1:6379"
        )]
        redis_url: String,
        /// Run a wrong pipeline (a facts mutant's name).
        #[arg(long)]
        mutant: Option<String>,
        /// The inbox to run on: a new SQLite file in a temporary folder when left out, or a
        /// new, empty PostgreSQL database (postgres://USER@HOST:PORT/DATABASE).
        #[arg(long, value_parser = super::inbox::inbox_at)]
        db: Option<InboxAt>,
    },
    /// One consumer step of a fixture's schedule (used by `run`; prints JSON lines).
    #[command(hide = true)]
    Step {
        /// The inbox database.
        #[arg(long, env = "ARRIVAL_DB", value_parser = super::inbox::inbox_at)]
        db: crate::pipeline::sql::InboxAt,
        /// Redis, stream and group.
        #[command(flatten)]
        redis: RedisArgs,
        /// The consumer's name.
        #[arg(long)]
        consumer: String,
        /// What the step does.
        #[arg(long, value_enum)]
        mode: StepModeArg,
        /// SIGKILL this process at this point.
        #[arg(long, value_enum)]
        crash: Option<CrashAt>,
        /// Deliveries before dead-lettering.
        #[arg(long, default_value_t = 3)]
        max_deliveries: u32,
        /// A mutant's name.
        #[arg(long)]
        mutant: Option<String>,
        /// A stream entry whose decision fails (a fixture's `undecidable` step; repeatable).
        #[arg(long)]
        undecidable: Vec<String>,
    },
    /// A drill against real Redis and SQLite: `kill`, `process-kill`, `commit-fails`,
    /// `redis-down`, `db-locked`, `poison`.
    Drill(DrillArgs),
    /// Throughput: a load generator (this process) against `serve` (a child process).
    Load(LoadArgs),
}

/// `serve --rate-limit`: requests per second per source, or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateLimitArg {
    /// No limit.
    Off,
    /// Requests per second (at least 1).
    PerSecond(u32),
}

fn rate_limit_arg(text: &str) -> Result<RateLimitArg, String> {
    if text == "off" {
        return Ok(RateLimitArg::Off);
    }
    match text.parse::<u32>() {
        Ok(0) | Err(_) => Err(format!(
            "`{text}` is neither a number of requests per second (1 or more) nor `off`"
        )),
        Ok(rate) => Ok(RateLimitArg::PerSecond(rate)),
    }
}

/// `pipeline serve`'s arguments (also `pipeline serve-wrong`'s).
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Where to listen (loopback by default).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The inbox: an SQLite file, or postgres://USER@HOST:PORT/DATABASE.
    #[arg(long, env = "ARRIVAL_DB", value_parser = super::inbox::inbox_at)]
    pub db: crate::pipeline::sql::InboxAt,
    /// The keys file: read again on SIGHUP (a bad file keeps the keys in force, with an
    /// error logged); a warning is logged when its group or others have access to it.
    #[arg(long, env = "ARRIVAL_KEYS")]
    pub keys: PathBuf,
    /// Redis, stream and group.
    #[command(flatten)]
    pub redis: RedisArgs,
    /// How many consumers.
    #[arg(long, default_value_t = 2)]
    pub consumers: usize,
    /// Entries per batch (one transaction per batch).
    #[arg(long, default_value_t = 16)]
    pub count: usize,
    /// Take over entries pending longer than this (ms).
    #[arg(long, default_value_t = 30_000)]
    pub min_idle_ms: u64,
    /// Deliveries before an unprocessable entry is dead-lettered.
    #[arg(long, default_value_t = 3)]
    pub max_deliveries: u32,
    /// SQLite busy timeout (ms).
    #[arg(long, default_value_t = pstore::DEFAULT_BUSY_TIMEOUT_MS)]
    pub busy_timeout_ms: u64,
    /// Body limit (bytes).
    #[arg(long, default_value_t = crate::facts::ingress::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Freshness window (seconds).
    #[arg(long, default_value_t = crate::facts::ingress::DEFAULT_FRESHNESS_SECONDS)]
    pub freshness_seconds: i64,
    /// How long to wait for a request's whole body before answering 408 (ms, at least 1).
    #[arg(
        long,
        default_value_t = ingress::DEFAULT_BODY_TIMEOUT_MS,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub body_timeout_ms: u64,
    /// Requests per second per source, told apart by `X-Acme-Source` (requests naming
    /// no known source share one bucket); beyond it ingress answers 429 with
    /// `Retry-After` before reading the body. `off` for no limit.
    #[arg(long, default_value = "10000", value_parser = rate_limit_arg)]
    pub rate_limit: RateLimitArg,
    /// Requests a source may send at once after a quiet spell (the bucket's size;
    /// default: one second's worth of `--rate-limit`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub rate_burst: Option<u32>,
    /// How long a connection may take to send a whole request head, and sit idle
    /// between requests, before it is closed without an answer (ms, at least 1).
    #[arg(
        long,
        default_value_t = crate::pipeline::server::DEFAULT_HEADER_TIMEOUT_MS,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub header_timeout_ms: u64,
    /// Connections served at once; more wait in the listen backlog until one closes.
    #[arg(
        long,
        default_value_t = crate::pipeline::server::DEFAULT_MAX_CONNECTIONS,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_connections: u32,
    /// Log lines (one per request and per batch, on stderr) as `text` or `json`.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// `serve-wrong` only: the wrong pipeline to run (a facts mutant's name). `serve`
    /// refuses it: the production receiver runs the contract only.
    #[arg(long, hide = true)]
    pub mutant: Option<String>,
}

/// How `serve` writes its log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line of `key=value` fields per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// Sends `tracing`'s events (ingress's request lines, the consumers' batch lines) to stderr
/// in `format`; informational events and above.
fn init_logs(format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false);
    // A second initialisation (never in `serve`, which runs once) is ignored.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// The faults `pipeline consume` takes from the process drills, and only from them (hidden
/// from the help): SIGKILL of this very process at a point of a batch, and a wrong consumer.
#[derive(Args, Debug, Clone)]
pub struct ConsumeDrillArgs {
    /// Drills only: SIGKILL this process when one of its consumers reaches this point.
    #[arg(long, value_enum, hide = true)]
    pub drill_kill_at: Option<KillAt>,
    /// Drills only: the chance of dying each time the point is reached (0 to 1).
    #[arg(long, default_value_t = 1.0, hide = true)]
    pub drill_kill_chance: f64,
    /// Drills only: the seed of those dice.
    #[arg(long, default_value_t = 0, hide = true)]
    pub drill_seed: u64,
    /// Drills only: run a wrong consumer (a facts mutant's name, e.g. `ack-before-commit`).
    #[arg(long, hide = true)]
    pub drill_mutant: Option<String>,
}

/// Where a drilled `consume` process kills itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KillAt {
    /// After deciding a batch, before its commit.
    BeforeCommit,
    /// After the commit, before `XACK`.
    AfterCommit,
    /// After the commit, half the batch acknowledged.
    MidBatch,
}

impl From<KillAt> for Point {
    fn from(at: KillAt) -> Point {
        match at {
            KillAt::BeforeCommit => Point::BeforeCommit,
            KillAt::AfterCommit => Point::AfterCommit,
            KillAt::MidBatch => Point::MidBatch,
        }
    }
}

/// Where a `step` kills itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CrashAt {
    /// After deciding, before the commit.
    BeforeCommit,
    /// After the commit, before `XACK`.
    AfterCommit,
}

/// The three consumer steps of a fixture's schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StepModeArg {
    /// Own pending first, else one new entry.
    Consume,
    /// Own pending only (after a restart).
    Recover,
    /// The oldest entry pending in another consumer.
    Claim,
}

impl From<StepModeArg> for StepMode {
    fn from(mode: StepModeArg) -> StepMode {
        match mode {
            StepModeArg::Consume => StepMode::Consume,
            StepModeArg::Recover => StepMode::Recover,
            StepModeArg::Claim => StepMode::Claim,
        }
    }
}

/// The drills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DrillNameArg {
    /// Consumers killed at random points.
    Kill,
    /// Consumer processes (`pipeline consume`) SIGKILLed, by themselves at a point of a
    /// batch or from outside, each replaced under a new name.
    ProcessKill,
    /// The inbox's disk full under a consumer process: its commits fail, then succeed.
    CommitFails,
    /// Redis stopped while requests arrive.
    RedisDown,
    /// The inbox database locked by another writer.
    DbLocked,
    /// An unparseable entry in the stream.
    Poison,
}

impl From<DrillNameArg> for DrillName {
    fn from(name: DrillNameArg) -> DrillName {
        match name {
            DrillNameArg::Kill => DrillName::Kill,
            DrillNameArg::ProcessKill => DrillName::ProcessKill,
            DrillNameArg::CommitFails => DrillName::CommitFails,
            DrillNameArg::RedisDown => DrillName::RedisDown,
            DrillNameArg::DbLocked => DrillName::DbLocked,
            DrillNameArg::Poison => DrillName::Poison,
        }
    }
}

/// `arrival pipeline drill NAME ...`.
#[derive(Args, Debug, Clone)]
pub struct DrillArgs {
    /// Which drill.
    #[arg(value_enum)]
    pub name: DrillNameArg,
    /// Requests to send.
    #[arg(long, default_value_t = 300)]
    pub requests: usize,
    /// Requests sent while Redis is down (redis-down; default a third of `--requests`,
    /// at most all of them).
    #[arg(long)]
    pub down_requests: Option<usize>,
    /// `kill` and `process-kill`: a database the drill may EMPTY and use as the inbox
    /// (postgres://...); a new SQLite file when left out.
    #[arg(long, value_parser = super::inbox::inbox_at)]
    pub scratch_db: Option<InboxAt>,
    /// Consumer kills (kill and process-kill drills).
    #[arg(long, default_value_t = 200)]
    pub kills: usize,
    /// Consumers (consumer processes in process-kill).
    #[arg(long, default_value_t = 2)]
    pub consumers: usize,
    /// Entries per batch.
    #[arg(long, default_value_t = 4)]
    pub count: usize,
    /// The random schedule's seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run a wrong pipeline (e.g. `ack-before-commit`): the drill must fail.
    #[arg(long)]
    pub mutant: Option<String>,
    /// Redis URL (the redis-down drill starts its own server).
    #[arg(
        long,
        env = "ARRIVAL_REDIS_URL",
        value_parser = redis_url,
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the result as JUnit XML to this file (one suite, one case per check).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<std::path::PathBuf>,
}

/// `arrival pipeline load`.
#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    /// Requests per run.
    #[arg(long, default_value_t = 2_000)]
    pub requests: usize,
    /// Consumer counts to measure, one run each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub consumers: Vec<usize>,
    /// Entries per batch (one transaction per batch).
    #[arg(long, default_value_t = 16)]
    pub count: usize,
    /// Concurrent client connections.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// `serve` processes on one consumer group and one inbox (a shared SQLite file on
    /// this machine, or `--scratch-db postgres://...`).
    #[arg(long, default_value_t = 1)]
    pub processes: usize,
    /// A database the runs may EMPTY and use as the inbox (each run deletes every row of
    /// the inbox's tables first); a new SQLite file per run when left out.
    #[arg(long, value_parser = super::inbox::inbox_at)]
    pub scratch_db: Option<InboxAt>,
    /// Also measure this machine's bare limits for the same requests, in the same run:
    /// `redis-benchmark` XADD of the bodies, and a bare batched INSERT of the same rows
    /// into the same database; print each run's ratio to them.
    #[arg(long)]
    pub baselines: bool,
    /// Redis URL.
    #[arg(
        long,
        env = "ARRIVAL_REDIS_URL",
        value_parser = redis_url,
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// A `pipeline step`'s injected faults: SIGKILL of this very process at the chosen point,
/// and the entries a fixture's schedule made undecidable.
struct StepFaults {
    kill: Option<Point>,
    undecidable: std::collections::BTreeSet<String>,
}

impl Faults for StepFaults {
    fn fail_decision(&self, item: &crate::pipeline::batch::Item) -> Option<String> {
        self.undecidable
            .contains(&item.entry)
            .then(|| "the fixture made this entry undecidable".to_owned())
    }

    fn kill_at(&self, _: &str, point: Point, _: usize) -> bool {
        if Some(point) == self.kill {
            let _ = std::io::stdout().flush();
            // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
        false
    }
}

fn mutant(name: Option<&str>) -> Result<Option<Mutant>, InputError> {
    name.map(|name| {
        name.parse::<Mutant>()
            .map_err(|message| InputError::invalid(Path::new("--mutant"), "command line", message))
    })
    .transpose()
}

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| env_error(&"tokio", error))
}

/// Runs a `pipeline` subcommand: `Ok(true)` exit 0, `Ok(false)` exit 1.
pub fn run(command: PipelineCommand) -> Outcome {
    match command {
        PipelineCommand::Init {
            db,
            fixture,
            keys_out,
        } => init(&db, &fixture, &keys_out),
        PipelineCommand::Serve(args) => serve(args, false),
        PipelineCommand::ServeWrong(args) => serve(args, true),
        PipelineCommand::Consume { .. } => consume(command),
        PipelineCommand::Status {
            db,
            json,
            stream,
            group,
            redis_url,
        } => {
            let names =
                stream.map(|stream| (redis_url, crate::pipeline::stream::Names { stream, group }));
            status(&db, json, names.as_ref())
        }
        PipelineCommand::Applications(command) => super::operator::applications(command),
        PipelineCommand::Conflicts(command) => super::operator::conflicts(command),
        PipelineCommand::Quarantine(command) => super::operator::quarantine(command),
        PipelineCommand::Receipts {
            db,
            event,
            limit,
            json,
        } => super::operator::receipts(&db, event.as_deref(), limit, json),
        PipelineCommand::Explain(args) => super::explain::explain(&args),
        PipelineCommand::Trim {
            redis,
            retention_seconds,
            dead_letter_retention_seconds,
            receipts_retention_seconds,
            db,
        } => {
            trim(&redis, retention_seconds)?;
            trim_more(
                &redis,
                dead_letter_retention_seconds,
                receipts_retention_seconds.zip(db),
            )
        }
        PipelineCommand::DeadLetters(command) => super::operator::dead_letters(command),
        PipelineCommand::Upgrade {
            target,
            material_version,
        } => super::operator::upgrade(&target, material_version),
        PipelineCommand::Run {
            fixture,
            json,
            redis_url,
            db,
            mutant: name,
        } => run_fixture(&fixture, json, redis_url, name.as_deref(), db),
        PipelineCommand::Step { .. } => step(command),
        PipelineCommand::Drill(args) => drill(&args),
        PipelineCommand::Load(args) => load(&args),
    }
}

/// Refuses an init over a file that exists: `init` only ever creates an inbox, because
/// registering a fixture over an existing one could move an application's material version
/// backwards and leave its READY mark stale. The message says how to start over.
fn refuse_existing(db: &Path) -> InputError {
    let shown = db.display();
    InputError::invalid(
        db,
        "--db",
        format!(
            "the file exists; `pipeline init` creates a new inbox and never changes one. \
             To start over, stop every `pipeline serve` that uses it and delete {shown} \
             (with {shown}-wal and {shown}-shm if they exist), or give init another path; \
             to move an application to a newer material version use `arrival pipeline applications upgrade`"
        ),
    )
}

/// Refuses an init where an inbox is already: an SQLite file that exists, or a PostgreSQL
/// database that has the inbox's tables.
fn refuse_existing_inbox(db: &InboxAt) -> Result<(), Error> {
    super::inbox::checked(db)?;
    match db {
        InboxAt::Sqlite(path) if path.exists() => Err(refuse_existing(path).into()),
        InboxAt::Sqlite(_) => Ok(()),
        InboxAt::Postgres(_) => match super::inbox::existing(db) {
            Ok(()) => Err(InputError::invalid(
                Path::new("--db"),
                "command line",
                format!(
                    "{db} holds an inbox already; `pipeline init` creates a new inbox and never \
                     changes one: give it a new database"
                ),
            )
            .into()),
            Err(Error::Input(_)) => Ok(()),
            Err(other) => Err(other),
        },
    }
}

/// Claims the path for a new inbox: created here, atomically, so two inits (or an init
/// racing any other writer) cannot both think the file is theirs.
fn create_new_inbox_file(db: &Path) -> Result<(), Error> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(db)
    {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(refuse_existing(db).into())
        }
        Err(source) => Err(InputError::Write {
            file: db.to_owned(),
            source,
        }
        .into()),
    }
}

/// The new inbox: schema and the fixture's applications; on failure the half-made file is
/// removed, so running init again works.
fn fill_new_inbox(db: &Path, apps: &crate::facts::application::Applications) -> Result<(), Error> {
    let at = InboxAt::Sqlite(db.to_owned());
    let filled = pstore::open(&at, pstore::DEFAULT_BUSY_TIMEOUT_MS)
        .map_err(|error| env_error(&at, error))
        .and_then(|conn| {
            pstore::put_applications(&conn, apps).map_err(|error| env_error(&at, error))
        });
    if filled.is_err() {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = db.as_os_str().to_owned();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
    filled
}

/// `pipeline init`: a new inbox, the fixture's applications, the keys file. An existing
/// `--db` is refused (exit 2) and left as it was.
fn init(db: &InboxAt, fixture: &Path, keys_out: &Path) -> Outcome {
    refuse_existing_inbox(db)?;
    let text = std::fs::read_to_string(fixture).map_err(|source| InputError::Io {
        file: fixture.to_owned(),
        source,
    })?;
    let raw: crate::facts::fixture::RawFixture = serde_json::from_str(&text)
        .map_err(|error| InputError::invalid(fixture, "pipeline", error.to_string()))?;
    let scenario = crate::facts::fixture::Scenario::from_raw(fixture, &raw)?;
    match db {
        InboxAt::Sqlite(path) => {
            create_new_inbox_file(path)?;
            fill_new_inbox(path, &scenario.applications)?;
        }
        InboxAt::Postgres(_) => {
            let conn = pstore::open(db, pstore::DEFAULT_BUSY_TIMEOUT_MS)
                .map_err(|error| env_error(db, error))?;
            pstore::put_applications(&conn, &scenario.applications)
                .map_err(|error| env_error(db, error))?;
        }
    }
    let file = if raw.keys.is_empty() {
        ingress::KeysFile::Secrets(raw.secrets.clone())
    } else {
        ingress::KeysFile::Keys {
            keys: raw.keys.clone(),
        }
    };
    let keys = serde_json::to_string_pretty(&file).expect("keys serialise");
    write_private(keys_out, &(keys + "\n")).map_err(|source| InputError::Write {
        file: keys_out.to_owned(),
        source,
    })?;
    eprintln!(
        "arrival pipeline: {} application(s) in {}, keys in {}",
        scenario.applications.len(),
        db,
        keys_out.display()
    );
    Ok(true)
}

/// Writes a file only its owner can read or write (mode 0600 on Unix, also when the file
/// existed with a looser mode): a keys file holds secrets.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    // `mode` applies only to a file created here: one that existed keeps its mode unless
    // it is set again, before any secret is written into it.
    #[cfg(unix)]
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    file.write_all(text.as_bytes())
}

/// `serve --mutant NAME` is refused: one flag must not turn the production receiver into
/// a wrong one (`ack-before-commit` loses entries).
fn refuse_mutant(name: &str) -> InputError {
    InputError::invalid(
        Path::new("--mutant"),
        "command line",
        format!(
            "`pipeline serve` is the production receiver and runs the contract only; \
             mutant `{name}` belongs to `arrival pipeline drill ... --mutant {name}` or \
             `arrival pipeline run FIXTURE --mutant {name}`"
        ),
    )
}

/// `pipeline serve`: ingress and consumers until SIGTERM.
fn serve(args: ServeArgs, wrong: bool) -> Outcome {
    let ServeArgs {
        listen,
        db,
        keys,
        redis,
        consumers,
        count,
        min_idle_ms,
        max_deliveries,
        busy_timeout_ms,
        max_body_bytes,
        freshness_seconds,
        body_timeout_ms,
        rate_limit,
        rate_burst,
        header_timeout_ms,
        max_connections,
        log_format,
        mutant: name,
    } = args;
    let limits = ingress::ServeLimits {
        rate: match rate_limit {
            RateLimitArg::Off => None,
            RateLimitArg::PerSecond(per_second) => Some(RateLimit {
                per_second,
                burst: rate_burst.unwrap_or(per_second),
            }),
        },
        connections: ConnectionLimits {
            header_timeout: std::time::Duration::from_millis(header_timeout_ms),
            max_connections,
        },
    };
    let wrong = match (wrong, name) {
        (false, Some(name)) => return Err(refuse_mutant(&name).into()),
        (false, None) => None,
        (true, None) => {
            return Err(InputError::invalid(
                Path::new("--mutant"),
                "command line",
                "`pipeline serve-wrong` needs the wrong pipeline to run: --mutant NAME",
            )
            .into())
        }
        (true, Some(name)) => mutant(Some(&name))?,
    };
    if let Some(wrong) = wrong {
        eprintln!(
            "arrival pipeline serve-wrong: running the WRONG pipeline `{}` on purpose, as a \
             drill target; never use it for real traffic",
            wrong.name()
        );
    }
    init_logs(log_format);
    let keys_file = keys;
    let keys = ingress::load_keys(&keys_file)?;
    super::inbox::existing(&db)?;
    let options = ServeOptions {
        listen,
        db: db.clone(),
        keys,
        redis_url: redis.redis_url.clone(),
        names: redis.names(),
        consumers,
        count: count.max(1),
        min_idle_ms,
        max_deliveries: max_deliveries.max(1),
        busy_timeout_ms,
        max_body_bytes,
        freshness_seconds,
        body_timeout_ms,
        mutant: wrong,
        shifted_clock: false,
    };
    runtime()?
        .block_on(ingress::serve(&options, &limits, &keys_file))
        .map_err(|error| env_error(&db, error))?;
    Ok(true)
}

/// `pipeline consume`: consumers only, until SIGTERM. The inbox is checked and handed on
/// exactly as `serve` does (`existing_inbox`, then [`ServeOptions`]), ingress's fields
/// left empty.
fn consume(command: PipelineCommand) -> Outcome {
    let PipelineCommand::Consume {
        db,
        redis,
        consumers,
        count,
        min_idle_ms,
        max_deliveries,
        busy_timeout_ms,
        log_format,
        drill,
    } = command
    else {
        unreachable!("consume is called with `pipeline consume`");
    };
    if !(0.0..=1.0).contains(&drill.drill_kill_chance) {
        return Err(InputError::invalid(
            Path::new("--drill-kill-chance"),
            "command line",
            format!("{}: a chance is between 0 and 1", drill.drill_kill_chance),
        )
        .into());
    }
    let wrong = mutant(drill.drill_mutant.as_deref())?;
    init_logs(log_format);
    super::inbox::existing(&db)?;
    let options = ServeOptions {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        db: db.clone(),
        keys: Default::default(),
        redis_url: redis.redis_url.clone(),
        names: redis.names(),
        consumers: consumers.max(1),
        count: count.max(1),
        min_idle_ms,
        max_deliveries: max_deliveries.max(1),
        busy_timeout_ms,
        max_body_bytes: 0,
        freshness_seconds: 0,
        body_timeout_ms: ingress::DEFAULT_BODY_TIMEOUT_MS,
        mutant: wrong,
        shifted_clock: false,
    };
    let faults: Arc<dyn Faults> = match drill.drill_kill_at {
        None => Arc::new(NoFaults),
        Some(at) => Arc::new(SelfKill::new(
            Some(at.into()),
            drill.drill_kill_chance,
            drill.drill_seed,
        )),
    };
    runtime()?
        .block_on(crate::pipeline::consume::consume(&options, faults))
        .map_err(|error| env_error(&db, error))?;
    Ok(true)
}

/// `pipeline trim`: stream retention.
fn trim(redis: &RedisArgs, retention_seconds: i64) -> Outcome {
    let url = &redis.redis_url;
    let mut conn =
        crate::pipeline::stream::connect(&redis.redis_url, std::time::Duration::from_secs(5))
            .map_err(|error| env_error(url, error))?;
    let now = pstore::now_ms();
    let retention_ms = retention_seconds.max(0).saturating_mul(1000);
    let (boundary, removed) =
        crate::pipeline::stream::trim_acknowledged(&mut conn, &redis.stream, retention_ms, now)
            .map_err(|error| env_error(url, error))?;
    match boundary {
        Some(boundary) => print(&format!("trimmed {removed} entries before {boundary}\n")),
        None => print("trimmed nothing: the stream has no consumer group\n"),
    }
    Ok(true)
}

/// `pipeline trim`'s own periods: the dead-letter stream by age, the receipts by age.
fn trim_more(
    redis: &RedisArgs,
    dead_letters: Option<i64>,
    receipts: Option<(i64, InboxAt)>,
) -> Outcome {
    let now = pstore::now_ms();
    let ms = |seconds: i64| seconds.max(0).saturating_mul(1000);
    if let Some(seconds) = dead_letters {
        let url = &redis.redis_url;
        let mut conn = crate::pipeline::stream::connect(url, std::time::Duration::from_secs(5))
            .map_err(|error| env_error(url, error))?;
        let dead = redis.names().dead_letter();
        let removed = crate::pipeline::stream::trim_older(&mut conn, &dead, ms(seconds), now)
            .map_err(|error| env_error(url, error))?;
        print(&format!(
            "trimmed {removed} dead letters older than {seconds} s\n"
        ));
    }
    if let Some((seconds, db)) = receipts {
        let conn = super::inbox::open_existing(&db)?;
        let removed = crate::pipeline::receipts::trim(&conn, now - ms(seconds))
            .map_err(|error| env_error(&db, error))?;
        print(&format!(
            "deleted {removed} receipts older than {seconds} s\n"
        ));
    }
    Ok(true)
}

/// `pipeline status`: facts, counters, READY per application.
fn status(
    db: &InboxAt,
    json: bool,
    stream: Option<&(String, crate::pipeline::stream::Names)>,
) -> Outcome {
    let conn = super::inbox::open_existing(db)?;
    let backlog = match stream {
        Some((url, names)) => Some(
            crate::pipeline::stream::connect(url, std::time::Duration::from_secs(5))
                .and_then(|mut redis| crate::pipeline::stream::backlog(&mut redis, names))
                .map_err(|error| env_error(&format!("Redis {url}"), error))?,
        ),
        None => None,
    };
    let snapshot = pstore::snapshot(&conn).map_err(|error| env_error(db, error))?;
    let apps = pstore::applications(&conn).map_err(|error| env_error(db, error))?;
    let facts: Vec<String> = snapshot
        .facts
        .iter()
        .map(|(source, id, _)| format!("{source}/{id}"))
        .collect();
    if json {
        let ready: Vec<serde_json::Value> = apps
            .iter()
            .map(|(key, app)| {
                serde_json::json!({
                    "tenant_id": key.tenant_id,
                    "application_id": key.application_id,
                    "material_version": app.material_version,
                    "ready": snapshot.ready.contains(key),
                    "open_conflict": snapshot.open_conflicts.contains(key),
                    "terminated": app.terminated.is_some(),
                })
            })
            .collect();
        let contents: Vec<serde_json::Value> = snapshot
            .facts
            .iter()
            .map(|(source, id, canonical)| {
                serde_json::json!({"source": source, "event_id": id, "content": canonical})
            })
            .collect();
        let mut document = serde_json::json!({
            "facts": facts,
            "fact_contents": contents,
            "counters": snapshot.counters,
            "applications": ready,
            "verdicts": snapshot.verdicts.len(),
        });
        if let Some((pending, dead)) = backlog {
            document["pending"] = serde_json::json!(pending);
            document["dead_letters"] = serde_json::json!(dead);
        }
        print(&(serde_json::to_string_pretty(&document).expect("json") + "\n"));
    } else {
        let mut out = format!("facts:      {}\n", facts.join(", "));
        let c = snapshot.counters;
        out += &format!(
            "deliveries: {} accepted, {} duplicate, {} conflict, {} late mismatch\n",
            c.accepted, c.duplicates, c.conflicts, c.late_mismatches
        );
        for (key, app) in apps.iter() {
            let state = match &app.terminated {
                Some(termination) => format!("terminated ({})", termination.reason),
                None if snapshot.ready.contains(key) => "READY".to_owned(),
                None if snapshot.open_conflicts.contains(key) => {
                    "not ready (open conflict)".to_owned()
                }
                None => "not ready".to_owned(),
            };
            out += &format!("{key} v{}: {state}\n", app.material_version);
        }
        if let Some((pending, dead)) = backlog {
            out += &format!("stream:     {pending} not yet acknowledged, {dead} dead letter(s)\n");
        }
        print(&out);
    }
    Ok(true)
}

/// `pipeline run`: a facts fixture against real HTTP, Redis and SQLite.
fn run_fixture(
    fixture: &Path,
    json: bool,
    redis_url: String,
    name: Option<&str>,
    db: Option<InboxAt>,
) -> Outcome {
    let scenario = crate::pipeline::run::load(fixture)?;
    if let Some(db) = &db {
        refuse_used_database(db)?;
    }
    let options = crate::pipeline::run::RunOptions {
        redis_url,
        exe: std::env::current_exe().map_err(|error| env_error(&fixture.display(), error))?,
        mutant: mutant(name)?,
        db,
    };
    let report = runtime()?
        .block_on(crate::pipeline::run::run(&scenario, &options))
        .map_err(|error| env_error(&fixture.display(), error))?;
    if json {
        print(&(serde_json::to_string_pretty(&report).expect("json") + "\n"));
    } else {
        print(&format!(
            "pipeline run: real HTTP ingress, Redis stream {}, {} inbox; consumer steps are child processes\n",
            options.redis_url,
            options.db.as_ref().map_or("SQLite", |db| match db {
                InboxAt::Sqlite(_) => "SQLite",
                InboxAt::Postgres(_) => "PostgreSQL",
            })
        ));
        print(&crate::facts::table::render_table(&report));
    }
    Ok(report.passed())
}

/// Refuses a `pipeline run --db` that holds applications already: a run registers the
/// fixture's own and compares the end with the fixture's expectations.
fn refuse_used_database(db: &InboxAt) -> Result<(), Error> {
    super::inbox::checked(db)?;
    if let InboxAt::Sqlite(path) = db {
        if !path.exists() {
            return Ok(());
        }
    }
    let conn =
        pstore::open(db, pstore::DEFAULT_BUSY_TIMEOUT_MS).map_err(|error| env_error(db, error))?;
    let held = pstore::applications(&conn).map_err(|error| env_error(db, error))?;
    if held.is_empty() {
        return Ok(());
    }
    Err(InputError::invalid(
        Path::new("--db"),
        "command line",
        format!(
            "{db} holds {} application(s) already; `pipeline run` plays a fixture on a new, \
             empty inbox: give it a new database",
            held.len()
        ),
    )
    .into())
}

/// `pipeline step`: one consumer step (a child process of `run`), as JSON lines.
fn step(command: PipelineCommand) -> Outcome {
    let PipelineCommand::Step {
        db,
        redis,
        consumer,
        mode,
        crash,
        max_deliveries,
        mutant: name,
        undecidable,
    } = command
    else {
        unreachable!("step is called with `pipeline step`");
    };
    let options = ConsumerOptions {
        redis_url: redis.redis_url.clone(),
        names: redis.names(),
        name: consumer,
        db: db.clone(),
        count: 1,
        block_ms: 0,
        min_idle_ms: 0,
        claim_every_ms: 0,
        max_deliveries,
        busy_timeout_ms: pstore::DEFAULT_BUSY_TIMEOUT_MS,
        mutant: mutant(name.as_deref())?,
    };
    let faults: Arc<dyn Faults> = Arc::new(StepFaults {
        kill: crash.map(|crash| match crash {
            CrashAt::BeforeCommit => Point::BeforeCommit,
            CrashAt::AfterCommit => Point::AfterCommit,
        }),
        undecidable: undecidable.into_iter().collect(),
    });
    let mut consumer = Consumer::connect(options, faults).map_err(|error| env_error(&db, error))?;
    let read = consumer
        .read_one(mode.into())
        .map_err(|error| env_error(&db, error))?;
    let Some(read) = read else {
        print("{\"idle\":true}\n");
        return Ok(true);
    };
    print(
        &(serde_json::json!({
            "read": read.kind,
            "entry": read.entry.id,
            "deliveries": read.deliveries,
            "from": read.from,
        })
        .to_string()
            + "\n"),
    );
    let result = consumer
        .handle(std::slice::from_ref(&read.entry))
        .map_err(|error| env_error(&db, error))?;
    print(&(serde_json::to_string(&result).expect("json") + "\n"));
    Ok(true)
}

/// `pipeline drill`: exit 0 when every check holds, 1 when one does not.
fn drill(args: &DrillArgs) -> Outcome {
    if let Some(file) = &args.junit {
        crate::harness::input::writable_file("--junit", file)?;
    }
    let options = DrillOptions {
        redis_url: args.redis_url.clone(),
        requests: args.requests.max(1),
        kills: args.kills,
        consumers: args.consumers.max(1),
        count: args.count.max(1),
        seed: args.seed,
        mutant: mutant(args.mutant.as_deref())?,
        exe: Some(std::env::current_exe().map_err(|error| env_error(&"drill", error))?),
        down_requests: args.down_requests,
        scratch_db: args.scratch_db.clone(),
    };
    if let Some(db) = &options.scratch_db {
        super::inbox::checked(db)?;
    }
    let report = runtime()?
        .block_on(crate::pipeline::drill::drill(args.name.into(), &options))
        .map_err(|error| env_error(&"drill", error))?;
    if let Some(file) = &args.junit {
        crate::harness::junit::write_suite(file, &report.junit_suite())?;
    }
    if args.json {
        print(&(serde_json::to_string_pretty(&report).expect("json") + "\n"));
    } else {
        print(&render_drill(&report));
    }
    Ok(report.passed)
}

/// A drill's report for people.
fn render_drill(report: &DrillReport) -> String {
    let mut out = format!(
        "drill {}{}: {} requests, answers {:?}, kills {:?}, {} consumer starts, {} entries, {} facts, {:.1} s\n",
        report.drill,
        report
            .mutant
            .as_ref()
            .map(|m| format!(" (mutant {m})"))
            .unwrap_or_default(),
        report.requests,
        report.answers,
        report.kills,
        report.consumer_starts,
        report.entries,
        report.facts,
        report.seconds
    );
    for check in &report.checks {
        out += &format!(
            "  {:<5} {:<34} {}\n",
            if check.holds { "ok" } else { "FAIL" },
            check.name,
            check.detail
        );
    }
    out += if report.passed {
        "PASSED\n"
    } else {
        "FAILED\n"
    };
    out
}

/// `pipeline load`: every consumer count measured, the figures printed.
fn load(args: &LoadArgs) -> Outcome {
    if let Some(db) = &args.scratch_db {
        super::inbox::checked(db)?;
    }
    let options = LoadOptions {
        requests: args.requests,
        count: args.count,
        concurrency: args.concurrency,
        redis_url: args.redis_url.clone(),
        db: args.scratch_db.clone(),
        processes: args.processes.max(1),
    };
    let baselines = if args.baselines {
        let measured = crate::pipeline::load::baselines(&options)
            .map_err(|error| env_error(&"load", error))?;
        if !args.json {
            print(&format!(
                "bare limits: redis-benchmark XADD {:.0}/s, batched INSERT {:.0} rows/s (batch {})\n",
                measured.xadd_per_second, measured.insert_per_second, options.count
            ));
        }
        Some(measured)
    } else {
        None
    };
    let mut results: Vec<LoadResult> = Vec::new();
    for &consumers in &args.consumers {
        let result = crate::pipeline::load::measure(&options, consumers.max(1))
            .map_err(|error| env_error(&"load", error))?;
        if !args.json {
            let ratios = baselines.as_ref().map_or(String::new(), |bare| {
                format!(
                    ", {:.3} of bare XADD, {:.3} of bare INSERT",
                    result.per_second / bare.xadd_per_second,
                    result.per_second / bare.insert_per_second
                )
            });
            print(&format!(
                "{} {} process(es) x {} consumer(s), COUNT {}: {} requests ({} accepted), {:.0} req/s to commit, ingress {:.0} req/s, p50 {} ms, p99 {} ms{ratios}\n",
                result.backend,
                result.processes,
                result.consumers,
                result.count,
                result.requests,
                result.accepted,
                result.per_second,
                result.ingress_per_second,
                result.p50_ms,
                result.p99_ms
            ));
        }
        results.push(result);
    }
    if args.json {
        let document = serde_json::json!({ "baselines": baselines, "runs": results });
        print(&(serde_json::to_string_pretty(&document).expect("results serialise") + "\n"));
    }
    Ok(true)
}
