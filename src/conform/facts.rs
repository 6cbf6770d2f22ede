//! The facts receiver under test as processes: its target file (the receiver's command,
//! the command that registers a fixture's applications and keys at every reset, where its
//! state is read, an optional clean-up), signed posts over HTTP with the request's own
//! headers, kills of its process group and restarts on the same data.

use super::http::read_reply;
use super::process::Supervisor;
use super::state::{Context, Protocol, StateSetting};
use crate::facts::campaign::{FactsTarget, Sending, TargetError};
use crate::facts::conform::{classify, Answer, Wire};
use crate::facts::fixture::RawFixture;
use crate::harness::InputError;
use serde::Deserialize;
use serde_json::Value;
use std::io::Write;

/// How long a `register` or `cleanup` command may take before it is killed (exit 3).
pub const COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

fn default_timeout() -> u64 {
    2_000
}

fn default_ready() -> u64 {
    10_000
}

fn default_settle() -> u64 {
    10_000
}

fn default_expect() -> String {
    "pass".into()
}

fn default_path() -> String {
    "/webhook".into()
}

/// A facts target file (docs/conform.md).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FactsTargetFile {
    /// Always `facts`.
    pub protocol: String,
    /// The receiver: `{port}`, `{data_dir}`, `{stream}` (new at every reset), `{arrival}`.
    pub command: Vec<String>,
    /// Run at every reset before the receiver starts: `{fixture}` (the fixture's
    /// applications and keys), `{data_dir}`, `{stream}`, `{arrival}`; must exit 0.
    pub register: Vec<String>,
    /// Where the state document is read, as written: a command printing it (a list of
    /// words), or a table or list of tables (docs/conform.md).
    state: toml::Value,
    /// The `state` setting, read.
    #[serde(skip)]
    pub reader: StateSetting,
    /// Run after each receiver's last use (e.g. to delete its stream); optional.
    #[serde(default)]
    pub cleanup: Vec<String>,
    /// Where requests are posted.
    #[serde(default = "default_path")]
    pub webhook_path: String,
    /// How long one request may take (milliseconds).
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// How long the receiver may take to be ready (milliseconds).
    #[serde(default = "default_ready")]
    pub ready_timeout_ms: u64,
    /// How long the receiver may take to show nothing pending (milliseconds).
    #[serde(default = "default_settle")]
    pub settle_timeout_ms: u64,
    /// `pass`, or the property a known-broken receiver must be caught by.
    #[serde(default = "default_expect")]
    pub expect: String,
}

impl FactsTargetFile {
    /// Reads a facts target file; `{arrival}` becomes `exe`.
    pub fn load(path: &Path, exe: &Path) -> Result<FactsTargetFile, InputError> {
        let mut file: FactsTargetFile = crate::harness::model_file::parse(path)?;
        if file.protocol != "facts" {
            return Err(InputError::invalid(
                path,
                "protocol",
                format!(
                    "`{}`: a facts target file says `protocol = \"facts\"`",
                    file.protocol
                ),
            ));
        }
        for (name, words) in [("command", &file.command), ("register", &file.register)] {
            if words.is_empty() {
                return Err(InputError::invalid(
                    path,
                    name,
                    "is empty: give the program and its arguments",
                ));
            }
        }
        file.reader = StateSetting::from_toml(&file.state, path, Protocol::Facts)?;
        let exe = exe.display().to_string();
        file.reader.replace("{arrival}", &exe);
        for words in [&mut file.command, &mut file.register, &mut file.cleanup] {
            for word in words.iter_mut() {
                *word = word.replace("{arrival}", &exe);
            }
        }
        Ok(file)
    }

    /// Whether a `--target` names a facts target file.
    pub fn is_facts_target(text: &str) -> bool {
        text.ends_with(".toml")
            && std::fs::read_to_string(text).is_ok_and(|body| {
                body.parse::<toml::Table>().is_ok_and(|table| {
                    table.get("protocol").and_then(|v| v.as_str()) == Some("facts")
                })
            })
    }
}

/// A facts receiver spoken to over HTTP.
pub struct HttpFactsTarget {
    file: FactsTargetFile,
    supervisor: Supervisor,
    stream: Option<String>,
    /// Cleanup failures not reported yet.
    warnings: Vec<String>,
}

fn error(what: impl Into<String>, message: impl std::fmt::Display) -> TargetError {
    TargetError {
        what: what.into(),
        message: message.to_string(),
    }
}

fn from_harness(error: crate::card::conform::HarnessError) -> TargetError {
    TargetError {
        what: error.what,
        message: error.message,
    }
}

impl HttpFactsTarget {
    /// A target from its file, not started.
    pub fn new(file: FactsTargetFile) -> Result<HttpFactsTarget, TargetError> {
        let supervisor = Supervisor::new(file.command.clone()).map_err(from_harness)?;
        Ok(HttpFactsTarget {
            file,
            supervisor,
            stream: None,
            warnings: Vec::new(),
        })
    }

    fn fill(&self, word: &str) -> String {
        let word = self.supervisor.fill(word);
        let fixture = self.supervisor.data_dir.join("fixture.json");
        word.replace("{stream}", self.stream.as_deref().unwrap_or(""))
            .replace("{fixture}", &fixture.display().to_string())
    }

