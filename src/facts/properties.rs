//! The facts pipeline's properties, as checks on steps and states.
//!
//! Step properties compare the world before and after a step; state properties read one
//! world; the terminal ones read a world in which nothing can happen any more. Everything
//! the checks need (the READY rule, what counts as a correlated fact) is computed here from
//! the world's data, not through the inbox's own helpers, so a bug there cannot hide from
//! the properties that judge it.

use super::application::{AppKey, Applications};
use super::envelope::{Envelope, FactKind};
use super::fixture::Expect;
use super::inbox::{Kept, Parking, Verdict};
use super::ingress::{IngressConfig, Reason, Response};
use super::property::{Properties, Property};
use super::world::{Decision, EntryId, Payload, StepOutcome, World};
use std::collections::BTreeSet;

/// Whether `envelope` belongs to an application as the applications stand: same tenant
/// and id, same business key, the current material version (active or not).
fn correlates(apps: &Applications, envelope: &Envelope) -> bool {
    let key = AppKey::of(envelope);
    apps.get(&key).is_some_and(|application| {
        application.business_key == envelope.business_key()
            && application.material_version == envelope.material_version()
    })
}

/// Whether `envelope` belongs to an active application as the applications stand.
fn counts_for(apps: &Applications, envelope: &Envelope) -> bool {
    correlates(apps, envelope)
        && apps
            .get(&AppKey::of(envelope))
            .is_some_and(|a| a.is_active())
}

/// An envelope's content as the contract defines it, computed here from its canonical body
/// (not through [`Envelope::content`]): the parsed body without `sent_at`.
fn envelope_content(envelope: &Envelope) -> serde_json::Value {
    let mut value: serde_json::Value =
        serde_json::from_str(envelope.canonical()).expect("a canonical body is JSON");
    if let Some(object) = value.as_object_mut() {
        object.remove("sent_at");
    }
    value
}

/// The READY rule, from the facts themselves: active, no open conflict, and for each kind
/// a confirming fact for the current version that no withdrawal of its tenant and source
/// names.
pub fn ready_by_rule(world: &World, app: &AppKey) -> bool {
    let active = world.applications.get(app).is_some_and(|a| a.is_active());
    let conflicted = world
        .inbox
        .conflicts()
        .values()
        .any(|conflict| conflict.resolution.is_none() && conflict.applications.contains(app));
    if !active || conflicted {
        return false;
    }
    let withdrawn = |fact: &Envelope| {
        world.inbox.facts().any(|other| {
            other.fact_type().is_withdrawal()
                && other.withdraws() == Some(fact.event_id())
                && other.tenant_id() == fact.tenant_id()
                && other.source() == fact.source()
        })
    };
    let counted = |wanted: FactKind| {
        world.inbox.facts().any(|fact| {
            !fact.fact_type().is_withdrawal()
                && fact.source().kind() == wanted
                && AppKey::of(fact) == *app
                && correlates(&world.applications, fact)
                && !withdrawn(fact)
        })
    };
    counted(FactKind::Payment) && counted(FactKind::Signature)
}

/// The contents recorded under `envelope`'s identity in `world`: its fact and variants.
fn recorded(world: &World, envelope: &Envelope) -> bool {
    let id = envelope.fact_id();
    let content = envelope_content(envelope);
    world
        .inbox
        .fact(&id)
        .into_iter()
        .chain(world.inbox.variants_of(&id))
        .any(|known| envelope_content(known) == content)
}

