//! arrival's own explicit-state checker for stateright models: the same `Model` (initial
//! states, actions, `next_state`, `always` properties) explored faster than stateright
//! 0.31's checkers, which clone the whole action path into every queued state and keep the
//! visited set in a `DashMap`.
//!
//! What makes it fast, and why each part is sound:
//! - The visited set is an open-addressing table of 64-bit fingerprints, lock-free for
//!   inserts (a compare-and-swap on an empty slot), with the parent's fingerprint beside
//!   each entry; traces are rebuilt from those parents after the run, by replaying the
//!   model from its initial state and matching fingerprints, the way stateright rebuilds
//!   its paths. Two distinct states with one fingerprint would be merged: with a 64-bit
//!   hash the chance is about n²/2⁶⁵ (under 10⁻⁵ for ten million states), the same risk
//!   stateright and Spin's hash-compact mode take.
//! - Breadth-first search runs level by level: every state of one depth is expanded
//!   before any of the next, so the first violation found is on a shortest path, and a
//!   level's states are shared among the threads in chunks.
//! - Depth-first search gives each thread its own stack and lets a thread with a deep
//!   stack hand its oldest half to an idle one: exhaustive in any order, with memory for
//!   the stacks only.
//!
//! - Depth-first search may also carry sleep sets (Godefroid's "sleep sets", without
//!   persistent sets), when the model says which of its actions commute ([`Commute`]):
//!   after a state's action `t` has been explored, each later sibling's subtree leaves `t`
//!   asleep for as long as only actions independent of `t` follow, because the same states
//!   are reached with `t` taken first. Sleep sets prune transitions, not states: every
//!   reachable state that breaks no property is still visited, so a passing run counts the
//!   unique states of a run without them (which `tests/model.rs` checks); a failing run
//!   may skip violating dead ends behind a sleeping action (see [`Commute`]), never a
//!   violated property. A state reached again with actions awake that were asleep in
//!   every earlier visit takes just those actions (Godefroid's rule for sleep sets with
//!   state matching), with the intersection of the visits' sleep sets asleep; each slot
//!   keeps the union of the awake sets it has been visited with, so one atomic OR decides
//!   which visit wakes, and takes, which action. Model steps may also commute at a state
//!   only, given what each does there ([`Commute::kind`]). Why this is complete for any
//!   order of work among threads is argued in docs/checker.md. Breadth-first
//!   search never sleeps (it must keep shortest paths, and a re-expansion at a later level
//!   could give a longer one).
//! - Depth-first search may also take a step alone where the model names one
//!   ([`Commute::eager`], an ample set of one step): it follows such steps at once and keeps
//!   only the world where none is named, so the worlds on the way are never stored. That
//!   cuts states, not only transitions; the verdict and the violated properties stay the
//!   same (docs/checker.md). Breadth-first search never asks, so its shortest paths stay.
//!
//! Only `always` properties are supported (the harness has no others). A property is
//! judged on every state when it is first generated, the initial states included; a state
//! that violates one is still counted and never expanded (the harness's model offers no
//! actions there).

use foldhash::quality::FixedState;
use stateright::{Expectation, Model};
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, RwLock};

/// A state's 64-bit identity in the visited set; never 0 (0 marks an empty slot).
type Fingerprint = u64;

/// Marks "no parent" (an initial state).
const ROOT: Fingerprint = 0;

/// A set of sleeping actions, by [`Commute::sleep_key`]: bit `k` is the action with key `k`.
pub type SleepSet = u64;

