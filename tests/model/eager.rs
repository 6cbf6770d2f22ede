//! Redeliveries taken alone (`eager_redeliveries`, `card::model::Redeliveries`, the argument
//! in docs/checker.md): the conditions of the claim hold in every reachable world of
//! generated fixtures; depth-first search with it finds the same verdicts, violated
//! properties and shortest counterexamples as without it, under SPEC and every mutant, on
//! sweep and generated fixtures and every card model file; and a wrong claim is caught.

use arrival::card::check::{self, CheckOptions, ModelReport, Strategy};
use arrival::card::fixture::Scenario;
use arrival::card::model::{ReceiverModel, Redeliveries};
use arrival::card::model_file::{Expectation, LoadedModel, ModelFile};
use arrival::card::policy::{Mutant, PolicyName};
use arrival::card::property::Properties;
use arrival::card::step::{Budgets, Reconciliation, Step};
use arrival::card::world::World;
use arrival::harness::checker::{self, Commute, Counters, Order};
use arrival::harness::{Checked, Protocol};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A generated fixture with `cards` cards and `deliveries` deliveries; with `unmet`, an
/// `expect` that no order meets (an unresolved input that never exists), so that
/// convergence fails at every terminal world.
fn generated(seed: u64, cards: usize, deliveries: usize, unmet: bool) -> Arc<Scenario> {
    let options = arrival::card::generate::GenOptions {
        cards,
        deliveries,
        dup_rate: 0.15,
        conflict_rate: 0.15,
        seed,
        out: None,
    };
    let mut raw = arrival::card::generate::fixture(&options).expect("generates");
    if unmet {
        let expect = raw.expect.as_mut().expect("generated fixtures expect");
        expect.unresolved.push("no-such-event".into());
    }
    Arc::new(Scenario::from_raw(Path::new("(generated)"), raw).expect("valid"))
}

const ONE_EACH: Budgets = Budgets {
    duplicates: 1,
    lost_acks: 1,
    crashes: 1,
    expiries: 0,
    reencodings: 1,
};

/// What the conditions of a claim met, over the worlds checked.
#[derive(Default, Debug)]
struct Met {
    worlds: usize,
    named: usize,
    pairs: usize,
    dead_ends: usize,
    copies: usize,
    at_end: usize,
}

/// Whether `u` is the plain delivery of another copy of the envelope `e` delivers (the same
/// event id and content).
fn copy_of(model: &ReceiverModel, u: &Step, e: &Step) -> bool {
    let event = |step: &Step| match *step {
        Step::Deliver {
            delivery,
            fault: None,
        } => model
            .scenario
            .delivery_index(delivery)
            .map(|index| model.scenario.deliveries[index].event),
        _ => None,
    };
    match (event(u), event(e)) {
        (Some(u), Some(e)) => {
            u.event_id.is_some() && u.event_id == e.event_id && u.content == e.content
        }
        _ => false,
    }
}

