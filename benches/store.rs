//! Durable decisions per second on SQLite and PostgreSQL, beside a bare baseline that writes
//! the same rows by hand in the same run: one delivery per transaction and 16 per
//! transaction (the acknowledgements still wait for the commit), on one connection, on
//! four connections (threads of this process) and on four receiver processes.
//!
//! The bare baseline writes, for each transaction, exactly the rows the store writes for
//! these deliveries (every one a new event id, applied to a known card): each card's new
//! row, each card's replacement counter, one record per delivery and two audit rows per
//! delivery (the decision and the card's change), with one statement per table: four
//! multi-row statements between `BEGIN` and `COMMIT`, nothing read. `docs/store.md`
//! ("Store speed") says it in prose.
//!
//! The process rows spawn four copies of this bench binary in a hidden child mode (the
//! environment variable [`CHILD`]): each opens its own connection, builds its deliveries
//! for its own cards, says `ready`, and waits for `go` on standard input; the time runs
//! from the `go` to the last child's `done`, so process start and connection are left out.
//!
//! Before the rows, the bench prints the store's round-trip profile per delivery
//! (statements, queries, prepares, `BEGIN`/`COMMIT`, retries) for each configuration.
//!
//! PostgreSQL is the server at `ARRIVAL_DATABASE_URL` (default the local one); the bench
//! makes its own database and drops it at the end.
//!
//! With [`PAIRED`] set to a number of rounds, the bench does not run criterion: for every
//! row it times the store and its baseline back to back, that many rounds (the order
//! swapped each round), and prints each row's medians and the median of the rounds' own
//! ratios. A ratio taken from two runs seconds apart on a shared disk compares the disk's
//! moods as much as the two writers; a ratio per round of neighbours does less so.

use arrival::store::{content_hash, Database, DbStats, DbUrl, Incoming, Isolation, Param, Store};
use criterion::Criterion;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const CARDS: u64 = 8;
/// The environment variable that makes this binary one receiver process of a process row:
/// `KIND URL RECEIVER COUNT BATCH RUN` (KIND `decide` or `bare`).
const CHILD: &str = "ARRIVAL_STORE_BENCH_CHILD";
static RUN: AtomicU64 = AtomicU64::new(0);
/// The environment variable that asks for paired rounds instead of criterion.
const PAIRED: &str = "ARRIVAL_STORE_BENCH_PAIRED";

fn next_run() -> u64 {
    // Distinct across the bench's own rows and the children it starts (their runs are
    // handed down), and across processes of one database (the pid).
    u64::from(std::process::id()) * 1_000_000 + RUN.fetch_add(1, Ordering::SeqCst)
}

/// `count` deliveries with fresh event ids for `receiver`'s own cards, each newer than the
/// last for its card: every one is a new decision, `applied`.
///
/// The event ids start with a hash, as a sender's random ids would: sequential ids of four
/// writers would all land in the last leaf page of the records index, where PostgreSQL's
/// page-level predicate locks make every pair of concurrent transactions conflict.
fn deliveries(run: u64, receiver: usize, count: u64) -> Vec<Incoming> {
    let base = (run % 1_000_000 + 1) * 1_000_000;
    (0..count)
        .map(|i| (i, format!("b{run}-{receiver}-{i}")))
        .map(|(i, id)| Incoming {
            delivery: i as u32,
            numbered: true,
            received_at: None,
            event: json!({
                "event_id": format!("{}-{id}", &content_hash(&id)[..12]),
                "object_id": format!("card-{receiver}-{}", i % CARDS),
                "object_version": base + i + 2,
                "type": "card.snapshot",
                "state": {"stage": format!("s{i}"), "label": "bench"}
            }),
        })
        .collect()
}

fn fresh(url: &DbUrl, connections: usize) -> Store {
    let mut store = Store::open(url).expect("the bench database answers");
    store.reset().expect("reset");
    let cards: Vec<_> = (0..connections)
        .flat_map(|receiver| {
            (0..CARDS).map(move |card| {
                (
                    format!("card-{receiver}-{card}"),
                    1,
                    json!({"stage": "s1", "label": "bench"}),
                )
            })
        })
        .collect();
    store.seed(&cards).expect("seed");
    store
}

/// One receiver's work: durable decisions through the store, or the bare rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Decide,
    Bare,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Decide => "decide",
            Kind::Bare => "bare",
        }
    }
}

