//! A conformance campaign against one card receiver: schedules planned from a model file
//! (its fixture's kept counterexample traces and seeded random walks, bounded by its
//! budgets) or from a fixture's `conform` block, run one by one through
//! [`crate::card::conform::run_schedule`]; the first failure shrunk, confirmed by rerunning
//! and written as a fixture; the report with its counts, property statuses and JUnit.

use crate::card::conform::{describe_action, run_schedule, CardTarget, HarnessError, Settings};
use crate::card::fixture::{ConformBlock, RawAction, RawFixture, Scenario};
use crate::card::model::ReceiverModel;
use crate::card::model_file::LoadedModel;
use crate::card::policy::Spec;
use crate::card::replay::replay_steps;
use crate::card::step::{Action, Budgets, External, Fault, Step};
use crate::card::world::transition;
use crate::harness::conform::{
    confirm, shrink, walk, walk_generator, Counts, Reproduced, Status, Verdict,
};
use crate::harness::conform::{junit_suite, properties_text, report_tail, FoundView};
use crate::harness::junit::ExtraSuite;
use crate::harness::Protocol;
use serde::Serialize;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

/// One schedule to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// `traces/NAME`, `walks/s7/w42` or `fixture`.
    pub id: String,
    /// The external actions.
    pub actions: Vec<Action>,
}

/// The model steps a kept trace takes, as actions: a crash before recording becomes a kill
/// in flight (a disconnect when the target cannot be killed). `None` when a step cannot be
/// driven from outside (an expiry step: arrival has no hold on the receiver's clock).
pub fn actions_of(steps: &[Step], can_kill: bool) -> Option<Vec<Action>> {
    steps
        .iter()
        .map(|&step| match step {
            Step::Deliver { delivery, fault } => Some(Action::Deliver {
                delivery,
                fault: match fault {
                    None => None,
                    Some(Fault::AckLost) => Some(External::LostAck),
                    Some(Fault::Duplicate) => Some(External::Duplicate),
                    Some(Fault::Reencoded) => Some(External::Reencoded),
                    Some(Fault::Crash) if can_kill => Some(External::Kill),
                    Some(Fault::Crash) => Some(External::Disconnect),
                },
            }),
            Step::Reconcile(card) => Some(Action::Reconcile(card)),
            Step::Expire => None,
        })
        .collect()
}

/// The model steps a schedule of actions shows (kills after an acknowledgement are plain
/// deliveries, restarts disappear, an indefinite fault is a crash before recording).
pub fn model_steps(actions: &[Action]) -> Vec<Step> {
    actions
        .iter()
        .filter_map(|&action| match action {
            Action::Deliver { delivery, fault } => Some(Step::Deliver {
                delivery,
                fault: match fault {
                    None | Some(External::KillAfterAck) => None,
                    Some(External::LostAck) => Some(Fault::AckLost),
                    Some(External::Duplicate) => Some(Fault::Duplicate),
                    Some(External::Reencoded) => Some(Fault::Reencoded),
                    Some(External::Disconnect) | Some(External::Kill) => Some(Fault::Crash),
                },
            }),
            Action::Reconcile(card) => Some(Step::Reconcile(card)),
            Action::Restart => None,
        })
        .collect()
}

/// The kept counterexample traces in `dir` whose fixture is the model's (same initial
/// cards, deliveries and authority), shortest first; and the names of those that cannot
/// be driven.
pub fn trace_plans(scenario: &Scenario, dir: &Path, can_kill: bool) -> (Vec<Plan>, Vec<String>) {
    let files = crate::harness::input::json_files(dir);
    let (mut plans, mut skipped) = (Vec::new(), Vec::new());
    for file in files {
        let Ok(kept) = Scenario::load(&file) else {
            continue;
        };
        if !same_fixture(&kept.raw, &scenario.raw) {
            continue;
        }
        let Some(steps) = &kept.schedule else {
            continue;
        };
        let name = file
            .file_stem()
            .map_or_else(String::new, |stem| stem.to_string_lossy().into_owned());
        // The kept trace's steps name its own catalog's cards: translated by name.
        let steps: Vec<Step> = steps
            .iter()
            .map(|&step| match step {
                Step::Reconcile(card) => Step::Reconcile(
                    scenario
                        .catalog
                        .find(kept.catalog.name(card))
                        .expect("the same fixture names the same cards"),
                ),
                other => other,
            })
            .collect();
        match actions_of(&steps, can_kill) {
            Some(actions) => plans.push(Plan {
                id: format!("traces/{name}"),
                actions,
            }),
            None => skipped.push(format!("traces/{name} (an expiry step cannot be driven)")),
        }
    }
    plans.sort_by_key(|plan| plan.actions.len());
    (plans, skipped)
}

fn same_fixture(a: &RawFixture, b: &RawFixture) -> bool {
    let value = |raw: &RawFixture| {
        let authority: Vec<Value> = raw
            .authority
            .iter()
            .map(|snapshot| {
                serde_json::json!([snapshot.object_id, snapshot.version, snapshot.state])
            })
            .collect();
        serde_json::json!([raw.initial, raw.deliveries, authority])
    };
    value(a) == value(b)
}

