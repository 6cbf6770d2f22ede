//! Sharding: which deterministic share of a model's work one of N jobs checks.
//!
//! A model that splits into several independent parts is sharded by part: shard K of N
//! (1-based) checks the parts whose 0-based index `i` has `i % N == K - 1`. A model of one
//! part that names owners ([`Protocol::owner`], whose contract is [`Owner`]'s) is sharded
//! by owner: the shared worlds are enumerated first, the owners met on steps out of them are
//! numbered in the order met (or, past [`MAX_SHARED`] shared worlds, handed out by hash),
//! and shard K explores the shared worlds and those of its owners. A step into another
//! shard's world leads nowhere, and so does one from an owned world into another owner's;
//! sleep sets keep no independence between the hub's steps and the rest's
//! (docs/checker.md, "Shards by owner", says why each is needed). Any other model of
//! one part is sharded by the subtrees of its first steps: [`Shard`] wraps the protocol so that
//! near the initial world it offers only the steps towards this shard's frontier worlds,
//! and everything below them unchanged. The frontier is the distinct worlds `d` steps from
//! the initial world (`d` = 1 unless that gives fewer than 4 per shard; at most
//! [`MAX_PREFIX_DEPTH`]), each reached by the first path found to it, together with the
//! worlds met sooner that lead to no new world (terminal ones, or those whose successors
//! were all met before); numbered in the protocol's step order, shard K takes those
//! numbered `j` with `j % N == K - 1`, and explores everything below them.
//!
//! Every world of the model is on the first path to a frontier world or below one, so the
//! union of the N shards visits every world (a broken step property is marked in the world
//! after the step, so every violation too). The shards do not share a visited set: a state
//! reachable from two frontier worlds is explored by both, so the shards' state counts add
//! up to more than one run's.
//!
//! A protocol that says which steps commute ([`Protocol::sleeps`]) is sharded by its first
//! steps alone, so that the shards together do the work of one run with sleep sets. Shard K
//! takes the initial world's successors numbered `j % N == K - 1` (steps that reach the
//! same world are one successor, and go to one shard); at the initial world every shard is
//! offered every step, in the protocol's order, and the steps of other shards lead nowhere
//! (`next` drops them). Depth-first search with sleep sets counts a dropped step as taken,
//! so the subtree below a first step `t` is searched with exactly the sleep set the whole
//! run gives it: the earlier first steps that commute with `t`. The whole run's sleep-set
//! search is the union of those subtrees; each shard searches its own with the whole run's
//! rule for meeting a state again (a smaller sleep set expands it again), so the union of
//! the shards reaches every world the whole run does, and a state two subtrees share is
//! visited twice only where a step that does not commute wakes what slept. Deeper prefixes
//! would hand a shard a world first reached on another shard's path, with that path's
//! sleep set, which may have asleep what this path has awake: so there are none here.

use super::Protocol;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::Arc;

/// Which share of the work one job checks: shard `index` of `count`, 1-based.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardSpec {
    /// K, from 1 to `count`.
    pub index: usize,
    /// N, at least 1.
    pub count: usize,
}

/// Why a `--shard` value is not a shard.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShardSpecError {
    /// Not of the form `K/N` with two whole numbers.
    #[error("`{0}` is not a shard: write K/N, e.g. 2/4 (shard 2 of 4, numbered from 1)")]
    Form(String),
    /// N is 0.
    #[error("`{0}`: the number of shards must be at least 1")]
    NoShards(String),
    /// K is not between 1 and N.
    #[error("`{text}`: the shard must be from 1 to {count} (shards are numbered from 1)")]
    OutOfRange {
        /// As written.
        text: String,
        /// N.
        count: usize,
    },
}

impl FromStr for ShardSpec {
    type Err = ShardSpecError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let form = || ShardSpecError::Form(text.to_owned());
        let (index, count) = text.trim().split_once('/').ok_or_else(form)?;
        let index: usize = index.trim().parse().map_err(|_| form())?;
        let count: usize = count.trim().parse().map_err(|_| form())?;
        if count == 0 {
            return Err(ShardSpecError::NoShards(text.to_owned()));
        }
        if index == 0 || index > count {
            return Err(ShardSpecError::OutOfRange {
                text: text.to_owned(),
                count,
            });
        }
        Ok(ShardSpec { index, count })
    }
}

