//! The HTTP conformance target: a minimal blocking HTTP/1.1 client for loopback (one
//! connection per request, `Content-Length`, chunked or read-to-close bodies) and the
//! receiver behind it, started and killed by a [`Supervisor`]; in pull mode, with the
//! authority it fetches snapshots from ([`AuthorityServer`]).

use super::authority::AuthorityServer;
use super::process::Supervisor;
use super::state::{Context, Protocol, Source, StateSetting};
use crate::card::conform::{Answer, CardTarget, HarnessError, Observed, Sending};
use crate::card::replay::CardReport;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// One HTTP answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
    /// The body, dechunked.
    pub body: Vec<u8>,
}

impl Reply {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

fn head(
    method: &str,
    path: &str,
    addr: SocketAddr,
    headers: &[(&str, String)],
    body: &[u8],
) -> Vec<u8> {
    let extra: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         {extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// Connects and sends a request; the stream is returned unread.
pub fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> std::io::Result<TcpStream> {
    send_with(addr, method, path, &[], body, timeout)
}

/// [`send`] with extra header lines.
pub fn send_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
    timeout: Duration,
) -> std::io::Result<TcpStream> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(&head(method, path, addr, headers, body))?;
    Ok(stream)
}

/// Sends a request and reads the whole answer.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> std::io::Result<Reply> {
    read_reply(send(addr, method, path, body, timeout)?)
}

