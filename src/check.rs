//! `arrival check`: model files, checker runs, verdicts and their reports.
//!
//! A model file (TOML, in `models/`) pairs a fixture with fault budgets, a reconciliation
//! mode, a policy, a search strategy and the expected verdict, the way TLC pairs a spec with
//! a `.cfg`. A run explores the model exhaustively (or up to its state limit), reports each
//! property's status and the decision coverage, and compares the verdict with the
//! expectation. For each violated property it runs a second, single-threaded BFS checking
//! only that property: with one property stateright 0.31 stops at the first violation,
//! which BFS finds on a shortest path (with several open properties 0.31 keeps overwriting
//! discoveries with longer paths).

use crate::fixture::{InputError, Scenario};
use crate::model::{ReceiverModel, Reconciliation};
use crate::network::{Budgets, DeliveryBudgets, Step, World};
use crate::policy::PolicyName;
use crate::properties::{Properties, Property};
use crate::trace;
use serde::{Deserialize, Serialize};
use stateright::{Checker, Model};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the checker walks the state space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Breadth first: shortest counterexamples, more memory.
    #[default]
    Bfs,
    /// Depth first: little memory.
    Dfs,
}

fn default_threads() -> usize {
    1
}

fn default_reconciliation() -> Reconciliation {
    Reconciliation::Interleaved
}

fn default_policy() -> String {
    "spec".into()
}

/// A model file as written.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    /// What the scenario checks.
    #[serde(default)]
    pub description: Option<String>,
    /// The fixture, relative to the model file.
    pub fixture: String,
    /// Extra copies the network may make, in all (D).
    #[serde(default)]
    pub duplicates: u8,
    /// Acknowledgements that may be lost, in all (L).
    #[serde(default)]
    pub lost_acks: u8,
    /// Crashes before record, in all (C).
    #[serde(default)]
    pub crashes: u8,
    /// Times the retention window may pass, in all (E): each time, every event id whose
    /// records are all settled is forgotten.
    #[serde(default)]
    pub expiries: u8,
    /// `interleaved` or `end`.
    #[serde(default = "default_reconciliation")]
    pub reconciliation: Reconciliation,
    /// `spec` or a mutant's name.
    #[serde(default = "default_policy")]
    pub policy: String,
    /// `bfs` or `dfs`.
    #[serde(default)]
    pub strategy: Strategy,
    /// Checker threads.
    #[serde(default = "default_threads")]
    pub threads: usize,
    /// Stop after about this many states (the verdict is then `incomplete`).
    #[serde(default)]
    pub state_limit: Option<usize>,
    /// Check independent parts of the fixture one by one (see `independence`).
    #[serde(default)]
    pub split: bool,
    /// Budgets of single deliveries, by delivery number (`[per_delivery]` then
    /// `6 = { duplicates = 1 }`). When given, faults hit only the listed deliveries, each
    /// within its own budget; the totals above still apply.
    #[serde(default)]
    pub per_delivery: Option<BTreeMap<String, DeliveryBudget>>,
    /// The properties to check; SPEC's nine when absent. `redelivery-recognised` is only
    /// checked when listed.
    #[serde(default)]
    pub properties: Option<Vec<String>>,
    /// `pass`, or the name of the property that must be violated.
    pub expect: String,
}

/// One delivery's fault budget in a model file.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryBudget {
    /// Network copies of this delivery.
    #[serde(default)]
    pub duplicates: u8,
    /// Lost acknowledgements of this delivery.
    #[serde(default)]
    pub lost_acks: u8,
    /// Crashes while this delivery is being decided.
    #[serde(default)]
    pub crashes: u8,
}

/// What a model file expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expectation {
    /// Every property holds, exhaustively.
    Pass,
    /// This property is violated.
    Violates(Property),
}

impl Expectation {
    fn name(self) -> String {
        match self {
            Expectation::Pass => "pass".into(),
            Expectation::Violates(property) => property.name().into(),
        }
    }
}

