//! `arrival pipeline run FIXTURE`: a facts fixture played against the real pipeline.
//! Ingress runs in this process on a loopback port (its clock shifted so each request's
//! `received_at` is now); each request goes over real HTTP with its headers and body byte
//! for byte; every consumer step is a child process (`arrival pipeline step`) on the real
//! stream and inbox, and a `crash` step SIGKILLs that child at its point. The end is read
//! back from Redis and SQLite into the same report `arrival replay` prints, compared with
//! the fixture's `expect` and with the model's own replay of the same fixture.

use super::client::Client;
use super::consumer::{BatchResult, ReadKind};
use super::ingress::{start, PipelineError, ServeOptions};
use super::store;
use super::stream::{self, Names};
use crate::facts::application::AppKey;
use crate::facts::envelope::{Envelope, Source};
use crate::facts::fixture::{response_from_parts, sort_facts, Scenario, DEFAULT_CONSUMER};
use crate::facts::inbox::{ready, Inbox, Parts, PoisonCategory};
use crate::facts::ingress::Response;
use crate::facts::replay::{compare, replay, DeadLetterReport, EndReport, Report, StepReport};
use crate::facts::step::{Consumer, Crash, PostFault, Step};
use crate::facts::world::{Read, POISON_BODY};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How to run a fixture.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Redis URL.
    pub redis_url: String,
    /// This program (consumer steps run as `EXE pipeline step ...`).
    pub exe: PathBuf,
    /// Run a wrong pipeline instead.
    pub mutant: Option<crate::facts::mutants::Mutant>,
}

/// A random suffix for keys and files.
pub fn unique(prefix: &str) -> String {
    let nanos = store::now_ms() as u64 ^ (std::process::id() as u64) << 32;
    let mut rng = crate::harness::rng::SplitMix::new(
        nanos
            ^ std::time::Instant::now().elapsed().as_nanos() as u64
            ^ (&nanos as *const u64 as u64),
    );
    format!("{prefix}-{:016x}", rng.next_u64())
}

/// A temporary folder removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new, empty folder under the system's temporary folder.
    pub fn new(prefix: &str) -> std::io::Result<TempDir> {
        let path = std::env::temp_dir().join(unique(prefix));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Runner<'a> {
    scenario: &'a Scenario,
    options: &'a RunOptions,
    db: PathBuf,
    names: Names,
    redis: redis::Connection,
    ids: Vec<String>,
    accepted: BTreeSet<String>,
    responses: BTreeMap<u32, Response>,
    owed: BTreeSet<u32>,
    down: BTreeSet<String>,
    steps: Vec<StepReport>,
}

/// Runs a fixture against real Redis and SQLite and reports like `replay`.
pub async fn run(scenario: &Scenario, options: &RunOptions) -> Result<Report, PipelineError> {
    let dir = TempDir::new("arrival-run")?;
    let db = dir.0.join("inbox.db");
    let names = Names {
        stream: unique("arrival-run"),
        group: "inbox".into(),
    };
    let mut conn = store::open(&db, store::DEFAULT_BUSY_TIMEOUT_MS)?;
    store::put_applications(&mut conn, &scenario.applications)?;
    let mut redis = stream::connect(&options.redis_url, std::time::Duration::from_secs(5))
        .map_err(|error| {
            PipelineError::Other(format!(
                "cannot reach Redis at {}: {error} (start redis-server, or set ARRIVAL_REDIS_URL)",
                options.redis_url
            ))
        })?;
    stream::ensure_group(&mut redis, &names)?;
    let serve = ServeOptions {
        listen: "127.0.0.1:0".parse().expect("a socket address"),
        db: db.clone(),
        keys: scenario.setup.config.keys.clone(),
        redis_url: options.redis_url.clone(),
        names: names.clone(),
        consumers: 0,
        count: 1,
        min_idle_ms: 0,
        max_deliveries: scenario.setup.max_deliveries,
        busy_timeout_ms: store::DEFAULT_BUSY_TIMEOUT_MS,
        max_body_bytes: scenario.setup.config.max_body_bytes,
        body_timeout_ms: crate::pipeline::ingress::DEFAULT_BODY_TIMEOUT_MS,
        freshness_seconds: scenario.setup.config.freshness_seconds,
        mutant: options.mutant,
        shifted_clock: true,
    };
    let running = start(&serve, Arc::new(super::consumer::NoFaults)).await?;
    let mut client = Client::new(running.addr);
    let mut runner = Runner {
        scenario,
        options,
        db: db.clone(),
        names: names.clone(),
        redis,
        ids: Vec::new(),
        accepted: BTreeSet::new(),
        responses: BTreeMap::new(),
        owed: BTreeSet::new(),
        down: BTreeSet::new(),
        steps: Vec::new(),
    };
    let result = runner.walk_all(&running, &mut client, &mut conn).await;
    running.shutdown().await;
    let report = match result {
        Ok(()) => runner.report(&mut conn),
        Err(error) => Err(error),
    };
    let _ = stream::delete_keys(&mut runner.redis, &names);
    drop(conn);
    report
}

