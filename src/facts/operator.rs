//! The operator steps of the facts contract: register, upgrade, terminate, resolve a
//! conflict, expire quarantine. Each is one inbox transaction on the registry and the
//! inbox, with READY recomputed inside it, and each refusal is typed.

use super::application::{AppKey, Applications, LifecycleError, Registered};
use super::envelope::{Envelope, FactId};
use super::inbox::{decide, At, EntryId, Inbox, Kept, Verdict};

/// The default quarantine period: 72 hours.
pub const DEFAULT_QUARANTINE_SECONDS: i64 = 72 * 3600;

/// What a registration did: the registry's answer, and each quarantined entry of the
/// application correlated again in the same transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// New, unchanged or moved forward.
    pub registered: Registered,
    /// The quarantined entries decided now, with their verdicts.
    pub released: Vec<(EntryId, Verdict)>,
}

/// Registers an application (never backwards, never another business key, never a
/// terminated one); its quarantined entries are decided as if consumed now.
pub fn register(
    apps: &mut Applications,
    inbox: &mut Inbox,
    key: &AppKey,
    business_key: &str,
    material_version: u64,
) -> Result<Registration, LifecycleError> {
    let registered = apps.register(key, business_key, material_version)?;
    let released = release_quarantine(apps, inbox, key);
    inbox.refresh_ready(apps);
    Ok(Registration {
        registered,
        released,
    })
}

/// Decides again, in entry order, every quarantined entry of `key` (READY not recomputed).
pub(super) fn release_quarantine(
    apps: &Applications,
    inbox: &mut Inbox,
    key: &AppKey,
) -> Vec<(EntryId, Verdict)> {
    inbox
        .unquarantine(key)
        .into_iter()
        .map(|(entry, parked)| {
            let at = At {
                entry,
                received_at: parked.since,
            };
            (entry, decide(inbox, apps, at, &parked.envelope))
        })
        .collect()
}

/// Moves an application's material version forward (refused for a terminated one); the
/// old version's facts stay as history. Returns the version before.
pub fn upgrade(
    apps: &mut Applications,
    inbox: &mut Inbox,
    key: &AppKey,
    to: u64,
) -> Result<u64, LifecycleError> {
    let from = apps.upgrade(key, to)?;
    inbox.refresh_ready(apps);
    Ok(from)
}

/// Terminates an application (final): READY becomes false and stays false.
pub fn terminate(
    apps: &mut Applications,
    inbox: &mut Inbox,
    key: &AppKey,
    reason: &str,
    at: i64,
) -> Result<(), LifecycleError> {
    apps.terminate(key, reason, at)?;
    inbox.refresh_ready(apps);
    Ok(())
}

/// Resolves the open conflict of `id`: keep the first content (`variant: None`) or the
/// recorded variant with `variant`'s content, with a reason. Both contents stay recorded.
pub fn resolve(
    apps: &Applications,
    inbox: &mut Inbox,
    id: &FactId,
    variant: Option<&Envelope>,
    reason: &str,
) -> Result<Kept, String> {
    let kept = inbox.resolve(id, variant, reason)?;
    inbox.refresh_ready(apps);
    Ok(kept)
}

/// The only content recorded under `id` beside its fact: what "keep the variant" keeps
/// when no content is named. Refused when there is none, or several.
pub fn only_variant(inbox: &Inbox, id: &FactId) -> Result<Envelope, String> {
    let mut variants = inbox.variants_of(id);
    match (variants.next(), variants.next()) {
        (Some(only), None) => Ok(only.clone()),
        (None, _) => Err("no variant is recorded".into()),
        (Some(_), Some(_)) => {
            Err("several variants are recorded: name the content of the one to keep".into())
        }
    }
}

/// Expires, at `now`, the entries quarantined for longer than `period` seconds: they
/// become `quarantine_expired`, listed for a person, never facts.
pub fn expire_quarantine(inbox: &mut Inbox, now: i64, period: i64) -> Vec<EntryId> {
    inbox.expire_quarantine(now.saturating_sub(period))
}
