//! The fast tests: the card contract's rules, its walkthrough and properties, the wire
//! parser, and the facts ingress, properties and replay. No services, no model checking
//! beyond a few steps; the target cargo-mutants runs (`--test core`).
//!
//! - `conform`: the conformance oracle on in-process targets (the `CardTarget` trait):
//!   what it passes, what it names, what it cannot see.
//! - `conform_facts`: the facts oracle: re-signed wire bytes, names, walks, and campaigns
//!   against an in-process receiver under the contract and two mutants.
//! - `rules`: one test per rule and precedence edge of the decision function,
//!   reconciliation and retention, as tables of rows through one `check` helper.
//! - `walkthrough`: the B62-15 walkthrough of `docs/protocol.md`, step by step.
//! - `properties`: proptest properties of the decision function over generated fixtures.
//! - `wire_bytes`: `Catalog::event_from_bytes` gives what `Catalog::event` gives.
//! - `facts_ingress`: the facts ingress checks, their order and the signature edge cases.
//! - `facts_properties`: facts inbox and envelope properties over generated inputs.
//! - `facts_replay`: the facts acceptance run step by step and malformed facts fixtures.
//! - `facts_webhooks`: Standard Webhooks requests, signed by the reference crate, at ingress.

#[allow(dead_code, unused_imports)]
#[path = "../util/mod.rs"]
mod util;

mod conform;
mod conform_facts;
mod facts_ingress;
mod facts_properties;
mod facts_replay;
mod facts_v2;
mod facts_webhooks;
mod properties;
mod rules;
mod walkthrough;
mod wire_bytes;