impl fmt::Display for ShardSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl ShardSpec {
    /// Whether the item numbered `number` (0-based) belongs to this shard.
    pub fn takes(&self, number: usize) -> bool {
        number % self.count == self.index - 1
    }
}

/// Whose share of the work a world is, for a model sharded by owner
/// ([`Protocol::owner`]).
///
/// Shard K explores the worlds that are `Shared` and those of its own owners; a step into
/// another shard's world leads nowhere. The model promises what makes that complete
/// (docs/checker.md, "Shards by owner", has the argument):
/// - the owner is read off two summaries of a world, a *hub* summary and a *rest* summary:
///   `Shared` while the hub summary is as at the initial world, otherwise `Of(rest)`;
/// - every step changes at most one of the two summaries;
/// - any path to a world can be reordered so that the steps that may change the rest
///   summary come first: every step is still offered where it then stands, decides the
///   same, is judged the same by every property, and the path ends in the same world;
/// - a step the model names to take alone ([`Protocol::eager`]) changes neither summary;
/// - with sleep sets: [`Protocol::hub_keys`] names the keys of the steps that may change
///   the hub summary, and neither summary ever takes back a value it left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// Explored by every shard.
    Shared,
    /// Explored by the shard this owner is handed to.
    Of(u64),
}

/// At most this many shared worlds are enumerated to list the owners; past it, owners are
/// handed out by a hash of their value instead.
pub const MAX_SHARED: usize = 20_000;

/// The owners of a model sharded by owner, and which are this shard's.
#[derive(Debug)]
struct Owners {
    /// This shard's owners, when they were listed (`None`: handed out by hash).
    mine: Option<std::collections::HashSet<u64>>,
    /// Every owner met at a step out of a shared world, when they were listed.
    known: std::collections::HashSet<u64>,
    /// How many shared worlds the enumeration met (all of them, when owners were listed).
    shared: usize,
    /// Which shard this is.
    spec: ShardSpec,
    /// The hub's sleep keys ([`Protocol::hub_keys`]), asked once.
    hub_keys: super::checker::SleepSet,
}

/// How a shard by owner split the work: the owners listed and this shard's (`None` when
/// there were too many shared worlds to list them: then each owner goes to the shard its
/// hash names), and the shared worlds met looking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerSplit {
    /// Owners listed, in all.
    pub owners: Option<usize>,
    /// Owners listed that are this shard's.
    pub taken: Option<usize>,
    /// Shared worlds met (every one, when owners were listed).
    pub shared: usize,
}

/// An owner's number when owners are handed out by hash: the same in every process.
fn owner_number(owner: u64) -> usize {
    // splitmix64's finaliser.
    let mut z = owner.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as usize
}

/// The deepest prefix the first-step sharding uses.
pub const MAX_PREFIX_DEPTH: usize = 4;

/// Prefixes per shard the first-step sharding aims for, so that subtrees of unequal size
/// even out.
const PREFIXES_PER_SHARD: usize = 4;

/// At most this many prefixes are enumerated.
const MAX_PREFIXES: usize = 4096;

/// Where a world is in the prefix tree: a node, or below every prefix.
const FREE: u32 = u32::MAX;

fn fingerprint<W: Hash>(world: &W) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    world.hash(&mut hasher);
    hasher.finish()
}

/// A world of a sharded model: the inner world and its node in the prefix tree (`FREE`
/// once past this shard's prefix).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct ShardWorld<W> {
    /// The protocol's world.
    pub world: W,
    node: u32,
    /// Its owner, when sharded by owner (a function of `world`, kept so that a step reads
    /// it instead of working it out again).
    owner: Option<Owner>,
}

/// The prefix tree of one shard: for each node, the steps this shard may take there and
/// the node each leads to.
#[derive(Debug)]
struct Prefixes<S> {
    nodes: Vec<Vec<(S, u32)>>,
    /// Sharded by first steps with sleep sets: every step is offered at the initial world,
    /// those of other shards dropped by `next` (see the module doc).
    offer_all: bool,
    /// How many prefixes there are in all, and how many are this shard's.
    total: usize,
    taken: usize,
    depth: usize,
}

/// A protocol restricted to one shard's subtrees of its first steps (see the module doc).
#[derive(Clone, Debug)]
pub struct Shard<P: Protocol> {
    /// The protocol.
    pub inner: P,
    prefixes: Arc<Prefixes<P::Step>>,
    /// Sharded by owner: the owners (then `prefixes` restricts nothing).
    owners: Option<Arc<Owners>>,
}

