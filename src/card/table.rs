//! Text tables for people: a replay report as a step table, then the end state.

use crate::card::replay::{CardReport, Report, StepReport};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write;

/// `{label:Map,stage:ready}`: a card state, short.
fn state_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Object(map) => {
            let fields: Vec<String> = map
                .iter()
                .map(|(key, value)| format!("{key}:{}", state_text(value)))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        other => other.to_string(),
    }
}

/// `card-7 v12 {label:Map,stage:ready}; card-8 v3 {...}`.
pub fn cards_text(cards: &BTreeMap<String, CardReport>) -> String {
    let cards: Vec<String> = cards
        .iter()
        .map(|(name, card)| format!("{name} v{} {}", card.version, state_text(&card.state)))
        .collect();
    cards.join("; ")
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(",")
    }
}

/// The cards of a step's report.
fn step_cards(step: &StepReport) -> &BTreeMap<String, CardReport> {
    match step {
        StepReport::Deliver { cards, .. }
        | StepReport::Reconcile { cards, .. }
        | StepReport::Expire { cards, .. } => cards,
    }
}

/// Splits `text` into lines of at most `width` characters, breaking after `,`, `;` or a
/// space where it can.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(8);
    let mut lines = Vec::new();
    let mut rest: Vec<char> = text.chars().collect();
    while rest.len() > width {
        let cut = rest[..width]
            .iter()
            .rposition(|&c| c == ',' || c == ';' || c == ' ')
            .map_or(width, |at| at + 1);
        let line: String = rest[..cut].iter().collect();
        lines.push(line.trim_end().to_owned());
        rest = rest[cut..].to_vec();
        while rest.first() == Some(&' ') {
            rest.remove(0);
        }
    }
    lines.push(rest.into_iter().collect());
    lines
}

