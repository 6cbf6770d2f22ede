//! Helpers shared by the four test binaries (each declares `mod util;` with a path here):
//! running the `arrival` binary and reading what it printed, temporary folders
//! (`tempfile`), and the seeded generator the tests draw from (the harness's own SplitMix,
//! so a seed names the same draws in the tests as in the crate).
//!
//! Not every binary uses every helper: each main.rs allows dead code on this module.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};

pub use arrival::harness::rng::SplitMix;
pub use tempfile::TempDir;

/// The `arrival` binary cargo built for these tests.
pub const ARRIVAL: &str = env!("CARGO_BIN_EXE_arrival");

/// The crate's root folder: model files, fixtures and test inputs are named from here.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `arrival ARGS` from the crate's root with nothing on stdin, and waits for it.
pub fn arrival(args: &[&str]) -> Output {
    Command::new(ARRIVAL)
        .args(args)
        .current_dir(root())
        .stdin(Stdio::null())
        .output()
        .expect("arrival runs")
}

/// What the run printed on stdout (lossy UTF-8).
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// What the run printed on stderr (lossy UTF-8).
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The exit status (a run killed by a signal has none: that fails the test).
pub fn status(output: &Output) -> i32 {
    output.status.code().expect("an exit status")
}

/// Asserts the exit status, with both streams in the message when it differs, and that
/// nothing panicked.
#[track_caller]
pub fn assert_status(output: &Output, expected: i32, what: &str) {
    assert_eq!(
        output.status.code(),
        Some(expected),
        "{what}: expected exit status {expected}\n--- stdout\n{}\n--- stderr\n{}",
        stdout(output),
        stderr(output)
    );
    assert!(
        !stderr(output).contains("panicked"),
        "{what}: panicked\n{}",
        stderr(output)
    );
}

/// Stdout parsed as one JSON document (the test fails, showing both streams, if it is not).
#[track_caller]
pub fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "stdout is not JSON ({error}):\n{}\n--- stderr\n{}",
            stdout(output),
            stderr(output)
        )
    })
}

/// Runs `arrival ARGS`, asserts it succeeded, and returns its stdout.
#[track_caller]
pub fn ok(args: &[&str]) -> String {
    let output = arrival(args);
    assert!(
        output.status.success(),
        "arrival {args:?} failed: {}{}",
        stdout(&output),
        stderr(&output)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// A fresh temporary folder whose name starts `arrival-LABEL-`, removed when dropped.
pub fn temp_dir(label: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("arrival-{label}-"))
        .tempdir()
        .expect("a temporary folder")
}
