//! The sweep: many small generated fixtures, each checked exhaustively under SPEC and under
//! every mutant, so that the checker finds what random testing finds.
//!
//! Hand-made fixtures in `models/` exercise a few arrival patterns; a wrong receiver can
//! pass all of them. The sweep draws `count` fixtures from [`crate::card::generate::small`] (every
//! input kind, authority snapshots that satisfy `authority-current`), checks each one with a
//! duplicate, a lost acknowledgement and a crash in every order (and the first few again
//! with a re-encoded copy and the retention window passing, [`EXPIRY_PASS`]), and counts per policy which
//! properties broke. SPEC must break none; each mutant must be caught by the property the
//! catalogue names for it ([`crate::card::policy::Mutant::caught_by`]) on at least one fixture.
//! The first fixture that shows a violation is reported by its seed and, with `trace_out`,
//! written as a replayable regression fixture.

use crate::card::check::{self, CheckOptions, Strategy};
use crate::card::fixture::Scenario;
use crate::card::generate::small;
use crate::card::model_file::{Expectation, LoadedModel, ModelFile};
use crate::card::policy::PolicyName;
use crate::card::property::{Properties, Property};
use crate::card::step::Reconciliation;
use crate::harness::report::Expected;
use crate::harness::rng::SplitMix;
use crate::harness::InputError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// What a sweep checks.
#[derive(Clone, Debug)]
pub struct SweepOptions {
    /// How many fixtures.
    pub count: usize,
    /// The seed the fixtures' seeds are drawn from.
    pub seed: u64,
    /// The policies to check each fixture under.
    pub policies: Vec<PolicyName>,
    /// Write the first counterexample of each policy here, as a regression fixture.
    pub trace_out: Option<PathBuf>,
    /// How many of the fixtures (the first ones) are checked a second time with the
    /// retention window passing once ([`EXPIRY_PASS`]).
    pub expiry: usize,
    /// Check each mutant only until the property the catalogue names for it breaks (the
    /// expiry pass first, then the first pass); `spec` is checked on every fixture all the
    /// same. What CI runs: the same verdicts, without counting every fixture a mutant breaks.
    pub until_caught: bool,
}

/// How many of a sweep's fixtures the command line checks with expiry unless told
/// otherwise: one in ten, but at least ten (or all of a smaller sweep).
pub fn default_expiry(count: usize) -> usize {
    count.div_ceil(10).max(count.min(10))
}

/// Which of a sweep's two passes a check belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    /// D=1, L=1, C=1, no expiry, the default properties.
    Faults,
    /// [`EXPIRY_PASS`].
    Expiry,
}

/// The expiry pass, in words: one re-encoded copy and the retention window
/// passing once (at any point of any order: with and without unresolved inputs waiting),
/// against the default properties but `convergence`. Expiry gives up duplicate recognition,
/// so an id reused with other content after the window is a new event and the end may
/// differ from the default order's (`models/retention-reused-id.toml`); every safety
/// property must still hold.
pub const EXPIRY_PASS: &str = "1 re-encoding, 1 expiry, every property but convergence";

/// The first fixture on which a policy broke a property.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Finding {
    /// The fixture's seed (`small(seed)` regenerates it).
    pub fixture_seed: u64,
    /// The property it broke (the expected one, for a mutant, when it broke several).
    pub property: String,
    /// The counterexample's steps, in domain terms.
    pub steps: Vec<String>,
    /// Where the regression fixture was written, with `trace_out`.
    pub fixture: Option<String>,
}

/// One policy over the whole sweep.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PolicySweep {
    /// The policy.
    pub policy: String,
    /// `pass` for SPEC, the catalogue's property for a mutant.
    pub expected: Expected,
    /// Fixtures checked in the first pass (fewer than the sweep's count for a mutant
    /// checked only until caught).
    pub fixtures: usize,
    /// For each violated property, on how many fixtures.
    pub violations: BTreeMap<String, usize>,
    /// The first finding (of the expected property, for a mutant).
    pub first: Option<Finding>,
    /// Of those, checked a second time with expiry.
    pub with_expiry: usize,
    /// States explored over all fixtures.
    pub states: usize,
    /// Seconds spent.
    pub seconds: f64,
    /// SPEC broke nothing, or the mutant was caught by its property.
    pub as_expected: bool,
}

/// A sweep's result.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SweepReport {
    /// Fixtures per policy.
    pub count: usize,
    /// The sweep's seed.
    pub seed: u64,
    /// Each policy's result.
    pub policies: Vec<PolicySweep>,
    /// Every policy as expected.
    pub as_expected: bool,
    /// Mutants were checked only until caught ([`SweepOptions::until_caught`]).
    #[serde(default)]
    pub until_caught: bool,
    /// Wall time.
    pub seconds: f64,
}