/// Reads an answer: the status line, the headers, then a body by `Content-Length`, by
/// chunks, or up to the end of the connection.
pub fn read_reply(stream: TcpStream) -> std::io::Result<Reply> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the connection closed before an answer",
        ));
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP status line: {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        if let Some((name, value)) = trimmed.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value): &(String, String)| value.clone())
    };
    let body = if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        dechunk(&mut reader)?
    } else if let Some(length) = find("content-length") {
        let length: usize = length
            .parse()
            .map_err(|_| std::io::Error::other(format!("bad Content-Length {length:?}")))?;
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        body
    } else {
        let mut body = Vec::new();
        reader.read_to_end(&mut body)?;
        body
    };
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// POSTs `body` (JSON) to `url` (a path on `addr`, or `http://HOST:PORT/PATH`), which must
/// answer 2xx: a target's reset URL.
pub fn post_json(
    addr: SocketAddr,
    url: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<(), String> {
    let (addr, path) = locate(addr, url)?;
    let shown = format!("POST http://{addr}{path}");
    let reply = request(addr, "POST", &path, body, timeout).map_err(|e| format!("{shown}: {e}"))?;
    if !(200..300).contains(&reply.status) {
        return Err(format!("{shown} answered {}, not 2xx", reply.status));
    }
    Ok(())
}

/// `GET url` (a path on `addr`, or `http://HOST:PORT/PATH`): the body of a 200 answer.
/// The state reader's URL source ([`super::state`]).
pub fn get(addr: SocketAddr, url: &str, timeout: Duration) -> Result<Vec<u8>, String> {
    let (addr, path) = locate(addr, url)?;
    let shown = format!("GET http://{addr}{path}");
    let reply = request(addr, "GET", &path, b"", timeout).map_err(|e| format!("{shown}: {e}"))?;
    if reply.status != 200 {
        let body: String = String::from_utf8_lossy(&reply.body)
            .chars()
            .take(200)
            .collect();
        return Err(format!(
            "{shown} answered {}, not 200: {body}",
            reply.status
        ));
    }
    Ok(reply.body)
}

/// Where a URL points: a path on `addr`, or `http://HOST:PORT/PATH`.
fn locate(addr: SocketAddr, url: &str) -> Result<(SocketAddr, String), String> {
    Ok(if url.starts_with('/') {
        (addr, url.to_owned())
    } else {
        let rest = url
            .strip_prefix("http://")
            .ok_or("only http:// URLs are read")?;
        let (host, path) = match rest.find('/') {
            Some(at) => (&rest[..at], rest[at..].to_owned()),
            None => (rest, "/".to_owned()),
        };
        let addr = std::net::ToSocketAddrs::to_socket_addrs(host)
            .map_err(|error| format!("cannot resolve {host}: {error}"))?
            .next()
            .ok_or_else(|| format!("{host} resolves to no address"))?;
        (addr, path)
    })
}

/// A chunked body, decoded (extensions and trailers skipped).
pub fn dechunk(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let size = line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size, 16)
            .map_err(|_| std::io::Error::other(format!("bad chunk size line {line:?}")))?;
        if size == 0 {
            loop {
                line.clear();
                if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        line.clear();
        reader.read_line(&mut line)?;
    }
}

/// A receiver spoken to over HTTP (docs/conform.md).
pub struct HttpTarget {
    supervisor: Supervisor,
    command: Vec<String>,
    timeout: Duration,
    ready_timeout: Duration,
    initial: BTreeMap<String, CardReport>,
    state: StateSetting,
    /// In pull mode, the authority the receiver fetches snapshots from.
    authority: Option<AuthorityServer>,
    /// How many of the authority's fetches have been sorted into prompted and not.
    fetches_seen: usize,
    /// The cards the receiver fetched on its own, not yet taken.
    unprompted: Vec<String>,
    /// Kills to settle a request given up on, not yet taken ([`CardTarget::own_kills`]).
    own_kills: u64,
}

impl HttpTarget {
    /// A target running `command` (with `{port}` and `{data_dir}`), its state read from
    /// `state` (default: `GET /_arrival/state`).
    pub fn new(
        command: Vec<String>,
        timeout: Duration,
        ready_timeout: Duration,
        state: Option<StateSetting>,
    ) -> Result<HttpTarget, HarnessError> {
        Ok(HttpTarget {
            supervisor: Supervisor::new(command.clone())?,
            command,
            timeout,
            ready_timeout,
            initial: BTreeMap::new(),
            state: state.unwrap_or_else(|| StateSetting {
                sources: vec![Source::Url("/_arrival/state".into())],
            }),
            authority: None,
            fetches_seen: 0,
            unprompted: Vec::new(),
            own_kills: 0,
        })
    }

    /// The reset beyond a fresh data directory that the target file names, if any.
    pub fn resetting(mut self, reset: Option<super::process::Reset>) -> HttpTarget {
        self.supervisor.reset = reset;
        self
    }

    /// Pull mode: arrival's authority starts on a port of its own, `{authority}` in the
    /// command becomes its URL, and a reconciliation sends `{"object_id", "authority"}`.
    pub fn pull_authority(mut self) -> Result<HttpTarget, HarnessError> {
        let server = AuthorityServer::start()?;
        let url = server.url();
        let template = self
            .command
            .iter()
            .map(|word| word.replace("{authority}", &url))
            .collect();
        self.supervisor.set_template(template);
        self.authority = Some(server);
        Ok(self)
    }

    /// The reconciliation request's body: the snapshot itself (push), or the card and
    /// where to fetch it (pull), and the number of fetches before it.
    fn reconcile_body(&self, snapshot: &Value) -> (Vec<u8>, usize) {
        match &self.authority {
            None => (
                serde_json::to_vec(snapshot).expect("snapshots serialise"),
                0,
            ),
            Some(server) => {
                let body = serde_json::json!({
                    "object_id": snapshot["object_id"],
                    "authority": server.url(),
                });
                (body.to_string().into_bytes(), server.fetches().len())
            }
        }
    }

    /// Sorts the authority's fetches since the last call: one fetch of `prompted` (the
    /// card a reconciliation request named) was asked for; every other is the receiver's
    /// own.
    fn sort_fetches(&mut self, prompted: Option<&str>) {
        let Some(server) = &self.authority else {
            return;
        };
        let fetched = server.fetches();
        let mut prompted = prompted;
        for id in fetched.iter().skip(self.fetches_seen) {
            if prompted == Some(id.as_str()) {
                prompted = None;
            } else {
                self.unprompted.push(id.clone());
            }
        }
        self.fetches_seen = fetched.len();
    }

    /// In pull mode, a reconciliation acknowledged without a fetch of its card from the
    /// authority is a harness failure: the receiver decided on something arrival did not
    /// give it (most likely it was not started in pull mode), so the oracle has nothing
    /// to judge.
    fn check_fetched(&self, snapshot: &Value, before: usize) -> Result<(), HarnessError> {
        let Some(server) = &self.authority else {
            return Ok(());
        };
        let card = snapshot["object_id"].as_str().unwrap_or_default();
        let fetched = server.fetches();
        if fetched[before.min(fetched.len())..]
            .iter()
            .any(|id| id == card)
        {
            return Ok(());
        }
        Err(HarnessError {
            what: self.what("/_arrival/reconcile"),
            message: format!(
                "acknowledged a reconciliation of {card} in pull mode without fetching GET \
                 {}/cards/{card} (fetched since the request: {:?}); start the receiver in \
                 pull mode (`{{authority}}` in the command)",
                server.url(),
                &fetched[before.min(fetched.len())..]
            ),
        })
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.supervisor.port))
    }

    fn what(&self, path: &str) -> String {
        format!("target http://{}{path}", self.addr())
    }

    /// Kills the receiver and starts it again on the same data, so that no request of the
    /// last step can still be running inside it when the next step starts (the model's steps
    /// are atomic: a request left running would land between later ones).
    fn settle_in_flight(&mut self) -> Result<(), HarnessError> {
        self.supervisor.kill();
        self.own_kills += 1;
        self.start(&BTreeMap::new(), false)
    }

    fn post(
        &mut self,
        path: &str,
        headers: &[(&str, String)],
        body: &[u8],
        send_how: Sending,
    ) -> Result<Answer, HarnessError> {
        let sent = send_with(self.addr(), "POST", path, headers, body, self.timeout);
        let stream = match (sent, send_how) {
            (Err(error), _) => return Ok(Answer::Indefinite(error.to_string())),
            (Ok(stream), Sending::Disconnect) => {
                let _ = stream.shutdown(Shutdown::Both);
                // A receiver that goes on with the request after the disconnect may record
                // it at any later time; the kill decides it: recorded before, or never.
                self.settle_in_flight()?;
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
            Ok(reply) if (200..300).contains(&reply.status) => {
                Ok(Answer::Ack(meaning(&reply, "ack")))
            }
            Ok(reply) => Ok(Answer::Indefinite(format!("HTTP {}", reply.status))),
            Err(error) => {
                if timed_out(&error) {
                    self.settle_in_flight()?;
                }
                Ok(Answer::Indefinite(self.restart_if_died(error.to_string())?))
            }
        }
    }

    /// A receiver that ended on its own while answering (it crashed on the request) is a
    /// crash like one of arrival's kills: the answer is indefinite and the receiver is
    /// started again on its data, as over JSON lines. Returns the answer's reason.
    fn restart_if_died(&mut self, why: String) -> Result<String, HarnessError> {
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(500) {
            if let Some(status) = self.supervisor.exited() {
                self.supervisor.kill();
                start_http(&mut self.supervisor, self.timeout, self.ready_timeout)?;
                return Ok(format!(
                    "{why}; the receiver ended on its own ({status}), restarted"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(why)
    }
}

/// POSTs the initial cards to the supervisor's reset URL, if it has one (a path is on
/// `addr`, the receiver's own address).
pub fn reset_by_url(
    supervisor: &Supervisor,
    initial: &BTreeMap<String, CardReport>,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<(), HarnessError> {
    let Some(url) = supervisor.reset_url() else {
        return Ok(());
    };
    let body = serde_json::to_vec(initial).expect("cards serialise");
    post_json(addr, &url, &body, timeout).map_err(|message| HarnessError {
        what: format!("reset URL {url}"),
        message,
    })
}

/// Starts an HTTP receiver and waits until `GET /healthz` answers 2xx. When it does not
/// (another process may have taken the port while the receiver was down, after a kill),
/// once more on a new port before giving up.
pub fn start_http(
    supervisor: &mut Supervisor,
    timeout: Duration,
    ready_timeout: Duration,
) -> Result<(), HarnessError> {
    supervisor.spawn(false)?;
    let Err(first) = wait_ready(supervisor, timeout, ready_timeout) else {
        return Ok(());
    };
    supervisor.kill();
    supervisor.port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_err(|error| HarnessError {
            what: "a free port on 127.0.0.1".into(),
            message: error.to_string(),
        })?
        .port();
    supervisor.spawn(false)?;
    wait_ready(supervisor, timeout, ready_timeout).map_err(|second| HarnessError {
        what: second.what,
        message: format!(
            "{} (and before that, on another port: {})",
            second.message, first.message
        ),
    })
}

/// Polls `GET /healthz` every 10 ms until a 2xx, the process's end, or `ready_timeout`.
fn wait_ready(
    supervisor: &mut Supervisor,
    timeout: Duration,
    ready_timeout: Duration,
) -> Result<(), HarnessError> {
    let started = Instant::now();
    let addr = SocketAddr::from(([127, 0, 0, 1], supervisor.port));
    loop {
        if let Some(status) = supervisor.exited() {
            return Err(supervisor.ended(&status));
        }
        let probe = request(addr, "GET", "/healthz", b"", timeout);
        if probe.is_ok_and(|reply| (200..300).contains(&reply.status)) {
            return Ok(());
        }
        if started.elapsed() > ready_timeout {
            return Err(HarnessError {
                what: format!("target http://{addr}/healthz"),
                message: format!("not ready (no 2xx) after {} ms", ready_timeout.as_millis()),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether a request failed for want of an answer in time (it may still be running).
fn timed_out(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// The acknowledgement's meaning: the `Arrival-Ack` header, else the body's `key`
/// (`ack` for a delivery, `outcome` for a reconciliation).
fn meaning(reply: &Reply, key: &str) -> Option<String> {
    if let Some(word) = reply.header("arrival-ack") {
        return Some(word.to_owned());
    }
    let body: Value = serde_json::from_slice(&reply.body).ok()?;
    body.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Reads `{"cards": {...}, "paused"?: [...], "unresolved"?: [...]}`.
pub fn parse_state(document: Value) -> Result<Observed, String> {
    #[derive(serde::Deserialize)]
    struct State {
        cards: BTreeMap<String, CardReport>,
        #[serde(default)]
        paused: Option<std::collections::BTreeSet<String>>,
        #[serde(default)]
        unresolved: Option<std::collections::BTreeSet<String>>,
    }
    let state: State = serde_json::from_value(document).map_err(|error| {
        format!("not a state object {{\"cards\": {{...}}, \"paused\"?, \"unresolved\"?}}: {error}")
    })?;
    Ok(Observed {
        cards: state.cards,
        paused: state.paused,
        unresolved: state.unresolved,
    })
}

/// A card target's state from its `state` setting, read as the card oracle's observation.
pub fn read_cards(
    setting: &StateSetting,
    supervisor: &Supervisor,
    timeout: Duration,
) -> Result<Observed, HarnessError> {
    let fill = |word: &str| supervisor.fill(word);
    let addr = SocketAddr::from(([127, 0, 0, 1], supervisor.port));
    let get = |url: &str| get(addr, url, timeout);
    let context = Context {
        fill: &fill,
        get: &get,
        timeout,
    };
    let document = setting
        .read(&context, Protocol::Card)
        .map_err(|error| HarnessError {
            what: error.what,
            message: error.message,
        })?;
    parse_state(document).map_err(|message| HarnessError {
        what: setting.describe(),
        message,
    })
}

impl CardTarget for HttpTarget {
    fn start(
        &mut self,
        initial: &BTreeMap<String, CardReport>,
        fresh: bool,
    ) -> Result<(), HarnessError> {
        self.supervisor.kill();
        if fresh {
            self.initial = initial.clone();
            self.supervisor.fresh_data(initial)?;
            self.supervisor.reset_before_start()?;
            // What an earlier schedule's receiver fetched is no step of this one.
            self.sort_fetches(None);
            self.unprompted.clear();
        }
        start_http(&mut self.supervisor, self.timeout, self.ready_timeout)?;
        if fresh {
            reset_by_url(&self.supervisor, initial, self.addr(), self.timeout)?;
        }
        Ok(())
    }

    fn fetched(&mut self) -> Vec<String> {
        self.sort_fetches(None);
        std::mem::take(&mut self.unprompted)
    }

    fn deliver(
        &mut self,
        delivery: u32,
        body: &[u8],
        send: Sending,
    ) -> Result<Answer, HarnessError> {
        // The contract names an input without an event id by its delivery number: the
        // receiver reads it here rather than counting arrivals (which retries would shift).
        let headers = [("Arrival-Delivery", delivery.to_string())];
        self.post("/webhook", &headers, body, send)
    }

    fn reconcile(&mut self, snapshot: &Value) -> Result<Answer, HarnessError> {
        self.sort_fetches(None);
        let (body, before) = self.reconcile_body(snapshot);
        let stream = send(
            self.addr(),
            "POST",
            "/_arrival/reconcile",
            &body,
            self.timeout,
        );
        match stream.and_then(read_reply) {
            Ok(reply) if reply.status == 404 => Err(HarnessError {
                what: self.what("/_arrival/reconcile"),
                message: "answered 404: the receiver does not support reconciliation".into(),
            }),
            Ok(reply) if (200..300).contains(&reply.status) => {
                self.check_fetched(snapshot, before)?;
                self.sort_fetches(snapshot["object_id"].as_str());
                Ok(Answer::Ack(meaning(&reply, "outcome")))
            }
            Ok(reply) => Ok(Answer::Indefinite(format!("HTTP {}", reply.status))),
            Err(error) => {
                if timed_out(&error) {
                    self.settle_in_flight()?;
                }
                Ok(Answer::Indefinite(self.restart_if_died(error.to_string())?))
            }
        }
    }

    fn serve_authority(&mut self, snapshots: &BTreeMap<String, Value>) {
        if let Some(server) = &self.authority {
            server.set_cards(snapshots.clone());
        }
    }

    fn read(&mut self) -> Result<Observed, HarnessError> {
        let error = match read_cards(&self.state, &self.supervisor, self.timeout) {
            Ok(observed) => return Ok(observed),
            Err(error) => error,
        };
        // A receiver that died on its own after its last answer (it may still be closing
        // down) is restarted on its data, which the model takes as nothing, and read
        // once more; one that dies again, or on the read itself, is a harness failure.
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(500) {
            if self.supervisor.exited().is_some() {
                self.supervisor.kill();
                start_http(&mut self.supervisor, self.timeout, self.ready_timeout)?;
                let again = read_cards(&self.state, &self.supervisor, self.timeout);
                return again.map_err(|error| match self.supervisor.exited() {
                    Some(status) => self.supervisor.died(&status),
                    None => error,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(error)
    }

    fn kill(&mut self) -> Result<(), HarnessError> {
        self.supervisor.kill();
        Ok(())
    }

    fn can_kill(&self) -> bool {
        true
    }

    fn own_kills(&mut self) -> u64 {
        std::mem::take(&mut self.own_kills)
    }

    fn log_tail(&self) -> Vec<String> {
        self.supervisor.tail()
    }
}

#[cfg(test)]
mod tests {
    use super::dechunk;

    #[test]
    fn a_chunked_body_is_put_back_together() {
        let wire = b"4\r\n{\"ac\r\n9;ext=1\r\nk\": \"held\r\n2\r\n\"}\r\n0\r\n\r\n";
        let body = dechunk(&mut &wire[..]).unwrap();
        assert_eq!(body, b"{\"ack\": \"held\"}");
    }
}
