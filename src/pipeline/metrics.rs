//! The operator's view of a running `serve`: `/metrics` in the Prometheus text format
//! (OpenMetrics text, written by the `prometheus-client` crate), `/healthz` and `/readyz`.
//! Counters and the commit histogram live in the process; the gauges (stream length,
//! pending per consumer, the oldest pending entry's idle time, dead letters, quarantine,
//! open conflicts, READY applications) are read from Redis and the inbox at each scrape,
//! so they say what is, not what this process saw.

use super::sql::{Db, InboxAt, Pg, SqlError};
use super::stream::{self, Names};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Label pairs of one series.
type Labels = Vec<(String, String)>;

/// What is read at each scrape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Levels {
    /// `XLEN` of the stream.
    pub stream_length: i64,
    /// Pending entries per consumer.
    pub pending: Vec<(String, i64)>,
    /// Seconds since the most idle pending entry was delivered (0 when none is pending).
    pub oldest_pending_idle_seconds: f64,
    /// `XLEN` of the dead-letter stream.
    pub dead_letters: i64,
    /// Entries waiting in quarantine.
    pub quarantined: i64,
    /// Applications with an open conflict.
    pub open_conflicts: i64,
    /// Applications marked READY.
    pub ready: i64,
}

/// The metrics of one `serve` process.
pub struct Metrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    batches: Family<Labels, Counter>,
    commit: Histogram,
    stream_length: Gauge,
    pending: Family<Labels, Gauge>,
    oldest_idle: Gauge<f64, AtomicU64>,
    dead_letters: Gauge,
    quarantined: Gauge,
    open_conflicts: Gauge,
    ready: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric registered, at zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("arrival");
        let metrics = Metrics {
            requests: Family::default(),
            batches: Family::default(),
            commit: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            stream_length: Gauge::default(),
            pending: Family::default(),
            oldest_idle: Gauge::default(),
            dead_letters: Gauge::default(),
            quarantined: Gauge::default(),
            open_conflicts: Gauge::default(),
            ready: Gauge::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "requests",
            "Requests answered, by HTTP status and reason word",
            metrics.requests.clone(),
        );
        r.register(
            "batches",
            "Consumer batches handled, by outcome (committed, failed)",
            metrics.batches.clone(),
        );
        r.register(
            "commit_seconds",
            "A batch's inbox transaction, from BEGIN IMMEDIATE to COMMIT returned",
            metrics.commit.clone(),
        );
        r.register(
            "stream_length",
            "Entries in the stream (XLEN)",
            metrics.stream_length.clone(),
        );
        r.register(
            "pending",
            "Entries delivered and not acknowledged, per consumer",
            metrics.pending.clone(),
        );
        r.register(
            "oldest_pending_idle_seconds",
            "Seconds since the most idle pending entry was delivered",
            metrics.oldest_idle.clone(),
        );
        r.register(
            "dead_letters",
            "Entries in the dead-letter stream",
            metrics.dead_letters.clone(),
        );
        r.register(
            "quarantined",
            "Entries waiting in quarantine",
            metrics.quarantined.clone(),
        );
        r.register(
            "open_conflicts",
            "Applications with an open conflict",
            metrics.open_conflicts.clone(),
        );
        r.register(
            "ready_applications",
            "Applications marked READY",
            metrics.ready.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }

    /// One answered request.
    pub fn request(&self, status: u16, reason: &str) {
        let labels = vec![
            ("status".to_owned(), status.to_string()),
            ("reason".to_owned(), reason.to_owned()),
        ];
        self.requests.get_or_create(&labels).inc();
    }

    /// One batch: committed (with its transaction's duration) or failed.
    pub fn batch(&self, committed: Option<Duration>) {
        let outcome = if committed.is_some() {
            "committed"
        } else {
            "failed"
        };
        let labels = vec![("outcome".to_owned(), outcome.to_owned())];
        self.batches.get_or_create(&labels).inc();
        if let Some(duration) = committed {
            self.commit.observe(duration.as_secs_f64());
        }
    }

    /// The text of `/metrics` with `levels` as read now.
    pub fn render(&self, levels: &Levels) -> String {
        self.stream_length.set(levels.stream_length);
        self.pending.clear();
        for (consumer, count) in &levels.pending {
            let labels = vec![("consumer".to_owned(), consumer.clone())];
            self.pending.get_or_create(&labels).set(*count);
        }
        self.oldest_idle.set(levels.oldest_pending_idle_seconds);
        self.dead_letters.set(levels.dead_letters);
        self.quarantined.set(levels.quarantined);
        self.open_conflicts.set(levels.open_conflicts);
        self.ready.set(levels.ready);
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String does not fail");
        text
    }
}

/// The content type of `/metrics` (OpenMetrics text, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the levels could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LevelsError {
    /// Redis failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The inbox failed.
    #[error("inbox: {0}")]
    Db(#[from] SqlError),
}

/// Where the levels are read from.
#[derive(Clone, Debug)]
pub struct Sources {
    /// Redis URL.
    pub redis_url: String,
    /// Stream and group.
    pub names: Names,
    /// The inbox.
    pub db: InboxAt,
}

/// Reads the levels (blocking: Redis and SQLite, each on a connection of its own).
pub fn read_levels(sources: &Sources) -> Result<Levels, LevelsError> {
    let mut redis = stream::connect(&sources.redis_url, Duration::from_secs(2))?;
    let names = &sources.names;
    let (pending, oldest) = stream::pending_by_consumer(&mut redis, names)?;
    let mut levels = Levels {
        stream_length: stream::length(&mut redis, &names.stream)?,
        dead_letters: stream::length(&mut redis, &names.dead_letter())?,
        pending,
        oldest_pending_idle_seconds: oldest as f64 / 1000.0,
        ..Levels::default()
    };
    let conn = read_only(&sources.db)?;
    let count = |sql: &str| {
        conn.row(sql, &[])?
            .map_or(Ok(0), |row| row.int(0))
            .map_err(LevelsError::from)
    };
    levels.quarantined = count("SELECT count(*) FROM parked WHERE state = 'quarantined'")?;
    levels.open_conflicts = count("SELECT count(*) FROM open_conflicts")?;
    levels.ready = count("SELECT count(*) FROM ready")?;
    Ok(levels)
}

/// A connection for reading levels: SQLite opened read-only (a scrape never writes or
/// migrates), PostgreSQL connected as usual.
fn read_only(db: &InboxAt) -> Result<Db, LevelsError> {
    use rusqlite::OpenFlags;
    match db {
        InboxAt::Sqlite(path) => {
            let conn = rusqlite::Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(SqlError::from)?;
            conn.busy_timeout(Duration::from_secs(2))
                .map_err(SqlError::from)?;
            Ok(Db::Sqlite(conn))
        }
        InboxAt::Postgres(url) => Ok(Db::Postgres(Box::new(Pg::connect(url)?))),
    }
}

/// `/readyz`: Redis answers `PING` and the inbox answers a read; `Err` names what failed.
pub fn check_ready(sources: &Sources) -> Result<(), String> {
    let redis = stream::connect(&sources.redis_url, Duration::from_secs(2))
        .and_then(|mut conn| redis::cmd("PING").query::<String>(&mut conn));
    let inbox = read_only(&sources.db).and_then(|conn| {
        conn.row("SELECT count(*) FROM applications", &[])
            .map(|_| ())
            .map_err(LevelsError::from)
    });
    match (redis, inbox) {
        (Ok(_), Ok(())) => Ok(()),
        (Err(error), _) => Err(format!("redis: {error}")),
        (_, Err(error)) => Err(format!("inbox: {error}")),
    }
}
