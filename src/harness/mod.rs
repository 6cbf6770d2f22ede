//! The harness: what every protocol's checker shares, and nothing protocol-specific.
//!
//! A protocol plugs in by implementing [`Protocol`]: its world (the state the model checker
//! explores), its steps (the actions), one `next` that runs the protocol's real decision
//! functions, and a violation marker the world carries once a step broke a property. The
//! harness turns that into a stateright model ([`Checked`]), explores it
//! ([`explore::explore`]), finds a shortest counterexample per violated property, and
//! reports verdicts ([`report`]). Instead of exploring everything, a check may take one
//! shard's deterministic share of the work ([`shard`]; [`merge`] combines the shards'
//! reports into one verdict) or sample random walks ([`simulate`], which finds violations
//! and proves nothing). Model files' common keys and their error messages are in
//! [`model_file`]; bad input of any kind is an [`InputError`].
//!
//! Invariant: the harness never imports a protocol, the store or the pipeline.

pub mod check;
pub mod diagram;
pub mod explore;
pub mod input;
pub mod junit;
pub mod merge;
pub mod model_file;
pub mod report;
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
    /// Whether this model checks property `index` on explored states.
    fn checks(&self, index: usize) -> bool;
    /// The same model checking only property `index`: with one open property stateright
    /// 0.31 stops at the first violation, which breadth-first search finds on a shortest
    /// path.
    fn only(&self, index: usize) -> Self;
    /// Describes a step in domain terms.
    fn describe_step(&self, step: &Self::Step) -> String;
    /// Describes a world in domain terms (Explorer shows it).
    fn describe_world(&self, world: &Self::World) -> String;
    /// How many explored transitions met each decision kind or outcome.
    fn coverage(&self) -> Vec<(&'static str, u64)>;
}

/// How many properties one protocol may have.
pub const MAX_PROPERTIES: usize = 16;

/// A protocol as a stateright model.
#[derive(Clone, Debug)]
pub struct Checked<P>(pub P);

fn holds<P: Protocol, const I: usize>(_: &Checked<P>, world: &P::World) -> bool {
    P::violation(world) != Some(I)
}

type Condition<P> = fn(&Checked<P>, &<P as Protocol>::World) -> bool;

/// stateright takes a property as a plain `fn` pointer: one instance per index.
fn condition<P: Protocol>(index: usize) -> Condition<P> {
    const {
        assert!(MAX_PROPERTIES == 16);
    }
    let all: [Condition<P>; MAX_PROPERTIES] = [
        holds::<P, 0>,
        holds::<P, 1>,
        holds::<P, 2>,
        holds::<P, 3>,
        holds::<P, 4>,
        holds::<P, 5>,
        holds::<P, 6>,
        holds::<P, 7>,
        holds::<P, 8>,
        holds::<P, 9>,
        holds::<P, 10>,
        holds::<P, 11>,
        holds::<P, 12>,
        holds::<P, 13>,
        holds::<P, 14>,
        holds::<P, 15>,
    ];
    all[index]
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
        self.0.next(world, &step)
    }

    fn format_action(&self, step: &P::Step) -> String {
        self.0.describe_step(step)
    }

    fn format_step(&self, world: &P::World, step: P::Step) -> Option<String> {
        self.0
            .next(world, &step)
            .map(|next| self.0.describe_world(&next))
    }

    fn properties(&self) -> Vec<stateright::Property<Self>> {
        debug_assert!(P::PROPERTIES.len() <= MAX_PROPERTIES);
        (0..P::PROPERTIES.len())
            .filter(|&index| self.0.checks(index))
            .map(|index| stateright::Property::always(P::PROPERTIES[index], condition::<P>(index)))
            .collect()
    }
}
