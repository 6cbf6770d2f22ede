//! `serve` against misbehaving senders and operators, on a real `serve` child process with
//! the real Redis and its own SQLite inbox: the per-source rate limit (429 with
//! `Retry-After`, a receipt, nothing in the stream), the header-read timeout, the
//! connection cap, a graceful stop that neither waits for half-sent heads nor drops a
//! request in hand, and the keys file (mode 0600 from `init`, a warning when others can
//! read it, reloaded on SIGHUP, a bad file keeping the keys in force).
//!
//! No assertion is about speed: timeouts are configured short and the tests assert what
//! happens (a connection closed, an exit status); waits have generous bounds that only
//! guard against a hang.

use crate::pipeline::redis_url;
use crate::util::{arrival, assert_status, stderr, temp_dir, TempDir, ARRIVAL};
use arrival::facts::application::{AppKey, Application, Applications};
use arrival::facts::ingress::sign;
use arrival::pipeline::client::Client;
use arrival::pipeline::drill::rfc3339;
use arrival::pipeline::run::unique;
use arrival::pipeline::store;
use arrival::pipeline::stream::{self, Names};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const TENANT: &str = "hardening-test";
const FINANCE_KEY: &str = "hardening-finance-secret-0";
const CONTRACTS_KEY: &str = "hardening-contracts-secret";
const NEW_FINANCE_KEY: &str = "hardening-finance-secret-1";
/// The bound on every wait: reached only when something hangs.
const HANG_GUARD: Duration = Duration::from_secs(20);

/// A receipt as stored: status, reason, detail, body digest, key id.
type ReceiptRow = (u16, String, Option<String>, Option<String>, Option<String>);

/// A `serve` child over its own inbox (applications app-1 .. app-3 of [`TENANT`]),
/// stream and keys file, its JSON log lines read by a thread.
struct Rig {
    dir: TempDir,
    names: Names,
    url: String,
    serve: Option<Child>,
    addr: SocketAddr,
    log: mpsc::Receiver<serde_json::Value>,
    runtime: tokio::runtime::Runtime,
}

impl Rig {
    /// Starts serve with `options` (after `--consumers 0 --log-format json`).
    fn new(options: &[&str]) -> Rig {
        Rig::with_keys_mode(options, 0o600)
    }

