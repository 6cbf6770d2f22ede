//! The operator's views of a running pipeline: `pipeline explain` and the chain it
//! follows, and `serve`'s `/metrics`, `/healthz`, `/readyz` and log lines; on a real
//! `serve` (a child process, with no consumers of its own unless a test asks), the real Redis and a real SQLite inbox. The tests consume with a
//! library consumer batch by batch, so a delivered but unacknowledged entry is made by a
//! consumer that a fault stops before its commit, never by waiting. Each test has its own
//! stream, inbox and temporary folder, and removes its keys.

use crate::pipeline::{redis_url, serve_with};
use crate::util::{stderr, stdout, temp_dir, ARRIVAL};
use arrival::facts::application::{AppKey, Application, Applications};
use arrival::facts::ingress::sign;
use arrival::pipeline::client::Client;
use arrival::pipeline::consumer::{Consumer, ConsumerOptions, Faults, NoFaults, Point};
use arrival::pipeline::drill::rfc3339;
use arrival::pipeline::run::unique;
use arrival::pipeline::store;
use arrival::pipeline::stream::{self, Names};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

const TENANT: &str = "explain-test";
const FINANCE_KEY: &str = "explain-finance-secret-000";
const CONTRACTS_KEY: &str = "explain-contracts-secret-0";

/// Stops the consumer that reads it before its commit: the entry stays pending in it.
struct StopBeforeCommit;

impl Faults for StopBeforeCommit {
    fn kill_at(&self, _: &str, point: Point, _: usize) -> bool {
        point == Point::BeforeCommit
    }
}

/// A serve child with no consumers over its own inbox (applications app-1 .. app-9 at
/// version 1, business keys BK-n) and stream; requests signed with key ids `fin-1` and
/// `con-1`.
struct Rig {
    dir: crate::util::TempDir,
    names: Names,
    url: String,
    serve: Option<Child>,
    addr: std::net::SocketAddr,
    runtime: tokio::runtime::Runtime,
}

impl Rig {
    fn new() -> Rig {
        let url = redis_url();
        let dir = temp_dir("explain");
        let mut apps = Applications::new();
        for n in 1..=9 {
            let key = AppKey {
                tenant_id: TENANT.into(),
                application_id: format!("app-{n}"),
            };
            apps.insert(key, Application::active(format!("BK-{n}"), 1));
        }
        let conn = store::open(&dir.path().join("inbox.db").to_path_buf().into(), 5_000).unwrap();
        store::put_applications(&conn, &apps).unwrap();
        let keys = format!(
            r#"{{"keys":[{{"id":"fin-1","source":"finance","secret":"{FINANCE_KEY}"}},{{"id":"con-1","source":"contracts","secret":"{CONTRACTS_KEY}"}}]}}"#
        );
        std::fs::write(dir.path().join("keys.json"), keys).unwrap();
        let names = Names {
            stream: unique("arrival-explain"),
            group: "inbox".into(),
        };
        let (serve, addr) = serve_with(dir.path(), &names, &url, &["--consumers", "0"]);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        Rig {
            dir,
            names,
            url,
            serve: Some(serve),
            addr,
            runtime,
        }
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("inbox.db")
    }

    /// Posts `body` for `source`, signed (or with a signature of zeros); the status.
    fn post(&self, source: &str, body: &str, signed: bool) -> u16 {
        let key = if source == "finance" {
            FINANCE_KEY
        } else {
            CONTRACTS_KEY
        };
        let signature = if signed {
            sign(key.as_bytes(), body.as_bytes())
        } else {
            "0".repeat(64)
        };
        let mut client = Client::new(self.addr);
        self.runtime
            .block_on(client.post(Some(source), Some(&signature), body.as_bytes()))
            .unwrap()
            .status
    }

    fn consumer(&self, name: &str, faults: Arc<dyn Faults>) -> Consumer {
        let options = ConsumerOptions {
            redis_url: self.url.clone(),
            names: self.names.clone(),
            name: name.into(),
            db: self.db().into(),
            count: 1,
            block_ms: 1,
            min_idle_ms: 600_000,
            claim_every_ms: 600_000,
            max_deliveries: 3,
            busy_timeout_ms: 5_000,
            mutant: None,
        };
        Consumer::connect(options, faults).unwrap()
    }