/// The table in at most [`NARROW`] columns: every column but the last (the cards after the
/// step) capped and wrapped, then the cards the step changed on a line under it.
fn narrow(report: &Report, rows: &[Vec<String>]) -> String {
    // step, delivery, event, card, version, decision, ack, paused, held.
    const CAPS: [usize; 9] = [4, 11, 8, 9, 9, 26, 15, 13, 15];
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row[..row.len() - 1].to_vec())
        .collect();
    let widths: Vec<usize> = (0..CAPS.len())
        .map(|column| {
            let natural = table
                .iter()
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0);
            natural.min(CAPS[column])
        })
        .collect();
    let mut out = String::new();
    let mut previous: Option<&BTreeMap<String, CardReport>> = None;
    for (index, row) in table.iter().enumerate() {
        let cells: Vec<Vec<String>> = row
            .iter()
            .zip(&widths)
            .map(|(cell, &width)| wrap(cell, width))
            .collect();
        let height = cells.iter().map(Vec::len).max().unwrap_or(1);
        for line in 0..height {
            let mut text = String::new();
            for (column, cell) in cells.iter().enumerate() {
                let part = cell.get(line).map_or("", String::as_str);
                let _ = write!(text, "{part:<width$}  ", width = widths[column]);
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
        // The header row has no step; a step's changed cards go under it.
        if index == 0 {
            continue;
        }
        let cards = step_cards(&report.steps[index - 1]);
        let changed: BTreeMap<String, CardReport> = cards
            .iter()
            .filter(|(name, card)| previous.is_none_or(|before| before.get(*name) != Some(*card)))
            .map(|(name, card)| (name.clone(), card.clone()))
            .collect();
        previous = Some(cards);
        if !changed.is_empty() {
            let indent = widths[0] + 2;
            for line in wrap(&format!("-> {}", cards_text(&changed)), NARROW - indent) {
                let _ = writeln!(out, "{:indent$}{line}", "");
            }
        }
    }
    out
}

/// Renders rows as aligned columns.
fn columns(rows: &[Vec<String>]) -> String {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..width)
        .map(|column| {
            rows.iter()
                .filter_map(|row| row.get(column))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            if column + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[column]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The whole report as text that fits in 120 columns: long cells wrap inside their column,
/// and the cards a step changed go on a line of their own under it.
pub fn render(report: &Report) -> String {
    layout(report, false)
}

/// The whole report as text with every cell on one line and every card after every step
/// (`replay --wide`).
pub fn render_wide(report: &Report) -> String {
    layout(report, true)
}

/// The widest a narrow table gets.
pub const NARROW: usize = 120;

fn layout(report: &Report, wide: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "fixture {} (policy {})", report.fixture, report.policy);
    let mut rows = vec![[
        "step",
        "delivery",
        "event",
        "card",
        "version",
        "decision",
        "ack",
        "paused",
        "held",
        "cards after",
    ]
    .map(String::from)
    .to_vec()];
    for (index, step) in report.steps.iter().enumerate() {
        let row = match step {
            StepReport::Deliver {
                delivery,
                event_id,
                object_id,
                version,
                decision,
                ack,
                ack_lost,
                fault,
                original_decision,
                cards,
                paused,
                held,
            } => {
                let decision = match (decision, original_decision) {
                    (Some(decision), Some(original)) => format!("{decision} of {original}"),
                    (Some(decision), None) => decision.clone(),
                    (None, _) => "crash before record".into(),
                };
                let ack = match (ack, *ack_lost, fault.as_deref()) {
                    (Some(ack), true, _) => format!("{ack} (lost)"),
                    (Some(ack), false, Some("duplicate")) => format!("{ack} (network copy)"),
                    (Some(ack), false, _) => ack.clone(),
                    (None, ..) => "none".into(),
                };
                let delivery = match fault.as_deref() {
                    Some("duplicate") => format!("#{delivery} (copy)"),
                    _ => format!("#{delivery}"),
                };
                vec![
                    (index + 1).to_string(),
                    delivery,
                    event_id.clone().unwrap_or_else(|| "(none)".into()),
                    object_id.clone().unwrap_or_else(|| "(none)".into()),
                    version
                        .as_ref()
                        .map_or_else(|| "(missing)".into(), Value::to_string),
                    decision,
                    ack,
                    list(paused),
                    list(held),
                    cards_text(cards),
                ]
            }
            StepReport::Reconcile {
                object_id,
                outcome,
                re_evaluated,
                resolved,
                superseded,
                cards,
                paused,
                held,
            } => {
                let mut settled: Vec<String> = re_evaluated
                    .iter()
                    .map(|again| format!("{} -> {}", again.event_id, again.decision))
                    .collect();
                settled.extend(resolved.iter().map(|name| format!("{name} resolved")));
                settled.extend(superseded.iter().map(|name| format!("{name} superseded")));
                let outcome = if settled.is_empty() {
                    outcome.clone()
                } else {
                    format!("{outcome}; {}", settled.join(", "))
                };
                vec![
                    (index + 1).to_string(),
                    "reconcile".into(),
                    "-".into(),
                    object_id.clone(),
                    "-".into(),
                    outcome,
                    "-".into(),
                    list(paused),
                    list(held),
                    cards_text(cards),
                ]
            }
            StepReport::Expire {
                forgotten,
                cards,
                paused,
                held,
            } => vec![
                (index + 1).to_string(),
                "expire".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                format!("retention passed; forgot {}", list(forgotten)),
                "-".into(),
                list(paused),
                list(held),
                cards_text(cards),
            ],
        };
        rows.push(row);
    }
    if wide {
        out.push_str(&columns(&rows));
    } else {
        out.push_str(&narrow(report, &rows));
    }
    let _ = writeln!(out, "\nfinal: {}", cards_text(&report.final_cards));
    let _ = writeln!(out, "paused: {}", list(&report.paused));
    let _ = writeln!(
        out,
        "replacements: {} event-driven + {} authoritative",
        report.replacements.event, report.replacements.authority
    );
    if report.unresolved_detail.is_empty() {
        let _ = writeln!(out, "unresolved: none");
    } else {
        let _ = writeln!(out, "unresolved:");
        for input in &report.unresolved_detail {
            let _ = writeln!(
                out,
                "  {}: {} ({})",
                input.input, input.decision, input.standing
            );
        }
    }
    for warning in &report.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    for violation in &report.violations {
        let _ = writeln!(
            out,
            "VIOLATED {} at step {}{}",
            violation.property,
            violation.step,
            violation
                .message
                .as_ref()
                .map_or_else(String::new, |message| format!(": {message}"))
        );
    }
    match &report.expect {
        None => {
            let _ = writeln!(out, "expect: none in the fixture");
        }
        Some(check) if check.holds => {
            let _ = writeln!(out, "expect: holds");
        }
        Some(check) => {
            let _ = writeln!(out, "expect: DIFFERS");
            for line in &check.differences {
                let _ = writeln!(out, "  {line}");
            }
        }
    }
    out
}
