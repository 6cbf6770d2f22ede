//! Sharding by owner (`harness::shard::Owner`, `card::model::Hub`, the argument in
//! docs/checker.md): on every card model file that has owners, under SPEC and every mutant,
//! the worlds four shards reach together are exactly the worlds one run reaches, and so are
//! the properties they find broken; and the shards of B62-15 overlap by the pinned amount.

use arrival::card::check::build_model;
use arrival::card::model::ReceiverModel;
use arrival::card::model_file::load_model;
use arrival::card::policy::PolicyName;
use arrival::card::property::{Properties, Property};
use arrival::harness::checker::{self, Counters, Kind, Order, SleepSet};
use arrival::harness::shard::{Owner, OwnerSplit, Shard, ShardSpec};
use arrival::harness::{Checked, Protocol};
use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A world's identity, as the checker's visited set tells worlds apart (a card world's
/// `Hash` is its fingerprint in the run's view, which merges some worlds that differ).
fn identity<W: std::hash::Hash>(world: &W) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(world)
}

/// A protocol that keeps the identity of every world the checker expands: every world it
/// admits that breaks no property. (Not the worlds a step passes through before the
/// checker settles them with steps taken alone, which depend on the path; and not the
/// violating ones, dead ends a shard may reach along another path, breaking the property
/// first in a world one run never meets.)
#[derive(Clone, Debug)]
struct Recording<P: Protocol> {
    inner: P,
    key: fn(&P::World) -> u64,
    reached: Arc<Mutex<HashSet<u64>>>,
}

impl<P: Protocol> Protocol for Recording<P> {
    type World = P::World;
    type Step = P::Step;
    const PROPERTIES: &'static [&'static str] = P::PROPERTIES;

    fn init(&self) -> P::World {
        self.inner.init()
    }
    fn steps(&self, world: &P::World, steps: &mut Vec<P::Step>) {
        self.reached.lock().unwrap().insert((self.key)(world));
        self.inner.steps(world, steps)
    }
    fn next(&self, world: &P::World, step: &P::Step) -> Option<P::World> {
        self.inner.next(world, step)
    }
    fn violation(world: &P::World) -> Option<usize> {
        P::violation(world)
    }
    fn panicked(&self, world: &P::World) -> P::World {
        self.inner.panicked(world)
    }
    fn checks(&self, index: usize) -> bool {
        self.inner.checks(index)
    }
    fn only(&self, index: usize) -> Self {
        Recording {
            inner: self.inner.only(index),
            key: self.key,
            reached: Arc::clone(&self.reached),
        }
    }
    fn describe_step(&self, step: &P::Step) -> String {
        self.inner.describe_step(step)
    }
    fn describe_world(&self, world: &P::World) -> String {
        self.inner.describe_world(world)
    }
    fn coverage(&self) -> Vec<(&'static str, u64)> {
        self.inner.coverage()
    }
    fn sleeps(&self) -> bool {
        self.inner.sleeps()
    }
    fn sleep_key(&self, step: &P::Step) -> Option<u8> {
        self.inner.sleep_key(step)
    }
    fn commutes_with(&self, key: u8) -> SleepSet {
        self.inner.commutes_with(key)
    }
    fn step_kind(
        &self,
        key: u8,
        before: &P::World,
        step: &P::Step,
        after: Option<&P::World>,
    ) -> Kind {
        self.inner.step_kind(key, before, step, after)
    }
    fn commutes_given(&self, key: u8, kind: Kind, other: Kind) -> SleepSet {
        self.inner.commutes_given(key, kind, other)
    }
    fn settles(&self) -> bool {
        self.inner.settles()
    }
    fn eager(&self, world: &P::World, after: Option<&P::Step>) -> Option<P::Step> {
        self.inner.eager(world, after)
    }
    fn owner(&self, world: &P::World) -> Option<Owner> {
        self.inner.owner(world)
    }
}

