//! A process of consumers and nothing else (`arrival pipeline consume`): N consumer threads
//! on the inbox and group `serve` uses, named as `serve` names its own
//! (`<host>-<pid>-<index>`), until SIGTERM or Ctrl-C, when each finishes the batch in hand
//! (commit, then `XACK`) and the process ends. The process drills run it as a child and
//! may arm it to SIGKILL itself at a [`Point`] ([`SelfKill`]).
//!
//! On start it prints one line, `consumers NAME...`; an armed process that kills itself
//! first prints `killed POINT CONSUMER` ([`CONSUMERS_LINE`], [`KILLED_LINE`]), so whoever
//! started it knows who it was and where it died.

use super::consumer::{Faults, Point};
use super::ingress::{process_prefix, spawn_consumer, PipelineError, ServeOptions};
use crate::harness::rng::SplitMix;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The first word of the line naming the process's consumers.
pub const CONSUMERS_LINE: &str = "consumers";
/// The first word of the line an armed process prints just before it kills itself.
pub const KILLED_LINE: &str = "killed";

/// A point's name as the drills report it (`before_commit`, `after_commit`, `mid_batch`).
pub fn point_word(point: Point) -> &'static str {
    match point {
        Point::BeforeCommit => "before_commit",
        Point::AfterCommit => "after_commit",
        Point::MidBatch => "mid_batch",
    }
}

/// A point from its name.
pub fn point_from_word(word: &str) -> Option<Point> {
    Point::ALL
        .into_iter()
        .find(|point| point_word(*point) == word)
}

/// Drill-only faults of a consumer process: each time one of its consumers reaches `point`,
/// it dies with the chance given (the dice seeded), by SIGKILL of the whole process, the way
/// `kill -9` ends it: nothing is rolled back or acknowledged by the process itself.
pub struct SelfKill {
    point: Option<Point>,
    chance: f64,
    rng: Mutex<SplitMix>,
}

impl SelfKill {
    /// Dies at `point` (never, for `None`) with `chance` each time it is reached.
    pub fn new(point: Option<Point>, chance: f64, seed: u64) -> SelfKill {
        SelfKill {
            point,
            chance,
            rng: Mutex::new(SplitMix::new(seed)),
        }
    }
}

impl Faults for SelfKill {
    fn kill_at(&self, consumer: &str, point: Point, _: usize) -> bool {
        if self.point != Some(point) {
            return false;
        }
        let hit = self
            .rng
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .chance(self.chance);
        if hit {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{KILLED_LINE} {} {consumer}", point_word(point));
            let _ = out.flush();
            // SAFETY: kill(2) on our own pid has no memory-safety preconditions; SIGKILL
            // cannot be caught, so the process ends here.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
        false
    }
}

/// Runs `options.consumers` consumers (at least one) until SIGTERM or Ctrl-C, then lets
/// each finish the batch in hand and returns. Ingress is not started: `options.listen`,
/// the keys and the body limits are not read.
pub async fn consume(options: &ServeOptions, faults: Arc<dyn Faults>) -> Result<(), PipelineError> {
    // The handlers are in place before the first line: a SIGTERM right after it is a
    // graceful stop, never the default action.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let prefix = process_prefix();
    let names: Vec<String> = (1..=options.consumers.max(1))
        .map(|index| format!("{prefix}-{index}"))
        .collect();
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{CONSUMERS_LINE} {}", names.join(" "))?;
        out.flush()?;
    }
    eprintln!(
        "arrival pipeline: {} consumer(s) on stream {}, group {}, no ingress",
        names.len(),
        options.names.stream,
        options.names.group
    );
    let stop = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = names
        .iter()
        .map(|name| spawn_consumer(options.consumer(name), faults.clone(), stop.clone(), None))
        .collect();
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    eprintln!("arrival pipeline: stopping (finishing the batches in hand)");
    stop.store(true, Ordering::SeqCst);
    for consumer in consumers {
        let _ = consumer.await;
    }
    eprintln!("arrival pipeline: stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_point_reads_back_from_its_word() {
        for point in Point::ALL {
            assert_eq!(point_from_word(point_word(point)), Some(point));
        }
        assert_eq!(point_from_word("after_lunch"), None);
    }

    #[test]
    fn a_process_armed_elsewhere_or_never_does_not_die() {
        let never = SelfKill::new(None, 1.0, 1);
        let elsewhere = SelfKill::new(Some(Point::MidBatch), 1.0, 1);
        for point in [Point::BeforeCommit, Point::AfterCommit] {
            assert!(!never.kill_at("c", point, 4));
            assert!(!elsewhere.kill_at("c", point, 4));
        }
    }
}
