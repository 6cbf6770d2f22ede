//! The load generator (`arrival pipeline load`): starts `arrival pipeline serve` as a child
//! process on a loopback port with N consumers, posts signed requests from this process
//! over several kept-alive connections, waits until every accepted entry has a committed
//! verdict, and reports requests/s from the first request to the last commit, and the
//! p50/p99 latency from ingress receive to inbox commit (both read from the inbox). With
//! `processes` above one it starts that many `serve` children on one consumer group and one
//! inbox (PostgreSQL, for several processes) and spreads the senders over them. Beside each
//! run it can measure the machine's bare limits for the same requests ([`baselines`]):
//! `redis-benchmark` appending the same bodies with `XADD`, and a bare batched `INSERT` of
//! the same rows into the same database.

use super::client::Client;
use super::drill::{self, KEY_CONTRACTS, KEY_FINANCE};
use super::ingress::PipelineError;
use super::run::{unique, TempDir};
use super::sql::{Db, InboxAt};
use super::store;
use super::stream::{self, Names};
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How the load generator runs (`arrival pipeline load`).
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Requests per run.
    pub requests: usize,
    /// Entries per batch (one transaction per batch).
    pub count: usize,
    /// Concurrent client connections.
    pub concurrency: usize,
    /// Redis URL.
    pub redis_url: String,
    /// The inbox: a new SQLite file when `None`, else this scratch database, which each
    /// run EMPTIES first (every inbox table truncated) and then registers its
    /// applications in.
    pub db: Option<InboxAt>,
    /// `serve` processes on one consumer group and one inbox.
    pub processes: usize,
}

/// One measured run.
#[derive(Clone, Debug, Serialize)]
pub struct LoadResult {
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// `serve` processes.
    pub processes: usize,
    /// Consumers per process.
    pub consumers: usize,
    /// Entries per batch.
    pub count: usize,
    /// Requests posted.
    pub requests: usize,
    /// Of which accepted (202).
    pub accepted: usize,
    /// Accepted requests per second, first request to last commit.
    pub per_second: f64,
    /// Ingress-only rate: requests answered per second.
    pub ingress_per_second: f64,
    /// Median receive-to-commit latency (ms).
    pub p50_ms: i64,
    /// 99th percentile receive-to-commit latency (ms).
    pub p99_ms: i64,
}

fn bad(error: impl std::fmt::Display) -> PipelineError {
    PipelineError::Other(error.to_string())
}

/// The drill generator's requests for a load run, every one signed right (throughput wants
/// valid requests: the few the schedule spoils on purpose are re-signed), with their
/// applications.
pub fn load_requests(
    count: usize,
    now: i64,
) -> (
    crate::facts::application::Applications,
    Vec<crate::facts::world::PostedRequest>,
) {
    let (apps, mut requests) = drill::requests(3, count, now);
    for request in &mut requests {
        let key = if request.source.as_deref() == Some("finance") {
            KEY_FINANCE
        } else {
            KEY_CONTRACTS
        };
        request.signature = Some(crate::facts::ingress::sign(key.as_bytes(), &request.body));
    }
    (apps, requests)
}

