//! The real facts pipeline: signed HTTP ingress (axum), a Redis Stream with a consumer
//! group, and a durable inbox (SQLite embedded, PostgreSQL for consumers on several machines), each decision made by the pure functions of
//! [`crate::facts`] (the pipeline depends on `facts`, never the other way). All real I/O of
//! the facts protocol lives here. The contract and how to run it: `docs/pipeline.md`.
//!
//! | module | job |
//! |---|---|
//! | [`sql`] | the inbox's one connection type over SQLite and PostgreSQL: typed arguments, plain rows, transactions and savepoints, which errors are an entry's fault and which are retried |
//! | [`store`] | the inbox in SQLite or PostgreSQL: the parts one transaction loads and writes back (READY history included), snapshots |
//! | [`operator`] | the operator's steps on the inbox (register, upgrade, terminate, resolve, expire quarantine) and the lists read before them |
//! | [`batch`] | one batch's `BEGIN IMMEDIATE` transaction, each entry under its own savepoint: an undecidable entry is rolled back and recorded, the rest decided |
//! | [`schema`] | the inbox's schema under versioned migrations; an inbox from a newer arrival refused |
//! | [`stream`] | Redis commands: `XADD`, `XREADGROUP`, `XAUTOCLAIM`, `XPENDING`, `XACK`, the dead-letter script |
//! | [`consumer`] | a consumer of the group: own pending first, takeover, batches, ack after commit, poison, injected kills |
//! | [`consume`] | `pipeline consume`: a process of consumers and no ingress, named as `serve` names its own, until SIGTERM; the drills' self-kill at a point |
//! | [`ingress`] | the HTTP handler and the running pipeline (start, serve, graceful shutdown, keys reloaded on SIGHUP) |
//! | [`server`] | the HTTP/1 accept loop under ingress: the connection cap, the header-read timeout, a shutdown that does not wait for half-sent heads |
//! | [`rate_limit`] | the per-source token buckets ingress checks before reading a body (429 with `Retry-After`) |
//! | [`keys`] | the keys file: read and validated, permissions checked, read again on SIGHUP |
//! | [`dead_letters`] | the dead-letter stream for people: list, replay into the stream, discard; each action recorded in the inbox |
//! | [`explain`] | `pipeline explain`: the rows of an application or an event loaded once ([`explain::load`]), and the answer to "why (not) READY" as a pure function of them ([`explain::reason`]) |
//! | [`metrics`] | `/metrics` (Prometheus text through `prometheus-client`), `/healthz`, `/readyz`: counters and the commit histogram of the process, levels read from Redis and the inbox at each scrape |
//! | [`receipts`] | one receipt per answered request (refusals too), written to the inbox by a writer thread in batches |
//! | [`client`] | a small HTTP/1.1 client that posts bodies byte for byte |
//! | [`run`] | a facts fixture played against the real pipeline, reported like `replay` |
//! | [`drill`] | the drills, one file each (`kill`, `process_kill`, `commit_fails`, `redis_down`, `db_locked`, `poison`) beside the shared rig (`rig`: requests, their model, setup, end), the end checks they share (`checks`) and the consumer child processes of the process drills (`children`) |
//! | [`load`] | the load generator: requests/s and request-to-commit latency |

pub mod batch;
pub mod client;
pub mod consume;
pub mod consumer;
pub mod dead_letters;
pub mod drill;
pub mod explain;
pub mod ingress;
pub mod keys;
pub mod load;
pub mod metrics;
pub mod operator;
pub mod rate_limit;
pub mod receipts;
pub mod run;
pub mod schema;
pub mod server;
pub mod sql;
pub mod store;
pub mod stream;