/// The seeds of a sweep's fixtures.
pub fn fixture_seeds(seed: u64, count: usize) -> Vec<u64> {
    let mut rng = SplitMix::new(seed);
    (0..count).map(|_| rng.next_u64() % 1_000_000_000).collect()
}

/// The model file a sweep fixture is checked with in each pass, reconciliation interleaved,
/// depth first: one duplicate, one lost ack and one crash; or [`EXPIRY_PASS`].
fn model_file(policy: PolicyName, expectation: Expectation, pass: Pass) -> ModelFile {
    let faults = pass == Pass::Faults;
    ModelFile {
        description: None,
        fixture: "(generated)".into(),
        duplicates: u8::from(faults),
        lost_acks: u8::from(faults),
        crashes: u8::from(faults),
        expiries: u8::from(!faults),
        reencodings: u8::from(!faults),
        reconciliation: Reconciliation::Interleaved,
        policy: policy.to_string(),
        strategy: Strategy::Dfs,
        threads: 1,
        state_limit: None,
        split: false,
        symmetry: true,
        merge_settled: true,
        merge_paused: true,
        sleep_sets: true,
        eager_redeliveries: true,
        per_delivery: None,
        properties: None,
        expect: match expectation {
            Expectation::Pass => "pass".into(),
            Expectation::Violates(property) => property.name().into(),
        },
    }
}