/// Checks one step, `pre` to `post` with `outcome`, against `checked` properties.
pub fn check_step(
    checked: Properties,
    config: &IngressConfig,
    pre: &World,
    post: &World,
    outcome: &StepOutcome,
) -> Option<Property> {
    let broken = |property: Property, holds: &dyn Fn() -> bool| {
        (checked.contains(property) && !holds()).then_some(property)
    };
    let handled_envelope = || match outcome {
        StepOutcome::Handled(handled) => match (&handled.decision, post.entry(handled.entry)) {
            (Some(Decision::Verdict(verdict)), Some(entry)) => match &entry.payload {
                Payload::Envelope(envelope) => Some((*verdict, envelope.clone())),
                Payload::Unparseable(_) | Payload::Undecidable(_) => None,
            },
            _ => None,
        },
        _ => None,
    };
    // fact-once: the first fact of an identity stays (unless a person's resolution kept a
    // variant of it), and an identity is accepted once.
    let resolved = match outcome {
        StepOutcome::Resolved {
            fact,
            kept: Kept::Variant,
        } => Some(fact),
        _ => None,
    };
    let fact_once = || {
        let kept = pre.inbox.facts().all(|first| {
            let id = first.fact_id();
            Some(&id) == resolved || post.inbox.fact(&id).is_some_and(|now| now == first)
        });
        let accepted_again = handled_envelope().is_some_and(|(verdict, envelope)| {
            verdict == Verdict::Accepted && pre.inbox.fact(&envelope.fact_id()).is_some()
        });
        kept && !accepted_again
    };
    // correlated: what was accepted, at ingress or in the inbox, belongs to its application
    // as it stood then; a rejection appends nothing.
    let correlated = || {
        let inbox_ok = handled_envelope().is_none_or(|(verdict, envelope)| {
            verdict != Verdict::Accepted || counts_for(&pre.applications, &envelope)
        });
        let appended = |id: &EntryId, check: &dyn Fn(&Envelope) -> bool| {
            post.entry(*id).is_some_and(|entry| match &entry.payload {
                Payload::Envelope(envelope) => check(envelope),
                _ => false,
            })
        };
        let ingress_ok = match outcome {
            StepOutcome::Posted {
                response, entry, ..
            } => match (response, entry) {
                (Response::Accepted, Some(id)) => {
                    appended(id, &|envelope| correlates(&pre.applications, envelope))
                }
                (Response::Quarantined, Some(id)) => appended(id, &|envelope| {
                    pre.applications.get(&AppKey::of(envelope)).is_none()
                }),
                (Response::Accepted | Response::Quarantined, None) => false,
                (_, _) => post.stream.len() == pre.stream.len(),
            },
            _ => true,
        };
        inbox_ok && ingress_ok
    };
    // tenant-isolated: a request or entry of tenant T changes nothing of another tenant
    // (a rejected request or an entry that names no tenant changes nothing of anyone's).
    let tenant_isolated = || {
        let tenant_of = |id: EntryId| {
            post.entry(id).and_then(|entry| {
                entry
                    .payload
                    .envelope()
                    .map(|envelope| Some(envelope.tenant_id().to_owned()))
            })
        };
        let scope: Option<Option<String>> = match outcome {
            StepOutcome::Posted {
                entry: Some(id), ..
            } => tenant_of(*id),
            StepOutcome::Posted { entry: None, .. } => Some(None),
            StepOutcome::Handled(handled) => tenant_of(handled.entry),
            _ => None,
        };
        let Some(own) = scope else {
            return true;
        };
        let foreign = |tenant: &str| own.as_deref() != Some(tenant);
        let view = |world: &World| {
            let facts: Vec<&Envelope> = world
                .inbox
                .facts()
                .filter(|fact| foreign(fact.tenant_id()))
                .collect();
            let keys = |set: &BTreeSet<AppKey>| -> Vec<AppKey> {
                set.iter()
                    .filter(|key| foreign(&key.tenant_id))
                    .cloned()
                    .collect()
            };
            let parked: Vec<(EntryId, Parking)> = world
                .inbox
                .parked()
                .iter()
                .filter(|(_, parked)| foreign(parked.envelope.tenant_id()))
                .map(|(&entry, parked)| (entry, parked.why))
                .collect();
            (
                facts.into_iter().cloned().collect::<Vec<Envelope>>(),
                keys(&world.inbox.open_conflicts()),
                keys(world.inbox.ready_marks()),
                parked,
            )
        };
        view(pre) == view(post) && !tenant_oracle(config, outcome)
    };
    // retry-invisible: a delivery whose content (the body without `sent_at`) is already
    // recorded under its identity, as the fact or a kept variant, is no conflict and
    // changes no fact, open conflict or READY mark.
    let retry_invisible = || {
        let Some((verdict, envelope)) = handled_envelope() else {
            return true;
        };
        !recorded(pre, &envelope)
            || (verdict != Verdict::Conflict
                && pre.inbox.facts().eq(post.inbox.facts())
                && pre.inbox.open_conflicts() == post.inbox.open_conflicts()
                && pre.inbox.ready_marks() == post.inbox.ready_marks())
    };
    // conflict-visible: a new content under an identity that has a fact, for an active
    // application it correlates with, is a conflict left open on that application.
    let conflict_visible = || {
        let Some((verdict, envelope)) = handled_envelope() else {
            return true;
        };
        let genuine = pre.inbox.fact(&envelope.fact_id()).is_some()
            && !recorded(pre, &envelope)
            && counts_for(&pre.applications, &envelope);
        !genuine
            || (verdict == Verdict::Conflict
                && post.inbox.open_conflicts().contains(&AppKey::of(&envelope)))
    };
    // lifecycle-forward: versions never move backwards, business keys never change, a
    // terminated application stays terminated.
    let lifecycle_forward = || {
        pre.applications.iter().all(|(key, before)| {
            post.applications.get(key).is_some_and(|after| {
                after.material_version >= before.material_version
                    && after.business_key == before.business_key
                    && (before.is_active() || !after.is_active())
            })
        })
    };
    broken(Property::FactOnce, &fact_once)
        .or_else(|| broken(Property::Correlated, &correlated))
        .or_else(|| broken(Property::TenantIsolated, &tenant_isolated))
        .or_else(|| broken(Property::RetryInvisible, &retry_invisible))
        .or_else(|| broken(Property::ConflictVisible, &conflict_visible))
        .or_else(|| broken(Property::LifecycleForward, &lifecycle_forward))
}