/// Starts one `serve` child on `db` and returns it with its address.
fn spawn_serve(
    db: &InboxAt,
    keys: &std::path::Path,
    names: &Names,
    consumers: usize,
    args: &LoadOptions,
) -> Result<(std::process::Child, std::net::SocketAddr), PipelineError> {
    let exe = std::env::current_exe().map_err(bad)?;
    let mut child = Command::new(exe)
        .args(["pipeline", "serve", "--listen", "127.0.0.1:0"])
        // Through the environment, where `ps` does not show a PostgreSQL password.
        .env("ARRIVAL_DB", db.connection_text())
        .arg("--keys")
        .arg(keys)
        .args(["--stream", &names.stream, "--group", &names.group])
        .args(["--consumers", &consumers.to_string()])
        .args(["--count", &args.count.to_string()])
        .env("ARRIVAL_REDIS_URL", &args.redis_url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(bad)?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .map_err(bad)?;
    let addr = line
        .trim()
        .trim_start_matches("listening ")
        .parse()
        .map_err(|_| bad(format!("serve did not start: {line:?}")))?;
    Ok((child, addr))
}

/// One run with `consumers` consumers in each of `args.processes` processes.
pub fn measure(args: &LoadOptions, consumers: usize) -> Result<LoadResult, PipelineError> {
    // Fail before measuring when Redis does not answer: `serve` would only retry, and the
    // run would report a throughput of zero as if it were a figure.
    stream::connect(&args.redis_url, Duration::from_secs(5)).map_err(|error| {
        bad(format!(
            "cannot reach Redis at {}: {error} (start redis-server, or set ARRIVAL_REDIS_URL)",
            args.redis_url
        ))
    })?;
    let dir = TempDir::new("arrival-load").map_err(bad)?;
    let db = args
        .db
        .clone()
        .unwrap_or_else(|| InboxAt::Sqlite(dir.0.join("inbox.db")));
    let now = store::now_ms() / 1000;
    let (apps, requests) = load_requests(args.requests, now);
    let conn = store::open(&db, store::DEFAULT_BUSY_TIMEOUT_MS).map_err(bad)?;
    if args.db.is_some() {
        store::empty_scratch(&conn).map_err(bad)?;
    }
    store::put_applications(&conn, &apps).map_err(bad)?;
    let keys = dir.0.join("keys.json");
    std::fs::write(
        &keys,
        format!(r#"{{"finance":["{KEY_FINANCE}"],"contracts":["{KEY_CONTRACTS}"]}}"#),
    )
    .map_err(bad)?;
    let names = Names {
        stream: unique("arrival-load"),
        group: "inbox".into(),
    };
    let mut children = Vec::new();
    for _ in 0..args.processes.max(1) {
        children.push(spawn_serve(&db, &keys, &names, consumers, args)?);
    }
    let addrs: Vec<std::net::SocketAddr> = children.iter().map(|(_, addr)| *addr).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(bad)?;
    let started = Instant::now();
    let chunks: Vec<Vec<crate::facts::world::PostedRequest>> = requests
        .chunks(requests.len().div_ceil(args.concurrency.max(1)))
        .map(<[_]>::to_vec)
        .collect();
    let accepted: usize = runtime.block_on(async {
        let mut tasks = Vec::new();
        for (index, chunk) in chunks.into_iter().enumerate() {
            let addr = addrs[index % addrs.len()];
            tasks.push(tokio::spawn(async move {
                let mut client = Client::new(addr);
                let mut accepted = 0;
                for request in chunk {
                    if let Ok(reply) = client
                        .post(
                            request.source.as_deref(),
                            request.signature.as_deref(),
                            &request.body,
                        )
                        .await
                    {
                        accepted += usize::from(reply.status == 202);
                    }
                }
                accepted
            }));
        }
        let mut total = 0;
        for task in tasks {
            total += task.await.unwrap_or(0);
        }
        total
    });
    let ingress_seconds = started.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(120);
    while store::verdict_count(&conn).map_err(bad)? < accepted && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for (child, _) in &mut children {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let _ = child.wait();
    }
    let (latencies, first, last) = store::latencies(&conn).map_err(bad)?;
    let percentile = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    if let Ok(mut redis) = stream::connect(&args.redis_url, Duration::from_secs(2)) {
        let _ = stream::delete_keys(&mut redis, &names);
    }
    let span = ((last - first).max(1) as f64) / 1000.0;
    Ok(LoadResult {
        backend: conn.backend(),
        processes: args.processes.max(1),
        consumers,
        count: args.count,
        requests: requests.len(),
        accepted,
        per_second: latencies.len() as f64 / span,
        ingress_per_second: requests.len() as f64 / ingress_seconds,
        p50_ms: percentile(0.5),
        p99_ms: percentile(0.99),
    })
}

/// The bare limits of this machine for a run's requests, measured in the same run.
#[derive(Clone, Debug, Serialize)]
pub struct Baselines {
    /// `redis-benchmark` appending the run's bodies with `XADD`, as many connections as
    /// the run's senders: appends per second.
    pub xadd_per_second: f64,
    /// A bare `INSERT` of one row per request (entry, identity, canonical content) into a
    /// table of its own in the run's database, `count` rows per transaction: rows per
    /// second.
    pub insert_per_second: f64,
}

/// Measures [`Baselines`] for `args` on `db` (a new SQLite file when `None`).
pub fn baselines(args: &LoadOptions) -> Result<Baselines, PipelineError> {
    let now = store::now_ms() / 1000;
    let (_, requests) = load_requests(args.requests, now);
    let dir = TempDir::new("arrival-bare").map_err(bad)?;
    let db = args
        .db
        .clone()
        .unwrap_or_else(|| InboxAt::Sqlite(dir.0.join("bare.db")));
    let conn = store::open(&db, store::DEFAULT_BUSY_TIMEOUT_MS).map_err(bad)?;
    Ok(Baselines {
        xadd_per_second: bare_xadd(args, &requests)?,
        insert_per_second: bare_insert(&conn, &requests, args.count.max(1))?,
    })
}

/// `redis-benchmark -n N -c C XADD key * body BODY` with a body of the run's median size.
fn bare_xadd(
    args: &LoadOptions,
    requests: &[crate::facts::world::PostedRequest],
) -> Result<f64, PipelineError> {
    let url = redis::parse_redis_url(&args.redis_url)
        .ok_or_else(|| bad(format!("not a Redis URL: {}", args.redis_url)))?;
    let host = url.host_str().unwrap_or("127.0.0.1").to_owned();
    let port = url.port().unwrap_or(6379).to_string();
    let mut sizes: Vec<usize> = requests.iter().map(|r| r.body.len()).collect();
    sizes.sort_unstable();
    let body = requests
        .iter()
        .find(|r| r.body.len() == sizes[sizes.len() / 2])
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .unwrap_or_default();
    let key = unique("arrival-bare");
    let output = Command::new("redis-benchmark")
        .args(["-h", &host, "-p", &port, "-q"])
        .args(["-n", &requests.len().to_string()])
        .args(["-c", &args.concurrency.max(1).to_string()])
        .args(["XADD", &key, "*", "body", &body])
        .output()
        .map_err(|error| {
            bad(format!(
                "redis-benchmark did not run: {error} (apt-get install redis-tools)"
            ))
        })?;
    if let Ok(mut redis) = stream::connect(&args.redis_url, Duration::from_secs(2)) {
        let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(&key).query(&mut redis);
    }
    let text = String::from_utf8_lossy(&output.stdout);
    // `-q` prints `XADD ...: 12345.67 requests per second, p50=...` (after a `\r` line).
    text.split(['\r', '\n'])
        .filter_map(|line| line.split(": ").nth(1))
        .filter_map(|rest| rest.split(" requests per second").next())
        .find_map(|number| number.trim().parse().ok())
        .ok_or_else(|| bad(format!("redis-benchmark printed no rate: {text}")))
}

/// Inserts one row per request, `batch` rows per transaction, into `bare_load` (created
/// and dropped here); rows per second.
fn bare_insert(
    db: &Db,
    requests: &[crate::facts::world::PostedRequest],
    batch: usize,
) -> Result<f64, PipelineError> {
    let setup = "DROP TABLE IF EXISTS bare_load;
        CREATE TABLE bare_load(entry TEXT PRIMARY KEY, tenant_id TEXT NOT NULL,
          source TEXT NOT NULL, event_id TEXT NOT NULL, canonical TEXT NOT NULL)";
    db.batch(setup).map_err(bad)?;
    let rows: Vec<(String, String, String)> = requests
        .iter()
        .enumerate()
        .map(|(index, request)| {
            let body = String::from_utf8_lossy(&request.body).into_owned();
            let source = request.source.clone().unwrap_or_default();
            (format!("{index}-0"), source, body)
        })
        .collect();
    let started = Instant::now();
    for chunk in rows.chunks(batch) {
        store::in_transaction(db, |tx| {
            for (entry, source, body) in chunk {
                tx.exec(
                    "INSERT INTO bare_load VALUES (?1, 'load', ?2, ?1, ?3)",
                    crate::args![entry, source, body],
                )?;
            }
            Ok::<_, super::sql::SqlError>(())
        })
        .map_err(bad)?;
    }
    let seconds = started.elapsed().as_secs_f64().max(1e-9);
    db.batch("DROP TABLE bare_load").map_err(bad)?;
    Ok(rows.len() as f64 / seconds)
}