/// A model file, loaded with its fixture.
#[derive(Clone, Debug)]
pub struct LoadedModel {
    /// The model file.
    pub path: PathBuf,
    /// As written.
    pub file: ModelFile,
    /// The fixture.
    pub scenario: Arc<Scenario>,
    /// The policy in force (the file's, or the command line's).
    pub policy: PolicyName,
    /// The expected verdict.
    pub expectation: Expectation,
    /// The properties checked.
    pub checked: Properties,
    /// Per-delivery budgets by delivery number, if the file gives them.
    pub per_delivery: Option<BTreeMap<u32, Budgets>>,
}

/// Reads a model file and its fixture; `policy` overrides the file's policy.
pub fn load_model(path: &Path, policy: Option<PolicyName>) -> Result<LoadedModel, InputError> {
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Io {
        file: path.to_owned(),
        source,
    })?;
    let file: ModelFile = toml::from_str(&text).map_err(|error| {
        let place = match error.span() {
            Some(span) => {
                let start = span.start.min(text.len());
                let before = &text[..start];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |at| at + 1) + 1;
                // Name the key when the error sits on one `key = value` line.
                let line_start = before.rfind('\n').map_or(0, |at| at + 1);
                let line_text = text[line_start..].lines().next().unwrap_or("");
                let on_one_line = !text[start..span.end.min(text.len())].contains('\n');
                match line_text.split_once('=') {
                    Some((key, _)) if on_one_line && !key.trim().is_empty() => {
                        format!("line {line}:{column} (key `{}`)", key.trim())
                    }
                    // A missing key is reported over the whole table.
                    _ if start == 0 && !on_one_line => "top level".into(),
                    _ => format!("line {line}:{column}"),
                }
            }
            None => "model file".into(),
        };
        // toml's syntax messages run over two lines ("invalid string\nexpected ...").
        let message = crate::fixture::plain_types(error.message().trim()).replace('\n', "; ");
        let message = if text.parse::<toml::Table>().is_err() {
            format!("not valid TOML: {message}")
        } else {
            message
        };
        InputError::invalid(path, place, message)
    })?;
    let file_policy: PolicyName = file
        .policy
        .parse()
        .map_err(|message| InputError::invalid(path, "policy", message))?;
    let expectation = match file.expect.as_str() {
        "pass" => Expectation::Pass,
        name => Expectation::Violates(name.parse().map_err(|message: String| {
            InputError::invalid(path, "expect", format!("{message}, or `pass`"))
        })?),
    };
    let checked = match &file.properties {
        None => Properties::SPEC,
        Some(names) if names.is_empty() => {
            return Err(InputError::invalid(
                path,
                "properties",
                "lists no property; leave it out to check SPEC's nine",
            ))
        }
        Some(names) => names
            .iter()
            .map(|name| name.parse::<Property>())
            .collect::<Result<Properties, String>>()
            .map_err(|message| InputError::invalid(path, "properties", message))?,
    };
    if let Expectation::Violates(property) = expectation {
        if !checked.contains(property) {
            return Err(InputError::invalid(
                path,
                "expect",
                format!("`{property}` is not among the checked `properties`"),
            ));
        }
    }
    let per_delivery = match &file.per_delivery {
        None => None,
        Some(table) => {
            let mut budgets = BTreeMap::new();
            for (key, budget) in table {
                let place = format!("per_delivery.{key}");
                let number: u32 = key.parse().map_err(|_| {
                    InputError::invalid(path, place.as_str(), "the key must be a delivery number")
                })?;
                budgets.insert(
                    number,
                    Budgets {
                        duplicates: budget.duplicates,
                        lost_acks: budget.lost_acks,
                        crashes: budget.crashes,
                        expiries: 0,
                    },
                );
            }
            Some(budgets)
        }
    };
    if file.threads == 0 {
        return Err(InputError::invalid(path, "threads", "must be at least 1"));
    }
    let fixture_path = path.parent().unwrap_or(Path::new(".")).join(&file.fixture);
    // Name the model file and its `fixture` key, then what is wrong with the fixture.
    let scenario = Scenario::load(&fixture_path).map_err(|error| match error {
        InputError::Io { file, source } => InputError::invalid(
            path,
            "fixture",
            format!("cannot read {}: {source}", file.display()),
        ),
        invalid @ InputError::Invalid { .. } => {
            InputError::invalid(path, "fixture", format!("bad fixture: {invalid}"))
        }
    })?;
    if let Some(budgets) = &per_delivery {
        if let Some(number) = budgets
            .keys()
            .find(|&&number| scenario.delivery_index(number).is_none())
        {
            return Err(InputError::invalid(
                path,
                format!("per_delivery.{number}"),
                format!("the fixture has no delivery {number}"),
            ));
        }
    }
    Ok(LoadedModel {
        path: path.to_owned(),
        policy: policy.unwrap_or(file_policy),
        expectation,
        checked,
        per_delivery,
        scenario: Arc::new(scenario),
        file,
    })
}

