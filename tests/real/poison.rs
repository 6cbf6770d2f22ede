//! Per-entry poison isolation in the consumer, against the real Redis and a real SQLite
//! inbox: an entry whose decision fails while the inbox works stays pending and is
//! retried while the rest of its batch is decided and acknowledged; at `max_deliveries`
//! it is dead-lettered with its count, category, error and identity; deliveries that met a
//! failing inbox do not count. Each test drives one consumer batch by batch, with its own
//! stream keys and inbox file, and removes the keys.

use crate::util::temp_dir;
use arrival::facts::application::{AppKey, Application, Applications};
use arrival::facts::inbox::Verdict;
use arrival::facts::world::{Decision, POISON_BODY};
use arrival::pipeline::batch::Item;
use arrival::pipeline::consumer::{
    BatchResult, Consumer, ConsumerOptions, Faults, NoFaults, Point, ReadKind,
};
use arrival::pipeline::run::unique;
use arrival::pipeline::store;
use arrival::pipeline::stream::{self, Names, RawEntry};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const TENANT: &str = "poison-test";
const HOOK: &str = "the test makes this decision fail";

/// Makes the decision of the entry with this event id fail; kills nobody.
struct FailEvent(&'static str);

impl Faults for FailEvent {
    fn kill_at(&self, _: &str, _: Point, _: usize) -> bool {
        false
    }

    fn fail_decision(&self, item: &Item) -> Option<String> {
        (item.envelope.event_id() == self.0).then(|| HOOK.to_owned())
    }
}

fn body(source: &str, event_id: &str, app: &str) -> String {
    let event_type = if source == "finance" {
        "PAYMENT_CONFIRMED"
    } else {
        "CONTRACT_SIGNED"
    };
    format!(
        r#"{{"schema_version":"1","source":"{source}","event_id":"{event_id}","event_type":"{event_type}","sent_at":"2026-01-01T00:00:00Z","tenant_id":"{TENANT}","application_id":"{app}","business_key":"BK-{app}","material_version":1}}"#
    )
}

/// A test's own stream, group and inbox (applications a1, a2, a3), and a consumer `c1` with
/// a 50 ms busy timeout, no takeover, batches of 16 and a budget of 3.
struct Rig {
    names: Names,
    redis: redis::Connection,
    db: std::path::PathBuf,
    _dir: crate::util::TempDir,
}

impl Rig {
    fn new() -> Rig {
        let dir = temp_dir("poison");
        let db = dir.path().join("inbox.db");
        let mut apps = Applications::new();
        for app in ["a1", "a2", "a3"] {
            let key = AppKey {
                tenant_id: TENANT.into(),
                application_id: app.into(),
            };
            let application = Application::active(format!("BK-{app}"), 1);
            apps.insert(key, application);
        }
        let conn = store::open(&db.to_path_buf().into(), 5_000).unwrap();
        store::put_applications(&conn, &apps).unwrap();
        let url = crate::pipeline::redis_url();
        let mut redis = stream::connect(&url, Duration::from_secs(2)).unwrap();
        let names = Names {
            stream: unique("arrival-poison"),
            group: "inbox".into(),
        };
        stream::ensure_group(&mut redis, &names).unwrap();
        Rig {
            names,
            redis,
            db,
            _dir: dir,
        }
    }

    fn add(&mut self, source: &str, body: &str) -> String {
        stream::xadd_command(&self.names, source, body.as_bytes(), store::now_ms(), None)
            .query(&mut self.redis)
            .unwrap()
    }

    fn consumer(&self, faults: Arc<dyn Faults>) -> Consumer {
        let options = ConsumerOptions {
            redis_url: crate::pipeline::redis_url(),
            names: self.names.clone(),
            name: "c1".into(),
            db: self.db.clone().into(),
            count: 16,
            block_ms: 100,
            min_idle_ms: 600_000,
            claim_every_ms: 600_000,
            max_deliveries: 3,
            busy_timeout_ms: 50,
            mutant: None,
        };
        Consumer::connect(options, faults).unwrap()
    }

    fn dead_letters(&mut self) -> Vec<RawEntry> {
        stream::range_all(&mut self.redis, &self.names.dead_letter()).unwrap()
    }

    fn deliveries(&mut self, id: &str) -> u32 {
        stream::deliveries(&mut self.redis, &self.names, id).unwrap()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = stream::delete_keys(&mut self.redis, &self.names);
    }
}

/// Reads and handles one batch, asserting how it was read.
fn batch(consumer: &mut Consumer, kind: ReadKind) -> BatchResult {
    let (read, entries) = consumer.next_batch().unwrap().expect("a batch to read");
    assert_eq!(read, kind);
    consumer.handle(&entries).unwrap()
}

fn decision(result: &BatchResult, entry: &str) -> (Option<Decision>, bool) {
    let outcome = result
        .outcomes
        .iter()
        .find(|outcome| outcome.entry == entry)
        .unwrap_or_else(|| panic!("no outcome for {entry}: {result:?}"));
    (outcome.decision.clone(), outcome.acknowledged)
}

fn text(entry: &RawEntry, field: &str) -> Option<String> {
    entry
        .field(field)
        .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
}

fn failures_recorded(db: &Path, entry: &str) -> Option<(i64, String, String)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(
        "SELECT failures, event_id, error FROM decision_failures WHERE entry = ?1",
        [entry],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
    )
    .ok()
}

