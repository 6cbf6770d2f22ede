//! Each facts mutant's shortest counterexample on a model file's fixture and budgets, found
//! by the checker `arrival check` uses (breadth first, one property, a state limit), and
//! turned into a schedule `arrival conform` can play over HTTP; with the reason for each
//! mutant that gives none.

use super::conform::{schedule_actions, Action};
use super::model::FactsModel;
use super::model_file::LoadedModel;
use super::mutants::Mutant;
use super::world::Setup;
use crate::harness::explore::{shortest_within, Engine, Settings, Strategy};
use std::sync::Arc;

/// A mutant's schedule: its id (`mutants/NAME.PROPERTY`) and actions.
pub type MutantSchedule = (String, Vec<Action>);

/// The mutants a model file lists: its `policy` when that names a mutant, else every
/// facts mutant.
pub fn listed(loaded: &LoadedModel) -> Vec<Mutant> {
    match loaded.file.policy.parse::<Mutant>() {
        Ok(mutant) => vec![mutant],
        Err(_) => Mutant::ALL.to_vec(),
    }
}

/// The model of `loaded` under `mutant`, without the steps arrival cannot play: no poison
/// or undecidable entry (nothing reaches the receiver's stream but through its ingress), no
/// upgrade and no operator step (there is no operator channel). Their budgets stay as
/// written, so the model's convergence check reads the fixture's `expect` exactly when the
/// model file's own check does; only the steps are gone.
fn playable_model(loaded: &LoadedModel, mutant: Mutant) -> FactsModel {
    let mut model = loaded.model.clone();
    model.setup = Arc::new(Setup {
        mutant: Some(mutant),
        ..(*loaded.model.setup).clone()
    });
    model.budgets.poison = 0;
    model.undecidable = None;
    model.upgrade = None;
    model.operator_steps = Vec::new();
    model.coverage = Arc::default();
    model
}

/// Whether the model file lets the checker take steps [`playable_model`] leaves out.
fn has_unplayable_steps(loaded: &LoadedModel) -> bool {
    let file = &loaded.file;
    file.poison > 0 || file.undecidable > 0 || file.upgrade || file.operator > 0
}

/// For each of `mutants`, the shortest schedule on the model file's fixture and budgets
/// (without the steps arrival cannot play) that breaks the property catching it, searched
/// breadth first over at most `state_limit` states, when every step of it can be played
/// (`playable`: the requests arrival can post on a real clock); and for every other
/// mutant, why not. A schedule equal to one in `known` or found for an earlier mutant runs
/// once (the later mutant is listed with the schedule it shares). Shortest first.
pub fn mutant_schedules(
    loaded: &LoadedModel,
    mutants: &[Mutant],
    state_limit: usize,
    playable: &[u32],
    known: &[Vec<Action>],
) -> (Vec<MutantSchedule>, Vec<String>) {
    let (mut found, mut skipped): (Vec<MutantSchedule>, Vec<String>) = (Vec::new(), Vec::new());
    for &mutant in mutants {
        let Some(property) = mutant.caught_by() else {
            skipped.push(format!(
                "mutants/{mutant}: no property of the model catches it (the ingress tests do)"
            ));
            continue;
        };
        let id = format!("mutants/{mutant}.{property}");
        let settings = Settings {
            strategy: Strategy::Bfs,
            threads: 1,
            state_limit: Some(state_limit),
            label: id.clone(),
            progress: false,
            engine: Engine::Arrival,
        };
        let model = playable_model(loaded, mutant);
        let (steps, cut) = shortest_within(&model, property as usize, &settings);
        let Some(steps) = steps else {
            skipped.push(format!("{id}: {}", not_found(loaded, state_limit, cut)));
            continue;
        };
        let actions = match schedule_actions(&steps, playable) {
            Ok(actions) => actions,
            Err(why) => {
                skipped.push(format!("{id}: its shortest counterexample needs {why}"));
                continue;
            }
        };
        if known.contains(&actions) {
            skipped.push(format!(
                "{id}: the same schedule as the fixture's own (run once)"
            ));
        } else if let Some((other, _)) = found.iter().find(|(_, seen)| *seen == actions) {
            skipped.push(format!("{id}: the same schedule as {other} (run once)"));
        } else {
            found.push((id, actions));
        }
    }
    found.sort_by_key(|(_, actions)| actions.len());
    (found, skipped)
}

/// Why a search found no counterexample.
fn not_found(loaded: &LoadedModel, state_limit: usize, cut: bool) -> String {
    if cut {
        format!("no counterexample within {state_limit} states")
    } else if has_unplayable_steps(loaded) {
        "no counterexample without poison or undecidable entries, upgrades or operator steps, \
         which arrival cannot play"
            .to_owned()
    } else {
        "no counterexample on this model's fixture and budgets".to_owned()
    }
}