    fn with_keys_mode(options: &[&str], mode: u32) -> Rig {
        use std::os::unix::fs::PermissionsExt;
        let url = redis_url();
        let dir = temp_dir("hardening");
        let mut apps = Applications::new();
        for n in 1..=3 {
            let key = AppKey {
                tenant_id: TENANT.into(),
                application_id: format!("app-{n}"),
            };
            apps.insert(key, Application::active(format!("BK-{n}"), 1));
        }
        let conn = store::open(&dir.path().join("inbox.db").into(), 5_000).unwrap();
        store::put_applications(&conn, &apps).unwrap();
        let keys = dir.path().join("keys.json");
        std::fs::write(
            &keys,
            format!(r#"{{"finance":["{FINANCE_KEY}"],"contracts":["{CONTRACTS_KEY}"]}}"#),
        )
        .unwrap();
        std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(mode)).unwrap();
        let names = Names {
            stream: unique("arrival-hardening"),
            group: "inbox".into(),
        };
        let mut child = Command::new(ARRIVAL)
            .args(["pipeline", "serve", "--listen", "127.0.0.1:0", "--db"])
            .arg(dir.path().join("inbox.db"))
            .arg("--keys")
            .arg(&keys)
            .args(["--stream", &names.stream, "--group", &names.group])
            .args(["--consumers", "0", "--log-format", "json"])
            .args(options)
            .env("ARRIVAL_REDIS_URL", &url)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (lines, log) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line).unwrap_or(serde_json::Value::String(line));
                if lines.send(value).is_err() {
                    return;
                }
            }
        });
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .trim_start_matches("listening ")
            .parse()
            .unwrap_or_else(|_| panic!("serve did not start: {line:?}"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        Rig {
            dir,
            names,
            url,
            serve: Some(child),
            addr,
            log,
            runtime,
        }
    }

    fn keys(&self) -> PathBuf {
        self.dir.path().join("keys.json")
    }

    fn pid(&self) -> i32 {
        self.serve.as_ref().unwrap().id() as i32
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.pid(), signal);
        }
    }

    /// Posts a payment `event_id` for app-1 signed with `key`: status and reason.
    fn pay(&self, event_id: &str, key: &str) -> (u16, String) {
        let body = payment(event_id);
        let signature = sign(key.as_bytes(), body.as_bytes());
        let reply = self
            .runtime
            .block_on(Client::new(self.addr).post(
                Some("finance"),
                Some(&signature),
                body.as_bytes(),
            ))
            .unwrap();
        (reply.status, reply.reason())
    }

    /// Waits for the first log line whose `message` contains `words`, skipping others.
    fn wait_for_log(&self, words: &str) -> serde_json::Value {
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.log.recv_timeout(left) {
                Ok(line) if line["message"].as_str().is_some_and(|m| m.contains(words)) => {
                    return line
                }
                Ok(_) => {}
                Err(error) => panic!("no log line with `{words}`: {error}"),
            }
        }
    }

    /// Waits for a plain (not JSON) stderr line containing `words`: serve's own start and
    /// stop lines.
    fn wait_for_log_text(&self, words: &str) {
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.log.recv_timeout(left) {
                Ok(serde_json::Value::String(line)) if line.contains(words) => return,
                Ok(_) => {}
                Err(error) => panic!("no line with `{words}`: {error}"),
            }
        }
    }

    /// SIGTERM, then the exit status (the hang guard kills it and fails).
    fn stop(&mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        let mut child = self.serve.take().unwrap();
        wait_exit(&mut child)
    }

    fn stream_length(&self) -> usize {
        let mut redis = stream::connect(&self.url, Duration::from_secs(2)).unwrap();
        redis::cmd("XLEN")
            .arg(&self.names.stream)
            .query(&mut redis)
            .unwrap()
    }

    /// Every receipt (serve stopped first, so the writer has drained): status, reason,
    /// detail, body digest, key id.
    fn receipts(&self) -> Vec<ReceiptRow> {
        assert!(self.serve.is_none(), "stop serve before reading receipts");
        let conn = rusqlite::Connection::open(self.dir.path().join("inbox.db")).unwrap();
        let mut query = conn
            .prepare(
                "SELECT status, reason, detail, body_sha256, key_id FROM receipts ORDER BY seq",
            )
            .unwrap();
        let rows = query
            .query_map([], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            })
            .unwrap();
        rows.map(Result::unwrap).collect()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(mut child) = self.serve.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Ok(mut redis) = stream::connect(&self.url, Duration::from_secs(2)) {
            let _ = stream::delete_keys(&mut redis, &self.names);
        }
    }
}

/// Waits for `child` to exit; past the hang guard it is killed and the test fails.
fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A payment for app-1, sent now.
fn payment(event_id: &str) -> String {
    let now = rfc3339(store::now_ms() / 1000);
    format!(
        r#"{{"schema_version":"1","source":"finance","event_id":"{event_id}","event_type":"PAYMENT_CONFIRMED","sent_at":"{now}","tenant_id":"{TENANT}","application_id":"app-1","business_key":"BK-1","material_version":1,"data":{{"amount":"100"}}}}"#
    )
}

/// A socket with the hang guard as its read timeout.
fn connect(addr: SocketAddr) -> TcpStream {
    let socket = TcpStream::connect(addr).unwrap();
    socket.set_read_timeout(Some(HANG_GUARD)).unwrap();
    socket
}

/// Reads one response (head and `Content-Length` body); `None` when the server closed
/// the connection first.
fn read_response(socket: &mut TcpStream) -> Option<String> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if bytes.len() >= end + 4 + length {
                return Some(text);
            }
        }
        match socket.read(&mut chunk) {
            Ok(0) => return None,
            Ok(read) => bytes.extend_from_slice(&chunk[..read]),
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => return None,
            Err(error) => panic!("reading a response: {error}"),
        }
    }
}

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";