    /// Runs one of the file's commands; its standard output when it exits 0 within
    /// [`COMMAND_TIMEOUT`].
    fn run(&self, name: &str, words: &[String]) -> Result<Vec<u8>, TargetError> {
        let words: Vec<String> = words.iter().map(|word| self.fill(word)).collect();
        let what = format!("{name} command `{}`", words.join(" "));
        super::process::run_command(&words, COMMAND_TIMEOUT).map_err(|e| error(&what, e))
    }

    /// Runs `cleanup` for the stream in use; a failure is kept as a warning (the run's
    /// verdict does not depend on it, but the user's Redis may keep the stream).
    fn cleanup(&mut self) -> Option<String> {
        if self.stream.is_none() || self.file.cleanup.is_empty() {
            return None;
        }
        let failed = self.run("cleanup", &self.file.cleanup.clone()).err()?;
        let warning = format!("{}: {}", failed.what, failed.message);
        if !self.warnings.contains(&warning) {
            self.warnings.push(warning.clone());
        }
        Some(warning)
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.supervisor.port))
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.file.timeout_ms)
    }

    fn send(&self, wire: &Wire) -> std::io::Result<TcpStream> {
        let addr = self.addr();
        let mut head = format!(
            "POST {} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n",
            self.file.webhook_path
        );
        for (name, value) in &wire.headers {
            head += &format!("{name}: {value}\r\n");
        }
        head += &format!(
            "Content-Length: {}\r\nConnection: close\r\n\r\n",
            wire.body.len()
        );
        let mut request = head.into_bytes();
        request.extend_from_slice(&wire.body);
        let mut stream = TcpStream::connect_timeout(&addr, self.timeout())?;
        stream.set_read_timeout(Some(self.timeout()))?;
        stream.set_write_timeout(Some(self.timeout()))?;
        stream.write_all(&request)?;
        Ok(stream)
    }
}

/// A stream key no other run uses: process, counter and time.
fn stream_name() -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.subsec_nanos());
    format!("arrival-conform-{}-{n}-{nanos:08x}", std::process::id())
}

impl FactsTarget for HttpFactsTarget {
    fn reset(&mut self, fixture: &RawFixture) -> Result<(), TargetError> {
        self.supervisor.kill();
        self.cleanup();
        self.supervisor.empty_data().map_err(from_harness)?;
        self.stream = Some(stream_name());
        let path = self.supervisor.data_dir.join("fixture.json");
        let text = serde_json::to_string_pretty(fixture).expect("fixtures serialise");
        std::fs::write(&path, text).map_err(|e| error(path.display().to_string(), e))?;
        self.run("register", &self.file.register.clone())?;
        let command: Vec<String> = self
            .file
            .command
            .iter()
            .map(|word| word.replace("{stream}", self.stream.as_deref().unwrap_or("")))
            .collect();
        self.supervisor.set_template(command);
        self.start()
    }

    fn post(&mut self, wire: &Wire, sending: Sending) -> Result<Answer, TargetError> {
        let stream = match (self.send(wire), sending) {
            (Err(e), _) => return Ok(Answer::Indefinite(e.to_string())),
            (Ok(stream), Sending::Disconnect) => {
                let _ = stream.shutdown(Shutdown::Both);
                return Ok(Answer::Indefinite("disconnected by arrival".into()));
            }
            (Ok(stream), Sending::KillAfter(delay)) => {
                std::thread::sleep(delay);
                self.supervisor.kill();
                drop(stream);
                return Ok(Answer::Indefinite("killed in flight".into()));
            }
            (Ok(stream), Sending::Wait) => stream,
        };
        match read_reply(stream) {
            Ok(reply) => Ok(classify(reply.status, &reply.body)),
            Err(e) => {
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) {
                    // No request may still run inside the receiver when the next starts.
                    self.supervisor.kill();
                    self.start()?;
                }
                Ok(Answer::Indefinite(e.to_string()))
            }
        }
    }

    fn read(&mut self) -> Result<Value, TargetError> {
        let fill = |word: &str| self.fill(word);
        let get = |url: &str| super::http::get(self.addr(), url, self.timeout());
        let context = Context {
            fill: &fill,
            get: &get,
            timeout: self.timeout(),
        };
        self.file
            .reader
            .read(&context, Protocol::Facts)
            .map_err(|e| error(e.what, e.message))
    }

    fn kill(&mut self) -> Result<(), TargetError> {
        self.supervisor.kill();
        Ok(())
    }

    fn start(&mut self) -> Result<(), TargetError> {
        let (timeout, ready) = (
            self.timeout(),
            Duration::from_millis(self.file.ready_timeout_ms),
        );
        super::http::start_http(&mut self.supervisor, timeout, ready).map_err(from_harness)
    }

    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64)
    }

    fn settle_timeout(&self) -> Duration {
        Duration::from_millis(self.file.settle_timeout_ms)
    }

    fn log_tail(&self) -> Vec<String> {
        self.supervisor.tail()
    }

    fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }
}

impl Drop for HttpFactsTarget {
    /// The last stream's cleanup comes after the report; its failure goes to stderr.
    fn drop(&mut self) {
        self.supervisor.kill();
        if let Some(warning) = self.cleanup() {
            eprintln!("arrival conform: {warning}");
        }
    }
}
