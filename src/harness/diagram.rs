//! Counterexamples as sequence diagrams: lanes for the parties, one message (or note) per
//! step with what changed beside it, and the violating step marked. Written as Mermaid
//! `sequenceDiagram` text and as a self-contained SVG drawn here (no browser needed).

use std::fmt::Write;

/// One step of a diagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Lane index it comes from.
    pub from: usize,
    /// Lane index it goes to (equal to `from` for a note on one lane).
    pub to: usize,
    /// What happens, in domain terms.
    pub label: String,
    /// Whether the message never arrives (a lost acknowledgement or answer).
    pub lost: bool,
    /// The state that changed, shown beside the step (`None`: nothing changed).
    pub changed: Option<String>,
}

/// A sequence diagram of one counterexample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagram {
    /// The title.
    pub title: String,
    /// The lanes, left to right.
    pub lanes: Vec<String>,
    /// Steps, each one or more messages (index into `steps` is the trace's step number - 1).
    pub steps: Vec<Vec<Message>>,
    /// The 1-based step that broke the property, and its name.
    pub violation: Option<(usize, String)>,
}

fn mermaid_text(text: &str) -> String {
    // Mermaid ends a message at a newline and treats `;` and `#` specially.
    text.replace('\n', " ")
        .replace(';', ",")
        .replace('#', "no. ")
        .replace('"', "")
}

fn lane_id(index: usize) -> String {
    format!("L{index}")
}

impl Diagram {
    /// Mermaid `sequenceDiagram` text.
    pub fn mermaid(&self) -> String {
        let mut out = String::from("sequenceDiagram\n");
        let _ = writeln!(out, "    title {}", mermaid_text(&self.title));
        for (index, lane) in self.lanes.iter().enumerate() {
            let _ = writeln!(
                out,
                "    participant {} as {}",
                lane_id(index),
                mermaid_text(lane)
            );
        }
        for (number, messages) in self.steps.iter().enumerate() {
            let step = number + 1;
            let violating = self.violation.as_ref().filter(|(at, _)| *at == step);
            for message in messages {
                let label = format!("{step}. {}", mermaid_text(&message.label));
                if message.from == message.to {
                    let _ = writeln!(out, "    Note over {}: {label}", lane_id(message.from));
                } else {
                    let arrow = if message.lost { "-x" } else { "->>" };
                    let _ = writeln!(
                        out,
                        "    {}{arrow}{}: {label}",
                        lane_id(message.from),
                        lane_id(message.to)
                    );
                }
                if let Some(changed) = &message.changed {
                    let _ = writeln!(
                        out,
                        "    Note right of {}: {}",
                        lane_id(message.to),
                        mermaid_text(changed)
                    );
                }
            }
            if let Some((_, property)) = violating {
                let last = self.lanes.len().saturating_sub(1);
                let _ = writeln!(
                    out,
                    "    Note over {},{}: VIOLATED {} at step {step}",
                    lane_id(0),
                    lane_id(last),
                    mermaid_text(property)
                );
            }
        }
        out
    }

