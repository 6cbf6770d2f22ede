//! The `arrival pipeline ...` command line: one clap subcommand enum and its dispatch
//! ([`run`]), which `src/main.rs` calls. Bad input is an [`InputError`] (exit 2); a run
//! whose expectation or drill fails is `Ok(false)` (exit 1).

use super::consumer::{Consumer, ConsumerOptions, Faults, Point, StepMode};
use super::ingress::{self, PipelineError, ServeOptions};
use super::store;
use super::stream::Names;
use crate::facts::mutants::Mutant;
use crate::harness::InputError;
use clap::{Args, Subcommand};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where Redis is and which stream and group to use.
#[derive(Args, Clone, Debug)]
pub struct RedisArgs {
    /// Redis URL.
    #[arg(
        long,
        env = "ARRIVAL_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,
    /// The stream ingress appends to (the dead-letter stream is `<stream>:dead`).
    #[arg(long, env = "ARRIVAL_STREAM", default_value = "arrival:facts")]
    pub stream: String,
    /// The consumer group.
    #[arg(long, env = "ARRIVAL_GROUP", default_value = "arrival-inbox")]
    pub group: String,
}

impl RedisArgs {
    fn names(&self) -> Names {
        Names {
            stream: self.stream.clone(),
            group: self.group.clone(),
        }
    }
}

/// `arrival pipeline ...`.
#[derive(Subcommand, Debug)]
pub enum PipelineCommand {
    /// Create the inbox database, register a facts fixture's applications and write its
    /// keys to a keys file.
    Init {
        /// The inbox database (created).
        #[arg(long, env = "ARRIVAL_DB")]
        db: PathBuf,
        /// A facts fixture whose `applications` and `secrets` to use.
        #[arg(long)]
        fixture: PathBuf,
        /// Where to write the keys file (`{"finance": [...], "contracts": [...]}`).
        #[arg(long)]
        keys_out: PathBuf,
    },
    /// Run ingress and consumers until SIGTERM (then finish in-flight entries, exit 0).
    Serve {
        /// Where to listen (loopback by default).
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// The inbox database.
        #[arg(long, env = "ARRIVAL_DB")]
        db: PathBuf,
        /// The keys file.
        #[arg(long, env = "ARRIVAL_KEYS")]
        keys: PathBuf,
        /// Redis, stream and group.
        #[command(flatten)]
        redis: RedisArgs,
        /// How many consumers.
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
        #[arg(long, default_value_t = store::DEFAULT_BUSY_TIMEOUT_MS)]
        busy_timeout_ms: u64,
        /// Body limit (bytes).
        #[arg(long, default_value_t = crate::facts::ingress::DEFAULT_MAX_BODY_BYTES)]
        max_body_bytes: usize,
        /// Freshness window (seconds).
        #[arg(long, default_value_t = crate::facts::ingress::DEFAULT_FRESHNESS_SECONDS)]
        freshness_seconds: i64,
        /// How long to wait for a request's whole body before answering 408 (ms, at least 1).
        #[arg(
            long,
            default_value_t = ingress::DEFAULT_BODY_TIMEOUT_MS,
            value_parser = clap::value_parser!(u64).range(1..)
        )]
        body_timeout_ms: u64,
        /// Run a wrong pipeline (a facts mutant's name), for drills.
        #[arg(long)]
        mutant: Option<String>,
    },
    /// Print the inbox: facts, counters, READY per application.
    Status {
        /// The inbox database.
        #[arg(long, env = "ARRIVAL_DB")]
        db: PathBuf,
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Move an application to a newer material version (READY recomputed).
    Upgrade {
        /// The inbox database.
        #[arg(long, env = "ARRIVAL_DB")]
        db: PathBuf,
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// The application id.
        #[arg(long)]
        application: String,
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
            default_value = "redis://127.0.0.1:6379"
        )]
        redis_url: String,
        /// Run a wrong pipeline (a facts mutant's name).
        #[arg(long)]
        mutant: Option<String>,
    },
    /// One consumer step of a fixture's schedule (used by `run`; prints JSON lines).
    #[command(hide = true)]
    Step {
        /// The inbox database.
        #[arg(long)]
        db: PathBuf,
        /// Redis, stream and group.
        #[command(flatten)]
        redis: RedisArgs,
        /// The consumer's name.
        #[arg(long)]
        consumer: String,
        /// What the step does.
        #[arg(long, value_enum)]
        mode: StepMode,
        /// SIGKILL this process at this point.
        #[arg(long, value_enum)]
        crash: Option<CrashAt>,
        /// Deliveries before dead-lettering.
        #[arg(long, default_value_t = 3)]
        max_deliveries: u32,
        /// A mutant's name.
        #[arg(long)]
        mutant: Option<String>,
    },
    /// A drill against real Redis and SQLite: `kill`, `redis-down`, `db-locked`, `poison`.
    Drill(super::drill::DrillArgs),
    /// Throughput: a load generator (this process) against `serve` (a child process).
    Load(super::load::LoadArgs),
}

