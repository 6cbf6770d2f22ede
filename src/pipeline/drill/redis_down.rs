//! The redis-down drill: a private Redis killed while requests arrive, then restarted.

use super::checks::common_checks;
use super::rig::{
    answer_word, drain_then_stop, finish, model, plain_consumers, post, requests, rig,
};
use super::{DrillOptions, DrillReport};
use crate::facts::ingress::Response;
use crate::facts::world::{PostedRequest, World};
use crate::pipeline::client::{Client, Reply};
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

/// How many connections post the requests sent while Redis is down.
const DOWN_CONNECTIONS: usize = 8;

/// The Redis-down drill (its own private server): the requests before the window posted
/// with Redis up, the window's (`down_requests`, a third by default) with it killed, the
/// rest after its restart.
pub async fn redis_down(options: &DrillOptions) -> Result<DrillReport, PipelineError> {
    let started = Instant::now();
    let mut server = PrivateRedis::start()?;
    let now = store::now_ms() / 1000;
    let (apps, requests) = requests(options.seed, options.requests, now);
    let oracle = model(&apps, &requests, 3);
    let mut rig = rig(
        &server.url(),
        &apps,
        options.count,
        30_000,
        store::DEFAULT_BUSY_TIMEOUT_MS,
        options.mutant,
        None,
    )
    .await?;
    let mut report = DrillReport::new("redis-down", options, requests.len());
    let stop = Arc::new(AtomicBool::new(false));
    let consumers = plain_consumers(&rig, options.consumers, &stop);
    report.consumer_starts = consumers.len();
    let mut client = Client::new(rig.running.addr);
    let mut accepted = BTreeMap::new();
    let down = options
        .down_requests
        .unwrap_or(requests.len() / 3)
        .min(requests.len());
    let first = (requests.len() - down) / 2;
    for request in &requests[..first] {
        let reply = post(&mut client, &mut report, request).await?;
        if let Some(id) = reply.entry {
            accepted.insert(id, request.number);
        }
    }
    server.kill();
    let window = &requests[first..first + down];
    let answers = post_concurrently(rig.running.addr, window).await?;
    down_checks(&mut report, &oracle, window, &answers);
    server.restart()?;
    // Give the ingress connection a moment to come back; requests meanwhile may still be
    // answered 503, which the sender would resend.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for request in &requests[first + down..] {
        let reply = post(&mut client, &mut report, request).await?;
        if let Some(id) = reply.entry {
            accepted.insert(id, request.number);
        }
    }
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
    // The end state the model reaches over the requests that got in (a 503 put nothing
    // in the stream, and the drill does not resend): the inbox must equal it.
    let numbers: BTreeSet<u32> = accepted.values().copied().collect();
    let admitted: Vec<PostedRequest> = requests
        .iter()
        .filter(|request| numbers.contains(&request.number))
        .cloned()
        .collect();
    let end = model(&apps, &admitted, 3);
    common_checks(&mut report, &mut rig, &accepted, Some(&end))?;
    let report = finish(rig, report, started).await;
    drop(server);
    Ok(report)
}

/// Posts `requests` over [`DOWN_CONNECTIONS`] connections at once; each one's reply, in
/// the order of `requests`.
async fn post_concurrently(
    addr: std::net::SocketAddr,
    requests: &[PostedRequest],
) -> Result<Vec<Reply>, PipelineError> {
    let share = requests.len().div_ceil(DOWN_CONNECTIONS).max(1);
    let tasks: Vec<_> = requests
        .chunks(share)
        .map(|chunk| {
            let chunk = chunk.to_vec();
            tokio::spawn(async move {
                let mut client = Client::new(addr);
                let mut replies = Vec::with_capacity(chunk.len());
                for request in &chunk {
                    replies.push(
                        client
                            .post(
                                request.source.as_deref(),
                                request.signature.as_deref(),
                                &request.body,
                            )
                            .await?,
                    );
                }
                Ok::<_, std::io::Error>(replies)
            })
        })
        .collect();
    let mut out = Vec::with_capacity(requests.len());
    for task in tasks {
        let replies = task
            .await
            .map_err(|error| PipelineError::Other(format!("a posting task failed: {error}")))??;
        out.extend(replies);
    }
    Ok(out)
}

/// The window's answers, counted in the report, against the model's: every request the
/// model accepts (202) answered 503, every other one refused as the model refuses it, and
/// no 202 at all.
fn down_checks(
    report: &mut DrillReport,
    oracle: &World,
    window: &[PostedRequest],
    answers: &[Reply],
) {
    let expected: BTreeMap<u32, Response> = oracle.responses.iter().copied().collect();
    let (mut unavailable, mut refused, mut accepted, mut wrong) = (0, 0, 0, Vec::new());
    for (request, reply) in window.iter().zip(answers) {
        let word = answer_word(reply.status, &reply.reason());
        *report.answers.entry(word.clone()).or_default() += 1;
        let model = expected.get(&request.number);
        let want = match model {
            Some(response) if response.status() == 202 => Response::Unavailable,
            Some(response) => *response,
            None => Response::Unavailable,
        };
        match reply.status {
            503 => unavailable += 1,
            202 => accepted += 1,
            _ => refused += 1,
        }
        if word != answer_word(want.status(), want.reason()) {
            wrong.push(format!("request {} answered {word}", request.number));
        }
    }
    report.check(
        "no-202-while-down",
        accepted == 0 && wrong.is_empty() && unavailable > 0,
        format!(
            "{} requests while Redis was down: {unavailable} answered 503, {refused} refused \
             for their content as the model refuses them, {accepted} accepted; {} answered \
             otherwise than the model's answer with 503 for 202{}",
            window.len(),
            wrong.len(),
            wrong
                .first()
                .map(|w| format!(" (first: {w})"))
                .unwrap_or_default()
        ),
    );
}
