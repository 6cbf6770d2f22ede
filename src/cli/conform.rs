//! `arrival conform`: a card model (or a fixture's `conform` block) run against a
//! receiver arrival did not write; the flags, then the campaign of
//! [`crate::card::campaign`] on a target from [`crate::conform::target`]. A facts model,
//! fixture or actions file goes to [`crate::facts::campaign`] on a facts target file
//! ([`crate::conform::facts`]).

use super::{pretty_json, print, EnvironmentError, Error, Outcome};
use crate::card::campaign::{self, campaign, Options, Plan};
use crate::card::conform::{Channels, HarnessError, Settings};
use crate::card::fixture::Scenario;
use crate::card::model_file::load_model;
use crate::conform::target::TargetFile;
use crate::facts::campaign as facts_campaign;
use crate::harness::InputError;
use std::path::{Path, PathBuf};

/// `arrival conform`.
#[derive(clap::Args)]
pub struct ConformArgs {
    /// A card model file (`models/b62-15.toml`), or a fixture with a `conform` block
    /// (written by an earlier run) to rerun its actions.
    pub source: PathBuf,
    /// The receiver: a target file (`FILE.toml`), or `http:COMMAND ARGS...` /
    /// `stdio:COMMAND ARGS...` with `{port}` and `{data_dir}` placeholders. Needed to run
    /// schedules; `--plan-out` alone writes the plan without one.
    #[arg(long)]
    pub target: Option<String>,
    /// Write every schedule the run would execute (kept traces, mutants, cover, walks,
    /// each with its origin and actions) to this JSON file; without `--target`, only that.
    #[arg(long, conflicts_with = "plan")]
    pub plan_out: Option<PathBuf>,
    /// Run exactly the schedules of this plan file (written by `--plan-out`, perhaps
    /// edited), in order, and nothing else: no traces, mutants, cover or walks are drawn.
    #[arg(long)]
    pub plan: Option<PathBuf>,
    /// Seeded random walks after the kept traces.
    #[arg(long, default_value_t = 20)]
    pub walks: usize,
    /// The walks' and kill delays' seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Leave out the kept counterexample traces.
    #[arg(long)]
    pub no_traces: bool,
    /// Leave out the mutants' shortest counterexample schedules.
    #[arg(long)]
    pub no_mutants: bool,
    /// Leave out the transition cover (the shortest schedule to each kind of decision,
    /// reconciliation outcome and settlement the contract's receiver takes).
    #[arg(long)]
    pub no_cover: bool,
    /// Add the state cover: the shortest schedule to every state the receiver can show
    /// (cards, paused cards, unresolved inputs) within `--cover-state-limit` worlds, the
    /// schedules another one extends left out.
    #[arg(long)]
    pub state_cover: bool,
    /// The most worlds the transition cover's breadth-first search explores.
    #[arg(long, default_value_t = 10_000)]
    pub cover_state_limit: usize,
    /// The most states the search for one mutant's shortest schedule explores.
    #[arg(long, default_value_t = 50_000)]
    pub mutant_state_limit: usize,
    /// When the state is read: `every-step` (the default) or `end`. A fixture's rerun
    /// keeps the one it was found with.
    #[arg(long)]
    pub observe: Option<String>,
    /// What is compared besides the cards: any of `ack`, `paused`, `unresolved` (comma
    /// separated; the default is all three), or `cards` alone. A fixture's rerun keeps the
    /// ones it was found with.
    #[arg(long)]
    pub channels: Option<String>,
    /// Retries of an owed delivery in the liveness phase.
    #[arg(long, default_value_t = 5)]
    pub max_retries: usize,
    /// Runs the shrinker may spend on a failing schedule.
    #[arg(long, default_value_t = 100)]
    pub shrink_budget: usize,
    /// Reruns that confirm the shrunk schedule (at least 1).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub confirm: u64,
    /// A kill in flight comes up to this many milliseconds after the request is sent.
    #[arg(long, default_value_t = 5)]
    pub kill_window_ms: u64,
    /// `pass`, or the property the receiver must be caught by (default: the target
    /// file's `expect`, else `pass`).
    #[arg(long)]
    pub expect: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the result as JUnit XML (a case per property and a `harness` case).
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Write the shrunk failing schedule as a fixture into this folder.
    #[arg(long)]
    pub trace_out: Option<PathBuf>,
}

