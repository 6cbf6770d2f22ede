//! The property-gap report (`arrival check --sweep N --differential`): each mutant and the
//! contract's policy walked over the same random schedules of the sweep's fixtures, side by
//! side, so that a schedule on which their *decisions* differ while the mutant breaks no
//! property shows a place where a property is missing.
//!
//! A walk starts both receivers in the fixture's initial world and at each point takes a
//! step drawn (by a seeded generator) from the steps both worlds offer, through
//! [`crate::card::properties::checked_transition`], until neither offers one, the mutant
//! breaks a property, or [`MAX_STEPS`] steps. The two effects of each step (a delivery's
//! decision and acknowledgement, a reconciliation's outcome and settlements, what expiry
//! forgot) are compared; so are the steps each world offers next (a card paused in one
//! world only can be reconciled in that one). A walk is a *gap* when they differ somewhere
//! and the mutant breaks nothing on the whole walk. A mutant is as expected with no gap,
//! once some walk told it apart from the contract (its decisions differed, or it broke a
//! property); a mutant no walk exercised is reported as such and is not as expected.

use crate::card::fixture::Scenario;
use crate::card::model::{describe_step, ReceiverModel};
use crate::card::policy::{Mutant, Spec};
use crate::card::properties::checked_transition;
use crate::card::property::{Properties, Property};
use crate::card::step::{Budgets, Reconciliation, Step};
use crate::card::sweep::fixture_seeds;
use crate::card::world::{Effect, World};
use crate::harness::rng::SplitMix;
use crate::harness::{InputError, Protocol};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// The most steps one walk takes (the sweep's fixtures end in far fewer).
pub const MAX_STEPS: usize = 64;

/// What the report covers.
#[derive(Clone, Debug)]
pub struct DifferentialOptions {
    /// How many of the sweep's fixtures.
    pub count: usize,
    /// The sweep's seed (the same fixtures as the sweep's).
    pub seed: u64,
    /// Walks per fixture and mutant.
    pub walks: usize,
    /// The first `expiry` fixtures are walked again with one re-encoding and one expiry.
    pub expiry: usize,
    /// The mutants compared with the contract's policy.
    pub mutants: Vec<Mutant>,
    /// The properties the walks check ([`Properties::SPEC`] from the command line; a test
    /// leaves one out to see the gap it closes).
    pub checked: Properties,
}

/// The first walk on which a mutant's decisions differed and no property broke.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Gap {
    /// The fixture's seed (`generate::small(seed)` regenerates it).
    pub fixture_seed: u64,
    /// Whether the walk had the expiry pass's budgets.
    pub expiry: bool,
    /// The walk's number on that fixture (from 0).
    pub walk: usize,
    /// The schedule, up to and including the first step that differed.
    pub steps: Vec<String>,
    /// What the contract's policy did at that step.
    pub spec: String,
    /// What the mutant did there.
    pub mutant: String,
}

/// One mutant over every walk.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MutantDifferential {
    /// The mutant's name.
    pub policy: String,
    /// Walks taken.
    pub schedules: usize,
    /// Walks on which the decisions differed.
    pub differing: usize,
    /// Walks on which the mutant broke a property (whether or not its decisions differed:
    /// a wrong effect with the same decision is caught too).
    pub caught: usize,
    /// Walks on which the decisions differed and nothing broke.
    pub gaps: usize,
    /// The first of those.
    pub first_gap: Option<Gap>,
    /// No gap, and the mutant was exercised: on some walk its decisions differed or a
    /// property broke (a mutant no walk tells apart from the contract has shown nothing).
    pub as_expected: bool,
}

/// The whole report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DifferentialReport {
    /// Fixtures walked.
    pub count: usize,
    /// The sweep's seed.
    pub seed: u64,
    /// Walks per fixture and mutant.
    pub walks: usize,
    /// Fixtures walked a second time with expiry.
    pub with_expiry: usize,
    /// Each mutant's result.
    pub mutants: Vec<MutantDifferential>,
    /// Every mutant as expected.
    pub as_expected: bool,
    /// Wall time.
    pub seconds: f64,
}

/// How one walk went.
enum Walked {
    /// The decisions never differed; whether the mutant broke a property all the same (a
    /// wrong effect on the state, such as a pause on a duplicate, with the same decision).
    Same {
        /// The mutant broke a property.
        caught: bool,
    },
    /// They differed and the mutant broke a property.
    Caught,
    /// They differed and nothing broke.
    Gap(Gap),
}

/// One fixture as the walks see it.
struct Fixture {
    seed: u64,
    scenario: Arc<Scenario>,
}