/// Where a `step` kills itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CrashAt {
    /// After deciding, before the commit.
    BeforeCommit,
    /// After the commit, before `XACK`.
    AfterCommit,
}

/// Kills this very process with SIGKILL at the chosen point.
struct SelfKill(Point);

impl Faults for SelfKill {
    fn kill_at(&self, _: &str, point: Point, _: usize) -> bool {
        if point == self.0 {
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

/// An environment failure (Redis, SQLite, sockets) said as bad input: exit 2.
fn env_error(what: &Path, error: impl std::fmt::Display) -> InputError {
    InputError::invalid(what, "pipeline", error.to_string())
}

/// Refuses a `--db` that is not an inbox yet: only `pipeline init` creates one, so a
/// mistyped path, or another file (empty, or a database of something else), is bad input
/// (exit 2) rather than becoming a new, empty inbox with no applications registered. An
/// inbox is a SQLite database with the `applications` table; the check opens the file
/// without the right to create it and only reads.
fn existing_inbox(db: &Path) -> Result<(), InputError> {
    use rusqlite::OpenFlags;
    let refuse = |what: String| {
        InputError::invalid(
            Path::new("--db"),
            "command line",
            format!(
                "{what}: run `arrival pipeline init --db {} --fixture FIXTURE --keys-out KEYS` first",
                db.display()
            ),
        )
    };
    if !db.exists() {
        return Err(refuse(format!("no inbox at {}", db.display())));
    }
    let tables = rusqlite::Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .and_then(|conn| {
        conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'applications'",
            [],
            |row| row.get::<_, i64>(0),
        )
    })
    .map_err(|error| {
        refuse(format!(
            "{} is not an arrival inbox ({error})",
            db.display()
        ))
    })?;
    if tables == 0 {
        return Err(refuse(format!(
            "{} is not an arrival inbox (it has no applications table)",
            db.display()
        )));
    }
    Ok(())
}

fn runtime() -> Result<tokio::runtime::Runtime, InputError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| env_error(Path::new("tokio"), error))
}

fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

