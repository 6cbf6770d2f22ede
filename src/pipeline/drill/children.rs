//! Consumer child processes for the process drills: `arrival pipeline consume` started on a
//! rig's inbox and stream, its lines read, SIGKILLed or SIGTERMed, and reaped with what it
//! said (its consumers' names, where it killed itself) and how it ended.

use crate::facts::mutants::Mutant;
use crate::pipeline::consume::{point_from_word, point_word, CONSUMERS_LINE, KILLED_LINE};
use crate::pipeline::consumer::Point;
use crate::pipeline::ingress::{PipelineError, ServeOptions};
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::task::JoinHandle;

/// What a child is started to do: run, or kill itself at a point with a chance.
#[derive(Clone, Copy, Debug)]
pub(super) struct Arming {
    /// The point it dies at, if any.
    pub point: Option<Point>,
    /// The chance each time the point is reached.
    pub chance: f64,
    /// The seed of its dice.
    pub seed: u64,
}

impl Arming {
    /// Not armed: runs until stopped.
    pub const NONE: Arming = Arming {
        point: None,
        chance: 0.0,
        seed: 0,
    };
}

/// A running `pipeline consume` child.
pub(super) struct ConsumerChild {
    child: tokio::process::Child,
    /// Its process id.
    pub pid: u32,
    stdout: JoinHandle<Vec<String>>,
    stderr: JoinHandle<Vec<String>>,
    /// Whether the drill sent it SIGKILL.
    pub killed_by_drill: bool,
}

/// How a child ended and what it said.
#[derive(Debug)]
pub(super) struct Ended {
    /// Its process id.
    pub pid: u32,
    /// Its exit status.
    pub status: ExitStatus,
    /// Its consumers' names (empty if it died before it said them).
    pub names: Vec<String>,
    /// Where it killed itself, if it did.
    pub killed_at: Option<Point>,
    /// Whether the drill sent it SIGKILL.
    pub killed_by_drill: bool,
    /// What it wrote on stderr.
    pub stderr: Vec<String>,
}

impl Ended {
    /// Whether SIGKILL ended it.
    pub fn by_sigkill(&self) -> bool {
        use std::os::unix::process::ExitStatusExt;
        self.status.signal() == Some(libc::SIGKILL)
    }

    /// The last lines of its stderr, for a check's detail.
    pub fn stderr_tail(&self) -> String {
        let from = self.stderr.len().saturating_sub(3);
        self.stderr[from..].join(" | ")
    }
}

/// Reads a child's stream line by line until it closes.
fn lines_of(stream: Option<impl AsyncRead + Unpin + Send + 'static>) -> JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut out = Vec::new();
        if let Some(stream) = stream {
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                out.push(line);
            }
        }
        out
    })
}

impl ConsumerChild {
    /// Starts `EXE pipeline consume` with one consumer on the rig's inbox, stream and group
    /// (`options`), armed as asked. The child is killed if this handle is dropped.
    pub fn start(
        exe: &Path,
        options: &ServeOptions,
        arming: Arming,
        mutant: Option<Mutant>,
    ) -> Result<ConsumerChild, PipelineError> {
        let mut command = tokio::process::Command::new(exe);
        command
            .args(["pipeline", "consume", "--consumers", "1"])
            // Through the environment, where `ps` does not show a PostgreSQL password.
            .env("ARRIVAL_DB", options.db.connection_text())
            .args(["--redis-url", &options.redis_url])
            .args(["--stream", &options.names.stream])
            .args(["--group", &options.names.group])
            .args(["--count", &options.count.to_string()])
            .args(["--min-idle-ms", &options.min_idle_ms.to_string()])
            .args(["--max-deliveries", &options.max_deliveries.to_string()])
            .args(["--busy-timeout-ms", &options.busy_timeout_ms.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(point) = arming.point {
            command
                .args(["--drill-kill-at", &point_word(point).replace('_', "-")])
                .args(["--drill-kill-chance", &arming.chance.to_string()])
                .args(["--drill-seed", &arming.seed.to_string()]);
        }
        if let Some(mutant) = mutant {
            command.args(["--drill-mutant", mutant.name()]);
        }
        // A file-size limit (the commit-fails drill's full disk) must be an error the
        // consumer meets, not SIGXFSZ ending it; an ignored signal stays ignored over exec.
        // SAFETY: signal(2) is async-signal-safe, and nothing else runs in the forked child.
        unsafe {
            command.pre_exec(|| {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|error| {
            PipelineError::Other(format!(
                "cannot start {} pipeline consume: {error}",
                exe.display()
            ))
        })?;
        Ok(ConsumerChild {
            pid: child.id().unwrap_or_default(),
            stdout: lines_of(child.stdout.take()),
            stderr: lines_of(child.stderr.take()),
            child,
            killed_by_drill: false,
        })
    }

    /// `kill -9`: SIGKILL from outside.
    pub fn kill(&mut self) {
        self.killed_by_drill = true;
        let _ = self.child.start_kill();
    }

    /// SIGTERM: a graceful stop (nothing, if it has been reaped already).
    pub fn terminate(&self) {
        self.signal(libc::SIGTERM);
    }

    /// SIGSTOP: the process stands still until [`ConsumerChild::resume`].
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT: the process goes on.
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        // `id()` is `None` once the child is reaped, so the pid cannot have been reused.
        if let Some(pid) = self.child.id().filter(|pid| *pid > 0) {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe {
                libc::kill(pid as libc::pid_t, signal);
            }
        }
    }

    /// Whether it has ended (without waiting).
    pub fn has_ended(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for it to end (SIGKILL after `patience`), and reads what it said.
    pub async fn ended(mut self, patience: Duration) -> Result<Ended, PipelineError> {
        let status = match tokio::time::timeout(patience, self.child.wait()).await {
            Ok(status) => status?,
            Err(_) => {
                let _ = self.child.start_kill();
                self.child.wait().await?
            }
        };
        let stdout = self.stdout.await.unwrap_or_default();
        let stderr = self.stderr.await.unwrap_or_default();
        let names = stdout
            .iter()
            .find_map(|line| line.strip_prefix(CONSUMERS_LINE))
            .map(|rest| rest.split_whitespace().map(String::from).collect())
            .unwrap_or_default();
        let killed_at = stdout.iter().find_map(|line| {
            let rest = line.strip_prefix(KILLED_LINE)?;
            point_from_word(rest.split_whitespace().next()?)
        });
        Ok(Ended {
            pid: self.pid,
            status,
            names,
            killed_at,
            killed_by_drill: self.killed_by_drill,
            stderr,
        })
    }
}
