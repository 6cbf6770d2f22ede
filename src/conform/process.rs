//! The process supervisor of a conformance target: the user's command started in its own
//! process group with `{port}` and `{data_dir}` filled in, its data directory made fresh
//! (with `initial.json`) or kept for a restart, a crash as `SIGKILL` to the whole group,
//! and the last lines of its standard error kept for reports.

use crate::card::conform::HarnessError;
use crate::card::replay::CardReport;
use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};

/// Runs a short command (a state read, a register or cleanup step) in a process group of
/// its own: its standard output when it exits 0 within `timeout`. Past `timeout` the whole
/// group is killed and the error says so; a signal that ends arrival kills it too.
pub fn run_command(words: &[String], timeout: std::time::Duration) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let (program, args) = words.split_first().ok_or("the command is empty")?;
    let mut child = Command::new(program)
        .args(args)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| error.to_string())?;
    let group = child.id() as libc::pid_t;
    super::groups::register(group);
    // Each pipe is read on a thread of its own, its bytes sent when it closes. A child that
    // left the group (a daemon in a session of its own) may hold it open for ever: its
    // bytes are then not waited for past a short grace.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = sender.send(bytes);
        });
        receiver
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout is piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr is piped")));
    let deadline = std::time::Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            _ => break None,
        }
    };
    // SAFETY: killpg only sends a signal; the group is the command's own. Whatever it left
    // behind in its group goes too, so the pipes close.
    unsafe {
        libc::killpg(group, libc::SIGKILL);
    }
    let _ = child.wait();
    super::groups::unregister(group);
    let grace = std::time::Duration::from_millis(200);
    let (stdout, stderr) = (
        stdout.recv_timeout(grace).unwrap_or_default(),
        stderr.recv_timeout(grace).unwrap_or_default(),
    );
    match status {
        None => Err(format!("did not finish within {timeout:?} (killed)")),
        Some(status) if status.success() => Ok(stdout),
        Some(status) => Err(format!(
            "{status}: {}",
            String::from_utf8_lossy(&stderr).trim()
        )),
    }
}

/// How many lines of the target's standard error are kept.
pub const LOG_LINES: usize = 32;

/// How a target is reset beyond a fresh data directory (`reset` in the target file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reset {
    /// A command run after the data directory is made fresh and before the receiver
    /// starts, with `{data_dir}`, `{port}` and `{initial}` (the initial cards' file).
    Command(Vec<String>),
    /// A URL POSTed the initial cards (`{"card-7": {"version", "state"}}`) once the
    /// receiver is ready; it must answer 2xx.
    Url(String),
}

/// How long a reset command may take before it is killed.
const RESET_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The target's process and its data directory.
pub struct Supervisor {
    /// The reset beyond a fresh data directory, if the target file names one.
    pub reset: Option<Reset>,
    template: Vec<String>,
    /// The port substituted for `{port}`.
    pub port: u16,
    /// The directory substituted for `{data_dir}`.
    pub data_dir: PathBuf,
    child: Option<Child>,
    log: Arc<Mutex<VecDeque<String>>>,
}

fn harness(what: &str, message: impl std::fmt::Display) -> HarnessError {
    HarnessError {
        what: what.to_owned(),
        message: message.to_string(),
    }
}