/// Checks the conditions docs/checker.md asks of a step named to be taken alone, in every
/// world reachable in `model` (every step taken, nothing named followed): the named step
/// `e` is offered and kept, changes only what the sender owes and breaks nothing unless
/// every other step there is dropped or leads back; every other step is kept after `e`
/// exactly when it is kept before; where it is, `e` is still offered after it and both
/// orders reach one world, marker included (or, when the step breaks a property, the other
/// order breaks the same one); and the model names the same step whether or not it is told
/// which step led to the world.
fn check_claim(
    model: &ReceiverModel,
    eager: &dyn Fn(&World) -> Option<Step>,
) -> Result<Met, String> {
    let mut met = Met::default();
    let enabled = |world: &World| {
        let mut steps = Vec::new();
        if world.violation.is_none() {
            model.steps(world, &mut steps);
        }
        steps
    };
    #[allow(clippy::mutable_key_type)]
    let mut seen: HashSet<World> = HashSet::new();
    let mut stack = vec![model.init()];
    while let Some(world) = stack.pop() {
        if !seen.insert(world.clone()) {
            continue;
        }
        met.worlds += 1;
        let here = enabled(&world);
        for step in &here {
            if let Some(next) = model.next(&world, step) {
                let told = model.eager(&next, Some(step));
                if model.eager(&world, None).is_none() && told != model.eager(&next, None) {
                    return Err(format!("{step:?} from {world:?}: told {told:?}"));
                }
                stack.push(next);
            }
        }
        let Some(e) = eager(&world) else {
            continue;
        };
        met.named += 1;
        let what = |text: &str| format!("{e:?} at {world:?}: {text}");
        if !here.contains(&e) {
            return Err(what("not offered"));
        }
        let Some(world_e) = model.next(&world, &e) else {
            return Err(what("dropped"));
        };
        if !Arc::ptr_eq(&world.receiver, &world_e.receiver) || world.budgets != world_e.budgets {
            return Err(what("changes more than what the sender owes"));
        }
        let others: Vec<World> = here
            .iter()
            .filter(|&u| *u != e)
            .filter_map(|u| model.next(&world, u))
            .filter(|next| *next != world)
            .collect();
        if world_e.violation.is_some() {
            if !others.is_empty() {
                return Err(what("breaks a property where other steps lead elsewhere"));
            }
            met.dead_ends += 1;
            continue;
        }
        let there = enabled(&world_e);
        for u in here.iter().chain(&there) {
            if *u == e {
                continue;
            }
            let before = here.contains(u).then(|| model.next(&world, u)).flatten();
            let after = there.contains(u).then(|| model.next(&world_e, u)).flatten();
            let (world_u, world_eu) = match (before, after) {
                (Some(world_u), Some(world_eu)) => (world_u, world_eu),
                (None, None) => continue,
                // A later copy of the same envelope, offered once `e` is acknowledged: no
                // path without `e` takes it, and it is a redelivery of recorded content
                // itself.
                (None, Some(_)) if !here.contains(u) && copy_of(model, u, &e) => {
                    met.copies += 1;
                    continue;
                }
                // Reconciliation only at the end, once `e` acknowledged the last owed
                // delivery: no path without `e` takes it either.
                (None, Some(_))
                    if !here.contains(u)
                        && matches!(u, Step::Reconcile(_))
                        && model.reconciliation == Reconciliation::End
                        && world_e.owed.is_empty() =>
                {
                    met.at_end += 1;
                    continue;
                }
                _ => return Err(what(&format!("{u:?} kept on one side only"))),
            };
            met.pairs += 1;
            if world_u.violation.is_some() {
                if world_eu.violation != world_u.violation {
                    return Err(what(&format!("{u:?} breaks another property after it")));
                }
                continue;
            }
            if !enabled(&world_u).contains(&e) {
                return Err(what(&format!("no longer offered after {u:?}")));
            }
            match model.next(&world_u, &e) {
                Some(world_ue) if world_ue == world_eu => {}
                other => {
                    return Err(what(&format!(
                        "{u:?} first reaches {other:?}, not {world_eu:?}"
                    )))
                }
            }
        }
    }
    Ok(met)
}

/// The model as `arrival check` builds it under `policy`, every reduction on.
fn model(
    scenario: Arc<Scenario>,
    policy: Option<Mutant>,
    budgets: Budgets,
    reconciliation: Reconciliation,
) -> ReceiverModel {
    ReceiverModel::new(scenario, policy, budgets, reconciliation)
        .with_symmetry()
        .with_merges(true)
        .with_sleep_sets()
        .with_eager_redeliveries()
}