/// Whether a request whose matching key may not report for the tenant its body names got
/// an answer that depends on that tenant's applications (202, or a correlation 400).
fn tenant_oracle(config: &IngressConfig, outcome: &StepOutcome) -> bool {
    let StepOutcome::Posted {
        response,
        key: Some(key),
        tenant: Some(tenant),
        ..
    } = outcome
    else {
        return false;
    };
    let barred = config
        .key(key)
        .is_some_and(|key| !key.tenants.allow(tenant));
    let revealing = matches!(
        response,
        Response::Accepted
            | Response::Quarantined
            | Response::Rejected(Reason::BusinessKeyMismatch | Reason::MaterialVersionMismatch)
    );
    barred && revealing
}

/// Checks one world against `checked` state properties; `terminal`: nothing can happen any
/// more; `expect`: the fixture's expected end, compared when `converges` (no upgrade can
/// happen in this model).
pub fn check_state(
    checked: Properties,
    world: &World,
    terminal: bool,
    expect: Option<&Expect>,
    converges: bool,
    labels: &dyn Fn(&AppKey) -> String,
) -> Option<Property> {
    let broken = |property: Property, holds: &dyn Fn() -> bool| {
        (checked.contains(property) && !holds()).then_some(property)
    };
    let apps = || world.applications.iter().map(|(key, _)| key);
    let ready_sound =
        || apps().all(|key| !world.inbox.marked_ready(key) || ready_by_rule(world, key));
    // An entry is acknowledged only once its outcome is durable: an envelope's verdict
    // committed in the inbox, an unparseable entry's copy in the dead-letter stream.
    let ack_after_commit = || {
        world.stream.iter().all(|entry| {
            !world.acknowledged(entry.id)
                || match entry.payload {
                    Payload::Envelope(_) => world.committed.contains(&entry.id),
                    Payload::Unparseable(_) | Payload::Undecidable(_) => {
                        world.dead_letter.contains_key(&entry.id)
                    }
                }
        })
    };
    // A committed entry is kept: its content recorded under its identity (as the fact or
    // a variant), or the entry parked (quarantine, late mismatch, after termination).
    let kept = |entry: &super::world::Entry| {
        let recorded_or_parked = || match &entry.payload {
            Payload::Envelope(envelope) => {
                recorded(world, envelope) || world.inbox.parked().contains_key(&entry.id)
            }
            _ => false,
        };
        world.dead_letter.contains_key(&entry.id)
            || (world.committed.contains(&entry.id) && recorded_or_parked())
    };
    let no_loss = || !terminal || (world.pending.is_empty() && world.stream.iter().all(kept));
    let quarantine_resolves = || {
        !terminal
            || world.inbox.parked().values().all(|parked| {
                parked.why != Parking::Quarantined
                    || world
                        .applications
                        .get(&AppKey::of(&parked.envelope))
                        .is_none()
            })
    };
    let ready_converges = || {
        if !terminal {
            return true;
        }
        let rule = apps().all(|key| world.inbox.marked_ready(key) == ready_by_rule(world, key));
        let expected = match (converges, expect) {
            (true, Some(expect)) => {
                let facts_match = expect.facts.as_ref().is_none_or(|facts| {
                    // One pair per fact held: two tenants holding a pair count twice.
                    let mut held: Vec<(String, String)> = world
                        .inbox
                        .facts()
                        .map(|fact| {
                            (
                                fact.source().as_str().to_owned(),
                                fact.event_id().to_owned(),
                            )
                        })
                        .collect();
                    let mut wanted: Vec<(String, String)> = facts
                        .iter()
                        .map(|(source, id)| (source.as_str().to_owned(), id.clone()))
                        .collect();
                    held.sort();
                    wanted.sort();
                    held == wanted
                });
                let ready_match = expect.ready.as_ref().is_none_or(|ready| {
                    apps().all(|key| {
                        ready
                            .get(&labels(key))
                            .is_none_or(|&wanted| wanted == world.inbox.marked_ready(key))
                    })
                });
                facts_match && ready_match
            }
            _ => true,
        };
        rule && expected
    };
    broken(Property::ReadySound, &ready_sound)
        .or_else(|| broken(Property::AckAfterCommit, &ack_after_commit))
        .or_else(|| broken(Property::NoLoss, &no_loss))
        .or_else(|| broken(Property::QuarantineResolves, &quarantine_resolves))
        .or_else(|| broken(Property::ReadyConverges, &ready_converges))
}