impl Supervisor {
    /// A supervisor for `template` (not started), with a free port and a new data
    /// directory under the system's temporary folder.
    pub fn new(template: Vec<String>) -> Result<Supervisor, HarnessError> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(|error| harness("a free port on 127.0.0.1", error))?
            .port();
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let data_dir =
            std::env::temp_dir().join(format!("arrival-conform-{}-{n}-{port}", std::process::id()));
        Ok(Supervisor {
            reset: None,
            template,
            port,
            data_dir,
            child: None,
            log: Arc::default(),
        })
    }

    /// The command line with its placeholders filled in.
    pub fn command_line(&self) -> Vec<String> {
        self.template.iter().map(|word| self.fill(word)).collect()
    }

    /// Replaces the command (a facts target fills in a new `{stream}` at every reset).
    pub fn set_template(&mut self, template: Vec<String>) {
        self.template = template;
    }

    /// Fills in `{port}` and `{data_dir}` in any word.
    pub fn fill(&self, word: &str) -> String {
        word.replace("{port}", &self.port.to_string())
            .replace("{data_dir}", &self.data_dir.display().to_string())
    }

    /// Empties the data directory.
    pub fn empty_data(&self) -> Result<(), HarnessError> {
        let what = format!("data directory {}", self.data_dir.display());
        if self.data_dir.exists() {
            std::fs::remove_dir_all(&self.data_dir).map_err(|e| harness(&what, e))?;
        }
        std::fs::create_dir_all(&self.data_dir).map_err(|e| harness(&what, e))
    }

    /// Empties the data directory and writes `initial.json` into it.
    pub fn fresh_data(&self, initial: &BTreeMap<String, CardReport>) -> Result<(), HarnessError> {
        let what = format!("data directory {}", self.data_dir.display());
        if self.data_dir.exists() {
            std::fs::remove_dir_all(&self.data_dir).map_err(|e| harness(&what, e))?;
        }
        std::fs::create_dir_all(&self.data_dir).map_err(|e| harness(&what, e))?;
        let text = serde_json::to_string(initial).expect("cards serialise");
        std::fs::write(self.data_dir.join("initial.json"), text).map_err(|e| harness(&what, e))
    }

    /// Runs the reset command, if any (after [`Supervisor::fresh_data`], before the start).
    pub fn reset_before_start(&self) -> Result<(), HarnessError> {
        let Some(Reset::Command(words)) = &self.reset else {
            return Ok(());
        };
        let initial = self.data_dir.join("initial.json").display().to_string();
        let words: Vec<String> = words
            .iter()
            .map(|word| self.fill(word).replace("{initial}", &initial))
            .collect();
        run_command(&words, RESET_TIMEOUT)
            .map(drop)
            .map_err(|message| harness(&format!("reset command `{}`", words.join(" ")), message))
    }

    /// The reset URL, if any, with its placeholders filled in.
    pub fn reset_url(&self) -> Option<String> {
        match &self.reset {
            Some(Reset::Url(url)) => Some(self.fill(url)),
            _ => None,
        }
    }

    /// Starts the command in a process group of its own; with `piped`, its standard input
    /// and output are returned for the JSON-lines protocol.
    pub fn spawn(
        &mut self,
        piped: bool,
    ) -> Result<Option<(ChildStdin, ChildStdout)>, HarnessError> {
        self.kill();
        let words = self.command_line();
        let Some((program, args)) = words.split_first() else {
            return Err(harness("target command", "the command is empty"));
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .process_group(0)
            .stdin(if piped { Stdio::piped() } else { Stdio::null() })
            .stdout(if piped { Stdio::piped() } else { Stdio::null() })
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|error| harness(&format!("target command `{}`", words.join(" ")), error))?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let log = Arc::clone(&self.log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = log.lock().expect("the log lock is never poisoned");
                if log.len() == LOG_LINES {
                    log.pop_front();
                }
                log.push_back(line);
            }
        });
        let pipes = piped.then(|| {
            (
                child.stdin.take().expect("stdin is piped"),
                child.stdout.take().expect("stdout is piped"),
            )
        });
        super::groups::register(child.id() as libc::pid_t);
        self.child = Some(child);
        Ok(pipes)
    }

    /// If the process has ended, how.
    pub fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }

    /// `SIGKILL` to the whole process group, then reaps the process.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let group = child.id() as libc::pid_t;
            // SAFETY: killpg only sends a signal; the group is the child's own.
            unsafe {
                libc::killpg(group, libc::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
            super::groups::unregister(group);
        }
    }

    /// The last lines of the target's standard error.
    pub fn tail(&self) -> Vec<String> {
        self.log
            .lock()
            .expect("the log lock is never poisoned")
            .iter()
            .cloned()
            .collect()
    }

    /// The error for a command that ended while arrival waited for it.
    pub fn ended(&mut self, status: &str) -> HarnessError {
        self.exited_while(status, "before it was ready")
    }

    /// The harness error of a receiver that exited on its own after it was ready (it died
    /// on a request, or quit): arrival cannot read its state, so the run cannot go on.
    pub fn died(&mut self, status: &str) -> HarnessError {
        self.exited_while(
            status,
            "on its own while running (not killed by arrival), so its state cannot be read",
        )
    }

    fn exited_while(&mut self, status: &str, when: &str) -> HarnessError {
        let tail = self.tail();
        harness(
            &format!("target command `{}`", self.command_line().join(" ")),
            format!(
                "exited ({status}) {when}{}",
                if tail.is_empty() {
                    String::new()
                } else {
                    format!("; its last stderr lines:\n  {}", tail.join("\n  "))
                }
            ),
        )
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

#[cfg(test)]
mod tests {
    use super::run_command;
    use std::time::Duration;

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    #[test]
    fn a_command_gives_its_output_its_failure_or_is_killed_at_the_timeout() {
        let second = Duration::from_secs(10);
        assert_eq!(run_command(&sh("echo hi"), second).unwrap(), b"hi\n");
        let failed = run_command(&sh("echo oops >&2; exit 3"), second).unwrap_err();
        assert!(failed.contains("oops"), "{failed}");
        // The sleep is the shell's child: only killing the group ends it (and closes the
        // pipes the output is read from).
        let hung = run_command(&sh("sleep 30; echo late"), Duration::from_millis(200));
        let hung = hung.unwrap_err();
        assert!(hung.contains("did not finish within 200ms"), "{hung}");
        // A daemon in a session of its own keeps the pipes open past the group's kill: the
        // command still ends at its timeout, and its output is what came before.
        let daemon = sh("echo early; (setsid sleep 3 &); sleep 30");
        let hung = run_command(&daemon, Duration::from_millis(200)).unwrap_err();
        assert!(hung.contains("did not finish within 200ms"), "{hung}");
        // And one that exits 0 at once, leaving the daemon behind, gives its output.
        let left = run_command(
            &sh("echo early; (setsid sleep 3 > /dev/null 2>&1 &)"),
            second,
        );
        assert_eq!(left.unwrap(), b"early\n");
    }
}
