//! The store behind the JSON-lines conformance protocol (`arrival store stdio`), so that
//! `arrival conform` can drive the store like any receiver it did not write: `start`
//! opens (and on a fresh start empties and seeds) a SQLite file in the data directory,
//! `deliver` is one transaction whose reply is written after the commit (before it, for
//! the `ack-before-commit` mutant), `reconcile` and `read` map to the store's own calls.

use crate::store::{Acknowledgement, AuthoritySnapshot, DbUrl, Incoming, Store, StoreMutant};
use serde_json::{json, Value};
use std::io::{BufRead, Write};

/// Why the loop stopped: the input ended, or the store failed (the process should exit
/// non-zero; the conformance run sees a crash).
pub type Served = Result<(), String>;

/// Answers requests from `input` on `output` until the input ends.
pub fn serve(input: impl BufRead, output: &mut dyn Write, mutant: Option<StoreMutant>) -> Served {
    let mut store: Option<Store> = None;
    for line in input.lines() {
        let line = line.map_err(|error| error.to_string())?;
        if line.trim().is_empty() {
            continue;
        }
        let request: Value = match serde_json::from_str(&line) {
            Ok(value) => value,
            Err(error) => {
                reply(
                    output,
                    &json!({"type": "error", "code": 12, "text": error.to_string()}),
                )?;
                continue;
            }
        };
        let id = request.get("msg_id").cloned().unwrap_or(Value::Null);
        let kind = request.get("type").and_then(Value::as_str).unwrap_or("");
        let answer = match (kind, store.as_mut()) {
            ("start", _) => start(&request).map(|opened| {
                store = Some(opened);
                json!({"type": "start_ok"})
            }),
            ("deliver", Some(open)) => {
                deliver(open, &request, mutant, output, &id)?;
                continue;
            }
            ("reconcile", Some(open)) => reconcile(open, &request),
            ("read", Some(open)) => read(open),
            ("expire", Some(_)) => Ok(error(10, "the store forgets nothing by request")),
            (_, None) => Ok(error(12, "no `start` yet")),
            (other, Some(_)) => Ok(error(10, &format!("unknown request type `{other}`"))),
        };
        let mut answer = answer?;
        answer["in_reply_to"] = id;
        reply(output, &answer)?;
    }
    Ok(())
}

fn error(code: i64, text: &str) -> Value {
    json!({"type": "error", "code": code, "text": text})
}

fn reply(output: &mut dyn Write, value: &Value) -> Served {
    let mut line = serde_json::to_vec(value).expect("replies serialise");
    line.push(b'\n');
    output
        .write_all(&line)
        .and_then(|()| output.flush())
        .map_err(|error| error.to_string())
}

fn start(request: &Value) -> Result<Store, String> {
    let dir = request
        .get("data_dir")
        .and_then(Value::as_str)
        .ok_or("`start` without `data_dir`")?;
    let url = DbUrl::Sqlite(std::path::Path::new(dir).join("cards.db"));
    let fresh = request
        .get("fresh")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut store = Store::open(&url).map_err(|error| error.to_string())?;
    if fresh {
        store.reset().map_err(|error| error.to_string())?;
    }
    store.migrate().map_err(|error| error.to_string())?;
    if fresh {
        let cards: Vec<(String, u64, Value)> = request
            .get("initial")
            .and_then(Value::as_object)
            .map(|cards| {
                cards
                    .iter()
                    .map(|(name, card)| {
                        let version = card.get("version").and_then(Value::as_u64).unwrap_or(0);
                        let state = card.get("state").cloned().unwrap_or(json!({}));
                        (name.clone(), version, state)
                    })
                    .collect()
            })
            .unwrap_or_default();
        store.seed(&cards).map_err(|error| error.to_string())?;
    }
    Ok(store)
}

fn deliver(
    store: &mut Store,
    request: &Value,
    mutant: Option<StoreMutant>,
    output: &mut dyn Write,
    id: &Value,
) -> Served {
    let body = request.get("body").and_then(Value::as_str).unwrap_or("");
    let event = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()));
    let incoming = Incoming {
        delivery: request.get("delivery").and_then(Value::as_u64).unwrap_or(0) as u32,
        numbered: true,
        received_at: None,
        event,
    };
    let mut failed = None;
    let mut emit = |ack: &Acknowledgement| {
        let answer = if ack.is_rejected() {
            json!({"type": "error", "in_reply_to": id, "code": 12,
                   "text": ack.reason.clone().unwrap_or_default()})
        } else {
            json!({"type": "deliver_ok", "in_reply_to": id, "ack": ack.ack,
                   "decision": ack.decision})
        };
        if let Err(error) = reply(output, &answer) {
            failed = Some(error);
        }
    };
    let result = match mutant {
        None => store.deliver(&incoming, &mut emit).map(|_| ()),
        Some(mutant) => {
            crate::store::mutants::deliver_batch(store, mutant, &[incoming], &mut emit).map(|_| ())
        }
    };
    if let Some(error) = failed {
        return Err(error);
    }
    result.map_err(|error| error.to_string())
}

fn reconcile(store: &mut Store, request: &Value) -> Result<Value, String> {
    let snapshot = request.get("snapshot").cloned().unwrap_or(Value::Null);
    let snapshot: AuthoritySnapshot = match serde_json::from_value(snapshot) {
        Ok(snapshot) => snapshot,
        Err(error) => return Ok(error_value(12, &error.to_string())),
    };
    let report = store
        .reconcile(&snapshot, true)
        .map_err(|error| error.to_string())?;
    Ok(match report {
        Some(report) => json!({"type": "reconcile_ok", "outcome": report.outcome}),
        None => json!({"type": "reconcile_ok", "outcome": null}),
    })
}

fn error_value(code: i64, text: &str) -> Value {
    error(code, text)
}

fn read(store: &mut Store) -> Result<Value, String> {
    let report = store.report().map_err(|error| error.to_string())?;
    Ok(json!({
        "type": "read_ok",
        "cards": report.final_cards,
        "paused": report.paused,
        "unresolved": report.unresolved,
    }))
}
