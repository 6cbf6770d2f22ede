//! The load generator (`arrival pipeline load`): starts `arrival pipeline serve` as a child
//! process on a loopback port with N consumers, posts signed requests from this process
//! over several kept-alive connections, waits until every accepted entry has a committed
//! verdict, and reports requests/s from the first request to the last commit, and the
//! p50/p99 latency from ingress receive to inbox commit (both read from the inbox).

use super::client::Client;
use super::drill::{self, KEY_CONTRACTS, KEY_FINANCE};
use super::ingress::PipelineError;
use super::run::{unique, TempDir};
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
}

/// One measured run.
#[derive(Clone, Debug, Serialize)]
pub struct LoadResult {
    /// Consumers.
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

/// One run with `consumers` consumers.
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
    let db = dir.0.join("inbox.db");
    let now = store::now_ms() / 1000;
    let (apps, mut requests) = drill::requests(3, args.requests, now);
    // Throughput wants valid requests: re-sign the few the schedule spoiled on purpose.
    for request in &mut requests {
        let key = if request.source.as_deref() == Some("finance") {
            KEY_FINANCE
        } else {
            KEY_CONTRACTS
        };
        request.signature = Some(crate::facts::ingress::sign(key.as_bytes(), &request.body));
    }
    let conn = store::open(&db.clone().into(), store::DEFAULT_BUSY_TIMEOUT_MS).map_err(bad)?;
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
    let exe = std::env::current_exe().map_err(bad)?;
    let mut child = Command::new(exe)
        .args(["pipeline", "serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(&db)
        .arg("--keys")
        .arg(&keys)
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
    let addr: std::net::SocketAddr = line
        .trim()
        .trim_start_matches("listening ")
        .parse()
        .map_err(|_| bad(format!("serve did not start: {line:?}")))?;
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
        for chunk in chunks {
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
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let _ = child.wait();
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
