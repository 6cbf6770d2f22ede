//! The JSON-lines conformance target: one request object per line on the receiver's
//! standard input, one reply per line on its standard output (`msg_id` / `in_reply_to`),
//! Maelstrom's error codes, the receiver started and killed by a [`Supervisor`].

use super::process::Supervisor;
use super::state::StateSetting;
use crate::card::conform::{Answer, CardTarget, HarnessError, Observed, Sending};
use crate::card::replay::CardReport;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::ChildStdin;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::Duration;

/// Maelstrom's definite error codes: nothing happened.
pub const DEFINITE: [i64; 8] = [1, 10, 11, 12, 14, 20, 21, 22];

/// A receiver spoken to in JSON lines (docs/conform.md).
pub struct StdioTarget {
    supervisor: Supervisor,
    timeout: Duration,
    ready_timeout: Duration,
    initial: BTreeMap<String, CardReport>,
    stdin: Option<ChildStdin>,
    lines: Option<Receiver<String>>,
    next_id: u64,
    state: Option<StateSetting>,
}

enum Reply {
    Line(Value),
    Timeout,
    Ended,
}

impl StdioTarget {
    /// A target running `command` (with `{data_dir}`), its state read from `state`
    /// (default: the `read` message).
    pub fn new(
        command: Vec<String>,
        timeout: Duration,
        ready_timeout: Duration,
        state: Option<StateSetting>,
    ) -> Result<StdioTarget, HarnessError> {
        Ok(StdioTarget {
            supervisor: Supervisor::new(command)?,
            timeout,
            ready_timeout,
            initial: BTreeMap::new(),
            stdin: None,
            lines: None,
            next_id: 0,
            state,
        })
    }

    /// The reset beyond a fresh data directory that the target file names, if any.
    pub fn resetting(mut self, reset: Option<super::process::Reset>) -> StdioTarget {
        self.supervisor.reset = reset;
        self
    }

    fn what(&self) -> String {
        format!("target `{}`", self.supervisor.command_line().join(" "))
    }

    fn error(&self, message: impl Into<String>) -> HarnessError {
        HarnessError {
            what: self.what(),
            message: message.into(),
        }
    }

    /// Writes one request; returns its `msg_id` (`None`: the pipe is closed).
    fn send(&mut self, mut message: Value) -> Option<u64> {
        self.next_id += 1;
        message["msg_id"] = json!(self.next_id);
        let stdin = self.stdin.as_mut()?;
        let mut line = serde_json::to_vec(&message).expect("requests serialise");
        line.push(b'\n');
        stdin.write_all(&line).ok()?;
        stdin.flush().ok()?;
        Some(self.next_id)
    }

    /// The reply to `id`, skipping replies to requests arrival stopped waiting for.
    fn reply(&mut self, id: u64, timeout: Duration) -> Result<Reply, HarnessError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let Some(lines) = &self.lines else {
                return Ok(Reply::Ended);
            };
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = match lines.recv_timeout(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => return Ok(Reply::Timeout),
                Err(RecvTimeoutError::Disconnected) => return Ok(Reply::Ended),
            };
            let value: Value = serde_json::from_str(&line).map_err(|_| {
                self.error(format!(
                    "wrote a line on stdout that is not JSON: {:?}; was this line intended \
                     for stderr?",
                    line.chars().take(200).collect::<String>()
                ))
            })?;
            if value.get("in_reply_to").and_then(Value::as_u64) == Some(id) {
                return Ok(Reply::Line(value));
            }
        }
    }

    /// Sends and waits; a timeout or the end of the process is indefinite.
    fn call(&mut self, message: Value, send_how: Sending) -> Result<Answer, HarnessError> {
        let Some(id) = self.send(message) else {
            return Ok(Answer::Indefinite("the receiver's input is closed".into()));
        };
        match send_how {
            Sending::Disconnect => return Ok(Answer::Indefinite("not waited for".into())),
            Sending::KillAfter(delay) => {
                std::thread::sleep(delay);
                self.supervisor.kill();
                return Ok(Answer::Indefinite("killed in flight".into()));
            }
            Sending::Wait => {}
        }
        match self.reply(id, self.timeout)? {
            Reply::Line(value) => Ok(answer_of(&value)),
            Reply::Timeout => {
                // No request may still run inside the receiver when the next starts.
                self.start(&BTreeMap::new(), false)?;
                Ok(Answer::Indefinite("timed out".into()))
            }
            Reply::Ended => {
                self.start(&BTreeMap::new(), false)?;
                Ok(Answer::Indefinite("the receiver exited".into()))
            }
        }
    }
}