/// Which actions commute, for sleep sets in depth-first search.
///
/// Two actions with keys `a` and `b` may be declared independent (each in the other's
/// [`Commute::commutes_with`]) only if, in every reachable state: taking one neither
/// enables nor disables the other, and where both are enabled both orders end in the same
/// state and each is judged by every property the same way before and after the other.
/// An action's key must name the same action in every state where it is enabled. A model
/// with no opinion returns `None` for every action: nothing sleeps.
///
/// A state that breaks a property is a dead end (the checker takes no step from it), so
/// an action that leads to one "disables" every other. That costs nothing: the violation
/// is found where the action is taken, and an action asleep at a state was taken at an
/// ancestor, where it is judged alike; the dead ends pruned behind it are only other
/// violating states, whose violations show on the step into them the same way.
///
/// State-dependent independence ([`Commute::kind`], [`Commute::commutes_given`]): a model
/// may also sort each step it takes at a state into a [`Kind`] (what the step does there,
/// such as "leaves its card unchanged") and declare steps independent *at that state*
/// given their kinds there. Such a claim keeps the contract above at that state only: if
/// at state `s` the action `u` has kind `k` and an action `t` with a key in
/// `commutes_given(key(u), k, l)` has kind `l`, then at `s` neither enables nor disables
/// the other, both orders end in the same state, and each is judged alike before and
/// after the other. Every independence the checker uses, static or given kinds, must also
/// keep what a sleeping action's kind claims: an action independent of `u` at `s` has at
/// `s·u` its kind at `s`, or one whose claims include those of its kind at `s` (the
/// checker carries sleeping actions' kinds down instead of taking them again, so every
/// claim it makes with a carried kind must hold with the action's kind where it is made).
/// Kind 0 claims nothing. docs/checker.md argues why sleep sets stay complete with this.
pub trait Commute<S, A> {
    /// The action's bit in a sleep set (below 64); `None`: it never sleeps.
    fn sleep_key(&self, action: &A) -> Option<u8>;
    /// The keys of the actions independent of the action with key `key`, in every state.
    fn commutes_with(&self, key: u8) -> SleepSet;
    /// The kind of the action with key `key` taken at `before`, leading to `after`
    /// (`None`: the model dropped the step); below [`KINDS`], 0 claiming nothing.
    fn kind(&self, _key: u8, _before: &S, _action: &A, _after: Option<&S>) -> Kind {
        0
    }
    /// The keys of the actions independent of the action with key `key` at a state where
    /// it has kind `kind` and they have kind `other` (both 1 or more).
    fn commutes_given(&self, _key: u8, _kind: Kind, _other: Kind) -> SleepSet {
        0
    }
    /// A step to take alone at `state` (an ample set of one), if the model names one;
    /// `after` is the step that led to `state` from a world where the model named none
    /// (`None`: look at everything). Depth-first search follows such steps at once and
    /// keeps only the world where none is named (see [`check`]); breadth-first search never
    /// asks. The model may name a step `e` at `s` only if: along every path of other steps
    /// from `s`, `e` stays enabled and keeps these conditions; every other step `u` that the
    /// model does not drop at `s` is kept at `s·e` and the reverse, and `s·u·e = s·e·u`
    /// (violation marker included) when `s·u` breaks nothing, while `s·e·u` breaks what
    /// `s·u` breaks otherwise; `s·e` breaks nothing, unless every other step at `s` is
    /// dropped or leads back to `s`; and no chain of named steps is endless.
    /// docs/checker.md argues why the verdict and the violated properties stay the same.
    /// The default: none.
    fn eager(&self, _state: &S, _after: Option<&A>) -> Option<A> {
        None
    }
}

/// What a step does at a state, for state-dependent independence ([`Commute::kind`]); 0
/// claims nothing.
pub type Kind = u8;

/// How many kinds a model may use, 0 included.
pub const KINDS: usize = 4;

/// A sleep set: the sleeping actions' keys and, for each kind from 1, those of them that
/// had that kind where they were taken (and so, by the contract, still have it here, or a
/// kind claiming more).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asleep {
    /// Every sleeping key.
    pub keys: SleepSet,
    /// `kinds[k - 1]`: the sleeping keys of kind `k`, a subset of `keys`.
    pub kinds: [SleepSet; KINDS - 1],
    /// The only actions to take: all (`!0`) at a state's first expansion; at a later one,
    /// those this visit woke (asleep in every earlier visit), since the others were taken
    /// already.
    pub only: SleepSet,
}

impl Default for Asleep {
    fn default() -> Asleep {
        Asleep {
            keys: 0,
            kinds: [0; KINDS - 1],
            only: !0,
        }
    }
}

impl Asleep {
    /// Only the keys in `keep`.
    fn restrict(self, keep: SleepSet) -> Asleep {
        Asleep {
            keys: self.keys & keep,
            kinds: self.kinds.map(|kind| kind & keep),
            only: !0,
        }
    }
}

