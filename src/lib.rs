//! `arrival`: a verification harness for event receivers that must not treat arrival order
//! as truth.
//!
//! It holds one pure decision function for the card.snapshot protocol (SPEC.md), replays
//! fixtures through it, and model-checks it with stateright under every reordering,
//! duplicate, lost acknowledgement, crash and (if asked) passing of the retention window.
//!
//! # Architecture
//!
//! Data flows from the edge inwards; each module has one job.
//!
//! | module | job |
//! |---|---|
//! | [`protocol`] | wire envelopes parsed once into typed, interned [`protocol::Event`]s; never fails on a protocol anomaly |
//! | [`receiver`] | the decision function, reconciliation and retention expiry (pure: no I/O, no clock) and the receiver state they read |
//! | [`policy`] | the SPEC policy and the mutant catalogue, as a zero-cost generic parameter of the receiver |
//! | [`audit`] | the audit trail, replacement counters and global arrival order of holds, kept beside the receiver |
//! | [`fixture`] | fixture files (SPEC format) validated into a typed [`fixture::Scenario`]; typed input errors |
//! | [`network`] | the receiver in its world (sender, network, faults, expiry): one [`network::Step`] at a time, shared by replay and the model |
//! | [`properties`] | SPEC's safety and convergence properties (and the opt-in `redelivery-recognised`) as checks on steps and states |
//! | [`replay`] | walks a fixture's schedule and builds the report (the `--json` contract) |
//! | [`table`] | renders reports as text tables for people |
//! | [`model`] | the stateright model around [`network::transition`], with decision coverage |
//! | [`check`] | model files, checker runs, verdicts, Explorer |
//! | [`trace`] | counterexamples as step tables and replayable fixtures |
//! | [`independence`] | splits a fixture into parts that cannot affect each other, checked one by one |
//! | [`generate`] | synthetic fixtures for benchmarks and scaling |
//! | [`facts`] | the application-facts protocol (FACTS.md): envelope, ingress, inbox, its world and replay; self-contained and pure |
//!
//! The binary (`src/main.rs`) is a thin command line over [`replay`] and [`check`].

#![warn(missing_docs)]

pub mod audit;
pub mod check;
pub mod facts;
pub mod fixture;
pub mod generate;
pub mod independence;
pub mod model;
pub mod network;
pub mod policy;
pub mod properties;
pub mod protocol;
pub mod receiver;
pub mod replay;
pub mod table;
pub mod trace;
