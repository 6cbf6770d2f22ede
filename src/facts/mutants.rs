//! The facts mutant catalogue: wrong pipelines seen in real webhook consumers, each caught by
//! a named property. Each mutant is a small wrapper around the real ingress or consumer
//! step, so the real decision functions (`ingress::admit`, `inbox::consume`) read like the
//! contract and carry no mutant branches. `Option<Mutant>` is the [`Policy`] the pipeline's
//! transition runs under (`None`: the contract).

use super::application::{AppKey, Application, Applications, LifecycleError, Mismatch, Registered};
use super::envelope::Envelope;
use super::inbox::{self, At, Inbox, PoisonCategory, Verdict};
use super::ingress::{admit, Admission, Admitted, IngressConfig, Reason, Rejection, Request};
use super::operator::{self, release_quarantine, Registration};
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
    /// accepted when replayed.
    AcceptStaleSignature,
    /// Contract version 1's fact identity, `(source, event_id)` across all tenants: one
    /// tenant's event id that another tenant already used is a conflict on both tenants'
    /// applications (the other tenant's READY is withdrawn).
    GlobalFactIdentity,
    /// Contract version 1's content, the whole body with `sent_at`: a retry re-signed with
    /// a later `sent_at` (the only way past freshness after 300 s) is a conflict that
    /// withdraws READY.
    SentAtInContent,
    /// Contract version 1 at the consumer: an entry for an unknown application is
    /// acknowledged and kept nowhere.
    QuarantineDrops,
    /// Contract version 1's `init` run again: registering an application that exists
    /// replaces it, so its material version can move backwards (and a terminated one
    /// comes back).
    RegisterDowngrades,
    /// Registers an application without correlating its quarantined entries again: they
    /// stay parked for good.
    RegisterIgnoresQuarantine,
    /// READY ignores withdrawals (contract version 1 had none): a reversed payment still
    /// counts.
    WithdrawalIgnored,
    /// A withdrawal whose fact has not arrived yet is acknowledged and forgotten ("nothing
    /// to withdraw"): the fact that arrives after it counts.
    WithdrawalNeedsFactFirst,
    /// Contract version 1's poison budget, which covers unparseable entries only: an
    /// entry whose decision fails is retried for ever and stalls its consumer.
    PoisonStallsBatch,
    /// Dedupes by identity alone: a different content under a known identity is taken for
    /// a duplicate, so no conflict ever opens.
    IdOnlyDedupe,
    /// Contract version 1's check order: correlation answers before the tenant check, so a
    /// key of another tenant learns from `business_key_mismatch` or
    /// `material_version_mismatch` that an application exists.
    CorrelationBeforeTenant,
    /// Contract version 1 had no termination: the consumer treats a terminated application
    /// as active, so facts that arrive after it make it READY.
    TerminationIgnored,
}

impl Mutant {
    /// The catalogue.
    pub const ALL: [Mutant; 20] = [
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
        Mutant::QuarantineDrops,
        Mutant::RegisterDowngrades,
        Mutant::RegisterIgnoresQuarantine,
        Mutant::WithdrawalIgnored,
        Mutant::WithdrawalNeedsFactFirst,
        Mutant::PoisonStallsBatch,
        Mutant::IdOnlyDedupe,
        Mutant::CorrelationBeforeTenant,
        Mutant::TerminationIgnored,
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
            Mutant::QuarantineDrops => "quarantine-drops",
            Mutant::RegisterDowngrades => "register-downgrades",
            Mutant::RegisterIgnoresQuarantine => "register-ignores-quarantine",
            Mutant::WithdrawalIgnored => "withdrawal-ignored",
            Mutant::WithdrawalNeedsFactFirst => "withdrawal-needs-fact-first",
            Mutant::PoisonStallsBatch => "poison-stalls-batch",
            Mutant::IdOnlyDedupe => "id-only-dedupe",
            Mutant::CorrelationBeforeTenant => "correlation-before-tenant",
            Mutant::TerminationIgnored => "termination-ignored",
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
            Mutant::QuarantineDrops => Some(Property::NoLoss),
            Mutant::RegisterDowngrades => Some(Property::LifecycleForward),
            Mutant::RegisterIgnoresQuarantine => Some(Property::QuarantineResolves),
            Mutant::WithdrawalIgnored => Some(Property::ReadySound),
            Mutant::WithdrawalNeedsFactFirst => Some(Property::NoLoss),
            Mutant::PoisonStallsBatch => Some(Property::NoLoss),
            Mutant::IdOnlyDedupe => Some(Property::ConflictVisible),
            Mutant::CorrelationBeforeTenant => Some(Property::TenantIsolated),
            Mutant::TerminationIgnored => Some(Property::Correlated),
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
            let sent_at = body_envelope(request).map_or(now, |envelope| envelope.sent_at());
            admit(request, sent_at, config, apps)
        }
        Some(Mutant::BusinessKeyCorrelation) => match admit(request, now, config, apps) {
            Admission::Reject(rejection) if is_correlation(rejection.reason) => {
                accept_by_business_key(request, apps, rejection)
            }
            Admission::Accept(admitted) if admitted.quarantined => {
                let found = by_business_key(apps, &admitted.envelope).is_some();
                Admission::Accept(Admitted {
                    quarantined: !found,
                    ..admitted
                })
            }
            other => other,
        },
        Some(Mutant::CorrelationBeforeTenant) => match admit(request, now, config, apps) {
            Admission::Reject(rejection) if rejection.reason == Reason::TenantNotAllowed => {
                let mismatch =
                    body_envelope(request).and_then(|envelope| match apps.correlate(&envelope) {
                        Err(Mismatch::BusinessKeyMismatch) => Some(Reason::BusinessKeyMismatch),
                        Err(Mismatch::MaterialVersionMismatch) => {
                            Some(Reason::MaterialVersionMismatch)
                        }
                        _ => None,
                    });
                match mismatch {
                    Some(reason) => Admission::Reject(Rejection {
                        key_id: rejection.key_id,
                        ..Rejection::new(reason, None)
                    }),
                    None => Admission::Reject(rejection),
                }
            }
            other => other,
        },
        _ => admit(request, now, config, apps),
    }
}