/// For each card mutant (those that need no expiry step), its shortest counterexample
/// schedule on the model file's fixture and budgets, by breadth-first search for the
/// property that catches it, up to `state_limit` states; and the mutants not caught within
/// it. Schedules already among `known` are left out.
pub fn mutant_plans(
    loaded: &LoadedModel,
    state_limit: usize,
    known: &[Plan],
    can_kill: bool,
) -> (Vec<Plan>, Vec<String>) {
    use crate::card::mutants::Mutant;
    use crate::card::policy::PolicyName;
    use crate::card::property::Properties;
    use crate::harness::explore::{shortest, Engine, Settings as Explore, Strategy};
    let (mut plans, mut missed): (Vec<Plan>, Vec<String>) = (Vec::new(), Vec::new());
    for mutant in Mutant::ALL.into_iter().filter(|m| !m.needs_expiry()) {
        let mut under = loaded.clone();
        under.policy = PolicyName(Some(mutant));
        under.file.expiries = 0;
        let property = mutant.caught_by();
        let model = crate::card::check::build_model(&under, Properties::only(property));
        let settings = Explore {
            strategy: Strategy::Bfs,
            threads: 1,
            state_limit: Some(state_limit),
            label: mutant.name().to_owned(),
            progress: false,
            engine: Engine::Arrival,
        };
        let Some(steps) = shortest(&model, property as usize, &settings) else {
            missed.push(format!(
                "mutants/{} (no counterexample within {state_limit} states)",
                mutant.name()
            ));
            continue;
        };
        let actions = actions_of(&steps, can_kill).expect("no expiry in these searches");
        let seen = known
            .iter()
            .chain(plans.iter())
            .any(|p| p.actions == actions);
        if !seen {
            plans.push(Plan {
                id: format!("mutants/{}.{}", mutant.name(), property.name()),
                actions,
            });
        }
    }
    plans.sort_by_key(|plan| plan.actions.len());
    (plans, missed)
}

/// The contract's receiver in the model file's world: its budgets (no expiry: arrival has
/// no hold on a receiver's clock) and its reconciliation mode.
fn spec_model(loaded: &LoadedModel) -> ReceiverModel {
    let file = &loaded.file;
    let budgets = Budgets {
        duplicates: file.duplicates,
        lost_acks: file.lost_acks,
        crashes: file.crashes,
        expiries: 0,
        reencodings: file.reencodings,
    };
    ReceiverModel::new(
        Arc::clone(&loaded.scenario),
        None,
        budgets,
        file.reconciliation,
    )
}

/// What a step did, in the words of the transition cover: `decision/NAME` for a delivery's
/// verdict (`duplicate` for a recognised copy), `reconcile/OUTCOME` for a snapshot, and
/// `settle/...` for each hold it settled (`settle/re-evaluated/FROM/TO`, `settle/resolved`,
/// `settle/superseded`). A crash before recording and an expiry are no transition of the
/// receiver's.
pub fn transition_labels(effect: &crate::card::world::Effect) -> Vec<String> {
    use crate::card::receiver::Settlement;
    use crate::card::world::Effect;
    match effect {
        Effect::Delivered {
            delivered: Some(delivered),
            ..
        } => vec![format!("decision/{}", delivered.verdict.name())],
        Effect::Delivered {
            delivered: None, ..
        }
        | Effect::Expired(_) => Vec::new(),
        Effect::Reconciled(reconciled) => {
            let mut labels = vec![format!("reconcile/{}", reconciled.outcome.name())];
            labels.extend(
                reconciled
                    .settled
                    .iter()
                    .map(|(_, settlement)| match settlement {
                        Settlement::ReEvaluated { from, to } => {
                            format!("settle/re-evaluated/{}/{}", from.name(), to.name())
                        }
                        Settlement::Resolved => "settle/resolved".to_owned(),
                        Settlement::Superseded => "settle/superseded".to_owned(),
                    }),
            );
            labels
        }
    }
}

/// The transition cover: for every kind of transition the contract's receiver takes on the
/// model file's fixture and budgets ([`transition_labels`]), the shortest schedule that
/// takes it, by breadth-first search over at most `state_limit` worlds. One schedule that
/// is the shortest witness of several kinds runs once, named `cover/KIND+KIND...`. Returns
/// the plans, and a note when the limit cut the search (kinds reached only deeper are then
/// not covered).
pub fn cover_plans(
    loaded: &LoadedModel,
    state_limit: usize,
    can_kill: bool,
) -> (Vec<Plan>, Vec<String>) {
    use std::collections::{BTreeMap, HashSet, VecDeque};
    use std::hash::{BuildHasher, RandomState};
    let model = spec_model(loaded);
    let start = model.init();
    // Worlds by their 64-bit hash: a collision can only leave a kind uncovered.
    let hasher = RandomState::new();
    let mut seen: HashSet<u64> = HashSet::from([hasher.hash_one(&start)]);
    let mut queue = VecDeque::from([(start, Vec::<Step>::new())]);
    let mut witnesses: BTreeMap<String, Vec<Step>> = BTreeMap::new();
    let mut cut = Vec::new();
    let mut offered = Vec::new();
    while let Some((world, path)) = queue.pop_front() {
        offered.clear();
        model.steps(&world, &mut offered);
        for &step in &offered {
            let (next, effect) = transition(&loaded.scenario, Spec, &world, step);
            let labels = transition_labels(&effect);
            let fresh = labels.iter().any(|label| !witnesses.contains_key(label));
            let key = hasher.hash_one(&next);
            if fresh || !seen.contains(&key) {
                let mut longer = path.clone();
                longer.push(step);
                for label in labels {
                    witnesses.entry(label).or_insert_with(|| longer.clone());
                }
                if seen.len() >= state_limit {
                    if cut.is_empty() {
                        cut.push(format!(
                            "cover (the search stopped at {state_limit} worlds: kinds of \
                             transition reached only deeper are not covered)"
                        ));
                    }
                    continue;
                }
                if seen.insert(key) {
                    queue.push_back((next, longer));
                }
            }
        }
    }
    let mut plans: Vec<Plan> = Vec::new();
    for (label, steps) in witnesses {
        let actions = actions_of(&steps, can_kill).expect("the cover takes no expiry step");
        match plans.iter_mut().find(|plan| plan.actions == actions) {
            Some(plan) => {
                plan.id.push('+');
                plan.id.push_str(&label);
            }
            None => plans.push(Plan {
                id: format!("cover/{label}"),
                actions,
            }),
        }
    }
    plans.sort_by_key(|plan| plan.actions.len());
    (plans, cut)
}

