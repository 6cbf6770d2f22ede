//! A facts replay [`Report`] as a text table for people (at most 120 columns): one row per
//! step, then the end state and the verdict.

use super::replay::{EndReport, Report, StepReport};
use super::world::{Decision, Read};
use std::fmt::Write;

/// The columns' headings.
const HEAD: [&str; 9] = [
    "#", "step", "HTTP", "entry", "inbox", "ack", "pend", "facts", "ready",
];

/// The columns' widths, in characters.
const WIDTH: [usize; 9] = [3, 29, 29, 5, 21, 3, 4, 5, 5];

/// The report as a table for people (at most 120 columns), then the end and the verdict.
pub fn render_table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "facts replay: {} ({})", report.name, report.fixture);
    out.push_str(&row(HEAD.map(String::from)));
    for step in &report.steps {
        out.push_str(&row(step_cells(report, step)));
    }
    let _ = writeln!(out);
    end_lines(&mut out, &report.end);
    verdict_lines(&mut out, report);
    out
}

/// One line of the table: each cell cut to its column's width and padded, the last one
/// as it is, trailing blanks trimmed.
fn row(cells: [String; 9]) -> String {
    let mut line = String::new();
    for (column, cell) in cells.iter().enumerate() {
        let cell = fit(cell, WIDTH[column]);
        if column + 1 == cells.len() {
            line.push_str(&cell);
        } else {
            let _ = write!(line, "{cell:<width$}  ", width = WIDTH[column]);
        }
    }
    line.trim_end().to_owned() + "\n"
}

/// A step's cells, in [`HEAD`] order.
fn step_cells(report: &Report, step: &StepReport) -> [String; 9] {
    let http = step.response.map_or("-".into(), |response| {
        format!("{} {}", response.status(), response.reason())
    });
    let ack = match step.acknowledged {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    };
    let ready = if report.end.ready.len() == 1 {
        if step.ready.is_empty() { "no" } else { "yes" }.to_owned()
    } else {
        format!("{}/{}", step.ready.len(), report.end.ready.len())
    };
    let what = match &step.note {
        Some(note) if step.decision.is_none() && step.response.is_none() => note.clone(),
        _ => decision_text(step),
    };
    [
        step.index.to_string(),
        step.step_label.clone(),
        http,
        step.entry.map_or("-".into(), |entry| entry.to_string()),
        what,
        ack.to_owned(),
        step.pending.to_string(),
        step.facts.to_string(),
        ready,
    ]
}

/// The inbox column: the consumer's decision and how it got the entry.
fn decision_text(step: &StepReport) -> String {
    let read = match &step.read {
        Some(Read::OwnPending) => " (pending)",
        Some(Read::Claimed { .. }) => " (claimed)",
        _ => "",
    };
    match &step.decision {
        Some(Decision::Verdict(verdict)) => format!("{}{read}", verdict.as_str()),
        Some(Decision::Retry { .. }) => format!("retry{read}"),
        Some(Decision::DeadLetter { .. }) => format!("dead letter{read}"),
        Some(Decision::Dropped { .. }) => format!("dropped{read}"),
        None if step.crash.is_some() => format!("none{read}"),
        None => "-".into(),
    }
}

/// The end state: facts, delivery counters, READY, open conflicts, pending entries, the
/// dead-letter stream, unsettled entries.
fn end_lines(out: &mut String, end: &EndReport) {
    let facts: Vec<String> = end
        .facts
        .iter()
        .map(|(source, id)| format!("{source}/{id}"))
        .collect();
    let ready: Vec<String> = end
        .ready
        .iter()
        .map(|(label, ready)| format!("{label}={}", if *ready { "READY" } else { "not ready" }))
        .collect();
    let _ = writeln!(out, "facts:        {}", list(&facts));
    let _ = writeln!(
        out,
        "deliveries:   {} duplicate, {} conflict, {} late mismatch",
        end.duplicates, end.conflicts, end.late_mismatches
    );
    let _ = writeln!(out, "ready:        {}", list(&ready));
    if !end.open_conflicts.is_empty() {
        let _ = writeln!(out, "conflicts:    {}", end.open_conflicts.join(", "));
    }
    let history: Vec<String> = end
        .ready_history
        .iter()
        .map(|change| {
            let cause = change
                .entry
                .map_or_else(String::new, |entry| format!(" by entry {entry}"));
            let word = if change.ready { "READY" } else { "not ready" };
            format!("step {} {} {word}{cause}", change.step, change.application)
        })
        .collect();
    for (index, change) in history.iter().enumerate() {
        let head = if index == 0 { "ready history:" } else { "" };
        let _ = writeln!(out, "{head:<15}{change}");
    }
    let parked: Vec<String> = end
        .parked
        .iter()
        .map(|parked| {
            format!(
                "entry {} {} ({})",
                parked.entry, parked.state, parked.identity
            )
        })
        .collect();
    if !parked.is_empty() {
        let _ = writeln!(out, "parked:       {}", parked.join(", "));
    }
    let dead: Vec<String> = end
        .dead_letter
        .iter()
        .map(|dead| {
            let identity = dead.identity.as_deref().unwrap_or("no identity");
            let text = format!(
                "entry {} {} after {} deliveries, {identity} ({})",
                dead.entry,
                dead.category.as_str(),
                dead.deliveries,
                dead.reason
            );
            fit(&text, 100)
        })
        .collect();
    let _ = writeln!(out, "pending:      {}", end.pending);
    let _ = writeln!(out, "dead letter:  {}", list(&dead));
    if !end.unsettled.is_empty() {
        let ids: Vec<String> = end.unsettled.iter().map(u32::to_string).collect();
        let _ = writeln!(
            out,
            "unsettled:    entries {} (202 without a verdict)",
            ids.join(", ")
        );
    }
}

/// The verdict: stale READY marks, the property broken, how the end compares with
/// `expect`.
fn verdict_lines(out: &mut String, report: &Report) {
    for label in &report.stale_ready {
        let _ = writeln!(out, "STALE READY:  {label}");
    }
    for violation in &report.violations {
        let _ = writeln!(
            out,
            "VIOLATED:     {} at step {}",
            violation.property, violation.step
        );
    }
    if !report.expect_checked {
        let _ = writeln!(out, "expect:       none in the fixture");
    } else if report.differences.is_empty() {
        let _ = writeln!(out, "expect:       holds");
    } else {
        let _ = writeln!(out, "expect:       DOES NOT HOLD");
        for difference in &report.differences {
            let _ = writeln!(out, "  - {difference}");
        }
    }
}

/// Cuts `text` to `width` characters, marking a cut with `~`.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_owned()
    } else {
        let kept: String = text.chars().take(width.saturating_sub(1)).collect();
        kept + "~"
    }
}

/// `items` joined by commas, or `-`.
fn list(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(", ")
    }
}