fn flag(name: &str, message: String) -> Error {
    InputError::invalid(Path::new(name), "command line", message).into()
}

/// `pass`, `diverged` or the name of a card property a run can name; anything else
/// (a property no observation can pin, which a run would never report) is bad input.
fn check_expect(expect: &str, from_flag: bool, target: &str) -> Result<(), Error> {
    let names = crate::card::conform::NAMEABLE.map(crate::card::property::Property::name);
    check_expect_in(expect, &names, from_flag, target)
}

/// [`check_expect`] for the facts protocol's properties.
fn check_facts_expect(expect: &str, from_flag: bool, target: &str) -> Result<(), Error> {
    let names = crate::facts::conform::NAMEABLE.map(crate::facts::property::Property::name);
    check_expect_in(expect, &names, from_flag, target)
}

fn check_expect_in(
    expect: &str,
    names: &[&str],
    from_flag: bool,
    target: &str,
) -> Result<(), Error> {
    if expect == "pass" || expect == "diverged" || names.contains(&expect) {
        return Ok(());
    }
    let message = format!(
        "`{expect}` is not an expectation: write pass, diverged or a property a run can name ({})",
        names.join(", ")
    );
    Err(if from_flag {
        flag("--expect", message)
    } else {
        InputError::invalid(Path::new(target), "expect", message).into()
    })
}

/// The channels: the flags, else the ones a fixture's `conform` block was found with,
/// else every channel after every step.
fn channels(args: &ConformArgs, found_with: Option<(&str, String)>) -> Result<Channels, Error> {
    let (observe, list) = match found_with {
        Some((observe, list)) => (observe.to_owned(), list),
        None => ("every-step".to_owned(), "ack,paused,unresolved".to_owned()),
    };
    let observe = args.observe.clone().unwrap_or(observe);
    let list = args.channels.clone().unwrap_or(list);
    let every_step = match observe.as_str() {
        "every-step" => true,
        "end" => false,
        other => {
            return Err(flag(
                "--observe",
                format!("`{other}`: one of every-step, end"),
            ));
        }
    };
    let mut chosen = Channels {
        ack: false,
        paused: false,
        unresolved: false,
        every_step,
    };
    let flagged = args.channels.is_some();
    let mut taken: Vec<&str> = Vec::new();
    for word in list.split(',').map(str::trim) {
        if flagged && (word.is_empty() || taken.contains(&word)) {
            let why = match word {
                "" => "an empty name".to_owned(),
                _ => format!("`{word}` twice"),
            };
            return Err(flag(
                "--channels",
                format!(
                    "`{list}` has {why}: name each of cards, ack, paused, unresolved at most \
                     once, comma separated (`cards` alone compares the cards only)"
                ),
            ));
        }
        taken.push(word);
        match word {
            "" | "cards" => {}
            "ack" => chosen.ack = true,
            "paused" => chosen.paused = true,
            "unresolved" => chosen.unresolved = true,
            other => {
                return Err(flag(
                    "--channels",
                    format!("`{other}`: each one of cards, ack, paused, unresolved"),
                ))
            }
        }
    }
    Ok(chosen)
}

/// The scenario, its schedules, what was left out, and (with `--state-cover`) how many
/// states the state cover shows by how many schedules.
type Planned = (
    Scenario,
    Vec<Plan>,
    Vec<String>,
    Option<(usize, usize)>,
    Timing,
);

/// The seed and kill window a plan file or a fixture's `conform` block keeps, which a run
/// of it uses instead of the flags.
type Timing = (Option<u64>, Option<u64>);

