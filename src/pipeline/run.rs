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
use super::operator as op;
use super::sql::{Db, InboxAt};
use super::store;
use super::stream::{self, Names};
use crate::facts::application::AppKey;
use crate::facts::envelope::envelope_in;
use crate::facts::envelope::{Envelope, Source};
use crate::facts::fixture::{response_from_parts, sort_facts, Scenario, DEFAULT_CONSUMER};
use crate::facts::inbox::describe;
use crate::facts::inbox::{ready, Inbox, Parts, PoisonCategory};
use crate::facts::ingress::Response;
use crate::facts::replay::{
    compare, replay, DeadLetterReport, EndReport, ParkedReport, Report, StepReport,
};
use crate::facts::step::{Consumer, Crash, Keep, PostFault, Step};
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
    /// The inbox: a new SQLite file in a temporary folder when `None`; else this one,
    /// which must hold no applications yet (a new PostgreSQL database, say).
    pub db: Option<InboxAt>,
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
    db: InboxAt,
    names: Names,
    redis: redis::Connection,
    ids: Vec<String>,
    accepted: BTreeSet<String>,
    responses: BTreeMap<u32, Response>,
    owed: BTreeSet<u32>,
    down: BTreeSet<String>,
    undecidable: Vec<String>,
    steps: Vec<StepReport>,
}