impl<P: Protocol> Shard<P> {
    /// `inner` restricted to `spec`'s share: its owners' worlds if it names owners, its
    /// first steps otherwise.
    pub fn new(inner: P, spec: ShardSpec) -> Self {
        Self::listing_at_most(inner, spec, MAX_SHARED)
    }

    /// [`Shard::new`], listing the owners only if there are at most `shared` shared worlds
    /// (tests use a small limit to reach owners handed out by hash).
    pub fn listing_at_most(inner: P, spec: ShardSpec, shared: usize) -> Self {
        if let Some(shard) = Self::by_owner(&inner, spec, shared) {
            return shard;
        }
        if inner.sleeps() {
            return Self::by_first_steps(inner, spec);
        }
        // Distinct worlds from the initial one, one level at a time, each with the first
        // path found to it, until there are enough to spread over the shards: (path, world,
        // whether it is to be expanded). A world seen before is not kept twice: the subtree
        // below it is the same whichever path reached it.
        let mut paths: Vec<(Vec<P::Step>, P::World, bool)> = vec![(Vec::new(), inner.init(), true)];
        let mut seen: HashMap<u64, Vec<P::World>> = HashMap::new();
        seen.entry(fingerprint(&paths[0].1))
            .or_default()
            .push(paths[0].1.clone());
        let mut depth = 0;
        let mut buffer = Vec::new();
        while depth < MAX_PREFIX_DEPTH
            && paths.len() < spec.count * PREFIXES_PER_SHARD
            && paths.iter().any(|(_, _, open)| *open)
        {
            let mut longer = Vec::new();
            for (path, world, open) in paths {
                if !open {
                    longer.push((path, world, false));
                    continue;
                }
                buffer.clear();
                if P::violation(&world).is_none() {
                    inner.steps(&world, &mut buffer);
                }
                let mut ends = true;
                for step in &buffer {
                    let Some(next) = super::panic::next(&inner, &world, step) else {
                        continue;
                    };
                    let same = seen.entry(fingerprint(&next)).or_default();
                    if same.contains(&next) {
                        continue;
                    }
                    same.push(next.clone());
                    ends = false;
                    let mut path = path.clone();
                    path.push(step.clone());
                    longer.push((path, next, true));
                }
                if ends {
                    // A terminal world, or one whose successors were all met before: the
                    // path ends here and is a prefix of its own (so some shard visits it).
                    longer.push((path, world, false));
                }
            }
            paths = longer;
            depth += 1;
            if paths.len() > MAX_PREFIXES {
                break;
            }
        }
        let total = paths.len();
        // The tree of this shard's prefixes, node 0 the initial world.
        let mut nodes: Vec<Vec<(P::Step, u32)>> = vec![Vec::new()];
        let mut taken = 0;
        for (number, (path, _, _)) in paths.iter().enumerate() {
            if !spec.takes(number) {
                continue;
            }
            taken += 1;
            let mut node = 0usize;
            for (at, step) in path.iter().enumerate() {
                let last = at + 1 == path.len();
                let known = nodes[node].iter().find(|(known, _)| known == step);
                node = match known {
                    Some(&(_, child)) => child as usize,
                    None if last => {
                        nodes[node].push((step.clone(), FREE));
                        break;
                    }
                    None => {
                        let child = nodes.len();
                        nodes[node].push((step.clone(), child as u32));
                        nodes.push(Vec::new());
                        child
                    }
                };
            }
        }
        Shard {
            inner,
            owners: None,
            prefixes: Arc::new(Prefixes {
                nodes,
                offer_all: false,
                total,
                taken,
                depth,
            }),
        }
    }

    /// `inner`, which sleeps, restricted to `spec`'s share of the initial world's distinct
    /// successors (see the module doc).
    fn by_first_steps(inner: P, spec: ShardSpec) -> Self {
        let init = inner.init();
        let mut steps = Vec::new();
        if P::violation(&init).is_none() {
            inner.steps(&init, &mut steps);
        }
        // The distinct successors in step order; each step goes with the first step that
        // reached its successor.
        let mut successors: Vec<P::World> = Vec::new();
        let mut mine = Vec::new();
        for step in steps {
            let Some(next) = super::panic::next(&inner, &init, &step) else {
                continue;
            };
            let number = match successors.iter().position(|known| *known == next) {
                Some(number) => number,
                None => {
                    successors.push(next);
                    successors.len() - 1
                }
            };
            if spec.takes(number) {
                mine.push((step, FREE));
            }
        }
        let total = successors.len();
        let taken = (0..total).filter(|&number| spec.takes(number)).count();
        Shard {
            inner,
            owners: None,
            prefixes: Arc::new(Prefixes {
                nodes: vec![mine],
                offer_all: true,
                total,
                taken,
                depth: usize::from(total > 0),
            }),
        }
    }

