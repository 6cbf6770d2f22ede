//! The card.snapshot protocol: a sender pushes complete snapshots of board cards; the
//! receiver decides each delivery by version, never by arrival order, holds what it cannot
//! decide, and reconciles paused cards from an authority. The contract is
//! `docs/protocol.md`.

pub mod audit;
pub mod cache;
pub mod campaign;
mod canonical;
pub mod check;
pub mod commute;
pub mod conform;
pub mod differential;
pub mod fingerprint;
pub mod fixture;
pub mod generate;
pub mod independence;
pub mod model;
pub mod model_file;
pub mod mutants;
pub mod plan;
pub mod policy;
pub mod properties;
pub mod property;
pub mod receiver;
pub mod replay;
pub mod step;
pub mod sweep;
pub mod table;
pub mod trace;
pub mod variants;
pub mod wire;
pub mod world;
