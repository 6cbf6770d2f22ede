//! The facts oracle of `arrival conform`, pure (the clock is passed in): the actions
//! arrival takes against a facts receiver, the bytes it sends for each (a request valid in
//! the fixture is re-signed for the receiver's real clock, keeping its age), the receiver's
//! state normalised (facts by identity and content, open conflicts, READY, what is still
//! owed, dead letters), and the set of model worlds consistent with every answer and every
//! settled state, with the property a mismatch pins, or `diverged`.

use super::envelope::{parse_json_object, Envelope, Source};
use super::fixture::{response_from_parts, Scenario};
use super::ingress::{
    admit, sign, sign_standard, Admission, Key, Reason, Request, Response, Scheme, WebhookHeaders,
};
use super::property::Property;
use super::step::{Consumer, PostFault, Step};
use super::world::{transition, PostedRequest, StepOutcome, World};
use crate::harness::conform::{walk_generator, Candidates};
use crate::harness::timestamp::{format_rfc3339, parse_rfc3339};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Which bytes a post sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bytes {
    /// The fixture's request re-signed now, its age kept (a sender's retry).
    Resigned,
    /// The bytes and headers of this request's last attempt again (an exact resend).
    Exact,
    /// The same content in other bytes (keys sorted, other whitespace), re-signed now.
    Reencoded,
}

/// What goes wrong with a post.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// The whole answer is read, then dropped: the sender posts again later.
    LostAnswer,
    /// The connection is closed right after sending: indefinite.
    Disconnect,
    /// The receiver's process group is killed just after sending, then restarted:
    /// indefinite.
    KillInFlight,
    /// The receiver's process group is killed right after its answer, then restarted: what
    /// was answered must stand.
    KillAfterAnswer,
}

/// One thing arrival does to a facts receiver (a misspelt key is an error, not a plain
/// post).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    /// Post a fixture request.
    Post {
        /// The request number.
        request: u32,
        /// Which bytes.
        bytes: Bytes,
        /// What goes wrong, if anything.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fault: Option<Fault>,
    },
    /// Kill the receiver's process group between steps and start it again on the same
    /// data: nothing may change.
    Restart,
}

impl Action {
    /// A plain post of `request`, re-signed.
    pub fn post(request: u32) -> Action {
        Action::Post {
            request,
            bytes: Bytes::Resigned,
            fault: None,
        }
    }
}

/// The action in words.
pub fn describe_action(action: &Action) -> String {
    match action {
        Action::Post {
            request,
            bytes,
            fault,
        } => {
            let bytes = match bytes {
                Bytes::Resigned => "",
                Bytes::Exact => " exact copy",
                Bytes::Reencoded => " re-encoded",
            };
            let fault = match fault {
                None => "",
                Some(Fault::LostAnswer) => " (answer lost)",
                Some(Fault::Disconnect) => " (disconnected)",
                Some(Fault::KillInFlight) => " (killed in flight)",
                Some(Fault::KillAfterAnswer) => " (killed after the answer)",
            };
            format!("post #{request}{bytes}{fault}")
        }
        Action::Restart => "restart".into(),
    }
}

/// A request as it goes on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wire {
    /// Header names and values.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Wire {
    /// A header's value (names compared without case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The request as ingress reads it.
    pub fn request(&self) -> Request<'_> {
        let webhook = WebhookHeaders {
            id: self.header("webhook-id"),
            timestamp: self.header("webhook-timestamp"),
            signature: self.header("webhook-signature"),
        };
        Request {
            source: self.header("x-acme-source"),
            signature: self.header("x-acme-signature"),
            webhook: (webhook != WebhookHeaders::default()).then_some(webhook),
            body: &self.body,
        }
    }
}

/// What the receiver answered to a post.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A contract answer: status and reason word.
    Definite(Response),
    /// A contract status (202, 400, 413) without a reason arrival can read.
    Status(u16),
    /// No answer, or one outside the contract (a reset connection, a timeout, a 5xx): the
    /// request may or may not have entered the stream.
    Indefinite(String),
}

