//! The facts pipeline's inbox on PostgreSQL, each test on a database of its own: every facts
//! fixture played step by step as on SQLite, and three `serve` processes sharing one
//! consumer group and one database under load, ending in the model's terminal state.

use crate::operator::FIXTURES;
use crate::pg::PgDatabase;
use crate::pipeline::{redis_url, runtime, write_drill_keys};
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
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
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
    let mut child = Command::new(ARRIVAL)
        .args(["pipeline", "serve", "--listen", "127.0.0.1:0", "--db", db])
        .arg("--keys")
        .arg(dir.join("keys.json"))
        .args(["--stream", &names.stream, "--group", &names.group])
        .args(["--consumers", "1", "--count", "4", "--min-idle-ms", "500"])
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
    let refused = Command::new(ARRIVAL)
        .args(["pipeline", "load", "--requests", "5", "--processes", "2"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--processes"));
}
