//! Durable decisions per second on SQLite and PostgreSQL, beside a bare INSERT of the same
//! rows in the same run: one delivery per transaction and 16 per transaction (the
//! acknowledgements still wait for the commit), on one connection and on four.
//!
//! Four connections are four threads of this one process, each with its own connection
//! and its own cards: they show what the database does with four writers at once, not
//! what four receiver processes cost (process start, one client each, scheduling between
//! processes). The concurrency drill is what runs receiver processes.
//!
//! PostgreSQL is the server at `ARRIVAL_DATABASE_URL` (default the local one); the bench
//! makes its own database and drops it at the end.

use arrival::store::{DbUrl, Incoming, Isolation, Param, Store};
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const CARDS: u64 = 8;
static RUN: AtomicU64 = AtomicU64::new(0);

/// `count` deliveries with fresh event ids for `receiver`'s own cards, each newer than the
/// last for its card: every one is a new decision (mostly `applied`).
fn deliveries(receiver: usize, count: u64) -> Vec<Incoming> {
    let run = RUN.fetch_add(1, Ordering::SeqCst);
    (0..count)
        .map(|i| Incoming {
            delivery: i as u32,
            received_at: None,
            event: json!({
                "event_id": format!("b{run}-{i}"),
                "object_id": format!("card-{receiver}-{}", i % CARDS),
                "object_version": 1_000_000 * run + i + 2,
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
        .database()
        .batch(
            "CREATE TABLE IF NOT EXISTS bare_rows (event_id TEXT PRIMARY KEY, content TEXT NOT NULL, \
             decision TEXT NOT NULL)",
        )
        .expect("bare table");
    store
}

/// Durable decisions over `connections` connections (one thread each, this process),
/// `batch` per transaction.
fn decide(url: &DbUrl, connections: usize, batch: usize, iters: u64) -> Duration {
    let per = iters.div_ceil(connections as u64);
    let work: Vec<(Store, Vec<Incoming>)> = (0..connections)
        .map(|receiver| (Store::open(url).expect("open"), deliveries(receiver, per)))
        .collect();
    let start = Instant::now();
    std::thread::scope(|scope| {
        for (mut store, incoming) in work {
            scope.spawn(move || {
                let mut acked = 0usize;
                for chunk in incoming.chunks(batch) {
                    store
                        .deliver_batch(chunk, &mut |_| acked += 1)
                        .expect("a durable decision");
                }
                assert_eq!(acked, incoming.len());
            });
        }
    });
    start.elapsed()
}

/// The same rows as a bare INSERT each, `batch` per transaction, same durability settings.
fn bare(url: &DbUrl, connections: usize, batch: usize, iters: u64) -> Duration {
    let per = iters.div_ceil(connections as u64);
    let work: Vec<(Store, Vec<Incoming>)> = (0..connections)
        .map(|receiver| (Store::open(url).expect("open"), deliveries(receiver, per)))
        .collect();
    let start = Instant::now();
    std::thread::scope(|scope| {
        for (mut store, incoming) in work {
            scope.spawn(move || {
                let db = store.database();
                for chunk in incoming.chunks(batch) {
                    db.begin(Isolation::Serial).expect("begin");
                    for one in chunk {
                        db.execute(
                            "INSERT INTO bare_rows (event_id, content, decision) VALUES ($1, $2, $3)",
                            &[
                                Param::Text(one.event["event_id"].as_str().map(str::to_owned)),
                                Param::Text(Some(one.event.to_string())),
                                Param::Text(Some("applied".into())),
                            ],
                        )
                        .expect("insert");
                    }
                    db.commit().expect("commit");
                }
            });
        }
    });
    start.elapsed()
}

fn bench_backend(c: &mut Criterion, name: &str, url: &DbUrl) {
    fresh(url, 4);
    let mut group = c.benchmark_group(format!("store-{name}"));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    group.warm_up_time(Duration::from_secs(1));
    for connections in [1usize, 4] {
        for batch in [1usize, 16] {
            group.bench_function(format!("decide/{connections}conn/batch{batch}"), |b| {
                b.iter_custom(|iters| decide(url, connections, batch, iters))
            });
            group.bench_function(format!("bare-insert/{connections}conn/batch{batch}"), |b| {
                b.iter_custom(|iters| bare(url, connections, batch, iters))
            });
        }
    }
    group.finish();
}

fn stores(c: &mut Criterion) {
    let folder = std::env::temp_dir().join(format!("arrival-store-bench-{}", std::process::id()));
    std::fs::create_dir_all(&folder).expect("a temporary folder");
    bench_backend(c, "sqlite", &DbUrl::Sqlite(folder.join("bench.db")));
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
    bench_backend(c, "postgres", &DbUrl::Postgres(url));
    let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
}

criterion_group!(benches, stores);
criterion_main!(benches);
