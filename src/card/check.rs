//! Card model runs: a run of a loaded model file ([`crate::card::model_file`]) checks the `authority-current` precondition, splits the
//! fixture into independent parts if asked, and hands the parts to the harness, which
//! explores them, finds shortest counterexamples and judges the verdict.

use crate::card::fixture::Scenario;
use crate::card::model::ReceiverModel;
pub use crate::card::model_file::{
    load_model, load_model_with, Expectation, LoadedModel, ModelFile, BUDGETS,
};
use crate::card::property::{Properties, Property};
use crate::card::step::Reconciliation;
use crate::card::step::{Budgets, DeliveryBudgets};
use crate::card::trace;
use crate::card::world::World;
pub use crate::harness::check::Mode;
pub use crate::harness::explore::{Engine, Strategy};
use crate::harness::report::Status;
pub use crate::harness::report::{render, ModelReport, PropertyReport, TraceReport};
use crate::harness::InputError;
use crate::harness::{self, check::Subject, explore::Settings};
use std::path::PathBuf;
use std::sync::Arc;

/// How `check` runs.
#[derive(Clone, Debug, Default)]
pub struct CheckOptions {
    /// Write counterexamples as fixtures here.
    pub trace_out: Option<PathBuf>,
    /// Print progress on stderr.
    pub progress: bool,
    /// Which checker explores.
    pub engine: Engine,
}

/// The model a loaded model file describes, checking the given properties.
pub fn build_model(loaded: &LoadedModel, checked: Properties) -> ReceiverModel {
    let budgets = Budgets {
        duplicates: loaded.file.duplicates,
        lost_acks: loaded.file.lost_acks,
        crashes: loaded.file.crashes,
        expiries: loaded.file.expiries,
        reencodings: loaded.file.reencodings,
    };
    let mut model = ReceiverModel::new(
        Arc::clone(&loaded.scenario),
        loaded.policy.0,
        budgets,
        loaded.file.reconciliation,
    );
    model.checked = checked;
    if let Some(per_delivery) = &loaded.per_delivery {
        // By index in this (possibly split) scenario; deliveries of other parts drop out.
        model.per_delivery = DeliveryBudgets::only(
            per_delivery
                .iter()
                .filter_map(|(&number, &budget)| {
                    loaded
                        .scenario
                        .delivery_index(number)
                        .map(|index| (index, budget))
                })
                .collect(),
        );
    }
    if loaded.file.symmetry && loaded.per_delivery.is_none() {
        model = model.with_symmetry();
    }
    if loaded.file.merge_settled {
        model = model.with_merges(loaded.file.merge_paused);
    }
    if loaded.file.sleep_sets {
        model = model.with_sleep_sets();
    }
    if loaded.file.eager_redeliveries {
        model = model.with_eager_redeliveries();
    }
    model
}

/// What the harness reports this model as, run by `engine` as `mode` says.
fn subject(loaded: &LoadedModel, engine: Engine, mode: &Mode) -> Subject {
    Subject {
        model: loaded.path.display().to_string(),
        protocol: "card".into(),
        fixture: loaded.scenario.file.display().to_string(),
        policy: loaded.policy.to_string(),
        expected: match loaded.expectation {
            Expectation::Pass => None,
            Expectation::Violates(property) => Some(property.name()),
        },
        bytes_per_state: full_state_bytes(&loaded.scenario),
        settings: settings_text(loaded, engine, mode),
    }
}

