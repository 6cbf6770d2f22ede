//! The facts pipeline's properties, as checks on steps and states.
//!
//! Step properties compare the world before and after a step; state properties read one
//! world; the terminal ones read a world in which nothing can happen any more. Everything
//! the checks need (the READY rule, what counts as a correlated fact) is computed here from
//! the world's data, not through the inbox's own helpers, so a bug there cannot hide from
//! the properties that judge it.

use super::application::{AppKey, Applications};
use super::envelope::{Envelope, FactType};
use super::fixture::Expect;
use super::inbox::Verdict;
use super::ingress::Response;
use super::property::{Properties, Property};
use super::world::{Decision, EntryId, Payload, StepOutcome, World};
use std::collections::BTreeSet;

/// Whether `envelope` belongs to an application as the applications stand: same tenant
/// and id, same business key, the current material version.
fn correlates(apps: &Applications, envelope: &Envelope) -> bool {
    let key = AppKey::of(envelope);
    apps.get(&key).is_some_and(|application| {
        application.business_key == envelope.business_key()
            && application.material_version == envelope.material_version()
    })
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

/// The READY rule, from the facts themselves.
pub fn ready_by_rule(world: &World, app: &AppKey) -> bool {
    if world.inbox.open_conflicts().contains(app) {
        return false;
    }
    let counted = |wanted: FactType| {
        world.inbox.facts().any(|fact| {
            fact.fact_type() == wanted
                && AppKey::of(fact) == *app
                && correlates(&world.applications, fact)
        })
    };
    counted(FactType::PaymentConfirmed) && counted(FactType::ContractSigned)
}

/// Checks one step, `pre` to `post` with `outcome`, against `checked` properties.
pub fn check_step(
    checked: Properties,
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
                Payload::Unparseable(_) => None,
            },
            _ => None,
        },
        _ => None,
    };
    // fact-once: the first fact of an identity stays, and an identity is accepted once.
    let fact_once = || {
        let kept = pre.inbox.facts().all(|first| {
            post.inbox
                .fact(&first.fact_id())
                .is_some_and(|now| now == first)
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
            verdict != Verdict::Accepted || correlates(&pre.applications, &envelope)
        });
        let ingress_ok = match outcome {
            StepOutcome::Posted {
                response, entry, ..
            } => match (response, entry) {
                (Response::Accepted, Some(id)) => {
                    post.entry(*id).is_some_and(|entry| match &entry.payload {
                        Payload::Envelope(envelope) => correlates(&pre.applications, envelope),
                        Payload::Unparseable(_) => false,
                    })
                }
                (Response::Accepted, None) => false,
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
            post.entry(id).and_then(|entry| match &entry.payload {
                Payload::Envelope(envelope) => Some(Some(envelope.tenant_id().to_owned())),
                Payload::Unparseable(_) => None,
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
            (
                facts.into_iter().cloned().collect::<Vec<Envelope>>(),
                keys(world.inbox.open_conflicts()),
                keys(world.inbox.ready_marks()),
            )
        };
        view(pre) == view(post)
    };
    // retry-invisible: a delivery whose content (the body without `sent_at`) is already
    // recorded under its identity, as the fact or a kept variant, is no conflict and
    // changes no fact, open conflict or READY mark.
    let retry_invisible = || {
        let Some((verdict, envelope)) = handled_envelope() else {
            return true;
        };
        let id = envelope.fact_id();
        let content = envelope_content(&envelope);
        let recorded = pre
            .inbox
            .fact(&id)
            .into_iter()
            .chain(
                pre.inbox
                    .evidence()
                    .filter(|variant| variant.fact_id() == id),
            )
            .any(|known| envelope_content(known) == content);
        !recorded
            || (verdict != Verdict::Conflict
                && pre.inbox.facts().eq(post.inbox.facts())
                && pre.inbox.open_conflicts() == post.inbox.open_conflicts()
                && pre.inbox.ready_marks() == post.inbox.ready_marks())
    };
    broken(Property::FactOnce, &fact_once)
        .or_else(|| broken(Property::Correlated, &correlated))
        .or_else(|| broken(Property::TenantIsolated, &tenant_isolated))
        .or_else(|| broken(Property::RetryInvisible, &retry_invisible))
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
                    Payload::Unparseable(_) => world.dead_letter.contains_key(&entry.id),
                }
        })
    };
    let no_loss = || {
        !terminal
            || (world.pending.is_empty()
                && world.stream.iter().all(|entry| {
                    world.committed.contains(&entry.id) || world.dead_letter.contains_key(&entry.id)
                }))
    };
    let ready_converges = || {
        if !terminal {
            return true;
        }
        let rule = apps().all(|key| world.inbox.marked_ready(key) == ready_by_rule(world, key));
        let expected = match (converges, expect) {
            (true, Some(expect)) => {
                let facts_match = expect.facts.as_ref().is_none_or(|facts| {
                    let held: BTreeSet<(String, String)> = world
                        .inbox
                        .facts()
                        .map(|fact| {
                            (
                                fact.source().as_str().to_owned(),
                                fact.event_id().to_owned(),
                            )
                        })
                        .collect();
                    let wanted: BTreeSet<(String, String)> = facts
                        .iter()
                        .map(|(source, id)| (source.as_str().to_owned(), id.clone()))
                        .collect();
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
        .or_else(|| broken(Property::ReadyConverges, &ready_converges))
}