/// A property's result in a run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PropertyReport {
    /// Its name.
    pub name: String,
    /// `always` for safety and convergence, `sometimes` for decision coverage.
    pub kind: String,
    /// `holds`, `violated`, `unknown` (state limit hit), `not checked` / `reached`,
    /// `unreached`.
    pub status: String,
    /// For a violation: the shortest counterexample found.
    pub trace: Option<TraceReport>,
    /// For a violated precondition: what is wrong with the fixture, in domain terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A counterexample.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TraceReport {
    /// The steps in domain terms.
    pub steps: Vec<String>,
    /// The fixture it was written to, with `--trace-out`.
    pub fixture: Option<String>,
    /// The step table, as replay prints it under the checked policy.
    pub table: String,
}

/// One model's result.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ModelReport {
    /// The model file.
    pub model: String,
    /// The fixture.
    pub fixture: String,
    /// The policy checked.
    pub policy: String,
    /// `pass`, `fail`, or `incomplete` (state limit hit with nothing violated).
    pub verdict: String,
    /// What the model file expects.
    pub expected: String,
    /// Whether the verdict is the expected one.
    pub as_expected: bool,
    /// The violated properties.
    pub violated: Vec<String>,
    /// How many independent parts were checked (1 unless the model file says `split`).
    pub parts: usize,
    /// States generated, repeats included.
    pub states: usize,
    /// Distinct states.
    pub unique_states: usize,
    /// Longest path explored (states, initial included).
    pub max_depth: usize,
    /// Wall time of the main run.
    pub seconds: f64,
    /// States generated per second.
    pub states_per_second: f64,
    /// Estimated heap and inline bytes of one state of this model.
    pub bytes_per_state: usize,
    /// Peak resident memory of this process so far, in MiB (Linux).
    pub peak_rss_mib: Option<f64>,
    /// Every property's status.
    pub properties: Vec<PropertyReport>,
    /// How many explored transitions met each decision kind and reconciliation outcome.
    pub coverage: BTreeMap<String, u64>,
}

/// How `check` runs.
#[derive(Clone, Debug, Default)]
pub struct CheckOptions {
    /// Write counterexamples as fixtures here.
    pub trace_out: Option<PathBuf>,
    /// Print progress on stderr.
    pub progress: bool,
}

/// The model a loaded model file describes, checking the given properties.
pub fn build_model(loaded: &LoadedModel, checked: Properties) -> ReceiverModel {
    let budgets = Budgets {
        duplicates: loaded.file.duplicates,
        lost_acks: loaded.file.lost_acks,
        crashes: loaded.file.crashes,
        expiries: loaded.file.expiries,
    };
    let mut model = ReceiverModel::new(
        Arc::clone(&loaded.scenario),
        loaded.policy.0,
        budgets,
        loaded.file.reconciliation,
    );
    model.checked = checked;
    if let Some(per_delivery) = &loaded.per_delivery {
        // By index in this (possibly split) scenario; deliveries of other parts drop out.
        model.per_delivery = DeliveryBudgets::only(
            per_delivery
                .iter()
                .filter_map(|(&number, &budget)| {
                    loaded
                        .scenario
                        .delivery_index(number)
                        .map(|index| (index, budget))
                })
                .collect(),
        );
    }
    model
}

