//! The harness: what every protocol's checker shares, and nothing protocol-specific.
//!
//! A protocol plugs in by implementing [`Protocol`]: its world (the state the model checker
//! explores), its steps (the actions), one `next` that runs the protocol's real decision
//! functions, and a violation marker the world carries once a step broke a property. The
//! harness turns that into a stateright model ([`Checked`]), explores it
//! ([`explore::explore`]), finds a shortest counterexample per violated property, and
//! reports verdicts ([`report`]). Explorer gets a model of its own ([`explorer`]) that shows
//! worlds in domain terms. Instead of exploring everything, a check may take one
//! shard's deterministic share of the work ([`shard`]; [`merge`] combines the shards'
//! reports into one verdict) or sample random walks ([`simulate`], which finds violations
//! and proves nothing). Model files' common keys and their error messages are in
//! [`model_file`]; bad input of any kind is an [`InputError`].
//!
//! Invariant: the harness never imports a protocol, the store or the pipeline.

pub mod check;
pub mod checker;
pub mod conform;
pub mod diagram;
pub mod explore;
pub mod explorer;
pub mod input;
pub mod junit;
pub mod merge;
pub mod model_file;
pub mod panic;
pub mod report;
pub mod rng;
pub mod shard;
pub mod simulate;
pub mod timestamp;

pub use input::InputError;

use std::fmt::Debug;
use std::hash::Hash;

/// A protocol the harness can model-check.
///
/// Step properties are checked inside `next` by comparing the world before and after the
/// step; a broken one leaves its index in the successor, which [`Protocol::violation`]
/// reads. Correct steps carry no marker, so checking adds no states.
pub trait Protocol: Clone + Send + Sync + Sized + 'static {
    /// What the model checker explores.
    type World: Clone + Debug + Hash + PartialEq + Send + Sync + 'static;
    /// One step, in domain terms.
    type Step: Clone + Debug + PartialEq + Send + Sync + 'static;

    /// Every property the protocol knows, by name, in the order violations are reported
    /// (at most [`MAX_PROPERTIES`]).
    const PROPERTIES: &'static [&'static str];

    /// The world at the start.
    fn init(&self) -> Self::World;
    /// The steps possible in `world`, in a deterministic order.
    fn steps(&self, world: &Self::World, steps: &mut Vec<Self::Step>);
    /// The world after `step`, or `None` when the step changes nothing the checker needs to
    /// keep (it was still checked).
    fn next(&self, world: &Self::World, step: &Self::Step) -> Option<Self::World>;
    /// The index of the property a step on the way to `world` broke, if any.
    fn violation(world: &Self::World) -> Option<usize>;
    /// `world` marked as the end of a step that panicked: [`Protocol::violation`] of the
    /// result is `Some(Self::PROPERTIES.len())`, the harness's [`panic::PANIC`].
    fn panicked(&self, world: &Self::World) -> Self::World;
    /// Whether this model checks property `index` on explored states (asked only for the
    /// protocol's own properties: `panic` is always checked).
    fn checks(&self, index: usize) -> bool;
    /// The same model checking only property `index`: with one open property stateright
    /// 0.31 stops at the first violation, which breadth-first search finds on a shortest
    /// path. `index` may be `PROPERTIES.len()`: then none of the protocol's own properties
    /// is checked, only `panic`.
    fn only(&self, index: usize) -> Self;
    /// Describes a step in domain terms.
    fn describe_step(&self, step: &Self::Step) -> String;
    /// Describes a world in domain terms (Explorer shows it).
    fn describe_world(&self, world: &Self::World) -> String;
    /// How many explored transitions met each decision kind or outcome.
    fn coverage(&self) -> Vec<(&'static str, u64)>;

    /// Whether this model says which of its steps commute, so that depth-first search may
    /// use sleep sets ([`checker::Commute`], whose contract [`Protocol::sleep_key`] and
    /// [`Protocol::commutes_with`] must keep). The default: no.
    fn sleeps(&self) -> bool {
        false
    }
    /// The step's bit in a sleep set (below 64), or `None` if it never sleeps.
    fn sleep_key(&self, _step: &Self::Step) -> Option<u8> {
        None
    }
    /// The keys of the steps that commute with the step whose key is `key`.
    fn commutes_with(&self, _key: u8) -> checker::SleepSet {
        0
    }
    /// What the step with key `key` does at `before`, leading to `after` (`None`: `next`
    /// dropped it), as a kind for state-dependent independence ([`checker::Commute::kind`],
    /// whose contract this and [`Protocol::commutes_given`] must keep). The default, 0,
    /// claims nothing.
    fn step_kind(
        &self,
        _key: u8,
        _before: &Self::World,
        _step: &Self::Step,
        _after: Option<&Self::World>,
    ) -> checker::Kind {
        0
    }
    /// The keys of the steps that commute with the step whose key is `key` at a world where
    /// it has kind `kind` and they have kind `other`.
    fn commutes_given(
        &self,
        _key: u8,
        _kind: checker::Kind,
        _other: checker::Kind,
    ) -> checker::SleepSet {
        0
    }
    /// Whether this model names steps that depth-first search may take alone
    /// ([`Protocol::eager`]). The default: no.
    fn settles(&self) -> bool {
        false
    }
    /// A step to take alone at `world` ([`checker::Commute::eager`], whose contract this
    /// must keep); `after` is the step that led to `world` from the last world where the
    /// model named none (`None`: look at everything). The default: none.
    fn eager(&self, _world: &Self::World, _after: Option<&Self::Step>) -> Option<Self::Step> {
        None
    }
    /// Which owner's share of the work `world` is, for sharding by owner
    /// ([`shard::Shard`]); `None` at the initial world: this model is not sharded so. A
    /// model that answers must keep [`shard::Owner`]'s contract. The default: `None`.
    fn owner(&self, _world: &Self::World) -> Option<shard::Owner> {
        None
    }
    /// For a model with owners that sleeps: the sleep keys of the steps that may change the
    /// hub summary ([`shard::Owner`]); every other keyed step is on the rest's side. A shard
    /// by owner declares no step on one side independent of a step on the other. The
    /// default: none.
    fn hub_keys(&self) -> checker::SleepSet {
        0
    }
}