/// One depth-first run of `protocol` as `arrival check` runs it (sleep sets and steps taken
/// alone when the model has them): the worlds it reached, its unique states and the
/// violated properties.
fn run<P: Protocol>(
    protocol: P,
    key: fn(&P::World) -> u64,
) -> (HashSet<u64>, usize, BTreeSet<&'static str>) {
    let recording = Checked(
        Recording {
            inner: protocol,
            key,
            reached: Arc::default(),
        },
        true,
    );
    let counters = Counters::default();
    let commute: Option<&(dyn checker::Commute<P::World, P::Step> + Sync)> =
        (recording.0.sleeps() || recording.0.settles()).then_some(&recording);
    let outcome = checker::check(&recording, Order::DepthFirst, 2, None, &counters, commute);
    let violated = outcome.discoveries.iter().map(|(name, _)| *name).collect();
    let reached = std::mem::take(&mut *recording.0.reached.lock().unwrap());
    let unique = counters.unique.load(std::sync::atomic::Ordering::Relaxed);
    (reached, unique, violated)
}

/// The worlds, unique states per shard and violated properties of `count` shards of
/// `model`, sharded by owner.
fn shards(
    model: &ReceiverModel,
    count: usize,
) -> (HashSet<u64>, Vec<usize>, BTreeSet<&'static str>) {
    shards_listing(model, count, usize::MAX)
}

/// [`shards`], listing the owners only if there are at most `limit` shared worlds.
fn shards_listing(
    model: &ReceiverModel,
    count: usize,
    limit: usize,
) -> (HashSet<u64>, Vec<usize>, BTreeSet<&'static str>) {
    let (mut union, mut unique, mut violated) = (HashSet::new(), Vec::new(), BTreeSet::new());
    for index in 1..=count {
        let shard = Shard::listing_at_most(model.clone(), ShardSpec { index, count }, limit);
        assert!(shard.owners().is_some(), "sharded by owner");
        let (reached, states, broken) = run(shard, |world| identity(&world.world));
        union.extend(reached);
        unique.push(states);
        violated.extend(broken);
    }
    (union, unique, violated)
}

/// The card model files (not split: a split model shards by parts).
fn card_models() -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir("models")
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            name.ends_with(".toml") && !name.starts_with("acmeflow")
        })
        .collect();
    files.sort();
    files
}

#[test]
fn four_shards_by_owner_reach_every_world_and_violation_of_one_run() {
    // Every card model file that has owners under its own policy and SPEC, and the main
    // model (`b62-15.toml`, three parts, every fault) under every mutant: the union of
    // four shards' expanded worlds equals one run's, and so do the violated properties.
    // (Every mutant on every file compared 288 pairs alike, 154 with violations, on
    // 2026-12-04; that takes minutes, so CI runs this share.) Pinned: how many (file, policy) pairs were compared,
    // how many broke a property (so violations are compared too), and how many had no
    // owners.
    let (mut compared, mut failing, mut without) = (0usize, 0usize, 0usize);
    for file in card_models() {
        let loaded = load_model(&file, None).expect("loads");
        if loaded.file.split {
            continue;
        }
        let every = file.ends_with("b62-15.toml");
        let mut policies = vec![loaded.policy, PolicyName(None)];
        policies.dedup();
        if every {
            policies = PolicyName::every();
        }
        for policy in policies {
            let loaded = load_model(&file, Some(policy)).expect("loads");
            let model = build_model(&loaded, loaded.checked);
            if model.owner(&model.init()).is_none() {
                without += 1;
                continue;
            }
            let what = format!("{} under {policy}", file.display());
            let (whole, _, violated) = run(model.clone(), identity);
            let (union, _, merged) = shards(&model, 4);
            assert_eq!(merged, violated, "{what}: violated properties");
            let missing = whole.iter().filter(|world| !union.contains(world)).count();
            let extra = union.iter().filter(|world| !whole.contains(world)).count();
            assert_eq!((missing, extra), (0, 0), "{what}: worlds");
            compared += 1;
            failing += usize::from(!violated.is_empty());
        }
    }
    assert_eq!((compared, failing, without), (46, 24, 16));
}