fn answer_of(value: &Value) -> Answer {
    let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
    if kind == "error" {
        let code = value.get("code").and_then(Value::as_i64).unwrap_or(0);
        let text = value.get("text").and_then(Value::as_str).unwrap_or("");
        let why = format!("error {code} {text}");
        return if DEFINITE.contains(&code) {
            Answer::Definite(why)
        } else {
            Answer::Indefinite(why)
        };
    }
    let word = ["ack", "outcome"]
        .iter()
        .find_map(|key| value.get(key).and_then(Value::as_str).map(str::to_owned));
    Answer::Ack(word)
}

impl CardTarget for StdioTarget {
    fn start(
        &mut self,
        initial: &BTreeMap<String, CardReport>,
        fresh: bool,
    ) -> Result<(), HarnessError> {
        self.stdin = None;
        self.lines = None;
        self.supervisor.kill();
        if fresh {
            self.initial = initial.clone();
            self.supervisor.fresh_data(initial)?;
            self.supervisor.reset_before_start()?;
        }
        let (stdin, stdout) = self.supervisor.spawn(true)?.expect("piped");
        let (sender, receiver) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        self.stdin = Some(stdin);
        self.lines = Some(receiver);
        let start = json!({
            "type": "start",
            "fresh": fresh,
            "data_dir": self.supervisor.data_dir.display().to_string(),
            "initial": self.initial,
        });
        let id = self.send(start);
        let reply = match id {
            Some(id) => self.reply(id, self.ready_timeout)?,
            None => Reply::Ended,
        };
        match reply {
            Reply::Line(value) if value["type"] == "start_ok" && fresh => {
                // A reset URL is absolute for a JSON-lines target (checked when read).
                let nowhere = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
                super::http::reset_by_url(&self.supervisor, initial, nowhere, self.timeout)
            }
            Reply::Line(value) if value["type"] == "start_ok" => Ok(()),
            Reply::Line(value) => Err(self.error(format!("answered `start` with {value}"))),
            Reply::Timeout => Err(self.error(format!(
                "no `start_ok` within {} ms",
                self.ready_timeout.as_millis()
            ))),
            Reply::Ended => {
                std::thread::sleep(Duration::from_millis(20));
                let status = self.supervisor.exited().unwrap_or_else(|| "closed".into());
                Err(self.supervisor.ended(&status))
            }
        }
    }

    fn deliver(
        &mut self,
        delivery: u32,
        body: &[u8],
        send: Sending,
    ) -> Result<Answer, HarnessError> {
        let message = json!({
            "type": "deliver",
            "delivery": delivery,
            "body": String::from_utf8_lossy(body),
        });
        self.call(message, send)
    }

    fn reconcile(&mut self, snapshot: &Value) -> Result<Answer, HarnessError> {
        let answer = self.call(
            json!({"type": "reconcile", "snapshot": snapshot}),
            Sending::Wait,
        )?;
        match answer {
            Answer::Definite(why) if why.starts_with("error 10") => {
                Err(self
                    .error("does not support reconciliation (error 10 to `reconcile`)".to_owned()))
            }
            other => Ok(other),
        }
    }

    fn read(&mut self) -> Result<Observed, HarnessError> {
        if let Some(state) = &self.state {
            return super::http::read_cards(state, &self.supervisor, self.timeout);
        }
        let Some(id) = self.send(json!({"type": "read"})) else {
            return Err(self.error("its input closed before `read`"));
        };
        match self.reply(id, self.timeout)? {
            Reply::Line(value) if value["type"] == "read_ok" => {
                super::http::parse_state(value).map_err(|message| self.error(message))
            }
            Reply::Line(value) => Err(self.error(format!("answered `read` with {value}"))),
            Reply::Timeout => Err(self.error(format!(
                "no `read_ok` within {} ms",
                self.timeout.as_millis()
            ))),
            Reply::Ended => Err(self.error("exited instead of answering `read`")),
        }
    }

    fn kill(&mut self) -> Result<(), HarnessError> {
        self.stdin = None;
        self.lines = None;
        self.supervisor.kill();
        Ok(())
    }

    fn can_kill(&self) -> bool {
        true
    }

    fn log_tail(&self) -> Vec<String> {
        self.supervisor.tail()
    }
}