#[test]
fn a_source_over_its_rate_limit_is_answered_429_with_retry_after_a_receipt_and_nothing_in_the_stream(
) {
    let mut rig = Rig::new(&["--rate-limit", "1", "--rate-burst", "2"]);
    // Two tokens, one more a second: within ten requests one finds the bucket empty.
    let mut answers = Vec::new();
    let mut refused = None;
    for n in 0..10 {
        let body = payment(&format!("PAY-{n}"));
        let signature = sign(FINANCE_KEY.as_bytes(), body.as_bytes());
        let mut socket = connect(rig.addr);
        let request = format!(
            "POST /webhook HTTP/1.1\r\nHost: localhost\r\nX-Acme-Source: finance\r\n\
             X-Acme-Signature: {signature}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(request.as_bytes()).unwrap();
        let response = read_response(&mut socket).expect("an answer");
        if response.starts_with("HTTP/1.1 429") {
            refused = Some(response);
            break;
        }
        answers.push(response);
    }
    let refused = refused.expect("ten requests at once never found the bucket empty");
    let lower = refused.to_ascii_lowercase();
    let retry_after: u64 = lower
        .lines()
        .find_map(|line| line.strip_prefix("retry-after: "))
        .expect("a Retry-After header")
        .trim()
        .parse()
        .expect("Retry-After in whole seconds");
    assert!(retry_after >= 1, "{refused}");
    assert!(
        refused.ends_with(r#"{"error":"rate_limited"}"#),
        "{refused}"
    );
    assert!(answers.len() >= 2, "the burst of two went through");
    assert!(
        answers.iter().all(|a| a.starts_with("HTTP/1.1 202")),
        "{answers:?}"
    );
    // Another source has its own bucket.
    let contracts = {
        let body = payment("SIG-1")
            .replace("finance", "contracts")
            .replace("PAYMENT_CONFIRMED", "CONTRACT_SIGNED");
        let signature = sign(CONTRACTS_KEY.as_bytes(), body.as_bytes());
        rig.runtime
            .block_on(Client::new(rig.addr).post(
                Some("contracts"),
                Some(&signature),
                body.as_bytes(),
            ))
            .unwrap()
    };
    assert_eq!(contracts.status, 202, "contracts has a bucket of its own");
    let in_stream = rig.stream_length();
    assert!(rig.stop().success());
    assert_eq!(
        in_stream,
        answers.len() + 1,
        "only the 202s reached the stream"
    );
    let receipts = rig.receipts();
    let limited: Vec<_> = receipts.iter().filter(|r| r.0 == 429).collect();
    assert_eq!(limited.len(), 1, "{receipts:?}");
    let (_, reason, detail, digest, key) = limited[0];
    assert_eq!(reason, "rate_limited");
    let detail = detail.as_deref().unwrap_or_default();
    assert!(
        detail.contains("bucket `finance`") && detail.contains("1 requests/s"),
        "{detail}"
    );
    assert_eq!(
        digest, &None,
        "the body of a refused request was never read"
    );
    assert_eq!(key, &None);
    assert_eq!(
        receipts.len(),
        answers.len() + 2,
        "a receipt for every answer"
    );
}

#[test]
fn a_rate_limit_of_zero_is_refused_and_off_is_taken() {
    for (value, exit) in [("0", 2), ("lots", 2)] {
        let output = arrival(&[
            "pipeline",
            "serve",
            "--db",
            "/nonexistent/inbox.db",
            "--keys",
            "/nonexistent/keys.json",
            "--rate-limit",
            value,
        ]);
        assert_status(&output, exit, &format!("--rate-limit {value}"));
        let message = stderr(&output);
        assert!(
            message.contains("--rate-limit") && message.contains("`off`"),
            "{message}"
        );
    }
    // `off` parses; serve then stops at the missing keys file (exit 2 naming it).
    let output = arrival(&[
        "pipeline",
        "serve",
        "--db",
        "/nonexistent/inbox.db",
        "--keys",
        "/nonexistent/keys.json",
        "--rate-limit",
        "off",
    ]);
    assert_status(&output, 2, "--rate-limit off");
    assert!(stderr(&output).contains("/nonexistent/keys.json"));
}

#[test]
fn a_client_that_stalls_in_its_headers_is_closed_at_the_header_timeout_and_others_are_served() {
    let mut rig = Rig::new(&["--header-timeout-ms", "200"]);
    let mut stalled = connect(rig.addr);
    stalled
        .write_all(b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nX-Acme-")
        .unwrap();
    assert_eq!(
        read_response(&mut stalled),
        None,
        "closed without an answer"
    );
    let line = rig.wait_for_log("no whole request head in time");
    assert_eq!(line["header_timeout_ms"], 200);
    assert_eq!(rig.pay("PAY-1", FINANCE_KEY), (202, "accepted".to_owned()));
    assert!(rig.stop().success());
    let receipts = rig.receipts();
    assert_eq!(
        receipts.len(),
        1,
        "the closed connection was never answered: {receipts:?}"
    );
}

#[test]
fn a_graceful_stop_drops_half_sent_heads_at_once_and_finishes_a_request_in_hand() {
    // A header timeout of ten minutes: only the stop itself can close the stalled clients.
    let mut rig = Rig::new(&["--header-timeout-ms", "600000"]);
    let mut silent = connect(rig.addr);
    let mut stalled = connect(rig.addr);
    stalled
        .write_all(b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nX-Acme-Sou")
        .unwrap();
    // A request in hand: its head is dispatched (hyper answers `100 Continue` once the
    // handler reads the body), its body not yet sent.
    let body = payment("PAY-1");
    let signature = sign(FINANCE_KEY.as_bytes(), body.as_bytes());
    let mut in_hand = connect(rig.addr);
    in_hand
        .write_all(
            format!(
                "POST /webhook HTTP/1.1\r\nHost: localhost\r\nX-Acme-Source: finance\r\n\
                 X-Acme-Signature: {signature}\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .unwrap();
    let mut continued = [0u8; 25];
    in_hand.read_exact(&mut continued).unwrap();
    assert!(
        continued.starts_with(b"HTTP/1.1 100 Continue"),
        "{continued:?}"
    );
    rig.signal(libc::SIGTERM);
    rig.wait_for_log_text("stopping");
    // The listener is closed before the connections are told to stop.
    let deadline = Instant::now() + HANG_GUARD;
    while TcpStream::connect(rig.addr).is_ok() {
        assert!(Instant::now() < deadline, "the listener stays open");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        read_response(&mut silent),
        None,
        "a silent client is let go"
    );
    assert_eq!(
        read_response(&mut stalled),
        None,
        "a half-sent head is let go"
    );
    in_hand.write_all(body.as_bytes()).unwrap();
    let answer = read_response(&mut in_hand).expect("the request in hand is answered");
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    let mut child = rig.serve.take().unwrap();
    assert!(wait_exit(&mut child).success());
    assert_eq!(rig.stream_length(), 1);
    let receipts = rig.receipts();
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    assert_eq!((receipts[0].0, receipts[0].1.as_str()), (202, "accepted"));
}

#[test]
fn connections_beyond_the_cap_wait_until_one_closes() {
    let mut rig = Rig::new(&["--max-connections", "1"]);
    let mut first = connect(rig.addr);
    first.write_all(HEALTHZ).unwrap();
    assert!(read_response(&mut first)
        .unwrap()
        .starts_with("HTTP/1.1 200"));
    // The first connection is kept alive and holds the only slot.
    let mut second = connect(rig.addr);
    second.write_all(HEALTHZ).unwrap();
    first.write_all(HEALTHZ).unwrap();
    assert!(
        read_response(&mut first)
            .unwrap()
            .starts_with("HTTP/1.1 200"),
        "the first connection is still served"
    );
    // Nothing may come back on the second connection while the first is open. A wait
    // with a time limit can only let a broken cap pass (its answer coming late), never
    // fail a working one.
    second
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut byte = [0u8; 1];
    let waiting = second.read(&mut byte);
    assert!(
        matches!(&waiting, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
        "the second connection is not served while the first holds the slot: {waiting:?}"
    );
    second.set_read_timeout(Some(HANG_GUARD)).unwrap();
    drop(first);
    let answer = read_response(&mut second).expect("served once the first closed");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(rig.stop().success());
}

#[test]
fn sighup_reloads_the_keys_and_a_bad_file_keeps_the_keys_in_force() {
    let mut rig = Rig::with_keys_mode(&[], 0o644);
    let warning = rig.wait_for_log("group or others have access");
    assert_eq!(warning["level"], "WARN");
    assert_eq!(warning["mode"], "0644");
    assert_eq!(warning["file"], rig.keys().display().to_string());
    assert_eq!(rig.pay("PAY-1", FINANCE_KEY), (202, "accepted".to_owned()));
    assert_eq!(
        rig.pay("PAY-2", NEW_FINANCE_KEY),
        (400, "bad_signature".to_owned())
    );
    std::fs::write(
        rig.keys(),
        format!(
            r#"{{"keys":[{{"id":"fin-new","source":"finance","secret":"{NEW_FINANCE_KEY}"}}]}}"#
        ),
    )
    .unwrap();
    rig.signal(libc::SIGHUP);
    let reloaded = rig.wait_for_log("keys reloaded");
    assert_eq!(reloaded["ids"], "fin-new");
    assert_eq!(
        rig.pay("PAY-3", NEW_FINANCE_KEY),
        (202, "accepted".to_owned())
    );
    assert_eq!(
        rig.pay("PAY-4", FINANCE_KEY),
        (400, "bad_signature".to_owned())
    );
    // A bad file: logged with the file and what is wrong; the new key stays in force.
    std::fs::write(
        rig.keys(),
        r#"{"keys":[{"id":"x","source":"finance","secret":"short"}]}"#,
    )
    .unwrap();
    rig.signal(libc::SIGHUP);
    let refused = rig.wait_for_log("keys not reloaded");
    assert_eq!(refused["level"], "ERROR");
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.contains(&rig.keys().display().to_string())
            && error.contains("keys[0].secret")
            && error.contains("at least 24 bytes"),
        "{error}"
    );
    assert!(!error.contains("short"), "no secret in the log: {error}");
    assert_eq!(refused["kept"], "fin-new");
    std::fs::remove_file(rig.keys()).unwrap();
    rig.signal(libc::SIGHUP);
    assert!(rig.wait_for_log("keys not reloaded")["error"]
        .as_str()
        .unwrap()
        .contains("cannot read"));
    assert_eq!(
        rig.pay("PAY-5", NEW_FINANCE_KEY),
        (202, "accepted".to_owned())
    );
    assert!(rig.stop().success());
    let keys: Vec<_> = rig.receipts().into_iter().filter_map(|r| r.4).collect();
    assert_eq!(keys, ["finance-1", "fin-new", "fin-new"]);
}

#[test]
fn init_writes_the_keys_file_for_its_owner_only_even_over_a_file_others_could_read() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("hardening-init");
    let keys = dir.path().join("keys.json");
    std::fs::write(&keys, "old").unwrap();
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o644)).unwrap();
    let fresh = dir.path().join("fresh-keys.json");
    for (n, file) in [&keys, &fresh].into_iter().enumerate() {
        let db = dir.path().join(format!("inbox-{n}.db"));
        let output = arrival(&[
            "pipeline",
            "init",
            "--db",
            db.to_str().unwrap(),
            "--fixture",
            "fixtures/acmeflow-wf14.json",
            "--keys-out",
            file.to_str().unwrap(),
        ]);
        assert_status(&output, 0, "init");
        let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", file.display());
    }
    assert!(std::fs::read_to_string(&keys).unwrap().contains("finance"));
}

#[test]
fn a_body_still_arriving_at_a_stop_gets_a_short_grace_then_503_and_does_not_hold_the_stop() {
    let mut rig = Rig::new(&[]);
    let body = payment("PAY-SLOW");
    let signature = sign(FINANCE_KEY.as_bytes(), body.as_bytes());
    let mut slow = connect(rig.addr);
    slow.write_all(
        format!(
            "POST /webhook HTTP/1.1\r\nHost: localhost\r\nX-Acme-Source: finance\r\n\
             X-Acme-Signature: {signature}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    slow.write_all(&body.as_bytes()[..5]).unwrap();
    std::thread::sleep(Duration::from_millis(300)); // the handler waits for the rest
    rig.signal(libc::SIGTERM);
    let answer = read_response(&mut slow).expect("the slow sender is answered");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    let mut child = rig.serve.take().unwrap();
    assert!(wait_exit(&mut child).success());
    assert_eq!(rig.stream_length(), 0, "nothing of it in the stream");
    let receipts = rig.receipts();
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    assert_eq!(
        (receipts[0].0, receipts[0].1.as_str()),
        (503, "shutting_down")
    );
}