/// Reads an HTTP answer: `{"status": ...}` or `{"error": ...}` in the body gives the reason.
pub fn classify(status: u16, body: &[u8]) -> Answer {
    if !matches!(status, 202 | 400 | 413) {
        return Answer::Indefinite(format!("HTTP {status}"));
    }
    let value: Value = serde_json::from_slice(body).unwrap_or_default();
    let word = value
        .get("error")
        .or_else(|| value.get("status"))
        .and_then(Value::as_str);
    match word.and_then(|word| response_from_parts(status, word)) {
        Some(response) => Answer::Definite(response),
        None => Answer::Status(status),
    }
}

/// The key whose signature the request carries in the fixture (windows ignored), and its
/// source.
pub fn signing_key<'a>(
    scenario: &'a Scenario,
    posted: &PostedRequest,
) -> Option<(Source, &'a Key)> {
    let [id, stamp, tags] = &posted.webhook;
    scenario
        .setup
        .config
        .keys
        .iter()
        .flat_map(|(source, keys)| keys.iter().map(move |key| (*source, key)))
        .find(|(_, key)| match key.secret.scheme() {
            Scheme::Acme => {
                posted.signature.as_deref() == Some(&sign(key.secret.bytes(), &posted.body))
            }
            Scheme::StandardWebhooks => {
                let (Some(id), Some(stamp), Some(tags)) = (id, stamp, tags) else {
                    return false;
                };
                let Ok(stamp) = stamp.parse::<i64>() else {
                    return false;
                };
                let tag = sign_standard(key.secret.bytes(), id, stamp, &posted.body);
                tags.split(' ').any(|given| given == tag)
            }
        })
}

/// The request's age in the fixture: its receive time minus its `sent_at` (Standard
/// Webhooks: minus its `webhook-timestamp`).
pub fn age(posted: &PostedRequest, scheme: Scheme) -> Option<i64> {
    let sent = match scheme {
        Scheme::Acme => parse_json_object(&posted.body)
            .ok()?
            .get("sent_at")?
            .as_str()
            .and_then(parse_rfc3339)?,
        Scheme::StandardWebhooks => posted.webhook[1].as_deref()?.parse().ok()?,
    };
    Some(posted.received_at - sent)
}

/// Whether an exact copy of `posted`, sent `elapsed_ms` after the attempt whose bytes it
/// repeats, is judged on the real clock as the fixture judges the request: its age is
/// then the fixture's plus the time elapsed, and a copy that comes within `margin`
/// seconds of the freshness window's edge, or crosses it, is not (it would turn stale on
/// the way, which the model, at the fixture's time, does not see).
pub fn exact_copy_keeps_its_age(
    scenario: &Scenario,
    posted: &PostedRequest,
    elapsed_ms: i64,
    margin: i64,
) -> bool {
    let Some(age) =
        signing_key(scenario, posted).and_then(|(_, key)| age(posted, key.secret.scheme()))
    else {
        return true;
    };
    let freshness = scenario.setup.config.freshness_seconds;
    let later = age + (elapsed_ms.max(0) + 999) / 1000;
    let fresh = |age: i64| age.abs() <= freshness;
    fresh(age) == fresh(later) && (later.abs() - freshness).abs() > margin
}

/// The body with its top-level `sent_at` string replaced, every other byte kept.
pub fn with_sent_at(body: &[u8], sent_at: &str) -> Option<Vec<u8>> {
    let old = parse_json_object(body)
        .ok()?
        .get("sent_at")?
        .as_str()?
        .to_owned();
    let text = std::str::from_utf8(body).ok()?;
    let key = text.find("\"sent_at\"")?;
    let rest = &text[key + "\"sent_at\"".len()..];
    let quoted = serde_json::to_string(&old).ok()?;
    let at = rest.find(&quoted)?;
    if !rest[..at].chars().all(|c| c == ':' || c.is_whitespace()) {
        return None;
    }
    let start = key + "\"sent_at\"".len() + at;
    let mut out = text[..start].to_owned();
    out += &serde_json::to_string(sent_at).ok()?;
    out += &text[start + quoted.len()..];
    Some(out.into_bytes())
}