#[test]
fn a_redelivery_taken_alone_keeps_the_conditions_in_every_reachable_world() {
    // SPEC, one fault of each kind, both reconciliation modes, with and without symmetry,
    // and with an `expect` no order meets (convergence fails at terminal worlds, where a
    // redelivery may be the last step).
    let mut total = Met::default();
    for seed in 1..=4 {
        for reconciliation in [Reconciliation::Interleaved, Reconciliation::End] {
            for (symmetry, unmet) in [(true, false), (false, false), (true, true)] {
                let scenario = generated(seed, 2, 7, unmet);
                let mut model = model(scenario, None, ONE_EACH, reconciliation);
                if !symmetry {
                    model.twins = None;
                }
                let met = check_claim(&model, &|world| model.eager(world, None))
                    .unwrap_or_else(|error| panic!("seed {seed} {reconciliation:?}: {error}"));
                total.worlds += met.worlds;
                total.named += met.named;
                total.pairs += met.pairs;
                total.dead_ends += met.dead_ends;
                total.copies += met.copies;
                total.at_end += met.at_end;
            }
        }
    }
    assert!(total.named > 1000, "{total:?}");
    assert!(total.pairs > 10_000, "{total:?}");
    assert!(total.dead_ends > 0, "{total:?}");
    assert!(total.copies > 0, "{total:?}");
    assert!(total.at_end > 0, "{total:?}");
}

#[test]
fn a_wrong_claim_is_caught() {
    // Two claims the conditions must refuse: the plain delivery of the first owed delivery,
    // recorded or not (it changes the receiver), and the model's own claim under a mutant
    // that pauses a card on a redelivery (which the model never makes).
    let scenario = generated(1, 2, 7, false);
    let spec = model(
        scenario.clone(),
        None,
        ONE_EACH,
        Reconciliation::Interleaved,
    );
    let first_owed = |world: &World| {
        let mut steps = Vec::new();
        spec.steps(world, &mut steps);
        steps
            .into_iter()
            .find(|step| matches!(step, Step::Deliver { fault: None, .. }))
    };
    assert!(check_claim(&spec, &first_owed).is_err());
    let mut pausing = model(
        scenario.clone(),
        Some(Mutant::PauseOnRedelivery),
        ONE_EACH,
        Reconciliation::Interleaved,
    );
    assert!(pausing.redeliveries.is_none(), "no claim under a mutant");
    pausing.redeliveries = Some(Arc::new(Redeliveries::of(&scenario)));
    let error = check_claim(&pausing, &|world| pausing.eager(world, None))
        .expect_err("a redelivery pauses its card");
    assert!(error.contains("changes more"), "{error}");
    // And the search with the first claim misses violations the full search finds: the
    // comparisons below would fail with it.
    let mut missed = 0;
    for mutant in Mutant::ALL {
        for seed in 1..=3 {
            let scenario = generated(seed, 2, 7, false);
            let wrong = model(
                scenario,
                Some(mutant),
                ONE_EACH,
                Reconciliation::Interleaved,
            );
            let checked = Checked(wrong, true);
            let full = explore(&checked, None);
            let reduced = explore(&checked, Some(&FirstOwed(&checked)));
            missed += usize::from(reduced.len() < full.len());
        }
    }
    assert!(
        missed > 0,
        "taking the first owed delivery alone hides nothing"
    );
}

/// The wrong claim: the first owed delivery's plain step, whatever it does.
struct FirstOwed<'m>(&'m Checked<ReceiverModel>);

impl Commute<World, Step> for FirstOwed<'_> {
    fn sleep_key(&self, _step: &Step) -> Option<u8> {
        None
    }

    fn commutes_with(&self, _key: u8) -> checker::SleepSet {
        0
    }

    fn eager(&self, world: &World, _after: Option<&Step>) -> Option<Step> {
        if world.violation.is_some() {
            return None;
        }
        let mut steps = Vec::new();
        self.0 .0.steps(world, &mut steps);
        steps
            .into_iter()
            .find(|step| matches!(step, Step::Deliver { fault: None, .. }))
    }
}

