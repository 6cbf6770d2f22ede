//! The row codec: values to and from database parameters and columns, and the audit row.

use crate::card::receiver::{Decision, Standing};
use crate::store::{DbError, Param, Val};
use serde_json::Value;
use sha2::{Digest, Sha256};

pub(super) fn corrupt(what: impl Into<String>) -> DbError {
    DbError {
        message: format!("corrupt store: {}", what.into()),
        retry: false,
        unique: false,
    }
}

/// The sha-256 of a canonical text, hex: the unique key of an envelope under its event id.
pub fn content_hash(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

pub(super) fn int(value: i64) -> Param {
    Param::Int(Some(value))
}

pub(super) fn text(value: impl Into<String>) -> Param {
    Param::Text(Some(value.into()))
}

pub(super) fn opt_text(value: Option<impl Into<String>>) -> Param {
    Param::Text(value.map(Into::into))
}

/// Versions are u64; the column is a signed 64-bit integer holding the same bits.
pub(super) fn version_param(version: u64) -> Param {
    int(version as i64)
}

pub(super) fn version_of(value: &Val) -> Result<u64, DbError> {
    value
        .int()
        .map(|bits| bits as u64)
        .ok_or_else(|| corrupt("a version is not an integer"))
}

pub(super) fn text_of(value: &Val) -> Result<&str, DbError> {
    value
        .text()
        .ok_or_else(|| corrupt("a text column is not a text"))
}

/// The name of a standing in the database.
pub fn standing_name(standing: Standing) -> &'static str {
    match standing {
        Standing::Settled => "settled",
        Standing::Held => "held",
        Standing::Resolved => "resolved",
        Standing::Superseded => "superseded",
    }
}

pub(super) fn standing_of(name: &str) -> Result<Standing, DbError> {
    Ok(match name {
        "settled" => Standing::Settled,
        "held" => Standing::Held,
        "resolved" => Standing::Resolved,
        "superseded" => Standing::Superseded,
        other => return Err(corrupt(format!("unknown standing `{other}`"))),
    })
}

/// The decision with this report name.
pub fn decision_of(name: &str) -> Option<Decision> {
    Decision::ALL
        .into_iter()
        .find(|decision| decision.name() == name)
}

pub(super) fn parse_json(text: &str) -> Result<Value, DbError> {
    serde_json::from_str(text).map_err(|error| corrupt(format!("stored JSON: {error}")))
}

/// One audit row, as written.
#[derive(Clone, Debug, Default)]
pub(super) struct AuditRow {
    pub(super) entry: &'static str,
    pub(super) subject: String,
    pub(super) delivery: Option<u32>,
    pub(super) event_id: Option<String>,
    pub(super) content_hash: Option<String>,
    pub(super) card_id: Option<String>,
    pub(super) decision: Option<String>,
    pub(super) previous: Option<String>,
    pub(super) version: Option<u64>,
    pub(super) state: Option<String>,
}