fn fingerprint<T: Hash>(value: &T) -> Fingerprint {
    // A fixed seed: fingerprints, hence traces, are the same in every run.
    const HASHER: FixedState = FixedState::with_seed(0x6172_7269_7661_6c21);
    HASHER.hash_one(value).max(1)
}

/// How the checker walks the state space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Level by level; violations are found on shortest paths.
    BreadthFirst,
    /// A stack per thread; little memory.
    DepthFirst,
}

/// Live counters, read by progress reports while the checker runs.
#[derive(Debug, Default)]
pub struct Counters {
    /// States generated, repeats included (initial states count).
    pub states: AtomicUsize,
    /// Distinct states.
    pub unique: AtomicUsize,
    /// Longest path expanded so far, in states.
    pub depth: AtomicUsize,
    /// Steps taken alone ([`Commute::eager`]): followed at once, their worlds not kept,
    /// so not among `states`.
    pub eager: AtomicUsize,
}

/// What a run found.
#[derive(Debug)]
pub struct Outcome<A> {
    /// For each violated property (by name), the actions of a path to a violating state.
    /// (Whether a state limit cut the run short is read off `Counters::states`, as for
    /// stateright's checkers.)
    pub discoveries: Vec<(&'static str, Vec<A>)>,
}

/// The visited set: fingerprint -> parent fingerprint, grown (under a write lock, between
/// chunks of work) when it is two-thirds full.
struct Visited {
    table: RwLock<Table>,
    len: AtomicUsize,
    /// Room kept free for inserts not yet counted in `len`.
    reserve: usize,
}

/// A slot: a fingerprint, its parent and the actions awake in some expansion of it (see
/// [`Slot::wake`]), side by side so an insert touches one cache line.
#[derive(Default)]
struct Slot {
    key: AtomicU64,
    parent: AtomicU64,
    awake: AtomicU64,
}

impl Slot {
    /// A visit of this state with `sleep` asleep: `None` when every action this visit has
    /// awake was awake in some visit before; otherwise the sleep set to expand it with (the
    /// intersection of every sleep set the state was reached with so far, the complement of
    /// the slot's awake set) and the actions this visit wakes (asleep in every earlier
    /// visit). The awake set only grows, and one atomic OR decides which visit wakes which
    /// action, so each action is woken, and taken, by exactly one visit.
    ///
    /// A state met for the first time is always expanded, even with every key asleep: its
    /// actions without a key (past the 64 keys a sleep set holds) are taken only there.
    /// Such a state leaves the awake set empty, so its next visit counts as a first one
    /// too and is expanded again: more work, never less.
    fn wake(&self, sleep: SleepSet) -> Option<(SleepSet, SleepSet, bool)> {
        let awake = self.awake.fetch_or(!sleep, Ordering::AcqRel);
        let woken = !sleep & !awake;
        let first = awake == 0;
        (woken != 0 || first).then_some((sleep & !awake, woken, first))
    }
}

struct Table {
    slots: Box<[Slot]>,
    mask: usize,
}

impl Table {
    fn with_capacity(slots: usize) -> Table {
        let slots = slots.next_power_of_two().max(1024);
        Table {
            slots: (0..slots).map(|_| Slot::default()).collect(),
            mask: slots - 1,
        }
    }

    fn slot(&self, key: Fingerprint) -> usize {
        // The fingerprint is a good hash already; its high bits pick the slot.
        (key.rotate_left(32) as usize) & self.mask
    }

    /// Inserts `key`; false if it was there already. Either way, the state's slot.
    fn insert(&self, key: Fingerprint, parent: Fingerprint) -> (bool, &Slot) {
        debug_assert_ne!(key, 0);
        let mut at = self.slot(key);
        for _ in 0..=self.mask {
            let found = self.slots[at].key.load(Ordering::Acquire);
            if found == key {
                return (false, &self.slots[at]);
            }
            if found == 0 {
                match self.slots[at].key.compare_exchange(
                    0,
                    key,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        self.slots[at].parent.store(parent, Ordering::Release);
                        return (true, &self.slots[at]);
                    }
                    Err(taken) if taken == key => return (false, &self.slots[at]),
                    Err(_) => {}
                }
            }
            at = (at + 1) & self.mask;
        }
        // Growth keeps a reserve per thread (see `RESERVE_PER_THREAD`); a full table means
        // states with many hundreds of successors each.
        panic!("the visited set is full: states with more successors than its reserve per thread")
    }

