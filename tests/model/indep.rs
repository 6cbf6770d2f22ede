//! State-dependent independence in the checker's sleep sets (`card::commute`'s kinds, the
//! argument in docs/checker.md): the claims hold step by step in every reachable world,
//! and sleep sets with them visit the same states and find the same verdicts, violated
//! properties and shortest counterexamples as the search without sleep sets, and as sleep
//! sets with static footprints only.

use arrival::card::check::{self, CheckOptions, ModelReport, Strategy};
use arrival::card::commute::{HELD, INERT, RAISING};
use arrival::card::fixture::Scenario;
use arrival::card::model::ReceiverModel;
use arrival::card::model_file::{Expectation, LoadedModel, ModelFile};
use arrival::card::policy::{Mutant, PolicyName, Spec};
use arrival::card::property::Properties;
use arrival::card::step::{Budgets, Reconciliation, Step};
use arrival::card::world::World;
use arrival::harness::checker::{self, Commute, Counters, Kind, Order, SleepSet};
use arrival::harness::{Checked, Protocol};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A generated fixture with `cards` cards and `deliveries` deliveries.
fn generated(seed: u64, cards: usize, deliveries: usize) -> Arc<Scenario> {
    let options = arrival::card::generate::GenOptions {
        cards,
        deliveries,
        dup_rate: 0.15,
        conflict_rate: 0.15,
        seed,
        out: None,
    };
    let raw = arrival::card::generate::fixture(&options).expect("generates");
    Arc::new(Scenario::from_raw(Path::new("(generated)"), raw).expect("valid"))
}

const ONE_EACH: Budgets = Budgets {
    duplicates: 1,
    lost_acks: 1,
    crashes: 1,
    expiries: 0,
    reencodings: 1,
};

/// The model as `arrival check` builds it under SPEC, every reduction on.
fn model(
    scenario: Arc<Scenario>,
    budgets: Budgets,
    reconciliation: Reconciliation,
) -> ReceiverModel {
    ReceiverModel::new(scenario, None, budgets, reconciliation)
        .with_symmetry()
        .with_merges(true)
        .with_sleep_sets()
}

