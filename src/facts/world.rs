//! The facts pipeline as plain data (applications, stream, consumer group, consumers, inbox,
//! dead letters, HTTP answers) and the one [`transition`] that moves it a [`Step`] forward.
//!
//! Replay walks a fixture's schedule through [`transition`]; a model checker explores every
//! schedule through the same function. A policy (the contract's pipeline or a wrong one)
//! comes in through the [`Policy`] hook only. The [`World`] keeps no audit trail, only the state
//! the properties need (it stays small and hashable); what a step did comes back as a
//! [`StepOutcome`].
//!
//! The clock is each step's own: a request is judged at its `received_at`, an operator
//! step at its `at`; a `claim` is taken to happen after `min_idle` has passed for the
//! entries it takes over. A delivery count is kept up to `max_deliveries`: beyond it every
//! count decides the same, so a consumer that re-reads a stalled entry comes back to the
//! same state.

use super::application::{AppKey, Applications, LifecycleError, Registered};
use super::envelope::{parse_json_object, Envelope, FactId, Source};
pub use super::inbox::EntryId;
use super::inbox::{
    on_unprocessable, At, DeadLetter, Inbox, Kept, PoisonAction, PoisonCategory, Verdict,
};
use super::ingress::{Admission, IngressConfig, Request, Response, WebhookHeaders};
use super::operator::{self, Registration};
use super::step::{Consumer, Crash, Keep, PostFault, Step};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The default `max_deliveries` of the poison rule.
pub const DEFAULT_MAX_DELIVERIES: u32 = 3;

/// The body the `poison` step writes into the stream: not a valid envelope.
pub const POISON_BODY: &str = "{\"schema_version\":\"1\",\"source\":";