    fn parent(&self, key: Fingerprint) -> Option<Fingerprint> {
        let mut at = self.slot(key);
        loop {
            match self.slots[at].key.load(Ordering::Acquire) {
                0 => return None,
                found if found == key => {
                    return Some(self.slots[at].parent.load(Ordering::Acquire))
                }
                _ => at = (at + 1) & self.mask,
            }
        }
    }
}

impl Visited {
    /// A set for `threads` threads: each may insert up to [`FLUSH`] states plus one state's
    /// successors before its count reaches `len`, so the table keeps that much room for
    /// every thread on top of its load limit.
    fn new(threads: usize) -> Visited {
        let reserve = threads * RESERVE_PER_THREAD;
        Visited {
            table: RwLock::new(Table::with_capacity((1 << 16).max(reserve * 4))),
            len: AtomicUsize::new(0),
            reserve,
        }
    }

    fn needs_room(&self, capacity: usize) -> bool {
        (self.len.load(Ordering::Relaxed) + self.reserve) * 4 >= capacity * 3
    }

    /// Grows the table while it is three-quarters full counting every thread's reserve.
    /// Call with no read guard held.
    fn grow_if_full(&self) {
        let capacity = self.table.read().expect("visited set lock").slots.len();
        if !self.needs_room(capacity) {
            return;
        }
        let mut table = self.table.write().expect("visited set lock");
        let mut capacity = table.slots.len();
        if !self.needs_room(capacity) {
            return; // another thread grew it
        }
        while self.needs_room(capacity) {
            capacity *= 2;
        }
        let bigger = Table::with_capacity(capacity);
        for slot in table.slots.iter() {
            let key = slot.key.load(Ordering::Relaxed);
            if key != 0 {
                let (_, moved) = bigger.insert(key, slot.parent.load(Ordering::Relaxed));
                moved
                    .awake
                    .store(slot.awake.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
        *table = bigger;
    }

    fn parent(&self, key: Fingerprint) -> Option<Fingerprint> {
        self.table.read().expect("visited set lock").parent(key)
    }
}

/// One run of the checker over `model`.
struct Run<'m, M: Model> {
    model: &'m M,
    properties: Vec<stateright::Property<M>>,
    visited: Visited,
    counters: &'m Counters,
    limit: Option<usize>,
    /// One slot per property: the fingerprint of the first violating state found.
    found: Vec<AtomicU64>,
    /// How many properties still have no violation.
    open: AtomicUsize,
    stop: AtomicBool,
}

/// How many states a thread takes at a time.
const CHUNK: usize = 256;

/// After this many new states a thread stops to add its counts to the shared ones and to
/// let the visited set grow.
const FLUSH: usize = 256;

/// Room in the visited set per thread for states not yet counted: [`FLUSH`] plus the
/// successors of one state (a state with more than 768 successors could overrun it; the
/// insert then stops the run with a message rather than loop).
const RESERVE_PER_THREAD: usize = 1024;

/// One thread's counts since it last added them to the shared counters: shared atomics
/// bumped on every state would bounce one cache line between the threads.
#[derive(Default)]
struct Tally {
    states: usize,
    unique: usize,
    eager: usize,
}

impl<'m, M> Run<'m, M>
where
    M: Model + Sync,
    M::State: Hash + Clone + Send + Sync,
    M::Action: Clone,
{
    fn new(model: &'m M, counters: &'m Counters, limit: Option<usize>, threads: usize) -> Self {
        let properties = model.properties();
        assert!(
            properties
                .iter()
                .all(|property| property.expectation == Expectation::Always),
            "arrival's checker judges `always` properties only"
        );
        Run {
            model,
            found: properties.iter().map(|_| AtomicU64::new(0)).collect(),
            open: AtomicUsize::new(properties.len()),
            properties,
            visited: Visited::new(threads),
            counters,
            limit,
            stop: AtomicBool::new(false),
        }
    }

    /// Records `state` as reached from `parent`; true if it is new and should be expanded.
    fn admit(
        &self,
        table: &Table,
        tally: &mut Tally,
        state: &M::State,
        key: Fingerprint,
        parent: Fingerprint,
    ) -> bool {
        tally.states += 1;
        let (new, slot) = table.insert(key, parent);
        if new {
            // Expanded with nothing asleep, should a sleeping search meet it again.
            slot.awake.store(!0, Ordering::Relaxed);
        }
        new && self.judge(tally, state, key)
    }

    /// Records `state`, reached from `parent` with `sleep` asleep: the sleep set to expand
    /// it with, if it should be (it is new, or this visit wakes what its last expansion
    /// left asleep: [`Slot::wake`]).
    fn admit_sleeping(
        &self,
        table: &Table,
        tally: &mut Tally,
        state: &M::State,
        key: Fingerprint,
        parent: Fingerprint,
        sleep: Asleep,
    ) -> Option<Asleep> {
        tally.states += 1;
        let (new, slot) = table.insert(key, parent);
        if new && !self.judge(tally, state, key) {
            return None;
        }
        // A revisit of a violating state wakes it in vain: the model offers no actions there.
        // The kinds of the keys left asleep are this visit's: a sleeping action's kind is
        // the state's, whichever visit carried it here.
        let (keys, woken, first) = slot.wake(sleep.keys)?;
        let mut z = sleep.restrict(keys);
        if !first {
            z.only = woken;
        }
        Some(z)
    }

    /// Counts a new state and judges it by every property; true if it holds them all (and
    /// should be expanded).
    fn judge(&self, tally: &mut Tally, state: &M::State, key: Fingerprint) -> bool {
        tally.unique += 1;
        let mut expand = true;
        for (index, property) in self.properties.iter().enumerate() {
            if !(property.condition)(self.model, state) {
                expand = false;
                if self.found[index]
                    .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                    && self.open.fetch_sub(1, Ordering::AcqRel) == 1
                {
                    // Every property is violated: nothing more to learn.
                    self.stop.store(true, Ordering::Release);
                }
            }
        }
        expand
    }

    /// Adds a thread's counts to the shared counters.
    fn flush(&self, tally: &mut Tally) {
        self.counters
            .states
            .fetch_add(tally.states, Ordering::Relaxed);
        self.counters
            .unique
            .fetch_add(tally.unique, Ordering::Relaxed);
        self.counters
            .eager
            .fetch_add(tally.eager, Ordering::Relaxed);
        self.visited.len.fetch_add(tally.unique, Ordering::Relaxed);
        *tally = Tally::default();
    }

    fn over_limit(&self) -> bool {
        self.limit
            .is_some_and(|limit| self.counters.states.load(Ordering::Relaxed) >= limit)
    }

    fn note_depth(&self, depth: usize) {
        self.counters.depth.fetch_max(depth, Ordering::Relaxed);
    }

    /// The initial states, each after the steps the model names to take alone there when
    /// `settle` is given (depth-first search).
    fn initial(
        &self,
        settle: Option<&dyn Commute<M::State, M::Action>>,
    ) -> Vec<(M::State, Fingerprint)> {
        let table = self.visited.table.read().expect("visited set lock");
        let mut tally = Tally::default();
        let initial = self
            .model
            .init_states()
            .into_iter()
            .filter_map(|state| {
                let state = match settle {
                    Some(commute) => self.settle(commute, state, None, &mut tally, |_| {}),
                    None => state,
                };
                let key = fingerprint(&state);
                self.admit(&table, &mut tally, &state, key, ROOT)
                    .then_some((state, key))
            })
            .collect();
        self.flush(&mut tally);
        initial
    }

    /// `state` after the steps the model names to take alone ([`Commute::eager`]), one
    /// after another until it names none; `after` is the step that led to `state`. Each
    /// step taken is counted and handed to `taken`. Only depth-first search settles its
    /// successors: the worlds on the way are not kept, and the world settled at is the
    /// successor (a world that breaks a property is one where the model names nothing).
    fn settle(
        &self,
        commute: &dyn Commute<M::State, M::Action>,
        mut state: M::State,
        after: Option<&M::Action>,
        tally: &mut Tally,
        mut taken: impl FnMut(&M::Action),
    ) -> M::State {
        while let Some(step) = commute.eager(&state, after) {
            let Some(next) = self.model.next_state(&state, step.clone()) else {
                break;
            };
            tally.eager += 1;
            taken(&step);
            state = next;
        }
        state
    }

    /// Expands `state` with `sleep` asleep: each successor to expand goes to `push` with
    /// its own sleep set. An action asleep is skipped; each action taken (whether or not
    /// its successor is new, or a step the model drops) puts to sleep, in the successors
    /// of the actions after it, those of the earlier actions and of `sleep` it commutes
    /// with: always ([`Commute::commutes_with`]), or here, given both actions' kinds here
    /// ([`Commute::commutes_given`]).
    #[allow(clippy::too_many_arguments)]
    fn expand_sleeping(
        &self,
        table: &Table,
        tally: &mut Tally,
        state: &M::State,
        key: Fingerprint,
        sleep: Asleep,
        commute: &dyn Commute<M::State, M::Action>,
        actions: &mut Vec<M::Action>,
        mut push: impl FnMut(M::State, Fingerprint, Asleep),
    ) {
        self.model.actions(state, actions);
        // The actions asleep or taken so far, with their kinds here.
        let mut done = sleep;
        for action in actions.drain(..) {
            let key_of = commute.sleep_key(&action);
            debug_assert!(key_of.is_none_or(|k| k < 64), "a sleep key is below 64");
            let bit = key_of.map_or(0, |k| 1u64 << k);
            if sleep.keys & bit != 0 {
                continue;
            }
            if sleep.only != !0 && sleep.only & bit == 0 {
                // Taken at an earlier expansion (an action without a key at the first).
                continue;
            }
            let next = self
                .model
                .next_state(state, action.clone())
                .map(|next| self.settle(commute, next, Some(&action), tally, |_| {}));
            if let Some(k) = key_of {
                let kind = commute.kind(k, state, &action, next.as_ref());
                debug_assert!(usize::from(kind) < KINDS, "a kind is below KINDS");
                if let Some(next) = next {
                    let mut independent = commute.commutes_with(k);
                    if kind != 0 {
                        for (other, keys) in (1..).zip(done.kinds) {
                            independent |= keys & commute.commutes_given(k, kind, other);
                        }
                    }
                    let next_key = fingerprint(&next);
                    if let Some(z) = self.admit_sleeping(
                        table,
                        tally,
                        &next,
                        next_key,
                        key,
                        done.restrict(independent),
                    ) {
                        push(next, next_key, z);
                    }
                }
                done.keys |= bit;
                if kind != 0 {
                    done.kinds[usize::from(kind) - 1] |= bit;
                }
            } else if let Some(next) = next {
                // An action that never sleeps commutes with nothing, as far as the checker
                // knows.
                let next_key = fingerprint(&next);
                if let Some(z) =
                    self.admit_sleeping(table, tally, &next, next_key, key, Asleep::default())
                {
                    push(next, next_key, z);
                }
            }
        }
    }

    /// Expands `state`: every new successor goes to `push`.
    fn expand(
        &self,
        table: &Table,
        tally: &mut Tally,
        state: &M::State,
        key: Fingerprint,
        actions: &mut Vec<M::Action>,
        mut push: impl FnMut(M::State, Fingerprint),
    ) {
        self.model.actions(state, actions);
        for action in actions.drain(..) {
            if let Some(next) = self.model.next_state(state, action) {
                let next_key = fingerprint(&next);
                if self.admit(table, tally, &next, next_key, key) {
                    push(next, next_key);
                }
            }
        }
    }

    fn breadth_first(&self, threads: usize) {
        let mut level = self.initial(None);
        let mut depth = 1;
        while !level.is_empty() && !self.stop.load(Ordering::Acquire) {
            self.note_depth(depth);
            let cursor = AtomicUsize::new(0);
            let next_levels: Vec<Vec<(M::State, Fingerprint)>> = std::thread::scope(|scope| {
                let workers: Vec<_> = (0..threads)
                    .map(|_| {
                        scope.spawn(|| {
                            let mut next = Vec::new();
                            let mut actions = Vec::new();
                            let mut tally = Tally::default();
                            loop {
                                if self.stop.load(Ordering::Relaxed) || self.over_limit() {
                                    break;
                                }
                                let start = cursor.fetch_add(CHUNK, Ordering::Relaxed);
                                if start >= level.len() {
                                    break;
                                }
                                let end = (start + CHUNK).min(level.len());
                                let mut at = start;
                                while at < end {
                                    {
                                        let table =
                                            self.visited.table.read().expect("visited set lock");
                                        while at < end && tally.unique < FLUSH {
                                            let (state, key) = &level[at];
                                            self.expand(
                                                &table,
                                                &mut tally,
                                                state,
                                                *key,
                                                &mut actions,
                                                |s, k| next.push((s, k)),
                                            );
                                            at += 1;
                                        }
                                    }
                                    self.flush(&mut tally);
                                    self.visited.grow_if_full();
                                }
                            }
                            next
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .map(|worker| worker.join().expect("checker thread panicked"))
                    .collect()
            });
            if self.over_limit() {
                return;
            }
            level = next_levels.into_iter().flatten().collect();
            depth += 1;
        }
    }

    fn depth_first(
        &self,
        threads: usize,
        commute: Option<&(dyn Commute<M::State, M::Action> + Sync)>,
    ) {
        struct Pool<S> {
            jobs: Vec<(S, Fingerprint, usize, Asleep)>,
            idle: usize,
            done: bool,
        }
        let pool = Mutex::new(Pool {
            jobs: self
                .initial(commute.map(|commute| commute as &dyn Commute<_, _>))
                .into_iter()
                .map(|(state, key)| (state, key, 1, Asleep::default()))
                .collect(),
            idle: 0,
            done: false,
        });
        let wake = Condvar::new();
        let hungry = AtomicBool::new(false);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    let mut stack: Vec<(M::State, Fingerprint, usize, Asleep)> = Vec::new();
                    let mut actions = Vec::new();
                    let mut tally = Tally::default();
                    loop {
                        if stack.is_empty() {
                            let mut shared = pool.lock().expect("work pool lock");
                            loop {
                                if shared.done {
                                    return;
                                }
                                if !shared.jobs.is_empty() {
                                    let take = shared.jobs.len().div_ceil(threads).max(1);
                                    let from = shared.jobs.len() - take;
                                    stack.extend(shared.jobs.drain(from..));
                                    break;
                                }
                                shared.idle += 1;
                                if shared.idle == threads {
                                    shared.done = true;
                                    wake.notify_all();
                                    return;
                                }
                                hungry.store(true, Ordering::Release);
                                shared = wake.wait(shared).expect("work pool lock");
                                shared.idle -= 1;
                            }
                        }
                        if self.stop.load(Ordering::Relaxed) || self.over_limit() {
                            let mut shared = pool.lock().expect("work pool lock");
                            shared.done = true;
                            wake.notify_all();
                            return;
                        }
                        {
                            let table = self.visited.table.read().expect("visited set lock");
                            let mut deepest = 0;
                            for _ in 0..CHUNK {
                                if tally.unique >= FLUSH {
                                    break;
                                }
                                let Some((state, key, depth, sleep)) = stack.pop() else {
                                    break;
                                };
                                deepest = deepest.max(depth);
                                match commute {
                                    Some(commute) => self.expand_sleeping(
                                        &table,
                                        &mut tally,
                                        &state,
                                        key,
                                        sleep,
                                        commute,
                                        &mut actions,
                                        |s, k, z| stack.push((s, k, depth + 1, z)),
                                    ),
                                    None => self.expand(
                                        &table,
                                        &mut tally,
                                        &state,
                                        key,
                                        &mut actions,
                                        |s, k| stack.push((s, k, depth + 1, Asleep::default())),
                                    ),
                                }
                            }
                            self.note_depth(deepest);
                        }
                        self.flush(&mut tally);
                        self.visited.grow_if_full();
                        if stack.len() > 1 && hungry.load(Ordering::Acquire) {
                            let mut shared = pool.lock().expect("work pool lock");
                            // The oldest half: the roots of the largest subtrees.
                            let half = stack.len() / 2;
                            shared.jobs.extend(stack.drain(..half));
                            hungry.store(false, Ordering::Release);
                            wake.notify_all();
                        }
                    }
                });
            }
        });
    }

    /// The actions from an initial state to the state `key`, rebuilt from parents; with
    /// `settle` (a depth-first run that took steps alone), those steps too, where they
    /// were taken.
    fn path_to(
        &self,
        key: Fingerprint,
        settle: Option<&dyn Commute<M::State, M::Action>>,
    ) -> Vec<M::Action> {
        let mut chain = vec![key];
        let mut at = key;
        while let Some(parent) = self.visited.parent(at) {
            if parent == ROOT {
                break;
            }
            chain.push(parent);
            at = parent;
        }
        chain.reverse();
        let mut tally = Tally::default();
        // `state` after the steps taken alone, which go to `path`.
        let mut settled =
            |state: M::State, after: Option<&M::Action>, path: &mut Vec<_>| match settle {
                Some(commute) => self.settle(commute, state, after, &mut tally, |step| {
                    path.push(step.clone())
                }),
                None => state,
            };
        let mut path = Vec::with_capacity(chain.len() - 1);
        let mut state = self
            .model
            .init_states()
            .into_iter()
            .find_map(|state| {
                let mut steps = Vec::new();
                let state = settled(state, None, &mut steps);
                (fingerprint(&state) == chain[0]).then(|| {
                    path.append(&mut steps);
                    state
                })
            })
            .expect("a path starts at an initial state");
        let mut actions = Vec::new();
        for &want in &chain[1..] {
            self.model.actions(&state, &mut actions);
            let (next, mut steps) = actions
                .drain(..)
                .find_map(|action| {
                    let next = self.model.next_state(&state, action.clone())?;
                    let mut steps = vec![action.clone()];
                    let next = settled(next, Some(&action), &mut steps);
                    (fingerprint(&next) == want).then_some((next, steps))
                })
                .expect("every parent link is a step of the model");
            path.append(&mut steps);
            state = next;
        }
        path
    }
}

/// Explores `model` with `threads` threads in `order`, stopping after about `limit`
/// generated states, every property violated, or everything explored. `counters` are live
/// for progress reports. With `commute`, depth-first search uses sleep sets.
pub fn check<M>(
    model: &M,
    order: Order,
    threads: usize,
    limit: Option<usize>,
    counters: &Counters,
    commute: Option<&(dyn Commute<M::State, M::Action> + Sync)>,
) -> Outcome<M::Action>
where
    M: Model + Sync,
    M::State: Hash + Clone + Send + Sync,
    M::Action: Clone,
{
    let threads = threads.max(1);
    let run = Run::new(model, counters, limit, threads);
    match order {
        Order::BreadthFirst => run.breadth_first(threads),
        Order::DepthFirst => run.depth_first(threads, commute),
    }
    // Only depth-first search takes steps alone.
    let settle = match order {
        Order::BreadthFirst => None,
        Order::DepthFirst => commute.map(|commute| commute as &dyn Commute<_, _>),
    };
    let discoveries = run
        .properties
        .iter()
        .zip(&run.found)
        .filter_map(|(property, found)| {
            let key = found.load(Ordering::Acquire);
            (key != 0).then(|| (property.name, run.path_to(key, settle)))
        })
        .collect();
    Outcome { discoveries }
}

#[cfg(test)]
mod tests {
    use super::Slot;

    #[test]
    fn a_state_met_first_with_every_key_asleep_is_still_expanded() {
        // Its keyless actions are taken nowhere else (found by review: `woken` was empty,
        // so such a state was judged and never expanded).
        let slot = Slot::default();
        assert_eq!(slot.wake(u64::MAX), Some((u64::MAX, 0, true)));
        // A visit that wakes nothing after a first that woke something is not expanded.
        let slot = Slot::default();
        assert_eq!(slot.wake(0b01), Some((0b01, !0b01, true)));
        assert_eq!(slot.wake(0b01), None);
        // One that wakes key 0 is, with only that key to take.
        assert_eq!(slot.wake(0b10), Some((0, 0b01, false)));
    }
}