#[test]
fn steps_independent_given_their_kinds_commute_there_and_keep_their_kinds() {
    // In every reachable world of generated fixtures (SPEC, one fault of each kind, both
    // reconciliation modes): for every step `t` and every step `u` the model declares
    // independent of it there, given both steps' kinds there (deliveries whose footprints
    // share only cards, both inert or one inert and one raising), neither enables or
    // disables the other, both orders reach the same world without breaking a property,
    // and each keeps its kind (and whether the model drops it) after the other. For pairs
    // independent in every world (static footprints), kinds must be kept as well: the
    // checker carries a sleeping step's kind down instead of taking the step again.
    let (mut given, mut raising, mut kept_static, mut worlds) = (0usize, 0usize, 0usize, 0usize);
    let (mut both_raising, mut held, mut changed_kind) = (0usize, 0usize, 0usize);
    for seed in 1..=4 {
        for reconciliation in [Reconciliation::Interleaved, Reconciliation::End] {
            let scenario = generated(seed, 2, 7);
            let model = model(scenario.clone(), ONE_EACH, reconciliation);
            let commuting = model.commuting.clone().expect("generated fixtures commute");
            let after = |world: &World, step: Step| {
                arrival::card::properties::checked_transition(
                    &scenario,
                    Spec,
                    Properties::SPEC,
                    world,
                    step,
                )
                .0
            };
            let enabled = |world: &World| {
                let mut steps = Vec::new();
                model.steps(world, &mut steps);
                steps
            };
            // A step's kind at `world` and whether the model keeps its successor.
            let kind = |world: &World, step: &Step| -> (Kind, bool) {
                let next = model.next(world, step);
                let key = commuting.key(step).expect("small fixtures key every step");
                (
                    model.step_kind(key, world, step, next.as_ref()),
                    next.is_some(),
                )
            };
            #[allow(clippy::mutable_key_type)]
            let mut seen = std::collections::HashSet::new();
            let mut stack = vec![model.init()];
            while let Some(world) = stack.pop() {
                if !seen.insert(world.clone()) {
                    continue;
                }
                worlds += 1;
                let here = enabled(&world);
                for t in &here {
                    let (kind_t, kept_t) = kind(&world, t);
                    let key_t = commuting.key(t).expect("keyed");
                    let world_t = after(&world, *t);
                    for u in &here {
                        if u == t {
                            continue;
                        }
                        let (kind_u, kept_u) = kind(&world, u);
                        let key_u = commuting.key(u).expect("keyed");
                        let is_static = commuting.commute(t, u);
                        let is_given = kind_t != 0
                            && kind_u != 0
                            && model.commutes_given(key_t, kind_t, kind_u) & (1 << key_u) != 0;
                        if !is_static && !is_given {
                            continue;
                        }
                        let what = format!(
                            "seed {seed} {reconciliation:?}: {t:?} ({kind_t}) and {u:?} \
                             ({kind_u}) from {world:?}"
                        );
                        // Whatever the reason they commute, `u` keeps its kind after `t`, or
                        // gets one whose claims include its kind's (a raising step after a
                        // higher raise is stale: inert), and whether the model drops it.
                        assert!(enabled(&world_t).contains(u), "{what}");
                        let (kind_after, kept_after) = kind(&world_t, u);
                        assert_eq!(kept_after, kept_u, "{what}");
                        if kind_after != kind_u {
                            assert!(claims_include(&model, key_u, kind_after, kind_u), "{what}");
                            changed_kind += 1;
                        }
                        if is_static {
                            kept_static += 1;
                            continue;
                        }
                        assert!(commuting.card_only(t, u), "{what}");
                        given += 1;
                        raising += usize::from(kind_t == RAISING || kind_u == RAISING);
                        held += usize::from(kind_t == HELD || kind_u == HELD);
                        let world_u = after(&world, *u);
                        let (tu, ut) = (after(&world_t, *u), after(&world_u, *t));
                        assert_eq!(tu.violation, None, "{what}");
                        assert_eq!(ut.violation, None, "{what}");
                        assert_eq!(world_t.violation, None, "{what}");
                        if kind_t == RAISING && kind_u == RAISING {
                            // The lower one is `applied` in one order and `stale` in the
                            // other: one state once settled decisions are merged.
                            both_raising += 1;
                            assert_ne!(tu, ut, "{what}");
                            assert_eq!(identity(&tu), identity(&ut), "{what}");
                        } else {
                            assert_eq!(tu, ut, "{what}");
                            let pair = [kind_t, kind_u];
                            assert!(
                                pair.contains(&INERT)
                                    || (pair.contains(&HELD) && pair.contains(&RAISING)),
                                "{what}"
                            );
                        }
                    }
                    if kept_t {
                        stack.push(model.next(&world, t).expect("kept"));
                    }
                }
            }
        }
    }
    assert!(worlds > 1000, "{worlds} worlds");
    assert!(given > 1000, "{given} pairs independent given their kinds");
    assert!(raising > 100, "{raising} of them with a raising step");
    assert!(
        both_raising > 10,
        "{both_raising} of them with two raising steps"
    );
    assert!(
        held > 10,
        "{held} of them with a step held at a paused card"
    );
    assert!(
        changed_kind > 10,
        "{changed_kind} steps changed kind after the other"
    );
    assert!(kept_static > 1000, "{kept_static} static pairs");
}

/// Whether every claim a step with key `key` makes with kind `from` (the keys independent of
/// it given each other kind) it also makes with kind `to`.
fn claims_include(model: &ReceiverModel, key: u8, to: Kind, from: Kind) -> bool {
    use arrival::harness::Protocol;
    (1..checker::KINDS as Kind).all(|other| {
        let (before, now) = (
            model.commutes_given(key, from, other),
            model.commutes_given(key, to, other),
        );
        before & !now == 0
    })
}

/// A world's identity in the checker's visited set.
fn identity(world: &World) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(world)
}

