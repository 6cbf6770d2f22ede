//! The command line and the browser: the `arrival` binary run as a user runs it.
//!
//! - `ci_workflows`: the CI workflows of docs/ci, parsed as YAML and run job by job, and
//!   shown in docs/ci.md as they are.
//! - `cli`: exit statuses, error messages, malformed inputs, JUnit and output files.
//! - `explorer`: `check --explore` served to headless chromium through chromedriver.
//! - `panics`: a policy whose decision function panics, through `check`, the sweep,
//!   `--simulate` and `replay`: a finding with a trace, never a crash.

#[allow(dead_code, unused_imports)]
#[path = "../util/mod.rs"]
mod util;

mod ci_workflows;
mod cli;
mod explorer;
mod panics;