/// The same JSON in other bytes: keys sorted and indented (compact when that is what the
/// body was already). A body that is not JSON stays as it is.
pub fn reencode(body: &[u8]) -> Vec<u8> {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return body.to_vec();
    };
    let pretty = serde_json::to_vec_pretty(&value).expect("values serialise");
    if pretty != body {
        pretty
    } else {
        serde_json::to_vec(&value).expect("values serialise")
    }
}

/// An RFC 3339 time with milliseconds (`2026-12-02T09:00:00.125Z`).
pub fn format_millis(ms: i64) -> String {
    let seconds = format_rfc3339(ms.div_euclid(1000));
    let stem = seconds.strip_suffix('Z').unwrap_or(&seconds);
    format!("{stem}.{:03}Z", ms.rem_euclid(1000))
}

/// The request as it goes on the wire at the receiver's clock `now_ms` (Unix
/// milliseconds). A request whose signature is valid in the fixture is re-signed with its
/// `sent_at` (Standard Webhooks: its `webhook-timestamp`) moved to now minus its age in
/// the fixture; one that is bad on purpose goes as it is. `sent_at` carries milliseconds,
/// so two re-signed deliveries never share one by accident of the clock (a sender's retry
/// has its own `sent_at`, as in the fixture).
pub fn wire(scenario: &Scenario, posted: &PostedRequest, now_ms: i64, bytes: Bytes) -> Wire {
    let now = now_ms.div_euclid(1000);
    let mut headers: Vec<(String, String)> = Vec::new();
    let mut put = |name: &str, value: &Option<String>| {
        if let Some(value) = value {
            headers.push((name.to_owned(), value.clone()));
        }
    };
    let Some((source, key)) = signing_key(scenario, posted) else {
        put("X-Acme-Source", &posted.source);
        put("X-Acme-Signature", &posted.signature);
        let [id, stamp, tags] = &posted.webhook;
        put("Webhook-Id", id);
        put("Webhook-Timestamp", stamp);
        put("Webhook-Signature", tags);
        return Wire {
            headers,
            body: posted.body.clone(),
        };
    };
    let scheme = key.secret.scheme();
    let age = age(posted, scheme);
    match scheme {
        Scheme::Acme => {
            let mut body = age
                .and_then(|age| with_sent_at(&posted.body, &format_millis(now_ms - age * 1000)))
                .unwrap_or_else(|| posted.body.clone());
            if bytes == Bytes::Reencoded {
                body = reencode(&body);
            }
            let source = posted.source.clone().or(Some(source.as_str().to_owned()));
            put("X-Acme-Source", &source);
            put("X-Acme-Signature", &Some(sign(key.secret.bytes(), &body)));
            Wire { headers, body }
        }
        Scheme::StandardWebhooks => {
            let body = if bytes == Bytes::Reencoded {
                reencode(&posted.body)
            } else {
                posted.body.clone()
            };
            let [id, old_stamp, _] = &posted.webhook;
            let id = id.clone().unwrap_or_default();
            let stamp = match age {
                Some(age) => now - age,
                None => old_stamp
                    .as_deref()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(now),
            };
            put("X-Acme-Source", &posted.source);
            put("Webhook-Id", &Some(id.clone()));
            put("Webhook-Timestamp", &Some(stamp.to_string()));
            let tag = sign_standard(key.secret.bytes(), &id, stamp, &body);
            put("Webhook-Signature", &Some(tag));
            Wire { headers, body }
        }
    }
}

/// The fixture as the receiver is set up from it: its key windows left out (arrival
/// cannot move the receiver's clock into them).
pub fn target_fixture(raw: &super::fixture::RawFixture) -> super::fixture::RawFixture {
    let mut raw = raw.clone();
    for key in &mut raw.keys {
        key.not_before = None;
        key.not_after = None;
    }
    raw.schedule = None;
    raw.expect = None;
    raw.trace = None;
    raw
}

