//! `arrival`: a verification harness for event receivers that must not treat arrival order
//! as truth.
//!
//! It holds pure decision functions for two protocols, replays fixtures through them, and
//! model-checks them with stateright under every reordering, duplicate, lost
//! acknowledgement, crash, takeover and (if asked) retention expiry or material upgrade;
//! then it drills the real systems built on the same functions. The contracts, in the
//! project's words, are `docs/protocol.md` (card.snapshot) and `docs/facts.md` (application
//! facts) in the repository; `docs/store.md` and `docs/pipeline.md` describe the real parts.
//!
//! # Architecture
//!
//! The tree shows it: one harness, a folder per protocol beside it, the real parts beside
//! those, and a thin command line. Dependencies point one way: `harness` <- `card`, `facts`
//! <- `store`, `pipeline`, `conform` <- `cli` <- `main`. The harness never imports a protocol; the
//! decision functions never do I/O or read a clock; the real parts acknowledge only after a
//! commit.
//!
//! | module | job |
//! |---|---|
//! | [`harness`] | what every protocol's checker shares (and conformance runs: [`harness::conform`]'s candidate worlds, walks, shrinking, confirmation): the [`harness::Protocol`] trait, the stateright model around it, arrival's own checker for it (with sleep sets in depth-first search when a protocol says which steps commute; `stateright`'s on request), the Explorer's model, exploration, shortest counterexamples, sharding and report merging, random-walk simulation, a panicking step reported as the `panic` finding, verdicts, JSON/text/JUnit reports, sequence diagrams, model-file parsing, typed input errors |
//! | [`card`] | the card.snapshot protocol: wire format, the pure receiver, its world, properties, mutants, fixtures, replay, model, traces, sweep |
//! | [`facts`] | the application-facts protocol (contract v2): signed envelopes, keys bound to tenants, ingress checks, the inbox and READY, the operator steps, the pipeline's world, properties, mutants, replay, model, the oracle, campaign, mutant schedules and plan files of `arrival conform` on a facts receiver |
//! | [`store`] | the durable card receiver (also behind the conformance protocol, [`store::stdio`]): the card decision function in one database transaction per batch of deliveries (SQLite embedded, PostgreSQL for several receivers), split by job into the store and its types, the row codec, the partial-receiver loading, one batch's transaction and the set-based write-back; `arrival store` commands, crash and concurrency drills ([`store::drill`]: shared setup, crash, concurrent, the check against the contract's replay) |
//! | [`pipeline`] | the real facts pipeline: axum ingress (behind its own HTTP/1 server with a header-read timeout and a connection cap, [`pipeline::server`]; a per-source rate limit, [`pipeline::rate_limit`]; keys reloaded on SIGHUP, [`pipeline::keys`]), Redis Stream consumer group, an inbox in SQLite or PostgreSQL behind one connection type ([`pipeline::sql`]; its schema under versioned migrations, [`pipeline::schema`]), fixture runner, drills (one file per drill in [`pipeline::drill`]), load generator, `pipeline explain` ([`pipeline::explain`]: rows loaded once, the answer a pure function of them), `/metrics` and health ([`pipeline::metrics`]), dead letters for people ([`pipeline::dead_letters`]) (all the I/O of `facts`) |
//! | [`conform`] | `arrival conform`'s real side: a receiver arrival did not write, as a process (its own process group, `SIGKILL`, restart on the same data), spoken to over HTTP (a small client that reads chunked answers) or JSON lines; the target file; where either protocol's state is read ([`conform::state`]: a URL, a command, SQL on the receiver's SQLite or PostgreSQL database, or several merged); the facts receiver with its register command ([`conform::facts`], judged by [`facts::conform`] and [`facts::campaign`]) |
//! | [`cli`] | the `arrival` command line: every subcommand's clap definition and dispatch, the protocol registry ([`cli::protocols`]), the exit statuses ([`cli::Exit`]) and the one error type that keeps bad input apart from a failing environment ([`cli::Error`]); clap belongs here, not in the library modules |
//!
//! The card protocol, module by module (data flows from the edge inwards):
//!
//! | module | job |
//! |---|---|
//! | [`card::wire`] | wire envelopes parsed once into typed, interned [`card::wire::Event`]s; never fails on a protocol anomaly |
//! | [`card::receiver`] | the decision function, reconciliation and retention expiry (pure: no I/O, no clock), the receiver state they read, and the [`card::receiver::Policy`] hooks where a receiver can depart from the contract ([`card::receiver::Spec`] departs nowhere) |
//! | [`card::mutants`] | the wrong receivers, each overriding one hook and naming the property that catches it |
//! | [`card::policy`] | a policy chosen by name: `spec` or a mutant |
//! | [`card::cache`] | the fingerprint a receiver keeps of itself for the visited set |
//! | [`card::audit`] | the audit trail, replacement counters and global arrival order of holds, kept beside the receiver |
//! | [`card::step`] | the steps of a schedule, their faults and the budgets that bound them |
//! | [`card::fixture`] | fixture files validated into a typed [`card::fixture::Scenario`] |
//! | [`card::world`] | the receiver in its world (sender, network, faults, expiry): one [`card::step::Step`] at a time through [`card::world::transition`], shared by replay and the model |
//! | [`card::property`] | the contract's properties by name, and the set a model checks |
//! | [`card::properties`] | the checks: safety and convergence, the `authority-current` precondition and the opt-in `redelivery-recognised`, called by the callers of the transition |
//! | [`card::replay`] | walks a fixture's schedule (or the default order) and builds the report (the `--json` contract) |
//! | [`card::table`] | renders reports as text tables for people |
//! | [`card::model`] | the card protocol as a [`harness::Protocol`] around the transition, with decision coverage and the symmetry of identical redeliveries |
//! | [`card::fingerprint`] | a receiver's fingerprint for the visited set, in a view that may merge settled decisions and forget how a covered card got to its pause (sound reductions, argued at [`card::receiver::Receiver::fingerprint`] and [`card::fingerprint::covered_cards`]) |
//! | [`card::model_file`] | card model files read and validated into a [`card::model_file::LoadedModel`] |
//! | [`card::check`] | card model runs, through the harness |
//! | [`card::trace`] | counterexamples as step tables, replayable fixtures and sequence diagrams (a conformance failure's with its external actions) |
//! | [`card::conform`] | the model as the oracle for a receiver arrival did not write: the [`card::conform::CardTarget`] trait, external faults as the model steps they may be, the candidate worlds filtered by each answer and state read, the property named when none is left |
//! | [`card::campaign`] | a conformance campaign: plans from a model file (kept traces, seeded walks), the first failure shrunk, confirmed and written as a fixture with a `conform` block, the report and JUnit |
//! | [`card::plan`] | plan files: every schedule a campaign would run written as reviewable JSON (`--plan-out`) and read back to run exactly those (`--plan`), refused on another fixture |
//! | [`card::independence`] | splits a fixture into parts that cannot affect each other, checked one by one |
//! | [`card::commute`] | the footprints of a fixture's steps: which steps commute, for the checker's sleep sets |
//! | [`card::generate`] | synthetic fixtures for benchmarks, scaling and the sweep |
//! | [`card::sweep`] | many small generated fixtures checked under the contract's policy and every mutant |
//! | [`card::differential`] | the property-gap report: the contract's policy and each mutant walked over the same random schedules of the sweep's fixtures, decisions compared where no property fails |
//!
//! The facts protocol's modules are listed in [`facts`], the command line's in [`cli`]. The
//! binary (`src/main.rs`) only parses the command line, runs it with [`cli::run`] and exits
//! with its status.

#![warn(missing_docs)]

pub mod card;
pub mod cli;
pub mod conform;
pub mod facts;
pub mod harness;
pub mod pipeline;
pub mod store;