    /// Stops serve and starts another on the same inbox, stream and keys with `options`,
    /// its log lines (stderr) going to `log`.
    fn restart(&mut self, options: &[&str], log: &std::path::Path) {
        self.stop();
        let mut child = Command::new(ARRIVAL)
            .args(["pipeline", "serve", "--listen", "127.0.0.1:0", "--db"])
            .arg(self.db())
            .arg("--keys")
            .arg(self.dir.path().join("keys.json"))
            .args(["--stream", &self.names.stream, "--group", &self.names.group])
            .args(options)
            .env("ARRIVAL_REDIS_URL", &self.url)
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        self.addr = line
            .trim()
            .trim_start_matches("listening ")
            .parse()
            .unwrap();
        self.serve = Some(child);
    }

    /// `GET path` on serve: status and body.
    fn get(&self, path: &str) -> (u16, String) {
        get(self.addr, path)
    }

    /// Waits until the inbox holds `count` verdicts (a consumer of serve decides them);
    /// fails after 20 s.
    fn wait_for_verdicts(&self, count: i64) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let conn = rusqlite::Connection::open(self.db()).unwrap();
        loop {
            let found: i64 = conn
                .query_row("SELECT count(*) FROM verdicts", [], |row| row.get(0))
                .unwrap();
            if found == count {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{found} of {count} verdicts"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Decides every entry not yet read, with consumer `c1`.
    fn consume_all(&self) {
        let mut consumer = self.consumer("c1", Arc::new(NoFaults));
        while let Some((_, entries)) = consumer.next_batch().unwrap() {
            consumer.handle(&entries).unwrap();
        }
    }

    /// Stops serve with SIGTERM (its receipts are written before it exits).
    fn stop(&mut self) {
        if let Some(mut child) = self.serve.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
            assert!(child.wait().unwrap().success());
        }
    }

    /// `pipeline explain ARGS` (serve stopped first): its standard output.
    fn explain(&mut self, args: &[&str]) -> String {
        self.stop();
        let output = Command::new(ARRIVAL)
            .args(["pipeline", "explain", "--db"])
            .arg(self.db())
            .args(["--stream", &self.names.stream, "--group", &self.names.group])
            .args(args)
            .env("ARRIVAL_REDIS_URL", &self.url)
            .env_remove("ARRIVAL_DB")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}{}",
            stdout(&output),
            stderr(&output)
        );
        stdout(&output)
    }

    fn explain_app(&mut self, app: &str) -> String {
        self.explain(&["--tenant", TENANT, "--application", app])
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

fn body(source: &str, event_id: &str, app: &str, extra: &str) -> String {
    let now = rfc3339(store::now_ms() / 1000);
    let n = app.trim_start_matches("app-");
    let withdrawal = !extra.is_empty() && !extra.starts_with("amount=");
    let event_type = match (source, withdrawal) {
        ("finance", false) => "PAYMENT_CONFIRMED",
        ("contracts", false) => "CONTRACT_SIGNED",
        _ => "PAYMENT_REVERSED",
    };
    let data = match extra {
        "" => r#"{"amount":"100"}"#.to_owned(),
        amount if amount.starts_with("amount=") => {
            format!(r#"{{"amount":"{}"}}"#, &amount[7..])
        }
        withdrawn => format!(r#"{{"withdraws":"{withdrawn}"}}"#),
    };
    format!(
        r#"{{"schema_version":"1","source":"{source}","event_id":"{event_id}","event_type":"{event_type}","sent_at":"{now}","tenant_id":"{TENANT}","application_id":"{app}","business_key":"BK-{n}","material_version":1,"data":{data}}}"#
    )
}

fn payment(rig: &Rig, event_id: &str, app: &str) -> u16 {
    rig.post("finance", &body("finance", event_id, app, ""), true)
}

fn signature(rig: &Rig, event_id: &str, app: &str) -> u16 {
    rig.post("contracts", &body("contracts", event_id, app, ""), true)
}

fn has(text: &str, words: &str) {
    assert!(text.contains(words), "missing `{words}` in:\n{text}");
}

#[test]
fn an_application_holding_both_facts_is_explained_as_ready_through_the_whole_chain() {
    let mut rig = Rig::new();
    assert_eq!(payment(&rig, "PAY-1", "app-1"), 202);
    assert_eq!(signature(&rig, "SIG-1", "app-1"), 202);
    rig.consume_all();
    let text = rig.explain_app("app-1");
    has(&text, "READY: payment finance/PAY-1 (entry ");
    has(&text, "and signature contracts/SIG-1 (entry ");
    has(&text, "held for v1, no open conflict");
    has(
        &text,
        "receipt     202 accepted explain-test/finance/PAY-1 key fin-1 entry ",
    );
    has(&text, "decided accepted by c1 on delivery 1 (1 processing)");
    has(&text, "became READY (cause ");
    let json = rig.explain(&["--json", "--tenant", TENANT, "--application", "app-1"]);
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let app = &value["explanation"]["applications"][0];
    assert_eq!(app["ready"], true);
    assert_eq!(app["kinds"][0]["state"]["state"], "held");
    assert_eq!(app["kinds"][1]["state"]["event_id"], "SIG-1");
}

#[test]
fn stream_entries_and_verdict_rows_carry_the_chain_and_an_entry_without_the_ids_is_still_consumed()
{
    let mut rig = Rig::new();
    assert_eq!(payment(&rig, "PAY-1", "app-1"), 202);
    // An entry as an older ingress wrote it: source, body and receive time only.
    let old = body("contracts", "SIG-1", "app-1", "");
    let mut redis = stream::connect(&rig.url, Duration::from_secs(2)).unwrap();
    let old_id: String = stream::xadd_command(
        &rig.names,
        "contracts",
        old.as_bytes(),
        store::now_ms(),
        None,
    )
    .query(&mut redis)
    .unwrap();
    rig.consume_all();
    rig.stop();
    let entries = stream::range_all(&mut redis, &rig.names.stream).unwrap();
    let field = |n: usize, name: &str| {
        entries[n]
            .field(name)
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
    };
    assert_eq!(field(0, "tenant_id").as_deref(), Some(TENANT));
    assert_eq!(field(0, "application_id").as_deref(), Some("app-1"));
    assert_eq!(field(0, "event_id").as_deref(), Some("PAY-1"));
    assert_eq!(
        field(1, "event_id"),
        None,
        "the old entry has no ids beside its body"
    );
    let conn = rusqlite::Connection::open(rig.db()).unwrap();
    let rows: Vec<(String, String, String, String, String, String, i64)> = conn
        .prepare(
            "SELECT entry, verdict, tenant_id || '/' || application_id, source, event_id,
                    consumer, deliveries FROM verdicts ORDER BY entry",
        )
        .unwrap()
        .query_map([], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
                row.get(6)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let app = format!("{TENANT}/app-1");
    assert_eq!(
        rows,
        [
            (
                entries[0].id.clone(),
                "accepted".into(),
                app.clone(),
                "finance".into(),
                "PAY-1".into(),
                "c1".into(),
                1
            ),
            (
                old_id,
                "accepted".into(),
                app,
                "contracts".into(),
                "SIG-1".into(),
                "c1".into(),
                1
            ),
        ]
    );
    let times: i64 = conn
        .query_row(
            "SELECT count(*) FROM verdicts WHERE received_ms IS NOT NULL AND committed_ms >= received_ms AND last_ms = committed_ms",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(times, 2);
}

#[test]
fn a_missing_payment_whose_request_had_a_bad_signature_is_explained_by_that_receipt() {
    let mut rig = Rig::new();
    assert_eq!(
        rig.post("finance", &body("finance", "PAY-2", "app-2", ""), false),
        400
    );
    assert_eq!(signature(&rig, "SIG-2", "app-2"), 202);
    rig.consume_all();
    let text = rig.explain_app("app-2");
    has(
        &text,
        "not READY: no payment for v1: the last request was refused 400 bad_signature at ",
    );
    has(&text, "(no key of finance matched it)");
    has(&text, "signature held: contracts/SIG-2 for v1");
}

#[test]
fn a_missing_payment_whose_202_entry_waits_in_a_stopped_consumer_is_explained_as_pending() {
    let mut rig = Rig::new();
    assert_eq!(payment(&rig, "PAY-3", "app-3"), 202);
    let mut stopped = rig.consumer("c-stopped", Arc::new(StopBeforeCommit));
    let (_, entries) = stopped.next_batch().unwrap().unwrap();
    let result = stopped.handle(&entries).unwrap();
    assert_eq!(result.killed, Some(Point::BeforeCommit));
    drop(stopped);
    assert_eq!(signature(&rig, "SIG-3", "app-3"), 202);
    rig.consume_all();
    let text = rig.explain_app("app-3");
    has(&text, "not READY: no payment for v1: a 202 at ");
    has(
        &text,
        &format!(
            "whose entry {} is still pending in consumer c-stopped for ",
            entries[0].id
        ),
    );
    has(&text, "(1 delivery), not decided yet");
    let event = rig.explain(&["--event", &format!("{TENANT}/finance/PAY-3")]);
    has(&event, "the event:\n  a 202 at ");
    has(&event, "still pending in consumer c-stopped");
    has(
        &event,
        "delivered to c-stopped (1 delivery), not acknowledged for ",
    );
}

#[test]
fn a_missing_payment_nobody_sent_is_explained_as_nothing_seen() {
    let mut rig = Rig::new();
    assert_eq!(signature(&rig, "SIG-4", "app-4"), 202);
    rig.consume_all();
    let text = rig.explain_app("app-4");
    has(
        &text,
        "not READY: no payment for v1: nothing at all was seen from finance for it (no request, no entry): ask finance for its send log",
    );
}

#[test]
fn a_terminated_application_is_explained_as_terminated_for_ever() {
    let mut rig = Rig::new();
    assert_eq!(payment(&rig, "PAY-5", "app-5"), 202);
    assert_eq!(signature(&rig, "SIG-5", "app-5"), 202);
    rig.consume_all();
    rig.stop();
    let terminate = Command::new(ARRIVAL)
        .args(["pipeline", "applications", "terminate", "--tenant", TENANT])
        .args([
            "--application",
            "app-5",
            "--reason",
            "withdrawn by the applicant",
        ])
        .args(["--at", "2026-06-01T10:00:00Z", "--db"])
        .arg(rig.db())
        .env_remove("ARRIVAL_DB")
        .output()
        .unwrap();
    assert!(terminate.status.success(), "{}", stderr(&terminate));
    let text = rig.explain_app("app-5");
    has(
        &text,
        "not READY: terminated: withdrawn by the applicant (at 2026-06-01T10:00:00Z); READY is false for ever",
    );
    has(
        &text,
        "stopped being READY (cause terminate explain-test/app-5)",
    );
}

#[test]
fn an_open_conflict_is_named_as_what_stops_ready() {
    let mut rig = Rig::new();
    assert_eq!(payment(&rig, "PAY-6", "app-6"), 202);
    let variant = body("finance", "PAY-6", "app-6", "amount=999");
    assert_eq!(rig.post("finance", &variant, true), 202);
    assert_eq!(signature(&rig, "SIG-6", "app-6"), 202);
    rig.consume_all();
    let text = rig.explain_app("app-6");
    has(
        &text,
        "not READY: open conflict on explain-test/finance/PAY-6 (`pipeline conflicts resolve` settles it)",
    );
    has(&text, "decided conflict by c1");
}

#[test]
fn a_withdrawn_payment_is_named_with_the_withdrawal() {
    let mut rig = Rig::new();
    assert_eq!(payment(&rig, "PAY-7", "app-7"), 202);
    assert_eq!(signature(&rig, "SIG-7", "app-7"), 202);
    let reversal = body("finance", "REV-7", "app-7", "PAY-7");
    assert_eq!(rig.post("finance", &reversal, true), 202);
    rig.consume_all();
    let text = rig.explain_app("app-7");
    has(
        &text,
        "not READY: no payment for v1 (finance/PAY-7 was withdrawn by finance/REV-7)",
    );
    has(
        &text,
        "withdrawal  explain-test/finance/REV-7 PAYMENT_REVERSED withdraws finance/PAY-7",
    );
}

#[test]
fn an_unregistered_application_is_explained_by_its_quarantined_entries() {
    let mut rig = Rig::new();
    assert_eq!(payment(&rig, "PAY-X", "app-unknown"), 202);
    rig.consume_all();
    let text = rig.explain_app("app-unknown");
    has(
        &text,
        "not READY: explain-test/app-unknown is not registered; 1 entry waits in quarantine for it (",
    );
    has(&text, "quarantined since ");
    let bad = Command::new(ARRIVAL)
        .args(["pipeline", "explain", "--tenant", TENANT, "--db"])
        .arg(rig.db())
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    has(&stderr(&bad), "--event");
}

/// `GET path` on `addr`: status and body.
fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(addr).unwrap();
    write!(
        socket,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    socket.read_to_string(&mut reply).unwrap();
    let status = reply[9..12].parse().unwrap();
    let body = reply.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_owned())
}

/// Metric `name` with `labels` from a parsed scrape.
fn sample(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found = scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)));
    match found.map(|s| &s.value) {
        Some(
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v),
        ) => *v,
        other => panic!("no sample {name}{labels:?}: {other:?}"),
    }
}