/// The scenario and its schedules: a plan file's, else those drawn from the source.
fn plans(args: &ConformArgs) -> Result<Planned, Error> {
    let is_fixture = args.source.extension().is_some_and(|ext| ext == "json");
    if let Some(file) = &args.plan {
        let scenario = if is_fixture {
            Scenario::load(&args.source)?
        } else {
            Scenario::clone(&load_model(&args.source, None)?.scenario)
        };
        let (plans, skipped, timing) = crate::card::plan::load(file, &scenario)?;
        return Ok((scenario, plans, skipped, None, timing));
    }
    if is_fixture {
        let scenario = Scenario::load(&args.source)?;
        let Some(actions) = scenario.conform.clone() else {
            return Err(InputError::invalid(
                &args.source,
                "conform",
                "the fixture has no `conform` block: give a model file, or a fixture written \
                 by `arrival conform --trace-out`",
            )
            .into());
        };
        campaign::opening_allowed(&scenario, &actions)
            .and_then(|()| campaign::copies_follow_their_delivery(&actions))
            .map_err(|(at, message)| {
                InputError::invalid(&args.source, format!("conform.actions[{at}]"), message)
            })?;
        let plan = Plan {
            id: "fixture".into(),
            actions,
        };
        let timing = scenario
            .raw
            .conform
            .as_ref()
            .map_or((None, None), |block| (block.seed, block.kill_window_ms));
        return Ok((scenario, vec![plan], Vec::new(), None, timing));
    }
    let loaded = load_model(&args.source, None)?;
    let scenario = Scenario::clone(&loaded.scenario);
    let mut skipped = Vec::new();
    let mut plans = Vec::new();
    if !args.no_traces {
        let dir = scenario
            .file
            .parent()
            .map_or_else(|| PathBuf::from("regressions"), |p| p.join("regressions"));
        let (traces, left) = campaign::trace_plans(&scenario, &dir, true);
        plans.extend(traces);
        skipped.extend(left);
    }
    if !args.no_mutants {
        let (found, missed) =
            campaign::mutant_plans(&loaded, args.mutant_state_limit, &plans, true);
        plans.extend(found);
        skipped.extend(missed);
    }
    if !args.no_cover {
        let (cover, cut) = campaign::cover_plans(&loaded, args.cover_state_limit, true);
        plans.extend(cover);
        skipped.extend(cut);
    }
    let mut state_cover = None;
    if args.state_cover {
        let (states, shown, cut) =
            campaign::state_cover_plans(&loaded, args.cover_state_limit, true);
        state_cover = Some((shown, states.len()));
        plans.extend(states);
        skipped.extend(cut);
    }
    if loaded.file.expiries > 0 {
        skipped.push("expiry steps: arrival cannot move the receiver's clock".into());
    }
    plans.extend(campaign::walk_plans(&loaded, args.walks, args.seed, true));
    Ok((scenario, plans, skipped, state_cover, (None, None)))
}

/// What a facts source is.
enum FactsSource {
    /// A facts model file.
    Model,
    /// A facts fixture: its own schedule.
    Fixture,
    /// A `*.actions.json` file written by `--trace-out`.
    Rerun,
}

/// Whether `path` is a facts model, fixture or actions file.
fn facts_source(path: &Path) -> Option<FactsSource> {
    let text = std::fs::read_to_string(path).ok()?;
    match path.extension()?.to_str()? {
        "json" if text.contains("\"facts-conform\"") => Some(FactsSource::Rerun),
        "json" if crate::facts::fixture::declares_facts(&text) => Some(FactsSource::Fixture),
        "toml" => {
            let table: toml::Table = text.parse().ok()?;
            let fixture = table.get("fixture")?.as_str()?;
            let fixture = path.parent().unwrap_or(Path::new(".")).join(fixture);
            crate::facts::fixture::is_facts_file(&fixture).then_some(FactsSource::Model)
        }
        _ => None,
    }
}

