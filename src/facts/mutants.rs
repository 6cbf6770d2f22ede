//! The facts mutant catalogue: wrong pipelines seen in real webhook consumers, each caught by
//! a named property. Each mutant is a small wrapper around the real ingress or consumer
//! step, so the real decision functions (`ingress::admit`, `inbox::consume`) read like the
//! contract and carry no mutant branches. `Option<Mutant>` is the [`Policy`] the pipeline's
//! transition runs under (`None`: the contract).

use super::application::{AppKey, Applications};
use super::envelope::Envelope;
use super::inbox::{self, Inbox, Verdict};
use super::ingress::{admit, Admission, IngressConfig, Reason, Request};
use super::property::Property;
use super::world::Policy;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// A deliberately wrong pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mutant {
    /// Acknowledges the entry (`XACK`) before the inbox transaction commits.
    AckBeforeCommit,
    /// Takes the stream entry id as the fact's identity: a resent request (a new entry) is
    /// a new fact.
    DedupeByStreamEntry,
    /// Finds the application by business key alone, at ingress and at consume time.
    BusinessKeyCorrelation,
    /// Checks correlation at ingress only: an entry validated for material version 1 still
    /// counts after the upgrade to 2.
    IngressOnlyCorrelation,
    /// Sets READY when a fact completes the pair and never clears it (the latest fact
    /// decides, not the set of facts: upgrades and conflicts leave a stale READY).
    LastFactDecidesReady,
    /// Acknowledges an entry it cannot parse at once, without a dead-letter copy.
    AckAndDropPoison,
    /// Reads only new entries (`>`), never its own pending ones (`0`): an entry a consumer
    /// was holding when it crashed stays pending for good unless another consumer claims it.
    ForgetOwnPending,
    /// Recomputes READY only when a signature fact arrives, as if payment always came
    /// first: a payment that arrives after the signature never makes the application
    /// READY.
    ReadyOnSignatureOnly,
    /// Skips the freshness check: a correctly signed request captured long ago is
    /// accepted when replayed. The model's clock does not move, so ingress tests show it.
    AcceptStaleSignature,
    /// Contract version 1's fact identity, `(source, event_id)` across all tenants: one
    /// tenant's event id that another tenant already used is a conflict on both tenants'
    /// applications (the other tenant's READY is withdrawn).
    GlobalFactIdentity,
    /// Contract version 1's content, the whole body with `sent_at`: a retry re-signed with
    /// a later `sent_at` (the only way past freshness after 300 s) is a conflict that
    /// withdraws READY.
    SentAtInContent,
}

impl Mutant {
    /// The catalogue.
    pub const ALL: [Mutant; 11] = [
        Mutant::AckBeforeCommit,
        Mutant::DedupeByStreamEntry,
        Mutant::BusinessKeyCorrelation,
        Mutant::IngressOnlyCorrelation,
        Mutant::LastFactDecidesReady,
        Mutant::AckAndDropPoison,
        Mutant::ForgetOwnPending,
        Mutant::ReadyOnSignatureOnly,
        Mutant::AcceptStaleSignature,
        Mutant::GlobalFactIdentity,
        Mutant::SentAtInContent,
    ];

    /// The name in model files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::AckBeforeCommit => "ack-before-commit",
            Mutant::DedupeByStreamEntry => "dedupe-by-stream-entry",
            Mutant::BusinessKeyCorrelation => "business-key-correlation",
            Mutant::IngressOnlyCorrelation => "ingress-only-correlation",
            Mutant::LastFactDecidesReady => "last-fact-decides-ready",
            Mutant::AckAndDropPoison => "ack-and-drop-poison",
            Mutant::ForgetOwnPending => "forget-own-pending",
            Mutant::ReadyOnSignatureOnly => "ready-on-signature-only",
            Mutant::AcceptStaleSignature => "accept-stale-signature",
            Mutant::GlobalFactIdentity => "global-fact-identity",
            Mutant::SentAtInContent => "sent-at-in-content",
        }
    }

    /// The property that catches it (`None`: the ingress tests catch it, not the model).
    pub fn caught_by(self) -> Option<Property> {
        match self {
            Mutant::AckBeforeCommit => Some(Property::AckAfterCommit),
            Mutant::DedupeByStreamEntry => Some(Property::FactOnce),
            Mutant::BusinessKeyCorrelation => Some(Property::Correlated),
            Mutant::IngressOnlyCorrelation => Some(Property::Correlated),
            Mutant::LastFactDecidesReady => Some(Property::ReadySound),
            Mutant::AckAndDropPoison => Some(Property::AckAfterCommit),
            Mutant::ForgetOwnPending => Some(Property::NoLoss),
            Mutant::ReadyOnSignatureOnly => Some(Property::ReadyConverges),
            Mutant::AcceptStaleSignature => None,
            Mutant::GlobalFactIdentity => Some(Property::TenantIsolated),
            Mutant::SentAtInContent => Some(Property::RetryInvisible),
        }
    }
}

impl fmt::Display for Mutant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mutant {
    type Err = String;

    fn from_str(text: &str) -> Result<Mutant, String> {
        Mutant::ALL
            .into_iter()
            .find(|mutant| mutant.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = Mutant::ALL.iter().map(|m| m.name()).collect();
                format!(
                    "unknown facts policy `{text}`; expected `spec` or one of: {}",
                    names.join(", ")
                )
            })
    }
}