/// Runs a `pipeline` subcommand: `Ok(true)` exit 0, `Ok(false)` exit 1, `Err` exit 2.
pub fn run(command: PipelineCommand) -> Result<bool, InputError> {
    match command {
        PipelineCommand::Init {
            db,
            fixture,
            keys_out,
        } => {
            let raw: crate::facts::fixture::RawFixture =
                serde_json::from_str(&std::fs::read_to_string(&fixture).map_err(|source| {
                    InputError::Io {
                        file: fixture.clone(),
                        source,
                    }
                })?)
                .map_err(|error| env_error(&fixture, error))?;
            let scenario = crate::facts::fixture::Scenario::from_raw(&fixture, &raw)?;
            let mut conn = store::open(&db, store::DEFAULT_BUSY_TIMEOUT_MS)
                .map_err(|error| env_error(&db, error))?;
            store::put_applications(&mut conn, &scenario.applications)
                .map_err(|error| env_error(&db, error))?;
            let keys = serde_json::to_string_pretty(&raw.secrets).expect("keys serialise");
            std::fs::write(&keys_out, keys + "\n").map_err(|source| InputError::Write {
                file: keys_out.clone(),
                source,
            })?;
            eprintln!(
                "arrival pipeline: {} application(s) in {}, keys in {}",
                scenario.applications.len(),
                db.display(),
                keys_out.display()
            );
            Ok(true)
        }
        PipelineCommand::Serve {
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
            mutant: name,
        } => {
            let keys = ingress::load_keys(&keys)?;
            existing_inbox(&db)?;
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
                mutant: mutant(name.as_deref())?,
                shifted_clock: false,
            };
            runtime()?
                .block_on(ingress::serve(&options))
                .map_err(|error| env_error(&db, error))?;
            Ok(true)
        }
        PipelineCommand::Status { db, json } => {
            existing_inbox(&db)?;
            let mut conn = store::open(&db, store::DEFAULT_BUSY_TIMEOUT_MS)
                .map_err(|error| env_error(&db, error))?;
            let snapshot = store::snapshot(&mut conn).map_err(|error| env_error(&db, error))?;
            let apps = store::applications(&conn).map_err(|error| env_error(&db, error))?;
            let ready: Vec<serde_json::Value> = apps
                .iter()
                .map(|(key, app)| {
                    serde_json::json!({
                        "tenant_id": key.tenant_id,
                        "application_id": key.application_id,
                        "material_version": app.material_version,
                        "ready": snapshot.ready.contains(key),
                        "open_conflict": snapshot.open_conflicts.contains(key),
                    })
                })
                .collect();
            let facts: Vec<String> = snapshot
                .facts
                .iter()
                .map(|(source, id, _)| format!("{source}/{id}"))
                .collect();
            if json {
                let document = serde_json::json!({
                    "facts": facts,
                    "counters": snapshot.counters,
                    "applications": ready,
                    "verdicts": snapshot.verdicts.len(),
                });
                print(&(serde_json::to_string_pretty(&document).expect("json") + "\n"));
            } else {
                let mut out = format!("facts:      {}\n", facts.join(", "));
                let c = snapshot.counters;
                out += &format!(
                    "deliveries: {} accepted, {} duplicate, {} conflict, {} late mismatch\n",
                    c.accepted, c.duplicates, c.conflicts, c.late_mismatches
                );
                for (key, app) in apps.iter() {
                    let state = if snapshot.ready.contains(key) {
                        "READY"
                    } else {
                        "not ready"
                    };
                    out += &format!("{key} v{}: {state}\n", app.material_version);
                }
                print(&out);
            }
            Ok(true)
        }
        PipelineCommand::Upgrade {
            db,
            tenant,
            application,
            material_version,
        } => {
            existing_inbox(&db)?;
            let mut conn = store::open(&db, store::DEFAULT_BUSY_TIMEOUT_MS)
                .map_err(|error| env_error(&db, error))?;
            let key = crate::facts::application::AppKey {
                tenant_id: tenant,
                application_id: application,
            };
            match store::upgrade(&mut conn, &key, material_version, None)
                .map_err(|error| env_error(&db, error))?
            {
                Ok(from) => {
                    eprintln!("arrival pipeline: {key} v{from} -> v{material_version}");
                    Ok(true)
                }
                Err(why) => Err(InputError::invalid(
                    Path::new("--material-version"),
                    "command line",
                    why,
                )),
            }
        }
        PipelineCommand::Run {
            fixture,
            json,
            redis_url,
            mutant: name,
        } => {
            let scenario = super::run::load(&fixture)?;
            let options = super::run::RunOptions {
                redis_url,
                exe: std::env::current_exe().map_err(|error| env_error(&fixture, error))?,
                mutant: mutant(name.as_deref())?,
            };
            let report = runtime()?
                .block_on(super::run::run(&scenario, &options))
                .map_err(|error: PipelineError| env_error(&fixture, error))?;
            if json {
                print(&(serde_json::to_string_pretty(&report).expect("json") + "\n"));
            } else {
                print(&format!(
                    "pipeline run: real HTTP ingress, Redis stream {}, SQLite inbox; consumer steps are child processes\n",
                    options.redis_url
                ));
                print(&crate::facts::table::render_table(&report));
            }
            Ok(report.passed())
        }
        PipelineCommand::Step {
            db,
            redis,
            consumer,
            mode,
            crash,
            max_deliveries,
            mutant: name,
        } => {
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
                busy_timeout_ms: store::DEFAULT_BUSY_TIMEOUT_MS,
                mutant: mutant(name.as_deref())?,
            };
            let faults: Arc<dyn Faults> = match crash {
                None => Arc::new(super::consumer::NoFaults),
                Some(CrashAt::BeforeCommit) => Arc::new(SelfKill(Point::BeforeCommit)),
                Some(CrashAt::AfterCommit) => Arc::new(SelfKill(Point::AfterCommit)),
            };
            let mut consumer =
                Consumer::connect(options, faults).map_err(|error| env_error(&db, error))?;
            let read = consumer
                .read_one(mode)
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
        PipelineCommand::Drill(args) => super::drill::cli(&args),
        PipelineCommand::Load(args) => super::load::cli(&args),
    }
}