/// The model's sleep keys and static footprints, without its kinds: sleep sets as they
/// were before state-dependent independence.
struct StaticOnly<'m>(&'m Checked<ReceiverModel>);

impl Commute<World, Step> for StaticOnly<'_> {
    fn sleep_key(&self, step: &Step) -> Option<u8> {
        self.0 .0.sleep_key(step)
    }

    fn commutes_with(&self, key: u8) -> SleepSet {
        self.0 .0.commutes_with(key)
    }
}

/// One depth-first run of arrival's checker: unique states, generated states and the
/// names of the violated properties.
fn explore(
    model: &Checked<ReceiverModel>,
    threads: usize,
    commute: Option<&(dyn Commute<World, Step> + Sync)>,
) -> (usize, usize, Vec<&'static str>) {
    let counters = Counters::default();
    let outcome = checker::check(model, Order::DepthFirst, threads, None, &counters, commute);
    let mut violated: Vec<&'static str> =
        outcome.discoveries.iter().map(|(name, _)| *name).collect();
    violated.sort_unstable();
    (
        counters.unique.load(std::sync::atomic::Ordering::Relaxed),
        counters.states.load(std::sync::atomic::Ordering::Relaxed),
        violated,
    )
}

#[test]
fn kinds_keep_every_state_and_verdict_and_prune_transitions() {
    // Generated fixtures with several deliveries per card (the case kinds are for), SPEC,
    // several fault budgets, both reconciliation modes, one and two threads: depth-first
    // search without sleep sets, with static footprints only, and with kinds as well visits
    // the same unique states and finds the same violated properties (none: generated
    // fixtures pass). On one thread, where generated counts are exact, kinds never
    // generate more than static footprints alone, and fewer on some fixture.
    let (mut fewer, mut runs) = (0usize, 0usize);
    for seed in 1..=4 {
        for (cards, deliveries) in [(2, 8), (3, 9)] {
            let scenario = generated(seed, cards, deliveries);
            for budgets in [
                ONE_EACH,
                Budgets {
                    duplicates: 0,
                    lost_acks: 2,
                    crashes: 1,
                    expiries: 0,
                    reencodings: 0,
                },
            ] {
                for reconciliation in [Reconciliation::Interleaved, Reconciliation::End] {
                    let checked = Checked(model(scenario.clone(), budgets, reconciliation), true);
                    assert!(checked.0.sleeps());
                    for threads in [1, 2] {
                        let what = format!(
                            "seed {seed}, {cards} cards, {deliveries} deliveries, {budgets:?}, \
                             {reconciliation:?}, {threads} threads"
                        );
                        let full = explore(&checked, threads, None);
                        let statics = explore(&checked, threads, Some(&StaticOnly(&checked)));
                        let kinds = explore(&checked, threads, Some(&checked));
                        assert_eq!((full.0, &full.2), (statics.0, &statics.2), "{what}");
                        assert_eq!((full.0, &full.2), (kinds.0, &kinds.2), "{what}");
                        assert!(full.2.is_empty(), "{what}: generated fixtures pass");
                        if threads == 1 {
                            assert!(kinds.1 <= statics.1 && statics.1 <= full.1, "{what}");
                            fewer += usize::from(kinds.1 < statics.1);
                        }
                        runs += 1;
                    }
                }
            }
        }
    }
    assert!(runs >= 64);
    assert!(
        fewer > 8,
        "kinds prune transitions on {fewer} fixtures only"
    );
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

/// A sweep fixture as the sweep checks it (one fault of each kind, reconciliation
/// interleaved, depth first), under `policy`.
fn sweep_model(seed: u64, policy: PolicyName) -> LoadedModel {
    let raw = arrival::card::generate::small(seed).expect("generates");
    let scenario = Scenario::from_raw(Path::new("(generated)"), raw).expect("valid");
    LoadedModel {
        path: PathBuf::from(format!("sweep-{seed}")),
        file: ModelFile {
            description: None,
            fixture: "(generated)".into(),
            duplicates: 1,
            lost_acks: 1,
            crashes: 1,
            expiries: 0,
            reencodings: 0,
            reconciliation: Reconciliation::Interleaved,
            policy: policy.to_string(),
            strategy: Strategy::Dfs,
            threads: 2,
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
        scenario: Arc::new(scenario),
        policy,
        expectation: Expectation::Pass,
        checked: Properties::SPEC,
        per_delivery: None,
    }
}

#[test]
fn sleep_sets_with_kinds_keep_verdicts_and_shortest_traces_on_sweep_fixtures() {
    // The sweep's own fixtures (its first 12 seeds), checked as `arrival check --sweep`
    // checks them: with sleep sets (and so kinds, under SPEC) and without, the same
    // verdict, violated properties and shortest counterexample lengths under SPEC and every
    // mutant, and under SPEC the same unique states; also with an expectation no order
    // meets, so that SPEC fails convergence with sleep sets on.
    let compare = |mut loaded: LoadedModel, what: &str| {
        loaded.file.sleep_sets = false;
        let full = run(&loaded);
        loaded.file.sleep_sets = true;
        let asleep = run(&loaded);
        assert_eq!(
            (full.verdict.as_str(), &full.violated, trace_lengths(&full)),
            (
                asleep.verdict.as_str(),
                &asleep.violated,
                trace_lengths(&asleep)
            ),
            "{what}"
        );
        (full, asleep)
    };
    let policies =
        std::iter::once(PolicyName(None)).chain(Mutant::ALL.map(|mutant| PolicyName(Some(mutant))));
    let seeds = arrival::card::sweep::fixture_seeds(1, 12);
    let mut caught = 0;
    for policy in policies {
        for &seed in &seeds {
            let (full, asleep) = compare(sweep_model(seed, policy), &format!("{seed} {policy}"));
            if policy.0.is_none() {
                assert_eq!(full.unique_states, asleep.unique_states, "{seed}");
                assert_eq!(full.verdict, "pass", "{seed}");
            } else {
                caught += usize::from(!full.violated.is_empty());
            }
        }
    }
    assert!(caught > 0, "some mutant is caught on the sweep's fixtures");
    for &seed in &seeds[..4] {
        let mut loaded = sweep_model(seed, PolicyName(None));
        let mut raw = loaded.scenario.raw.clone();
        let expect = raw.expect.as_mut().expect("sweep fixtures expect");
        expect.unresolved.push("no-such-event".into());
        loaded.scenario =
            Arc::new(Scenario::from_raw(Path::new("(generated)"), raw).expect("still valid"));
        let (full, asleep) = compare(loaded, &format!("{seed}, expect no order meets"));
        assert_eq!(full.violated, ["convergence"], "{seed}");
        assert_eq!(asleep.violated, ["convergence"], "{seed}");
    }
}

fn run(loaded: &LoadedModel) -> ModelReport {
    let options = CheckOptions {
        progress: false,
        ..CheckOptions::default()
    };
    check::run(loaded, &options).unwrap_or_else(|error| panic!("{error}"))
}

#[test]
fn raising_steps_commute_with_each_other_only_when_settled_decisions_are_merged() {
    // Without merged settled decisions, the lower of two raises is `applied` in one order
    // and `stale` in the other: two states, so the claim must not be made.
    use arrival::harness::Protocol;
    let scenario = generated(1, 2, 8);
    let merged = model(scenario.clone(), ONE_EACH, Reconciliation::Interleaved);
    let whole = ReceiverModel::new(scenario, None, ONE_EACH, Reconciliation::Interleaved)
        .with_symmetry()
        .with_sleep_sets();
    let pairs = |model: &ReceiverModel| -> u32 {
        (0..64u8)
            .map(|key| model.commutes_given(key, RAISING, RAISING).count_ones())
            .sum()
    };
    assert!(pairs(&merged) > 0);
    assert_eq!(pairs(&whole), 0);
    // Steps with other kinds commute as before either way.
    let inert = |model: &ReceiverModel| -> u32 {
        (0..64u8)
            .map(|key| model.commutes_given(key, INERT, RAISING).count_ones())
            .sum()
    };
    assert_eq!(inert(&merged), inert(&whole));
    assert!(inert(&whole) > 0);
}
