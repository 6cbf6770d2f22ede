//! Fuzz target `fixture`: arbitrary bytes as fixture text.
//!
//! Bytes that are not UTF-8 are skipped (fixtures are read with `read_to_string`, which
//! rejects them before parsing). The text goes through `Scenario::parse`: every rejection
//! must be an `InputError::Invalid` naming the file, a place and a message, never a panic.
//! A fixture that parses (with at most `MAX_STEPS` deliveries and steps, to bound the time
//! per input) is replayed under the SPEC policy and its report serialised with serde_json
//! and read back; the fixture as parsed is written back out and must parse again. The same
//! fixture is then replayed under one mutant policy too (picked by the input's length), as
//! `arrival replay --policy NAME` would: mutants break properties on purpose, but must not
//! panic either.

#![no_main]

use arrival::card::fixture::Scenario;
use arrival::harness::InputError;
use arrival::card::policy::{Mutant, Spec};
use arrival::card::replay::{replay, Report};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

/// Larger fixtures are skipped: replay reports every card after every step.
const MAX_STEPS: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let file = Path::new("fuzz.json");
    let scenario = match Scenario::parse(file, text) {
        Ok(scenario) => scenario,
        Err(error) => {
            check_error(&error, file);
            return;
        }
    };
    if scenario.deliveries.len() > MAX_STEPS || scenario.steps().len() > MAX_STEPS {
        return;
    }
    let report = replay(&scenario, Spec, "spec");
    assert_eq!(
        report.steps.len(),
        scenario.steps().len(),
        "one report per step"
    );
    let json = serde_json::to_string(&report).expect("a report serialises");
    let _: Report = serde_json::from_str(&json).expect("a report reads back");

    let mutant = Mutant::ALL[data.len() % Mutant::ALL.len()];
    let report = replay(&scenario, Some(mutant), mutant.name());
    assert_eq!(
        report.steps.len(),
        scenario.steps().len(),
        "one report per step"
    );
    serde_json::to_string(&report).expect("a report serialises");

    // The fixture as parsed, written back out, is a fixture too.
    let written = serde_json::to_string_pretty(&scenario.raw).expect("a fixture serialises");
    if let Err(error) = Scenario::parse(file, &written) {
        panic!("a fixture that parsed does not parse once written back: {error}\n{written}");
    }
});

fn check_error(error: &InputError, file: &Path) {
    match error {
        InputError::Invalid {
            file: named,
            place,
            message,
        } => {
            assert_eq!(named, file, "the error names another file");
            assert!(!place.is_empty(), "an error without a place: {error}");
            assert!(!message.is_empty(), "an error without a message: {error}");
        }
        InputError::Io { .. } | InputError::Write { .. } => {
            panic!("parsing text gave an I/O error: {error}")
        }
    }
    let shown = error.to_string();
    assert!(shown.starts_with("fuzz.json: "), "{shown}");
}