/// The state cover: for every distinct state a receiver can show (its cards, paused cards
/// and unresolved inputs, as [`crate::card::conform::project`] shows a world) that the
/// contract's receiver reaches within `state_limit` worlds, the shortest schedule to it.
/// A schedule is checked after every step, so one that runs through another's whole
/// path covers that one's state too: only the schedules no other one extends are kept.
/// Returns the plans (`states/N`), how many observable states they cover, and what the
/// limit cut.
pub fn state_cover_plans(
    loaded: &LoadedModel,
    state_limit: usize,
    can_kill: bool,
) -> (Vec<Plan>, usize, Vec<String>) {
    use std::collections::{BTreeMap, HashSet, VecDeque};
    use std::hash::{BuildHasher, RandomState};
    let model = spec_model(loaded);
    let scenario = &loaded.scenario;
    let start = model.init();
    let hasher = RandomState::new();
    let mut seen: HashSet<u64> = HashSet::from([hasher.hash_one(&start)]);
    let mut witnesses: BTreeMap<String, Vec<Step>> = BTreeMap::new();
    witnesses.insert(
        format!("{:?}", crate::card::conform::project(scenario, &start)),
        Vec::new(),
    );
    let mut queue = VecDeque::from([(start, Vec::<Step>::new())]);
    let (mut cut, mut offered) = (Vec::new(), Vec::new());
    while let Some((world, path)) = queue.pop_front() {
        offered.clear();
        model.steps(&world, &mut offered);
        for &step in &offered {
            let (next, _) = transition(scenario, Spec, &world, step);
            if !seen.insert(hasher.hash_one(&next)) {
                continue;
            }
            let mut longer = path.clone();
            longer.push(step);
            let shown = format!("{:?}", crate::card::conform::project(scenario, &next));
            witnesses.entry(shown).or_insert_with(|| longer.clone());
            if seen.len() >= state_limit {
                if cut.is_empty() {
                    cut.push(format!(
                        "state cover (the search stopped at {state_limit} worlds: states \
                         shown only deeper are not covered)"
                    ));
                }
                continue;
            }
            queue.push_back((next, longer));
        }
    }
    let states = witnesses.len();
    let mut paths: Vec<Vec<Step>> = witnesses.into_values().collect();
    paths.sort_by_key(|path| std::cmp::Reverse(path.len()));
    let mut kept: Vec<Vec<Step>> = Vec::new();
    for path in paths {
        if !kept.iter().any(|longer| longer.starts_with(&path)) {
            kept.push(path);
        }
    }
    kept.reverse();
    let plans = kept
        .iter()
        .enumerate()
        .map(|(index, steps)| Plan {
            id: format!("states/{}", index + 1),
            actions: actions_of(steps, can_kill).expect("the cover takes no expiry step"),
        })
        .collect();
    (plans, states, cut)
}

/// Whether the reconciliations a schedule starts with (restarts between them change
/// nothing) are ones the model allows before anything is observed; the index of the first
/// that is not, and why. A schedule that fails this can never run, whatever the receiver
/// does: bad input, not a rerun that went another way.
pub fn opening_allowed(scenario: &Scenario, actions: &[Action]) -> Result<(), (usize, String)> {
    use crate::card::world::World;
    let mut world = World::initial(scenario, Budgets::UNLIMITED);
    for (index, &action) in actions.iter().enumerate() {
        match action {
            Action::Restart => {}
            Action::Reconcile(card) if world.reconcilable(scenario, card) => {
                world = transition(scenario, Spec, &world, Step::Reconcile(card)).0;
            }
            Action::Reconcile(card) => {
                return Err((
                    index,
                    format!(
                        "a reconciliation of {} the model never allows here: before any \
                         delivery the card is neither paused nor unknown",
                        scenario.catalog.name(card)
                    ),
                ))
            }
            Action::Deliver { .. } => break,
        }
    }
    Ok(())
}

/// A network copy (`duplicate`, `reencoded`) is of a delivery sent before it in the
/// schedule: a copy of one never sent is no fault the model has.
pub fn copies_follow_their_delivery(actions: &[Action]) -> Result<(), (usize, String)> {
    let mut sent = std::collections::BTreeSet::new();
    for (index, action) in actions.iter().enumerate() {
        let Action::Deliver { delivery, fault } = *action else {
            continue;
        };
        let copy = matches!(fault, Some(External::Duplicate | External::Reencoded));
        if copy && !sent.contains(&delivery) {
            return Err((
                index,
                format!(
                    "a copy of delivery #{delivery}, which the schedule has not sent before: \
                     send it first, or drop the copy"
                ),
            ));
        }
        sent.insert(delivery);
    }
    Ok(())
}

/// The kinds of transition the `cover/` plans among `plans` witness.
pub fn covered_kinds(plans: &[Plan]) -> Vec<String> {
    let mut kinds: Vec<String> = plans
        .iter()
        .filter_map(|plan| plan.id.strip_prefix("cover/"))
        .flat_map(|kinds| kinds.split('+').map(str::to_owned))
        .collect();
    kinds.sort();
    kinds
}