/// A facts source's scenario, fixture, plans, what was skipped, and (for a rerun) the
/// seed and kill window of the run that wrote it.
type FactsPlans = (
    crate::facts::fixture::Scenario,
    crate::facts::fixture::RawFixture,
    Vec<facts_campaign::Plan>,
    Vec<String>,
    (Option<u64>, Option<u64>),
);

fn facts_plans(args: &ConformArgs, kind: &FactsSource) -> Result<FactsPlans, Error> {
    let source = &args.source;
    if let Some(file) = &args.plan {
        let (scenario, raw) = match kind {
            FactsSource::Model => {
                let loaded = crate::facts::model_file::load_model(source, Some("spec"))?;
                facts_campaign::load_fixture(&loaded.model.scenario.file)?
            }
            FactsSource::Fixture => facts_campaign::load_fixture(source)?,
            FactsSource::Rerun => {
                let (_, scenario, raw) = facts_campaign::load_conform_file(source)?;
                (scenario, raw)
            }
        };
        let (plans, skipped, timing) = crate::facts::plan::load(file, &scenario, &raw)?;
        return Ok((scenario, raw, plans, skipped, timing));
    }
    Ok(match kind {
        FactsSource::Model => {
            let loaded = crate::facts::model_file::load_model(source, Some("spec"))?;
            let scenario = (*loaded.model.scenario).clone();
            let (_, raw) = facts_campaign::load_fixture(&scenario.file)?;
            let mutants = (!args.no_mutants).then_some(args.mutant_state_limit);
            let (mut plans, mut skipped) =
                facts_campaign::model_plans(&loaded, args.walks, args.seed, mutants);
            if !args.no_traces {
                let dir = scenario
                    .file
                    .parent()
                    .map_or_else(|| PathBuf::from("regressions"), |p| p.join("regressions"));
                let (requests, _) = crate::facts::conform::playable(&scenario, 2);
                let (traces, left) = facts_campaign::trace_plans(&raw, &dir, &requests);
                skipped.extend(left);
                // After the fixture's own schedule, before the mutants' and the walks; a
                // schedule met already runs once.
                let mut at = plans.iter().take_while(|plan| plan.id == "fixture").count();
                for trace in traces {
                    match plans.iter().find(|plan| plan.actions == trace.actions) {
                        Some(other) => skipped.push(format!(
                            "{}: the same schedule as {} (run once)",
                            trace.id, other.id
                        )),
                        None => {
                            plans.insert(at, trace);
                            at += 1;
                        }
                    }
                }
            }
            (scenario, raw, plans, skipped, (None, None))
        }
        FactsSource::Fixture => {
            let (scenario, raw) = facts_campaign::load_fixture(source)?;
            let (requests, mut skipped) = crate::facts::conform::playable(&scenario, 2);
            let steps = scenario.schedule.clone().unwrap_or_else(|| {
                requests
                    .iter()
                    .map(|&request| crate::facts::step::Step::Post {
                        request,
                        fault: None,
                    })
                    .collect()
            });
            let mut plans = Vec::new();
            match crate::facts::conform::schedule_actions(&steps, &requests) {
                Ok(actions) => plans.push(facts_campaign::Plan {
                    id: "fixture".into(),
                    actions,
                }),
                Err(why) => skipped.push(format!("the fixture's schedule: {why}")),
            }
            plans.extend(facts_campaign::walk_plans(
                &requests,
                facts_campaign::FIXTURE_WALKS,
                args.walks,
                args.seed,
            ));
            (scenario, raw, plans, skipped, (None, None))
        }
        FactsSource::Rerun => {
            let (file, scenario, raw) = facts_campaign::load_conform_file(source)?;
            let timing = (file.seed, file.kill_window_ms);
            let plan = facts_campaign::Plan {
                id: "rerun".into(),
                actions: file.actions,
            };
            (scenario, raw, vec![plan], Vec::new(), timing)
        }
    })
}