/// The properties a depth-first run of arrival's checker finds violated.
fn explore(
    model: &Checked<ReceiverModel>,
    commute: Option<&(dyn Commute<World, Step> + Sync)>,
) -> Vec<&'static str> {
    let counters = Counters::default();
    let outcome = checker::check(model, Order::DepthFirst, 1, None, &counters, commute);
    let mut violated: Vec<&'static str> =
        outcome.discoveries.iter().map(|(name, _)| *name).collect();
    violated.sort_unstable();
    violated
}

fn run(loaded: &LoadedModel) -> ModelReport {
    let options = CheckOptions {
        progress: false,
        ..CheckOptions::default()
    };
    check::run(loaded, &options).unwrap_or_else(|error| panic!("{error}"))
}

fn trace_lengths(report: &ModelReport) -> Vec<(String, usize)> {
    report
        .properties
        .iter()
        .filter_map(|property| {
            let trace = property.trace.as_ref()?;
            Some((property.name.clone(), trace.steps.len()))
        })
        .collect()
}

/// Checks `loaded` depth first with and without redeliveries taken alone: the same
/// verdict, violated properties and shortest counterexample lengths. Returns the unique
/// states without and with, and whether a property was violated.
fn compare(mut loaded: LoadedModel, what: &str) -> (usize, usize, bool) {
    loaded.file.strategy = Strategy::Dfs;
    loaded.file.eager_redeliveries = false;
    let full = run(&loaded);
    loaded.file.eager_redeliveries = true;
    let eager = run(&loaded);
    assert_eq!(
        (full.verdict.as_str(), &full.violated, trace_lengths(&full)),
        (
            eager.verdict.as_str(),
            &eager.violated,
            trace_lengths(&eager)
        ),
        "{what}"
    );
    assert!(eager.unique_states <= full.unique_states, "{what}");
    // The steps taken alone are counted where the reduction takes effect, and only there.
    assert_eq!(full.eager_steps, 0, "{what}");
    assert_eq!(
        eager.eager_steps > 0,
        eager.unique_states < full.unique_states,
        "{what}"
    );
    (
        full.unique_states,
        eager.unique_states,
        !eager.violated.is_empty(),
    )
}

/// A generated fixture as a model file would check it: one fault of each kind (re-encoded
/// copies too), depth first.
fn loaded(scenario: Arc<Scenario>, policy: PolicyName, threads: usize) -> LoadedModel {
    LoadedModel {
        path: PathBuf::from("(generated)"),
        file: ModelFile {
            description: None,
            fixture: "(generated)".into(),
            duplicates: 1,
            lost_acks: 1,
            crashes: 1,
            expiries: 0,
            reencodings: 1,
            reconciliation: Reconciliation::Interleaved,
            policy: policy.to_string(),
            strategy: Strategy::Dfs,
            threads,
            state_limit: None,
            split: false,
            symmetry: true,
            merge_settled: true,
            merge_paused: true,
            sleep_sets: true,
            eager_redeliveries: true,
            per_delivery: None,
            properties: None,
            expect: "pass".into(),
        },
        scenario,
        policy,
        expectation: Expectation::Pass,
        checked: Properties::SPEC,
        per_delivery: None,
    }
}

