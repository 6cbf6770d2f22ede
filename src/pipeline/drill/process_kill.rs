//! The process-kill drill: consumers run as `arrival pipeline consume` child processes and
//! are SIGKILLed, by themselves at a named point or from outside at a random moment; each
//! dead process is replaced by a new one under a new name, so what it held pending can only
//! be finished by a takeover (`XAUTOCLAIM`).

use super::checks::common_checks;
use super::children::{Arming, ConsumerChild, Ended};
use super::rig::{answer_word, drained, finish, model, post, requests, rig, Rig};
use super::{DrillOptions, DrillReport};
use crate::facts::world::PostedRequest;
use crate::harness::rng::SplitMix;
use crate::pipeline::client::Client;
use crate::pipeline::consume::point_word;
use crate::pipeline::consumer::Point;
use crate::pipeline::ingress::PipelineError;
use crate::pipeline::store;
use crate::pipeline::stream;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long an entry stays pending with a dead consumer before another may take it (ms).
const MIN_IDLE_MS: u64 = 200;
/// The chance an armed process dies each time one of its consumers reaches its point.
const SELF_KILL_CHANCE: f64 = 0.5;
/// How often the acknowledged entries are compared with the inbox while the drill runs.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// The word the report counts external kills under.
const EXTERNAL: &str = "external";

/// One planned kill: by the process itself at a point, or `kill -9` from the drill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kill {
    At(Point),
    External,
}

/// The planned kills, in the order processes are armed: the first four are one of each
/// kind in a random order (so four kills or more have every kind), the rest drawn at random.
fn plan(kills: usize, rng: &mut SplitMix) -> Vec<Kill> {
    let kinds = [
        Kill::At(Point::BeforeCommit),
        Kill::At(Point::AfterCommit),
        Kill::At(Point::MidBatch),
        Kill::External,
    ];
    let mut first = kinds;
    for i in (1..first.len()).rev() {
        first.swap(i, rng.below(i as u64 + 1) as usize);
    }
    (0..kills)
        .map(|i| {
            first
                .get(i)
                .copied()
                .unwrap_or(kinds[rng.below(4) as usize])
        })
        .collect()
}

/// A child running now, and the kill it was armed with.
struct Live {
    child: ConsumerChild,
    kill: Option<Kill>,
    /// When the drill kills it (armed with [`Kill::External`]).
    kill_at: Option<Instant>,
}

/// The drill's state while it runs.
struct Drill<'a> {
    options: &'a DrillOptions,
    exe: PathBuf,
    plan: Vec<Kill>,
    armed: usize,
    live: Vec<Live>,
    rng: SplitMix,
    names: Vec<String>,
    unexpected: Vec<String>,
    orphans: usize,
    posted: Vec<PostedRequest>,
    sent: usize,
    accepted: BTreeMap<String, u32>,
    samples: usize,
    unsettled_acks: BTreeSet<String>,
    checker: crate::pipeline::sql::Db,
}

/// The process-kill drill.
pub async fn process_kill(options: &DrillOptions) -> Result<DrillReport, PipelineError> {
    let started = Instant::now();
    let exe = options.exe.clone().ok_or_else(|| {
        PipelineError::Other("the process-kill drill needs the arrival binary to start".into())
    })?;
    let now = store::now_ms() / 1000;
    let (apps, requests) = requests(options.seed, options.requests, now);
    let mut rig = rig(
        &options.redis_url,
        &apps,
        options.count,
        MIN_IDLE_MS,
        store::DEFAULT_BUSY_TIMEOUT_MS,
        options.mutant,
        options.scratch_db.as_ref(),
    )
    .await?;
    let mut report = DrillReport::new("process-kill", options, requests.len());
    let mut rng = SplitMix::new(options.seed ^ 0x9e0c);
    let mut drill = Drill {
        options,
        exe,
        plan: plan(options.kills, &mut rng),
        armed: 0,
        live: Vec::new(),
        rng,
        names: Vec::new(),
        unexpected: Vec::new(),
        orphans: 0,
        posted: Vec::new(),
        sent: 0,
        accepted: BTreeMap::new(),
        samples: 0,
        unsettled_acks: BTreeSet::new(),
        checker: store::open(&rig.options.db, store::DEFAULT_BUSY_TIMEOUT_MS)?,
    };
    let ran = drill.run(&mut rig, &mut report, &requests).await;
    drill.stop(&mut report).await?;
    ran?;
    drill.checks(&mut report);
    let oracle = model(&apps, &drill.posted, 3);
    let model_answers = oracle
        .responses
        .iter()
        .fold(BTreeMap::new(), |mut n, (_, r)| {
            *n.entry(answer_word(r.status(), r.reason())).or_default() += 1;
            n
        });
    report.requests = drill.posted.len();
    report.check(
        "answers-equal-model",
        model_answers == report.answers,
        format!(
            "{:?} ({} requests posted, {} of them resends of earlier ones)",
            report.answers,
            drill.posted.len(),
            drill.posted.len().saturating_sub(requests.len())
        ),
    );
    common_checks(&mut report, &mut rig, &drill.accepted, Some(&oracle))?;
    Ok(finish(rig, report, started).await)
}