/// Writes the plan file of `--plan-out`, with the seed and kill window its schedules run
/// with: those the source keeps (a fixture's `conform` block, a plan file), else the flags'.
fn write_plan(
    args: &ConformArgs,
    file: &Path,
    (scenario, plans, skipped): (&Scenario, &[Plan], &[String]),
    (seed, window): Timing,
) -> Result<(), Error> {
    let timing = (
        Some(seed.unwrap_or(args.seed)),
        Some(window.unwrap_or(args.kill_window_ms)),
    );
    let source = args.source.display().to_string();
    let plan = crate::card::plan::plan_file(scenario, &source, timing, plans, skipped);
    std::fs::write(file, pretty_json(&plan)).map_err(|source| InputError::Write {
        file: file.to_owned(),
        source,
    })?;
    Ok(())
}

/// With `--json`, a harness failure is a document too (`verdict: harness_failure`, what
/// failed and how), so a JSON reader gets one on exit 3 as on 0 and 1.
fn harness_json(args: &ConformArgs, source: &str, target: &str, what: &str, message: &str) {
    if args.json {
        let document = serde_json::json!({
            "source": source,
            "target": target,
            "verdict": "harness_failure",
            "harness": {"what": what, "message": message},
        });
        print(&format!("{}\n", pretty_json(&document)));
    }
}

/// `--target`, which running schedules needs.
fn need_target(args: &ConformArgs) -> Result<&str, Error> {
    args.target.as_deref().ok_or_else(|| {
        flag(
            "--target",
            "missing: name the receiver to run the schedules against (only `--plan-out` \
             works without one)"
                .into(),
        )
    })
}

/// Writes the facts plan file of `--plan-out`.
fn write_facts_plan(args: &ConformArgs, file: &Path, planned: &FactsPlans) -> Result<(), Error> {
    let (scenario, raw, plans, skipped, _) = planned;
    let timing = (Some(args.seed), Some(args.kill_window_ms));
    let source = args.source.display().to_string();
    let fixture = (raw, scenario.file.as_path());
    let plan = crate::facts::plan::plan_file(fixture, &source, timing, plans, skipped);
    std::fs::write(file, pretty_json(&plan)).map_err(|source| InputError::Write {
        file: file.to_owned(),
        source,
    })?;
    Ok(())
}

