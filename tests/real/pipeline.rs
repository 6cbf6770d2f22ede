//! The real pipeline against a real Redis (`ARRIVAL_REDIS_URL`, default the local one) and
//! real SQLite files in temporary folders. Each test uses its own stream keys and files and
//! removes them. Without a reachable Redis the tests fail and say what to install.

use crate::util::{temp_dir, ARRIVAL};
use arrival::pipeline::client::Client;
use arrival::pipeline::drill::{self, DrillOptions};
use arrival::pipeline::run::unique;
use arrival::pipeline::store;
use arrival::pipeline::stream::{self, Names};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The Redis the tests use; fails, saying what to start, when none answers.
pub fn redis_url() -> String {
    let url =
        std::env::var("ARRIVAL_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let reachable = stream::connect(&url, Duration::from_secs(2))
        .and_then(|mut conn| redis::cmd("PING").query::<String>(&mut conn))
        .is_ok();
    assert!(
        reachable,
        "no Redis at {url}: install redis-server (apt-get install redis-server) and start it, \
         set ARRIVAL_REDIS_URL, or run .ci/test (which starts a private one)"
    );
    url
}

pub fn options(requests: usize, kills: usize) -> DrillOptions {
    DrillOptions {
        redis_url: redis_url(),
        requests,
        kills,
        consumers: 2,
        count: 4,
        seed: 7,
        mutant: None,
        exe: Some(ARRIVAL.into()),
        down_requests: None,
        scratch_db: None,
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn failures(report: &drill::DrillReport) -> Vec<String> {
    report
        .checks
        .iter()
        .filter(|check| !check.holds)
        .map(|check| format!("{}: {}", check.name, check.detail))
        .collect()
}

#[test]
fn the_acceptance_fixture_reproduces_its_table_against_real_redis() {
    let url = redis_url();
    let output = Command::new(ARRIVAL)
        .args(["pipeline", "run", "fixtures/acmeflow-wf14.json"])
        .env("ARRIVAL_REDIS_URL", &url)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in [
        "202 accepted",
        "400 bad_signature",
        "400 tenant_not_allowed",
        "400 material_version_mismatch",
        "facts:        contracts/SIG-014, finance/PAY-014",
        "deliveries:   2 duplicate",
        "=READY",
        "pending:      0",
        "expect:       holds",
    ] {
        assert!(text.contains(line), "missing `{line}` in:\n{text}");
    }
}

#[test]
fn twenty_consumer_kills_lose_nothing_and_match_the_model() {
    let report = runtime().block_on(drill::kill(&options(60, 20))).unwrap();
    assert!(report.passed, "{:#?}", failures(&report));
    assert!(report.kills.values().sum::<usize>() >= 20);
}

#[test]
fn ack_before_commit_loses_entries_in_the_kill_drill() {
    let mut options = options(60, 20);
    options.mutant = Some("ack-before-commit".parse().unwrap());
    let report = runtime().block_on(drill::kill(&options)).unwrap();
    assert!(!report.passed, "the drill must catch the wrong build");
    let settled = report
        .checks
        .iter()
        .find(|check| check.name == "every-202-settled-once")
        .unwrap();
    assert!(!settled.holds, "{}", settled.detail);
}

#[test]
fn redis_down_answers_503_never_202_and_loses_nothing() {
    let mut options = options(60, 0);
    options.down_requests = Some(40);
    let report = runtime().block_on(drill::redis_down(&options)).unwrap();
    assert!(report.passed, "{:#?}", failures(&report));
    assert!(report.answers.get("503 unavailable").copied().unwrap_or(0) >= 30);
}

#[test]
fn twelve_consumer_process_kills_of_every_kind_lose_nothing_and_match_the_model() {
    let report = runtime()
        .block_on(drill::process_kill(&options(60, 12)))
        .unwrap();
    assert!(report.passed, "{:#?}", failures(&report));
    assert_eq!(
        report.kills.values().sum::<usize>(),
        12,
        "{:?}",
        report.kills
    );
    for kind in ["before_commit", "after_commit", "mid_batch", "external"] {
        assert!(
            report.kills.get(kind).copied().unwrap_or(0) >= 1,
            "no {kind} kill: {:?}",
            report.kills
        );
    }
    assert!(report.consumer_starts >= 12 + 2);
}

#[test]
fn ack_before_commit_loses_entries_when_consumer_processes_die() {
    let mut options = options(60, 12);
    options.mutant = Some("ack-before-commit".parse().unwrap());
    let report = runtime().block_on(drill::process_kill(&options)).unwrap();
    assert!(!report.passed, "the drill must catch the wrong build");
    for name in ["every-202-settled-once", "acked-only-after-commit"] {
        let check = report
            .checks
            .iter()
            .find(|check| check.name == name)
            .unwrap();
        assert!(!check.holds, "{name}: {}", check.detail);
    }
}

#[test]
fn a_commit_failing_on_a_full_disk_keeps_its_entries_pending_until_a_retry_commits_them() {
    let report = runtime()
        .block_on(drill::commit_fails(&options(45, 0)))
        .unwrap();
    assert!(report.passed, "{:#?}", failures(&report));
    for name in [
        "full-disk-nothing-acknowledged",
        "commit-failed-then-same-process-committed",
        "every-202-settled-once",
        "facts-equal-model",
    ] {
        assert!(
            report.checks.iter().any(|check| check.name == name),
            "{name} was not checked: {:#?}",
            report.checks
        );
    }
}

#[test]
fn a_locked_inbox_leaves_entries_pending_and_unacknowledged() {
    let report = runtime()
        .block_on(drill::db_locked(&options(30, 0)))
        .unwrap();
    assert!(report.passed, "{:#?}", failures(&report));
}

#[test]
fn a_poison_entry_is_dead_lettered_and_the_rest_flows() {
    let report = runtime().block_on(drill::poison(&options(40, 0))).unwrap();
    assert!(report.passed, "{:#?}", failures(&report));
}

/// Writes `DIR/keys.json` with the drill's keys.
pub fn write_drill_keys(dir: &Path) {
    std::fs::write(
        dir.join("keys.json"),
        format!(
            r#"{{"finance":["{}"],"contracts":["{}"]}}"#,
            drill::KEY_FINANCE,
            drill::KEY_CONTRACTS
        ),
    )
    .unwrap();
}

/// Starts `arrival pipeline serve` as a child (one consumer, batches of one, takeover after
/// 200 ms) and returns it with its address.
fn serve(dir: &Path, names: &Names, url: &str) -> (std::process::Child, std::net::SocketAddr) {
    serve_with(
        dir,
        names,
        url,
        &["--consumers", "1", "--count", "1", "--min-idle-ms", "200"],
    )
}

/// Starts `arrival pipeline serve` on `DIR/inbox.db` and `DIR/keys.json` with `options`, as
/// a child, and returns it with its address.
pub fn serve_with(
    dir: &Path,
    names: &Names,
    url: &str,
    options: &[&str],
) -> (std::process::Child, std::net::SocketAddr) {
    let db = dir.join("inbox.db");
    serve_on_db(db.to_str().unwrap(), dir, names, url, options)
}

/// Starts `arrival pipeline serve` on the inbox `db` (a file or a PostgreSQL URL) and
/// `DIR/keys.json` with `options`, as a child, and returns it with its address.
pub fn serve_on_db(
    db: &str,
    dir: &Path,
    names: &Names,
    url: &str,
    options: &[&str],
) -> (std::process::Child, std::net::SocketAddr) {
    let mut child = Command::new(ARRIVAL)
        .args(["pipeline", "serve", "--listen", "127.0.0.1:0", "--db", db])
        .arg("--keys")
        .arg(dir.join("keys.json"))
        .args(["--stream", &names.stream, "--group", &names.group])
        .args(options)
        .env("ARRIVAL_REDIS_URL", url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().trim_start_matches("listening ").parse();
    (
        child,
        addr.unwrap_or_else(|_| panic!("serve printed {line:?}")),
    )
}

#[test]
fn serve_survives_a_sigkill_and_stops_cleanly_on_sigterm() {
    let url = redis_url();
    let dir = temp_dir("pipeline");
    let now = store::now_ms() / 1000;
    let (apps, requests) = drill::requests(11, 40, now);
    let conn = store::open(&dir.path().join("inbox.db").to_path_buf().into(), 5_000).unwrap();
    store::put_applications(&conn, &apps).unwrap();
    write_drill_keys(dir.path());
    let names = Names {
        stream: unique("arrival-test"),
        group: "inbox".into(),
    };
    let (mut child, addr) = serve(dir.path(), &names, &url);
    let rt = runtime();
    let mut accepted = Vec::new();
    let mut client = Client::new(addr);
    for request in &requests[..20] {
        let reply = rt
            .block_on(client.post(
                request.source.as_deref(),
                request.signature.as_deref(),
                &request.body,
            ))
            .unwrap();
        accepted.extend(reply.entry);
    }
    child.kill().unwrap(); // SIGKILL, wherever the consumer is
    child.wait().unwrap();
    let (mut child, addr) = serve(dir.path(), &names, &url);
    let mut client = Client::new(addr);
    for request in &requests[20..] {
        let reply = rt
            .block_on(client.post(
                request.source.as_deref(),
                request.signature.as_deref(),
                &request.body,
            ))
            .unwrap();
        accepted.extend(reply.entry);
    }
    let mut redis = stream::connect(&url, Duration::from_secs(2)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let done = store::verdict_count(&conn).unwrap() >= accepted.len()
            && stream::pending_count(&mut redis, &names).unwrap() == 0;
        if done || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "SIGTERM must stop serve with exit 0, got {status}"
    );
    let snapshot = store::snapshot(&conn).unwrap();
    let missing: Vec<&String> = accepted
        .iter()
        .filter(|id| !snapshot.verdicts.contains_key(*id))
        .collect();
    assert!(missing.is_empty(), "202 without a verdict: {missing:?}");
    assert_eq!(stream::pending_count(&mut redis, &names).unwrap(), 0);
    let oracle = drill::model(&apps, &requests, 3);
    assert_eq!(snapshot.facts.len(), oracle.inbox.fact_count());
    assert_eq!(&snapshot.ready, oracle.inbox.ready_marks());
    assert_eq!(store::integrity(&conn).unwrap(), "ok");
    stream::delete_keys(&mut redis, &names).unwrap();
}

#[test]
fn a_missing_keys_file_is_bad_input() {
    let output = Command::new(ARRIVAL)
        .args([
            "pipeline",
            "serve",
            "--db",
            "/nonexistent/x.db",
            "--keys",
            "/nonexistent/keys.json",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent/keys.json"), "{stderr}");
}

#[test]
fn a_missing_inbox_is_bad_input_and_is_not_created() {
    // Only `pipeline init` creates an inbox: a mistyped --db must not become a new, empty
    // one with no applications (every fact would then wait for ever).
    let dir = temp_dir("missing-inbox");
    let keys = dir.path().join("keys.json");
    std::fs::write(&keys, r#"{"finance":["finance-test-key-0000000001"],"contracts":["contracts-test-key-000000001"]}"#).unwrap();
    let missing = dir.path().join("typo.db");
    let db = missing.to_str().unwrap();
    let keys = keys.to_str().unwrap();
    for args in [
        vec!["pipeline", "serve", "--db", db, "--keys", keys],
        vec!["pipeline", "status", "--db", db],
        vec![
            "pipeline",
            "upgrade",
            "--db",
            db,
            "--tenant",
            "t",
            "--application",
            "a",
            "--material-version",
            "2",
        ],
    ] {
        let output = Command::new(ARRIVAL)
            .args(&args)
            .env_remove("ARRIVAL_DB")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("no inbox at") && stderr.contains("arrival pipeline init"),
            "{args:?}: {stderr}"
        );
        assert!(!missing.exists(), "{args:?} created {db}");
    }
    // A file that is there but is no inbox (empty, say) is refused too, and left as it was.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let output = Command::new(ARRIVAL)
        .args(["pipeline", "status", "--db", empty.to_str().unwrap()])
        .env_remove("ARRIVAL_DB")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is not an arrival inbox"), "{stderr}");
    assert_eq!(
        std::fs::metadata(&empty).unwrap().len(),
        0,
        "left as it was"
    );
    // A zero body timeout is refused by the command line.
    let output = Command::new(ARRIVAL)
        .args(["pipeline", "serve", "--db", db, "--keys", keys])
        .args(["--body-timeout-ms", "0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--body-timeout-ms"));
}

#[test]
fn an_entry_deleted_while_pending_is_dead_lettered_not_retried_for_ever() {
    // Redis 7.0 answers `[id, nil]` for a pending entry whose entry was deleted, and does not
    // count its deliveries up: a consumer that waited for max_deliveries would spin on it.
    let url = redis_url();
    let dir = temp_dir("pipeline");
    write_drill_keys(dir.path());
    store::open(&dir.path().join("inbox.db").to_path_buf().into(), 5_000).unwrap();
    let names = Names {
        stream: unique("arrival-test"),
        group: "inbox".into(),
    };
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut raw = client.get_connection().unwrap();
    let _: redis::Value = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&names.stream)
        .arg(&names.group)
        .arg("0")
        .arg("MKSTREAM")
        .query(&mut raw)
        .unwrap();
    let id: String = redis::cmd("XADD")
        .arg(&names.stream)
        .arg("*")
        .arg("source")
        .arg("finance")
        .arg("body")
        .arg("{}")
        .query(&mut raw)
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(&names.group)
        .arg("consumer-1")
        .arg("STREAMS")
        .arg(&names.stream)
        .arg(">")
        .query(&mut raw)
        .unwrap();
    let _: i64 = redis::cmd("XDEL")
        .arg(&names.stream)
        .arg(&id)
        .query(&mut raw)
        .unwrap();
    let (mut child, _) = serve(dir.path(), &names, &url);
    let mut redis = stream::connect(&url, Duration::from_secs(2)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while stream::pending_count(&mut redis, &names).unwrap() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let pending = stream::pending_count(&mut redis, &names).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let dead = stream::range_all(&mut redis, &names.dead_letter()).unwrap();
    stream::delete_keys(&mut redis, &names).unwrap();
    assert_eq!(pending, 0, "the deleted entry stays pending");
    assert_eq!(dead.len(), 1, "dead-lettered once: {dead:?}");
    assert_eq!(dead[0].field("entry"), Some(id.as_bytes()));
}

#[test]
fn a_body_that_stalls_is_answered_408_and_nothing_enters_the_stream() {
    use std::io::{Read, Write};
    let url = redis_url();
    let dir = temp_dir("pipeline");
    store::open(&dir.path().join("inbox.db").to_path_buf().into(), 5_000).unwrap();
    write_drill_keys(dir.path());
    let names = Names {
        stream: unique("arrival-test"),
        group: "inbox".into(),
    };
    let (mut child, addr) = serve_with(
        dir.path(),
        &names,
        &url,
        &["--consumers", "0", "--body-timeout-ms", "300"],
    );
    // Headers promise 100 bytes; 10 arrive, then the sender stalls.
    let mut socket = std::net::TcpStream::connect(addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    socket
        .write_all(
            b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nx-acme-source: finance\r\n\
              x-acme-signature: sha256=00\r\ncontent-type: application/json\r\n\
              content-length: 100\r\n\r\n{\"event_id",
        )
        .unwrap();
    let mut reply = Vec::new();
    let mut chunk = [0u8; 512];
    while !String::from_utf8_lossy(&reply).contains("body_timeout") {
        let read = socket
            .read(&mut chunk)
            .expect("an answer before the read timeout");
        assert!(
            read > 0,
            "closed without an answer: {:?}",
            String::from_utf8_lossy(&reply)
        );
        reply.extend_from_slice(&chunk[..read]);
    }
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    let mut redis = stream::connect(&url, Duration::from_secs(2)).unwrap();
    let entries: usize = redis::cmd("XLEN")
        .arg(&names.stream)
        .query(&mut redis)
        .unwrap();
    assert_eq!(
        entries, 0,
        "a timed-out request must add nothing to the stream"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    stream::delete_keys(&mut redis, &names).unwrap();
}

/// A variant of a payment kept as evidence, then re-sent re-signed a minute later: the
/// pipeline's inbox must find the kept variant and call the re-send a duplicate, as the
/// model does (it used to read only the first fact and open the conflict again).
#[test]
fn a_re_sent_variant_is_a_duplicate_in_the_pipeline_as_in_the_model() {
    let output = Command::new(ARRIVAL)
        .args(["pipeline", "run", "tests/inputs/facts-variant-resend.json"])
        .env("ARRIVAL_REDIS_URL", redis_url())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !text.contains("the model has"),
        "pipeline and model differ:\n{text}"
    );
    assert!(
        text.contains("1 duplicate"),
        "the re-send is a duplicate:\n{text}"
    );
}

/// `pipeline consume` runs consumers and no ingress: `--consumers 2` gives two consumers
/// named `<host>-<pid>-1` and `-2` (as `serve` names its own), which decide what another
/// process appended; SIGTERM stops it with exit 0 and its idle consumers leave the group.
#[test]
fn a_consume_process_names_its_consumers_after_its_pid_and_stops_on_sigterm() {
    let url = redis_url();
    let dir = temp_dir("pipeline");
    let now = store::now_ms() / 1000;
    let (apps, requests) = drill::requests(3, 8, now);
    let conn = {
        let conn = store::open(&dir.path().join("inbox.db").into(), 5_000).unwrap();
        store::put_applications(&conn, &apps).unwrap();
        conn
    };
    write_drill_keys(dir.path());
    let names = Names {
        stream: unique("arrival-test"),
        group: "inbox".into(),
    };
    let (mut ingress, addr) = serve_with(dir.path(), &names, &url, &["--consumers", "0"]);
    let mut consume = Command::new(ARRIVAL)
        .args(["pipeline", "consume", "--consumers", "2", "--db"])
        .arg(dir.path().join("inbox.db"))
        .args(["--stream", &names.stream, "--group", &names.group])
        .env("ARRIVAL_REDIS_URL", &url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(consume.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pid = consume.id();
    let said: Vec<&str> = line.split_whitespace().collect();
    let rt = runtime();
    let mut accepted = 0;
    for request in &requests {
        let reply = rt
            .block_on(Client::new(addr).post(
                request.source.as_deref(),
                request.signature.as_deref(),
                &request.body,
            ))
            .unwrap();
        accepted += usize::from(reply.entry.is_some());
    }
    let mut redis = stream::connect(&url, Duration::from_secs(2)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while store::verdict_count(&conn).unwrap() < accepted && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let consumers = stream::consumer_names(&mut redis, &names).unwrap();
    let mut stopped = Vec::new();
    for child in [&mut consume, &mut ingress] {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        stopped.push(child.wait().unwrap().success());
    }
    let left = stream::consumer_names(&mut redis, &names).unwrap();
    stream::delete_keys(&mut redis, &names).unwrap();
    assert_eq!(said.first(), Some(&"consumers"), "{line}");
    for index in [1, 2] {
        let suffix = format!("-{pid}-{index}");
        assert!(
            said.iter().any(|name| name.ends_with(&suffix)),
            "consumer {index} is named after the pid {pid}: {line}"
        );
    }
    assert!(accepted > 0);
    assert_eq!(store::verdict_count(&conn).unwrap(), accepted);
    assert!(
        consumers.iter().all(|name| said.contains(&name.as_str())),
        "only the consume process's consumers read: {consumers:?}, said {line}"
    );
    assert_eq!(stopped, [true, true], "SIGTERM stops each with exit 0");
    assert!(left.is_empty(), "idle consumers leave the group: {left:?}");
}

/// Two `serve` processes share one group: their consumers must be two consumers to Redis,
/// not one name read by both (each process names its own `<host>-<pid>-<n>`). A graceful
/// stop removes a consumer that holds nothing, so names do not pile up in the group.
#[test]
fn two_serve_processes_on_one_group_read_as_distinct_consumers() {
    let url = redis_url();
    let dir = temp_dir("pipeline");
    let now = store::now_ms() / 1000;
    let (apps, requests) = drill::requests(5, 12, now);
    let conn = {
        let conn = store::open(&dir.path().join("inbox.db").to_path_buf().into(), 5_000).unwrap();
        store::put_applications(&conn, &apps).unwrap();
        conn
    };
    write_drill_keys(dir.path());
    let names = Names {
        stream: unique("arrival-test"),
        group: "inbox".into(),
    };
    let one = ["--consumers", "1", "--count", "4"];
    let (mut first, first_addr) = serve_with(dir.path(), &names, &url, &one);
    let (mut second, second_addr) = serve_with(dir.path(), &names, &url, &one);
    let rt = runtime();
    let mut accepted = 0;
    for (index, request) in requests.iter().enumerate() {
        let addr = if index % 2 == 0 {
            first_addr
        } else {
            second_addr
        };
        let reply = rt
            .block_on(Client::new(addr).post(
                request.source.as_deref(),
                request.signature.as_deref(),
                &request.body,
            ))
            .unwrap();
        accepted += usize::from(reply.entry.is_some());
    }
    let mut redis = stream::connect(&url, Duration::from_secs(2)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while store::verdict_count(&conn).unwrap() < accepted && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let consumers = stream::consumer_names(&mut redis, &names).unwrap();
    let mut stopped = Vec::new();
    for child in [&mut first, &mut second] {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        stopped.push(child.wait().unwrap().success());
    }
    let left = stream::consumer_names(&mut redis, &names).unwrap();
    let pending = stream::pending_count(&mut redis, &names).unwrap();
    stream::delete_keys(&mut redis, &names).unwrap();
    assert!(accepted > 0);
    assert_eq!(store::verdict_count(&conn).unwrap(), accepted);
    assert_eq!(
        consumers.len(),
        2,
        "two processes, two consumers: {consumers:?}"
    );
    for (child, pid) in [("first", first.id()), ("second", second.id())] {
        assert!(
            consumers
                .iter()
                .any(|name| name.ends_with(&format!("-{pid}-1"))),
            "the {child} serve's consumer is named after its pid {pid}: {consumers:?}"
        );
    }
    assert_eq!(
        stopped,
        [true, true],
        "SIGTERM stops each serve with exit 0"
    );
    assert_eq!(pending, 0);
    assert!(
        left.is_empty(),
        "idle consumers leave the group on a graceful stop: {left:?}"
    );
}

#[test]
fn every_answer_leaves_a_receipt_and_no_receipt_holds_a_body_or_a_secret() {
    let url = redis_url();
    let dir = temp_dir("receipts");
    let now = store::now_ms() / 1000;
    let (apps, requests) = drill::requests(5, 6, now);
    let conn = store::open(&dir.path().join("inbox.db").to_path_buf().into(), 5_000).unwrap();
    store::put_applications(&conn, &apps).unwrap();
    write_drill_keys(dir.path());
    let names = Names {
        stream: unique("arrival-receipts"),
        group: "inbox".into(),
    };
    let (mut child, addr) = serve_with(
        dir.path(),
        &names,
        &url,
        &["--consumers", "1", "--max-body-bytes", "4096"],
    );
    let rt = runtime();
    let mut client = Client::new(addr);
    let good = &requests[0];
    let post = |client: &mut Client, signature: Option<&str>, body: &[u8]| {
        rt.block_on(client.post(good.source.as_deref(), signature, body))
            .unwrap()
    };
    let accepted = post(&mut client, good.signature.as_deref(), &good.body);
    assert_eq!(accepted.status, 202);
    assert_eq!(
        post(&mut client, Some(&"0".repeat(64)), &good.body).status,
        400
    );
    assert_eq!(
        post(&mut client, good.signature.as_deref(), &[b' '; 5000]).status,
        413
    );
    // A new connection (the 413 was answered without reading its body), and a source header
    // of 20,000 bytes from a sender with no signature.
    let long_source = "f".repeat(20_000);
    let mut client = Client::new(addr);
    let unsigned = rt
        .block_on(client.post(Some(&long_source), None, &good.body))
        .unwrap();
    assert_eq!(unsigned.status, 400, "{}", unsigned.body);
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    assert!(child.wait().unwrap().success());
    let output = Command::new(ARRIVAL)
        .args(["pipeline", "receipts", "--json", "--db"])
        .arg(dir.path().join("inbox.db"))
        .env_remove("ARRIVAL_DB")
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    let receipts: serde_json::Value = serde_json::from_str(&text).unwrap();
    let answers: Vec<(u64, &str, bool, bool)> = receipts
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["status"].as_u64().unwrap(),
                r["reason"].as_str().unwrap(),
                r["key_id"].is_string(),
                r["entry"].is_string(),
            )
        })
        .collect();
    assert_eq!(
        answers,
        [
            (202, "accepted", true, true),
            (400, "bad_signature", false, false),
            (413, "body_too_large", false, false),
            (400, "bad_signature", false, false)
        ]
    );
    let kept = receipts[3]["source"].as_str().unwrap();
    assert!(
        kept.len() < 200 && kept.ends_with("(20000 bytes)"),
        "{kept}"
    );
    let event = String::from_utf8_lossy(&good.body);
    let event_id = serde_json::from_str::<serde_json::Value>(&event).unwrap()["event_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(receipts[0]["event_id"], event_id.as_str());
    assert_eq!(receipts[0]["entry"].as_str(), accepted.entry.as_deref());
    assert!(!text.contains(drill::KEY_FINANCE) && !text.contains(drill::KEY_CONTRACTS));
    assert!(!text.contains(&*event), "a receipt never holds the body");
    let mut redis = stream::connect(&url, Duration::from_secs(2)).unwrap();
    stream::delete_keys(&mut redis, &names).unwrap();
}

#[test]
fn retention_trims_only_what_every_group_acknowledged_and_the_period_has_passed() {
    let url = redis_url();
    let mut conn = stream::connect(&url, Duration::from_secs(2)).unwrap();
    let names = Names {
        stream: unique("arrival-retention"),
        group: "inbox".into(),
    };
    stream::ensure_group(&mut conn, &names).unwrap();
    for ms in [1000, 2000, 3000, 4000, 5000] {
        let _: String = redis::cmd("XADD")
            .arg(&names.stream)
            .arg(format!("{ms}-0"))
            .arg("body")
            .arg("x")
            .query(&mut conn)
            .unwrap();
    }
    let read = stream::read_group(&mut conn, &names, "c1", ">", 3, None).unwrap();
    assert_eq!(read.len(), 3);
    stream::ack(&mut conn, &names, &["1000-0".into(), "3000-0".into()]).unwrap();
    let trim = |conn: &mut redis::Connection, retention_ms: i64, now_ms: i64| {
        stream::trim_acknowledged(conn, &names.stream, retention_ms, now_ms).unwrap()
    };
    // 2000-0 is pending: only 1000-0 is acknowledged by the group.
    assert_eq!(trim(&mut conn, 0, 10_000), (Some("2000-0".into()), 1));
    stream::ack(&mut conn, &names, &["2000-0".into()]).unwrap();
    // Everything up to the last delivered (3000-0) is acknowledged, but the retention
    // period (2.5 s at 5 s) keeps what is younger than 2500.
    assert_eq!(trim(&mut conn, 2_500, 5_000), (Some("2500-0".into()), 1));
    assert_eq!(trim(&mut conn, 0, 10_000), (Some("3000-1".into()), 1));
    // A second group that has read nothing holds every entry left.
    let other = Names {
        stream: names.stream.clone(),
        group: "audit".into(),
    };
    stream::ensure_group(&mut conn, &other).unwrap();
    assert_eq!(trim(&mut conn, 0, 10_000), (Some("0-1".into()), 0));
    let left: Vec<String> = stream::range_all(&mut conn, &names.stream)
        .unwrap()
        .into_iter()
        .map(|entry| entry.id)
        .collect();
    assert_eq!(left, ["4000-0", "5000-0"]);
    let output = Command::new(ARRIVAL)
        .args([
            "pipeline",
            "trim",
            "--retention-seconds",
            "0",
            "--stream",
            &names.stream,
        ])
        .env("ARRIVAL_REDIS_URL", &url)
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "trimmed 0 entries before 0-1\n"
    );
    stream::delete_keys(&mut conn, &names).unwrap();
}

#[test]
fn dead_letters_and_receipts_are_trimmed_by_their_own_periods_and_only_when_asked() {
    let url = redis_url();
    let dir = temp_dir("retention-own");
    let db = dir.path().join("inbox.db");
    let conn = store::open(&db.to_path_buf().into(), 5_000).unwrap();
    let now = store::now_ms();
    for at in [1_000, now] {
        conn.exec(
            "INSERT INTO receipts (at_ms, status, reason) VALUES (?1, 400, 'bad_signature')",
            arrival::args![at],
        )
        .unwrap();
    }
    let names = Names {
        stream: unique("arrival-retention"),
        group: "inbox".into(),
    };
    let mut redis = stream::connect(&url, Duration::from_secs(2)).unwrap();
    for id in ["1000-0", "*"] {
        let _: String = redis::cmd("XADD")
            .arg(names.dead_letter())
            .arg(id)
            .arg("entry")
            .arg("x")
            .query(&mut redis)
            .unwrap();
    }
    let trim = |extra: &[&str]| {
        Command::new(ARRIVAL)
            .args(["pipeline", "trim", "--stream", &names.stream])
            .args(extra)
            .env("ARRIVAL_REDIS_URL", &url)
            .env_remove("ARRIVAL_DB")
            .output()
            .unwrap()
    };
    let plain = trim(&[]);
    assert!(plain.status.success());
    let dead = stream::range_all(&mut redis, &names.dead_letter()).unwrap();
    assert_eq!(
        dead.len(),
        2,
        "dead letters are kept unless a period is given"
    );
    let output = trim(&[
        "--dead-letter-retention-seconds",
        "60",
        "--receipts-retention-seconds",
        "60",
        "--db",
        db.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("trimmed 1 dead letters") && text.contains("deleted 1 receipts"));
    let dead = stream::range_all(&mut redis, &names.dead_letter()).unwrap();
    assert_eq!(dead.len(), 1);
    assert_ne!(
        dead[0].id, "1000-0",
        "the old letter went, the new one stayed"
    );
    let left = conn.rows("SELECT at_ms FROM receipts", &[]).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].int(0).unwrap(), now);
    stream::delete_keys(&mut redis, &names).unwrap();
}

#[test]
fn serve_wrong_runs_the_named_wrong_pipeline_and_says_so_while_serve_refuses_it() {
    let url = redis_url();
    let dir = temp_dir("serve-wrong");
    let now = store::now_ms() / 1000;
    // Signed right, sent an hour ago: outside the freshness window.
    let (apps, requests) = arrival::pipeline::load::load_requests(6, now - 3600);
    let conn = store::open(&dir.path().join("inbox.db").into(), 5_000).unwrap();
    store::put_applications(&conn, &apps).unwrap();
    write_drill_keys(dir.path());
    let names = Names {
        stream: unique("arrival-wrong"),
        group: "inbox".into(),
    };
    let db = dir.path().join("inbox.db");
    let start = |command: &str, extra: &[&str]| {
        Command::new(ARRIVAL)
            .args(["pipeline", command, "--listen", "127.0.0.1:0", "--db"])
            .arg(&db)
            .arg("--keys")
            .arg(dir.path().join("keys.json"))
            .args(["--stream", &names.stream, "--group", &names.group])
            .args(extra)
            .env("ARRIVAL_REDIS_URL", &url)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    for (command, extra) in [
        ("serve", vec!["--mutant", "accept-stale-signature"]),
        ("serve-wrong", vec![]),
    ] {
        let output = start(command, &extra).wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{command} {extra:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("--mutant"));
    }
    let post = |extra: &[&str], command: &str| {
        let mut child = start(command, extra);
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .trim_start_matches("listening ")
            .parse()
            .unwrap();
        let r = &requests[0];
        let reply = runtime()
            .block_on(Client::new(addr).post(r.source.as_deref(), r.signature.as_deref(), &r.body))
            .unwrap();
        child.kill().unwrap();
        let output = child.wait_with_output().unwrap();
        (
            reply.status,
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (right, _) = post(&[], "serve");
    let (wrong, said) = post(&["--mutant", "accept-stale-signature"], "serve-wrong");
    let mut redis = stream::connect(&url, Duration::from_secs(2)).unwrap();
    stream::delete_keys(&mut redis, &names).unwrap();
    assert_eq!(right, 400, "the contract refuses a stale request");
    assert_eq!(wrong, 202, "the wrong pipeline takes it");
    assert!(
        said.contains("WRONG pipeline `accept-stale-signature`"),
        "{said}"
    );
}

#[test]
fn requests_refused_before_the_handler_judges_them_each_leave_a_receipt() {
    use std::io::{Read, Write};
    let url = redis_url();
    let dir = temp_dir("malformed-head");
    store::open(&dir.path().join("inbox.db").into(), 5_000).unwrap();
    write_drill_keys(dir.path());
    let names = Names {
        stream: unique("arrival-head"),
        group: "inbox".into(),
    };
    let (mut child, addr) = serve(dir.path(), &names, &url);
    let send = |bytes: &[u8], shut: bool| {
        let mut socket = std::net::TcpStream::connect(addr).unwrap();
        socket.write_all(bytes).unwrap();
        if shut {
            socket.shutdown(std::net::Shutdown::Write).unwrap();
        }
        let mut answer = String::new();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let _ = socket.read_to_string(&mut answer);
        answer
    };
    let answers = [
        send(b"NOT A REQUEST LINE\r\n\r\n", false),
        send(
            b"POST /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            false,
        ),
        send(
            b"GET /webhook HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            false,
        ),
        // A body that breaks off: not a body over the limit.
        send(
            b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\"",
            true,
        ),
    ];
    std::thread::sleep(Duration::from_millis(300)); // the receipts writer's batch
    child.kill().unwrap();
    child.wait().unwrap();
    let conn = store::open(&dir.path().join("inbox.db").into(), 5_000).unwrap();
    let rows: Vec<(i64, String)> = conn
        .rows("SELECT status, reason FROM receipts ORDER BY seq", &[])
        .unwrap()
        .iter()
        .map(|row| (row.int(0).unwrap(), row.text(1).unwrap()))
        .collect();
    let mut redis = stream::connect(&url, Duration::from_secs(2)).unwrap();
    stream::delete_keys(&mut redis, &names).unwrap();
    for (answer, status) in answers.iter().zip(["400", "404", "405"]) {
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{answer:?}"
        );
    }
    let expected = [
        (400, "malformed_request_head"),
        (404, "no_such_route"),
        (405, "method_not_allowed"),
        (400, "body_unreadable"),
    ];
    let expected: Vec<(i64, String)> = expected.iter().map(|(s, r)| (*s, r.to_string())).collect();
    assert_eq!(rows, expected);
    let negative = Command::new(ARRIVAL)
        .args(["pipeline", "trim", "--retention-seconds=-5"])
        .output()
        .unwrap();
    assert_eq!(
        negative.status.code(),
        Some(2),
        "a negative period is bad input"
    );
}