/// The requests arrival can play on the real clock, in number order, and why the others
/// cannot be: a request whose answer in the fixture depends on a key window, whose age
/// sits within `margin` seconds of the freshness window's edge, or whose re-signed (or
/// re-encoded) bytes the contract answers otherwise than the fixture's own (arrival's
/// rewriting would change what the request tests: a `sent_at` it cannot find, headers it
/// does not carry over).
pub fn playable(scenario: &Scenario, margin: i64) -> (Vec<u32>, Vec<String>) {
    let mut windowless = scenario.setup.config.clone();
    for keys in windowless.keys.values_mut() {
        for key in keys {
            key.not_before = None;
            key.not_after = None;
        }
    }
    let freshness = scenario.setup.config.freshness_seconds;
    let (mut ok, mut skipped) = (Vec::new(), Vec::new());
    for (number, posted) in &scenario.setup.requests {
        let at = posted.received_at;
        let apps = &scenario.applications;
        let answer = |config| match admit(&posted.request(), at, config, apps) {
            Admission::Accept(admitted) => admitted.response(),
            Admission::Reject(rejection) => rejection.response(),
        };
        if answer(&scenario.setup.config) != answer(&windowless) {
            skipped.push(format!(
                "request {number}: its answer depends on a key window, and arrival cannot move \
                 the receiver's clock"
            ));
            continue;
        }
        let edge = signing_key(scenario, posted)
            .and_then(|(_, key)| age(posted, key.secret.scheme()))
            .is_some_and(|age| (age.abs() - freshness).abs() <= margin);
        if edge {
            skipped.push(format!(
                "request {number}: its age is within {margin} s of the {freshness} s freshness \
                 window, too close to judge on a real clock"
            ));
            continue;
        }
        // Judged a long way from the fixture's time, as the real clock will be.
        let later = at + 1_000_000;
        let changed = [Bytes::Resigned, Bytes::Reencoded]
            .into_iter()
            .find(|&bytes| {
                let sent = wire(scenario, posted, later * 1000, bytes);
                let got = match admit(&sent.request(), later, &windowless, apps) {
                    Admission::Accept(admitted) => admitted.response(),
                    Admission::Reject(rejection) => rejection.response(),
                };
                got != answer(&windowless)
            });
        if let Some(bytes) = changed {
            skipped.push(format!(
                "request {number}: its {} bytes get another answer than the fixture's, so \
                 arrival cannot play it on a real clock without changing what it tests",
                match bytes {
                    Bytes::Reencoded => "re-encoded",
                    _ => "re-signed",
                }
            ));
            continue;
        }
        ok.push(*number);
    }
    (ok, skipped)
}

/// A facts receiver's state, normalised: what `arrival conform` compares.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FactsState {
    /// `tenant/source/event_id` -> the fact's content (canonical, without `sent_at`).
    pub facts: BTreeMap<String, String>,
    /// Applications (by label) with an open conflict.
    pub open_conflicts: BTreeSet<String>,
    /// READY per application (by label).
    pub ready: BTreeMap<String, bool>,
    /// Entries not yet acknowledged: pending, or not yet delivered.
    pub pending: usize,
    /// Dead letters.
    pub dead_letters: usize,
}

fn identity(envelope: &Envelope) -> String {
    let id = envelope.fact_id();
    format!("{}/{}/{}", id.tenant_id, id.source, id.event_id)
}