    /// `inner` restricted to `spec`'s owners, if it names owners and has at least as many
    /// as there are shards: the shared worlds are enumerated from the initial world, every
    /// owner met on a step out of them is numbered in the order met, and shard K takes
    /// those numbered `j % N == K - 1`. An owner not met so is treated as shared.
    fn by_owner(inner: &P, spec: ShardSpec, limit: usize) -> Option<Self> {
        let init = inner.init();
        inner.owner(&init)?;
        let mut shared = vec![init];
        let mut seen: HashMap<u64, Vec<P::World>> = HashMap::new();
        seen.entry(fingerprint(&shared[0]))
            .or_default()
            .push(shared[0].clone());
        let mut order: Vec<u64> = Vec::new();
        let mut known = std::collections::HashSet::new();
        let mut steps = Vec::new();
        let mut at = 0;
        while at < shared.len() {
            if shared.len() > limit {
                return Some(Self::by_owner_hash(inner, spec, shared.len()));
            }
            let world = shared[at].clone();
            at += 1;
            steps.clear();
            if P::violation(&world).is_none() {
                inner.steps(&world, &mut steps);
            }
            for step in &steps {
                let Some(next) = super::panic::next(inner, &world, step) else {
                    continue;
                };
                match inner.owner(&next) {
                    Some(Owner::Of(owner)) => {
                        if known.insert(owner) {
                            order.push(owner);
                        }
                    }
                    _ => {
                        let same = seen.entry(fingerprint(&next)).or_default();
                        if !same.contains(&next) {
                            same.push(next.clone());
                            shared.push(next);
                        }
                    }
                }
            }
        }
        if order.len() < spec.count.max(2) {
            return None;
        }
        let mine = order
            .iter()
            .enumerate()
            .filter(|&(number, _)| spec.takes(number))
            .map(|(_, &owner)| owner)
            .collect();
        Some(Shard {
            inner: inner.clone(),
            owners: Some(Arc::new(Owners {
                mine: Some(mine),
                known,
                shared: shared.len(),
                spec,
                hub_keys: inner.hub_keys(),
            })),
            prefixes: Arc::new(Prefixes {
                nodes: Vec::new(),
                offer_all: true,
                total: order.len(),
                taken: (0..order.len())
                    .filter(|&number| spec.takes(number))
                    .count(),
                depth: 0,
            }),
        })
    }

    /// Whether this shard explores `world` (always, unless sharded by owner).
    fn explores(&self, world: &P::World) -> bool {
        self.explores_owner(self.inner.owner(world))
    }

    /// Whether this shard explores the worlds of `owner`.
    fn explores_owner(&self, owner: Option<Owner>) -> bool {
        let Some(owners) = self.owners.as_deref() else {
            return true;
        };
        match (owner, &owners.mine) {
            (Some(Owner::Of(owner)), Some(mine)) => {
                mine.contains(&owner) || !owners.known.contains(&owner)
            }
            (Some(Owner::Of(owner)), None) => owners.spec.takes(owner_number(owner)),
            (Some(Owner::Shared) | None, _) => true,
        }
    }

    /// `inner` restricted to the owners whose hash names `spec`, when the shared worlds
    /// are too many to list the owners (`met` of them were).
    fn by_owner_hash(inner: &P, spec: ShardSpec, met: usize) -> Self {
        Shard {
            inner: inner.clone(),
            owners: Some(Arc::new(Owners {
                mine: None,
                known: Default::default(),
                shared: met,
                spec,
                hub_keys: inner.hub_keys(),
            })),
            prefixes: Arc::new(Prefixes {
                nodes: Vec::new(),
                offer_all: true,
                total: 0,
                taken: 0,
                depth: 0,
            }),
        }
    }