    /// A self-contained SVG picture of the diagram.
    pub fn svg(&self) -> String {
        const LANE: f64 = 190.0;
        const LEFT: f64 = 110.0;
        const TOP: f64 = 70.0;
        const ROW: f64 = 34.0;
        let rows: usize =
            self.steps.iter().map(Vec::len).sum::<usize>() + usize::from(self.violation.is_some());
        let width = LEFT * 2.0 + LANE * (self.lanes.len().max(1) - 1) as f64 + 420.0;
        let height = TOP + ROW * (rows as f64 + 2.0);
        let x = |lane: usize| LEFT + LANE * lane as f64;
        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(
            out,
            r##"<defs><marker id="arrow" markerWidth="10" markerHeight="8" refX="9" refY="4" orient="auto"><path d="M0,0 L10,4 L0,8 z" fill="#333"/></marker></defs>"##
        );
        let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            out,
            r#"<text x="10" y="20" font-size="14" font-weight="bold">{}</text>"#,
            escape(&self.title)
        );
        for (index, lane) in self.lanes.iter().enumerate() {
            let _ = writeln!(
                out,
                r##"<rect x="{:.0}" y="32" width="150" height="24" rx="4" fill="#eef" stroke="#447"/><text x="{:.0}" y="48" text-anchor="middle">{}</text>"##,
                x(index) - 75.0,
                x(index),
                escape(lane)
            );
            let _ = writeln!(
                out,
                r##"<line x1="{0:.0}" y1="56" x2="{0:.0}" y2="{1:.0}" stroke="#999" stroke-dasharray="4 4"/>"##,
                x(index),
                height - 10.0
            );
        }
        let mut y = TOP + ROW * 0.5;
        for (number, messages) in self.steps.iter().enumerate() {
            let step = number + 1;
            let violating = self.violation.as_ref().is_some_and(|(at, _)| *at == step);
            let color = if violating { "#c00" } else { "#333" };
            for message in messages {
                let label = format!("{step}. {}", message.label);
                if message.from == message.to {
                    let _ = writeln!(
                        out,
                        r##"<rect x="{:.0}" y="{:.0}" width="170" height="22" fill="#ffd" stroke="{color}"/><text x="{:.0}" y="{:.0}" fill="{color}">{}</text>"##,
                        x(message.from) - 85.0,
                        y - 15.0,
                        x(message.from) - 80.0,
                        y,
                        escape(&label)
                    );
                } else {
                    let dash = if message.lost {
                        r#" stroke-dasharray="6 4""#
                    } else {
                        ""
                    };
                    let end = if message.lost {
                        (x(message.from) + x(message.to)) / 2.0
                    } else {
                        x(message.to)
                    };
                    let _ = writeln!(
                        out,
                        r#"<line x1="{:.0}" y1="{y:.0}" x2="{end:.0}" y2="{y:.0}" stroke="{color}"{dash} marker-end="url(#arrow)"/>"#,
                        x(message.from)
                    );
                    let _ = writeln!(
                        out,
                        r#"<text x="{:.0}" y="{:.0}" fill="{color}">{}{}</text>"#,
                        x(message.from.min(message.to)) + 6.0,
                        y - 5.0,
                        escape(&label),
                        if message.lost { " (lost)" } else { "" }
                    );
                }
                y += ROW;
                if let Some(changed) = &message.changed {
                    let right = LEFT + LANE * (self.lanes.len().max(1) - 1) as f64 + 30.0;
                    let _ = writeln!(
                        out,
                        r##"<text x="{right:.0}" y="{:.0}" fill="#262">{}</text>"##,
                        y - ROW + 4.0,
                        escape(changed)
                    );
                }
            }
            if violating {
                if let Some((_, property)) = &self.violation {
                    let _ = writeln!(
                        out,
                        r##"<text x="10" y="{y:.0}" fill="#c00" font-weight="bold">VIOLATED {} at step {step}</text>"##,
                        escape(property)
                    );
                    y += ROW;
                }
            }
        }
        out.push_str("</svg>\n");
        out
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Diagram {
        Diagram {
            title: "a <trace>".into(),
            lanes: vec!["sender".into(), "receiver".into()],
            steps: vec![
                vec![Message {
                    from: 0,
                    to: 1,
                    label: "deliver #1 e-1".into(),
                    lost: false,
                    changed: Some("card-7 v12".into()),
                }],
                vec![Message {
                    from: 1,
                    to: 0,
                    label: "ack applied".into(),
                    lost: true,
                    changed: None,
                }],
            ],
            violation: Some((2, "convergence".into())),
        }
    }

    #[test]
    fn mermaid_has_lanes_messages_changes_and_the_violation() {
        let text = sample().mermaid();
        assert!(text.starts_with("sequenceDiagram\n"));
        assert!(text.contains("participant L0 as sender"));
        assert!(text.contains("L0->>L1: 1. deliver no. 1 e-1"), "{text}");
        assert!(text.contains("L1-xL0: 2. ack applied"), "{text}");
        assert!(text.contains("Note right of L1: card-7 v12"));
        assert!(text.contains("VIOLATED convergence at step 2"));
    }

    #[test]
    fn svg_is_well_formed_and_escaped() {
        let svg = sample().svg();
        assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a &lt;trace&gt;"));
        assert!(svg.contains("VIOLATED convergence at step 2"));
        assert_eq!(
            svg.matches("<line").count(),
            2 + 2,
            "two lifelines, two arrows"
        );
    }
}
