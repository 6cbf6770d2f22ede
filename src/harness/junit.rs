//! JUnit XML for CI viewers: one test suite per model, one test case per property (a
//! violated property is a failure whose message is its shortest trace in domain terms), and
//! one `verdict` case per model that fails only when the result is not what the model file
//! expected.

use super::report::{Kind, ModelReport, Status};
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use std::time::Duration;

/// One extra suite, for checks that are not a model (the sweep).
#[derive(Clone, Debug)]
pub struct ExtraSuite {
    /// The suite's name.
    pub name: String,
    /// Its cases: name, `None` for a pass or `Some(message)` for a failure.
    pub cases: Vec<(String, Option<String>)>,
    /// Cases that were not run or could not be judged: name and why (JUnit `skipped`).
    pub skipped: Vec<(String, String)>,
    /// Seconds it took.
    pub seconds: f64,
}

/// The JUnit document for these model reports (and extra suites).
pub fn document(reports: &[ModelReport], extra: &[ExtraSuite]) -> String {
    let mut report = Report::new("arrival check");
    for model in reports {
        let mut suite = TestSuite::new(model.model.clone());
        suite.set_time(Duration::from_secs_f64(model.seconds.max(0.0)));
        for property in model.properties.iter().filter(|p| p.kind == Kind::Always) {
            let status = match property.status {
                Status::Holds => TestCaseStatus::success(),
                Status::Violated => {
                    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    let expected = model.expected == property.name.as_str();
                    let mut message = format!(
                        "{} violated{}",
                        property.name,
                        if expected {
                            " (the model file expects this violation)"
                        } else {
                            ""
                        }
                    );
                    let mut description = String::new();
                    if let Some(detail) = &property.detail {
                        message.push_str(": ");
                        message.push_str(detail);
                    }
                    if let Some(trace) = &property.trace {
                        let steps: Vec<String> = trace
                            .steps
                            .iter()
                            .enumerate()
                            .map(|(index, step)| format!("{}. {step}", index + 1))
                            .collect();
                        message.push_str(&format!(
                            " in {} steps: {}",
                            steps.len(),
                            steps.join("; ")
                        ));
                        description = steps.join("\n") + "\n\n" + &trace.table;
                        if let Some(fixture) = &trace.fixture {
                            description.push_str(&format!("\nreplayable fixture: {fixture}\n"));
                        }
                    }
                    status.set_type("violated").set_message(message);
                    if !description.is_empty() {
                        status.set_description(description);
                    }
                    status
                }
                other => {
                    let mut status = TestCaseStatus::skipped();
                    status.set_message(match other {
                        Status::Unknown if model.merged.is_some() => "not decided: a shard is missing or stopped at its state limit".to_owned(),
                        Status::Unknown => "not decided: the run stopped at its state limit".to_owned(),
                        Status::Sampled => "no violation in the sampled walks; simulation proves nothing about the behaviours no walk visited".to_owned(),
                        _ => format!("{}: {other}", property.name),
                    });
                    status
                }
            };
            let mut case = TestCase::new(property.name.clone(), status);
            case.set_classname(model.model.clone());
            suite.add_test_case(case);
        }
        let verdict = if model.as_expected {
            TestCaseStatus::success()
        } else {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            status.set_type("not as expected").set_message(format!(
                "verdict {} with {} violated, but the model file expects {}",
                model.verdict,
                if model.violated.is_empty() {
                    "nothing".to_owned()
                } else {
                    model.violated.join(", ")
                },
                model.expected
            ));
            status
        };
        let mut case = TestCase::new("verdict", verdict);
        case.set_classname(model.model.clone());
        suite.add_test_case(case);
        report.add_test_suite(suite);
    }
    add_extra(&mut report, extra);
    report.to_string().expect("JUnit reports serialise")
}

/// A JUnit document of suites that are not models (the drills): `name` is the report's.
pub fn suites_document(name: &str, suites: &[ExtraSuite]) -> String {
    let mut report = Report::new(name);
    add_extra(&mut report, suites);
    report.to_string().expect("JUnit reports serialise")
}

/// Writes one suite (a drill's) as a JUnit document to `file`.
pub fn write_suite(file: &std::path::Path, suite: &ExtraSuite) -> Result<(), super::InputError> {
    let xml = suites_document("arrival drill", std::slice::from_ref(suite));
    std::fs::write(file, xml).map_err(|source| super::InputError::Write {
        file: file.to_owned(),
        source,
    })
}

fn add_extra(report: &mut Report, extra: &[ExtraSuite]) {
    for extra in extra {
        let mut suite = TestSuite::new(extra.name.clone());
        suite.set_time(Duration::from_secs_f64(extra.seconds.max(0.0)));
        for (name, failure) in &extra.cases {
            let status = match failure {
                None => TestCaseStatus::success(),
                Some(message) => {
                    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    status
                        .set_type("not as expected")
                        .set_message(message.clone());
                    status
                }
            };
            let mut case = TestCase::new(name.clone(), status);
            case.set_classname(extra.name.clone());
            suite.add_test_case(case);
        }
        for (name, why) in &extra.skipped {
            let mut status = TestCaseStatus::skipped();
            status.set_message(why.clone());
            let mut case = TestCase::new(name.clone(), status);
            case.set_classname(extra.name.clone());
            suite.add_test_case(case);
        }
        report.add_test_suite(suite);
    }
}