/// Seeded random walks through the model under the model file's budgets and
/// reconciliation, with external faults on top: a model crash is a kill in flight or a
/// disconnect, and up to `crashes` kills right after an acknowledgement or restarts between
/// steps are added.
pub fn walk_plans(loaded: &LoadedModel, walks: usize, seed: u64, can_kill: bool) -> Vec<Plan> {
    let file = &loaded.file;
    let model = spec_model(loaded);
    (0..walks)
        .map(|index| {
            let steps = walk(
                model.init(),
                |world, offered| model.steps(world, offered),
                |world, &step| transition(&loaded.scenario, Spec, world, step).0,
                (seed, index),
                200,
            );
            let mut draws = walk_generator(seed ^ 0xFA17, index);
            let mut kills = if can_kill { file.crashes } else { 0 };
            let mut actions = Vec::with_capacity(steps.len() + 1);
            for action in actions_of(&steps, can_kill).expect("walks take no expiry step") {
                let action = match action {
                    Action::Deliver {
                        delivery,
                        fault: Some(External::Kill),
                    } if draws.chance(0.5) => Action::Deliver {
                        delivery,
                        fault: Some(External::Disconnect),
                    },
                    Action::Deliver {
                        delivery,
                        fault: None,
                    } if kills > 0 && draws.chance(0.15) => {
                        kills -= 1;
                        Action::Deliver {
                            delivery,
                            fault: Some(External::KillAfterAck),
                        }
                    }
                    other => other,
                };
                actions.push(action);
                if kills > 0 && draws.chance(0.05) {
                    kills -= 1;
                    actions.push(Action::Restart);
                }
            }
            Plan {
                id: format!("walks/s{seed}/w{index}"),
                actions,
            }
        })
        .collect()
}

/// How a campaign runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// How each schedule runs.
    pub settings: Settings,
    /// Runs the shrinker may spend.
    pub shrink_budget: usize,
    /// Reruns that confirm the shrunk schedule.
    pub confirm: usize,
    /// The target as named on the command line.
    pub target: String,
    /// The model or fixture file, for reports.
    pub source: String,
}

/// The first failure, shrunk and confirmed.
#[derive(Clone, Debug, Serialize)]
pub struct Found {
    /// The property broken, or `diverged`.
    pub property: String,
    /// The schedule it was found by.
    pub found_by: String,
    /// Its length before shrinking.
    pub original_steps: usize,
    /// The shrunk schedule, in words.
    pub steps: Vec<String>,
    /// The action at which it showed (from 1) and what was expected and seen.
    pub step: usize,
    /// What was expected and what was seen.
    pub detail: String,
    /// `3/3`, or fewer for a flaky receiver.
    pub reproduced: String,
    /// Whether some reruns did not fail the same way.
    pub flaky: bool,
    /// The schedule as a fixture (`schedule` from the model's side, `conform` with the
    /// actions).
    #[serde(skip)]
    pub fixture: RawFixture,
    /// The shrunk schedule as a sequence diagram between arrival and the receiver, the
    /// external actions shown ([`crate::card::trace::conform_diagram`]).
    #[serde(skip)]
    pub diagram: crate::harness::diagram::Diagram,
    /// The receiver's last log lines.
    pub log_tail: Vec<String>,
}

impl Found {
    /// The failure as the shared report parts read it.
    pub fn view(&self) -> FoundView<'_> {
        FoundView {
            property: &self.property,
            found_by: &self.found_by,
            original_steps: self.original_steps,
            steps: &self.steps,
            reproduced: &self.reproduced,
            flaky: self.flaky,
            detail: &self.detail,
        }
    }
}