/// The model file's keys that shape the state space, after command-line overrides and as
/// they take effect under `engine` and `mode`, in words (a report's `settings`).
fn settings_text(loaded: &LoadedModel, engine: Engine, mode: &Mode) -> String {
    let file = &loaded.file;
    let per_delivery = loaded
        .per_delivery
        .as_ref()
        .map_or("none".to_owned(), |budgets| {
            budgets
                .iter()
                .map(|(number, budget)| {
                    // A re-encoding budget is written only when given, so older
                    // settings read the same.
                    let reencodings = match budget.reencodings {
                        0 => String::new(),
                        n => format!("/{n}r"),
                    };
                    format!(
                        "#{number}:{}/{}/{}{reencodings}",
                        budget.duplicates, budget.lost_acks, budget.crashes
                    )
                })
                .collect::<Vec<_>>()
                .join(",")
        });
    let reconciliation = match file.reconciliation {
        Reconciliation::Interleaved => "interleaved",
        Reconciliation::End => "end",
    };
    // The reductions as they take effect ([`build_model`], `ReceiverModel::with_merges`),
    // not as written: a key that changes nothing must not keep shards apart.
    let symmetry = file.symmetry && loaded.per_delivery.is_none();
    let merge_paused =
        file.merge_settled && file.merge_paused && loaded.policy.0.is_none() && file.expiries == 0;
    // Only arrival's own depth-first search settles eager steps; random walks and
    // stateright's checkers take every step as it comes.
    let eager_redeliveries = file.eager_redeliveries
        && loaded.policy.0.is_none()
        && file.expiries == 0
        && file.strategy == Strategy::Dfs
        && engine == Engine::Arrival
        && !matches!(mode, Mode::Simulate(_));
    format!(
        "duplicates={} lost_acks={} crashes={} expiries={} reencodings={} \
         per_delivery={per_delivery} reconciliation={reconciliation} split={} symmetry={symmetry} merge_settled={} \
         merge_paused={merge_paused} eager_redeliveries={eager_redeliveries}",
        file.duplicates,
        file.lost_acks,
        file.crashes,
        file.expiries,
        file.reencodings,
        file.split,
        file.merge_settled,
    )
}

/// Checks one model file exhaustively.
pub fn run(loaded: &LoadedModel, options: &CheckOptions) -> Result<ModelReport, InputError> {
    run_with(loaded, options, &Mode::Exhaustive)
}

/// Checks one model file, covering it as `mode` says (everything, one shard's share, or
/// random walks).
pub fn run_with(
    loaded: &LoadedModel,
    options: &CheckOptions,
    mode: &Mode,
) -> Result<ModelReport, InputError> {
    if loaded.checked.contains(Property::AuthorityCurrent) {
        if let Some(behind) = crate::card::properties::authority_behind(&loaded.scenario) {
            let checked = loaded.checked;
            return Ok(harness::check::precondition_failed::<ReceiverModel>(
                subject(loaded, options.engine, mode),
                mode,
                |index| checked.contains(Property::ALL[index]),
                Property::AuthorityCurrent.name(),
                behind.describe(&loaded.scenario),
            ));
        }
    }
    let parts: Vec<LoadedModel> = if loaded.file.split {
        crate::card::independence::split(&loaded.scenario)?
            .into_iter()
            .map(|scenario| LoadedModel {
                scenario: Arc::new(scenario),
                ..loaded.clone()
            })
            .collect()
    } else {
        vec![loaded.clone()]
    };
    let models: Vec<ReceiverModel> = parts
        .iter()
        .map(|part| build_model(part, loaded.checked))
        .collect();
    let settings = Settings {
        strategy: loaded.file.strategy,
        threads: loaded.file.threads,
        state_limit: loaded.file.state_limit,
        label: loaded.path.display().to_string(),
        progress: options.progress,
        engine: options.engine,
    };
    let mut report = harness::check::check_parts_with(
        subject(loaded, options.engine, mode),
        &models,
        &settings,
        mode,
        |model, index, steps| {
            let part = LoadedModel {
                scenario: Arc::clone(&model.scenario),
                ..loaded.clone()
            };
            trace::report(
                &part,
                Property::at(index),
                steps,
                options.trace_out.as_deref(),
            )
        },
    )?;
    // The precondition was checked on the fixture above, before exploring.
    if loaded.checked.contains(Property::AuthorityCurrent) {
        for property in &mut report.properties {
            if property.name == Property::AuthorityCurrent.name() {
                property.status = Status::Holds;
            }
        }
    }
    Ok(report)
}

/// The estimated size of a state late in the default order, when the receiver holds the
/// most records.
fn full_state_bytes(scenario: &Scenario) -> usize {
    let start = World::initial(scenario, Budgets::UNLIMITED);
    let steps = crate::card::replay::schedule(scenario, crate::card::policy::Spec);
    let end = steps.into_iter().fold(start, |world, step| {
        crate::card::world::transition(scenario, crate::card::receiver::Spec, &world, step).0
    });
    end.approx_bytes()
}

/// Serves stateright's Explorer for a model on `address` (blocks; `listening` runs once the
/// address is taken); fails when nothing can listen there.
pub fn serve(loaded: &LoadedModel, address: &str, listening: impl FnOnce()) -> std::io::Result<()> {
    let model = build_model(loaded, loaded.checked);
    harness::explorer::serve(model, loaded.file.threads, address, listening)
}