/// `arrival conform` on a facts source: a facts target file, the facts campaign.
fn run_facts(args: &ConformArgs, kind: &FactsSource) -> Outcome {
    use crate::conform::facts::{FactsTargetFile, HttpFactsTarget};
    if let (Some(file), None) = (&args.plan_out, &args.target) {
        // The plan alone: nothing runs.
        let planned = facts_plans(args, kind)?;
        write_facts_plan(args, file, &planned)?;
        print(&format!(
            "plan: {} schedules on facts fixture {} written to {}\n",
            planned.2.len(),
            planned.0.file.display(),
            file.display()
        ));
        return Ok(true);
    }
    let target_name = need_target(args)?;
    if !FactsTargetFile::is_facts_target(target_name) {
        return Err(flag(
            "--target",
            format!(
                "`{}`: a facts model needs a facts target file (FILE.toml with \
                 `protocol = \"facts\"`, see docs/conform.md)",
                target_name
            ),
        ));
    }
    let exe = std::env::current_exe()
        .map_err(|error| EnvironmentError::new("this program's path", error))?;
    let file = FactsTargetFile::load(Path::new(target_name), &exe)?;
    let expect = args.expect.clone().unwrap_or(file.expect.clone());
    check_facts_expect(&expect, args.expect.is_some(), target_name)?;
    let every_step = channels(args, None)?.every_step;
    let planned = facts_plans(args, kind)?;
    if let Some(file) = &args.plan_out {
        write_facts_plan(args, file, &planned)?;
    }
    let (scenario, raw, plans, skipped, (seed, window)) = planned;
    // A rerun or a plan times its kills as the run that wrote it did.
    let options = facts_campaign::Options {
        settings: facts_campaign::Settings {
            every_step,
            kill_window_ms: window.unwrap_or(args.kill_window_ms),
            seed: seed.unwrap_or(args.seed),
        },
        shrink_budget: args.shrink_budget,
        confirm: args.confirm as usize,
        target: target_name.to_owned(),
        source: args.source.display().to_string(),
    };
    let harness_failed = |error: facts_campaign::TargetError| -> Error {
        if let Some(file) = &args.junit {
            let suite = crate::harness::junit::ExtraSuite {
                skipped: Vec::new(),
                name: format!("conform {} against {}", options.source, options.target),
                cases: vec![("harness".into(), Some(error.to_string()))],
                seconds: 0.0,
            };
            let _ = crate::harness::junit::write_suite(file, &suite);
        }
        harness_json(
            args,
            &options.source,
            &options.target,
            &error.what,
            &error.message,
        );
        EnvironmentError::new(error.what, error.message).into()
    };
    let target_fixture = crate::facts::conform::target_fixture(&raw);
    let mut target = HttpFactsTarget::new(file).map_err(harness_failed)?;
    let mut report =
        facts_campaign::campaign(&scenario, &target_fixture, &plans, &mut target, &options)
            .map_err(harness_failed)?;
    report.skipped = skipped;
    drop(target);
    if let (Some(found), Some(dir)) = (&report.failure, &args.trace_out) {
        let stem = args
            .source
            .file_stem()
            .map_or_else(|| "conform".into(), |s| s.to_string_lossy().into_owned());
        let stem = stem.trim_end_matches(".actions").to_owned();
        let name = format!("{stem}.conform.{}.json", found.property);
        let fixture = facts_campaign::failure_fixture(&raw, found, &options.source);
        let actions = facts_campaign::ConformFile {
            protocol: "facts-conform".into(),
            fixture: name.clone(),
            model: options.source.clone(),
            target: options.target.clone(),
            property: found.property.clone(),
            found_by: found.found_by.clone(),
            reproduced: found.reproduced.clone(),
            actions: found.actions.clone(),
            seed: Some(options.settings.seed),
            kill_window_ms: Some(options.settings.kill_window_ms),
        };
        let actions_file = dir.join(format!("{stem}.conform.{}.actions.json", found.property));
        for (file, text) in [
            (dir.join(&name), pretty_json(&fixture)),
            (actions_file, pretty_json(&actions)),
        ] {
            std::fs::create_dir_all(dir)
                .and_then(|_| std::fs::write(&file, text))
                .map_err(|source| InputError::Write { file, source })?;
        }
    }
    if let Some(file) = &args.junit {
        crate::harness::junit::write_suite(file, &report.junit(&expect))?;
    }
    if args.json {
        let mut value = serde_json::to_value(&report).expect("reports serialise");
        value["expect"] = serde_json::json!(expect);
        value["as_expected"] = serde_json::json!(report.as_expected(&expect));
        print(&pretty_json(&value));
    } else {
        print(&format!("{}\nexpected: {expect}\n", report.text()));
    }
    Ok(report.as_expected(&expect))
}

/// `--trace-out`: the failure's fixture `DIR/MODEL.conform.PROPERTY.json` and its sequence
/// diagram beside it.
fn write_found(source: &Path, dir: &Path, found: &campaign::Found) -> Result<(), Error> {
    // A rerun of a written fixture keeps its name: MODEL.conform.PROPERTY stays MODEL.
    let stem = source
        .file_stem()
        .map_or_else(|| "conform".into(), |s| s.to_string_lossy().into_owned());
    let stem = match stem.find(".conform.") {
        Some(at) => stem[..at].to_owned(),
        None => stem,
    };
    let file = dir.join(format!("{stem}.conform.{}.json", found.property));
    std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&file, pretty_json(&found.fixture)))
        .map_err(|source| InputError::Write {
            file: file.clone(),
            source,
        })?;
    // The sequence diagram beside it: STEM.mmd and STEM.svg.
    crate::harness::model_file::write_diagram(&file.to_string_lossy(), &found.diagram)?;
    Ok(())
}

