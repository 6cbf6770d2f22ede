//! The redis-down drill: a private Redis killed while requests arrive, then restarted.

use super::checks::common_checks;
use super::rig::requests;
use super::rig::{drain_then_stop, finish, plain_consumers, post, rig};
use super::{DrillOptions, DrillReport};
use crate::pipeline::client::Client;
use crate::pipeline::ingress::PipelineError;
use crate::pipeline::run::TempDir;
use crate::pipeline::store;
use crate::pipeline::stream;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A private `redis-server` (AOF, fsync always) on a free loopback port; killed on drop.
pub struct PrivateRedis {
    /// Its folder (AOF inside).
    pub dir: TempDir,
    /// Its port.
    pub port: u16,
    child: Option<std::process::Child>,
}

impl PrivateRedis {
    /// Starts one on a free port.
    pub fn start() -> Result<PrivateRedis, PipelineError> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut redis = PrivateRedis {
            dir: TempDir::new("arrival-redis")?,
            port,
            child: None,
        };
        redis.restart()?;
        Ok(redis)
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts (again) on the same port and folder, and waits for it to answer.
    pub fn restart(&mut self) -> Result<(), PipelineError> {
        let child = std::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir.0)
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|error| {
                PipelineError::Other(format!(
                    "cannot start redis-server ({error}): install it (apt-get install redis-server)"
                ))
            })?;
        self.child = Some(child);
        for _ in 0..100 {
            if let Ok(mut conn) = stream::connect(&self.url(), Duration::from_millis(200)) {
                if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(PipelineError::Other(
            "the private redis-server did not answer".into(),
        ))
    }

    /// Kills it (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The Redis-down drill (its own private server).
pub async fn redis_down(options: &DrillOptions) -> Result<DrillReport, PipelineError> {
    let started = Instant::now();
    let mut server = PrivateRedis::start()?;
    let now = store::now_ms() / 1000;
    let (apps, requests) = requests(options.seed, options.requests, now);
    let mut rig = rig(
        &server.url(),
        &apps,
        options.count,
        30_000,
        store::DEFAULT_BUSY_TIMEOUT_MS,
        options.mutant,
    )
    .await?;
    let mut report = DrillReport::new("redis-down", options, requests.len());
    let stop = Arc::new(AtomicBool::new(false));
    let consumers = plain_consumers(&rig, options.consumers, &stop);
    report.consumer_starts = consumers.len();
    let mut client = Client::new(rig.running.addr);
    let mut accepted = BTreeMap::new();
    let third = requests.len() / 3;
    let mut accepted_while_down = 0;
    let mut unavailable = 0;
    for (index, request) in requests.iter().enumerate() {
        if index == third {
            server.kill();
        }
        if index == 2 * third {
            server.restart()?;
            // Give the ingress connection a moment to come back; requests meanwhile may
            // still be answered 503, which the sender would resend.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let down = (third..2 * third).contains(&index);
        let reply = post(&mut client, &mut report, request).await?;
        if reply.status == 503 {
            unavailable += 1;
        }
        if let Some(id) = reply.entry {
            if down {
                accepted_while_down += 1;
            }
            accepted.insert(id, request.number);
        }
    }
    report.check(
        "no-202-while-down",
        accepted_while_down == 0 && unavailable > 0,
        format!("{accepted_while_down} accepted while Redis was down, {unavailable} answered 503"),
    );
    // The other end of the check: reconnect the checker's own connection.
    rig.redis = stream::connect(&server.url(), Duration::from_secs(5))?;
    drain_then_stop(&mut rig, &stop, consumers).await?;
    let entries: BTreeSet<String> = stream::range_all(&mut rig.redis, &rig.options.names.stream)?
        .into_iter()
        .map(|entry| entry.id)
        .collect();
    let lost = accepted.keys().filter(|id| !entries.contains(*id)).count();
    report.check(
        "accepted-entries-survive-restart",
        lost == 0,
        format!(
            "{} accepted, {lost} missing from the stream after the restart",
            accepted.len()
        ),
    );
    common_checks(&mut report, &mut rig, &accepted, None)?;
    let report = finish(rig, report, started).await;
    drop(server);
    Ok(report)
}