#[test]
fn an_undecidable_entry_is_isolated_from_its_batch_and_dead_lettered_at_exactly_its_budget() {
    let mut rig = Rig::new();
    let before = rig.add("finance", &body("finance", "PAY-a1", "a1"));
    let stuck = rig.add("finance", &body("finance", "PAY-X", "a2"));
    let after = rig.add("contracts", &body("contracts", "SIG-a1", "a1"));
    let last = rig.add("finance", &body("finance", "PAY-a3", "a3"));
    let mut consumer = rig.consumer(Arc::new(FailEvent("PAY-X")));

    let first = batch(&mut consumer, ReadKind::New);
    assert_eq!(first.outcomes.len(), 4, "one batch of four: {first:?}");
    for entry in [&before, &after, &last] {
        let (decided, acknowledged) = decision(&first, entry);
        assert!(
            matches!(decided, Some(Decision::Verdict(_))),
            "{entry}: {decided:?}"
        );
        assert!(acknowledged, "{entry} is acknowledged after the commit");
    }
    assert_eq!(
        decision(&first, &stuck),
        (
            Some(Decision::Retry {
                category: arrival::facts::inbox::PoisonCategory::Undecidable,
                reason: HOOK.into()
            }),
            false
        )
    );
    let conn = store::open(&rig.db.to_path_buf().into(), 5_000).unwrap();
    let snapshot = store::snapshot(&conn).unwrap();
    let facts: Vec<&str> = snapshot.facts.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(
        facts,
        ["SIG-a1", "PAY-a1", "PAY-a3"],
        "the rest of the batch is decided"
    );
    assert!(
        !facts.contains(&"PAY-X"),
        "the failed decision's writes are rolled back"
    );
    assert!(!snapshot.verdicts.contains_key(&stuck));
    let a1 = AppKey {
        tenant_id: TENANT.into(),
        application_id: "a1".into(),
    };
    assert!(
        snapshot.ready.contains(&a1),
        "the entry after it made a1 READY"
    );
    assert_eq!(
        stream::pending_count(&mut rig.redis, &rig.names).unwrap(),
        1
    );
    assert_eq!(rig.deliveries(&stuck), 1);

    let second = batch(&mut consumer, ReadKind::Own);
    assert_eq!(
        second.outcomes.len(),
        1,
        "only the stuck entry is read again"
    );
    assert!(!decision(&second, &stuck).1, "under budget: still pending");
    assert!(rig.dead_letters().is_empty());

    let third = batch(&mut consumer, ReadKind::Own);
    assert!(matches!(
        decision(&third, &stuck),
        (Some(Decision::DeadLetter { .. }), true)
    ));
    assert_eq!(rig.deliveries(&stuck), 0, "acknowledged once dead-lettered");
    let dead = rig.dead_letters();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let letter = &dead[0];
    assert_eq!(text(letter, "entry").as_deref(), Some(stuck.as_str()));
    assert_eq!(text(letter, "category").as_deref(), Some("undecidable"));
    assert_eq!(text(letter, "deliveries").as_deref(), Some("3"));
    assert_eq!(text(letter, "reason").as_deref(), Some(HOOK));
    assert_eq!(text(letter, "tenant_id").as_deref(), Some(TENANT));
    assert_eq!(text(letter, "source").as_deref(), Some("finance"));
    assert_eq!(text(letter, "event_id").as_deref(), Some("PAY-X"));
    assert_eq!(text(letter, "body"), Some(body("finance", "PAY-X", "a2")));
    assert_eq!(
        failures_recorded(&rig.db, &stuck),
        Some((3, "PAY-X".into(), HOOK.into()))
    );
    // Nothing acknowledged and dropped: every entry has a verdict or a dead letter, and
    // nothing is left pending.
    let snapshot = store::snapshot(&conn).unwrap();
    for entry in [&before, &after, &last] {
        assert!(snapshot.verdicts.contains_key(entry), "{entry}");
    }
    assert_eq!(
        stream::pending_count(&mut rig.redis, &rig.names).unwrap(),
        0
    );
}

