//! The facts pipeline's inbox on PostgreSQL, each test on a database of its own: every facts
//! fixture played step by step as on SQLite, and three `serve` processes sharing one
//! consumer group and one database under load, ending in the model's terminal state.

use crate::operator::FIXTURES;
use crate::pg::PgDatabase;
use crate::pipeline::{redis_url, runtime, serve_on_db, write_drill_keys};
use crate::util::{root, stderr, stdout, temp_dir, ARRIVAL};
use arrival::facts::application::AppKey;
use arrival::facts::envelope::Source;
use arrival::pipeline::client::Client;
use arrival::pipeline::drill;
use arrival::pipeline::run::unique;
use arrival::pipeline::sql::InboxAt;
use arrival::pipeline::store;
use arrival::pipeline::stream::{self, Names};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

#[test]
fn every_facts_fixture_reproduces_its_expect_on_a_postgresql_inbox() {
    let url = redis_url();
    let mut failed = Vec::new();
    for fixture in FIXTURES {
        let database = PgDatabase::new();
        let output = Command::new(ARRIVAL)
            .args(["pipeline", "run", fixture, "--db", &database.url])
            .env("ARRIVAL_REDIS_URL", &url)
            .current_dir(root())
            .output()
            .unwrap();
        let text = stdout(&output);
        if !output.status.success()
            || !text.contains("expect:       holds")
            || !text.contains("PostgreSQL inbox")
        {
            failed.push(format!("{fixture}:\n{text}\n{}", stderr(&output)));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// `arrival pipeline serve` on the PostgreSQL inbox `db`, as a child, with its address.
fn serve_on(db: &str, dir: &std::path::Path, names: &Names, url: &str) -> (Child, SocketAddr) {
    let options = ["--consumers", "1", "--count", "4", "--min-idle-ms", "500"];
    serve_on_db(db, dir, names, url, &options)
}

#[test]
fn three_serve_processes_on_one_postgresql_inbox_end_in_the_model_s_terminal_state() {
    let url = redis_url();
    let database = PgDatabase::new();
    let dir = temp_dir("pg-three");
    let now = store::now_ms() / 1000;
    let (apps, requests) = drill::requests(23, 90, now);
    let at = InboxAt::Postgres(database.url.clone());
    let conn = store::open(&at, 5_000).unwrap();
    store::put_applications(&conn, &apps).unwrap();
    write_drill_keys(dir.path());
    let names = Names {
        stream: unique("arrival-pg"),
        group: "inbox".into(),
    };
    let mut servers: Vec<(Child, SocketAddr)> = (0..3)
        .map(|_| serve_on(&database.url, dir.path(), &names, &url))
        .collect();
    // Three senders at once, one per process: each request goes to one ingress, and
    // every consumer of the group may take any entry.
    let rt = runtime();
    let addrs: Vec<SocketAddr> = servers.iter().map(|(_, addr)| *addr).collect();
    let accepted: Vec<String> = rt.block_on(async {
        let sends = (0..3).map(|k| {
            let mut client = Client::new(addrs[k]);
            let mine: Vec<_> = requests.iter().skip(k).step_by(3).cloned().collect();
            tokio::spawn(async move {
                let mut entries = Vec::new();
                for request in &mine {
                    let reply = client
                        .post(
                            request.source.as_deref(),
                            request.signature.as_deref(),
                            &request.body,
                        )
                        .await
                        .unwrap();
                    entries.extend(reply.entry);
                }
                entries
            })
        });
        let mut all = Vec::new();
        for send in sends.collect::<Vec<_>>() {
            all.extend(send.await.unwrap());
        }
        all
    });
    let mut redis = stream::connect(&url, Duration::from_secs(2)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(store::verdict_count(&conn).unwrap() >= accepted.len()
        && stream::pending_count(&mut redis, &names).unwrap() == 0)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let consumers = stream::consumer_names(&mut redis, &names).unwrap();
    for (child, _) in &mut servers {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        assert!(
            child.wait().unwrap().success(),
            "SIGTERM stops serve with 0"
        );
    }
    let pending = stream::pending_count(&mut redis, &names).unwrap();
    stream::delete_keys(&mut redis, &names).unwrap();
    let snapshot = store::snapshot(&conn).unwrap();
    let oracle = drill::model(&apps, &requests, 3);
    assert_eq!(
        consumers.len(),
        3,
        "one consumer per process: {consumers:?}"
    );
    assert_eq!(pending, 0);
    let missing: Vec<&String> = accepted
        .iter()
        .filter(|id| !snapshot.verdicts.contains_key(*id))
        .collect();
    assert!(missing.is_empty(), "202 without a verdict: {missing:?}");
    assert_eq!(snapshot.counters.accepted as usize, snapshot.facts.len());
    let real: BTreeSet<(Source, String)> = snapshot
        .facts
        .iter()
        .map(|(source, id, _)| (*source, id.clone()))
        .collect();
    let model: BTreeSet<(Source, String)> = oracle
        .inbox
        .facts()
        .map(|fact| (fact.source(), fact.event_id().to_owned()))
        .collect();
    assert_eq!(real, model, "the facts");
    let real_contents: BTreeSet<String> = snapshot
        .facts
        .iter()
        .map(|(_, _, canonical)| canonical.clone())
        .chain(snapshot.evidence.iter().cloned())
        .collect();
    let model_contents: BTreeSet<String> = oracle
        .inbox
        .facts()
        .chain(oracle.inbox.evidence())
        .map(|envelope| envelope.canonical().to_owned())
        .collect();
    assert_eq!(real_contents, model_contents, "every content seen, once");
    let ready: &BTreeSet<AppKey> = oracle.inbox.ready_marks();
    assert_eq!(&snapshot.ready, ready, "READY");
    assert_eq!(snapshot.open_conflicts, oracle.inbox.open_conflicts());
    assert_eq!(snapshot.late, oracle.inbox.late_mismatches());
    assert!(
        !snapshot.ready.is_empty() && oracle.inbox.fact_count() > 10,
        "a run worth checking: {} facts, {} READY",
        oracle.inbox.fact_count(),
        snapshot.ready.len()
    );
}

#[test]
fn the_load_generator_measures_three_processes_on_postgresql_beside_the_bare_limits() {
    let database = PgDatabase::new();
    // The scratch database holds an inbox before the run: load empties it first.
    let conn = store::open(&InboxAt::Postgres(database.url.clone()), 5_000).unwrap();
    drop(conn);
    let output = Command::new(ARRIVAL)
        .args(["pipeline", "load", "--requests", "60", "--consumers", "1"])
        .args(["--processes", "3", "--baselines", "--json"])
        .args(["--scratch-db", &database.url])
        .env("ARRIVAL_REDIS_URL", redis_url())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    let run = &report["runs"][0];
    assert_eq!(run["backend"], "postgres");
    assert_eq!(run["processes"], 3);
    assert_eq!(run["accepted"], 60, "every load request is signed right");
    for limit in ["xadd_per_second", "insert_per_second"] {
        assert!(
            report["baselines"][limit].as_f64().unwrap() > 0.0,
            "{limit}: {report}"
        );
    }
}

/// Posts `request` until it is answered something other than 503 (a sender's retry);
/// the answer.
fn post_until_answered(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    source: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
) -> arrival::pipeline::client::Reply {
    for _ in 0..100 {
        let reply = rt
            .block_on(Client::new(addr).post(source, signature, body))
            .unwrap();
        if reply.status != 503 {
            return reply;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("still 503 after 100 tries")
}

/// Posts every request (each until answered), the entries of the 202s.
fn post_all(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    requests: &[arrival::facts::world::PostedRequest],
) -> Vec<String> {
    let mut entries = Vec::new();
    for r in requests {
        let source = r.source.as_deref();
        let reply = post_until_answered(rt, addr, source, r.signature.as_deref(), &r.body);
        entries.extend(reply.entry);
    }
    entries
}

/// A PostgreSQL inbox with the drill's applications and keys, and one `serve` on it.
struct OnePg {
    database: PgDatabase,
    _dir: crate::util::TempDir,
    names: Names,
    child: Child,
    addr: SocketAddr,
    requests: Vec<arrival::facts::world::PostedRequest>,
}

impl OnePg {
    fn start(label: &str) -> OnePg {
        let database = PgDatabase::new();
        let dir = temp_dir(label);
        let (apps, requests) = arrival::pipeline::load::load_requests(30, store::now_ms() / 1000);
        let conn = store::open(&InboxAt::Postgres(database.url.clone()), 5_000).unwrap();
        store::put_applications(&conn, &apps).unwrap();
        write_drill_keys(dir.path());
        let names = Names {
            stream: unique("arrival-pg"),
            group: "inbox".into(),
        };
        let (child, addr) = serve_on(&database.url, dir.path(), &names, &redis_url());
        OnePg {
            database,
            _dir: dir,
            names,
            child,
            addr,
            requests,
        }
    }

    fn conn(&self) -> arrival::pipeline::sql::Db {
        store::open(&InboxAt::Postgres(self.database.url.clone()), 5_000).unwrap()
    }

    fn stop(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        let mut redis = stream::connect(&redis_url(), Duration::from_secs(2)).unwrap();
        stream::delete_keys(&mut redis, &self.names).unwrap();
    }
}

#[test]
fn serve_opens_the_inbox_again_after_postgresql_closed_its_connections() {
    let pg = OnePg::start("pg-reconnect");
    let rt = runtime();
    let (before, after) = pg.requests.split_at(10);
    let mut accepted = Vec::new();
    accepted.extend(post_all(&rt, pg.addr, before));
    // What a server restart, a failover or an idle timeout does to every connection.
    let admin = pg.conn();
    admin
        .rows(
            "SELECT pg_terminate_backend(pid)::text FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap();
    accepted.extend(post_all(&rt, pg.addr, after));
    let deadline = Instant::now() + Duration::from_secs(30);
    while store::verdict_count(&admin).unwrap() < accepted.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let verdicts = store::verdict_count(&admin).unwrap();
    let receipts = admin.rows("SELECT count(*) FROM receipts", &[]).unwrap()[0]
        .int(0)
        .unwrap();
    pg.stop();
    assert_eq!(
        verdicts,
        accepted.len(),
        "every 202 decided after the reconnect"
    );
    assert!(receipts as usize >= accepted.len(), "{receipts} receipts");
}

#[test]
fn a_nul_in_an_event_id_is_dead_lettered_on_postgresql_and_stalls_nothing() {
    let pg = OnePg::start("pg-nul");
    let rt = runtime();
    let template = &pg.requests[0];
    let mut body: serde_json::Value = serde_json::from_slice(&template.body).unwrap();
    body["event_id"] = serde_json::Value::String("nul\u{0}id".into());
    let body = serde_json::to_vec(&body).unwrap();
    let key = if template.source.as_deref() == Some("finance") {
        drill::KEY_FINANCE
    } else {
        drill::KEY_CONTRACTS
    };
    let signature = arrival::facts::ingress::sign(key.as_bytes(), &body);
    let source = template.source.as_deref();
    let nul = post_until_answered(&rt, pg.addr, source, Some(&signature), &body);
    assert_eq!(nul.status, 202, "{}", nul.body);
    // The same body badly signed: its receipt names the event id and must be stored too.
    let refused = post_until_answered(&rt, pg.addr, source, Some("sha256=00"), &body);
    assert_eq!(refused.status, 400);
    let mut accepted = Vec::new();
    accepted.extend(post_all(&rt, pg.addr, &pg.requests[1..8]));
    let admin = pg.conn();
    let mut redis = stream::connect(&redis_url(), Duration::from_secs(2)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let settled = |redis: &mut redis::Connection| {
        store::verdict_count(&admin).unwrap() >= accepted.len()
            && stream::pending_count(redis, &pg.names).unwrap() == 0
    };
    while !settled(&mut redis) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200)); // the receipts writer's last batch
    let dead = stream::range_all(&mut redis, &pg.names.dead_letter()).unwrap();
    let pending = stream::pending_count(&mut redis, &pg.names).unwrap();
    let receipts = admin.rows("SELECT count(*) FROM receipts", &[]).unwrap()[0]
        .int(0)
        .unwrap();
    let failures = admin
        .rows("SELECT failures FROM decision_failures", &[])
        .unwrap();
    pg.stop();
    assert_eq!(pending, 0, "nothing left pending");
    assert_eq!(dead.len(), 1, "the NUL entry is dead-lettered once");
    assert_eq!(
        dead[0].field("entry"),
        nul.entry.as_deref().map(str::as_bytes)
    );
    assert!(!failures.is_empty(), "its failed decisions are recorded");
    assert_eq!(
        receipts as usize,
        2 + accepted.len(),
        "a receipt for every answer"
    );
}

#[test]
fn a_run_on_a_database_with_applications_and_a_malformed_url_are_bad_input_without_the_password() {
    let database = PgDatabase::new();
    let conn = store::open(&InboxAt::Postgres(database.url.clone()), 5_000).unwrap();
    let (apps, _) = drill::requests(1, 6, 0);
    store::put_applications(&conn, &apps).unwrap();
    let output = Command::new(ARRIVAL)
        .args([
            "pipeline",
            "run",
            "fixtures/acmeflow-wf14.json",
            "--db",
            &database.url,
        ])
        .env("ARRIVAL_REDIS_URL", redis_url())
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("new, empty inbox"),
        "{}",
        stderr(&output)
    );
    let output = Command::new(ARRIVAL)
        .args([
            "pipeline",
            "status",
            "--db",
            "postgres://u:s3cretpw@127.0.0.1:notaport/x",
        ])
        .env_remove("ARRIVAL_DB")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("--db"), "{}", stderr(&output));
    assert!(!stderr(&output).contains("s3cretpw"), "{}", stderr(&output));
}

#[test]
fn consumer_processes_killed_on_a_postgresql_inbox_lose_nothing_and_the_wrong_build_is_caught() {
    let database = PgDatabase::new();
    let mut options = crate::pipeline::options(60, 12);
    options.scratch_db = Some(InboxAt::Postgres(database.url.clone()));
    let report = runtime().block_on(drill::process_kill(&options)).unwrap();
    let failed: Vec<_> = report.checks.iter().filter(|c| !c.holds).collect();
    assert!(report.passed, "{failed:#?}");
    assert_eq!(
        report.kills.values().sum::<usize>(),
        12,
        "{:?}",
        report.kills
    );
    options.mutant = Some("ack-before-commit".parse().unwrap());
    let report = runtime().block_on(drill::process_kill(&options)).unwrap();
    let lost = report
        .checks
        .iter()
        .find(|check| check.name == "acked-only-after-commit")
        .unwrap();
    assert!(!report.passed && !lost.holds, "{}", lost.detail);
}

#[test]
fn a_commit_postgresql_refuses_as_a_full_disk_leaves_the_batch_pending_until_a_retry_commits_it() {
    let pg = OnePg::start("pg-commit-fails");
    let admin = pg.conn();
    // The first three commits that carry a verdict fail AT COMMIT (a deferred constraint
    // trigger) with PostgreSQL's disk_full: the statements all ran, only COMMIT refuses.
    admin
        .batch(
            "CREATE SEQUENCE commit_faults;
             CREATE FUNCTION commit_fault() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF nextval('commit_faults') <= 3 THEN
                 RAISE EXCEPTION 'injected: no space left at commit' USING ERRCODE = '53100';
               END IF;
               RETURN NULL;
             END $$;
             CREATE CONSTRAINT TRIGGER commit_fault AFTER INSERT ON verdicts
               DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION commit_fault();",
        )
        .unwrap();
    let rt = runtime();
    let accepted = post_all(&rt, pg.addr, &pg.requests[..12]);
    let mut redis = stream::connect(&redis_url(), Duration::from_secs(2)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(store::verdict_count(&admin).unwrap() >= accepted.len()
        && stream::pending_count(&mut redis, &pg.names).unwrap() == 0)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let faults = admin
        .rows("SELECT last_value FROM commit_faults", &[])
        .unwrap()[0]
        .int(0)
        .unwrap();
    let snapshot = store::snapshot(&admin).unwrap();
    let pending = stream::pending_count(&mut redis, &pg.names).unwrap();
    pg.stop();
    assert!(faults > 3, "the faults fired: {faults}");
    assert_eq!(pending, 0);
    for entry in &accepted {
        let (_, processings) = snapshot.verdicts.get(entry).expect("a verdict per 202");
        assert_eq!(
            *processings, 1,
            "{entry} was committed once, after the failures"
        );
    }
}