impl FactsState {
    /// Reads a state document (docs/conform.md): `fact_contents` (`source`, `event_id`,
    /// `content`: the envelope's JSON text), `applications` (`tenant_id`,
    /// `application_id`, `ready`, `open_conflict`), `pending` and optionally
    /// `dead_letters`.
    pub fn from_status(doc: &Value, scenario: &Scenario) -> Result<FactsState, String> {
        let field = |name: &str| {
            doc.get(name)
                .ok_or_else(|| format!("no `{name}` in the state document"))
        };
        let mut state = FactsState::default();
        let facts = field("fact_contents")?
            .as_array()
            .ok_or("`fact_contents` is not a list")?;
        for (n, fact) in facts.iter().enumerate() {
            let text = |name: &str| {
                fact.get(name)
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("fact_contents[{n}]: no string `{name}`"))
            };
            let source = Source::from_wire(text("source")?)
                .ok_or_else(|| format!("fact_contents[{n}]: unknown source"))?;
            let envelope = Envelope::parse(text("content")?.as_bytes(), source)
                .map_err(|error| format!("fact_contents[{n}]: not an envelope: {error:?}"))?;
            if envelope.event_id() != text("event_id")? {
                return Err(format!(
                    "fact_contents[{n}]: `event_id` differs from its content"
                ));
            }
            state
                .facts
                .insert(identity(&envelope), envelope.content().to_owned());
        }
        let apps = field("applications")?
            .as_array()
            .ok_or("`applications` is not a list")?;
        for (n, app) in apps.iter().enumerate() {
            let text = |name: &str| {
                app.get(name)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| format!("applications[{n}]: no string `{name}`"))
            };
            let flag = |name: &str| {
                app.get(name)
                    .and_then(Value::as_bool)
                    .ok_or_else(|| format!("applications[{n}]: no boolean `{name}`"))
            };
            let label = scenario.label(&super::application::AppKey {
                tenant_id: text("tenant_id")?,
                application_id: text("application_id")?,
            });
            state.ready.insert(label.clone(), flag("ready")?);
            if flag("open_conflict")? {
                state.open_conflicts.insert(label);
            }
        }
        let count = |name: &str, value: &Value| {
            value
                .as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| format!("`{name}` is not a count"))
        };
        state.pending = count("pending", field("pending")?)?;
        if let Some(dead) = doc.get("dead_letters") {
            state.dead_letters = count("dead_letters", dead)?;
        }
        Ok(state)
    }

    /// A model world's state in the same terms.
    pub fn of_world(world: &World, scenario: &Scenario) -> FactsState {
        FactsState {
            facts: world
                .inbox
                .facts()
                .map(|fact| (identity(fact), fact.content().to_owned()))
                .collect(),
            open_conflicts: world
                .inbox
                .open_conflicts()
                .iter()
                .map(|key| scenario.label(key))
                .collect(),
            ready: world
                .applications
                .iter()
                .map(|(key, _)| (scenario.label(key), world.inbox.marked_ready(key)))
                .collect(),
            pending: world.pending.len() + (world.stream.len() - world.last_delivered as usize),
            dead_letters: world.dead_letter.len(),
        }
    }

    /// Where `real` differs from this (expected) state, in words.
    pub fn differences(&self, real: &FactsState) -> Vec<String> {
        let mut out = Vec::new();
        let ids: BTreeSet<&String> = self.facts.keys().chain(real.facts.keys()).collect();
        for id in ids {
            match (self.facts.get(id), real.facts.get(id)) {
                (Some(_), None) => out.push(format!("fact {id}: expected, missing")),
                (None, Some(_)) => out.push(format!("fact {id}: not expected, present")),
                (Some(a), Some(b)) if a != b => {
                    out.push(format!("fact {id}: content {b}, expected {a}"))
                }
                _ => {}
            }
        }
        if self.open_conflicts != real.open_conflicts {
            out.push(format!(
                "open conflicts: {:?}, expected {:?}",
                real.open_conflicts, self.open_conflicts
            ));
        }
        for (app, ready) in &self.ready {
            let seen = real.ready.get(app);
            if seen != Some(ready) {
                out.push(format!(
                    "READY {app}: {}, expected {ready}",
                    seen.map_or("absent".into(), |r| r.to_string())
                ));
            }
        }
        for app in real
            .ready
            .keys()
            .filter(|app| !self.ready.contains_key(*app))
        {
            out.push(format!("application {app}: not in the fixture"));
        }
        if self.pending != real.pending {
            out.push(format!(
                "not acknowledged: {}, expected {}",
                real.pending, self.pending
            ));
        }
        if self.dead_letters != real.dead_letters {
            out.push(format!(
                "dead letters: {}, expected {}",
                real.dead_letters, self.dead_letters
            ));
        }
        out
    }
}

/// The properties a run can name a failure by, besides `diverged`: the ones
/// [`name_state`] and [`name_answer`] give.
pub const NAMEABLE: [Property; 7] = [
    Property::NoLoss,
    Property::RetryInvisible,
    Property::ConflictVisible,
    Property::ReadySound,
    Property::ReadyConverges,
    Property::TenantIsolated,
    Property::Correlated,
];