/// What a campaign found.
#[derive(Clone, Debug, Serialize)]
pub struct ConformReport {
    /// The target as named.
    pub target: String,
    /// The model or fixture file.
    pub source: String,
    /// The fixture's name.
    pub fixture: String,
    /// `every-step` or `end`.
    pub observe: &'static str,
    /// What was compared besides the cards.
    pub channels: Vec<String>,
    /// `sampled`, `violated` or `incomplete`.
    pub verdict: Verdict,
    /// Schedules run.
    pub schedules: usize,
    /// Schedules that ran to the end with nothing broken.
    pub passed: usize,
    /// Counts over every run, shrinking and confirmation excluded.
    pub counts: Counts,
    /// How many snapshots the receiver fetched from the authority on its own (pull mode),
    /// each taken as a reconciliation it may have done.
    #[serde(skip_serializing_if = "is_zero")]
    pub own_fetches: usize,
    /// Each property's status (in JSON: `{"name", "status", "why"?}`).
    #[serde(serialize_with = "properties_json")]
    pub properties: Vec<(String, Status)>,
    /// The first failure.
    pub failure: Option<Found>,
    /// Schedules that could not be driven, and why.
    pub skipped: Vec<String>,
    /// Of those, the schedules that ran and were set aside because the model does not
    /// allow them (their requests are in the counts; the others never ran).
    #[serde(skip_serializing_if = "is_zero")]
    pub set_aside: usize,
    /// The kinds of transition of the contract's receiver that ran on the target by their
    /// shortest schedules ([`cover_plans`]).
    pub cover: Vec<String>,
    /// With `--state-cover`: how many states a receiver can show the state cover reached,
    /// and by how many schedules ([`state_cover_plans`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_cover: Option<(usize, usize)>,
    /// Notes on what this run cannot see.
    pub warnings: Vec<String>,
    /// Wall time.
    pub seconds: f64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn properties_json<S: serde::Serializer>(
    properties: &[(String, Status)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = serializer.serialize_seq(Some(properties.len()))?;
    for (name, status) in properties {
        let why = match status {
            Status::Unobserved(why) | Status::NotExercised(why) => Some(why),
            _ => None,
        };
        let mut entry = serde_json::json!({"name": name, "status": status.word()});
        if let Some(why) = why {
            entry["why"] = serde_json::json!(why);
        }
        seq.serialize_element(&entry)?;
    }
    seq.end()
}

/// Runs every plan until one fails; shrinks and confirms that one.
pub fn campaign(
    scenario: &Scenario,
    plans: &[Plan],
    target: &mut dyn CardTarget,
    options: &Options,
) -> Result<ConformReport, HarnessError> {
    let started = std::time::Instant::now();
    let mut counts = Counts::default();
    let (mut passed, mut schedules, mut killed) = (0, 0, false);
    let mut seen = Seen::default();
    // Every kept trace and mutant schedule runs; the walks stop at their first failure.
    let mut failures: Vec<(Plan, crate::card::conform::Failure)> = Vec::new();
    let mut not_allowed = Vec::new();
    let mut unknown_words = std::collections::BTreeSet::new();
    let mut own_fetches = 0;
    let mut reconciles_not_sent = 0;
    let mut delivery_acks = 0;
    target.serve_authority(&crate::card::conform::authority_snapshots(scenario));
    for plan in plans {
        let exhaustive = ["traces/", "mutants/", "cover/", "states/"]
            .iter()
            .any(|kind| plan.id.starts_with(kind));
        if !failures.is_empty() && !exhaustive {
            break;
        }
        let run = run_schedule(scenario, target, &plan.actions, &options.settings)?;
        // The requests were sent, and the target showed what it showed, whether or not the
        // schedule counts.
        counts.add(&run.counts);
        seen.paused |= run.paused_reported;
        seen.unresolved |= run.unresolved_reported;
        seen.ack |= run.ack_reported;
        delivery_acks += run.delivery_acks;
        if !run.valid {
            // Neither a pass nor a failure: the schedule is not one of the model's.
            not_allowed.push(format!(
                "{}: a reconciliation the model does not allow there (the card is neither \
                 paused nor unknown in any world consistent with what was seen){}",
                plan.id,
                indefinite_note(&run.counts)
            ));
            continue;
        }
        schedules += 1;
        killed |= run.killed;
        own_fetches += run.own_fetches.len();
        reconciles_not_sent += run.reconciles_not_sent;
        unknown_words.extend(run.unknown_words.iter().cloned());
        match run.failure {
            None => passed += 1,
            Some(failure) => {
                // A failure in the liveness phase is replayed with the actions it took.
                let mut actions = plan.actions.clone();
                actions.extend(run.liveness.iter().copied());
                let plan = Plan {
                    id: plan.id.clone(),
                    actions,
                };
                failures.push((plan, failure));
            }
        }
    }
    // A named property before `diverged`, then the shortest way there, then the most
    // direct witness (a version seen to go down).
    failures.sort_by_key(|(_, failure)| {
        (
            failure.property == "diverged",
            failure.step,
            !failure.regressed,
        )
    });
    let found = match failures.first() {
        Some((plan, failure)) => Some(settle_failure(scenario, plan, failure, target, options)?),
        None => None,
    };
    let verdict = match (&found, schedules) {
        (Some(_), _) => Verdict::Violated,
        (None, 0) => Verdict::Incomplete,
        (None, _) => Verdict::Sampled,
    };
    let channels = options.settings.channels;
    let mut warnings = Vec::new();
    if !unknown_words.is_empty() {
        let words: Vec<String> = unknown_words.into_iter().collect();
        warnings.push(format!(
            "acknowledgements carried words that are not the contract's ({}): taken as no \
             meaning; a delivery's is applied, ignored or held, a reconciliation's created, \
             refused_behind, confirmed or replaced",
            words.join(", ")
        ));
    }
    warnings.extend(wide_numbers(scenario));
    if let Some(behind) = crate::card::properties::authority_behind(scenario) {
        warnings.push(format!(
            "{}: {} (the fixture breaks convergence's precondition, so a receiver may fail \
             `convergence` on it through no fault of its own)",
            crate::card::property::Property::AuthorityCurrent,
            behind.describe(scenario)
        ));
    }
    // The header names the channels that were asked for and reported; one asked for and
    // never reported is a warning (its properties are `unobserved`, and a failure was
    // found without it).
    let reported = crate::card::conform::Channels {
        ack: channels.ack && seen.ack,
        paused: channels.paused && seen.paused,
        unresolved: channels.unresolved && seen.unresolved,
        every_step: channels.every_step,
    };
    let silent: Vec<String> = channels
        .names()
        .into_iter()
        .filter(|name| !reported.names().contains(name))
        .collect();
    if !silent.is_empty() {
        let (it, they) = if silent.len() == 1 {
            ("it", "it")
        } else {
            ("them", "they")
        };
        if silent.iter().any(|name| name == "ack") && delivery_acks == 0 {
            warnings.push(format!(
                "no delivery was acknowledged at all: of {} request(s), {} had no definite \
                 answer ({} of them cut by arrival's own kills and disconnects) and {} \
                 acknowledged were reconciliations; so the ack channel named above was never \
                 seen, not seen empty",
                counts.attempted, counts.indefinite, counts.cut_by_arrival, counts.acknowledged
            ));
        }
        warnings.push(if found.is_none() {
            format!(
                "asked to compare {} but the target never reported {it}: not compared, and \
                 the properties only {they} show are unobserved",
                silent.join(", "),
            )
        } else {
            format!(
                "asked to compare {} but the target had not reported {it} by the end of the \
                 run: not compared, so the failure below was found without {it}",
                silent.join(", "),
            )
        });
    }
    if reconciles_not_sent > 0 {
        warnings.push(format!(
            "{reconciles_not_sent} reconciliation(s) of the schedules were not sent: the \
             receiver had reconciled the card on its own, so no world allowed another"
        ));
    }
    if !channels.every_step {
        warnings.push(
            "the state is read only at the end: reconciliation heals most wrong decisions \
             before then, so what a step did on the way is not seen"
                .to_owned(),
        );
    }
    Ok(ConformReport {
        target: options.target.clone(),
        source: options.source.clone(),
        fixture: scenario.name.clone(),
        observe: if channels.every_step {
            "every-step"
        } else {
            "end"
        },
        channels: reported.names(),
        verdict,
        schedules,
        passed,
        counts,
        properties: statuses(&found, channels, killed, seen, schedules),
        failure: found,
        set_aside: not_allowed.len(),
        skipped: not_allowed,
        cover: covered_kinds(plans),
        state_cover: None,
        own_fetches,
        warnings,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Shrinks a failure over reruns of the same property, confirms it and writes its fixture.
fn settle_failure(
    scenario: &Scenario,
    plan: &Plan,
    failure: &crate::card::conform::Failure,
    target: &mut dyn CardTarget,
    options: &Options,
) -> Result<Found, HarnessError> {
    let property = failure.property.clone();
    // The same property, inside the schedule (only convergence is seen after it).
    let liveness_too = property == "convergence";
    let mut same = |actions: &[Action]| -> Result<Option<crate::card::conform::Run>, HarnessError> {
        let run = run_schedule(scenario, target, actions, &options.settings)?;
        let hit = run.valid
            && run.failure.as_ref().is_some_and(|f| {
                f.property == property && (liveness_too || f.step <= actions.len())
            });
        Ok(hit.then_some(run))
    };
    // What comes after the failing step cannot matter to it: cut first.
    let mut start = plan.actions.clone();
    if failure.step < start.len() && same(&start[..failure.step])?.is_some() {
        start.truncate(failure.step);
    }
    let mut progress = crate::harness::conform::ShrinkProgress::start(
        &property,
        &plan.id,
        plan.actions.len(),
        options.shrink_budget,
    );
    let (shrunk, _) = shrink(&start, options.shrink_budget, |actions| {
        // A candidate that a plan or fixture could not hold (a copy of a delivery it no
        // longer sends, a reconciliation the model never allows first) is not tried:
        // the shrunk schedule is written as a fixture that must replay.
        let playable = copies_follow_their_delivery(actions).is_ok()
            && opening_allowed(scenario, actions).is_ok();
        let failed = playable && same(actions)?.is_some();
        progress.rerun(actions.len(), failed);
        Ok(failed)
    })?;
    let mut kept = None;
    let reproduced: Reproduced = confirm(options.confirm, || {
        let run = same(&shrunk)?;
        let hit = run.is_some();
        if kept.is_none() {
            kept = run;
        }
        Ok(hit)
    })?;
    progress.done(shrunk.len(), reproduced);
    let (detail, step, log) = match &kept {
        Some(run) => {
            let failure = run.failure.as_ref().expect("a kept run failed");
            (failure.detail.clone(), failure.step, run.log.clone())
        }
        None => (failure.detail.clone(), failure.step, Vec::new()),
    };
    // A failure of the liveness phase is drawn with the retries and reconciliations that
    // phase took, and marked at the last of them.
    let mut drawn = shrunk.clone();
    if step > shrunk.len() {
        drawn.extend(kept.iter().flat_map(|run| run.liveness.iter().copied()));
    }
    let diagram = crate::card::trace::conform_diagram(
        scenario,
        &drawn,
        &log,
        (step.min(drawn.len()), &property),
    );
    let fixture = conform_fixture(
        scenario,
        &shrunk,
        kept.as_ref(),
        options,
        &property,
        &plan.id,
        reproduced,
    );
    Ok(Found {
        property: property.clone(),
        found_by: plan.id.clone(),
        original_steps: plan.actions.len(),
        steps: shrunk
            .iter()
            .map(|&action| describe_action(scenario, action))
            .collect(),
        step,
        detail,
        reproduced: reproduced.text(),
        flaky: reproduced.flaky(),
        fixture,
        diagram,
        log_tail: target.log_tail(),
    })
}

/// The model steps a failing run of `actions` showed: for each action the run settled (the
/// liveness phase's retries and reconciliations too, when the failure came after them), the
/// step of the model path its answers and states fit (a kill in flight whose delivery every
/// remaining world had recorded is `ack lost`, not a crash before recording); from the
/// failing action on (or without a run), what the action may be at most ([`model_steps`]).
pub fn fixture_steps(actions: &[Action], run: Option<&crate::card::conform::Run>) -> Vec<Step> {
    let Some(run) = run else {
        return model_steps(actions);
    };
    // Every action before the failing one was settled, the liveness phase's included (a
    // convergence failure is found at the final read, after them).
    let settled = run
        .failure
        .as_ref()
        .map_or(actions.len(), |failure| failure.step.saturating_sub(1));
    let mut steps: Vec<Step> = run
        .model_path
        .iter()
        .filter(|(action, _)| *action <= settled)
        .map(|&(_, step)| step)
        .collect();
    steps.extend(model_steps(&actions[settled.min(actions.len())..]));
    steps
}

/// The fixture of a shrunk schedule: the model steps its failing `run` showed
/// ([`fixture_steps`]) as `schedule`, what the SPEC receiver ends with after them as
/// `expect`, the external actions and what the run observed in `conform`.
pub fn conform_fixture(
    scenario: &Scenario,
    actions: &[Action],
    run: Option<&crate::card::conform::Run>,
    options: &Options,
    property: &str,
    found_by: &str,
    reproduced: Reproduced,
) -> RawFixture {
    let steps = fixture_steps(actions, run);
    let observed = run.map_or_else(Vec::new, |run| run.log.clone());
    let spec = replay_steps(scenario, Spec, "spec", &steps);
    let mut raw = scenario.raw.clone();
    raw.name = Some(format!(
        "{}: {property} against a real receiver",
        scenario.name
    ));
    raw.description = Some(format!(
        "Found by `arrival conform {} --target {}`: these actions break {property} on that \
         receiver. `schedule` is what they are from the model's side; `expect` is what the \
         SPEC receiver ends with after exactly those steps.",
        options.source, options.target
    ));
    raw.schedule = Some(
        steps
            .iter()
            .map(|&step| crate::card::trace::raw_step(scenario, step))
            .collect(),
    );
    raw.trace = None;
    raw.expect = Some(spec.as_expect());
    let channels = options.settings.channels;
    raw.conform = Some(ConformBlock {
        target: options.target.clone(),
        violates: property.to_owned(),
        found_by: found_by.to_owned(),
        observe: if channels.every_step {
            "every-step"
        } else {
            "end"
        }
        .to_owned(),
        channels: channels.names(),
        actions: actions.iter().map(|&a| raw_action(scenario, a)).collect(),
        observed,
        reproduced: reproduced.text(),
        seed: Some(options.settings.seed),
        kill_window_ms: Some(options.settings.kill_window_ms),
    });
    raw
}

/// An action as written in a `conform` block.
pub fn raw_action(scenario: &Scenario, action: Action) -> RawAction {
    match action {
        Action::Deliver { delivery, fault } => RawAction {
            deliver: Some(delivery),
            ack_lost: fault == Some(External::LostAck),
            duplicate: fault == Some(External::Duplicate),
            reencoded: fault == Some(External::Reencoded),
            disconnect: fault == Some(External::Disconnect),
            kill: fault == Some(External::Kill),
            kill_after_ack: fault == Some(External::KillAfterAck),
            ..RawAction::default()
        },
        Action::Reconcile(card) => RawAction {
            reconcile: Some(scenario.catalog.name(card).to_owned()),
            ..RawAction::default()
        },
        Action::Restart => RawAction {
            restart: true,
            ..RawAction::default()
        },
    }
}

/// A warning for each delivery whose event holds an integer beyond 64 bits: arrival sends
/// the envelope written out again, where such an integer becomes a float, so the contract's
/// rule for them is not what the receiver is tested on.
fn wide_numbers(scenario: &Scenario) -> Vec<String> {
    fn wide(value: &Value) -> bool {
        match value {
            Value::Number(n) => {
                n.is_f64()
                    && n.as_f64()
                        .is_some_and(|x| x.fract() == 0.0 && x.abs() >= 9.0e18)
            }
            Value::Array(items) => items.iter().any(wide),
            Value::Object(fields) => fields.values().any(wide),
            _ => false,
        }
    }
    scenario
        .raw
        .deliveries
        .iter()
        .filter(|delivery| wide(&delivery.event))
        .map(|delivery| {
            format!(
                "delivery #{}'s event holds an integer beyond 64 bits; arrival sends the event \
                 written out again, where it becomes a float, so the receiver is not tested on \
                 such integers as the sender wrote them",
                delivery.delivery
            )
        })
        .collect()
}

/// What a skipped schedule's answers said before it was set aside, when some were not
/// answers: a receiver that hung there is reported, not hidden.
fn indefinite_note(counts: &Counts) -> String {
    let (cut, attempted) = (counts.cut_by_arrival, counts.attempted);
    match counts.indefinite - cut {
        0 if cut == 0 => String::new(),
        0 if cut == attempted => format!(
            "; before that, arrival cut all {cut} of its request(s) itself (kills in flight, \
             disconnects)"
        ),
        0 => format!(
            "; before that, arrival cut {cut} of its {attempted} request(s) itself (kills in \
             flight, disconnects), and the receiver answered the others definitely"
        ),
        n => format!(
            "; before that, {n} of its {attempted} request(s) had no definite answer from the \
             receiver (timeouts, resets, errors){}",
            match cut {
                0 => String::new(),
                cut => format!(", and arrival cut {cut} more itself"),
            }
        ),
    }
}

/// What the target showed in any schedule: without it, a property that needs it is
/// `unobserved`, not `sampled`.
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    paused: bool,
    unresolved: bool,
    ack: bool,
}

/// The properties a conformance run can speak of, and where each stands.
fn statuses(
    found: &Option<Found>,
    channels: crate::card::conform::Channels,
    killed: bool,
    seen: Seen,
    schedules: usize,
) -> Vec<(String, Status)> {
    let every = channels.every_step;
    let prefix = || Status::Unobserved("the state is read only at the end".into());
    let ack = if !channels.ack {
        Some(Status::Unobserved(
            "acknowledgements' meanings are not compared".into(),
        ))
    } else if !seen.ack {
        Some(Status::Unobserved(
            "the target's acknowledgements never carried their meaning".into(),
        ))
    } else {
        None
    };
    let unresolved = if !channels.unresolved {
        Some(Status::Unobserved(
            "unresolved inputs are not compared".into(),
        ))
    } else if !seen.unresolved {
        Some(Status::Unobserved(
            "the target does not report its unresolved inputs".into(),
        ))
    } else {
        None
    };
    let list: Vec<(&str, Status)> = vec![
        ("no-unknown-card", Status::Sampled),
        (
            "version-monotonic",
            if every { Status::Sampled } else { prefix() },
        ),
        (
            "paused-frozen",
            if !channels.paused {
                Status::Unobserved("paused cards are not compared".into())
            } else if !seen.paused {
                Status::Unobserved("the target does not report its paused cards".into())
            } else if every {
                Status::Sampled
            } else {
                prefix()
            },
        ),
        (
            "held-changes-nothing",
            match ack.clone() {
                Some(status) => status,
                None if every => Status::Sampled,
                None => prefix(),
            },
        ),
        (
            "duplicate-no-effect",
            if every { Status::Sampled } else { prefix() },
        ),
        (
            "ack-implies-recorded",
            if !killed {
                Status::NotExercised("no kill or restart ran".into())
            } else if every {
                Status::Sampled
            } else {
                prefix()
            },
        ),
        (
            "evidence-retained",
            // A changed payload swallowed shows in its acknowledgement's word and in the
            // unresolved inputs read after it: the word alone cannot tell it from one kept.
            match ack.clone().or_else(|| unresolved.clone()) {
                Some(status) => status,
                None if every => Status::Sampled,
                None => Status::Unobserved(
                    "identity records are not shown; a changed payload swallowed shows only \
                     in the acknowledgement's meaning, read after every step"
                        .into(),
                ),
            },
        ),
        (
            "first-record-immutable",
            Status::Unobserved("identity records are not shown".into()),
        ),
        ("convergence", unresolved.unwrap_or(Status::Sampled)),
    ];
    list.into_iter()
        .map(|(name, status)| {
            let status = match found {
                Some(found) if found.property == name => Status::Violated,
                _ if schedules == 0 => Status::NotExercised("no schedule ran".into()),
                _ => status,
            };
            (name.to_owned(), status)
        })
        .collect()
}

impl ConformReport {
    /// Whether the run is what `expect` (`pass` or a property) says it should be.
    pub fn as_expected(&self, expect: &str) -> bool {
        match (&self.failure, expect) {
            (None, "pass") => self.verdict == Verdict::Sampled,
            (Some(found), property) => found.property == property && !found.flaky,
            _ => false,
        }
    }

    /// The report for people.
    pub fn text(&self) -> String {
        let mut out = format!(
            "conform {} against {} (fixture {}, observe {}, channels cards{})\n",
            self.source,
            self.target,
            self.fixture,
            self.observe,
            self.channels
                .iter()
                .map(|c| format!(",{c}"))
                .collect::<String>()
        );
        let c = &self.counts;
        out += &format!(
            "schedules: {} run, {} passed{} ({:.2} s)\ncounts: attempted {}, acknowledged {}, \
             dropped by arrival {}, indefinite {} ({} cut by arrival), lost {}, recovered {}, \
             regressed {}, unexpected {}, changed payloads swallowed {}, kills {}\n",
            self.schedules,
            self.passed,
            match self.set_aside {
                0 => String::new(),
                n => format!(", {n} set aside (their requests are counted)"),
            },
            self.seconds,
            c.attempted,
            c.acknowledged,
            c.dropped_by_arrival,
            c.indefinite,
            c.cut_by_arrival,
            c.lost,
            c.recovered,
            c.regressed,
            c.unexpected,
            c.changed_payloads_swallowed,
            c.kills
        );
        out += &properties_text(&self.properties);
        if !self.cover.is_empty() {
            out += &format!(
                "cover: {} kinds of transition, each by its shortest schedule: {}\n",
                self.cover.len(),
                self.cover.join(", ")
            );
        }
        if let Some((states, schedules)) = self.state_cover {
            out += &format!(
                "state cover: {states} states a receiver can show, by {schedules} schedules\n"
            );
        }
        out += &report_tail(
            &self.skipped,
            &self.warnings,
            self.failure.as_ref().map(Found::view),
            self.verdict,
        );
        out
    }

    /// The run as a JUnit suite: a case per property, and a `harness` case (passed: the
    /// target was started, reset and read every time).
    ///
    /// With `expect` naming the property the receiver must be caught by (a wrong receiver
    /// kept as a test), that property's case passes when it was caught, as expected and
    /// not flaky, and an `expect` case fails when the run is not what `expect` says: the
    /// suite fails exactly when the exit status does.
    pub fn junit(&self, expect: &str) -> ExtraSuite {
        let failure = self
            .failure
            .as_ref()
            .map(|found| found.view().suite_failure());
        junit_suite(
            format!("conform {} against {}", self.source, self.target),
            &self.properties,
            failure.as_ref(),
            expect,
            self.as_expected(expect),
            self.seconds,
        )
    }
}

/// The JUnit suite of a run the harness could not complete: only its `harness` case,
/// failed.
pub fn harness_suite(source: &str, target: &str, error: &HarnessError) -> ExtraSuite {
    ExtraSuite {
        skipped: Vec::new(),
        name: format!("conform {source} against {target}"),
        cases: vec![("harness".into(), Some(error.to_string()))],
        seconds: 0.0,
    }
}