struct Run {
    states: usize,
    unique_states: usize,
    max_depth: usize,
    seconds: f64,
    discoveries: BTreeMap<String, Vec<Step>>,
}

fn drive<C: Checker<ReceiverModel> + Sync>(mut checker: C, label: &str, progress: bool) -> Run {
    let start = Instant::now();
    let handles = checker.handles();
    let finished = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let checker = &checker;
        let finished = &finished;
        if progress {
            scope.spawn(move || {
                let mut last = Instant::now();
                while !finished.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    if last.elapsed() >= Duration::from_secs(2) {
                        last = Instant::now();
                        let seconds = start.elapsed().as_secs_f64();
                        let states = checker.state_count();
                        eprintln!(
                            "  {label}: {states} states, {} unique, depth {}, {:.0} states/s, {seconds:.0} s",
                            checker.unique_state_count(),
                            checker.max_depth(),
                            states as f64 / seconds,
                        );
                    }
                }
            });
        }
        for handle in handles {
            handle.join().expect("checker thread panicked");
        }
        finished.store(true, Ordering::Relaxed);
    });
    let discoveries = checker
        .discoveries()
        .into_iter()
        .map(|(name, path)| (name.to_owned(), path.into_actions()))
        .collect();
    Run {
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        seconds: start.elapsed().as_secs_f64(),
        discoveries,
    }
}

fn explore(
    model: ReceiverModel,
    strategy: Strategy,
    threads: usize,
    limit: Option<usize>,
    label: &str,
    progress: bool,
) -> Run {
    let mut builder = model.checker().threads(threads);
    if let Some(limit) = limit {
        builder = builder.target_state_count(limit);
    }
    match strategy {
        Strategy::Bfs => drive(builder.spawn_bfs(), label, progress),
        Strategy::Dfs => drive(builder.spawn_dfs(), label, progress),
    }
}