#[test]
fn owners_handed_out_by_hash_reach_every_world_and_violation_too() {
    // With too many shared worlds to list the owners (a limit of 10 here, 20,000 in
    // `check`), each owner goes to the shard its hash names. B62-15 under SPEC and under the
    // mutant that ignores pauses: the same worlds and violations as one run; pinned, the
    // shards' unique states.
    for (policy, unique) in [
        (None, vec![885, 885, 1_171, 1_171]),
        (Some("ignore-pause"), vec![5_508, 7_881, 9_899, 8_236]),
    ] {
        let policy = policy.map(|name: &str| name.parse::<PolicyName>().expect("a mutant"));
        let loaded = load_model(Path::new("models/b62-15.toml"), policy).expect("loads");
        let model = build_model(&loaded, loaded.checked);
        let shard = Shard::listing_at_most(model.clone(), ShardSpec { index: 1, count: 4 }, 10);
        assert_eq!(shard.owners().map(|split| split.owners), Some(None));
        let (whole, _, violated) = run(model.clone(), identity);
        let (union, sizes, merged) = shards_listing(&model, 4, 10);
        assert_eq!((merged, union == whole), (violated, true), "{policy:?}");
        assert_eq!(sizes, unique, "{policy:?}");
    }
}

#[test]
fn convergence_judged_at_terminal_worlds_only_is_found_by_the_shards() {
    // `convergence` is judged where nothing is left to do, not on the step that breaks it,
    // so the step that makes it fail cannot be moved ahead of the hub's steps; the terminal
    // world is reached in its owner's shard instead (docs/checker.md). Checked alone, under
    // the mutant that forgets held inputs when reconciling (card-8's hold, a non-hub part).
    let loaded = load_model(
        Path::new("models/mutant-forget-held-after-reconcile.toml"),
        None,
    )
    .expect("loads");
    let model = build_model(&loaded, Properties::only(Property::Convergence));
    assert!(model.owner(&model.init()).is_some());
    let (whole, _, violated) = run(model.clone(), identity);
    let (union, _, merged) = shards(&model, 4);
    assert_eq!(violated, BTreeSet::from(["convergence"]));
    assert_eq!(merged, violated);
    assert_eq!(whole, union);
}

#[test]
fn four_shards_of_b62_15_by_owner_overlap_by_the_pinned_amount() {
    // Eight owners (which of card-8's and card-99's deliveries are recorded), two per shard;
    // 61 shared worlds (card-7 untouched) met finding them. The shards' unique states sum to
    // 4,112 against one run's 4,031: 1.02 times.
    let loaded = load_model(Path::new("models/b62-15.toml"), None).expect("loads");
    let model = build_model(&loaded, loaded.checked);
    let (_, whole, _) = run(model.clone(), identity);
    let (_, unique, _) = shards(&model, 4);
    let shard = Shard::new(model.clone(), ShardSpec { index: 1, count: 4 });
    assert_eq!(
        (shard.owners(), whole, unique),
        (
            Some(OwnerSplit {
                owners: Some(8),
                taken: Some(2),
                shared: 61
            }),
            4_031,
            vec![885, 599, 1_457, 1_171]
        )
    );
}

#[test]
fn a_model_has_owners_only_with_parts_that_wait_for_nothing_and_forget_nothing() {
    // Reconciliation held to the end waits for every delivery, and expiry forgets records:
    // either ties the parts, so those models are sharded by their first steps. One card
    // alone is one part.
    for (file, owners) in [
        ("models/b62-15.toml", true),
        ("models/b62-15-per-delivery.toml", true),
        ("models/b62-15-end.toml", false),
        ("models/b62-15-retention.toml", false),
        ("models/conflicted-first-record.toml", false),
    ] {
        let loaded = load_model(Path::new(file), None).expect("loads");
        let model = build_model(&loaded, loaded.checked);
        assert_eq!(model.owner(&model.init()).is_some(), owners, "{file}");
        let shard = Shard::new(model, ShardSpec { index: 2, count: 4 });
        assert_eq!(shard.owners().is_some(), owners, "{file}");
    }
}