#[test]
fn metrics_parse_as_prometheus_text_and_count_requests_levels_and_commits() {
    let mut rig = Rig::new();
    // An entry delivered to a consumer that stops before its commit: pending in it.
    assert_eq!(payment(&rig, "PAY-2", "app-2"), 202);
    let mut stopped = rig.consumer("c-stopped", Arc::new(StopBeforeCommit));
    let (_, entries) = stopped.next_batch().unwrap().unwrap();
    assert_eq!(
        stopped.handle(&entries).unwrap().killed,
        Some(Point::BeforeCommit)
    );
    drop(stopped);
    let log = rig.dir.path().join("serve.log");
    let options = [
        "--consumers",
        "1",
        "--min-idle-ms",
        "600000",
        "--log-format",
        "json",
    ];
    rig.restart(&options, &log);
    assert_eq!(payment(&rig, "PAY-1", "app-1"), 202);
    assert_eq!(signature(&rig, "SIG-1", "app-1"), 202);
    assert_eq!(
        rig.post("finance", &body("finance", "PAY-9", "app-1", ""), false),
        400
    );
    assert_eq!(payment(&rig, "PAY-X", "app-unknown"), 202);
    assert_eq!(payment(&rig, "PAY-3", "app-3"), 202);
    assert_eq!(
        rig.post(
            "finance",
            &body("finance", "PAY-3", "app-3", "amount=7"),
            true
        ),
        202
    );
    rig.wait_for_verdicts(5);
    let (status, text) = rig.get("/metrics");
    assert_eq!(status, 200, "{text}");
    for line in text.lines() {
        let parsed = prometheus_parse::LineInfo::parse(line);
        let comment = line.starts_with("# EOF") || line.starts_with("# UNIT");
        assert!(
            comment || !matches!(parsed, prometheus_parse::LineInfo::Ignored),
            "not Prometheus text: {line}"
        );
    }
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let requests = "arrival_requests_total";
    assert_eq!(
        sample(
            &scrape,
            requests,
            &[("status", "202"), ("reason", "accepted")]
        ),
        4.0
    );
    assert_eq!(
        sample(
            &scrape,
            requests,
            &[("status", "202"), ("reason", "quarantined")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &scrape,
            requests,
            &[("status", "400"), ("reason", "bad_signature")]
        ),
        1.0
    );
    assert_eq!(sample(&scrape, "arrival_stream_length", &[]), 6.0);
    assert_eq!(
        sample(&scrape, "arrival_pending", &[("consumer", "c-stopped")]),
        1.0
    );
    let pending_series = scrape
        .samples
        .iter()
        .filter(|s| s.metric == "arrival_pending");
    assert_eq!(
        pending_series.count(),
        1,
        "serve's own consumer holds nothing:\n{text}"
    );
    assert!(sample(&scrape, "arrival_oldest_pending_idle_seconds", &[]) >= 0.0);
    assert_eq!(sample(&scrape, "arrival_dead_letters", &[]), 0.0);
    assert_eq!(sample(&scrape, "arrival_quarantined", &[]), 1.0);
    assert_eq!(sample(&scrape, "arrival_open_conflicts", &[]), 1.0);
    assert_eq!(sample(&scrape, "arrival_ready_applications", &[]), 1.0);
    let committed = sample(
        &scrape,
        "arrival_batches_total",
        &[("outcome", "committed")],
    );
    let histogram = scrape
        .samples
        .iter()
        .find(|s| s.metric == "arrival_commit_seconds")
        .map(|s| s.value.clone());
    let Some(prometheus_parse::Value::Histogram(buckets)) = histogram else {
        panic!("no commit histogram: {histogram:?}\n{text}");
    };
    let inf = buckets
        .iter()
        .find(|b| b.less_than == f64::INFINITY)
        .unwrap();
    assert!(committed >= 1.0 && inf.count == committed, "{text}");
    assert_eq!(rig.get("/healthz"), (200, "ok\n".to_owned()));
    assert_eq!(rig.get("/readyz"), (200, "ready\n".to_owned()));
    rig.stop();
    let logged = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = logged
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let requests: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["message"] == "request").collect();
    assert_eq!(requests.len(), 6, "{logged}");
    assert!(requests
        .iter()
        .any(|l| l["reason"] == "bad_signature" && l["status"] == 400));
    let batches = lines.iter().filter(|l| l["message"] == "batch").count();
    assert!(batches >= 1, "{logged}");
    for secret in [
        FINANCE_KEY,
        CONTRACTS_KEY,
        "\"amount\"",
        "PAYMENT_CONFIRMED",
    ] {
        assert!(
            !logged.contains(secret),
            "the log holds `{secret}`:\n{logged}"
        );
    }
}

#[test]
fn readyz_answers_503_naming_redis_when_redis_does_not_answer() {
    let rig = Rig::new();
    let names = Names {
        stream: unique("arrival-readyz"),
        group: "inbox".into(),
    };
    let (mut child, addr) = serve_with(
        rig.dir.path(),
        &names,
        "redis://127.0.0.1:1",
        &["--consumers", "0"],
    );
    let (status, text) = get(addr, "/readyz");
    let health = get(addr, "/healthz");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 503, "{text}");
    assert!(text.starts_with("not ready: redis: "), "{text}");
    assert_eq!(health, (200, "ok\n".to_owned()));
}