/// Checks one model file.
pub fn run(loaded: &LoadedModel, options: &CheckOptions) -> Result<ModelReport, InputError> {
    if loaded.checked.contains(Property::AuthorityCurrent) {
        if let Some(behind) = crate::properties::authority_behind(&loaded.scenario) {
            return Ok(precondition_failed(
                loaded,
                behind.describe(&loaded.scenario),
            ));
        }
    }
    let parts: Vec<LoadedModel> = if loaded.file.split {
        crate::independence::split(&loaded.scenario)?
            .into_iter()
            .map(|scenario| LoadedModel {
                scenario: Arc::new(scenario),
                ..loaded.clone()
            })
            .collect()
    } else {
        vec![loaded.clone()]
    };
    let label = loaded.path.display().to_string();
    let file = &loaded.file;
    let mut totals = Run {
        states: 0,
        unique_states: 0,
        max_depth: 0,
        seconds: 0.0,
        discoveries: BTreeMap::new(),
    };
    let mut complete = true;
    let mut coverage: BTreeMap<String, u64> = BTreeMap::new();
    // For each violated property, the part where it was found.
    let mut found_in: BTreeMap<String, usize> = BTreeMap::new();
    for (index, part) in parts.iter().enumerate() {
        let model = build_model(part, loaded.checked);
        let counts = Arc::clone(&model.coverage);
        let main = explore(
            model,
            file.strategy,
            file.threads,
            file.state_limit,
            &label,
            options.progress,
        );
        complete &= file.state_limit.is_none_or(|limit| main.states < limit);
        totals.states += main.states;
        totals.unique_states += main.unique_states;
        totals.max_depth = totals.max_depth.max(main.max_depth);
        totals.seconds += main.seconds;
        for (name, steps) in main.discoveries {
            found_in.entry(name.clone()).or_insert(index);
            totals.discoveries.entry(name).or_insert(steps);
        }
        for (name, count) in counts.counts() {
            *coverage.entry(name.to_owned()).or_default() += count;
        }
    }

    let mut properties = Vec::new();
    let mut violated = Vec::new();
    for property in Property::ALL {
        let found = found_in.get(property.name()).copied();
        let status = match (found, complete) {
            _ if !loaded.checked.contains(property) => "not checked",
            (Some(_), _) => "violated",
            (None, true) => "holds",
            (None, false) => "unknown",
        };
        let trace = match found {
            None => None,
            Some(index) => {
                violated.push(property.name().to_owned());
                // A second run with this property alone finds a shortest counterexample.
                let part = &parts[index];
                let alone = build_model(part, Properties::only(property));
                let shortest = explore(
                    alone,
                    Strategy::Bfs,
                    1,
                    file.state_limit,
                    &label,
                    options.progress,
                );
                let steps = shortest
                    .discoveries
                    .get(property.name())
                    .or_else(|| totals.discoveries.get(property.name()))
                    .cloned()
                    .expect("the property was violated");
                Some(trace::report(
                    part,
                    property,
                    &steps,
                    options.trace_out.as_deref(),
                )?)
            }
        };
        properties.push(PropertyReport {
            name: property.name().into(),
            kind: "always".into(),
            status: status.into(),
            trace,
            detail: None,
        });
    }
    for (name, count) in &coverage {
        properties.push(PropertyReport {
            name: format!("reached-{name}"),
            kind: "sometimes".into(),
            status: if *count > 0 { "reached" } else { "unreached" }.into(),
            trace: None,
            detail: None,
        });
    }
    let verdict = if !violated.is_empty() {
        "fail"
    } else if complete {
        "pass"
    } else {
        "incomplete"
    };
    let as_expected = match loaded.expectation {
        Expectation::Pass => verdict == "pass",
        Expectation::Violates(property) => violated.iter().any(|name| name == property.name()),
    };
    Ok(ModelReport {
        model: label,
        fixture: loaded.scenario.file.display().to_string(),
        policy: loaded.policy.to_string(),
        verdict: verdict.into(),
        expected: loaded.expectation.name(),
        as_expected,
        violated,
        parts: parts.len(),
        states: totals.states,
        unique_states: totals.unique_states,
        max_depth: totals.max_depth,
        seconds: totals.seconds,
        states_per_second: totals.states as f64 / totals.seconds.max(1e-9),
        bytes_per_state: full_state_bytes(&loaded.scenario),
        peak_rss_mib: peak_rss_mib(),
        properties,
        coverage,
    })
}

/// The report of a model whose fixture breaks `authority-current`: no state is explored,
/// since no terminal state could be judged (in some orders the authority is refused and the
/// card stays paused for good, in others not), and every other property is `unknown`.
fn precondition_failed(loaded: &LoadedModel, detail: String) -> ModelReport {
    let properties = Property::ALL
        .into_iter()
        .map(|property| {
            let status = if property == Property::AuthorityCurrent {
                "violated"
            } else if loaded.checked.contains(property) {
                "unknown"
            } else {
                "not checked"
            };
            PropertyReport {
                name: property.name().into(),
                kind: "always".into(),
                status: status.into(),
                trace: None,
                detail: (property == Property::AuthorityCurrent).then(|| detail.clone()),
            }
        })
        .collect();
    let violated = vec![Property::AuthorityCurrent.name().to_owned()];
    ModelReport {
        model: loaded.path.display().to_string(),
        fixture: loaded.scenario.file.display().to_string(),
        policy: loaded.policy.to_string(),
        verdict: "fail".into(),
        expected: loaded.expectation.name(),
        as_expected: loaded.expectation == Expectation::Violates(Property::AuthorityCurrent),
        violated,
        parts: 1,
        states: 0,
        unique_states: 0,
        max_depth: 0,
        seconds: 0.0,
        states_per_second: 0.0,
        bytes_per_state: full_state_bytes(&loaded.scenario),
        peak_rss_mib: peak_rss_mib(),
        properties,
        coverage: BTreeMap::new(),
    }
}

