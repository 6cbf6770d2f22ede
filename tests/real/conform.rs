//! `arrival conform` against real processes: the Python example receivers in
//! `examples/receivers/` (written apart from this crate, from docs/protocol.md), the store
//! behind `arrival store stdio`, and broken harnesses that must give exit status 3. Counts
//! are small (a few walks); the CLI's defaults are for real runs.

use crate::util::{arrival, assert_status, json, root, stderr, stdout, temp_dir};
use serde_json::Value;
use std::path::Path;

fn python(receiver: &str) -> String {
    format!("http:python3 examples/receivers/{receiver}/receiver.py --port {{port}} --data {{data_dir}}")
}

fn store(mutant: Option<&str>) -> String {
    let mutant = mutant.map_or(String::new(), |m| format!(" --mutant {m}"));
    format!("stdio:{} store stdio{mutant}", crate::util::ARRIVAL)
}

fn conform(source: &str, target: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["conform", source, "--target", target, "--json"];
    args.extend_from_slice(extra);
    arrival(&args)
}

/// The failure's property, its shrunk steps and how often it came back.
fn found(report: &Value) -> (String, Vec<String>, String) {
    let failure = &report["failure"];
    let steps = failure["steps"].as_array().expect("steps");
    (
        failure["property"].as_str().unwrap().to_owned(),
        steps
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect(),
        failure["reproduced"].as_str().unwrap().to_owned(),
    )
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn the_correct_python_receiver_passes_b62_15_with_verdict_sampled() {
    let output = conform(
        "models/b62-15.toml",
        &python("python-sqlite"),
        &["--walks", "3"],
    );
    assert_status(&output, 0, "conform python-sqlite");
    let report = json(&output);
    assert_eq!(report["verdict"], "sampled");
    // 12 kept traces, one mutant schedule no kept trace has, the 14 schedules of the
    // transition cover (15 kinds), 3 walks.
    assert_eq!(report["schedules"], 12 + 1 + 14 + 3);
    assert_eq!(report["passed"], 12 + 1 + 14 + 3);
    assert_eq!(report["cover"].as_array().unwrap().len(), 15);
    assert_eq!(report["counts"]["regressed"], 0);
    let status = |name: &str| {
        let properties = report["properties"].as_array().unwrap();
        let entry = properties.iter().find(|p| p["name"] == name).unwrap();
        entry["status"].as_str().unwrap().to_owned()
    };
    assert_eq!(status("evidence-retained"), "sampled");
    assert_eq!(status("first-record-immutable"), "unobserved");
}

#[test]
fn last_arrival_wins_in_python_is_caught_by_the_kept_trace_s_two_deliveries_and_its_fixture_replays(
) {
    let dir = temp_dir("conform-lastwins");
    let out = dir.path().to_str().unwrap();
    let lastwins = python("python-lastwins");
    let output = conform(
        "models/b62-15.toml",
        &lastwins,
        &["--walks", "0", "--no-cover", "--trace-out", out],
    );
    assert_status(&output, 1, "conform python-lastwins");
    let report = json(&output);
    assert_eq!(
        found(&report),
        (
            "version-monotonic".into(),
            strings(&["deliver #1", "deliver #3"]),
            "3/3".into()
        )
    );
    let fixture = dir.path().join("b62-15.conform.version-monotonic.json");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
    // The model's side is the kept mutant trace's schedule.
    let kept: Value = serde_json::from_str(
        &std::fs::read_to_string(
            root().join("fixtures/regressions/mutant-last-arrival-wins.version-monotonic.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(written["schedule"], kept["schedule"]);
    assert_eq!(written["conform"]["violates"], "version-monotonic");
    let file = fixture.to_str().unwrap();
    assert_status(
        &arrival(&["replay", file]),
        0,
        "replay of the conform fixture",
    );
    // Rerun against the receiver: still broken (1), as expected when named (0), and the
    // correct receiver passes it (0).
    assert_status(&conform(file, &lastwins, &[]), 1, "rerun on lastwins");
    let named = conform(file, &lastwins, &["--expect", "version-monotonic"]);
    assert_status(&named, 0, "rerun on lastwins, expected to fail");
    assert_status(
        &conform(file, &python("python-sqlite"), &[]),
        0,
        "rerun on sqlite",
    );
}

#[test]
fn id_only_dedupe_in_python_is_unseen_at_the_end_seen_every_step_and_named_with_unresolved() {
    let idonly = python("python-idonly");
    let end = conform(
        "models/b62-15.toml",
        &idonly,
        &[
            "--walks",
            "0",
            "--no-cover",
            "--observe",
            "end",
            "--channels",
            "cards",
        ],
    );
    assert_status(&end, 0, "final cards only");
    let end = json(&end);
    assert_eq!(end["verdict"], "sampled");
    assert!(!end["warnings"].as_array().unwrap().is_empty());
    let every = conform(
        "models/b62-15.toml",
        &idonly,
        &["--walks", "0", "--no-cover", "--channels", "cards"],
    );
    assert_status(&every, 1, "cards after every step");
    assert_eq!(
        found(&json(&every)),
        (
            "diverged".into(),
            strings(&["deliver #4", "deliver #6", "deliver #7"]),
            "3/3".into()
        )
    );
    let ack = conform(
        "models/b62-15.toml",
        &idonly,
        &["--walks", "0", "--no-cover", "--channels", "cards,ack"],
    );
    assert_status(&ack, 1, "cards and the ack's meaning");
    let ack = json(&ack);
    assert_eq!(
        found(&ack),
        (
            "diverged".into(),
            strings(&["deliver #4", "deliver #6"]),
            "3/3".into()
        )
    );
    let detail = ack["failure"]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("acknowledged `applied`, not `held`"),
        "{detail}"
    );
    let all = conform(
        "models/b62-15.toml",
        &idonly,
        &["--walks", "0", "--no-cover"],
    );
    assert_status(&all, 1, "every channel");
    assert_eq!(
        found(&json(&all)),
        (
            "evidence-retained".into(),
            strings(&["deliver #4", "deliver #6"]),
            "3/3".into()
        )
    );
}

#[test]
fn a_python_receiver_that_answers_before_committing_loses_a_decision_to_a_kill_after_its_ack() {
    let output = conform(
        "models/b62-15.toml",
        &python("python-ack-first"),
        &[
            "--no-traces",
            "--no-cover",
            "--walks",
            "1",
            "--seed",
            "1",
            "--shrink-budget",
            "6",
        ],
    );
    assert_status(&output, 1, "conform python-ack-first");
    let (property, steps, reproduced) = found(&json(&output));
    assert_eq!(property, "ack-implies-recorded");
    assert_eq!(reproduced, "3/3");
    assert_eq!(steps, strings(&["deliver #2 (kill after ack)"]));
}

#[test]
fn the_store_behind_the_stdio_protocol_passes_and_writes_a_junit_case_per_property() {
    let dir = temp_dir("conform-store");
    let junit = dir.path().join("conform.xml");
    let output = conform(
        "models/b62-15.toml",
        &store(None),
        &["--walks", "5", "--junit", junit.to_str().unwrap()],
    );
    assert_status(&output, 0, "conform store stdio");
    assert_eq!(json(&output)["verdict"], "sampled");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(xml.matches("<testcase").count(), 9 + 1, "{xml}");
    assert!(xml.contains("name=\"harness\""));
    assert!(!xml.contains("<failure"));
}

#[test]
fn the_store_s_ack_before_commit_mutant_fails_ack_implies_recorded_as_the_crash_drill_says() {
    let dir = temp_dir("conform-store-diagram");
    let output = conform(
        "models/b62-15.toml",
        &store(Some("ack-before-commit")),
        &[
            "--no-traces",
            "--no-mutants",
            "--no-cover",
            "--walks",
            "1",
            "--seed",
            "1",
            "--trace-out",
            dir.path().to_str().unwrap(),
        ],
    );
    assert_status(&output, 1, "conform store ack-before-commit");
    assert_eq!(
        found(&json(&output)),
        (
            "ack-implies-recorded".into(),
            strings(&["deliver #2 (kill after ack)"]),
            "3/3".into()
        )
    );
    // The fixture's sequence diagram beside it, the kill after the acknowledgement drawn.
    let stem = dir.path().join("b62-15.conform.ack-implies-recorded");
    assert!(stem.with_extension("ack-implies-recorded.svg").exists());
    assert_eq!(
        std::fs::read_to_string(stem.with_extension("ack-implies-recorded.mmd")).unwrap(),
        "sequenceDiagram
    title B62-15: ack-implies-recorded against a real receiver
    participant L0 as arrival
    participant L1 as receiver
    L0->>L1: 1. deliver no. 2 e-201
    L1->>L0: 1. ack applied
    Note over L1: 1. kill after the ack (SIGKILL to the process group), restart
    Note over L0,L1: VIOLATED ack-implies-recorded at step 1
"
    );
}

/// The mutant pauses 50 ms between its two commits (`store::mutants::COMMIT_TO_COMMIT`);
/// with a 45 ms kill window, seed 5 kills delivery #10 36 ms after sending it, after the
/// first commit and before the second, in the walk and in every rerun.
#[test]
fn the_store_s_two_transactions_mutant_is_caught_by_a_kill_between_its_commits_and_replays() {
    let dir = temp_dir("conform-two-transactions");
    let out = dir.path().to_str().unwrap();
    let mutant = store(Some("two-transactions"));
    let walks = ["--no-traces", "--no-mutants", "--no-cover", "--walks", "40"];
    let mut args = walks.to_vec();
    args.extend(["--seed", "5", "--kill-window-ms", "45", "--trace-out", out]);
    let output = conform("models/b62-15.toml", &mutant, &args);
    assert_status(&output, 1, "conform store two-transactions");
    assert_eq!(
        found(&json(&output)),
        (
            "ack-implies-recorded".into(),
            strings(&["deliver #10 (kill in flight)", "deliver #10"]),
            "3/3".into()
        )
    );
    let fixture = dir.path().join("b62-15.conform.ack-implies-recorded.json");
    let file = fixture.to_str().unwrap();
    assert_status(
        &arrival(&["replay", file]),
        0,
        "replay of the conform fixture",
    );
    // The fixture keeps the seed and kill window: a rerun needs no flags to time its kill.
    let rerun = conform(file, &mutant, &[]);
    assert_status(&rerun, 1, "rerun on two-transactions");
    assert_eq!(json(&rerun)["failure"]["property"], "ack-implies-recorded");
    assert_status(&conform(file, &store(None), &[]), 0, "rerun on the store");
    // A plan written from the fixture keeps its timing too, whatever the flags say.
    let plan = dir.path().join("plan.json");
    let plan_args = [
        "conform",
        file,
        "--plan-out",
        plan.to_str().unwrap(),
        "--seed",
        "9",
    ];
    assert_status(&arrival(&plan_args), 0, "--plan-out from the fixture");
    let written: Value = serde_json::from_slice(&std::fs::read(&plan).unwrap()).unwrap();
    assert_eq!(
        (&written["seed"], &written["kill_window_ms"]),
        (&5.into(), &45.into())
    );
}

fn target_file(dir: &Path, kind: &str, command: &[&str]) -> String {
    let file = dir.join(format!("{kind}.toml"));
    let words: Vec<String> = command.iter().map(|w| format!("{w:?}")).collect();
    let text = format!(
        "kind = \"{kind}\"\ncommand = [{}]\ntimeout_ms = 2000\nready_timeout_ms = 3000\n",
        words.join(", ")
    );
    std::fs::write(&file, text).unwrap();
    file.to_str().unwrap().to_owned()
}

#[track_caller]
fn harness_fails(target: &str, says: &str) {
    let output = conform("models/b62-15.toml", target, &["--walks", "1"]);
    assert_status(&output, 3, target);
    let stderr = crate::util::stderr(&output);
    assert!(stderr.contains(says), "{stderr}");
    // With --json, stdout holds the harness failure's document and nothing else.
    assert_eq!(
        json(&output)["verdict"],
        "harness_failure",
        "{}",
        stdout(&output)
    );
}

const STATE_500: &str = "import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == '/healthz' else 500)
        self.send_header('Content-Length', '0')
        self.end_headers()
http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()";

const NO_RESET: &str = "import json, sys
for line in sys.stdin:
    m = json.loads(line)
    r = {'in_reply_to': m['msg_id']}
    r.update({'start': {'type': 'start_ok'}, 'read': {'type': 'read_ok', 'cards': {}}}[m['type']])
    print(json.dumps(r), flush=True)";

#[test]
fn a_broken_harness_is_exit_3_never_a_verdict() {
    let dir = temp_dir("conform-harness");
    harness_fails("http:true", "exited");
    harness_fails(
        &target_file(dir.path(), "stdio", &["sh", "-c", "echo hello; sleep 5"]),
        "intended for stderr",
    );
    harness_fails(
        &target_file(dir.path(), "http", &["python3", "-c", STATE_500, "{port}"]),
        "answered 500",
    );
    let no_reset = dir.path().join("no-reset");
    std::fs::create_dir(&no_reset).unwrap();
    harness_fails(
        &target_file(&no_reset, "stdio", &["python3", "-c", NO_RESET]),
        "reset not verified",
    );
}

#[test]
fn a_bad_target_or_flag_is_exit_2() {
    let output = conform("models/b62-15.toml", "somewhere", &[]);
    assert_status(
        &output,
        2,
        "a target that is neither a file nor a shorthand",
    );
    let output = conform(
        "models/b62-15.toml",
        "http:true",
        &["--observe", "sometimes"],
    );
    assert_status(&output, 2, "an unknown --observe");
    let output = conform("fixtures/B62-15-events.json", "http:true", &[]);
    assert_status(&output, 2, "a fixture without a conform block");
}

/// The schedules' origins in a plan file.
fn origins(plan: &Value) -> Vec<&str> {
    plan["schedules"]
        .as_array()
        .expect("schedules")
        .iter()
        .map(|schedule| schedule["origin"].as_str().unwrap())
        .collect()
}

#[test]
fn a_plan_written_without_a_target_runs_the_same_schedules_and_verdict_and_one_removed_runs_one_fewer(
) {
    let dir = temp_dir("conform-plan");
    let file = dir.path().join("plan.json");
    let drawn = ["--no-traces", "--no-mutants", "--walks", "3", "--seed", "4"];
    let mut args = vec!["conform", "models/b62-15.toml", "--plan-out"];
    args.push(file.to_str().unwrap());
    args.extend_from_slice(&drawn);
    assert_status(&arrival(&args), 0, "--plan-out without a target");
    let text = std::fs::read_to_string(&file).unwrap();
    let plan: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(plan["protocol"], "card-plan");
    assert_eq!(plan["model"], "models/b62-15.toml");
    let all = origins(&plan);
    assert_eq!(all.len(), 14 + 3);
    assert_eq!(all[14..], ["walks/s4/w0", "walks/s4/w1", "walks/s4/w2"]);
    assert!(all[..14].iter().all(|origin| origin.starts_with("cover/")));
    // The run that drew the plan, and the plan run: the same schedules, kills and verdict
    // (not every count: whether a kill in flight lands before the commit is the clock's).
    let original = conform("models/b62-15.toml", &store(None), &drawn);
    assert_status(&original, 0, "the drawn run");
    let planned = conform(
        "models/b62-15.toml",
        &store(None),
        &["--plan", file.to_str().unwrap()],
    );
    assert_status(&planned, 0, "the plan's run");
    let (original, planned) = (json(&original), json(&planned));
    for field in ["schedules", "passed", "verdict", "cover"] {
        assert_eq!(original[field], planned[field], "{field}");
    }
    assert_eq!(original["counts"]["kills"], planned["counts"]["kills"]);
    assert_eq!(planned["schedules"], 17);
    // A reviewer removes one walk: one fewer runs, and no walk is drawn in its place.
    let mut edited = plan.clone();
    edited["schedules"].as_array_mut().unwrap().remove(15);
    std::fs::write(&file, serde_json::to_string_pretty(&edited).unwrap()).unwrap();
    let fewer = conform(
        "models/b62-15.toml",
        &store(None),
        &["--plan", file.to_str().unwrap(), "--walks", "9"],
    );
    assert_status(&fewer, 0, "the edited plan's run");
    assert_eq!(json(&fewer)["schedules"], 16);
}

/// A target file of an HTTP receiver that reconciles in pull mode, started by `command`.
/// The arguments every pull-mode Python receiver here takes.
const PULL_ARGS: [&str; 6] = [
    "--port",
    "{port}",
    "--data",
    "{data_dir}",
    "--authority",
    "{authority}",
];

/// The correct Python receiver in pull mode, with `extra` flags.
fn python_sqlite_pull<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let program = ["python3", "examples/receivers/python-sqlite/receiver.py"];
    [&program[..], &PULL_ARGS, extra].concat()
}

fn pull_target(dir: &Path, command: &[&str]) -> String {
    let file = dir.join("pull.toml");
    let words: Vec<String> = command.iter().map(|w| format!("{w:?}")).collect();
    let text = format!(
        "kind = \"http\"\nreconcile = \"pull\"\ncommand = [{}]\n",
        words.join(", ")
    );
    std::fs::write(&file, text).unwrap();
    file.to_str().unwrap().to_owned()
}

#[test]
fn the_python_receiver_in_pull_mode_fetches_the_authority_and_passes_with_no_false_alarm() {
    let dir = temp_dir("conform-pull");
    let target = pull_target(dir.path(), &python_sqlite_pull(&[]));
    // Both walks of seed 1 reconcile cards; the liveness phase reconciles every paused card.
    let output = conform(
        "models/b62-15.toml",
        &target,
        &["--no-traces", "--no-mutants", "--no-cover", "--walks", "2"],
    );
    assert_status(&output, 0, "python-sqlite in pull mode");
    let report = json(&output);
    assert_eq!(report["verdict"], "sampled");
    assert_eq!(report["schedules"], 2);
}

/// A receiver that reconciles on its own (after a held delivery, before answering it) is
/// judged by its fetches: each is a reconciliation it may have done. Without them the
/// reconciled card would be a state no world has (checked: a false `held-changes-nothing`).
#[test]
fn a_receiver_that_reconciles_on_its_own_is_judged_by_its_fetches_with_no_false_alarm() {
    let dir = temp_dir("conform-own-fetches");
    let target = pull_target(dir.path(), &python_sqlite_pull(&["--reconcile-on-pause"]));
    let output = conform(
        "models/b62-15.toml",
        &target,
        &["--no-mutants", "--no-cover", "--walks", "2"],
    );
    assert_status(&output, 0, "python-sqlite reconciling on its own");
    let report = json(&output);
    assert_eq!(report["verdict"], "sampled");
    assert!(report["own_fetches"].as_u64().unwrap() > 0, "{report}");
    // Found by review: walks alone. A walk's reconciliation of a card the receiver had
    // already reconciled on its own is not sent (no world allows it), and the walk goes
    // on; it used to drop the whole walk, and a run of walks alone ran nothing (exit 1).
    let output = conform(
        "models/b62-15.toml",
        &target,
        &["--no-traces", "--no-mutants", "--no-cover", "--walks", "2"],
    );
    assert_status(&output, 0, "walks alone");
    let report = json(&output);
    assert_eq!(
        (report["schedules"].as_u64(), report["passed"].as_u64()),
        (Some(2), Some(2))
    );
}

/// The correct Python receiver, loaded so that a patch can follow: each receiver below is
/// it with one bug put in from outside ([`patched`]).
const PATCHABLE: &str = "import importlib.util, sys
spec = importlib.util.spec_from_file_location('rx', 'examples/receivers/python-sqlite/receiver.py')
rx = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rx)
def answer_duplicates(how):
    # A duplicate's answer becomes how(self, raw, subject, word), unless that is None.
    right_audit, right_deliver = rx.Store.audit, rx.Store.deliver
    def audit(self, entry, subject, decision=None, previous=None):
        right_audit(self, entry, subject, decision, previous)
        self.last_entry = (entry, subject)
    def deliver(self, raw, delivery):
        self.last_entry = None
        word = right_deliver(self, raw, delivery)
        e = self.last_entry
        if e is not None and e[0] == 'duplicate':
            return how(self, raw, e[1], word) or word
        return word
    rx.Store.audit, rx.Store.deliver = audit, deliver
def judged(self, raw):
    # What rules 2-6 decide for this envelope now, in a savepoint rolled back.
    ok, env = rx.parse_json(raw)
    self.db.execute('SAVEPOINT afresh')
    decision, _ = self.rules_2_to_6(env)
    self.db.execute('ROLLBACK TO afresh')
    self.db.execute('RELEASE afresh')
    return rx.ack_of(decision)
def newest_held_settles(same_card):
    # A new input held behind a pause settles the earlier held inputs: its card's, or all.
    right_deliver = rx.Store.deliver
    def deliver(self, raw, delivery):
        before = {r[0] for r in self.db.execute('SELECT rid FROM records')}
        word = right_deliver(self, raw, delivery)
        new = self.db.execute('SELECT rid, decision, held_under FROM records ORDER BY rid DESC LIMIT 1').fetchone()
        if new and new[0] not in before and new[1] == 'held_paused':
            card, params = (' AND held_under=?', (new[0], new[2])) if same_card else ('', (new[0],))
            self.db.execute(\"UPDATE records SET standing='resolved', held_under=NULL\"
                            \" WHERE standing='held' AND rid<>?\" + card, params)
        return word
    rx.Store.deliver = deliver
";

/// The Python program that runs the correct receiver with `patch` applied.
fn patched(patch: &str) -> String {
    format!("{PATCHABLE}{patch}sys.argv[0] = 'receiver.py'\nrx.main()")
}

/// An HTTP target file in `dir` for the correct receiver with `patch` applied.
fn patched_target(dir: &Path, patch: &str) -> String {
    let code = patched(patch);
    target_file(
        dir,
        "http",
        &[
            "python3",
            "-c",
            &code,
            "--port",
            "{port}",
            "--data",
            "{data_dir}",
        ],
    )
}

/// The correct Python receiver reconciling on its own, with one bug put in from outside:
/// after a held delivery it reconciles every card, paused or not.
const RECONCILES_EVERY_CARD: &str = "def reconcile_paused(self):
    for (oid,) in self.store.db.execute('SELECT object_id FROM cards').fetchall():
        snap = rx.fetch_snapshot(self.authority, oid)
        if snap is not None and rx.is_valid_version(snap.get('version')) and 'state' in snap:
            self.store.transact(lambda: self.store.reconcile(snap), lambda _: None)
rx.Handler.reconcile_paused = reconcile_paused
";

/// Found by review: the contract lets a receiver reconcile only a paused card or one it
/// does not know; a fetch of any other card is no reconciliation, and one that changes it
/// anyway is caught (it passed as `sampled`).
#[test]
fn a_receiver_that_reconciles_cards_that_are_not_paused_is_caught() {
    let dir = temp_dir("conform-own-fetches-all");
    let target = pull_target(
        dir.path(),
        &[
            &["python3", "-c", &patched(RECONCILES_EVERY_CARD)][..],
            &PULL_ARGS,
            &["--reconcile-on-pause"],
        ]
        .concat(),
    );
    let output = conform(
        "models/b62-15.toml",
        &target,
        &["--no-mutants", "--no-cover", "--walks", "2"],
    );
    assert_status(&output, 1, "a receiver that reconciles every card");
    let (property, steps, _) = found(&json(&output));
    assert_eq!(property, "diverged", "{steps:?}");
}

/// The correct Python receiver, reconciling on its own, with one bug put in from outside:
/// a snapshot that replaces a paused card leaves it paused.
const RECONCILES_BUT_STAYS_PAUSED: &str = "right = rx.Store.reconcile
def reconcile(self, snap):
    outcome = right(self, snap)
    if outcome == 'replaced':
        self.db.execute('UPDATE cards SET paused=1 WHERE object_id=?', (snap['object_id'],))
    return outcome
rx.Store.reconcile = reconcile
";

/// A receiver whose own reconciliation goes wrong changed the card it fetched: that is no
/// paused card changed behind the contract's back, nor a held delivery that changed
/// something, so no such rule names it. What is seen fits no world: `diverged`, with the
/// diff (checked: before the fetched cards were set aside, the same run was named
/// `held-changes-nothing`).
#[test]
fn a_receiver_that_reconciles_on_its_own_wrongly_is_diverged_never_a_rule_it_did_not_break() {
    let dir = temp_dir("conform-own-fetches-wrong");
    let target = pull_target(
        dir.path(),
        &[
            &["python3", "-c", &patched(RECONCILES_BUT_STAYS_PAUSED)][..],
            &PULL_ARGS,
            &["--reconcile-on-pause"],
        ]
        .concat(),
    );
    for channels in ["cards,paused,unresolved,ack", "cards,ack"] {
        let output = conform(
            "models/b62-15.toml",
            &target,
            &[
                "--no-mutants",
                "--no-cover",
                "--walks",
                "2",
                "--channels",
                channels,
            ],
        );
        assert_status(&output, 1, channels);
        let (property, steps, _) = found(&json(&output));
        assert_eq!(property, "diverged", "{channels}: {steps:?}");
    }
}

/// The correct Python receiver with one bug put in from outside: a duplicate rewrites
/// card-8's state at its version, whichever card it names.
const DUPLICATE_TOUCHES_A_CARD: &str = "right = rx.Store.audit
def audit(self, kind, *rest):
    right(self, kind, *rest)
    if kind == 'duplicate':
        self.db.execute('UPDATE cards SET state=? WHERE object_id=?', ('{\"touched\":true}', 'card-8'))
rx.Store.audit = audit
";

/// Found by review: a duplicate that rewrites a card at its version was named
/// `version-monotonic`; every world takes the delivery for a duplicate, so the rule it
/// broke is `duplicate-no-effect`.
#[test]
fn a_duplicate_that_rewrites_a_card_at_its_version_is_duplicate_no_effect() {
    let dir = temp_dir("conform-dup-touches");
    let target = patched_target(dir.path(), DUPLICATE_TOUCHES_A_CARD);
    let output = conform(
        "models/b62-15.toml",
        &target,
        &["--no-mutants", "--no-cover", "--walks", "0"],
    );
    assert_status(&output, 1, "a duplicate that touches card-8");
    let (property, steps, _) = found(&json(&output));
    assert_eq!(property, "duplicate-no-effect", "{steps:?}");
}

/// The correct Python receiver with one bug put in from outside: a duplicate is answered
/// with the meaning its record had before a reconciliation re-evaluated it (kept in its
/// `meta` table, so a reset forgets it).
const DUPLICATE_ANSWERS_OLD_MEANING: &str = "right_audit = rx.Store.audit
def audit(self, entry, subject, decision=None, previous=None):
    right_audit(self, entry, subject, decision, previous)
    if entry == 're_evaluated' and self.meta('old:' + subject) is None:
        self.set_meta('old:' + subject, previous)
rx.Store.audit = audit
def old_meaning(self, raw, subject, word):
    old = self.meta('old:' + subject)
    return None if old is None else rx.ack_of(old)
answer_duplicates(old_meaning)
";

/// Found by review: a duplicate answered `held`, the meaning its record had before a
/// reconciliation re-evaluated it to `ignored`, was named `ack-implies-recorded`. Its record
/// is kept; deciding it afresh would not answer `held` either: `diverged`, and the report
/// says why (checked: without the afresh test the same run names `ack-implies-recorded`).
#[test]
fn a_duplicate_answered_with_its_record_s_old_meaning_is_diverged() {
    let dir = temp_dir("conform-dup-old-meaning");
    let target = patched_target(dir.path(), DUPLICATE_ANSWERS_OLD_MEANING);
    let output = conform(
        "models/b62-15.toml",
        &target,
        &[
            "--no-mutants",
            "--no-traces",
            "--no-cover",
            "--walks",
            "1",
            "--seed",
            "2",
        ],
    );
    assert_status(&output, 1, "a duplicate answered with its old meaning");
    let report = json(&output);
    let (property, steps, _) = found(&report);
    assert_eq!(property, "diverged", "{steps:?}");
    let detail = report["failure"]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("protocol section 4"), "{detail}");
}

const ACKS_WITHOUT_FETCHING: &str = "import http.server, json, os, sys
cards = json.load(open(os.path.join(sys.argv[2], 'initial.json')))
class H(http.server.BaseHTTPRequestHandler):
    def answer(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.answer({'cards': cards} if self.path == '/_arrival/state' else {})
    def do_POST(self):
        self.rfile.read(int(self.headers['Content-Length']))
        self.answer({'outcome': 'confirmed'})
http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()";

#[test]
fn a_reconciliation_acknowledged_in_pull_mode_without_a_fetch_is_a_harness_failure() {
    let dir = temp_dir("conform-pull-none");
    let target = pull_target(
        dir.path(),
        &[
            "python3",
            "-c",
            ACKS_WITHOUT_FETCHING,
            "{port}",
            "{data_dir}",
        ],
    );
    // Only the shortest schedule to a confirmed reconciliation, read at the end: the
    // reconciliation is sent whatever the receiver did with the deliveries.
    let file = dir.path().join("plan.json");
    let mut args = vec!["conform", "models/b62-15.toml", "--plan-out"];
    args.extend([
        file.to_str().unwrap(),
        "--no-traces",
        "--no-mutants",
        "--walks",
        "0",
    ]);
    assert_status(&arrival(&args), 0, "--plan-out");
    let mut plan: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    plan["schedules"]
        .as_array_mut()
        .unwrap()
        .retain(|schedule| schedule["origin"] == "cover/reconcile/confirmed");
    std::fs::write(&file, plan.to_string()).unwrap();
    let output = conform(
        "models/b62-15.toml",
        &target,
        &[
            "--plan",
            file.to_str().unwrap(),
            "--observe",
            "end",
            "--channels",
            "cards",
        ],
    );
    assert_status(&output, 3, "a receiver that never fetches");
    let stderr = crate::util::stderr(&output);
    assert!(
        stderr.contains("without fetching GET") && stderr.contains("/cards/card-7"),
        "{stderr}"
    );
}

/// Whether a process is gone (or a zombie nobody reaped yet).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state is the field after the command's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn sigterm_to_arrival_takes_the_receiver_s_process_group_with_it() {
    use std::os::unix::process::ExitStatusExt;
    let dir = temp_dir("conform-sigterm");
    let pids = dir.path().join("pids");
    // The receiver writes its pid (the process group's) and becomes the Python example,
    // its log not in arrival's pipe: nothing ends it when arrival's pipes close.
    let script = format!(
        "echo $$ >> {}; exec python3 examples/receivers/python-sqlite/receiver.py \
         --port {{port}} --data {{data_dir}} 2>/dev/null",
        pids.display()
    );
    let target = target_file(dir.path(), "http", &["sh", "-c", &script]);
    let mut run = std::process::Command::new(crate::util::ARRIVAL)
        .args(["conform", "models/b62-15.toml", "--target", &target])
        .args(["--walks", "100000", "--json"])
        .current_dir(root())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("arrival runs");
    let started = std::time::Instant::now();
    while std::fs::read_to_string(&pids).map_or(true, |text| text.lines().count() < 2) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the receiver never started twice"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: kill only sends a signal to the arrival process this test started.
    unsafe {
        libc::kill(run.id() as i32, libc::SIGTERM);
    }
    let status = run.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    let text = std::fs::read_to_string(&pids).unwrap();
    let last: i32 = text.lines().last().unwrap().trim().parse().unwrap();
    let waited = std::time::Instant::now();
    while !gone(last) && waited.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(gone(last), "receiver {last} still runs after arrival ended");
}

/// A receiver that crashes on a request (it commits e-203, then ends before answering,
/// once) is a crash like arrival's own kills: the answer is indefinite, the receiver is
/// started again on its data, and the contract's receiver passes, over HTTP as over JSON
/// lines. It was a harness failure (exit 3) over HTTP.
#[test]
fn a_receiver_that_ends_on_its_own_mid_request_is_restarted_as_after_a_crash() {
    let dir = temp_dir("conform-self-crash");
    let source =
        std::fs::read_to_string(root().join("examples/receivers/python-sqlite/receiver.py"))
            .unwrap();
    let answer = "                self.store.transact(lambda: self.store.deliver(raw, delivery),\n\
                  \x20                                   self.answer_delivery)";
    assert!(
        source.contains(answer),
        "the example receiver's delivery call moved"
    );
    let dying = "                def answer(ack):\n\
                  \x20                   marker = os.path.join(self.store.data_dir, 'died-once')\n\
                  \x20                   if b'\"e-203\"' in raw and not os.path.exists(marker):\n\
                  \x20                       open(marker, 'w').close()\n\
                  \x20                       os._exit(1)\n\
                  \x20                   self.answer_delivery(ack)\n\
                  \x20               self.store.transact(lambda: self.store.deliver(raw, delivery), answer)";
    let receiver = dir.path().join("dies-once.py");
    std::fs::write(&receiver, source.replace(answer, dying)).unwrap();
    let target = format!(
        "http:python3 {} --port {{port}} --data {{data_dir}}",
        receiver.display()
    );
    let output = conform(
        "models/b62-15.toml",
        &target,
        &["--no-traces", "--no-mutants", "--no-cover", "--walks", "3"],
    );
    assert_status(&output, 0, "a receiver that ends on its own once");
    let report = json(&output);
    assert_eq!(report["verdict"], "sampled");
    assert!(
        report["counts"]["indefinite"].as_u64().unwrap() > 0,
        "{report}"
    );
}

/// A receiver whose storage lives outside `{data_dir}` keeps it across schedules, so
/// the second reset is not verified (exit 3); the target file's `reset` command empties it
/// and hands the initial cards over (`{initial}`), and the same receiver passes. A `reset`
/// that is neither a command nor a URL is bad input.
#[test]
fn a_reset_command_resets_a_receiver_whose_storage_is_elsewhere() {
    let dir = temp_dir("conform-reset");
    let storage = dir.path().join("storage");
    let storage = storage.to_str().unwrap();
    let words = [
        "\"python3\"".to_owned(),
        "\"examples/receivers/python-sqlite/receiver.py\"".to_owned(),
        "\"--port\"".to_owned(),
        "\"{port}\"".to_owned(),
        "\"--data\"".to_owned(),
        format!("{storage:?}"),
    ];
    let file = |name: &str, reset: &str| {
        let path = dir.path().join(name);
        let text = format!("kind = \"http\"\ncommand = [{}]\n{reset}", words.join(", "));
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let walks = ["--no-traces", "--no-mutants", "--no-cover", "--walks", "2"];
    // The receiver seeds a new storage from initial.json there.
    std::fs::create_dir_all(storage).unwrap();
    let seed = root().join("fixtures/B62-15-events.json");
    let fixture: Value = serde_json::from_slice(&std::fs::read(seed).unwrap()).unwrap();
    std::fs::write(
        format!("{storage}/initial.json"),
        fixture["initial"].to_string(),
    )
    .unwrap();
    let kept = conform("models/b62-15.toml", &file("kept.toml", ""), &walks);
    assert_status(&kept, 3, "storage outside the data directory, no reset");
    assert!(
        stderr(&kept).contains("reset not verified"),
        "{}",
        stderr(&kept)
    );
    let script = format!("rm -rf {storage} && mkdir -p {storage} && cp {{initial}} {storage}/");
    let reset = format!("reset = [\"sh\", \"-c\", {script:?}]\n");
    let output = conform("models/b62-15.toml", &file("reset.toml", &reset), &walks);
    assert_status(&output, 0, "the same receiver with a reset command");
    assert_eq!(json(&output)["verdict"], "sampled");
    let wrong = conform(
        "models/b62-15.toml",
        &file("wrong.toml", "reset = 3\n"),
        &walks,
    );
    assert_status(&wrong, 2, "a reset that is neither a command nor a URL");
    assert!(stderr(&wrong).contains("reset"), "{}", stderr(&wrong));
}

/// Every record is dropped when the receiver starts again (its cards kept).
const PATCH_FORGETS_RECORDS: &str = "right_init = rx.Store._initialise
def _initialise(self):
    right_init(self)
    self.db.execute('DELETE FROM records')
rx.Store._initialise = _initialise
";

/// Inputs held because their card is unknown are left out of the unresolved report
/// (review F4: a state channel that does not show a kind of hold).
const PATCH_HIDES_UNKNOWN_CARD_HOLDS: &str = "right_unresolved = rx.Store.unresolved
def unresolved(self):
    cards = {r[0] for r in self.db.execute('SELECT object_id FROM cards')}
    unknown = {r[0] for r in self.db.execute('SELECT input, object_id FROM records').fetchall()
               if r[1] is not None and r[1] not in cards}
    return [name for name in right_unresolved(self) if name not in unknown]
rx.Store.unresolved = unresolved
";

/// Inputs without an event id are left out of the unresolved report.
const PATCH_HIDES_ANONYMOUS: &str = "right_unresolved = rx.Store.unresolved
def unresolved(self):
    return [name for name in right_unresolved(self) if not name.startswith('delivery-')]
rx.Store.unresolved = unresolved
";

/// A decision bug, recorded and committed whole: a version that skips ahead is `stale`.
const PATCH_STALE_ON_A_GAP: &str = "right_rules = rx.Store.rules_4_to_6
def rules_4_to_6(self, env, oid):
    card = self.card(oid)
    v = env.get('object_version')
    if (not card['paused'] and rx.is_valid_version(v) and isinstance(env.get('state'), dict)
            and v > card['version'] + 1):
        return 'stale'
    return right_rules(self, env, oid)
rx.Store.rules_4_to_6 = rules_4_to_6
";

/// A decision bug, recorded and committed whole: `card.deleted` deletes a known card.
const PATCH_DELETES_ON_CARD_DELETED: &str = "right_rules = rx.Store.rules_2_to_6
def rules_2_to_6(self, env):
    oid = env.get('object_id')
    if env.get('type') == 'card.deleted' and isinstance(oid, str) and self.card(oid) is not None:
        self.db.execute('DELETE FROM cards WHERE object_id=?', (oid,))
        return 'applied', None
    return right_rules(self, env)
rx.Store.rules_2_to_6 = rules_2_to_6
";

/// A changed payload kept as the contract says (a held variant, listed unresolved), but
/// its card not paused and the answer `ignored`.
const PATCH_KEEPS_VARIANT_UNPAUSED_ANSWERS_IGNORED: &str = "right_deliver = rx.Store.deliver
def deliver(self, raw, delivery):
    before = {r[0]: r[1] for r in self.db.execute('SELECT object_id, paused FROM cards')}
    word = right_deliver(self, raw, delivery)
    last = self.db.execute('SELECT entry, decision FROM audit ORDER BY rowid DESC LIMIT 1').fetchone()
    if last is not None and last[0] == 'decided' and last[1] == 'conflict_changed_payload':
        for oid, p in before.items():
            self.db.execute('UPDATE cards SET paused=? WHERE object_id=?', (p, oid))
        return 'ignored'
    return word
rx.Store.deliver = deliver
";

/// The unresolved report leaves out holds filed under a paused card, and the state has
/// no `paused` key. Nothing is lost.
const PATCH_HIDES_PAUSED_CARD_HOLDS_AND_PAUSES: &str = "right_unresolved = rx.Store.unresolved
def unresolved(self):
    paused = {r[0] for r in self.db.execute('SELECT object_id FROM cards WHERE paused=1')}
    out = []
    for name in right_unresolved(self):
        rows = self.db.execute(\"SELECT held_under FROM records WHERE input=? AND standing='held'\", (name,)).fetchall()
        if rows and all(r[0] in paused for r in rows):
            continue
        out.append(name)
    return out
rx.Store.unresolved = unresolved
right_state = rx.Store.state
def state(self):
    s = right_state(self)
    del s['paused']
    return s
rx.Store.state = state
";

/// The cards live in an in-memory table; records and the `initialised` flag on disk: a
/// restart starts with no cards at all.
const PATCH_CARDS_IN_MEMORY: &str = "right_init = rx.Store._initialise
def _initialise(self):
    self.db.execute('CREATE TEMP TABLE cards (object_id TEXT PRIMARY KEY, version TEXT NOT NULL,'
                    ' state TEXT NOT NULL, paused INTEGER NOT NULL DEFAULT 0)')
    right_init(self)
rx.Store._initialise = _initialise
";

/// A newer version is applied even to a paused card, and lifts its pause.
const PATCH_APPLY_UNPAUSES: &str = "right_rules = rx.Store.rules_4_to_6
def rules_4_to_6(self, env, oid):
    card = self.card(oid)
    if card['paused']:
        v = env.get('object_version')
        if rx.is_valid_version(v) and isinstance(env.get('state'), dict) and v > card['version']:
            self.db.execute('UPDATE cards SET version=?, state=?, paused=0 WHERE object_id=?',
                            (str(v), rx.canonical(env['state']), oid))
            self.bump('replacements_event')
            return 'applied'
    return right_rules(self, env, oid)
rx.Store.rules_4_to_6 = rules_4_to_6
";

/// A delivery held behind a pause settles the card's earlier held inputs.
const PATCH_NEWEST_HOLD_REPLACES: &str = "newest_held_settles(True)
";

/// A duplicate of a held input settles its hold (and is answered as before).
const PATCH_DUPLICATE_SETTLES_HOLD: &str = "def dup(self, raw, subject, word):
    self.db.execute(\"UPDATE records SET standing='resolved', held_under=NULL\"
                    \" WHERE input=? AND standing='held'\", (subject,))
    return None
answer_duplicates(dup)
";

/// A new input held behind a pause settles every earlier held input, on any card.
const PATCH_NEWEST_HOLD_REPLACES_ALL: &str = "newest_held_settles(False)
";

/// At a start on existing storage every hold is settled and every pause lifted.
const PATCH_SETTLES_AT_START: &str = "right_init = rx.Store._initialise
def _initialise(self):
    right_init(self)
    self.db.execute('UPDATE cards SET paused=0')
    self.db.execute(\"UPDATE records SET standing='resolved', held_under=NULL WHERE standing='held'\")
rx.Store._initialise = _initialise
";

/// Settled records are dropped when the receiver starts again (held ones and cards kept).
const PATCH_FORGETS_SETTLED: &str = "right_init = rx.Store._initialise
def _initialise(self):
    right_init(self)
    self.db.execute(\"DELETE FROM records WHERE standing='settled'\")
rx.Store._initialise = _initialise
";

/// Every record kept, but a duplicate with an event id is answered with what judging its
/// content again on the current cards gives (in a savepoint rolled back: nothing written).
const PATCH_ANSWERS_DUPLICATES_AFRESH: &str = "def afresh(self, raw, subject, word):
    return None if subject.startswith('delivery-') else judged(self, raw)
answer_duplicates(afresh)
";

/// Every record kept, but a duplicate of an input without an event id is answered with
/// what rules 2-6 would decide for its snapshot (nothing written).
const PATCH_ANSWERS_ANONYMOUS_DUPLICATES_BY_RULES_2_TO_6: &str =
    "def afresh(self, raw, subject, word):
    return judged(self, raw) if subject.startswith('delivery-') else None
answer_duplicates(afresh)
";

/// Found by two reviews: the name of a duplicate answered otherwise than its record, or of
/// a hold gone after a kill, follows only what the state shows for certain. A receiver
/// that lost its settled records at a restart decides a duplicate again and shows the new
/// hold: the state changed on a delivery every world takes for a duplicate, and from
/// outside that looks the same as a duplicate never recognised, so `duplicate-no-effect`.
/// One that kept its records but answers as if deciding again, with no crash in the run:
/// `diverged` (was `ack-implies-recorded`). A hold acknowledged and gone after a kill right
/// after its acknowledgement, in one step: `diverged` (the state before was not seen: a
/// receiver that never reports such holds looks the same). A hold the last read showed and
/// gone after a restart: `ack-implies-recorded` (was `diverged`). A hold of a kind no read
/// has shown, acknowledged and missing after a kill right after its acknowledgement:
/// `diverged`, since a target that leaves such holds out of its report looks the same
/// (was `ack-implies-recorded`).
#[test]
fn a_duplicate_s_wrong_answer_or_a_lost_hold_is_named_by_what_the_state_shows() {
    const B62: &str = "models/b62-15.toml";
    const MIXED: &str = "tests/inputs/review-mixed-kinds.toml";
    const EVERY: &str = "models/every-decision.toml";
    let cases: [(&str, &str, Value, &str); 28] = [
        (
            B62,
            PATCH_FORGETS_SETTLED,
            serde_json::json!([{"deliver": 3}, {"restart": true}, {"deliver": 4},
                {"deliver": 6}, {"deliver": 3, "duplicate": true}]),
            "duplicate-no-effect",
        ),
        (
            B62,
            PATCH_ANSWERS_DUPLICATES_AFRESH,
            serde_json::json!([{"deliver": 3}, {"deliver": 4}, {"deliver": 6},
                {"deliver": 3, "duplicate": true}]),
            "diverged",
        ),
        (
            B62,
            PATCH_FORGETS_RECORDS,
            serde_json::json!([{"deliver": 9, "kill_after_ack": true}]),
            "diverged",
        ),
        (
            B62,
            PATCH_FORGETS_RECORDS,
            serde_json::json!([{"deliver": 9}, {"restart": true}]),
            "ack-implies-recorded",
        ),
        (
            B62,
            PATCH_FORGETS_RECORDS,
            serde_json::json!([{"deliver": 8}, {"deliver": 10}, {"restart": true}]),
            "ack-implies-recorded",
        ),
        (
            B62,
            PATCH_HIDES_UNKNOWN_CARD_HOLDS,
            serde_json::json!([{"deliver": 8, "kill_after_ack": true}, {"deliver": 3}]),
            "diverged",
        ),
        // Third review: a kill before the identity was first sent, or after this answer,
        // cannot have lost its record (F1).
        (
            B62,
            PATCH_ANSWERS_DUPLICATES_AFRESH,
            serde_json::json!([{"deliver": 1}, {"deliver": 2, "kill_after_ack": true}]),
            "diverged",
        ),
        (
            B62,
            PATCH_ANSWERS_DUPLICATES_AFRESH,
            serde_json::json!([{"deliver": 3, "kill_after_ack": true}, {"deliver": 1},
                {"deliver": 2}]),
            "diverged",
        ),
        (
            B62,
            PATCH_ANSWERS_DUPLICATES_AFRESH,
            serde_json::json!([{"restart": true}, {"deliver": 1}, {"deliver": 2}]),
            "diverged",
        ),
        // A report that hides holds by a condition, not by kind: a kind shown once proves
        // nothing about the next hold (F2).
        (
            MIXED,
            PATCH_HIDES_UNKNOWN_CARD_HOLDS,
            serde_json::json!([{"deliver": 1}, {"deliver": 2, "kill_after_ack": true}]),
            "diverged",
        ),
        (
            MIXED,
            PATCH_HIDES_ANONYMOUS,
            serde_json::json!([{"deliver": 3}, {"deliver": 4, "kill_after_ack": true}]),
            "diverged",
        ),
        // A wrong decision recorded whole, then a kill: not a lost one (F3, F4).
        (
            B62,
            PATCH_STALE_ON_A_GAP,
            serde_json::json!([{"deliver": 4, "kill_after_ack": true}]),
            "diverged",
        ),
        (
            EVERY,
            PATCH_DELETES_ON_CARD_DELETED,
            serde_json::json!([{"deliver": 5, "kill_after_ack": true}]),
            "diverged",
        ),
        (
            EVERY,
            PATCH_DELETES_ON_CARD_DELETED,
            serde_json::json!([{"deliver": 5, "disconnect": true}]),
            "diverged",
        ),
        // The effect stored and its unresolved input not shown, after a kill in flight
        // that lands after the commit: lost, or left out of the report (F5).
        (
            EVERY,
            PATCH_HIDES_ANONYMOUS,
            serde_json::json!({"kill_window_ms": 100, "actions": [{"deliver": 6, "kill": true}]}),
            "diverged",
        ),
        // Fourth review: a variant the state lists unresolved is kept, whatever else is
        // wrong (N1); a hold missing with only unread channels changed is not named (N2);
        // cards gone at a restart are lost, whatever earlier reads showed (N4).
        (
            B62,
            PATCH_KEEPS_VARIANT_UNPAUSED_ANSWERS_IGNORED,
            serde_json::json!([{"deliver": 4}, {"deliver": 6}]),
            "diverged",
        ),
        (
            B62,
            PATCH_HIDES_PAUSED_CARD_HOLDS_AND_PAUSES,
            serde_json::json!([{"deliver": 9, "kill_after_ack": true}]),
            "diverged",
        ),
        // The documented limit: with a crash since the input was first sent, a kept record
        // answered as if decided again looks like a lost one.
        (
            B62,
            PATCH_ANSWERS_DUPLICATES_AFRESH,
            serde_json::json!([{"deliver": 1, "kill_after_ack": true}, {"deliver": 2}]),
            "ack-implies-recorded",
        ),
        (
            B62,
            PATCH_CARDS_IN_MEMORY,
            serde_json::json!([{"deliver": 1}, {"restart": true}]),
            "ack-implies-recorded",
        ),
        // Fifth review: a pause lifted or a hold settled by the step's own wrong decision,
        // with a kill after it, is that decision's doing, not a loss (G1, G3).
        (
            B62,
            PATCH_APPLY_UNPAUSES,
            serde_json::json!([{"deliver": 9}, {"deliver": 10, "kill_after_ack": true}]),
            "paused-frozen",
        ),
        (
            B62,
            PATCH_NEWEST_HOLD_REPLACES,
            serde_json::json!([{"deliver": 9}, {"deliver": 10, "kill_after_ack": true}]),
            "diverged",
        ),
        // Sixth and seventh reviews: after a delivery with a kill, a hold or pause gone may
        // be the decision's doing (a duplicate that settles its hold, W1; a hold that settles
        // every other, X1) or lost at the kill (holds settled at every start, A1, S2); all
        // look the same, so none is named. Without the kill W1 is duplicate-no-effect, and
        // a restart still names A1's loss.
        (
            B62,
            PATCH_DUPLICATE_SETTLES_HOLD,
            serde_json::json!([{"deliver": 9}, {"deliver": 9, "kill_after_ack": true}]),
            "diverged",
        ),
        (
            B62,
            PATCH_DUPLICATE_SETTLES_HOLD,
            serde_json::json!([{"deliver": 9}, {"deliver": 9}]),
            "duplicate-no-effect",
        ),
        (
            B62,
            PATCH_NEWEST_HOLD_REPLACES_ALL,
            serde_json::json!([{"deliver": 8}, {"deliver": 9},
                {"deliver": 10, "kill_after_ack": true}]),
            "diverged",
        ),
        (
            B62,
            PATCH_SETTLES_AT_START,
            serde_json::json!([{"deliver": 9}, {"deliver": 2, "kill_after_ack": true}]),
            "diverged",
        ),
        (
            B62,
            PATCH_SETTLES_AT_START,
            serde_json::json!([{"deliver": 9}, {"deliver": 9, "kill_after_ack": true}]),
            "diverged",
        ),
        (
            B62,
            PATCH_SETTLES_AT_START,
            serde_json::json!([{"deliver": 9}, {"restart": true}]),
            "ack-implies-recorded",
        ),
        // An input without an event id is held whenever it is decided: a duplicate of one
        // answered as rules 2-6 would decide its snapshot is no lost record.
        (
            "models/anonymous-twice.toml",
            PATCH_ANSWERS_ANONYMOUS_DUPLICATES_BY_RULES_2_TO_6,
            serde_json::json!([{"deliver": 1}, {"reconcile": "card-3"},
                {"deliver": 1, "duplicate": true}]),
            "diverged",
        ),
    ];
    let dir = temp_dir("conform-named-by-state");
    let plan = dir.path().join("plan.json");
    let mut seen = Vec::new();
    for (model, patch, actions, _) in &cases {
        let written = arrival(&[
            "conform",
            model,
            "--plan-out",
            plan.to_str().unwrap(),
            "--no-traces",
            "--no-mutants",
            "--no-cover",
            "--walks",
            "1",
        ]);
        assert_status(&written, 0, "--plan-out");
        let mut file: Value =
            serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
        let actions = match actions.get("actions") {
            Some(inner) => {
                file["kill_window_ms"] = actions["kill_window_ms"].clone();
                inner
            }
            None => actions,
        };
        file["schedules"] = serde_json::json!([{"origin": "test", "actions": actions}]);
        std::fs::write(&plan, file.to_string()).unwrap();
        let target = patched_target(dir.path(), patch);
        let output = conform(
            model,
            &target,
            &[
                "--plan",
                plan.to_str().unwrap(),
                "--shrink-budget",
                "0",
                "--confirm",
                "1",
            ],
        );
        assert_status(&output, 1, &actions.to_string());
        let report = json(&output);
        let hides = [
            PATCH_HIDES_UNKNOWN_CARD_HOLDS,
            PATCH_HIDES_ANONYMOUS,
            PATCH_HIDES_PAUSED_CARD_HOLDS_AND_PAUSES,
        ];
        if hides.contains(patch) && actions.to_string().contains("kill_after_ack") {
            let detail = report["failure"]["detail"].as_str().unwrap_or_default();
            let note = "leave such inputs out of its unresolved report; from outside both";
            assert!(detail.contains(note), "{detail}");
        }
        if actions.to_string().contains("disconnect") {
            // Over HTTP, a disconnect is settled by a kill: counted as one.
            assert!(
                report["counts"]["kills"].as_u64() >= Some(1),
                "{}",
                report["counts"]
            );
        }
        seen.push(found(&report).0);
    }
    let want: Vec<&str> = cases.iter().map(|case| case.3).collect();
    assert_eq!(seen, want);
}
