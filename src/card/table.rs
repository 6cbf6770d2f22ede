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

/// The whole report as text.
pub fn render(report: &Report) -> String {
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
    out.push_str(&columns(&rows));
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
            "VIOLATED {} at step {}",
            violation.property, violation.step
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