#[test]
fn redeliveries_taken_alone_keep_verdicts_and_shortest_traces_under_every_policy() {
    // Generated and sweep fixtures under SPEC and every mutant, one and two threads, both
    // reconciliation modes, also with an `expect` no order meets. Under a mutant the
    // model claims nothing, so the counts are equal too; under SPEC they fall.
    let policies =
        std::iter::once(PolicyName(None)).chain(Mutant::ALL.map(|mutant| PolicyName(Some(mutant))));
    let (mut fewer, mut caught) = (0, 0);
    for policy in policies {
        for seed in 1..=2 {
            for (threads, reconciliation, unmet) in [
                (2, Reconciliation::End, false),
                (1, Reconciliation::Interleaved, true),
            ] {
                let mut model = loaded(generated(seed, 2, 8, unmet), policy, threads);
                model.file.reconciliation = reconciliation;
                let what = format!(
                    "{policy}, seed {seed}, {threads} threads, {reconciliation:?}, unmet {unmet}"
                );
                let (full, eager, _) = compare(model, &what);
                if policy.0.is_some() {
                    assert_eq!(full, eager, "{what}: nothing is claimed under a mutant");
                } else {
                    fewer += usize::from(eager < full);
                }
            }
        }
        for seed in arrival::card::sweep::fixture_seeds(1, 4) {
            let raw = arrival::card::generate::small(seed).expect("generates");
            let scenario = Scenario::from_raw(Path::new("(generated)"), raw).expect("valid");
            let mut model = loaded(Arc::new(scenario), policy, 1);
            model.file.reencodings = 0;
            let (full, eager, violated) = compare(model, &format!("sweep {seed}, {policy}"));
            caught += usize::from(policy.0.is_some() && violated);
            if policy.0.is_none() {
                fewer += usize::from(eager < full);
            }
        }
    }
    assert!(
        fewer > 5,
        "redeliveries taken alone cut states on {fewer} fixtures only"
    );
    assert!(caught > 0, "some mutant is caught");
}

#[test]
fn redeliveries_taken_alone_keep_every_model_files_verdict_and_leave_breadth_first_alone() {
    // Every card model file, depth first: the same verdict, violated properties and shortest
    // counterexample lengths. Breadth first, where nothing is taken alone, the same unique
    // states too.
    let mut files: Vec<PathBuf> = std::fs::read_dir("models")
        .expect("models/")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .filter(|path| {
            arrival::harness::model_file::fixture_protocol(path).as_deref() == Some("card")
        })
        .collect();
    files.sort();
    let mut fewer = 0;
    for path in &files {
        let loaded = check::load_model(path, None).expect("loads");
        let (full, eager, _) = compare(loaded, &path.display().to_string());
        fewer += usize::from(eager < full);
    }
    assert!(fewer > 5, "fewer states on {fewer} model files only");
    let mut loaded = check::load_model(Path::new("models/b62-15.toml"), None).expect("loads");
    loaded.file.strategy = Strategy::Bfs;
    loaded.file.eager_redeliveries = false;
    let full = run(&loaded);
    loaded.file.eager_redeliveries = true;
    let eager = run(&loaded);
    assert_eq!(full.unique_states, eager.unique_states);
    assert!(
        !eager.settings.contains("eager_redeliveries=true"),
        "{}",
        eager.settings
    );
}

/// The settings line says what took effect: depth first under arrival's checker it takes
/// redeliveries alone; under stateright's checkers and in random walks it does not, and
/// says so.
#[test]
fn the_settings_line_claims_eager_redeliveries_only_where_they_take_effect() {
    use arrival::card::check::{Engine, Mode};
    use arrival::harness::simulate::Simulation;
    let mut loaded = check::load_model(Path::new("models/b62-15.toml"), None).expect("loads");
    loaded.file.strategy = Strategy::Dfs;
    loaded.file.eager_redeliveries = true;
    let settings = |engine: Engine, mode: &Mode| {
        let options = CheckOptions {
            engine,
            ..CheckOptions::default()
        };
        check::run_with(&loaded, &options, mode)
            .unwrap_or_else(|error| panic!("{error}"))
            .settings
    };
    let walks = Mode::Simulate(Simulation {
        walks: 2,
        seed: 1,
        max_depth: 200,
    });
    let cases = [
        (Engine::Arrival, Mode::Exhaustive, true),
        (Engine::Stateright, Mode::Exhaustive, false),
        (Engine::Arrival, walks, false),
    ];
    for (engine, mode, eager) in cases {
        let line = settings(engine, &mode);
        let claimed = line.contains("eager_redeliveries=true");
        assert_eq!(claimed, eager, "{engine:?} {mode:?}: {line}");
    }
}