/// Runs a fixture against real Redis and SQLite and reports like `replay`.
pub async fn run(scenario: &Scenario, options: &RunOptions) -> Result<Report, PipelineError> {
    let dir = TempDir::new("arrival-run")?;
    let db = options
        .db
        .clone()
        .unwrap_or_else(|| InboxAt::Sqlite(dir.0.join("inbox.db")));
    let names = Names {
        stream: unique("arrival-run"),
        group: "inbox".into(),
    };
    let conn = store::open(&db, store::DEFAULT_BUSY_TIMEOUT_MS)?;
    store::put_applications(&conn, &scenario.applications)?;
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
        undecidable: Vec::new(),
        steps: Vec::new(),
    };
    let result = runner.walk_all(&running, &mut client, &conn).await;
    running.shutdown().await;
    let report = match result {
        Ok(()) => runner.report(&conn),
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
        conn: &Db,
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
        conn: &Db,
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
                let [webhook_id, webhook_timestamp, webhook_signature] = &posted.webhook;
                let headers: Vec<(&str, &str)> = [
                    ("X-Acme-Source", &posted.source),
                    ("X-Acme-Signature", &posted.signature),
                    ("Webhook-Id", webhook_id),
                    ("Webhook-Timestamp", webhook_timestamp),
                    ("Webhook-Signature", webhook_signature),
                ]
                .into_iter()
                .filter_map(|(name, value)| Some((name, value.as_deref()?)))
                .collect();
                let reply = client.post_with(&headers, &posted.body).await?;
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
            Step::Upgrade { .. }
            | Step::Register { .. }
            | Step::Terminate { .. }
            | Step::Resolve { .. }
            | Step::ExpireQuarantine { .. } => {
                report.note = Some(self.operate(conn, step)?);
            }
            Step::Undecidable { request } => {
                let posted = &self.scenario.setup.requests[request];
                let envelope = envelope_in(&posted.body);
                let source = envelope
                    .as_ref()
                    .map_or("finance", |envelope| envelope.source().as_str());
                let id: String = stream::xadd_command(
                    &self.names,
                    source,
                    &posted.body,
                    posted.received_at * 1000,
                    envelope.as_ref(),
                )
                .query(&mut self.redis)?;
                self.ids.push(id.clone());
                self.accepted.insert(id.clone());
                self.undecidable.push(id.clone());
                report.entry = self.ordinal(&id);
                report.note = Some(format!("request {request}'s envelope, undecidable"));
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

    /// An operator step, as the operator's command runs it: one inbox transaction.
    fn operate(&self, conn: &Db, step: &Step) -> Result<String, PipelineError> {
        let scenario = self.scenario;
        let refused = |what: &str, why: String| format!("{what} refused: {why}");
        Ok(match step {
            Step::Upgrade {
                application,
                material_version,
            } => match op::upgrade(conn, application, *material_version, self.options.mutant)? {
                Ok(from) => format!("material v{from} -> v{material_version}"),
                Err(why) => refused("upgrade", why.to_string()),
            },
            Step::Register {
                application,
                business_key,
                material_version,
            } => match op::register(
                conn,
                application,
                business_key,
                *material_version,
                self.options.mutant,
            )? {
                Ok(done) => {
                    let released: Vec<String> = done
                        .released
                        .iter()
                        .map(|(entry, verdict)| {
                            let number = self.ordinal(entry).unwrap_or_default();
                            format!("entry {number} {}", verdict.as_str())
                        })
                        .collect();
                    format!(
                        "{} {}; released: {}",
                        scenario.label(application),
                        done.registered.as_str(),
                        if released.is_empty() {
                            "none".into()
                        } else {
                            released.join(", ")
                        }
                    )
                }
                Err(why) => refused("register", why.to_string()),
            },
            Step::Terminate {
                application,
                reason,
                at,
            } => match op::terminate(conn, application, reason, *at)? {
                Ok(()) => format!("{} terminated", scenario.label(application)),
                Err(why) => refused("terminate", why.to_string()),
            },
            Step::Resolve { fact, keep, reason } => {
                let keep = match keep {
                    Keep::First => op::Keep::First,
                    Keep::Variant => op::Keep::OnlyVariant,
                    Keep::VariantOf(number) => {
                        match scenario
                            .setup
                            .requests
                            .get(number)
                            .and_then(|posted| envelope_in(&posted.body))
                        {
                            Some(envelope) => op::Keep::Variant(Box::new(envelope)),
                            None => {
                                return Ok(refused(
                                    "resolve",
                                    format!("request {number} is not an envelope"),
                                ))
                            }
                        }
                    }
                };
                match op::resolve(conn, fact, &keep, reason)? {
                    Ok(kept) => format!(
                        "{} resolved: kept the {}",
                        describe(fact),
                        store::kept_word(kept)
                    ),
                    Err(why) => refused("resolve", why),
                }
            }
            Step::ExpireQuarantine { at } => {
                let expired = op::expire_quarantine(conn, *at, scenario.setup.quarantine_seconds)?;
                format!("{} quarantined entries expired", expired.len())
            }
            _ => unreachable!("operate is called with operator steps"),
        })
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
            .args(["pipeline", "step"])
            // Through the environment, not the command line, where `ps` would show a
            // PostgreSQL password.
            .env("ARRIVAL_DB", self.db.connection_text())
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
        for entry in &self.undecidable {
            command.args(["--undecidable", entry]);
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
                    store::snapshot(&store::open(&self.db, store::DEFAULT_BUSY_TIMEOUT_MS)?)?;
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

    /// The parked entries at the end, in entry order, as the replay reports them.
    fn parked(&self, conn: &Db) -> Result<Vec<ParkedReport>, PipelineError> {
        let states = [
            "quarantined",
            "quarantine_expired",
            "late_mismatch",
            "after_termination",
        ];
        let mut out: Vec<ParkedReport> = op::parked(conn, &states)?
            .into_iter()
            .filter_map(|row| {
                let state = states.into_iter().find(|state| *state == row.state)?;
                let tenant = row
                    .identity
                    .split('/')
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                Some(ParkedReport {
                    entry: self.ordinal(&row.entry)?,
                    state,
                    identity: row.identity,
                    application: self.scenario.label(&AppKey {
                        tenant_id: tenant,
                        application_id: row.application_id,
                    }),
                })
            })
            .collect();
        out.sort_by_key(|parked| parked.entry);
        Ok(out)
    }

    fn report(&mut self, conn: &Db) -> Result<Report, PipelineError> {
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
        let text = |entry: &stream::RawEntry, name: &str| {
            entry
                .field(name)
                .map(|value| String::from_utf8_lossy(value).into_owned())
        };
        let mut dead_letter: Vec<DeadLetterReport> = dead
            .iter()
            .filter_map(|entry| {
                let original = text(entry, "entry")?;
                let identity = match (text(entry, "tenant_id"), text(entry, "event_id")) {
                    (Some(tenant), Some(event)) => Some(format!(
                        "{tenant}/{}/{event}",
                        text(entry, "source").unwrap_or_default()
                    )),
                    _ => None,
                };
                Some(DeadLetterReport {
                    entry: self.ordinal(&original)?,
                    category: match text(entry, "category").as_deref() {
                        Some("undecidable") => PoisonCategory::Undecidable,
                        _ => PoisonCategory::Unparseable,
                    },
                    deliveries: text(entry, "deliveries")
                        .and_then(|count| count.parse().ok())
                        .unwrap_or(0),
                    identity,
                    reason: text(entry, "reason")?,
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
            ready: apps
                .iter()
                .map(|(key, _)| (self.scenario.label(key), snapshot.ready.contains(key)))
                .collect(),
            pending: stream::pending_count(&mut self.redis, &self.names)?,
            dead_letter,
            owed: self.owed.iter().copied().collect(),
            unsettled,
            parked: self.parked(conn)?,
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
            .map(|dead| (dead.entry, dead.category, dead.identity.clone()))
            .collect::<Vec<_>>()
    };
    let parked = |end: &EndReport| {
        end.parked
            .iter()
            .map(|parked| (parked.entry, parked.state, parked.identity.clone()))
            .collect::<Vec<_>>()
    };
    check(
        "parked entries",
        format!("{:?}", parked(model)),
        format!("{:?}", parked(real)),
    );
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
    crate::facts::inbox::Verdict::from_word(word)
        .unwrap_or(crate::facts::inbox::Verdict::LateMismatch)
}

fn label(scenario: &Scenario, step: &Step) -> String {
    crate::facts::replay::step_text(scenario, step)
}

/// Loads a fixture for `run` (bad input: exit 2).
pub fn load(path: &Path) -> Result<Scenario, crate::harness::InputError> {
    Scenario::load(path)
}