/// The property an observed state breaks against every expected one, or `diverged`. A
/// name is given only when every candidate world agrees on what pins it.
pub fn name_state(real: &FactsState, expected: &[FactsState]) -> &'static str {
    let all =
        |check: &dyn Fn(&FactsState) -> bool| !expected.is_empty() && expected.iter().all(check);
    // A delivered fact that every candidate holds and the receiver does not.
    let lost = expected.first().is_some_and(|first| {
        first
            .facts
            .keys()
            .any(|id| !real.facts.contains_key(id) && all(&|e| e.facts.contains_key(id)))
    });
    if lost || all(&|e| e.pending == 0) && real.pending > 0 {
        return "no-loss";
    }
    let same_facts = all(&|e| e.facts == real.facts);
    let apps: BTreeSet<&String> = real.ready.keys().collect();
    for app in &apps {
        let open = real.open_conflicts.contains(*app);
        if open && all(&|e| !e.open_conflicts.contains(*app)) {
            // Every candidate saw one content per identity: a retry became a conflict.
            return "retry-invisible";
        }
        if !open && all(&|e| e.open_conflicts.contains(*app)) {
            return "conflict-visible";
        }
    }
    let same_conflicts = all(&|e| e.open_conflicts == real.open_conflicts);
    if same_facts && same_conflicts {
        for app in apps {
            let ready = real.ready[app];
            if ready && all(&|e| e.ready.get(app) == Some(&false)) {
                return "ready-sound";
            }
            if !ready && all(&|e| e.ready.get(app) == Some(&true)) {
                return "ready-converges";
            }
        }
    }
    "diverged"
}

/// The property a definite answer breaks, given the model's answer, or `diverged`.
pub fn name_answer(expected: Response, real: &Answer) -> &'static str {
    let admitted = match real {
        Answer::Definite(response) => response.is_admitted(),
        Answer::Status(status) => *status == 202,
        Answer::Indefinite(_) => false,
    };
    match expected {
        Response::Rejected(Reason::TenantNotAllowed) => "tenant-isolated",
        Response::Rejected(Reason::BusinessKeyMismatch | Reason::MaterialVersionMismatch)
            if admitted =>
        {
            "correlated"
        }
        _ => "diverged",
    }
}

/// Why the candidate worlds ran out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The property, or `diverged`.
    pub property: String,
    /// What was expected and what was seen.
    pub detail: String,
}

/// The model worlds consistent with every answer and settled state so far.
pub struct Oracle<'a> {
    scenario: &'a Scenario,
    candidates: Candidates<World>,
}

fn response_of(outcome: &StepOutcome) -> Option<Response> {
    match outcome {
        StepOutcome::Posted { response, .. } => Some(*response),
        _ => None,
    }
}

fn fits(answer: &Answer, response: Response) -> bool {
    match answer {
        Answer::Definite(seen) => *seen == response,
        Answer::Status(status) => *status == response.status(),
        Answer::Indefinite(_) => true,
    }
}