/// Runs the campaign: `Ok(true)` when the result is what `--expect` says.
pub fn run(args: &ConformArgs) -> Outcome {
    // Output paths first: a run that cannot write its results stops before any work.
    if let Some(file) = &args.junit {
        crate::harness::input::writable_file("--junit", file)?;
    }
    if let Some(dir) = &args.trace_out {
        crate::harness::input::writable_dir("--trace-out", dir)?;
    }
    if let Some(file) = &args.plan_out {
        crate::harness::input::writable_file("--plan-out", file)?;
    }
    if let Some(kind) = facts_source(&args.source) {
        return run_facts(args, &kind);
    }
    if let (Some(file), None) = (&args.plan_out, &args.target) {
        // The plan alone: nothing runs, but the flags a run of it would take are checked.
        channels(args, None)?;
        let (scenario, plans, skipped, _, timing) = plans(args)?;
        write_plan(args, file, (&scenario, &plans, &skipped), timing)?;
        print(&format!(
            "plan: {} schedules on fixture {} written to {}\n",
            plans.len(),
            scenario.file.display(),
            file.display()
        ));
        return Ok(true);
    }
    let target_name = need_target(args)?;
    let target_file = TargetFile::parse(target_name)?;
    let expect = args.expect.clone().unwrap_or(target_file.expect.clone());
    check_expect(&expect, args.expect.is_some(), target_name)?;
    let (scenario, plans, skipped, state_cover, (seed, window)) = plans(args)?;
    if let Some(file) = &args.plan_out {
        write_plan(args, file, (&scenario, &plans, &skipped), (seed, window))?;
    }
    let found_with = scenario
        .raw
        .conform
        .as_ref()
        .map(|block| (block.observe.as_str(), block.channels.join(",")));
    let chosen = channels(args, found_with)?;
    // A rerun or a plan times its kills as the run that wrote it did.
    let options = Options {
        settings: Settings {
            channels: chosen,
            max_retries: args.max_retries,
            kill_window_ms: window.unwrap_or(args.kill_window_ms),
            seed: seed.unwrap_or(args.seed),
        },
        shrink_budget: args.shrink_budget,
        confirm: args.confirm as usize,
        target: target_name.to_owned(),
        source: args.source.display().to_string(),
    };
    let harness_failed = |error: HarnessError| -> Error {
        if let Some(file) = &args.junit {
            let suite = campaign::harness_suite(&options.source, &options.target, &error);
            let _ = crate::harness::junit::write_suite(file, &suite);
        }
        harness_json(
            args,
            &options.source,
            &options.target,
            &error.what,
            &error.message,
        );
        EnvironmentError::new(error.what, error.message).into()
    };
    let mut target = target_file.open().map_err(harness_failed)?;
    let mut report =
        campaign(&scenario, &plans, target.as_mut(), &options).map_err(harness_failed)?;
    if scenario.conform.is_some() && report.schedules == 0 {
        // The receiver's answers took the rerun off the fixture's path (a kill landed on
        // the other side of a commit): not reproduced, and not a broken fixture.
        report.warnings.push(
            "the fixture's actions stopped being a schedule the model allows after what the \
             receiver answered and showed (listed under skipped): the rerun went another way \
             than the run that wrote it, so it neither reproduces nor passes"
                .to_owned(),
        );
    }
    report.skipped = skipped.into_iter().chain(report.skipped).collect();
    report.state_cover = state_cover;
    drop(target);
    if let (Some(found), Some(dir)) = (&report.failure, &args.trace_out) {
        write_found(&args.source, dir, found)?;
    }
    if let Some(file) = &args.junit {
        crate::harness::junit::write_suite(file, &report.junit(&expect))?;
    }
    if args.json {
        let mut value = serde_json::to_value(&report).expect("reports serialise");
        value["expect"] = serde_json::json!(expect);
        value["as_expected"] = serde_json::json!(report.as_expected(&expect));
        print(&pretty_json(&value));
    } else {
        print(&format!("{}\nexpected: {expect}\n", report.text()));
    }
    Ok(report.as_expected(&expect))
}