    /// The keys a step with key `key` may be independent of: by owner, only those on its
    /// own side (hub or rest, [`Protocol::hub_keys`]); otherwise all.
    fn same_side(&self, key: u8) -> super::checker::SleepSet {
        let Some(owners) = self.owners.as_deref() else {
            return !0;
        };
        let hub = owners.hub_keys;
        if hub & (1 << key) != 0 {
            hub
        } else {
            !hub
        }
    }

    /// Sharded by owner: how the owners were split; `None` when sharded otherwise.
    pub fn owners(&self) -> Option<OwnerSplit> {
        let owners = self.owners.as_deref()?;
        Some(OwnerSplit {
            owners: owners.mine.is_some().then_some(owners.known.len()),
            taken: owners.mine.as_ref().map(|mine| mine.len()),
            shared: owners.shared,
        })
    }

    /// How many first-step prefixes the model has, how many are this shard's, and how deep
    /// they are.
    pub fn prefixes(&self) -> (usize, usize, usize) {
        (
            self.prefixes.total,
            self.prefixes.taken,
            self.prefixes.depth,
        )
    }
}

impl<P: Protocol> Protocol for Shard<P> {
    type World = ShardWorld<P::World>;
    type Step = P::Step;

    const PROPERTIES: &'static [&'static str] = P::PROPERTIES;

    fn init(&self) -> Self::World {
        let world = self.inner.init();
        let owner = self.owners.as_ref().and_then(|_| self.inner.owner(&world));
        ShardWorld {
            world,
            // A model whose whole tree is one terminal world has no step to restrict.
            node: if self.prefixes.depth == 0 || self.owners.is_some() {
                FREE
            } else {
                0
            },
            owner,
        }
    }

    fn steps(&self, world: &Self::World, steps: &mut Vec<Self::Step>) {
        let start = steps.len();
        self.inner.steps(&world.world, steps);
        if world.node != FREE && !self.prefixes.offer_all {
            let allowed = &self.prefixes.nodes[world.node as usize];
            let mut index = start;
            while index < steps.len() {
                if allowed.iter().any(|(step, _)| *step == steps[index]) {
                    index += 1;
                } else {
                    steps.remove(index);
                }
            }
        }
    }

    fn next(&self, world: &Self::World, step: &Self::Step) -> Option<Self::World> {
        if self.owners.is_some() {
            // A step into another shard's world leads nowhere here, and neither does one
            // that hands an owned world to another owner (every owned world is reached
            // from a shared one by hub steps alone: docs/checker.md, "Shards by owner").
            let next = self.inner.next(&world.world, step)?;
            let owner = self.inner.owner(&next);
            let handed = match (world.owner, owner) {
                (Some(Owner::Of(from)), Some(Owner::Of(to))) => from != to,
                _ => false,
            };
            return (!handed && self.explores_owner(owner)).then_some(ShardWorld {
                world: next,
                node: FREE,
                owner,
            });
        }
        let node = if world.node == FREE {
            FREE
        } else {
            let allowed = self.prefixes.nodes[world.node as usize]
                .iter()
                .find(|(allowed, _)| allowed == step);
            match allowed {
                Some(&(_, child)) => child,
                // Another shard's first step: taken (so it sleeps), leading nowhere here.
                None if self.prefixes.offer_all => return None,
                None => FREE,
            }
        };
        let next = self.inner.next(&world.world, step)?;
        Some(ShardWorld {
            world: next,
            node,
            owner: None,
        })
    }

    fn violation(world: &Self::World) -> Option<usize> {
        P::violation(&world.world)
    }

    fn panicked(&self, world: &Self::World) -> Self::World {
        ShardWorld {
            world: self.inner.panicked(&world.world),
            node: world.node,
            owner: world.owner,
        }
    }

    fn checks(&self, index: usize) -> bool {
        self.inner.checks(index)
    }

    fn only(&self, index: usize) -> Self {
        Shard {
            inner: self.inner.only(index),
            prefixes: Arc::clone(&self.prefixes),
            owners: self.owners.clone(),
        }
    }

    fn describe_step(&self, step: &Self::Step) -> String {
        self.inner.describe_step(step)
    }

    fn describe_world(&self, world: &Self::World) -> String {
        self.inner.describe_world(&world.world)
    }

    fn coverage(&self) -> Vec<(&'static str, u64)> {
        self.inner.coverage()
    }

    fn sleeps(&self) -> bool {
        self.prefixes.offer_all && self.inner.sleeps()
    }

    fn sleep_key(&self, step: &Self::Step) -> Option<u8> {
        self.inner.sleep_key(step)
    }

    fn commutes_with(&self, key: u8) -> super::checker::SleepSet {
        self.inner.commutes_with(key) & self.same_side(key)
    }

    fn step_kind(
        &self,
        key: u8,
        before: &Self::World,
        step: &Self::Step,
        after: Option<&Self::World>,
    ) -> super::checker::Kind {
        match after {
            Some(after) => self
                .inner
                .step_kind(key, &before.world, step, Some(&after.world)),
            // Dropped: by the inner model (then it says what that means), or as another
            // shard's first step or owner's world, which claims nothing.
            None if self.owners.is_some() && self.inner.next(&before.world, step).is_some() => 0,
            None if before.node == FREE => self.inner.step_kind(key, &before.world, step, None),
            None => 0,
        }
    }

    fn commutes_given(
        &self,
        key: u8,
        kind: super::checker::Kind,
        other: super::checker::Kind,
    ) -> super::checker::SleepSet {
        self.inner.commutes_given(key, kind, other) & self.same_side(key)
    }

    fn settles(&self) -> bool {
        self.prefixes.offer_all && self.inner.settles()
    }

    fn eager(&self, world: &Self::World, after: Option<&Self::Step>) -> Option<Self::Step> {
        // Below the first step only: there the shard is the inner model. (At the initial
        // world a step may be another shard's; a world not settled only keeps more.) By
        // owner, a named step changes no owner (`Owner`'s contract); one that would is not
        // followed, which only keeps more.
        if world.node != FREE || !self.prefixes.offer_all {
            return None;
        }
        let step = self.inner.eager(&world.world, after)?;
        if self.owners.is_some()
            && super::panic::next(&self.inner, &world.world, &step)
                .is_some_and(|next| !self.explores(&next))
        {
            return None;
        }
        Some(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_specs_parse_and_reject() {
        assert_eq!(
            "2/4".parse::<ShardSpec>(),
            Ok(ShardSpec { index: 2, count: 4 })
        );
        assert!(matches!(
            "5/4".parse::<ShardSpec>(),
            Err(ShardSpecError::OutOfRange { count: 4, .. })
        ));
        assert!(matches!(
            "0/4".parse::<ShardSpec>(),
            Err(ShardSpecError::OutOfRange { .. })
        ));
        assert!(matches!(
            "1/0".parse::<ShardSpec>(),
            Err(ShardSpecError::NoShards(_))
        ));
        for bad in ["x", "1", "1/", "/4", "a/b", "-1/4", "1/4/2"] {
            assert!(
                matches!(bad.parse::<ShardSpec>(), Err(ShardSpecError::Form(_))),
                "{bad}"
            );
        }
    }

    /// A toy protocol: a counter pair (a, b), each step adds 1 to one of them up to 3.
    #[derive(Clone, Debug)]
    struct Counters;

    impl Protocol for Counters {
        type World = (u8, u8);
        type Step = u8;
        const PROPERTIES: &'static [&'static str] = &["never"];

        fn init(&self) -> (u8, u8) {
            (0, 0)
        }
        fn steps(&self, world: &(u8, u8), steps: &mut Vec<u8>) {
            if world.0 < 3 {
                steps.push(0);
            }
            if world.1 < 3 {
                steps.push(1);
            }
        }
        fn next(&self, world: &(u8, u8), step: &u8) -> Option<(u8, u8)> {
            Some(if *step == 0 {
                (world.0 + 1, world.1)
            } else {
                (world.0, world.1 + 1)
            })
        }
        fn violation(_: &(u8, u8)) -> Option<usize> {
            None
        }
        fn panicked(&self, world: &(u8, u8)) -> (u8, u8) {
            *world
        }
        fn checks(&self, _: usize) -> bool {
            true
        }
        fn only(&self, _: usize) -> Self {
            Counters
        }
        fn describe_step(&self, step: &u8) -> String {
            step.to_string()
        }
        fn describe_world(&self, world: &(u8, u8)) -> String {
            format!("{world:?}")
        }
        fn coverage(&self) -> Vec<(&'static str, u64)> {
            Vec::new()
        }
    }

    /// Every world of `protocol` reachable from its initial world.
    fn worlds<P: Protocol>(protocol: &P) -> Vec<P::World> {
        let mut seen = vec![protocol.init()];
        let mut at = 0;
        while at < seen.len() {
            let mut steps = Vec::new();
            protocol.steps(&seen[at], &mut steps);
            for step in steps {
                if let Some(next) = protocol.next(&seen[at], &step) {
                    if !seen.contains(&next) {
                        seen.push(next);
                    }
                }
            }
            at += 1;
        }
        seen
    }

    #[test]
    fn the_shards_together_reach_every_world() {
        let mut whole = worlds(&Counters);
        whole.sort();
        for count in 1..=5 {
            let mut union = Vec::new();
            let mut sizes = Vec::new();
            for index in 1..=count {
                let shard = Shard::new(Counters, ShardSpec { index, count });
                let mut mine: Vec<(u8, u8)> = worlds(&shard)
                    .into_iter()
                    .map(|world| world.world)
                    .collect();
                mine.sort();
                mine.dedup();
                sizes.push(mine.len());
                union.extend(mine);
            }
            union.sort();
            union.dedup();
            assert_eq!(union, whole, "{count} shards");
            if count > 1 {
                assert!(sizes.iter().all(|&size| size < whole.len()), "{sizes:?}");
            }
        }
    }

    /// Three counters from 0 to 2, a step adding 1 to one of them; every two steps commute,
    /// and the world `target` breaks the one property.
    #[derive(Clone, Debug)]
    struct Grid {
        target: [u8; 3],
    }

    impl Protocol for Grid {
        type World = ([u8; 3], [u8; 3]);
        type Step = u8;
        const PROPERTIES: &'static [&'static str] = &["never"];

        fn init(&self) -> Self::World {
            ([0; 3], self.target)
        }
        fn steps(&self, world: &Self::World, steps: &mut Vec<u8>) {
            steps.extend((0..3).filter(|&i| world.0[usize::from(i)] < 2));
        }
        fn next(&self, world: &Self::World, step: &u8) -> Option<Self::World> {
            let mut next = *world;
            next.0[usize::from(*step)] += 1;
            Some(next)
        }
        fn violation(world: &Self::World) -> Option<usize> {
            (world.0 == world.1).then_some(0)
        }
        fn panicked(&self, world: &Self::World) -> Self::World {
            *world
        }
        fn checks(&self, _: usize) -> bool {
            true
        }
        fn only(&self, _: usize) -> Self {
            self.clone()
        }
        fn describe_step(&self, step: &u8) -> String {
            step.to_string()
        }
        fn describe_world(&self, world: &Self::World) -> String {
            format!("{world:?}")
        }
        fn coverage(&self) -> Vec<(&'static str, u64)> {
            Vec::new()
        }
        fn sleeps(&self) -> bool {
            true
        }
        fn sleep_key(&self, step: &u8) -> Option<u8> {
            Some(*step)
        }
        fn commutes_with(&self, key: u8) -> crate::harness::checker::SleepSet {
            0b111 & !(1 << key)
        }
    }

    fn depth_first() -> crate::harness::explore::Settings {
        crate::harness::explore::Settings {
            strategy: crate::harness::explore::Strategy::Dfs,
            threads: 1,
            state_limit: None,
            label: String::new(),
            progress: false,
            engine: crate::harness::explore::Engine::Arrival,
        }
    }

    #[test]
    fn shards_that_sleep_find_every_violation_and_share_only_the_initial_world() {
        use crate::harness::explore::explore;
        // The target's own world is the only violation: some shard must reach it, wherever
        // it is. Steps that all commute leave nothing to share but the initial world.
        let whole = explore(Grid { target: [9; 3] }, &depth_first()).unique_states;
        assert_eq!(whole, 27);
        for count in 1..=4 {
            let mut unique = 0;
            for index in 1..=count {
                let shard = Shard::new(Grid { target: [9; 3] }, ShardSpec { index, count });
                unique += explore(shard, &depth_first()).unique_states;
            }
            assert_eq!(unique, whole + count - 1, "{count} shards");
            for a in 0..3 {
                for b in 0..3 {
                    for c in 0..3 {
                        let target = [a, b, c];
                        let found = (1..=count).any(|index| {
                            let shard = Shard::new(Grid { target }, ShardSpec { index, count });
                            !explore(shard, &depth_first()).discoveries.is_empty()
                        });
                        assert!(found, "{count} shards miss {target:?}");
                    }
                }
            }
        }
    }
}
