//! The application-facts protocol (its contract is `docs/facts.md`): signed webhooks from
//! two sources, a stream with a consumer group, and an inbox that decides READY from the set
//! of facts. Pure: no I/O, no clock, no Redis, no HTTP.
//!
//! | module | job |
//! |---|---|
//! | [`envelope`] | raw bytes parsed once into a typed [`envelope::Envelope`] with its canonical content |
//! | [`application`] | the application registry and correlation (tenant, id, business key, material version) |
//! | [`ingress`] | the ingress decision: checks 1 to 9 in order, signatures before parsing |
//! | [`inbox`] | the consumer's decision in one inbox transaction, READY, the poison rule |
//! | [`operator`] | the operator steps: register, upgrade, terminate, resolve a conflict, expire quarantine, each one transaction |
//! | [`step`] | the steps ([`step::Step`]), their faults and the fault budgets |
//! | [`world`] | the pipeline as data, the one [`world::transition`] replay and the model share, [`world::World::is_terminal`], the [`world::Policy`] hook |
//! | [`property`] | the property names (fact-once, correlated, ready-sound, ack-after-commit, no-loss, ready-converges, tenant-isolated) and sets of them |
//! | [`properties`] | the properties' checks on steps and states, computed from the world's data |
//! | [`mutants`] | the wrong pipelines, each a wrapper around the real ingress or consumer step |
//! | [`fixture`] | facts fixture files validated into a typed [`fixture::Scenario`] |
//! | [`replay`] | walks a scenario's schedule, with the properties checked on every step, and builds the report |
//! | [`table`] | a replay report as a text table for people |
//! | [`model`] | the pipeline as a [`crate::harness::Protocol`]: every order and fault within budgets; coverage; steps and states in words |
//! | [`model_file`] | facts model files read into a [`model_file::LoadedModel`] |
//! | [`check`] | runs of a model file: exhaustive, sharded or sampled, or served to Explorer |
//! | [`conform`] | the oracle of `arrival conform`: actions, re-signed wire bytes, the receiver's state normalised, candidate worlds, property names |
//! | [`mutant_schedules`] | each mutant's shortest counterexample on a model file, as a schedule `arrival conform` plays over HTTP |
//! | [`campaign`] | a conformance campaign over a [`campaign::FactsTarget`]: schedules, settling, shrinking, confirmation, report |
//! | [`plan`] | facts plan files: the schedules of a campaign written out (`--plan-out`) and read back (`--plan`), refused on another fixture |
//! | [`trace`] | counterexamples as fixture steps, step tables, replayable fixtures and sequence diagrams |

pub mod application;
pub mod campaign;
pub mod check;
pub mod conform;
pub mod envelope;
pub mod fixture;
pub mod inbox;
pub mod ingress;
pub mod model;
pub mod model_file;
pub mod mutant_schedules;
pub mod mutants;
pub mod operator;
pub mod plan;
pub mod properties;
pub mod property;
pub mod replay;
pub mod step;
pub mod table;
pub mod trace;
pub mod world;
