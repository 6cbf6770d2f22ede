//! The names of the facts contract's properties: the [`Property`] enum, its name table,
//! parsing, and [`Properties`], a set of them. Nothing here checks anything: the checks are
//! in [`super::properties`].

use std::fmt;
use std::str::FromStr;

/// A named property of the facts contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Property {
    /// At most one fact per `(tenant_id, source, event_id)`; the first is never replaced
    /// except by a person's recorded resolution.
    FactOnce,
    /// Every fact accepted into the inbox (for an active application), and every entry
    /// ingress writes to the stream (unless quarantined),
    /// matches its application's tenant, id, business key and current material version; a
    /// rejected request never reaches the stream.
    Correlated,
    /// READY only as contract v2's rule says: the application active, no open conflict,
    /// and for each kind an accepted confirming fact for the current material version that
    /// no accepted withdrawal names.
    ReadySound,
    /// Every acknowledged entry has its outcome made durable first: an envelope's inbox
    /// verdict committed, an unparseable entry's dead-letter copy written.
    AckAfterCommit,
    /// At the end, every stream entry has an inbox verdict (a quarantined one with its
    /// quarantine row), or a dead-letter entry, and
    /// nothing is pending.
    NoLoss,
    /// At the end, READY is the rule applied to the inbox; and where no material upgrade
    /// can happen, the facts and READY are the fixture's expected ones in every order.
    ReadyConverges,
    /// A step that handles a request or a stream entry of one tenant changes no fact,
    /// open conflict or READY mark of another tenant (contract v2).
    TenantIsolated,
    /// A delivery whose content equals one already recorded under its identity (the fact
    /// or a kept variant) is never a conflict and changes no fact, open conflict or READY
    /// mark (contract v2).
    RetryInvisible,
    /// At the end, no entry stays quarantined for an application that is registered
    /// (contract v2).
    QuarantineResolves,
    /// An application's material version never moves backwards, its business key never
    /// changes, and a terminated application stays terminated (contract v2's lifecycle).
    LifecycleForward,
    /// A delivery for an active application whose content was never recorded under an
    /// identity that already has a fact is a conflict, and that application then has an
    /// open conflict: a genuine second payload is never taken for a duplicate.
    ConflictVisible,
}

impl Property {
    /// Every property, in check order.
    pub const ALL: [Property; 11] = [
        Property::FactOnce,
        Property::Correlated,
        Property::ReadySound,
        Property::AckAfterCommit,
        Property::NoLoss,
        Property::ReadyConverges,
        Property::TenantIsolated,
        Property::RetryInvisible,
        Property::QuarantineResolves,
        Property::LifecycleForward,
        Property::ConflictVisible,
    ];

    /// Their names, in [`Property::ALL`] order.
    pub const NAMES: [&'static str; 11] = [
        "fact-once",
        "correlated",
        "ready-sound",
        "ack-after-commit",
        "no-loss",
        "ready-converges",
        "tenant-isolated",
        "retry-invisible",
        "quarantine-resolves",
        "lifecycle-forward",
        "conflict-visible",
    ];

    /// The name in model files and reports.
    pub fn name(self) -> &'static str {
        Property::NAMES[self as usize]
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Property {
    type Err = String;

    fn from_str(text: &str) -> Result<Property, String> {
        Property::ALL
            .into_iter()
            .find(|property| property.name() == text)
            .ok_or_else(|| {
                format!(
                    "unknown facts property `{text}`; expected one of: {}",
                    Property::NAMES.join(", ")
                )
            })
    }
}

/// A set of properties (the ones a run checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Properties(u16);

impl Properties {
    /// All of them.
    pub const ALL: Properties = Properties((1 << Property::ALL.len()) - 1);

    /// None.
    pub const NONE: Properties = Properties(0);

    /// Just one.
    pub fn only(property: Property) -> Properties {
        Properties(1 << property as u16)
    }

    /// Whether `property` is in the set.
    pub fn contains(self, property: Property) -> bool {
        self.0 & (1 << property as u16) != 0
    }

    /// The set with `property` added.
    pub fn with(self, property: Property) -> Properties {
        Properties(self.0 | Properties::only(property).0)
    }
}