/// The request's envelope, parsed without ingress (the body names its source).
fn body_envelope(request: &Request<'_>) -> Option<Envelope> {
    super::envelope::envelope_in(request.body)
}

fn accept_by_business_key(
    request: &Request<'_>,
    apps: &Applications,
    rejection: super::ingress::Rejection,
) -> Admission {
    let found = body_envelope(request).filter(|envelope| by_business_key(apps, envelope).is_some());
    match (found, rejection.key_id.clone()) {
        (Some(envelope), Some(key_id)) => Admission::Accept(Admitted {
            envelope,
            key_id,
            quarantined: false,
        }),
        _ => Admission::Reject(rejection),
    }
}

fn is_correlation(reason: Reason) -> bool {
    matches!(
        reason,
        Reason::BusinessKeyMismatch | Reason::MaterialVersionMismatch
    )
}

fn by_business_key(apps: &Applications, envelope: &Envelope) -> Option<AppKey> {
    apps.iter()
        .find(|(_, application)| application.business_key == envelope.business_key())
        .map(|(key, _)| key.clone())
}

/// The application an envelope names when it correlates with it and it is active.
fn active_key(apps: &Applications, envelope: &Envelope) -> Option<AppKey> {
    apps.correlate(envelope)
        .ok()
        .filter(|key| apps.get(key).is_some_and(|app| app.is_active()))
}

/// The identity rule on `envelope` for `key`, then READY recomputed.
fn identity_then_ready(
    inbox: &mut Inbox,
    apps: &Applications,
    key: AppKey,
    envelope: &Envelope,
) -> Verdict {
    let verdict = inbox::identity(inbox, key, envelope);
    inbox.refresh_ready(apps);
    verdict
}

