//! The pipeline's steps and what can go wrong in them: a [`Step`], the consumer that takes
//! it, its faults ([`Crash`], [`PostFault`]) and the fault [`Budgets`] a model explores
//! within.

use super::application::AppKey;
use super::envelope::FactId;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A consumer of the group, by name (`c1`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Consumer(pub String);

impl fmt::Display for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a consumer crashes while handling an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Crash {
    /// After reading, before the inbox transaction commits: nothing is recorded.
    BeforeCommit,
    /// After the inbox transaction commits, before `XACK`.
    AfterCommit,
}

/// What goes wrong with a `post`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PostFault {
    /// The receiver answers but the answer never reaches the sender, which will post the
    /// same request again (a second stream entry if it passes ingress again).
    ResponseLost,
    /// The stream cannot be written: the answer is 503, nothing is appended, and the
    /// sender will post again.
    StreamUnavailable,
}

/// One step of the pipeline, in domain terms.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Request `request` reaches ingress; an accepted one is appended to the stream.
    Post {
        /// The request number.
        request: u32,
        /// What goes wrong, if anything.
        fault: Option<PostFault>,
    },
    /// The consumer reads its own oldest pending entry, else the next new one, decides it
    /// in one inbox transaction, commits, and acknowledges.
    Consume {
        /// Who.
        consumer: Consumer,
        /// Where it crashes, if it does.
        crash: Option<Crash>,
    },
    /// A consumer restarts and re-reads its own oldest pending entry (`XREADGROUP ... 0`).
    Recover {
        /// Who.
        consumer: Consumer,
        /// Where it crashes again, if it does.
        crash: Option<Crash>,
    },
    /// The consumer takes over the oldest entry pending in another consumer
    /// (`XAUTOCLAIM`) and handles it.
    Claim {
        /// Who.
        consumer: Consumer,
        /// Where it crashes, if it does.
        crash: Option<Crash>,
    },
    /// A material upgrade of an application.
    Upgrade {
        /// Which application.
        application: AppKey,
        /// Its new material version.
        material_version: u64,
    },
    /// Something other than ingress writes an unparseable entry into the stream.
    Poison,
    /// Request `request`'s envelope enters the stream as an entry whose decision fails
    /// (deterministically) while the inbox works.
    Undecidable {
        /// The request whose envelope it carries.
        request: u32,
    },
    /// An operator registers an application (or registers it again).
    Register {
        /// Which.
        application: AppKey,
        /// Its business key.
        business_key: String,
        /// Its material version.
        material_version: u64,
    },
    /// An operator terminates an application (final).
    Terminate {
        /// Which.
        application: AppKey,
        /// Why.
        reason: String,
        /// When (Unix seconds).
        at: i64,
    },
    /// A person resolves the open conflict of an identity.
    Resolve {
        /// The identity.
        fact: FactId,
        /// What to keep.
        keep: Keep,
        /// Why.
        reason: String,
    },
    /// The quarantine is swept at time `at`: entries quarantined longer than the period
    /// expire.
    ExpireQuarantine {
        /// When (Unix seconds).
        at: i64,
    },
}

/// A person's choice for a conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Keep {
    /// The first content stays the fact.
    First,
    /// The variant becomes the fact; refused when several variants are recorded.
    Variant,
    /// The variant with the content request N carried becomes the fact.
    VariantOf(u32),
}

impl Step {
    /// Whether it is an operator's step (register, upgrade, terminate, resolve, expire).
    pub fn is_operator(&self) -> bool {
        matches!(
            self,
            Step::Upgrade { .. }
                | Step::Register { .. }
                | Step::Terminate { .. }
                | Step::Resolve { .. }
                | Step::ExpireQuarantine { .. }
        )
    }
}

/// Fault budgets left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Budgets {
    /// Lost HTTP answers.
    pub lost_responses: u8,
    /// Crashes before commit.
    pub crashes_before_commit: u8,
    /// Crashes after commit, before `XACK`.
    pub crashes_after_commit: u8,
    /// Takeovers.
    pub takeovers: u8,
    /// Poison entries.
    pub poison: u8,
    /// Material upgrades.
    pub upgrades: u8,
    /// Undecidable entries.
    pub undecidable: u8,
    /// Operator steps taken from the fixture's schedule.
    pub operator: u8,
}