impl<'a> Oracle<'a> {
    /// The fixture's start: its applications, nothing in the stream or the inbox.
    pub fn new(scenario: &'a Scenario) -> Oracle<'a> {
        Oracle {
            scenario,
            candidates: Candidates::new(World::initial(scenario.applications.clone())),
        }
    }

    /// The candidate worlds.
    pub fn worlds(&self) -> &[World] {
        self.candidates.worlds()
    }

    /// What the receiver should hold at the start.
    pub fn initial_state(&self) -> FactsState {
        FactsState::of_world(
            &World::initial(self.scenario.applications.clone()),
            self.scenario,
        )
    }

    /// A post of `request` answered `answer`: a definite answer moves every world and
    /// keeps those that answer the same; an indefinite one forks each world into "not
    /// appended" and "appended".
    pub fn post(&mut self, request: u32, answer: &Answer) -> Result<(), Mismatch> {
        let step = Step::Post {
            request,
            fault: None,
        };
        let setup = &self.scenario.setup;
        let mut next = Vec::new();
        let mut expected = None;
        for world in self.candidates.worlds() {
            let mut moved = world.clone();
            let response = response_of(&transition(setup, &mut moved, &step));
            if let Answer::Indefinite(_) = answer {
                next.push(world.clone());
            }
            match response {
                Some(response) if fits(answer, response) => next.push(moved),
                Some(response) => expected = Some(response),
                None => {}
            }
        }
        if next.is_empty() {
            let expected = expected.expect("a post answers in every world");
            let seen = match answer {
                Answer::Definite(response) => {
                    format!("{} {}", response.status(), response.reason())
                }
                Answer::Status(status) => format!("{status} (no reason word)"),
                Answer::Indefinite(why) => why.clone(),
            };
            return Err(Mismatch {
                property: name_answer(expected, answer).to_owned(),
                detail: format!(
                    "request {request}: the receiver answered {seen}; the contract answers {} {}",
                    expected.status(),
                    expected.reason()
                ),
            });
        }
        self.candidates = Candidates::of(next);
        Ok(())
    }

    /// The receiver settled in `real`: each world is drained (its consumer decides every
    /// entry in stream order) and those whose state is `real` are kept.
    pub fn settle(&mut self, real: &FactsState) -> Result<(), Mismatch> {
        let scenario = self.scenario;
        let drained: Vec<(World, FactsState)> = self
            .candidates
            .worlds()
            .iter()
            .map(|world| {
                let world = drain(scenario, world);
                let state = FactsState::of_world(&world, scenario);
                (world, state)
            })
            .collect();
        // The answers given and the requests owed are history the state does not show:
        // forgotten, so worlds that differ only there become one.
        let kept: Vec<World> = drained
            .iter()
            .filter(|(_, state)| state == real)
            .map(|(world, _)| World {
                responses: Vec::new(),
                owed: BTreeSet::new(),
                ..world.clone()
            })
            .collect();
        if !kept.is_empty() {
            self.candidates = Candidates::of(kept);
            return Ok(());
        }
        let expected: Vec<FactsState> = drained.into_iter().map(|(_, state)| state).collect();
        let closest = expected
            .iter()
            .min_by_key(|state| state.differences(real).len())
            .expect("at least one world");
        Err(Mismatch {
            property: name_state(real, &expected).to_owned(),
            detail: format!(
                "the settled state is none of the {} the model allows; against the closest:\n  {}",
                expected.len(),
                closest.differences(real).join("\n  ")
            ),
        })
    }
}

/// The world once its consumer has decided every entry, in stream order.
pub fn drain(scenario: &Scenario, world: &World) -> World {
    let setup = &scenario.setup;
    let consumer = Consumer(super::fixture::DEFAULT_CONSUMER.into());
    let step = Step::Consume {
        consumer: consumer.clone(),
        crash: None,
    };
    let mut world = world.clone();
    let bound = (world.stream.len() + 1) * (setup.max_deliveries as usize + 1);
    for _ in 0..bound {
        if world.is_drained() || !world.has_work(setup, &consumer) {
            break;
        }
        transition(setup, &mut world, &step);
    }
    world
}

/// The fixture's own schedule as actions: posts (a lost answer kept), consumer steps left
/// to the receiver, a consumer crash as a restart. `Err` names a step arrival cannot play.
pub fn schedule_actions(steps: &[Step], playable: &[u32]) -> Result<Vec<Action>, String> {
    let mut out = Vec::new();
    for step in steps {
        match step {
            Step::Post { request, fault } => {
                if !playable.contains(request) {
                    return Err(format!("request {request} cannot be played"));
                }
                out.push(Action::Post {
                    request: *request,
                    bytes: Bytes::Resigned,
                    fault: match fault {
                        None => None,
                        Some(PostFault::ResponseLost) => Some(Fault::LostAnswer),
                        Some(PostFault::StreamUnavailable) => {
                            return Err("a stream-unavailable post (arrival cannot stop the \
                                        receiver's stream)"
                                .into())
                        }
                    },
                });
            }
            Step::Consume { crash, .. }
            | Step::Recover { crash, .. }
            | Step::Claim { crash, .. } => {
                if crash.is_some() {
                    out.push(Action::Restart);
                }
            }
            Step::Poison | Step::Undecidable { .. } => {
                return Err("an entry written straight into the stream".into())
            }
            Step::Register { .. }
            | Step::Upgrade { .. }
            | Step::Terminate { .. }
            | Step::Resolve { .. }
            | Step::ExpireQuarantine { .. } => {
                return Err("an operator step (no operator channel to the receiver yet)".into())
            }
        }
    }
    Ok(out)
}

/// The model steps a schedule of actions shows: each post (a lost answer as
/// `response_lost`, an indefinite one taken as appended with its answer lost), each
/// followed by one consumer step; a restart is nothing.
pub fn model_steps(actions: &[Action]) -> Vec<Step> {
    let consume = Step::Consume {
        consumer: Consumer(super::fixture::DEFAULT_CONSUMER.into()),
        crash: None,
    };
    let mut steps = Vec::new();
    for action in actions {
        if let Action::Post { request, fault, .. } = action {
            steps.push(Step::Post {
                request: *request,
                fault: match fault {
                    None | Some(Fault::KillAfterAnswer) => None,
                    Some(_) => Some(PostFault::ResponseLost),
                },
            });
            steps.push(consume.clone());
        }
    }
    steps
}

/// How many faults a walk may add.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkBudgets {
    /// Lost answers and disconnects (the sender posts again).
    pub lost: u8,
    /// Kills: in flight, right after an answer, or between steps.
    pub kills: u8,
    /// Extra copies of an answered request (exact or re-encoded).
    pub copies: u8,
}

