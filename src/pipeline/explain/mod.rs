//! `pipeline explain`: everything the pipeline kept about one application or one event,
//! followed forwards and backwards (receipts, stream entries, deliveries, verdicts, facts,
//! withdrawals, conflicts, quarantine, dead letters, READY history), and a plain answer to
//! "why is this application (not) READY".
//!
//! The rows are loaded once ([`load`], the only I/O: the inbox and Redis) into an
//! [`Evidence`]; the answer is a pure function of it ([`reason::explain`]), so every
//! answer can be tested on rows written by hand as well as on a real pipeline.
//!
//! | module | job |
//! |---|---|
//! | [`load`] | reads the rows from the inbox and the stream, the dead letters and the pending list |
//! | [`reason`] | the answer: which fact of which kind is held for which version, which is missing, what was seen of a missing one; the chain in time order; text for people |

pub mod load;
pub mod reason;

use super::receipts::Receipt;
use crate::facts::application::AppKey;
use crate::facts::envelope::FactId;
use serde::Serialize;

/// What is explained.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Target {
    /// An application: why it is (not) READY.
    Application {
        /// The application.
        key: AppKey,
    },
    /// One event: where it went, and its application's READY.
    Event {
        /// The event's identity.
        id: FactId,
    },
}

/// An application row and its READY mark.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AppRow {
    /// Tenant and application.
    pub key: AppKey,
    /// Its business key.
    pub business_key: String,
    /// Its current material version.
    pub material_version: u64,
    /// `(reason, Unix seconds)` once terminated.
    pub terminated: Option<(String, i64)>,
    /// Whether it is marked READY.
    pub ready: bool,
}

/// A stream entry (from `XRANGE`), with the ids ingress wrote beside the body, or read from
/// the body for an entry written before they were.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EntryRow {
    /// The entry id.
    pub id: String,
    /// The `source` field.
    pub source: Option<String>,
    /// The tenant it names.
    pub tenant_id: Option<String>,
    /// The application it names.
    pub application_id: Option<String>,
    /// The event id it names.
    pub event_id: Option<String>,
    /// The receive time ingress wrote (Unix milliseconds).
    pub received_ms: Option<i64>,
}

/// An entry pending in the group (`XPENDING`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PendingRow {
    /// The entry id.
    pub entry: String,
    /// The consumer holding it.
    pub consumer: String,
    /// Milliseconds since its last delivery.
    pub idle_ms: u64,
    /// Deliveries so far.
    pub deliveries: u32,
}

/// A verdict row of the inbox (identity, consumer and delivery count from migration 6 on).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VerdictRow {
    /// The stream entry.
    pub entry: String,
    /// The verdict word.
    pub verdict: String,
    /// How often it was processed.
    pub processings: u32,
    /// The tenant.
    pub tenant_id: Option<String>,
    /// The application.
    pub application_id: Option<String>,
    /// The source.
    pub source: Option<String>,
    /// The event id.
    pub event_id: Option<String>,
    /// The consumer that decided it first.
    pub consumer: Option<String>,
    /// That delivery's count.
    pub deliveries: Option<u32>,
    /// When ingress received it (Unix milliseconds).
    pub received_ms: Option<i64>,
    /// When its first decision committed (Unix milliseconds).
    pub committed_ms: i64,
}

/// A fact (a confirming fact or a withdrawal) filed in the inbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FactRow {
    /// Its identity.
    pub id: FactId,
    /// The application its envelope names.
    pub application_id: String,
    /// `PAYMENT_CONFIRMED`, `CONTRACT_REVOKED`, ...
    pub event_type: String,
    /// The material version its envelope names.
    pub material_version: u64,
    /// The stream entry (or operator step) it was filed under.
    pub entry: String,
    /// For a withdrawal, the event id it withdraws.
    pub withdraws: Option<String>,
}

/// A conflict by identity, with its state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConflictRow {
    /// The identity.
    pub id: FactId,
    /// The applications it stops.
    pub applications: Vec<String>,
    /// Whether it is open.
    pub open: bool,
    /// The last state change's reason (a resolution or a reopening), if any.
    pub last: Option<String>,
}

/// An entry kept aside (quarantined, quarantine expired, late mismatch, after termination).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ParkedRow {
    /// The stream entry (or the step that parked it).
    pub entry: String,
    /// `quarantined`, `quarantine_expired`, `late_mismatch`, `after_termination`.
    pub state: String,
    /// Its identity.
    pub id: FactId,
    /// The application it names.
    pub application_id: String,
    /// Since when (Unix seconds).
    pub since: i64,
    /// A late mismatch's kind.
    pub mismatch: Option<String>,
}

/// A dead letter (`<stream>:dead`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeadRow {
    /// The original entry id.
    pub entry: String,
    /// `unparseable` or `undecidable`.
    pub category: String,
    /// The error text.
    pub reason: String,
    /// The deliveries judged.
    pub deliveries: Option<u32>,
    /// The source.
    pub source: Option<String>,
    /// The tenant (an entry that parsed).
    pub tenant_id: Option<String>,
    /// The application its body names, when it is a JSON object that names one.
    pub application_id: Option<String>,
    /// The event id.
    pub event_id: Option<String>,
}

/// A READY history row of an application.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HistoryRow {
    /// The application.
    pub key: AppKey,
    /// The mark after the change.
    pub ready: bool,
    /// The stream entry or the operator step that changed it.
    pub cause: String,
    /// When (Unix milliseconds).
    pub at_ms: i64,
}

/// Everything loaded for one explanation: the rows of the applications concerned (and,
/// for an event, of that event), read once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Evidence {
    /// What is explained.
    pub target: Target,
    /// When it was loaded (Unix milliseconds).
    pub now_ms: i64,
    /// The applications concerned that are registered.
    pub applications: Vec<AppRow>,
    /// The applications concerned (registered or not), in order.
    pub concerned: Vec<AppKey>,
    /// Receipts naming them (or the event).
    pub receipts: Vec<Receipt>,
    /// Stream entries naming them.
    pub entries: Vec<EntryRow>,
    /// The group's pending entries among those.
    pub pending: Vec<PendingRow>,
    /// Verdict rows naming them.
    pub verdicts: Vec<VerdictRow>,
    /// Their facts and the withdrawals naming those facts.
    pub facts: Vec<FactRow>,
    /// Conflicts on them.
    pub conflicts: Vec<ConflictRow>,
    /// Their parked entries.
    pub parked: Vec<ParkedRow>,
    /// Dead letters naming them.
    pub dead: Vec<DeadRow>,
    /// Their READY history.
    pub history: Vec<HistoryRow>,
}