/// Deliveries that meet a failing inbox (here: another writer holds it) are noted as
/// infrastructure failures and do not count: the stuck entry and an unparseable one beside
/// it are dead-lettered only after three deliveries in which the inbox worked, although
/// Redis has counted five.
#[test]
fn deliveries_that_meet_a_locked_inbox_do_not_count_toward_the_budget() {
    let mut rig = Rig::new();
    let stuck = rig.add("finance", &body("finance", "PAY-X", "a2"));
    let garbled = rig.add("finance", POISON_BODY);
    let mut consumer = rig.consumer(Arc::new(FailEvent("PAY-X")));
    let first = batch(&mut consumer, ReadKind::New);
    assert!(first.outcomes.iter().all(|o| !o.acknowledged), "{first:?}");
    let blocker = rusqlite::Connection::open(&rig.db).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    for _ in 0..2 {
        let (_, entries) = consumer.next_batch().unwrap().expect("own pending");
        assert_eq!(entries.len(), 2);
        let failed = consumer.handle(&entries);
        assert!(
            failed.is_err(),
            "a locked inbox fails the batch: {failed:?}"
        );
    }
    blocker.execute_batch("ROLLBACK").unwrap();
    assert_eq!(rig.deliveries(&stuck), 3, "Redis counted every delivery");
    let second = batch(&mut consumer, ReadKind::Own);
    assert!(
        second.outcomes.iter().all(|o| !o.acknowledged),
        "{second:?}"
    );
    let third = batch(&mut consumer, ReadKind::Own);
    assert!(third.outcomes.iter().all(|o| o.acknowledged), "{third:?}");
    let dead = rig.dead_letters();
    let letter = |entry: &str| {
        dead.iter()
            .find(|letter| text(letter, "entry").as_deref() == Some(entry))
            .unwrap_or_else(|| panic!("no dead letter for {entry}: {dead:?}"))
            .clone()
    };
    let (stuck_letter, garbled_letter) = (letter(&stuck), letter(&garbled));
    assert_eq!(dead.len(), 2);
    for letter in [&stuck_letter, &garbled_letter] {
        assert_eq!(text(letter, "deliveries").as_deref(), Some("3"));
        assert_eq!(text(letter, "redis_deliveries").as_deref(), Some("5"));
    }
    assert_eq!(
        text(&garbled_letter, "category").as_deref(),
        Some("unparseable")
    );
    assert_eq!(text(&garbled_letter, "tenant_id"), None, "it never parsed");
    assert_eq!(
        text(&stuck_letter, "category").as_deref(),
        Some("undecidable")
    );
    assert_eq!(
        failures_recorded(&rig.db, &stuck).map(|f| f.0),
        Some(3),
        "three decisions failed; the two locked deliveries decided nothing"
    );
    let infra = stream::infrastructure_deliveries(&mut rig.redis, &rig.names, &stuck).unwrap();
    assert_eq!(infra, 0, "the note is dropped with the entry");
    assert_eq!(
        stream::pending_count(&mut rig.redis, &rig.names).unwrap(),
        0
    );
}