/// Runs the sweep.
pub fn run(options: &SweepOptions) -> Result<SweepReport, InputError> {
    let start = Instant::now();
    let seeds = fixture_seeds(options.seed, options.count);
    let mut scenarios = Vec::with_capacity(seeds.len());
    for &seed in &seeds {
        let raw = small(seed)?;
        let file = PathBuf::from(format!("sweep-{seed}.json"));
        scenarios.push((seed, Arc::new(Scenario::from_raw(&file, raw)?)));
    }
    let mut policies = Vec::new();
    let with_expiry = options.expiry.min(scenarios.len());
    let faults = scenarios.iter().map(|scenario| (Pass::Faults, scenario));
    let expiries = scenarios[..with_expiry]
        .iter()
        .map(|scenario| (Pass::Expiry, scenario));
    // Until caught, the short expiry pass goes first: it catches most mutants at once.
    let checks: Vec<(Pass, &(u64, Arc<Scenario>))> = if options.until_caught {
        expiries.chain(faults).collect()
    } else {
        faults.chain(expiries).collect()
    };
    let without_convergence: Properties = Properties::SPEC
        .iter()
        .filter(|&property| property != Property::Convergence)
        .collect();
    for &policy in &options.policies {
        let expectation = match policy.0 {
            Some(mutant) => Expectation::Violates(mutant.caught_by()),
            None => Expectation::Pass,
        };
        let policy_start = Instant::now();
        let mut result = PolicySweep {
            policy: policy.to_string(),
            expected: match expectation {
                Expectation::Pass => Expected::Pass,
                Expectation::Violates(property) => Expected::Violates(property.name().into()),
            },
            fixtures: 0,
            with_expiry: 0,
            violations: BTreeMap::new(),
            first: None,
            states: 0,
            seconds: 0.0,
            as_expected: false,
        };
        for &(pass, (seed, scenario)) in &checks {
            let caught = policy.0.is_some() && result.first.is_some();
            if options.until_caught && caught {
                break;
            }
            match pass {
                Pass::Faults => result.fixtures += 1,
                Pass::Expiry => result.with_expiry += 1,
            }
            // A mutant's property outside the pass's set (convergence with expiry) is
            // simply not looked for there.
            let (checked, file_expectation) = match pass {
                Pass::Faults => (Properties::SPEC, expectation),
                Pass::Expiry => match expectation {
                    Expectation::Violates(property) if !without_convergence.contains(property) => {
                        (without_convergence, Expectation::Pass)
                    }
                    expectation => (without_convergence, expectation),
                },
            };
            let suffix = if pass == Pass::Expiry { "-expiry" } else { "" };
            let mut file = model_file(policy, file_expectation, pass);
            if pass == Pass::Expiry {
                file.properties = Some(checked.iter().map(|p| p.name().to_owned()).collect());
            }
            let loaded = LoadedModel {
                path: PathBuf::from(format!("sweep-{policy}-{seed}{suffix}.toml")),
                file,
                scenario: Arc::clone(scenario),
                policy,
                expectation: file_expectation,
                checked,
                per_delivery: None,
            };
            let wanted = result.first.is_none();
            let report = check::run(
                &loaded,
                &CheckOptions {
                    trace_out: if wanted {
                        options.trace_out.clone()
                    } else {
                        None
                    },
                    progress: false,
                    ..CheckOptions::default()
                },
            )?;
            result.states += report.states;
            for name in &report.violated {
                *result.violations.entry(name.clone()).or_default() += 1;
            }
            let shown = match expectation {
                Expectation::Pass => report.violated.first(),
                Expectation::Violates(property) => {
                    report.violated.iter().find(|name| *name == property.name())
                }
            };
            if let (true, Some(name)) = (wanted, shown) {
                let trace = report
                    .properties
                    .iter()
                    .find(|property| &property.name == name)
                    .and_then(|property| property.trace.clone());
                result.first = Some(Finding {
                    fixture_seed: *seed,
                    property: name.clone(),
                    steps: trace.as_ref().map_or_else(Vec::new, |t| t.steps.clone()),
                    fixture: trace.and_then(|t| t.fixture),
                });
            }
        }
        result.as_expected = match expectation {
            Expectation::Pass => result.violations.is_empty(),
            Expectation::Violates(property) => result.violations.contains_key(property.name()),
        };
        result.seconds = policy_start.elapsed().as_secs_f64();
        policies.push(result);
    }
    let as_expected = policies.iter().all(|policy| policy.as_expected);
    Ok(SweepReport {
        count: options.count,
        seed: options.seed,
        policies,
        as_expected,
        until_caught: options.until_caught,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Renders a sweep for people.
pub fn render(report: &SweepReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "sweep of {} generated fixtures (seed {}), each checked with 1 duplicate, 1 lost ack, 1 crash, reconciliation interleaved; the first {} also with {EXPIRY_PASS}{}",
        report.count,
        report.seed,
        report.policies.first().map_or(0, |policy| policy.with_expiry),
        if report.until_caught {
            "; each mutant only until caught"
        } else {
            ""
        }
    );
    for policy in &report.policies {
        let broke: Vec<String> = policy
            .violations
            .iter()
            .map(|(name, count)| format!("{name} on {count}"))
            .collect();
        let verdict = match (policy.as_expected, &policy.expected) {
            (true, Expected::Pass) => "pass".to_owned(),
            (true, Expected::Violates(property)) => format!("caught by {property}"),
            (false, Expected::Pass) => "VIOLATED  <-- NOT AS EXPECTED".to_owned(),
            (false, Expected::Violates(property)) => {
                format!("NOT caught by {property}  <-- NOT AS EXPECTED")
            }
        };
        let _ = writeln!(
            out,
            "  {:<30} {verdict}; {} states, {:.2} s{}",
            policy.policy,
            policy.states,
            policy.seconds,
            if broke.is_empty() {
                String::new()
            } else {
                format!("; broke {}", broke.join(", "))
            }
        );
        if let Some(first) = &policy.first {
            let _ = writeln!(
                out,
                "    first: fixture seed {} breaks {} in {} steps{}",
                first.fixture_seed,
                first.property,
                first.steps.len(),
                first
                    .fixture
                    .as_ref()
                    .map_or_else(String::new, |path| format!(", written to {path}"))
            );
        }
    }
    let _ = writeln!(
        out,
        "sweep: {} in {:.1} s",
        if report.as_expected {
            "every policy as expected"
        } else {
            "NOT AS EXPECTED"
        },
        report.seconds
    );
    out
}

/// Where a sweep fixture would be written: for tests.
pub fn fixture_path(dir: &Path, policy: PolicyName, seed: u64, property: &str) -> PathBuf {
    dir.join(format!("sweep-{policy}-{seed}.{property}.json"))
}

/// The sweep as a JUnit suite: one case per policy, failing when it is not as expected.
pub fn junit_suite(report: &SweepReport) -> crate::harness::junit::ExtraSuite {
    crate::harness::junit::ExtraSuite {
        skipped: Vec::new(),
        name: format!("sweep of {} fixtures (seed {})", report.count, report.seed),
        cases: report
            .policies
            .iter()
            .map(|policy| {
                let failure = (!policy.as_expected).then(|| match &policy.expected {
                    Expected::Pass => format!(
                        "{} broke {:?}; first: {:?}",
                        policy.policy, policy.violations, policy.first
                    ),
                    Expected::Violates(property) => {
                        format!("{} was not caught by {property}", policy.policy)
                    }
                });
                (policy.policy.clone(), failure)
            })
            .collect(),
        seconds: report.seconds,
    }
}