/// Runs `incoming` in transactions of `batch` on `store`.
fn run_one(kind: Kind, store: &mut Store, incoming: &[Incoming], batch: usize) {
    match kind {
        Kind::Decide => {
            let mut acked = 0usize;
            for chunk in incoming.chunks(batch) {
                store
                    .deliver_batch(chunk, &mut |_| acked += 1)
                    .expect("a durable decision");
            }
            assert_eq!(acked, incoming.len());
        }
        Kind::Bare => {
            let db = store.database();
            for chunk in incoming.chunks(batch) {
                bare_transaction(db, chunk);
            }
        }
    }
}

/// `placeholders(rows, columns)`: `($1, $2), ($3, $4)`.
fn placeholders(rows: usize, columns: usize) -> String {
    (0..rows)
        .map(|row| {
            let cells: Vec<String> = (1..=columns)
                .map(|column| format!("${}", row * columns + column))
                .collect();
            format!("({})", cells.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn text(value: impl Into<String>) -> Param {
    Param::Text(Some(value.into()))
}

fn int(value: i64) -> Param {
    Param::Int(Some(value))
}

/// The bare baseline's transaction: the rows the store writes for these deliveries, by
/// hand, one multi-row statement per table, nothing read.
fn bare_transaction(db: &mut dyn Database, chunk: &[Incoming]) {
    // The last state of each card, and how many deliveries replaced it.
    let mut cards: BTreeMap<String, (i64, String, i64)> = BTreeMap::new();
    let mut records = Vec::new();
    let mut audit = Vec::new();
    for one in chunk {
        let event_id = one.event["event_id"].as_str().expect("an id").to_owned();
        let card = one.event["object_id"].as_str().expect("a card").to_owned();
        let version = one.event["object_version"].as_i64().expect("a version");
        let state = one.event["state"].to_string();
        let content = one.event.to_string();
        let hash = content_hash(&content);
        let entry = cards.entry(card.clone()).or_insert((0, String::new(), 0));
        *entry = (version, state.clone(), entry.2 + 1);
        records.extend([
            text(&event_id),
            int(0),
            text(&hash),
            text(content),
            text(&card),
            text("applied"),
            text("settled"),
            Param::Int(None),
        ]);
        audit.extend([
            text("decided"),
            text(&event_id),
            int(i64::from(one.delivery)),
            text(&event_id),
            text(hash),
            text(&card),
            text("applied"),
            Param::Text(None),
            Param::Int(None),
            Param::Text(None),
        ]);
        audit.extend([
            text("card"),
            text(&card),
            Param::Int(None),
            Param::Text(None),
            Param::Text(None),
            text(&card),
            text("active"),
            Param::Text(None),
            int(version),
            text(state),
        ]);
    }
    let mut card_rows = Vec::new();
    let mut counter_rows = Vec::new();
    for (card, (version, state, applied)) in &cards {
        card_rows.extend([text(card), int(*version), text(state), int(0)]);
        counter_rows.extend([text(card), int(*applied), int(0)]);
    }
    db.begin(Isolation::Serial).expect("begin");
    let sql = [
        format!(
            "INSERT INTO cards (card_id, version, state, paused) VALUES {} \
             ON CONFLICT (card_id) DO UPDATE SET version = excluded.version, \
             state = excluded.state, paused = excluded.paused",
            placeholders(cards.len(), 4)
        ),
        format!(
            "INSERT INTO counters (card_id, event_replacements, authority_replacements) \
             VALUES {} ON CONFLICT (card_id) DO UPDATE SET \
             event_replacements = counters.event_replacements + excluded.event_replacements",
            placeholders(cards.len(), 3)
        ),
        format!(
            "INSERT INTO records (event_id, idx, content_hash, content, object_id, decision, \
             standing, recorded_at) VALUES {}",
            placeholders(chunk.len(), 8)
        ),
        format!(
            "INSERT INTO audit (entry, subject, delivery, event_id, content_hash, card_id, \
             decision, previous, version, state) VALUES {}",
            placeholders(chunk.len() * 2, 10)
        ),
    ];
    for (sql, params) in sql.iter().zip([card_rows, counter_rows, records, audit]) {
        db.execute(sql, &params).expect("a bare statement");
    }
    db.commit().expect("commit");
}

/// `connections` threads of this process, each with its own connection and cards, each
/// running `per` deliveries in transactions of `batch`.
fn threads(kind: Kind, url: &DbUrl, connections: usize, batch: usize, iters: u64) -> Duration {
    let per = iters.div_ceil(connections as u64);
    let work: Vec<(Store, Vec<Incoming>)> = (0..connections)
        .map(|receiver| {
            let store = Store::open(url).expect("open");
            (store, deliveries(next_run(), receiver, per))
        })
        .collect();
    let start = Instant::now();
    std::thread::scope(|scope| {
        for (mut store, incoming) in work {
            scope.spawn(move || run_one(kind, &mut store, &incoming, batch));
        }
    });
    start.elapsed()
}

/// `receivers` processes (this binary in its child mode), started together.
fn processes(kind: Kind, url: &DbUrl, receivers: usize, batch: usize, iters: u64) -> Duration {
    let per = iters.div_ceil(receivers as u64);
    let exe = std::env::current_exe().expect("the bench binary");
    let mut children: Vec<_> = (0..receivers)
        .map(|receiver| {
            let spec = format!(
                "{} {} {receiver} {per} {batch} {}",
                kind.name(),
                url.connection_text(),
                next_run()
            );
            let mut child = Command::new(&exe)
                .env(CHILD, spec)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("a bench child");
            let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
            let ready = lines.next().expect("a line").expect("ready");
            assert_eq!(ready, "ready");
            (child, lines)
        })
        .collect();
    let start = Instant::now();
    for (child, _) in &mut children {
        let stdin = child.stdin.as_mut().expect("stdin");
        stdin
            .write_all(b"go\n")
            .and_then(|()| stdin.flush())
            .expect("go");
    }
    for (_, lines) in &mut children {
        let done = lines.next().expect("a line").expect("done");
        assert_eq!(done, "done");
    }
    let elapsed = start.elapsed();
    for (mut child, _) in children {
        assert!(child.wait().expect("a child").success());
    }
    elapsed
}

/// The child mode: one receiver process of a process row.
fn child(spec: &str) {
    let parts: Vec<&str> = spec.split(' ').collect();
    let [kind, url, receiver, count, batch, run] = parts[..] else {
        panic!("{CHILD}: KIND URL RECEIVER COUNT BATCH RUN, not {spec}");
    };
    let kind = if kind == "bare" {
        Kind::Bare
    } else {
        Kind::Decide
    };
    let url = DbUrl::parse(url).expect("a database url");
    let receiver: usize = receiver.parse().expect("a receiver");
    let incoming = deliveries(
        run.parse().expect("a run"),
        receiver,
        count.parse().expect("a count"),
    );
    let mut store = Store::open(&url).expect("open");
    println!("ready");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).expect("go");
    run_one(kind, &mut store, &incoming, batch.parse().expect("a batch"));
    println!("done");
}

/// The store's round trips per delivery, for each configuration: 64 deliveries per
/// connection (threads), each store's own counts summed.
fn profile(name: &str, url: &DbUrl) {
    for connections in [1usize, 4] {
        for batch in [1usize, 16] {
            let work: Vec<(Store, Vec<Incoming>)> = (0..connections)
                .map(|receiver| {
                    let store = Store::open(url).expect("open");
                    (store, deliveries(next_run(), receiver, 64))
                })
                .collect();
            let totals = std::thread::scope(|scope| {
                let handles: Vec<_> = work
                    .into_iter()
                    .map(|(mut store, incoming)| {
                        scope.spawn(move || {
                            let before = store.stats();
                            run_one(Kind::Decide, &mut store, &incoming, batch);
                            (store.stats().since(&before), store.retries)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|handle| handle.join().expect("a profile thread"))
                    .collect::<Vec<_>>()
            });
            let mut sum = DbStats::default();
            let mut retries = 0;
            for (stats, retried) in totals {
                sum.executes += stats.executes;
                sum.queries += stats.queries;
                sum.prepares += stats.prepares;
                sum.batches += stats.batches;
                retries += retried;
            }
            let deliveries = (64 * connections) as f64;
            eprintln!(
                "profile {name} {connections}conn batch{batch}: per delivery {:.2} writes, \
                 {:.2} queries, {:.2} prepares, {:.2} begin/commit, {:.2} round trips; \
                 {retries} retries in {} deliveries",
                sum.executes as f64 / deliveries,
                sum.queries as f64 / deliveries,
                sum.prepares as f64 / deliveries,
                sum.batches as f64 / deliveries,
                sum.round_trips() as f64 / deliveries,
                deliveries,
            );
        }
    }
}

fn bench_backend(c: &mut Criterion, name: &str, url: &DbUrl) {
    fresh(url, 4);
    profile(name, url);
    let mut group = c.benchmark_group(format!("store-{name}"));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    group.warm_up_time(Duration::from_secs(1));
    for connections in [1usize, 4] {
        for batch in [1usize, 16] {
            for kind in [Kind::Decide, Kind::Bare] {
                let label = format!("{}/{connections}conn/batch{batch}", kind.name());
                group.bench_function(label, |b| {
                    b.iter_custom(|iters| threads(kind, url, connections, batch, iters))
                });
            }
        }
    }
    for batch in [1usize, 16] {
        for kind in [Kind::Decide, Kind::Bare] {
            let label = format!("{}/4proc/batch{batch}", kind.name());
            group.bench_function(label, |b| {
                b.iter_custom(|iters| processes(kind, url, 4, batch, iters))
            });
        }
    }
    group.finish();
}

/// One row of the paired rounds: `writers` threads (or processes) at `batch`.
fn paired_row(name: &str, url: &DbUrl, writers: usize, procs: bool, batch: usize, rounds: usize) {
    let count: u64 = if batch == 1 { 64 } else { 512 };
    let time = |kind| {
        let elapsed = if procs {
            processes(kind, url, writers, batch, count)
        } else {
            threads(kind, url, writers, batch, count)
        };
        elapsed.as_secs_f64() * 1e6 / count as f64
    };
    let (mut store, mut bare, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (s, b) = if round % 2 == 0 {
            let s = time(Kind::Decide);
            (s, time(Kind::Bare))
        } else {
            let b = time(Kind::Bare);
            (time(Kind::Decide), b)
        };
        store.push(s);
        bare.push(b);
        ratios.push(b / s);
    }
    let median = |values: &mut Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let (low, high) = (
        ratios.iter().copied().fold(f64::INFINITY, f64::min),
        ratios.iter().copied().fold(0.0, f64::max),
    );
    let writers = format!(
        "{writers} {}",
        if procs { "processes" } else { "connections" }
    );
    println!(
        "| {name} | {writers} | {batch} | {:.0} | {:.0} | {:.2} | {low:.2}-{high:.2} |",
        median(&mut store),
        median(&mut bare),
        median(&mut ratios)
    );
}

/// Every row of one backend in paired rounds.
fn paired_backend(name: &str, url: &DbUrl, rounds: usize) {
    fresh(url, 4);
    for (writers, procs) in [(1, false), (4, false), (4, true)] {
        for batch in [1usize, 16] {
            paired_row(name, url, writers, procs, batch, rounds);
        }
    }
}

/// The paired rounds of both backends, as a Markdown table.
fn paired(rounds: usize) {
    println!(
        "| backend | writers | per transaction | store µs/delivery (median) | bare µs/delivery \
         (median) | median of the rounds' bare/store | lowest-highest |"
    );
    println!("|---|---|---|---|---|---|---|");
    each_backend(|name, url| paired_backend(name, url, rounds));
}

fn stores(c: &mut Criterion) {
    each_backend(|name, url| bench_backend(c, name, url));
}

/// Runs `f` on a SQLite file of its own and on a PostgreSQL database of its own.
fn each_backend(mut f: impl FnMut(&str, &DbUrl)) {
    let folder = std::env::temp_dir().join(format!("arrival-store-bench-{}", std::process::id()));
    std::fs::create_dir_all(&folder).expect("a temporary folder");
    f("sqlite", &DbUrl::Sqlite(folder.join("bench.db")));
    let _ = std::fs::remove_dir_all(&folder);

    let admin = std::env::var("ARRIVAL_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let name = format!("arrival_bench_{}", std::process::id());
    let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap_or_else(|error| {
        panic!("PostgreSQL does not answer at {admin}: {error}; install and start it, or set ARRIVAL_DATABASE_URL")
    });
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .expect("create the bench database");
    let base = admin.split('?').next().expect("a url");
    let url = format!(
        "{}/{name}",
        &base[..base.rfind('/').expect("a database path")]
    );
    f("postgres", &DbUrl::Postgres(url));
    let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
        return;
    }
    if let Ok(rounds) = std::env::var(PAIRED) {
        let rounds = rounds
            .parse()
            .expect("ARRIVAL_STORE_BENCH_PAIRED is a number of rounds");
        paired(rounds);
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    stores(&mut criterion);
    criterion.final_summary();
}