/// Walk `walk` under `seed`: every playable request posted once in a random order, each
/// with maybe a fault within the budgets; a request whose answer was lost or indefinite is
/// posted again (re-signed, exact or re-encoded); extra copies and restarts in between.
pub fn walk_actions(requests: &[u32], budgets: WalkBudgets, seed: u64, walk: usize) -> Vec<Action> {
    let mut rng = walk_generator(seed, walk);
    let mut unsent: Vec<u32> = requests.to_vec();
    let (mut owed, mut answered): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
    let mut left = budgets;
    let mut out = Vec::new();
    let bytes_of = |n: usize| [Bytes::Resigned, Bytes::Exact, Bytes::Reencoded][n];
    while !unsent.is_empty() || !owed.is_empty() {
        let mut kinds = Vec::new();
        if !unsent.is_empty() {
            kinds.push(0);
        }
        if !owed.is_empty() {
            kinds.push(1);
        }
        if left.copies > 0 && !answered.is_empty() {
            kinds.push(2);
        }
        if left.kills > 0 {
            kinds.push(3);
        }
        let (request, bytes) = match kinds[rng.scaled_below(kinds.len())] {
            0 => (
                unsent.remove(rng.scaled_below(unsent.len())),
                Bytes::Resigned,
            ),
            1 => (
                owed.remove(rng.scaled_below(owed.len())),
                bytes_of(rng.scaled_below(3)),
            ),
            2 => {
                left.copies -= 1;
                let request = answered[rng.scaled_below(answered.len())];
                out.push(Action::Post {
                    request,
                    bytes: bytes_of(1 + rng.scaled_below(2)),
                    fault: None,
                });
                continue;
            }
            _ => {
                left.kills -= 1;
                out.push(Action::Restart);
                continue;
            }
        };
        let mut faults = Vec::new();
        if left.lost > 0 {
            faults.extend([Fault::LostAnswer, Fault::Disconnect]);
        }
        if left.kills > 0 {
            faults.extend([Fault::KillInFlight, Fault::KillAfterAnswer]);
        }
        let fault =
            (!faults.is_empty() && rng.chance(0.4)).then(|| faults[rng.scaled_below(faults.len())]);
        match fault {
            Some(Fault::LostAnswer | Fault::Disconnect) => left.lost -= 1,
            Some(Fault::KillInFlight | Fault::KillAfterAnswer) => left.kills -= 1,
            None => {}
        }
        if matches!(
            fault,
            Some(Fault::LostAnswer | Fault::Disconnect | Fault::KillInFlight)
        ) {
            owed.push(request);
        } else if !answered.contains(&request) {
            answered.push(request);
        }
        out.push(Action::Post {
            request,
            bytes,
            fault,
        });
    }
    out
}