/// A request as the sender posts it, with the receiver's clock at arrival.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PostedRequest {
    /// Its number.
    pub number: u32,
    /// The receiver's clock when it arrives (Unix seconds).
    pub received_at: i64,
    /// `X-Acme-Source`.
    pub source: Option<String>,
    /// `X-Acme-Signature`.
    pub signature: Option<String>,
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature` (Standard Webhooks).
    pub webhook: [Option<String>; 3],
    /// The request this one re-sends, re-signed later (none for an original).
    pub resends: Option<u32>,
    /// The raw body.
    pub body: Vec<u8>,
}

impl PostedRequest {
    /// The request as ingress sees it.
    pub fn request(&self) -> Request<'_> {
        let [id, timestamp, signature] = &self.webhook;
        let webhook = WebhookHeaders {
            id: id.as_deref(),
            timestamp: timestamp.as_deref(),
            signature: signature.as_deref(),
        };
        Request {
            source: self.source.as_deref(),
            signature: self.signature.as_deref(),
            webhook: (webhook != WebhookHeaders::default()).then_some(webhook),
            body: &self.body,
        }
    }
}

/// What a policy may change in the pipeline: the ingress decision, the inbox transaction,
/// and a few points of the consumer loop. [`transition`] knows a policy only through this
/// hook; the wrong pipelines implement it (`Option<Mutant>` in [`super::mutants`], where
/// `None` is the contract), so the real decision functions carry no mutant branches.
pub trait Policy {
    /// Ingress on `request` at the receiver's clock `now`.
    fn admit(
        &self,
        request: &Request<'_>,
        now: i64,
        config: &IngressConfig,
        apps: &Applications,
    ) -> Admission;

    /// The inbox transaction on `envelope` at stream entry `at`; `entry_seen`: whether this
    /// stream entry already has a committed verdict.
    fn consume(
        &self,
        inbox: &mut Inbox,
        apps: &Applications,
        at: At,
        envelope: &Envelope,
        entry_seen: bool,
    ) -> Verdict;

    /// The operator's registration, in one transaction (the contract's:
    /// [`operator::register`]).
    fn register(
        &self,
        apps: &mut Applications,
        inbox: &mut Inbox,
        key: &AppKey,
        business_key: &str,
        material_version: u64,
    ) -> Result<Registration, LifecycleError> {
        operator::register(apps, inbox, key, business_key, material_version)
    }

    /// Whether an entry of this category is dead-lettered once its delivery count reaches
    /// `max_deliveries` (the contract: every category).
    fn dead_letters(&self, _category: PoisonCategory) -> bool {
        true
    }

    /// Whether a consumer reads its own pending entries before new ones.
    fn reads_own_pending(&self) -> bool;

    /// Whether a material upgrade recomputes READY.
    fn upgrade_refreshes_ready(&self) -> bool;

    /// Whether an entry is acknowledged as soon as it is delivered, before any commit.
    fn acks_on_delivery(&self) -> bool;

    /// Whether an unparseable entry is acknowledged and dropped, without a dead-letter copy.
    fn drops_poison(&self) -> bool;

    /// Whether this is the contract's pipeline.
    fn is_contract(&self) -> bool;
}

/// What does not change during a run: ingress setup, the requests, the poison budget, the
/// quarantine period, the policy.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Setup<P> {
    /// Ingress limits and keys.
    pub config: IngressConfig,
    /// The requests, by number.
    pub requests: BTreeMap<u32, PostedRequest>,
    /// Deliveries before an unprocessable entry is dead-lettered.
    pub max_deliveries: u32,
    /// How long an entry stays quarantined before it expires, in seconds.
    pub quarantine_seconds: i64,
    /// The pipeline to run: the contract's, or a wrong one (`Option<Mutant>`: `None` is
    /// the contract's).
    pub mutant: P,
}

/// What a stream entry carries.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Payload {
    /// An envelope that passed ingress.
    Envelope(Arc<Envelope>),
    /// A body that is not a valid envelope.
    Unparseable(Arc<str>),
    /// A valid envelope whose decision fails while the inbox works.
    Undecidable(Arc<Envelope>),
}

impl Payload {
    /// The envelope it carries, if it parsed.
    pub fn envelope(&self) -> Option<&Arc<Envelope>> {
        match self {
            Payload::Envelope(envelope) | Payload::Undecidable(envelope) => Some(envelope),
            Payload::Unparseable(_) => None,
        }
    }
}

/// A stream entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Entry {
    /// Its id.
    pub id: EntryId,
    /// The source it was accepted for (none for an entry ingress did not write).
    pub source: Option<Source>,
    /// The request it came from (none for an entry ingress did not write).
    pub request: Option<u32>,
    /// When its request was received (Unix seconds; 0 for an entry ingress did not write).
    pub received_at: i64,
    /// Its content.
    pub payload: Payload,
}

/// An entry delivered to a consumer and not yet acknowledged.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pending {
    /// Who holds it.
    pub consumer: Consumer,
    /// How many times it has been delivered.
    pub deliveries: u32,
}

/// The pipeline's state.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct World {
    /// The applications as they stand.
    pub applications: Applications,
    /// The stream; entry `n` is at index `n - 1`.
    pub stream: Vec<Entry>,
    /// The consumer group's last delivered id: later entries are new (`>`).
    pub last_delivered: EntryId,
    /// The group's pending entries list.
    pub pending: BTreeMap<EntryId, Pending>,
    /// The entry each crashed consumer was handling; such a consumer is down until
    /// `recover`.
    pub in_hand: BTreeMap<Consumer, EntryId>,
    /// The inbox.
    pub inbox: Inbox,
    /// Entries whose verdict the inbox has committed (written in the same transaction).
    pub committed: BTreeSet<EntryId>,
    /// The dead-letter stream, by original entry id (idempotent: a copy written twice by a
    /// consumer that crashed before `XACK` is one entry).
    pub dead_letter: BTreeMap<EntryId, DeadLetter>,
    /// Every HTTP answer given, in order: (request number, answer).
    pub responses: Vec<(u32, Response)>,
    /// Requests the sender will post again (their answer was lost, or was 503).
    pub owed: BTreeSet<u32>,
}

/// How a consumer got the entry it handled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Read {
    /// A new entry (`>`).
    New,
    /// Its own pending entry again (`0`).
    OwnPending,
    /// Taken over from another consumer (`XAUTOCLAIM`).
    Claimed {
        /// The consumer it was pending in.
        from: Consumer,
    },
}

/// What the consumer decided on an entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The inbox verdict, committed.
    Verdict(Verdict),
    /// Not decided, retried later (left pending).
    Retry {
        /// Unparseable or undecidable.
        category: PoisonCategory,
        /// Why it cannot be decided.
        reason: String,
    },
    /// Not decided, copied to the dead-letter stream.
    DeadLetter {
        /// Unparseable or undecidable.
        category: PoisonCategory,
        /// Why it cannot be decided.
        reason: String,
    },
    /// Not a valid envelope, acknowledged and dropped (only the `ack-and-drop-poison`
    /// mutant does this).
    Dropped {
        /// Why it could not be processed.
        reason: String,
    },
}

/// One entry handled by a consumer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handled {
    /// Who.
    pub consumer: Consumer,
    /// How it got the entry.
    pub read: Read,
    /// The entry.
    pub entry: EntryId,
    /// Its delivery count, this delivery included.
    pub deliveries: u32,
    /// Where the consumer crashed, if it did.
    pub crash: Option<Crash>,
    /// The decision; none when the consumer crashed before commit.
    pub decision: Option<Decision>,
    /// Whether the entry was acknowledged (`XACK`).
    pub acknowledged: bool,
}

/// What a step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// A request went through ingress.
    Posted {
        /// The request.
        request: u32,
        /// The answer given.
        response: Response,
        /// Why it was refused, for people.
        detail: Option<String>,
        /// The stream entry appended, if any.
        entry: Option<EntryId>,
        /// What went wrong, if anything.
        fault: Option<PostFault>,
        /// The id of the key whose signature matched, if one did.
        key: Option<String>,
        /// The `tenant_id` the body names, read without ingress (for the properties).
        tenant: Option<String>,
    },
    /// A consumer handled an entry.
    Handled(Handled),
    /// The consumer had nothing to read.
    Idle(Consumer),
    /// The consumer is down (it crashed): only `recover` brings it back.
    ConsumerDown(Consumer),
    /// An application's material moved on.
    Upgraded {
        /// Which.
        application: AppKey,
        /// Its version before.
        from: u64,
        /// Its version now.
        to: u64,
    },
    /// An upgrade that could not apply (unknown application, or not a newer version).
    UpgradeRefused {
        /// Which.
        application: AppKey,
        /// Why.
        why: String,
    },
    /// An unparseable or undecidable entry was written into the stream.
    Poisoned(EntryId),
    /// An application was registered; its quarantined entries were decided.
    Registered {
        /// Which.
        application: AppKey,
        /// New, unchanged, or moved forward.
        registered: Registered,
        /// Quarantined entries decided now.
        released: Vec<(EntryId, Verdict)>,
    },
    /// An application was terminated.
    Terminated {
        /// Which.
        application: AppKey,
    },
    /// A conflict was resolved.
    Resolved {
        /// Its identity.
        fact: FactId,
        /// What was kept.
        kept: Kept,
    },
    /// The quarantine was swept.
    Expired {
        /// The entries that expired.
        entries: Vec<EntryId>,
    },
    /// An operator step that could not apply (register, terminate, resolve).
    OperatorRefused {
        /// The step's name.
        step: &'static str,
        /// Why.
        why: String,
    },
}

impl World {
    /// The start: these applications, an empty stream, inbox and group.
    pub fn initial(applications: Applications) -> World {
        World {
            applications,
            stream: Vec::new(),
            last_delivered: 0,
            pending: BTreeMap::new(),
            in_hand: BTreeMap::new(),
            inbox: Inbox::new(),
            committed: BTreeSet::new(),
            dead_letter: BTreeMap::new(),
            responses: Vec::new(),
            owed: BTreeSet::new(),
        }
    }

    /// The stream entry with this id.
    pub fn entry(&self, id: EntryId) -> Option<&Entry> {
        id.checked_sub(1)
            .and_then(|index| self.stream.get(index as usize))
    }

    /// Whether an entry has been delivered and acknowledged.
    pub fn acknowledged(&self, id: EntryId) -> bool {
        id <= self.last_delivered && !self.pending.contains_key(&id)
    }

    /// Whether a consumer is down.
    pub fn is_down(&self, consumer: &Consumer) -> bool {
        self.in_hand.contains_key(consumer)
    }

    /// Whether every entry has been delivered and acknowledged.
    pub fn is_drained(&self) -> bool {
        self.pending.is_empty() && self.last_delivered as usize == self.stream.len()
    }

    /// Whether `consume` by `consumer` would change something under `policy`: it reads its
    /// own oldest pending entry first (if the policy reads them), else a new one. A consumer
    /// whose own oldest entry is stalled (an entry the policy retries for ever, delivered
    /// `max_deliveries` times already) would only read that entry again: no work.
    pub fn has_work(&self, setup: &Setup<impl Policy>, consumer: &Consumer) -> bool {
        let policy = &setup.mutant;
        match own_pending(self, consumer).filter(|_| policy.reads_own_pending()) {
            Some(id) => !self.stalled(setup, id),
            None => (self.last_delivered as usize) < self.stream.len(),
        }
    }

    /// Whether entry `id` is poison its policy never dead-letters, already delivered
    /// `max_deliveries` times: handling it again changes nothing.
    pub fn stalled(&self, setup: &Setup<impl Policy>, id: EntryId) -> bool {
        let category = match self.entry(id).map(|entry| &entry.payload) {
            Some(Payload::Unparseable(_)) => PoisonCategory::Unparseable,
            Some(Payload::Undecidable(_)) => PoisonCategory::Undecidable,
            _ => return false,
        };
        !setup.mutant.dead_letters(category)
            && self
                .pending
                .get(&id)
                .is_some_and(|pending| pending.deliveries >= setup.max_deliveries)
    }

    /// Whether nothing is left to do once no fault can happen any more: no request is
    /// `unsent` or owed again, and none of `consumers` is down or has an entry to read
    /// under `policy`.
    pub fn is_terminal(
        &self,
        setup: &Setup<impl Policy>,
        unsent: &BTreeSet<u32>,
        consumers: &[Consumer],
    ) -> bool {
        unsent.is_empty()
            && self.owed.is_empty()
            && consumers
                .iter()
                .all(|consumer| !self.is_down(consumer) && !self.has_work(setup, consumer))
    }

    fn append(
        &mut self,
        source: Option<Source>,
        request: Option<&PostedRequest>,
        payload: Payload,
    ) -> EntryId {
        let id = EntryId::try_from(self.stream.len() + 1).expect("fewer than 2^32 entries");
        self.stream.push(Entry {
            id,
            source,
            request: request.map(|posted| posted.number),
            received_at: request.map_or(0, |posted| posted.received_at),
            payload,
        });
        id
    }
}

/// Moves `world` one step forward and says what happened. Every step is enabled in every
/// world: a step that cannot act (a down consumer, nothing to read, a refused upgrade)
/// changes nothing and says so.
pub fn transition<P: Policy>(setup: &Setup<P>, world: &mut World, step: &Step) -> StepOutcome {
    match step {
        Step::Post { request, fault } => post(setup, world, *request, *fault),
        Step::Consume { consumer, crash } => {
            if world.is_down(consumer) {
                return StepOutcome::ConsumerDown(consumer.clone());
            }
            let own = own_pending(world, consumer).filter(|_| setup.mutant.reads_own_pending());
            let read = match own {
                Some(id) => Some((id, Read::OwnPending)),
                None if (world.last_delivered as usize) < world.stream.len() => {
                    world.last_delivered += 1;
                    Some((world.last_delivered, Read::New))
                }
                None => None,
            };
            match read {
                Some((id, read)) => handle(setup, world, consumer, id, read, *crash),
                None => StepOutcome::Idle(consumer.clone()),
            }
        }
        Step::Recover { consumer, crash } => {
            world.in_hand.remove(consumer);
            match own_pending(world, consumer).filter(|_| setup.mutant.reads_own_pending()) {
                Some(id) => handle(setup, world, consumer, id, Read::OwnPending, *crash),
                None => StepOutcome::Idle(consumer.clone()),
            }
        }
        Step::Claim { consumer, crash } => {
            if world.is_down(consumer) {
                return StepOutcome::ConsumerDown(consumer.clone());
            }
            let other = world
                .pending
                .iter()
                .find(|(_, pending)| pending.consumer != *consumer)
                .map(|(&id, pending)| (id, pending.consumer.clone()));
            match other {
                // A down former holder keeps its `in_hand` note; its pending list no
                // longer has the entry, so its `recover` will not see it again.
                Some((id, from)) => {
                    handle(setup, world, consumer, id, Read::Claimed { from }, *crash)
                }
                None => StepOutcome::Idle(consumer.clone()),
            }
        }
        Step::Poison => {
            let id = world.append(None, None, Payload::Unparseable(Arc::from(POISON_BODY)));
            StepOutcome::Poisoned(id)
        }
        Step::Undecidable { request } => {
            let posted = setup.requests.get(request).expect("a request of the setup");
            let envelope = envelope_of(posted).expect("an undecidable entry is a valid envelope");
            let source = Some(envelope.source());
            let payload = Payload::Undecidable(Arc::new(envelope));
            StepOutcome::Poisoned(world.append(source, Some(posted), payload))
        }
        step => operate(setup, world, step),
    }
}

/// The envelope a request carries, parsed without ingress (its body names its source).
pub fn envelope_of(posted: &PostedRequest) -> Option<Envelope> {
    super::envelope::envelope_in(&posted.body)
}

/// The operator's steps, each one inbox transaction with READY recomputed.
fn operate<P: Policy>(setup: &Setup<P>, world: &mut World, step: &Step) -> StepOutcome {
    let World {
        applications,
        inbox,
        ..
    } = world;
    let refused = |step: &'static str, why: String| StepOutcome::OperatorRefused { step, why };
    match step {
        Step::Upgrade {
            application,
            material_version,
        } => {
            let upgraded = if setup.mutant.upgrade_refreshes_ready() {
                operator::upgrade(applications, inbox, application, *material_version)
            } else {
                applications.upgrade(application, *material_version)
            };
            match upgraded {
                Ok(from) => StepOutcome::Upgraded {
                    application: application.clone(),
                    from,
                    to: *material_version,
                },
                Err(error) => StepOutcome::UpgradeRefused {
                    application: application.clone(),
                    why: error.to_string(),
                },
            }
        }
        Step::Register {
            application,
            business_key,
            material_version,
        } => {
            let registered = setup.mutant.register(
                applications,
                inbox,
                application,
                business_key,
                *material_version,
            );
            match registered {
                Ok(Registration {
                    registered,
                    released,
                }) => StepOutcome::Registered {
                    application: application.clone(),
                    registered,
                    released,
                },
                Err(error) => refused("register", error.to_string()),
            }
        }
        Step::Terminate {
            application,
            reason,
            at,
        } => match operator::terminate(applications, inbox, application, reason, *at) {
            Ok(()) => StepOutcome::Terminated {
                application: application.clone(),
            },
            Err(error) => refused("terminate", error.to_string()),
        },
        Step::Resolve { fact, keep, reason } => {
            let content = match keep {
                Keep::First => None,
                Keep::Variant => match operator::only_variant(inbox, fact) {
                    Ok(only) => Some(only),
                    Err(why) => return refused("resolve", why),
                },
                Keep::VariantOf(number) => match setup.requests.get(number).and_then(envelope_of) {
                    Some(envelope) => Some(envelope),
                    None => {
                        let why = format!("request {number} is not an envelope");
                        return refused("resolve", why);
                    }
                },
            };
            match operator::resolve(applications, inbox, fact, content.as_ref(), reason) {
                Ok(kept) => StepOutcome::Resolved {
                    fact: fact.clone(),
                    kept,
                },
                Err(why) => refused("resolve", why),
            }
        }
        Step::ExpireQuarantine { at } => StepOutcome::Expired {
            entries: operator::expire_quarantine(inbox, *at, setup.quarantine_seconds),
        },
        _ => unreachable!("operate is called with operator steps only"),
    }
}

fn post<P: Policy>(
    setup: &Setup<P>,
    world: &mut World,
    number: u32,
    fault: Option<PostFault>,
) -> StepOutcome {
    let posted = setup
        .requests
        .get(&number)
        .expect("schedules post requests the setup has");
    let admission = setup.mutant.admit(
        &posted.request(),
        posted.received_at,
        &setup.config,
        &world.applications,
    );
    // The tenant the body names, for the properties: read from the body only when a key
    // matched and the request was refused (an admitted envelope names it already).
    let body_tenant = || {
        parse_json_object(&posted.body)
            .ok()
            .and_then(|value| value.get("tenant_id")?.as_str().map(str::to_owned))
    };
    let (response, detail, entry, key, tenant) = match admission {
        Admission::Reject(rejection) => {
            let tenant = rejection.key_id.as_ref().and_then(|_| body_tenant());
            let response = rejection.response();
            (response, rejection.detail, None, rejection.key_id, tenant)
        }
        Admission::Accept(admitted) => {
            let tenant = Some(admitted.envelope.tenant_id().to_owned());
            if fault == Some(PostFault::StreamUnavailable) {
                (
                    Response::unavailable(),
                    None,
                    None,
                    Some(admitted.key_id),
                    tenant,
                )
            } else {
                let response = admitted.response();
                let source = admitted.envelope.source();
                let payload = Payload::Envelope(Arc::new(admitted.envelope));
                let id = world.append(Some(source), Some(posted), payload);
                (response, None, Some(id), Some(admitted.key_id), tenant)
            }
        }
    };
    world.responses.push((number, response));
    let resend = fault == Some(PostFault::ResponseLost) || response == Response::Unavailable;
    if resend {
        world.owed.insert(number);
    } else {
        world.owed.remove(&number);
    }
    // A re-signed retry discharges the resend of its original that the sender owed.
    if let Some(original) = posted.resends {
        world.owed.remove(&original);
    }
    StepOutcome::Posted {
        request: number,
        response,
        detail,
        entry,
        fault,
        key,
        tenant,
    }
}

fn own_pending(world: &World, consumer: &Consumer) -> Option<EntryId> {
    world
        .pending
        .iter()
        .find(|(_, pending)| pending.consumer == *consumer)
        .map(|(&id, _)| id)
}

/// Delivers entry `id` to `consumer` (the pending list now names it, its delivery count
/// goes up), decides it in one inbox transaction, commits, then acknowledges; a crash cuts
/// this short where it says.
fn handle<P: Policy>(
    setup: &Setup<P>,
    world: &mut World,
    consumer: &Consumer,
    id: EntryId,
    read: Read,
    crash: Option<Crash>,
) -> StepOutcome {
    let deliveries = {
        let pending = world.pending.entry(id).or_insert(Pending {
            consumer: consumer.clone(),
            deliveries: 0,
        });
        pending.consumer = consumer.clone();
        pending.deliveries = (pending.deliveries + 1).min(setup.max_deliveries.max(1));
        pending.deliveries
    };
    let mut handled = Handled {
        consumer: consumer.clone(),
        read,
        entry: id,
        deliveries,
        crash,
        decision: None,
        acknowledged: false,
    };
    if setup.mutant.acks_on_delivery() {
        world.pending.remove(&id);
        handled.acknowledged = true;
    }
    if crash == Some(Crash::BeforeCommit) {
        world.in_hand.insert(consumer.clone(), id);
        return StepOutcome::Handled(handled);
    }
    let entry = world.entry(id).expect("pending entries exist").clone();
    let decision = match &entry.payload {
        Payload::Envelope(envelope) => {
            let seen = world.committed.contains(&id);
            let at = At {
                entry: id,
                received_at: entry.received_at,
            };
            let verdict =
                setup
                    .mutant
                    .consume(&mut world.inbox, &world.applications, at, envelope, seen);
            world.committed.insert(id);
            Decision::Verdict(verdict)
        }
        Payload::Unparseable(body) => {
            let reason = unprocessable_reason(entry.source, body);
            poison(
                setup,
                world,
                id,
                deliveries,
                PoisonCategory::Unparseable,
                reason,
                None,
            )
        }
        Payload::Undecidable(envelope) => {
            let reason = "deciding the entry failed (an undecidable entry)".to_owned();
            let identity = Some(envelope.fact_id());
            poison(
                setup,
                world,
                id,
                deliveries,
                PoisonCategory::Undecidable,
                reason,
                identity,
            )
        }
    };
    let ack = !matches!(decision, Decision::Retry { .. }) && crash.is_none();
    handled.decision = Some(decision);
    if crash == Some(Crash::AfterCommit) {
        world.in_hand.insert(consumer.clone(), id);
    }
    if ack && !handled.acknowledged {
        debug_assert!(
            !setup.mutant.is_contract()
                || world.committed.contains(&id)
                || world.dead_letter.contains_key(&id),
            "ack-after-commit: entry {id} acknowledged without a committed verdict"
        );
        world.pending.remove(&id);
        handled.acknowledged = true;
    }
    StepOutcome::Handled(handled)
}

/// The poison rule on an entry that could not be decided: retried until its delivery count
/// reaches `max_deliveries` (if the policy dead-letters its category), then copied to the
/// dead-letter stream with its count, category, reason and identity.
fn poison<P: Policy>(
    setup: &Setup<P>,
    world: &mut World,
    id: EntryId,
    deliveries: u32,
    category: PoisonCategory,
    reason: String,
    identity: Option<FactId>,
) -> Decision {
    if setup.mutant.drops_poison() {
        return Decision::Dropped { reason };
    }
    let counted = setup.mutant.dead_letters(category);
    match on_unprocessable(deliveries, setup.max_deliveries) {
        PoisonAction::DeadLetter if counted => {
            let letter = DeadLetter {
                category,
                reason: reason.clone(),
                deliveries,
                identity,
            };
            world.dead_letter.insert(id, letter);
            Decision::DeadLetter { category, reason }
        }
        _ => Decision::Retry { category, reason },
    }
}

/// Why an unparseable entry cannot be processed (`source`: the one it was accepted for).
pub fn unprocessable_reason(source: Option<Source>, body: &str) -> String {
    let error = match source {
        Some(source) => Envelope::parse(body.as_bytes(), source)
            .err()
            .map(|e| e.to_string()),
        None => match parse_json_object(body.as_bytes()) {
            Err(problem) => Some(format!("not one JSON object: {problem}")),
            Ok(_) => Some("the entry names no source".to_owned()),
        },
    };
    error.unwrap_or_else(|| "not a valid envelope".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_world_is_plain_hashable_data() {
        fn model_state<T: Clone + std::hash::Hash + Eq + std::fmt::Debug>() {}
        model_state::<World>();
        model_state::<Step>();
    }

    /// The contract's pipeline, for these tests.
    #[derive(Debug)]
    struct Contract;

    impl Policy for Contract {
        fn admit(
            &self,
            request: &Request<'_>,
            now: i64,
            config: &IngressConfig,
            apps: &Applications,
        ) -> Admission {
            super::super::ingress::admit(request, now, config, apps)
        }

        fn consume(
            &self,
            inbox: &mut Inbox,
            apps: &Applications,
            at: At,
            envelope: &Envelope,
            _entry_seen: bool,
        ) -> Verdict {
            super::super::inbox::consume(inbox, apps, at, envelope)
        }

        fn reads_own_pending(&self) -> bool {
            true
        }

        fn upgrade_refreshes_ready(&self) -> bool {
            true
        }

        fn acks_on_delivery(&self) -> bool {
            false
        }

        fn drops_poison(&self) -> bool {
            false
        }

        fn is_contract(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_down_consumer_must_recover_before_it_consumes() {
        let setup = Setup {
            config: IngressConfig::new(BTreeMap::new()),
            requests: BTreeMap::new(),
            max_deliveries: 2,
            quarantine_seconds: 0,
            mutant: Contract,
        };
        let mut world = World::initial(Applications::new());
        let c1 = Consumer("c1".into());
        let consume = |crash| Step::Consume {
            consumer: c1.clone(),
            crash,
        };
        assert_eq!(
            transition(&setup, &mut world, &Step::Poison),
            StepOutcome::Poisoned(1)
        );
        let outcome = transition(&setup, &mut world, &consume(Some(Crash::BeforeCommit)));
        assert!(matches!(
            outcome,
            StepOutcome::Handled(Handled { decision: None, .. })
        ));
        assert_eq!(
            transition(&setup, &mut world, &consume(None)),
            StepOutcome::ConsumerDown(c1.clone())
        );
        let recover = Step::Recover {
            consumer: c1.clone(),
            crash: None,
        };
        let StepOutcome::Handled(handled) = transition(&setup, &mut world, &recover) else {
            panic!("the pending entry is read again");
        };
        assert_eq!(handled.deliveries, 2);
        assert!(matches!(
            handled.decision,
            Some(Decision::DeadLetter { .. })
        ));
        assert!(handled.acknowledged && world.is_drained());
        assert_eq!(world.dead_letter.keys().collect::<Vec<_>>(), [&1]);
    }
}