impl Runner<'_> {
    async fn walk_all(
        &mut self,
        running: &super::ingress::Running,
        client: &mut Client,
        conn: &mut rusqlite::Connection,
    ) -> Result<(), PipelineError> {
        match &self.scenario.schedule {
            Some(schedule) => {
                for step in schedule {
                    self.walk(running, client, conn, step).await?;
                }
            }
            None => {
                for &request in self.scenario.setup.requests.keys() {
                    let step = Step::Post {
                        request,
                        fault: None,
                    };
                    self.walk(running, client, conn, &step).await?;
                }
                let consume = Step::Consume {
                    consumer: Consumer(DEFAULT_CONSUMER.into()),
                    crash: None,
                };
                let bound = self.ids.len() * self.scenario.setup.max_deliveries as usize + 1;
                for _ in 0..bound {
                    if self.drained()? {
                        break;
                    }
                    self.walk(running, client, conn, &consume).await?;
                }
            }
        }
        Ok(())
    }

    fn drained(&mut self) -> Result<bool, PipelineError> {
        let pending = stream::pending_count(&mut self.redis, &self.names)?;
        let last = stream::last_delivered(&mut self.redis, &self.names)?;
        Ok(pending == 0 && self.ids.last().is_none_or(|id| last.as_ref() == Some(id)))
    }

    fn ordinal(&self, id: &str) -> Option<u32> {
        self.ids
            .iter()
            .position(|known| known == id)
            .map(|index| index as u32 + 1)
    }

    fn blank(&self, step: &Step) -> StepReport {
        StepReport {
            index: self.steps.len() + 1,
            step: step.clone(),
            step_label: label(self.scenario, step),
            request: None,
            response: None,
            detail: None,
            key: None,
            entry: None,
            consumer: None,
            read: None,
            deliveries: None,
            crash: None,
            post_fault: None,
            decision: None,
            acknowledged: None,
            note: None,
            pending: 0,
            facts: 0,
            ready: Vec::new(),
        }
    }

    async fn walk(
        &mut self,
        running: &super::ingress::Running,
        client: &mut Client,
        conn: &mut rusqlite::Connection,
        step: &Step,
    ) -> Result<(), PipelineError> {
        let mut report = self.blank(step);
        match step {
            Step::Post { request, fault } => {
                let posted = &self.scenario.setup.requests[request];
                running.state.clock.set_now(posted.received_at);
                let down = *fault == Some(PostFault::StreamUnavailable);
                running
                    .state
                    .stream_down
                    .store(down, std::sync::atomic::Ordering::SeqCst);
                let reply = client
                    .post(
                        posted.source.as_deref(),
                        posted.signature.as_deref(),
                        &posted.body,
                    )
                    .await?;
                running
                    .state
                    .stream_down
                    .store(false, std::sync::atomic::Ordering::SeqCst);
                let response = response_from_parts(reply.status, &reply.reason())
                    .ok_or_else(|| {
                        PipelineError::Other(format!(
                            "request {request}: ingress answered {} {}, not an answer of the contract",
                            reply.status, reply.body
                        ))
                    })?;
                if let Some(id) = &reply.entry {
                    self.ids.push(id.clone());
                    self.accepted.insert(id.clone());
                    report.entry = self.ordinal(id);
                }
                self.responses.insert(*request, response);
                if *fault == Some(PostFault::ResponseLost) || response == Response::Unavailable {
                    self.owed.insert(*request);
                } else {
                    self.owed.remove(request);
                }
                report.request = Some(*request);
                report.response = Some(response);
                report.post_fault = *fault;
            }
            Step::Consume { consumer, crash } | Step::Claim { consumer, crash } => {
                report.consumer = Some(consumer.clone());
                if self.down.contains(&consumer.0) {
                    report.note = Some("consumer is down: recover it first".into());
                } else {
                    let mode = if matches!(step, Step::Claim { .. }) {
                        "claim"
                    } else {
                        "consume"
                    };
                    self.child_step(&mut report, &consumer.0, mode, *crash)
                        .await?;
                }
            }
            Step::Recover { consumer, crash } => {
                report.consumer = Some(consumer.clone());
                self.down.remove(&consumer.0);
                self.child_step(&mut report, &consumer.0, "recover", *crash)
                    .await?;
            }
            Step::Upgrade {
                application,
                material_version,
            } => {
                report.note = Some(
                    match store::upgrade(conn, application, *material_version, self.options.mutant)?
                    {
                        Ok(from) => format!("material v{from} -> v{material_version}"),
                        Err(why) => format!(
                            "upgrade of {} refused: {why}",
                            self.scenario.label(application)
                        ),
                    },
                );
            }
            other @ (Step::Undecidable { .. }
            | Step::Register { .. }
            | Step::Terminate { .. }
            | Step::Resolve { .. }
            | Step::ExpireQuarantine { .. }) => {
                return Err(PipelineError::Other(format!(
                    "`pipeline run` does not play the step `{}` yet: the contract v2 operator \
                     steps and undecidable entries are in the model and `replay` only",
                    label(self.scenario, other)
                )));
            }
            Step::Poison => {
                let id: String = redis::cmd("XADD")
                    .arg(&self.names.stream)
                    .arg("*")
                    .arg("body")
                    .arg(POISON_BODY)
                    .query(&mut self.redis)?;
                self.ids.push(id.clone());
                report.entry = self.ordinal(&id);
                report.note = Some("unparseable entry".into());
            }
        }
        report.pending = stream::pending_count(&mut self.redis, &self.names)?;
        let snapshot = store::snapshot(conn)?;
        report.facts = snapshot.facts.len();
        report.ready = snapshot
            .ready
            .iter()
            .map(|key| self.scenario.label(key))
            .collect();
        self.steps.push(report);
        Ok(())
    }

    async fn child_step(
        &mut self,
        report: &mut StepReport,
        consumer: &str,
        mode: &str,
        crash: Option<Crash>,
    ) -> Result<(), PipelineError> {
        let mut command = tokio::process::Command::new(&self.options.exe);
        command
            .args(["pipeline", "step", "--db"])
            .arg(&self.db)
            .args(["--redis-url", &self.options.redis_url])
            .args(["--stream", &self.names.stream])
            .args(["--group", &self.names.group])
            .args(["--consumer", consumer, "--mode", mode])
            .args([
                "--max-deliveries",
                &self.scenario.setup.max_deliveries.to_string(),
            ]);
        if let Some(crash) = crash {
            command.args([
                "--crash",
                match crash {
                    Crash::BeforeCommit => "before-commit",
                    Crash::AfterCommit => "after-commit",
                },
            ]);
        }
        if let Some(mutant) = self.options.mutant {
            command.args(["--mutant", mutant.name()]);
        }
        let output = command.output().await?;
        let text = String::from_utf8_lossy(&output.stdout);
        let mut lines = text.lines();
        let read: serde_json::Value = lines
            .next()
            .and_then(|line| serde_json::from_str(line).ok())
            .ok_or_else(|| {
                PipelineError::Other(format!(
                    "consumer step {consumer} printed nothing: {}",
                    String::from_utf8_lossy(&output.stderr)
                ))
            })?;
        if read.get("idle").is_some() {
            report.note = Some("nothing to read".into());
            return Ok(());
        }
        let entry = read["entry"].as_str().unwrap_or_default().to_owned();
        report.entry = self.ordinal(&entry);
        report.deliveries = read["deliveries"].as_u64().map(|n| n as u32);
        report.read = Some(match read["read"].as_str() {
            Some("own") => Read::OwnPending,
            Some("claimed") => Read::Claimed {
                from: Consumer(read["from"].as_str().unwrap_or_default().to_owned()),
            },
            _ => Read::New,
        });
        let _ = ReadKind::New;
        let killed = {
            use std::os::unix::process::ExitStatusExt;
            output.status.signal() == Some(libc::SIGKILL)
        };
        if killed {
            report.crash = crash;
            self.down.insert(consumer.to_owned());
            // After a kill past the commit, the verdict is in the inbox: read it back.
            if crash == Some(Crash::AfterCommit) {
                let snapshot =
                    store::snapshot(&mut store::open(&self.db, store::DEFAULT_BUSY_TIMEOUT_MS)?)?;
                report.decision = snapshot.verdicts.get(&entry).map(|(verdict, _)| {
                    crate::facts::world::Decision::Verdict(verdict_of(verdict))
                });
            }
            report.acknowledged = Some(false);
            return Ok(());
        }
        let result: BatchResult = lines
            .next()
            .and_then(|line| serde_json::from_str(line).ok())
            .ok_or_else(|| {
                PipelineError::Other(format!(
                    "consumer step {consumer} failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                ))
            })?;
        if let Some(outcome) = result.outcomes.first() {
            report.decision = outcome.decision.clone();
            report.acknowledged = Some(outcome.acknowledged);
        }
        Ok(())
    }

    fn report(&mut self, conn: &mut rusqlite::Connection) -> Result<Report, PipelineError> {
        let snapshot = store::snapshot(conn)?;
        let apps = store::applications(conn)?;
        let mut facts: Vec<(Source, String)> = snapshot
            .facts
            .iter()
            .map(|(source, id, _)| (*source, id.clone()))
            .collect();
        sort_facts(&mut facts);
        let dead: Vec<stream::RawEntry> =
            stream::range_all(&mut self.redis, &self.names.dead_letter())?;
        let mut dead_letter: Vec<DeadLetterReport> = dead
            .iter()
            .filter_map(|entry| {
                let original = String::from_utf8_lossy(entry.field("entry")?).into_owned();
                Some(DeadLetterReport {
                    entry: self.ordinal(&original)?,
                    category: PoisonCategory::Unparseable,
                    deliveries: 0,
                    identity: None,
                    reason: String::from_utf8_lossy(entry.field("reason")?).into_owned(),
                })
            })
            .collect();
        dead_letter.sort_by_key(|dead| dead.entry);
        let dead_ids: BTreeSet<String> = dead
            .iter()
            .filter_map(|entry| entry.field("entry"))
            .map(|id| String::from_utf8_lossy(id).into_owned())
            .collect();
        let unsettled = self
            .accepted
            .iter()
            .filter(|id| !snapshot.verdicts.contains_key(*id) && !dead_ids.contains(*id))
            .filter_map(|id| self.ordinal(id))
            .collect();
        let end = EndReport {
            responses: self.responses.clone(),
            facts,
            duplicates: snapshot.counters.duplicates,
            conflicts: snapshot.counters.conflicts,
            late_mismatches: snapshot.counters.late_mismatches,
            open_conflicts: snapshot
                .open_conflicts
                .iter()
                .map(|key| self.scenario.label(key))
                .collect(),
            ready: self
                .scenario
                .applications
                .iter()
                .map(|(key, _)| (self.scenario.label(key), snapshot.ready.contains(key)))
                .collect(),
            pending: stream::pending_count(&mut self.redis, &self.names)?,
            dead_letter,
            owed: self.owed.iter().copied().collect(),
            unsettled,
            parked: Vec::new(),
            ready_history: Vec::new(),
        };
        let inbox = Inbox::restore(Parts {
            facts: snapshot
                .facts
                .iter()
                .filter_map(|(source, _, canonical)| {
                    Envelope::parse(canonical.as_bytes(), *source).ok()
                })
                .collect(),
            ready: snapshot.ready.clone(),
            counters: snapshot.counters,
            ..Parts::default()
        });
        // The snapshot keeps open conflicts by application: the rule with them applied.
        let by_rule =
            |key: &AppKey| ready(&inbox, &apps, key) && !snapshot.open_conflicts.contains(key);
        let stale_ready = apps
            .iter()
            .map(|(key, _)| key)
            .filter(|key| inbox.marked_ready(key) != by_rule(key))
            .map(|key: &AppKey| self.scenario.label(key))
            .collect();
        let mut differences = self
            .scenario
            .expect
            .as_ref()
            .map(|expect| compare(expect, &end))
            .unwrap_or_default();
        let mut model_scenario = self.scenario.clone();
        model_scenario.setup.mutant = self.options.mutant;
        let model = replay(&model_scenario).end;
        differences.extend(model_differences(&model, &end));
        Ok(Report {
            fixture: self.scenario.file.display().to_string(),
            name: self.scenario.name.clone(),
            protocol: "facts",
            policy: self.options.mutant.map_or("spec", |mutant| mutant.name()),
            scheduled: self.scenario.schedule.is_some(),
            steps: std::mem::take(&mut self.steps),
            end,
            expect_checked: true,
            differences,
            stale_ready,
            violations: Vec::new(),
        })
    }
}

/// Where the real end differs from the model's end for the same fixture.
pub fn model_differences(model: &EndReport, real: &EndReport) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |what: &str, model: String, real: String| {
        if model != real {
            out.push(format!(
                "model: {what}: the model has {model}, the pipeline {real}"
            ));
        }
    };
    check(
        "responses",
        format!("{:?}", model.responses),
        format!("{:?}", real.responses),
    );
    check(
        "facts",
        format!("{:?}", model.facts),
        format!("{:?}", real.facts),
    );
    check(
        "duplicates",
        model.duplicates.to_string(),
        real.duplicates.to_string(),
    );
    check(
        "conflicts",
        model.conflicts.to_string(),
        real.conflicts.to_string(),
    );
    check(
        "late mismatches",
        model.late_mismatches.to_string(),
        real.late_mismatches.to_string(),
    );
    check(
        "open conflicts",
        format!("{:?}", model.open_conflicts),
        format!("{:?}", real.open_conflicts),
    );
    check(
        "ready",
        format!("{:?}", model.ready),
        format!("{:?}", real.ready),
    );
    check(
        "pending",
        model.pending.to_string(),
        real.pending.to_string(),
    );
    let dead = |end: &EndReport| {
        end.dead_letter
            .iter()
            .map(|dead| dead.entry)
            .collect::<Vec<_>>()
    };
    check(
        "dead letters",
        format!("{:?}", dead(model)),
        format!("{:?}", dead(real)),
    );
    check(
        "unsettled",
        format!("{:?}", model.unsettled),
        format!("{:?}", real.unsettled),
    );
    out
}

fn verdict_of(word: &str) -> crate::facts::inbox::Verdict {
    use crate::facts::inbox::Verdict;
    match word {
        "accepted" => Verdict::Accepted,
        "duplicate" => Verdict::Duplicate,
        "conflict" => Verdict::Conflict,
        _ => Verdict::LateMismatch,
    }
}

fn label(scenario: &Scenario, step: &Step) -> String {
    crate::facts::replay::step_text(scenario, step)
}

/// Loads a fixture for `run` (bad input: exit 2).
pub fn load(path: &Path) -> Result<Scenario, crate::harness::InputError> {
    Scenario::load(path)
}
