//! Runs of a facts model file: checked exhaustively ([`run`]), by shard or by random walks
//! ([`run_with`]), or served to stateright's Explorer ([`serve`]).

use super::model::State;
use super::model_file::{settings_text, LoadedModel};
use super::property::Property;
use super::trace::trace;
use crate::harness::check::{check_parts_with, Mode, Subject};
use crate::harness::explore::{Engine, Settings};
use crate::harness::report::ModelReport;
use crate::harness::InputError;
use std::path::Path;

/// Checks one facts model file exhaustively.
pub fn run(
    loaded: &LoadedModel,
    trace_out: Option<&Path>,
    progress: bool,
    engine: Engine,
) -> Result<ModelReport, InputError> {
    run_with(loaded, trace_out, progress, engine, &Mode::Exhaustive)
}

/// Checks a facts model file, covering it as `mode` says (everything, one shard's share,
/// or random walks).
pub fn run_with(
    loaded: &LoadedModel,
    trace_out: Option<&Path>,
    progress: bool,
    engine: Engine,
    mode: &Mode,
) -> Result<ModelReport, InputError> {
    let subject = Subject {
        model: loaded.path.display().to_string(),
        protocol: "facts".into(),
        fixture: loaded.model.scenario.file.display().to_string(),
        policy: loaded.policy.clone(),
        expected: loaded.expected.map(Property::name),
        bytes_per_state: std::mem::size_of::<State>(),
        settings: settings_text(&loaded.file),
    };
    let settings = Settings {
        strategy: loaded.file.strategy,
        threads: loaded.file.threads,
        state_limit: loaded.file.state_limit,
        label: loaded.path.display().to_string(),
        progress,
        engine,
    };
    check_parts_with(
        subject,
        std::slice::from_ref(&loaded.model),
        &settings,
        mode,
        |_, index, steps| trace(loaded, Property::ALL[index], steps, trace_out),
    )
}

/// Serves stateright's Explorer for a facts model on `address` (blocks; `listening` runs once
/// the address is taken); fails when nothing can listen there.
pub fn serve(loaded: &LoadedModel, address: &str, listening: impl FnOnce()) -> std::io::Result<()> {
    let model = loaded.model.clone();
    crate::harness::explorer::serve(model, loaded.file.threads, address, listening)
}
