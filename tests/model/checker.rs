//! arrival's own checker against stateright's: on every model file small enough for a test,
//! both reach the same number of distinct states, the same verdict, the same violated
//! properties, and counterexamples of the same (shortest) length. arrival's checker is run
//! breadth- and depth-first, with two threads (its threads share work, so this also covers
//! the hand-over between them).

use arrival::card::check::{self, CheckOptions, Engine, Strategy};
use arrival::harness::model_file::Overrides;
use arrival::harness::report::ModelReport;
use std::path::{Path, PathBuf};

/// Model files whose stateright run takes seconds, not minutes, in a test build.
fn small_models() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("models"))
            .expect("models/ exists")
            .map(|entry| entry.expect("readable").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
            .filter(|path| {
                let name = path.file_name().unwrap().to_string_lossy();
                // The upgrade model (2.3 M states) is checked by CI's `arrival check` run.
                !name.contains("upgrade")
            })
            .collect();
    paths.sort();
    paths
}

fn run(path: &Path, engine: Engine, strategy: Strategy, threads: usize) -> ModelReport {
    let overrides = Overrides {
        strategy: Some(strategy),
        threads: Some(threads),
        ..Overrides::default()
    };
    let protocol = arrival::harness::model_file::fixture_protocol(path);
    if protocol.as_deref() == Some("facts") {
        let loaded = arrival::facts::model_file::load_model_with(path, None, &overrides)
            .unwrap_or_else(|error| panic!("{error}"));
        arrival::facts::check::run(&loaded, None, false, engine)
            .unwrap_or_else(|error| panic!("{error}"))
    } else {
        let mut loaded = check::load_model_with(path, None, &overrides)
            .unwrap_or_else(|error| panic!("{error}"));
        // Redeliveries taken alone cut depth-first search's states, which stateright's
        // checkers do not do; `tests/model/eager.rs` tests that reduction.
        loaded.file.eager_redeliveries = false;
        let options = CheckOptions {
            engine,
            ..CheckOptions::default()
        };
        check::run(&loaded, &options).unwrap_or_else(|error| panic!("{error}"))
    }
}

/// What both checkers must agree on.
fn summary(report: &ModelReport) -> (usize, String, Vec<String>, Vec<(String, usize)>) {
    let traces = report
        .properties
        .iter()
        .filter_map(|property| {
            let trace = property.trace.as_ref()?;
            Some((property.name.clone(), trace.steps.len()))
        })
        .collect();
    (
        report.unique_states,
        report.verdict.to_string(),
        report.violated.clone(),
        traces,
    )
}

#[test]
fn both_checkers_reach_the_same_states_verdicts_and_trace_lengths() {
    let models = small_models();
    assert!(models.len() >= 20, "the model files are found");
    for path in &models {
        let reference = summary(&run(path, Engine::Stateright, Strategy::Bfs, 1));
        for (strategy, threads) in [(Strategy::Bfs, 2), (Strategy::Dfs, 2)] {
            let ours = summary(&run(path, Engine::Arrival, strategy, threads));
            // A violated property ends the search early; how far each checker got before it
            // stopped depends on the order, so only exhaustive runs compare state counts.
            let (reference_states, ours_states) = if reference.2.is_empty() {
                (reference.0, ours.0)
            } else {
                (0, 0)
            };
            assert_eq!(
                (ours_states, &ours.1, &ours.2, &ours.3),
                (reference_states, &reference.1, &reference.2, &reference.3),
                "{}: arrival's checker ({strategy:?}, {threads} threads) against stateright's",
                path.display()
            );
        }
    }
}