/// The estimated size of a state late in the default order, when the receiver holds the
/// most records.
fn full_state_bytes(scenario: &Scenario) -> usize {
    let start = World::initial(scenario, Budgets::UNLIMITED);
    let steps = crate::replay::schedule(scenario, crate::policy::Spec);
    let end = steps.into_iter().fold(start, |world, step| {
        crate::network::transition(
            scenario,
            crate::policy::Spec,
            Properties::SPEC,
            &world,
            step,
        )
        .0
    });
    end.approx_bytes()
}

/// Peak resident memory of this process (VmHWM), in MiB.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Serves stateright's Explorer for a model on `address` (blocks).
pub fn serve(loaded: &LoadedModel, address: &str) {
    let model = build_model(loaded, loaded.checked);
    model.checker().threads(loaded.file.threads).serve(address);
}

/// Renders one model's result for people.
pub fn render(report: &ModelReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "model {} (fixture {}, policy {})",
        report.model, report.fixture, report.policy
    );
    let _ = writeln!(
        out,
        "  {}{} states, {} unique, max depth {}, {:.2} s, {:.0} states/s, ~{} bytes/state, peak RSS {}",
        if report.parts > 1 { format!("{} parts: ", report.parts) } else { String::new() },
        report.states,
        report.unique_states,
        report.max_depth,
        report.seconds,
        report.states_per_second,
        report.bytes_per_state,
        report
            .peak_rss_mib
            .map_or_else(|| "n/a".into(), |mib| format!("{mib:.0} MiB")),
    );
    for property in report
        .properties
        .iter()
        .filter(|property| property.kind == "always")
    {
        match &property.detail {
            Some(detail) => {
                let _ = writeln!(out, "  {:<24} {}: {detail}", property.name, property.status);
            }
            None => {
                let _ = writeln!(out, "  {:<24} {}", property.name, property.status);
            }
        }
    }
    let reached: Vec<String> = report
        .coverage
        .iter()
        .map(|(name, count)| format!("{name}={count}"))
        .collect();
    // Counted per explored transition, transitions back to a known state included (a
    // redelivery of recorded content is checked, then dropped): not a count of states.
    let _ = writeln!(
        out,
        "  decisions met on explored transitions (repeats included): {}",
        reached.join(" ")
    );
    let unreached: Vec<&str> = report
        .coverage
        .iter()
        .filter(|(_, count)| **count == 0)
        .map(|(name, _)| name.as_str())
        .collect();
    if !unreached.is_empty() {
        let _ = writeln!(out, "  unreached: {}", unreached.join(", "));
    }
    for property in &report.properties {
        if let Some(trace) = &property.trace {
            let _ = writeln!(
                out,
                "\n  counterexample for {} ({} steps):",
                property.name,
                trace.steps.len()
            );
            for (index, step) in trace.steps.iter().enumerate() {
                let _ = writeln!(out, "    {}. {step}", index + 1);
            }
            if let Some(fixture) = &trace.fixture {
                let _ = writeln!(out, "  written to {fixture}");
            }
            for line in trace.table.lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    let verdict = match (report.as_expected, report.expected.as_str()) {
        (true, "pass") => "pass".to_owned(),
        (true, property) => format!("violated as expected ({property})"),
        (false, expected) => format!(
            "{} (expected {expected})  <-- NOT AS EXPECTED",
            report.verdict
        ),
    };
    let _ = writeln!(out, "  verdict: {verdict}");
    out
}