/// The consumer's inbox transaction under a policy. `entry_seen`: whether this stream entry
/// already has a committed verdict (only the stream-entry dedupe reads it).
pub fn consume_under(
    mutant: Option<Mutant>,
    inbox: &mut Inbox,
    apps: &Applications,
    at: At,
    envelope: &Envelope,
    entry_seen: bool,
) -> Verdict {
    let Some(mutant) = mutant else {
        return inbox::consume(inbox, apps, at, envelope);
    };
    let key = active_key(apps, envelope);
    match (mutant, key) {
        (Mutant::DedupeByStreamEntry, _) if entry_seen => {
            inbox.count_only(Verdict::Duplicate);
            inbox.refresh_ready(apps);
            Verdict::Duplicate
        }
        (Mutant::DedupeByStreamEntry, Some(_)) => {
            inbox.overwrite_fact(envelope);
            inbox.refresh_ready(apps);
            Verdict::Accepted
        }
        (Mutant::BusinessKeyCorrelation, _) => match by_business_key(apps, envelope) {
            Some(key) => identity_then_ready(inbox, apps, key, envelope),
            None => inbox::consume(inbox, apps, at, envelope),
        },
        (Mutant::GlobalFactIdentity, Some(key)) => {
            let first = inbox.fact_in_any_tenant(envelope);
            let verdict =
                inbox::identity_against(inbox, key, envelope, first, Envelope::same_content);
            inbox.refresh_ready(apps);
            verdict
        }
        (Mutant::SentAtInContent, Some(key)) => {
            let first = inbox.fact(&envelope.fact_id()).cloned().map(Arc::new);
            let whole_body = |a: &Envelope, b: &Envelope| a.canonical() == b.canonical();
            let verdict = inbox::identity_against(inbox, key, envelope, first, whole_body);
            inbox.refresh_ready(apps);
            verdict
        }
        (Mutant::IngressOnlyCorrelation, _) if apps.get(&AppKey::of(envelope)).is_some() => {
            identity_then_ready(inbox, apps, AppKey::of(envelope), envelope)
        }
        (Mutant::LastFactDecidesReady, _) => {
            let mut scratch = inbox.clone();
            let verdict = inbox::consume(&mut scratch, apps, at, envelope);
            let marks_before = inbox.clone();
            *inbox = scratch;
            inbox.keep_marks_of(&marks_before);
            inbox.add_ready_marks(apps);
            verdict
        }
        (Mutant::ReadyOnSignatureOnly, _) => {
            let marks_before = inbox.clone();
            let verdict = inbox::consume(inbox, apps, at, envelope);
            let signature = envelope.confirms() == Some(super::envelope::FactKind::Signature);
            if !(verdict == Verdict::Accepted && signature) {
                inbox.keep_marks_of(&marks_before);
            }
            verdict
        }
        (Mutant::QuarantineDrops, _) => {
            let verdict = inbox::consume(inbox, apps, at, envelope);
            if verdict == Verdict::Quarantined {
                inbox.unpark(at.entry);
            }
            verdict
        }
        (Mutant::WithdrawalIgnored, _) => {
            let verdict = inbox::consume(inbox, apps, at, envelope);
            let mut scratch = inbox.without_withdrawals();
            scratch.refresh_ready(apps);
            inbox.set_marks(scratch.ready_marks().clone());
            verdict
        }
        (Mutant::WithdrawalNeedsFactFirst, Some(_)) if names_absent_fact(inbox, envelope) => {
            inbox.count_only(Verdict::Accepted);
            inbox.refresh_ready(apps);
            Verdict::Accepted
        }
        (Mutant::IdOnlyDedupe, Some(_)) if inbox.fact(&envelope.fact_id()).is_some() => {
            inbox.count_only(Verdict::Duplicate);
            inbox.refresh_ready(apps);
            Verdict::Duplicate
        }
        (Mutant::TerminationIgnored, _) => inbox::consume(inbox, &apps.all_active(), at, envelope),
        _ => inbox::consume(inbox, apps, at, envelope),
    }
}

/// Whether `envelope` is a withdrawal whose fact the inbox does not hold (yet).
fn names_absent_fact(inbox: &Inbox, envelope: &Envelope) -> bool {
    envelope.withdraws().is_some_and(|named| {
        let id = super::envelope::FactId {
            event_id: named.to_owned(),
            ..envelope.fact_id()
        };
        inbox.fact(&id).is_none()
    })
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
        at: At,
        envelope: &Envelope,
        entry_seen: bool,
    ) -> Verdict {
        consume_under(*self, inbox, apps, at, envelope, entry_seen)
    }

    fn register(
        &self,
        apps: &mut Applications,
        inbox: &mut Inbox,
        key: &AppKey,
        business_key: &str,
        material_version: u64,
    ) -> Result<Registration, LifecycleError> {
        match self {
            Some(Mutant::RegisterDowngrades) => {
                let registered = match apps.get(key) {
                    None => Registered::New,
                    Some(_) => Registered::Unchanged,
                };
                apps.overwrite(key, Application::active(business_key, material_version));
                let released = release_quarantine(apps, inbox, key);
                inbox.refresh_ready(apps);
                Ok(Registration {
                    registered,
                    released,
                })
            }
            Some(Mutant::RegisterIgnoresQuarantine) => {
                let registered = apps.register(key, business_key, material_version)?;
                inbox.refresh_ready(apps);
                Ok(Registration {
                    registered,
                    released: Vec::new(),
                })
            }
            _ => operator::register(apps, inbox, key, business_key, material_version),
        }
    }

    fn dead_letters(&self, category: PoisonCategory) -> bool {
        !(*self == Some(Mutant::PoisonStallsBatch) && category == PoisonCategory::Undecidable)
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
