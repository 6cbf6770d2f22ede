//! The real side of `arrival conform`: the receivers under test as processes, spoken to
//! over HTTP or JSON lines, started, killed (the whole process group) and restarted on the
//! same data directory. Everything that judges what they do is pure and lives in
//! [`crate::card::conform`], [`crate::facts::conform`] and [`crate::harness::conform`].
//!
//! | module | job |
//! |---|---|
//! | [`target`] | the target file (`--target FILE.toml`) and its command-line shorthands, read into a running target |
//! | [`groups`] | the receivers' process groups, `SIGKILL`ed when arrival is ended by a signal |
//! | [`process`] | the process supervisor: placeholders, process group, `SIGKILL`, data directory, stderr tail |
//! | [`authority`] | the authority's snapshots served on a loopback port for a receiver that reconciles in pull mode, every fetch recorded |
//! | [`http`] | the HTTP target and its minimal blocking client (chunked answers included) |
//! | [`stdio`] | the JSON-lines target |
//! | [`facts`] | the facts target: its target file, register command, signed posts, kills |
//! | [`state`] | where either protocol's state document is read: a URL, a command, SQL on SQLite or PostgreSQL, or several merged |

pub mod authority;
pub mod facts;
pub mod groups;
pub mod http;
pub mod process;
pub mod state;
pub mod stdio;
pub mod target;