/// Runs the report.
pub fn run(options: &DifferentialOptions) -> Result<DifferentialReport, InputError> {
    let start = Instant::now();
    let mut fixtures = Vec::new();
    for seed in fixture_seeds(options.seed, options.count) {
        let raw = crate::card::generate::small(seed)?;
        let file = PathBuf::from(format!("sweep-{seed}.json"));
        let scenario = Arc::new(Scenario::from_raw(&file, raw)?);
        fixtures.push(Fixture { seed, scenario });
    }
    let with_expiry = options.expiry.min(fixtures.len());
    let mutants = options
        .mutants
        .iter()
        .map(|&mutant| compare_mutant(mutant, &fixtures, with_expiry, options))
        .collect::<Vec<_>>();
    Ok(DifferentialReport {
        count: options.count,
        seed: options.seed,
        walks: options.walks,
        with_expiry,
        as_expected: mutants.iter().all(|mutant| mutant.as_expected),
        mutants,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Every walk of one mutant.
fn compare_mutant(
    mutant: Mutant,
    fixtures: &[Fixture],
    with_expiry: usize,
    options: &DifferentialOptions,
) -> MutantDifferential {
    let mut result = MutantDifferential {
        policy: mutant.name().to_owned(),
        schedules: 0,
        differing: 0,
        caught: 0,
        gaps: 0,
        first_gap: None,
        as_expected: false,
    };
    let passes = fixtures.iter().map(|fixture| (fixture, false)).chain(
        fixtures[..with_expiry]
            .iter()
            .map(|fixture| (fixture, true)),
    );
    for (fixture, expiry) in passes {
        for walk in 0..options.walks {
            result.schedules += 1;
            match walk_once(mutant, fixture, (expiry, options.checked), walk) {
                Walked::Same { caught } => result.caught += usize::from(caught),
                Walked::Caught => {
                    result.differing += 1;
                    result.caught += 1;
                }
                Walked::Gap(gap) => {
                    result.differing += 1;
                    result.gaps += 1;
                    result.first_gap.get_or_insert(gap);
                }
            }
        }
    }
    result.as_expected = result.gaps == 0 && (result.differing > 0 || result.caught > 0);
    result
}

/// The budgets and properties of a pass: the sweep's first (one duplicate, one lost
/// acknowledgement, one crash; every property of `checked`) or its expiry pass (one
/// re-encoding, one expiry; every property of `checked` but convergence).
fn pass(expiry: bool, checked: Properties) -> (Budgets, Properties) {
    if expiry {
        let budgets = Budgets {
            duplicates: 0,
            lost_acks: 0,
            crashes: 0,
            expiries: 1,
            reencodings: 1,
        };
        let without_convergence = checked
            .iter()
            .filter(|&property| property != Property::Convergence)
            .collect();
        (budgets, without_convergence)
    } else {
        let budgets = Budgets {
            duplicates: 1,
            lost_acks: 1,
            crashes: 1,
            expiries: 0,
            reencodings: 0,
        };
        (budgets, checked)
    }
}

/// One walk of the contract's policy and `mutant` side by side.
fn walk_once(
    mutant: Mutant,
    fixture: &Fixture,
    (expiry, checked): (bool, Properties),
    walk: usize,
) -> Walked {
    let (budgets, checked) = pass(expiry, checked);
    let scenario = &fixture.scenario;
    let model = |policy| {
        let mut model = ReceiverModel::new(
            Arc::clone(scenario),
            policy,
            budgets,
            Reconciliation::Interleaved,
        );
        model.checked = checked;
        model
    };
    let (spec_model, mutant_model) = (model(None), model(Some(mutant)));
    let mut rng = SplitMix::new(
        fixture.seed ^ (walk as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(expiry),
    );
    let (mut spec, mut wrong) = (spec_model.init(), mutant_model.init());
    let mut steps = Vec::new();
    let mut first_difference: Option<(Vec<String>, String, String)> = None;
    for _ in 0..MAX_STEPS {
        let (offered, common) = offered(&spec_model, &spec, &mutant_model, &wrong);
        if offered && first_difference.is_none() {
            first_difference = Some((
                steps.clone(),
                "offers other next steps".into(),
                "offers other next steps".into(),
            ));
        }
        if common.is_empty() {
            break;
        }
        let step = common[rng.below(common.len() as u64) as usize];
        let (spec_next, spec_effect) = checked_transition(scenario, Spec, checked, &spec, step);
        let (wrong_next, wrong_effect) =
            checked_transition(scenario, Some(mutant), checked, &wrong, step);
        steps.push(describe_step(scenario, &step));
        if spec_effect != wrong_effect && first_difference.is_none() {
            first_difference = Some((
                steps.clone(),
                describe_effect(scenario, &spec_effect),
                describe_effect(scenario, &wrong_effect),
            ));
        }
        (spec, wrong) = (spec_next, wrong_next);
        if wrong.violation.is_some() || spec.violation.is_some() {
            break;
        }
    }
    match (first_difference, wrong.violation) {
        (None, violation) => Walked::Same {
            caught: violation.is_some(),
        },
        (Some(_), Some(_)) => Walked::Caught,
        (Some((steps, spec, mutant)), None) => Walked::Gap(Gap {
            fixture_seed: fixture.seed,
            expiry,
            walk,
            steps,
            spec,
            mutant,
        }),
    }
}

/// Whether the two worlds offer different steps, and the steps both offer (in the
/// contract's order).
fn offered(
    spec_model: &ReceiverModel,
    spec: &World,
    mutant_model: &ReceiverModel,
    wrong: &World,
) -> (bool, Vec<Step>) {
    let (mut spec_steps, mut wrong_steps) = (Vec::new(), Vec::new());
    spec_model.steps(spec, &mut spec_steps);
    mutant_model.steps(wrong, &mut wrong_steps);
    let common: Vec<Step> = spec_steps
        .iter()
        .copied()
        .filter(|step| wrong_steps.contains(step))
        .collect();
    let differ = common.len() != spec_steps.len() || common.len() != wrong_steps.len();
    (differ, common)
}

/// A step's effect in domain terms, for a gap's report.
fn describe_effect(scenario: &Scenario, effect: &Effect) -> String {
    let name = |input: crate::card::receiver::HoldKey| match input.input() {
        crate::card::receiver::InputRef::Event(id) => scenario.catalog.name(id).to_owned(),
        crate::card::receiver::InputRef::Delivery(number) => format!("delivery-{number}"),
    };
    match effect {
        Effect::Delivered { delivered, acked } => format!(
            "{}, acknowledged {}",
            delivered.map_or("crashed before record", |answer| answer.verdict.name()),
            acked.map_or("not at all", |ack| ack.name())
        ),
        Effect::Reconciled(reconciled) => {
            let settled: Vec<String> = reconciled
                .settled
                .iter()
                .map(|(key, settlement)| {
                    use crate::card::receiver::Settlement;
                    match settlement {
                        Settlement::ReEvaluated { to, .. } => {
                            format!("{} -> {}", name(*key), to.name())
                        }
                        Settlement::Resolved => format!("{} resolved", name(*key)),
                        Settlement::Superseded => format!("{} superseded", name(*key)),
                    }
                })
                .collect();
            format!("{}; {}", reconciled.outcome.name(), settled.join(", "))
        }
        Effect::Expired(gone) => {
            let gone: Vec<&str> = gone.iter().map(|id| scenario.catalog.name(*id)).collect();
            format!("forgot {}", gone.join(", "))
        }
    }
}

/// Renders the report for people.
pub fn render(report: &DifferentialReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "differential: {} walks on each of {} sweep fixtures (seed {}), the first {} again with expiry; spec and each mutant side by side",
        report.walks, report.count, report.seed, report.with_expiry
    );
    for mutant in &report.mutants {
        let verdict = match (mutant.gaps, mutant.as_expected) {
            (0, true) => "no gap".to_owned(),
            (0, false) => "NOT EXERCISED: no walk told it apart from the contract".to_owned(),
            (gaps, _) => format!("{gaps} gaps  <-- A PROPERTY IS MISSING"),
        };
        let _ = writeln!(
            out,
            "  {:<30} {verdict}; {} schedules, decisions differ on {}, caught on {}",
            mutant.policy, mutant.schedules, mutant.differing, mutant.caught
        );
        if let Some(gap) = &mutant.first_gap {
            let _ = writeln!(
                out,
                "    first gap: fixture seed {}{}, walk {}: {}; spec: {}; {}: {}",
                gap.fixture_seed,
                if gap.expiry { " (expiry pass)" } else { "" },
                gap.walk,
                gap.steps.join(", "),
                gap.spec,
                mutant.policy,
                gap.mutant
            );
        }
    }
    let _ = writeln!(
        out,
        "differential: {} in {:.1} s",
        if report.as_expected {
            "no unexplained gap"
        } else {
            "UNEXPLAINED GAPS"
        },
        report.seconds
    );
    out
}

/// The report as a JUnit suite: one case per mutant, failing on an unexplained gap.
pub fn junit_suite(report: &DifferentialReport) -> crate::harness::junit::ExtraSuite {
    crate::harness::junit::ExtraSuite {
        skipped: Vec::new(),
        name: format!(
            "differential over {} sweep fixtures (seed {})",
            report.count, report.seed
        ),
        cases: report
            .mutants
            .iter()
            .map(|mutant| {
                let failure = (!mutant.as_expected).then(|| {
                    format!(
                        "{} differs from spec on {} schedules where no property fails; first: {:?}",
                        mutant.policy, mutant.gaps, mutant.first_gap
                    )
                });
                (mutant.policy.clone(), failure)
            })
            .collect(),
        seconds: report.seconds,
    }
}