/// Ingress under a policy.
pub fn admit_under(
    mutant: Option<Mutant>,
    request: &Request<'_>,
    now: i64,
    config: &IngressConfig,
    apps: &Applications,
) -> Admission {
    match mutant {
        Some(Mutant::AcceptStaleSignature) => {
            // The receiver's clock is taken from the request itself: never stale.
            let sent_at = request
                .source
                .and_then(super::envelope::Source::from_wire)
                .and_then(|source| Envelope::parse(request.body, source).ok())
                .map_or(now, |envelope| envelope.sent_at());
            admit(request, sent_at, config, apps)
        }
        Some(Mutant::BusinessKeyCorrelation) => match admit(request, now, config, apps) {
            Admission::Reject(rejection) if is_correlation(rejection.reason) => {
                let found = request
                    .source
                    .and_then(super::envelope::Source::from_wire)
                    .and_then(|source| Envelope::parse(request.body, source).ok())
                    .filter(|envelope| by_business_key(apps, envelope).is_some());
                match found {
                    Some(envelope) => Admission::Accept(envelope),
                    None => Admission::Reject(rejection),
                }
            }
            other => other,
        },
        _ => admit(request, now, config, apps),
    }
}

fn is_correlation(reason: Reason) -> bool {
    matches!(
        reason,
        Reason::UnknownApplication | Reason::BusinessKeyMismatch | Reason::MaterialVersionMismatch
    )
}

fn by_business_key(apps: &Applications, envelope: &Envelope) -> Option<AppKey> {
    apps.iter()
        .find(|(_, application)| application.business_key == envelope.business_key())
        .map(|(key, _)| key.clone())
}

/// The consumer's inbox transaction under a policy. `entry_seen`: whether this stream entry
/// already has a committed verdict (only the stream-entry dedupe reads it).
pub fn consume_under(
    mutant: Option<Mutant>,
    inbox: &mut Inbox,
    apps: &Applications,
    envelope: &Envelope,
    entry_seen: bool,
) -> Verdict {
    match mutant {
        Some(Mutant::DedupeByStreamEntry) => {
            let verdict = if entry_seen {
                inbox.count_duplicate();
                Verdict::Duplicate
            } else if apps.correlate(envelope).is_err() {
                return inbox::consume(inbox, apps, envelope);
            } else {
                inbox.overwrite_fact(envelope);
                Verdict::Accepted
            };
            inbox.refresh_ready(apps);
            verdict
        }
        Some(Mutant::BusinessKeyCorrelation) => match by_business_key(apps, envelope) {
            Some(key) => {
                let verdict = inbox::identity(inbox, key, envelope);
                inbox.refresh_ready(apps);
                verdict
            }
            None => inbox::consume(inbox, apps, envelope),
        },
        Some(Mutant::GlobalFactIdentity) => match apps.correlate(envelope) {
            Ok(key) => {
                let first = inbox.fact_in_any_tenant(envelope);
                let verdict =
                    inbox::identity_against(inbox, key, envelope, first, Envelope::same_content);
                inbox.refresh_ready(apps);
                verdict
            }
            Err(_) => inbox::consume(inbox, apps, envelope),
        },
        Some(Mutant::SentAtInContent) => match apps.correlate(envelope) {
            Ok(key) => {
                let first = inbox.fact(&envelope.fact_id()).cloned().map(Arc::new);
                let whole_body = |a: &Envelope, b: &Envelope| a.canonical() == b.canonical();
                let verdict = inbox::identity_against(inbox, key, envelope, first, whole_body);
                inbox.refresh_ready(apps);
                verdict
            }
            Err(_) => inbox::consume(inbox, apps, envelope),
        },
        Some(Mutant::IngressOnlyCorrelation) => {
            let verdict = inbox::identity(inbox, AppKey::of(envelope), envelope);
            inbox.refresh_ready(apps);
            verdict
        }
        Some(Mutant::LastFactDecidesReady) => {
            let mut scratch = inbox.clone();
            let verdict = inbox::consume(&mut scratch, apps, envelope);
            let marks_before = inbox.clone();
            *inbox = scratch;
            inbox.keep_marks_of(&marks_before);
            inbox.add_ready_marks(apps);
            verdict
        }
        Some(Mutant::ReadyOnSignatureOnly) => {
            let marks_before = inbox.clone();
            let verdict = inbox::consume(inbox, apps, envelope);
            let signature = envelope.fact_type() == super::envelope::FactType::ContractSigned;
            if !(verdict == Verdict::Accepted && signature) {
                inbox.keep_marks_of(&marks_before);
            }
            verdict
        }
        _ => inbox::consume(inbox, apps, envelope),
    }
}

/// Whether a consumer reads its own pending entries before new ones under a policy.
pub fn reads_own_pending(mutant: Option<Mutant>) -> bool {
    mutant != Some(Mutant::ForgetOwnPending)
}

/// Whether an upgrade recomputes READY under a policy (the last-fact mutant never clears
/// a mark).
pub fn upgrade_refreshes_ready(mutant: Option<Mutant>) -> bool {
    mutant != Some(Mutant::LastFactDecidesReady)
}

impl Policy for Option<Mutant> {
    fn admit(
        &self,
        request: &Request<'_>,
        now: i64,
        config: &IngressConfig,
        apps: &Applications,
    ) -> Admission {
        admit_under(*self, request, now, config, apps)
    }

    fn consume(
        &self,
        inbox: &mut Inbox,
        apps: &Applications,
        envelope: &Envelope,
        entry_seen: bool,
    ) -> Verdict {
        consume_under(*self, inbox, apps, envelope, entry_seen)
    }

    fn reads_own_pending(&self) -> bool {
        reads_own_pending(*self)
    }

    fn upgrade_refreshes_ready(&self) -> bool {
        upgrade_refreshes_ready(*self)
    }

    fn acks_on_delivery(&self) -> bool {
        *self == Some(Mutant::AckBeforeCommit)
    }

    fn drops_poison(&self) -> bool {
        *self == Some(Mutant::AckAndDropPoison)
    }

    fn is_contract(&self) -> bool {
        self.is_none()
    }
}