impl Drill<'_> {
    /// Posts, kills and replaces processes until every request is posted, every planned
    /// kill done and the group drained (or the deadline passed).
    async fn run(
        &mut self,
        rig: &mut Rig,
        report: &mut DrillReport,
        requests: &[PostedRequest],
    ) -> Result<(), PipelineError> {
        let mut client = Client::new(rig.running.addr);
        let deadline = Instant::now() + Duration::from_secs(60 + self.plan.len() as u64 / 2);
        let mut sampled = Instant::now();
        loop {
            self.reap(rig, report).await?;
            self.replace(rig, report)?;
            self.kill_due();
            let idle = drained(&mut rig.redis, &rig.options.names)?;
            let armed_alive = self.live.iter().any(|live| live.kill.is_some());
            if self.sent >= requests.len() && self.armed == self.plan.len() && !armed_alive && idle
            {
                break;
            }
            self.post_some(&mut client, report, requests, idle, armed_alive)
                .await?;
            if sampled.elapsed() >= SAMPLE_EVERY {
                self.sample(rig)?;
                sampled = Instant::now();
            }
            if Instant::now() > deadline {
                report.check(
                    "finished-in-time",
                    false,
                    format!(
                        "not drained, or kills left ({} of {} done), before the deadline",
                        report.kills.values().sum::<usize>(),
                        self.plan.len()
                    ),
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.sample(rig)
    }

    /// Reaps the children that ended: counts each kill by its kind, notes the names they
    /// used and the entries they left pending; anything but a planned kill is unexpected.
    async fn reap(&mut self, rig: &mut Rig, report: &mut DrillReport) -> Result<(), PipelineError> {
        let mut index = 0;
        while index < self.live.len() {
            if !self.live[index].child.has_ended() {
                index += 1;
                continue;
            }
            let live = self.live.swap_remove(index);
            let ended = live.child.ended(Duration::from_secs(5)).await?;
            let kind = match (ended.by_sigkill(), ended.killed_at, ended.killed_by_drill) {
                (true, Some(point), _) => Some(point_word(point)),
                (true, None, true) => Some(EXTERNAL),
                _ => None,
            };
            let planned = live.kill.map(|kill| match kill {
                Kill::At(point) => point_word(point),
                Kill::External => EXTERNAL,
            });
            match kind {
                Some(word) if Some(word) == planned => {
                    *report.kills.entry(word.into()).or_default() += 1;
                }
                _ => self.unexpected.push(describe(&ended, planned)),
            }
            let (pending, _) = stream::pending_by_consumer(&mut rig.redis, &rig.options.names)?;
            self.orphans += pending
                .iter()
                .filter(|(name, _)| ended.names.contains(name))
                .map(|(_, count)| *count as usize)
                .sum::<usize>();
            self.names.extend(ended.names);
        }
        Ok(())
    }

    /// Starts new processes until as many run as the drill has consumers, each armed with
    /// the next planned kill while any is left.
    fn replace(&mut self, rig: &Rig, report: &mut DrillReport) -> Result<(), PipelineError> {
        while self.live.len() < self.options.consumers.max(1) {
            let kill = self.plan.get(self.armed).copied();
            if kill.is_some() {
                self.armed += 1;
            }
            let arming = match kill {
                Some(Kill::At(point)) => Arming {
                    point: Some(point),
                    chance: SELF_KILL_CHANCE,
                    seed: self.options.seed ^ ((self.armed as u64) << 16),
                },
                _ => Arming::NONE,
            };
            let kill_at = (kill == Some(Kill::External))
                .then(|| Instant::now() + Duration::from_millis(30 + self.rng.below(400)));
            let child = ConsumerChild::start(&self.exe, &rig.options, arming, self.options.mutant)?;
            report.consumer_starts += 1;
            self.live.push(Live {
                child,
                kill,
                kill_at,
            });
        }
        Ok(())
    }

    /// `kill -9` of every process whose external kill is due.
    fn kill_due(&mut self) {
        let now = Instant::now();
        for live in &mut self.live {
            if live.kill_at.is_some_and(|at| at <= now) && !live.child.killed_by_drill {
                live.child.kill();
            }
        }
    }

    /// Posts the next requests, paced by the kills so that work is left for every planned
    /// kill: the share of requests posted follows the share of kills done, and an idle group
    /// gets a batch's worth more. Once every request is posted, an idle group with armed
    /// processes left gets resends of earlier requests (as a sender resends), so every armed
    /// process meets work to die in.
    async fn post_some(
        &mut self,
        client: &mut Client,
        report: &mut DrillReport,
        requests: &[PostedRequest],
        idle: bool,
        armed_alive: bool,
    ) -> Result<(), PipelineError> {
        let (len, planned) = (requests.len(), self.plan.len());
        let kills: usize = report.kills.values().sum();
        let mut limit = (len * (kills + 1)).div_ceil(planned + 1);
        if idle {
            limit = limit.max(self.sent + self.options.count);
        }
        let mut batch: Vec<PostedRequest> = requests[self.sent..limit.clamp(self.sent, len)]
            .iter()
            .take(8)
            .cloned()
            .collect();
        self.sent += batch.len();
        if batch.is_empty() && self.sent >= len && idle && armed_alive && len > 0 {
            for _ in 0..=self.options.count {
                let mut resend = requests[self.rng.below(len as u64) as usize].clone();
                resend.number = (self.posted.len() + batch.len() + 1) as u32;
                batch.push(resend);
            }
        }
        for request in batch {
            let reply = post(client, report, &request).await?;
            if let Some(id) = reply.entry {
                self.accepted.insert(id, request.number);
            }
            self.posted.push(request);
        }
        Ok(())
    }

    /// Compares what the group has acknowledged with the inbox: an entry delivered, no
    /// longer pending, and with neither a verdict nor a dead letter was acknowledged before
    /// its verdict was committed. Read in this order (last delivered, pending, then the
    /// inbox and dead letters), a correct consumer never shows one: its `XACK` follows its
    /// commit, so whatever is acknowledged by the second read is committed by the third.
    fn sample(&mut self, rig: &mut Rig) -> Result<(), PipelineError> {
        let names = &rig.options.names;
        let Some(last) = stream::last_delivered(&mut rig.redis, names)? else {
            return Ok(());
        };
        let pending: BTreeSet<String> =
            stream::pending_range(&mut rig.redis, names, "-", "+", 1_000_000)?
                .into_iter()
                .map(|entry| entry.id)
                .collect();
        let verdicts = store::snapshot(&self.checker)?.verdicts;
        let dead: BTreeSet<String> = stream::range_all(&mut rig.redis, &names.dead_letter())?
            .iter()
            .filter_map(|entry| entry.field("entry"))
            .map(|id| String::from_utf8_lossy(id).into_owned())
            .collect();
        self.samples += 1;
        for id in self.accepted.keys() {
            if stream::id_order(id, &last).is_le()
                && !pending.contains(id)
                && !verdicts.contains_key(id)
                && !dead.contains(id)
            {
                self.unsettled_acks.insert(id.clone());
            }
        }
        Ok(())
    }

    /// SIGTERM to every process left (none of them armed), each given 20 s to finish the
    /// batch in hand and exit 0.
    async fn stop(&mut self, report: &mut DrillReport) -> Result<(), PipelineError> {
        for live in &self.live {
            live.child.terminate();
        }
        let mut failed = Vec::new();
        let count = self.live.len();
        for live in self.live.drain(..) {
            let ended = live.child.ended(Duration::from_secs(20)).await?;
            // A process the drill started a moment before the stop may get SIGTERM before
            // it installed its handler (it had not said its consumer names yet): it had
            // nothing in hand, and dying of the signal is all it could do.
            let unstarted = ended.names.is_empty() && {
                use std::os::unix::process::ExitStatusExt;
                ended.status.signal() == Some(libc::SIGTERM)
            };
            if !ended.status.success() && !unstarted {
                failed.push(describe(&ended, None));
            }
            self.names.extend(ended.names);
        }
        report.check(
            "sigterm-stops-cleanly",
            failed.is_empty(),
            format!(
                "{count} processes stopped with SIGTERM, {} did not exit 0{}",
                failed.len(),
                failed.first().map(|f| format!(": {f}")).unwrap_or_default()
            ),
        );
        Ok(())
    }

    /// The checks of the processes themselves: the kills planned were done (every kind,
    /// from four kills up), nothing else ended a process, every process had a name of its
    /// own, the dead ones' entries were taken over, nothing was acknowledged uncommitted.
    fn checks(&self, report: &mut DrillReport) {
        let done: usize = report.kills.values().sum();
        report.check(
            "kills-done",
            done == self.plan.len(),
            format!(
                "{done} kills of {} planned: {:?}",
                self.plan.len(),
                report.kills
            ),
        );
        if self.plan.len() >= 4 {
            let kinds = [Point::ALL.map(point_word).as_slice(), &[EXTERNAL]].concat();
            let missing: Vec<&str> = kinds
                .into_iter()
                .filter(|kind| report.kills.get(*kind).copied().unwrap_or(0) == 0)
                .collect();
            report.check(
                "every-kill-kind",
                missing.is_empty(),
                format!("no kill of kind {missing:?}"),
            );
        }
        report.check(
            "no-unexpected-exit",
            self.unexpected.is_empty(),
            format!(
                "{} processes ended otherwise than planned{}",
                self.unexpected.len(),
                self.unexpected
                    .first()
                    .map(|u| format!(": {u}"))
                    .unwrap_or_default()
            ),
        );
        let distinct: BTreeSet<&String> = self.names.iter().collect();
        report.check(
            "new-name-per-process",
            distinct.len() == self.names.len(),
            format!(
                "{} processes started, {} consumer names said, {} distinct",
                report.consumer_starts,
                self.names.len(),
                distinct.len()
            ),
        );
        let before_commit = report.kills.get(point_word(Point::BeforeCommit));
        report.check(
            "takeover-exercised",
            self.orphans > 0 || before_commit.is_none(),
            format!(
                "{} entries were left pending by killed processes, whose names never came back",
                self.orphans
            ),
        );
        report.check(
            "acked-only-after-commit",
            self.unsettled_acks.is_empty(),
            format!(
                "{} samples while running; {} entries acknowledged without a verdict or dead letter{}",
                self.samples,
                self.unsettled_acks.len(),
                self.unsettled_acks
                    .first()
                    .map(|id| format!(" (first: entry {id})"))
                    .unwrap_or_default()
            ),
        );
    }
}

/// A process that ended otherwise than planned, in words.
fn describe(ended: &Ended, planned: Option<&str>) -> String {
    format!(
        "process {} ({}) planned to die {}, ended with {}{}{}",
        ended.pid,
        ended.names.join(" "),
        planned.unwrap_or("never"),
        ended.status,
        ended
            .killed_at
            .map(|point| format!(", killed itself at {}", point_word(point)))
            .unwrap_or_default(),
        if ended.stderr.is_empty() {
            String::new()
        } else {
            format!("; stderr: {}", ended.stderr_tail())
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_planned_kills_or_more_have_every_kind() {
        for seed in 0..20 {
            let kills = plan(4, &mut SplitMix::new(seed));
            for kind in [
                Kill::At(Point::BeforeCommit),
                Kill::At(Point::AfterCommit),
                Kill::At(Point::MidBatch),
                Kill::External,
            ] {
                assert!(kills.contains(&kind), "seed {seed}: {kills:?}");
            }
        }
        assert_eq!(plan(250, &mut SplitMix::new(1)).len(), 250);
    }
}