/// The review's stall, without any test hook: a stored fact that no longer parses (here
/// edited by hand, as a parser change would leave it) makes every later decision for its
/// application fail. That entry is dead-lettered after three deliveries; an entry for
/// another application in the same batch is decided at once.
#[test]
fn a_stored_fact_that_no_longer_parses_dead_letters_only_the_entries_that_need_it() {
    let mut rig = Rig::new();
    rig.add("finance", &body("finance", "PAY-a1", "a1"));
    let mut consumer = rig.consumer(Arc::new(arrival::pipeline::consumer::NoFaults));
    batch(&mut consumer, ReadKind::New);
    rusqlite::Connection::open(&rig.db)
        .unwrap()
        .execute(
            "UPDATE facts SET canonical = replace(canonical, '\"schema_version\":\"1\"', '\"schema_version\":\"0\"')",
            [],
        )
        .unwrap();
    let stuck = rig.add("contracts", &body("contracts", "SIG-a1", "a1"));
    let other = rig.add("finance", &body("finance", "PAY-a3", "a3"));
    let first = batch(&mut consumer, ReadKind::New);
    assert!(matches!(
        decision(&first, &other),
        (Some(Decision::Verdict(_)), true)
    ));
    assert!(!decision(&first, &stuck).1, "under budget: still pending");
    batch(&mut consumer, ReadKind::Own);
    let third = batch(&mut consumer, ReadKind::Own);
    assert!(matches!(
        decision(&third, &stuck),
        (Some(Decision::DeadLetter { .. }), true)
    ));
    let dead = rig.dead_letters();
    assert_eq!(dead.len(), 1);
    assert_eq!(text(&dead[0], "event_id").as_deref(), Some("SIG-a1"));
    assert_eq!(text(&dead[0], "deliveries").as_deref(), Some("3"));
    let reason = text(&dead[0], "reason").unwrap_or_default();
    assert!(reason.contains("no longer parses"), "{reason}");
    assert_eq!(
        stream::pending_count(&mut rig.redis, &rig.names).unwrap(),
        0
    );
}

/// `pipeline dead-letters ARGS` on the rig's stream and inbox: status, stdout, stderr.
fn dead_letters_cli(rig: &Rig, args: &[&str], with_db: bool) -> (Option<i32>, String, String) {
    let mut command = std::process::Command::new(crate::util::ARRIVAL);
    command
        .args(["pipeline", "dead-letters"])
        .args(args)
        .args(["--stream", &rig.names.stream, "--group", &rig.names.group])
        .env("ARRIVAL_REDIS_URL", crate::pipeline::redis_url())
        .env_remove("ARRIVAL_DB");
    if with_db {
        command.arg("--db").arg(&rig.db);
    }
    let output = command.output().unwrap();
    (
        output.status.code(),
        crate::util::stdout(&output),
        crate::util::stderr(&output),
    )
}

#[test]
fn a_dead_letter_replayed_after_its_cause_is_gone_is_decided_and_a_discarded_one_is_kept_only_as_a_record(
) {
    let mut rig = Rig::new();
    let stuck = rig.add("finance", &body("finance", "PAY-X", "a2"));
    let poison = rig.add("finance", POISON_BODY);
    let mut consumer = rig.consumer(Arc::new(FailEvent("PAY-X")));
    batch(&mut consumer, ReadKind::New);
    batch(&mut consumer, ReadKind::Own);
    batch(&mut consumer, ReadKind::Own);
    drop(consumer);
    let (code, listed, _) = dead_letters_cli(&rig, &["list", "--json"], false);
    assert_eq!(code, Some(0));
    let letters: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let entries: Vec<(&str, &str)> = letters
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["entry"].as_str().unwrap(),
                l["category"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            (stuck.as_str(), "undecidable"),
            (poison.as_str(), "unparseable")
        ]
    );
    let replay = [
        "replay",
        "--entry",
        &stuck,
        "--reason",
        "the failing hook is gone",
    ];
    let (code, said, err) = dead_letters_cli(&rig, &replay, true);
    assert_eq!(code, Some(0), "{err}");
    let new = said.trim().rsplit(' ').next().unwrap().to_owned();
    let discard = ["discard", "--entry", &poison, "--reason", "not an envelope"];
    assert_eq!(dead_letters_cli(&rig, &discard, true).0, Some(0));
    let (code, _, err) = dead_letters_cli(&rig, &discard, true);
    assert_eq!(
        code,
        Some(2),
        "a letter discarded is no longer there: {err}"
    );
    assert!(err.contains("--entry") && err.contains(&poison), "{err}");
    assert!(rig.dead_letters().is_empty());
    let mut consumer = rig.consumer(Arc::new(NoFaults));
    let result = batch(&mut consumer, ReadKind::New);
    assert_eq!(
        decision(&result, &new),
        (Some(Decision::Verdict(Verdict::Accepted)), true)
    );
    let conn = rusqlite::Connection::open(&rig.db).unwrap();
    let actions: Vec<(String, String, Option<String>, String)> = conn
        .prepare("SELECT entry, action, new_entry, reason FROM dead_letter_actions ORDER BY seq")
        .unwrap()
        .query_map([], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        actions,
        [
            (
                stuck,
                "replay".into(),
                Some(new),
                "the failing hook is gone".into()
            ),
            (poison, "discard".into(), None, "not an envelope".into()),
        ]
    );
}