impl<P: Protocol> checker::Commute<P::World, P::Step> for Checked<P> {
    fn sleep_key(&self, step: &P::Step) -> Option<u8> {
        self.0.sleep_key(step)
    }

    fn commutes_with(&self, key: u8) -> checker::SleepSet {
        self.0.commutes_with(key)
    }

    fn kind(
        &self,
        key: u8,
        before: &P::World,
        step: &P::Step,
        after: Option<&P::World>,
    ) -> checker::Kind {
        // A step that panicked is marked as a violation, which no kind covers: the
        // protocol sees the marked world and must say 0 for it.
        self.0.step_kind(key, before, step, after)
    }

    fn commutes_given(
        &self,
        key: u8,
        kind: checker::Kind,
        other: checker::Kind,
    ) -> checker::SleepSet {
        self.0.commutes_given(key, kind, other)
    }

    fn eager(&self, world: &P::World, after: Option<&P::Step>) -> Option<P::Step> {
        // A world that breaks a property is a dead end: nothing is taken there.
        if P::violation(world).is_some() {
            return None;
        }
        self.0.eager(world, after)
    }
}

/// How many properties one protocol may have, `panic` included.
pub const MAX_PROPERTIES: usize = 16;

/// The name of property `index`: one of the protocol's, or `panic` just past them.
pub fn property_name<P: Protocol>(index: usize) -> &'static str {
    P::PROPERTIES.get(index).copied().unwrap_or(panic::PANIC)
}

/// The index of the property called `name` (`panic` included).
pub fn property_index<P: Protocol>(name: &str) -> Option<usize> {
    if name == panic::PANIC {
        return Some(P::PROPERTIES.len());
    }
    P::PROPERTIES.iter().position(|known| *known == name)
}

/// Whether `protocol` checks property `index`: `panic` always, its own as it says.
pub fn is_checked<P: Protocol>(protocol: &P, index: usize) -> bool {
    index == P::PROPERTIES.len() || protocol.checks(index)
}

/// A protocol as a stateright model: what the checker explores. Explorer serves
/// [`explorer::ExplorerModel`] instead, whose states print in domain terms. The second
/// field says whether `panic` is checked: always, except in the search for a shortest path
/// to one of the protocol's own properties (with two properties open, stateright 0.31's
/// paths are not always shortest).
#[derive(Clone, Debug)]
pub struct Checked<P>(pub P, pub bool);

/// A stateright model over a protocol's worlds: it can read the violation marker in its
/// states, so the same property table serves the checker's model and Explorer's.
trait Marked: stateright::Model {
    /// The index of the property a step on the way to `state` broke, if any.
    fn violation(state: &Self::State) -> Option<usize>;
}

impl<P: Protocol> Marked for Checked<P> {
    fn violation(world: &P::World) -> Option<usize> {
        P::violation(world)
    }
}

fn holds<M: Marked, const I: usize>(_: &M, state: &M::State) -> bool {
    M::violation(state) != Some(I)
}

type Condition<M> = fn(&M, &<M as stateright::Model>::State) -> bool;

/// stateright takes a property as a plain `fn` pointer: one instance per index.
fn condition<M: Marked>(index: usize) -> Condition<M> {
    const {
        assert!(MAX_PROPERTIES == 16);
    }
    let all: [Condition<M>; MAX_PROPERTIES] = [
        holds::<M, 0>,
        holds::<M, 1>,
        holds::<M, 2>,
        holds::<M, 3>,
        holds::<M, 4>,
        holds::<M, 5>,
        holds::<M, 6>,
        holds::<M, 7>,
        holds::<M, 8>,
        holds::<M, 9>,
        holds::<M, 10>,
        holds::<M, 11>,
        holds::<M, 12>,
        holds::<M, 13>,
        holds::<M, 14>,
        holds::<M, 15>,
    ];
    all[index]
}

/// The properties `protocol` checks, and `panic` last if `panics`, as stateright properties
/// of model `M`.
fn properties<P: Protocol, M: Marked>(protocol: &P, panics: bool) -> Vec<stateright::Property<M>> {
    debug_assert!(P::PROPERTIES.len() < MAX_PROPERTIES);
    let own = P::PROPERTIES.len();
    (0..=own)
        .filter(|&index| {
            if index == own {
                panics
            } else {
                protocol.checks(index)
            }
        })
        .map(|index| stateright::Property::always(property_name::<P>(index), condition::<M>(index)))
        .collect()
}

impl<P: Protocol> stateright::Model for Checked<P> {
    type State = P::World;
    type Action = P::Step;

    fn init_states(&self) -> Vec<P::World> {
        vec![self.0.init()]
    }

    fn actions(&self, world: &P::World, actions: &mut Vec<P::Step>) {
        if P::violation(world).is_none() {
            self.0.steps(world, actions);
        }
    }

    fn next_state(&self, world: &P::World, step: P::Step) -> Option<P::World> {
        panic::next(&self.0, world, &step)
    }

    fn format_action(&self, step: &P::Step) -> String {
        self.0.describe_step(step)
    }

    fn properties(&self) -> Vec<stateright::Property<Self>> {
        properties(&self.0, self.1)
    }
}
