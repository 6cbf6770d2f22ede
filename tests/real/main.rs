//! The real durable store and the real facts pipeline, against real services: SQLite files,
//! the PostgreSQL server at `ARRIVAL_DATABASE_URL` and the Redis at `ARRIVAL_REDIS_URL`
//! (see `.ci/test`). A service that does not answer fails the test; nothing is skipped.
//!
//! - `store`: the card store on SQLite and PostgreSQL, each test written once and run on
//!   both backends (`backend_test!`), with the crash and concurrency drills.
//! - `pipeline`: the facts pipeline (axum + Redis + SQLite) and its kill drills.
//! - `conform`: `arrival conform` against the Python example receivers, the store behind
//!   `arrival store stdio`, and broken harnesses (exit 3).
//! - `conform_facts`: `arrival conform` on a facts model against `pipeline serve` (sampled),
//!   `pipeline serve-wrong` with two mutants (caught and named), and broken harnesses.
//! - `conform_state`: the state read by SQL (SQLite and PostgreSQL) and by a command, for
//!   python-sqlite and `pipeline serve`; failing state sources (exit 3) and wrong `state`
//!   settings (exit 2).
//! - `explain`: `pipeline explain` and the chain from receipt to verdict, on a real `serve`.
//! - `hardening`: `serve` against floods, slow and stalled clients, and keys files changed
//!   under it: the rate limit, the header-read timeout, the connection cap, the graceful
//!   stop, SIGHUP reloads.
//! - `inbox`: the pipeline's inbox schema under versioned migrations (SQLite only).
//! - `operator`: the operator's commands on a real inbox, and every facts fixture played
//!   against the real pipeline.
//! - `postgres_inbox`: the facts pipeline's inbox on PostgreSQL: every fixture, and three
//!   `serve` processes sharing one consumer group and one database.
//! - `poison`: per-entry poison isolation in the consumer, against the real Redis.

#[allow(dead_code, unused_imports)]
#[path = "../util/mod.rs"]
mod util;

mod conform;
mod conform_facts;
mod conform_state;
mod explain;
mod hardening;
mod inbox;
mod operator;
mod pg;
mod pipeline;
mod poison;
mod postgres_inbox;
mod store;
