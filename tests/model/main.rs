//! The model checker end to end: card and facts models explored exhaustively, arrival's
//! checker against stateright's, sharding and simulation. Slow (hundreds of thousands of
//! states), no services.
//!
//! - `model`: the card models pass, every mutant is caught with a trace that replays, and
//!   the pinned distinct-state counts of the main models.
//! - `facts_model`: the facts acceptance model passes (its state count pinned) and every
//!   facts mutant is caught.
//! - `checker`: arrival's checker and stateright's agree on every small model file.
//! - `indep`: state-dependent independence in sleep sets: its claims step by step, and
//!   the same states, verdicts and shortest traces as the search without it.
//! - `eager`: redeliveries taken alone in depth-first search: the claim's conditions in
//!   every reachable world, and the same verdicts and shortest traces as without it.
//! - `owners`: sharding by owner: four shards reach exactly one run's worlds and
//!   violations on every card model file with owners, under every policy.
//! - `shard`: `check --shard`, `report merge` and `check --simulate` as a user runs them.

#[allow(dead_code, unused_imports)]
#[path = "../util/mod.rs"]
mod util;

mod checker;
mod eager;
mod facts_model;
mod indep;
mod model;
mod owners;
mod shard;
