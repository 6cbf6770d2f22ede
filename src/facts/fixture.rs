//! Facts fixture files (top-level `"protocol": "facts"`) read, validated and turned into a
//! typed [`Scenario`]; every bad input is an [`InputError`] naming the file, the JSON path
//! and the problem.
//!
//! Without a `schedule`, replay posts every request in file order, then lets consumer `c1`
//! consume until the stream is drained (every entry delivered and acknowledged).
//!
//! Keys are written either as version 1's `secrets` (source -> list of secrets: keys for
//! every tenant, always active, named `<source>-<n>`) or as contract v2's `keys` (each with
//! an id, a source, a secret, optional `tenants` and an optional `not_before` /
//! `not_after` window). A request may say `"sign": "<key id>"` instead of carrying its
//! signature header: the loader signs its body (and, under Standard Webhooks, its
//! `webhook-id` and `webhook-timestamp`) with that key.

use super::application::{AppKey, Application, Applications};
use super::envelope::{FactId, Source};
use super::ingress::{
    sign, sign_standard, IngressConfig, Key, Reason, Response, Scheme, Secret, Tenants,
    DEFAULT_MAX_BODY_BYTES,
};
use super::mutants::Mutant;
use super::operator::DEFAULT_QUARANTINE_SECONDS;
use super::property::Property;
use super::step::{Consumer, Crash, Keep, PostFault, Step};
use super::world::{PostedRequest, Setup, DEFAULT_MAX_DELIVERIES};
use crate::harness::input::InputError;
use crate::harness::model_file::TraceOrigin;
use crate::harness::timestamp::parse_rfc3339;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The only value of the top-level `protocol` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Protocol {
    /// The application-facts protocol.
    #[serde(rename = "facts")]
    Facts,
}

/// An application as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApplication {
    /// The tenant.
    pub tenant_id: String,
    /// The application id (unique within the tenant).
    pub application_id: String,
    /// The business key.
    pub business_key: String,
    /// The current material version (>= 1).
    pub material_version: u64,
}

/// A key as written (contract v2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKey {
    /// Its id, unique in the fixture.
    pub id: String,
    /// The source it signs for.
    pub source: Source,
    /// The secret: text for `acme`, `whsec_<base64>` for Standard Webhooks.
    pub secret: String,
    /// The tenants it may report for; absent: every tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants: Option<Vec<String>>,
    /// Not active before (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// Not active after (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<String>,
}

/// A termination as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTerminate {
    /// The application id.
    pub application: String,
    /// Its tenant: needed only when two tenants use the same application id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// Why.
    pub reason: String,
    /// When (RFC 3339).
    pub at: String,
}

/// A conflict resolution as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawResolve {
    /// The identity's tenant.
    pub tenant_id: String,
    /// The identity's source.
    pub source: Source,
    /// The identity's event id.
    pub event_id: String,
    /// `"first"` or `"variant"`.
    pub keep: String,
    /// With `"variant"`: the request whose content to keep (needed when several variants
    /// are recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant_request: Option<u32>,
    /// Why.
    pub reason: String,
}

/// The headers the contract reads: `acme`'s two, or Standard Webhooks' three (with
/// `X-Acme-Source` as the route's source, optional).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHeaders {
    /// `webhook-id`.
    #[serde(
        rename = "webhook-id",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub webhook_id: Option<String>,
    /// `webhook-timestamp`.
    #[serde(
        rename = "webhook-timestamp",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub webhook_timestamp: Option<String>,
    /// `webhook-signature`.
    #[serde(
        rename = "webhook-signature",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub webhook_signature: Option<String>,
    /// `X-Acme-Source`.
    #[serde(
        rename = "X-Acme-Source",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub source: Option<String>,
    /// `X-Acme-Signature`.
    #[serde(
        rename = "X-Acme-Signature",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub signature: Option<String>,
}

/// A request as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRequest {
    /// Its number, unique in the fixture.
    pub request: u32,
    /// The receiver's clock when it arrives (RFC 3339).
    pub received_at: String,
    /// For people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// This request is the sender's retry of request N, re-signed (a later `sent_at` or
    /// `webhook-timestamp`, received later: the model's clock moves for it). A model sends
    /// it only in place of a resend of N that the sender owes; replay sends it where a
    /// schedule (or the file order) says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resends: Option<u32>,
    /// Its headers.
    #[serde(default)]
    pub headers: RawHeaders,
    /// Sign the request with this key id (its signature header is computed at load).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sign: Option<String>,
    /// The body, byte for byte (as UTF-8).
    pub body: String,
}

/// An upgrade step's target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpgrade {
    /// The application id.
    pub application: String,
    /// Its tenant: needed only when two tenants use the same application id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// The new material version.
    pub material_version: u64,
}

/// One schedule step as written: exactly one of `post`, `consume`, `recover`, `claim`,
/// `upgrade`, `poison`, with its modifiers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStep {
    /// Post this request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post: Option<u32>,
    /// With `post`: the answer never reaches the sender.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub response_lost: bool,
    /// With `post`: the stream cannot be written (503).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream_unavailable: bool,
    /// This consumer consumes one entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consume: Option<String>,
    /// This consumer restarts and re-reads its own pending entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recover: Option<String>,
    /// This consumer takes over an entry pending in another one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    /// With `consume`, `recover` or `claim`: where the consumer crashes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash: Option<Crash>,
    /// A material upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<RawUpgrade>,
    /// An unparseable entry written straight into the stream.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub poison: bool,
    /// This request's envelope written into the stream as an entry whose decision fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undecidable: Option<u32>,
    /// An operator registers this application.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub register: Option<RawApplication>,
    /// An operator terminates an application.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminate: Option<RawTerminate>,
    /// A person resolves a conflict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolve: Option<RawResolve>,
    /// The quarantine is swept at this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_quarantine: Option<String>,
}

/// What replay checks at the end; every field is optional.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExpect {
    /// Request number -> `[status, reason]` of its last answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responses: Option<BTreeMap<String, (u16, String)>>,
    /// The facts held, as `[source, event_id]` pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<Vec<(Source, String)>>,
    /// Deliveries decided `duplicate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicates: Option<u32>,
    /// Deliveries decided `conflict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflicts: Option<u32>,
    /// Deliveries decided `late_mismatch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_mismatches: Option<u32>,
    /// Application id -> READY.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<BTreeMap<String, bool>>,
    /// Entries still pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<usize>,
    /// Entry ids in the dead-letter stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<Vec<u32>>,
    /// Entries still quarantined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined: Option<usize>,
    /// Entries whose quarantine expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine_expired: Option<usize>,
    /// Entries kept as `after_termination`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_termination: Option<usize>,
    /// Applications with an open conflict, by label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_conflicts: Option<Vec<String>>,
}

/// A facts fixture as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFixture {
    /// Always `"facts"`.
    pub protocol: Protocol,
    /// A short name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Version 1's keys: each source's secrets, each for every tenant, always active.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<Source, Vec<String>>,
    /// Contract v2's keys (beside or instead of `secrets`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<RawKey>,
    /// How long an entry stays quarantined before a sweep expires it, in seconds (default
    /// 259200, 72 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine_seconds: Option<u32>,
    /// The applications at the start.
    pub applications: Vec<RawApplication>,
    /// The freshness window in seconds (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freshness_seconds: Option<u32>,
    /// Deliveries before an unprocessable entry is dead-lettered (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_deliveries: Option<u32>,
    /// The body size limit in bytes (default 65536).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<u32>,
    /// The requests.
    pub requests: Vec<RawRequest>,
    /// One explicit order of steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Vec<RawStep>>,
    /// Where a counterexample fixture came from (written by `check --trace-out`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceOrigin>,
    /// What replay checks at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<RawExpect>,
}

/// The expectation, typed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expect {
    /// Request number -> its last answer.
    pub responses: Option<BTreeMap<u32, Response>>,
    /// The facts held, sorted.
    pub facts: Option<Vec<(Source, String)>>,
    /// Duplicate deliveries.
    pub duplicates: Option<u32>,
    /// Conflict deliveries.
    pub conflicts: Option<u32>,
    /// Late-mismatch deliveries.
    pub late_mismatches: Option<u32>,
    /// Application label -> READY.
    pub ready: Option<BTreeMap<String, bool>>,
    /// Entries still pending.
    pub pending: Option<usize>,
    /// Dead-lettered entry ids, sorted.
    pub dead_letter: Option<Vec<u32>>,
    /// Entries still quarantined.
    pub quarantined: Option<usize>,
    /// Entries whose quarantine expired.
    pub quarantine_expired: Option<usize>,
    /// Entries kept as `after_termination`.
    pub after_termination: Option<usize>,
    /// Applications with an open conflict, by label, sorted.
    pub open_conflicts: Option<Vec<String>>,
}

/// A facts fixture, validated.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The file it came from.
    pub file: PathBuf,
    /// Its name.
    pub name: String,
    /// Ingress setup, requests, poison budget; the contract's policy unless a caller sets
    /// one.
    pub setup: Setup<Option<Mutant>>,
    /// The applications at the start.
    pub applications: Applications,
    /// How reports name each application: its id, or `tenant/id` when two tenants share
    /// the id.
    pub labels: BTreeMap<AppKey, String>,
    /// The explicit schedule, if any.
    pub schedule: Option<Vec<Step>>,
    /// Where it came from, for a counterexample fixture.
    pub trace: Option<TraceOrigin>,
    /// What replay checks.
    pub expect: Option<Expect>,
}

/// The consumer of the default order.
pub const DEFAULT_CONSUMER: &str = "c1";

/// Whether `text` is a facts fixture: a JSON object whose `protocol` is `"facts"`.
pub fn declares_facts(text: &str) -> bool {
    serde_json::from_str::<Value>(text)
        .is_ok_and(|value| value.get("protocol").and_then(Value::as_str) == Some("facts"))
}

/// Whether the file at `path` is a facts fixture (false when it cannot be read: the
/// caller's own reading reports that).
pub fn is_facts_file(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|text| declares_facts(&text))
}

impl Scenario {
    /// Reads and validates a facts fixture file.
    pub fn load(file: &Path) -> Result<Scenario, InputError> {
        let text = crate::harness::input::read_text(file)?;
        Scenario::parse(file, &text)
    }

    /// Parses and validates fixture text; `file` names it in errors.
    pub fn parse(file: &Path, text: &str) -> Result<Scenario, InputError> {
        let raw: RawFixture = crate::harness::input::parse_json(
            file,
            text,
            "a facts fixture is a JSON object with `protocol`, `secrets`, `applications` and `requests`",
        )?;
        Scenario::from_raw(file, &raw)
    }

    /// Validates a fixture already read.
    pub fn from_raw(file: &Path, raw: &RawFixture) -> Result<Scenario, InputError> {
        let bad = |place: String, message: String| InputError::invalid(file, place, message);
        let keys = typed_keys(raw).map_err(|(place, message)| bad(place, message))?;
        let mut applications = Applications::new();
        for (index, app) in raw.applications.iter().enumerate() {
            let place = |field: &str| format!("applications[{index}].{field}");
            for (field, value) in [
                ("tenant_id", &app.tenant_id),
                ("application_id", &app.application_id),
                ("business_key", &app.business_key),
            ] {
                if value.is_empty() {
                    return Err(bad(place(field), "must not be empty".into()));
                }
            }
            if app.material_version == 0 {
                return Err(bad(
                    place("material_version"),
                    "material versions start at 1".into(),
                ));
            }
            let key = AppKey {
                tenant_id: app.tenant_id.clone(),
                application_id: app.application_id.clone(),
            };
            let application = Application::active(&app.business_key, app.material_version);
            if applications.insert(key.clone(), application).is_some() {
                return Err(bad(
                    place("application_id"),
                    format!("application {key} is listed twice"),
                ));
            }
        }
        let mut named = applications.clone();
        for step in raw.schedule.iter().flatten() {
            if let Some(app) = &step.register {
                let key = AppKey {
                    tenant_id: app.tenant_id.clone(),
                    application_id: app.application_id.clone(),
                };
                if named.get(&key).is_none() {
                    named.insert(key, Application::active(&app.business_key, 1));
                }
            }
        }
        let labels = labels(&named);
        let mut requests = BTreeMap::new();
        for (index, request) in raw.requests.iter().enumerate() {
            let received_at = parse_rfc3339(&request.received_at).ok_or_else(|| {
                bad(
                    format!("requests[{index}].received_at"),
                    format!(
                        "`{}` is not an RFC 3339 time such as 2024-06-03T09:00:00Z",
                        request.received_at
                    ),
                )
            })?;
            let mut posted = PostedRequest {
                number: request.request,
                received_at,
                source: request.headers.source.clone(),
                signature: request.headers.signature.clone(),
                webhook: [
                    request.headers.webhook_id.clone(),
                    request.headers.webhook_timestamp.clone(),
                    request.headers.webhook_signature.clone(),
                ],
                resends: request.resends,
                body: request.body.as_bytes().to_vec(),
            };
            if let Some(id) = &request.sign {
                sign_request(&mut posted, &keys, id)
                    .map_err(|message| bad(format!("requests[{index}].sign"), message))?;
            }
            if requests.insert(request.request, posted).is_some() {
                return Err(bad(
                    format!("requests[{index}].request"),
                    format!("request number {} is used twice", request.request),
                ));
            }
        }
        for (index, request) in raw.requests.iter().enumerate() {
            let Some(original) = request.resends else {
                continue;
            };
            let problem = match requests.get(&original) {
                None => Some(format!(
                    "names request {original}, which the fixture does not have"
                )),
                Some(_) if original == request.request => {
                    Some("a request cannot resend itself".into())
                }
                Some(posted) if posted.resends.is_some() => Some(format!(
                    "request {original} is itself a resend: name the original"
                )),
                Some(_) => None,
            };
            if let Some(problem) = problem {
                return Err(bad(format!("requests[{index}].resends"), problem));
            }
        }
        let schedule = match &raw.schedule {
            None => None,
            Some(steps) => Some(
                steps
                    .iter()
                    .enumerate()
                    .map(|(index, step)| {
                        typed_step(step, &requests, &named).map_err(|(field, message)| {
                            let place = match field {
                                Some(field) => format!("schedule[{index}].{field}"),
                                None => format!("schedule[{index}]"),
                            };
                            bad(place, message)
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let expect = match &raw.expect {
            None => None,
            Some(expect) => Some(
                typed_expect(expect, &requests, &labels)
                    .map_err(|(field, message)| bad(format!("expect.{field}"), message))?,
            ),
        };
        let max_deliveries = raw.max_deliveries.unwrap_or(DEFAULT_MAX_DELIVERIES);
        if max_deliveries == 0 {
            return Err(bad(
                "max_deliveries".into(),
                "at least one delivery is needed".into(),
            ));
        }
        if let Some(origin) = &raw.trace {
            if origin.policy != "spec" {
                origin
                    .policy
                    .parse::<Mutant>()
                    .map_err(|message| bad("trace.policy".into(), message))?;
            }
            origin
                .violates
                .parse::<Property>()
                .map_err(|message| bad("trace.violates".into(), message))?;
        }
        let mut config = IngressConfig::with_keys(keys);
        config.freshness_seconds = raw
            .freshness_seconds
            .map_or(config.freshness_seconds, i64::from);
        config.max_body_bytes = raw
            .max_body_bytes
            .map_or(DEFAULT_MAX_BODY_BYTES, |limit| limit as usize);
        let name = raw.name.clone().unwrap_or_else(|| {
            file.file_stem().map_or_else(
                || "fixture".into(),
                |stem| stem.to_string_lossy().into_owned(),
            )
        });
        Ok(Scenario {
            file: file.to_owned(),
            name,
            setup: Setup {
                config,
                requests,
                max_deliveries,
                quarantine_seconds: raw
                    .quarantine_seconds
                    .map_or(DEFAULT_QUARANTINE_SECONDS, i64::from),
                mutant: None,
            },
            applications,
            labels,
            schedule,
            trace: raw.trace.clone(),
            expect,
        })
    }

    /// How reports name an application.
    pub fn label(&self, key: &AppKey) -> String {
        self.labels
            .get(key)
            .cloned()
            .unwrap_or_else(|| key.to_string())
    }
}

/// Each application's label: its id, or `tenant/id` when the id is not unique.
fn labels(applications: &Applications) -> BTreeMap<AppKey, String> {
    let mut uses: BTreeMap<&str, usize> = BTreeMap::new();
    for (key, _) in applications.iter() {
        *uses.entry(key.application_id.as_str()).or_default() += 1;
    }
    applications
        .iter()
        .map(|(key, _)| {
            let label = if uses[key.application_id.as_str()] == 1 {
                key.application_id.clone()
            } else {
                key.to_string()
            };
            (key.clone(), label)
        })
        .collect()
}

/// Keys by source.
pub type Keys = BTreeMap<Source, Vec<Key>>;

/// The fixture's keys: version 1's `secrets` and contract v2's `keys`, ids unique, no
/// secret used twice by one source.
fn typed_keys(raw: &RawFixture) -> Result<Keys, (String, String)> {
    keys_from(&raw.secrets, &raw.keys)
}

/// Keys as a fixture or a keys file writes them (version 1's `secrets` map, contract v2's
/// `keys` list, or both), validated; the error names the place and the problem.
pub fn keys_from(
    secrets: &BTreeMap<Source, Vec<String>>,
    raw_keys: &[RawKey],
) -> Result<Keys, (String, String)> {
    let mut keys: Keys = BTreeMap::new();
    for (source, secrets) in secrets {
        for (at, text) in secrets.iter().enumerate() {
            let place = format!("secrets.{source}[{at}]");
            let secret = Secret::from_config(text).map_err(|message| (place, message))?;
            let key = Key::unbound(format!("{source}-{}", at + 1), secret);
            keys.entry(*source).or_default().push(key);
        }
    }
    for (at, raw_key) in raw_keys.iter().enumerate() {
        let place = |field: &str| format!("keys[{at}].{field}");
        let secret =
            Secret::from_config(&raw_key.secret).map_err(|message| (place("secret"), message))?;
        let time = |field: &str, text: &Option<String>| match text {
            None => Ok(None),
            Some(text) => parse_rfc3339(text)
                .map(Some)
                .ok_or_else(|| (place(field), format!("`{text}` is not an RFC 3339 time"))),
        };
        let tenants = match &raw_key.tenants {
            None => Tenants::All,
            Some(list) if list.is_empty() => {
                return Err((place("tenants"), "a key for no tenant signs nothing".into()))
            }
            Some(list) => Tenants::Only(list.iter().cloned().collect()),
        };
        if raw_key.id.is_empty() {
            return Err((place("id"), "a key needs an id".into()));
        }
        let key = Key {
            id: raw_key.id.clone(),
            tenants,
            secret,
            not_before: time("not_before", &raw_key.not_before)?,
            not_after: time("not_after", &raw_key.not_after)?,
        };
        keys.entry(raw_key.source).or_default().push(key);
    }
    if keys.is_empty() {
        return Err((
            "keys".into(),
            "the fixture has no keys: give `keys` (contract v2) or `secrets` (version 1)".into(),
        ));
    }
    let mut ids = BTreeSet::new();
    for (source, list) in &keys {
        for (at, key) in list.iter().enumerate() {
            if !ids.insert(key.id.clone()) {
                return Err(("keys".into(), format!("key id `{}` is used twice", key.id)));
            }
            if list[..at].iter().any(|other| other.secret == key.secret) {
                return Err((
                    "keys".into(),
                    format!("two keys of `{source}` share a secret (`{}`)", key.id),
                ));
            }
        }
    }
    Ok(keys)
}

/// Signs `posted` with key `id`: `X-Acme-Signature` (and the source header when missing),
/// or, for a Standard Webhooks key, `webhook-signature` over the request's own
/// `webhook-id` and `webhook-timestamp`.
fn sign_request(posted: &mut PostedRequest, keys: &Keys, id: &str) -> Result<(), String> {
    let (source, key) = keys
        .iter()
        .flat_map(|(source, list)| list.iter().map(move |key| (source, key)))
        .find(|(_, key)| key.id == id)
        .ok_or_else(|| format!("no key `{id}` in the fixture"))?;
    match key.secret.scheme() {
        Scheme::Acme => {
            posted
                .source
                .get_or_insert_with(|| source.as_str().to_owned());
            posted.signature = Some(sign(key.secret.bytes(), &posted.body));
        }
        Scheme::StandardWebhooks => {
            let [Some(message), Some(stamp), _] = &posted.webhook else {
                return Err(
                    "a Standard Webhooks request names its webhook-id and webhook-timestamp".into(),
                );
            };
            let stamp: i64 = stamp
                .parse()
                .map_err(|_| format!("webhook-timestamp `{stamp}` is not Unix seconds"))?;
            posted.webhook[2] = Some(sign_standard(
                key.secret.bytes(),
                message,
                stamp,
                &posted.body,
            ));
        }
    }
    Ok(())
}

type StepError = (Option<&'static str>, String);

fn typed_step(
    step: &RawStep,
    requests: &BTreeMap<u32, PostedRequest>,
    applications: &Applications,
) -> Result<Step, StepError> {
    let actions = [
        step.post.is_some(),
        step.consume.is_some(),
        step.recover.is_some(),
        step.claim.is_some(),
        step.upgrade.is_some(),
        step.poison,
        step.undecidable.is_some(),
        step.register.is_some(),
        step.terminate.is_some(),
        step.resolve.is_some(),
        step.expire_quarantine.is_some(),
    ];
    let whole = |message: &str| (None, message.to_owned());
    const NAMES: &str = "`post`, `consume`, `recover`, `claim`, `upgrade`, `poison`, `undecidable`, `register`, `terminate`, `resolve`, `expire_quarantine`";
    match actions.iter().filter(|&&set| set).count() {
        0 => return Err(whole(&format!("a step needs one of {NAMES}"))),
        1 => {}
        _ => {
            return Err(whole(&format!(
                "a step does one thing: only one of {NAMES}"
            )))
        }
    }
    let post_faults = step.response_lost || step.stream_unavailable;
    if post_faults && step.post.is_none() {
        return Err(whole(
            "`response_lost` and `stream_unavailable` go with `post`",
        ));
    }
    if step.response_lost && step.stream_unavailable {
        return Err(whole(
            "at most one of `response_lost` and `stream_unavailable`",
        ));
    }
    let consumer_step = step.consume.is_some() || step.recover.is_some() || step.claim.is_some();
    if step.crash.is_some() && !consumer_step {
        return Err((
            Some("crash"),
            "`crash` goes with `consume`, `recover` or `claim`".into(),
        ));
    }
    let consumer = |field: &'static str, name: &str| {
        if name.is_empty() {
            Err((Some(field), "a consumer needs a name".to_owned()))
        } else {
            Ok(Consumer(name.to_owned()))
        }
    };
    if let Some(number) = step.post {
        if !requests.contains_key(&number) {
            return Err((
                Some("post"),
                format!("names request {number}, which the fixture does not have"),
            ));
        }
        let fault = if step.response_lost {
            Some(PostFault::ResponseLost)
        } else if step.stream_unavailable {
            Some(PostFault::StreamUnavailable)
        } else {
            None
        };
        return Ok(Step::Post {
            request: number,
            fault,
        });
    }
    if let Some(name) = &step.consume {
        return Ok(Step::Consume {
            consumer: consumer("consume", name)?,
            crash: step.crash,
        });
    }
    if let Some(name) = &step.recover {
        return Ok(Step::Recover {
            consumer: consumer("recover", name)?,
            crash: step.crash,
        });
    }
    if let Some(name) = &step.claim {
        return Ok(Step::Claim {
            consumer: consumer("claim", name)?,
            crash: step.crash,
        });
    }
    if let Some(upgrade) = &step.upgrade {
        if upgrade.material_version == 0 {
            return Err((
                Some("upgrade.material_version"),
                "material versions start at 1".into(),
            ));
        }
        let application = find_application(
            applications,
            &upgrade.application,
            upgrade.tenant_id.as_deref(),
            ["upgrade.application", "upgrade.tenant_id"],
        )?;
        return Ok(Step::Upgrade {
            application,
            material_version: upgrade.material_version,
        });
    }
    if let Some(number) = step.undecidable {
        let parses = requests
            .get(&number)
            .is_some_and(|posted| super::world::envelope_of(posted).is_some());
        if !parses {
            return Err((
                Some("undecidable"),
                format!(
                    "request {number} is not in the fixture, or its body is not a valid envelope"
                ),
            ));
        }
        return Ok(Step::Undecidable { request: number });
    }
    if let Some(app) = &step.register {
        if app.material_version == 0 || app.business_key.is_empty() {
            return Err((
                Some("register"),
                "a registration has a business key and a material version >= 1".into(),
            ));
        }
        return Ok(Step::Register {
            application: AppKey {
                tenant_id: app.tenant_id.clone(),
                application_id: app.application_id.clone(),
            },
            business_key: app.business_key.clone(),
            material_version: app.material_version,
        });
    }
    if let Some(end) = &step.terminate {
        let application = find_application(
            applications,
            &end.application,
            end.tenant_id.as_deref(),
            ["terminate.application", "terminate.tenant_id"],
        )?;
        let at = parse_rfc3339(&end.at).ok_or_else(|| {
            (
                Some("terminate.at"),
                format!("`{}` is not an RFC 3339 time", end.at),
            )
        })?;
        return Ok(Step::Terminate {
            application,
            reason: end.reason.clone(),
            at,
        });
    }
    if let Some(resolve) = &step.resolve {
        let keep = match (resolve.keep.as_str(), resolve.variant_request) {
            ("first", None) => Keep::First,
            ("variant", None) => Keep::Variant,
            ("variant", Some(number)) if requests.contains_key(&number) => Keep::VariantOf(number),
            ("variant", Some(number)) => {
                return Err((
                    Some("resolve.variant_request"),
                    format!("names request {number}, which the fixture does not have"),
                ))
            }
            ("first", Some(_)) => {
                return Err((
                    Some("resolve.variant_request"),
                    "goes with `\"keep\": \"variant\"`".into(),
                ))
            }
            (other, _) => {
                return Err((
                    Some("resolve.keep"),
                    format!("`{other}` is neither \"first\" nor \"variant\""),
                ))
            }
        };
        return Ok(Step::Resolve {
            fact: FactId {
                tenant_id: resolve.tenant_id.clone(),
                source: resolve.source,
                event_id: resolve.event_id.clone(),
            },
            keep,
            reason: resolve.reason.clone(),
        });
    }
    if let Some(at) = &step.expire_quarantine {
        let at = parse_rfc3339(at).ok_or_else(|| {
            (
                Some("expire_quarantine"),
                format!("`{at}` is not an RFC 3339 time"),
            )
        })?;
        return Ok(Step::ExpireQuarantine { at });
    }
    Ok(Step::Poison)
}

/// The application an operator step names, by id (and tenant when the id is not unique).
fn find_application(
    applications: &Applications,
    id: &str,
    tenant: Option<&str>,
    fields: [&'static str; 2],
) -> Result<AppKey, StepError> {
    let matching: Vec<&AppKey> = applications
        .iter()
        .map(|(key, _)| key)
        .filter(|key| key.application_id == id && tenant.is_none_or(|t| t == key.tenant_id))
        .collect();
    match matching.as_slice() {
        [key] => Ok((*key).clone()),
        [] => Err((
            Some(fields[0]),
            format!("no application `{id}` in the fixture"),
        )),
        _ => Err((
            Some(fields[1]),
            format!("`{id}` exists under several tenants: say which with `tenant_id`"),
        )),
    }
}

fn typed_expect(
    expect: &RawExpect,
    requests: &BTreeMap<u32, PostedRequest>,
    labels: &BTreeMap<AppKey, String>,
) -> Result<Expect, (String, String)> {
    let responses = match &expect.responses {
        None => None,
        Some(responses) => {
            let mut typed = BTreeMap::new();
            for (number, (status, word)) in responses {
                let place = format!("responses.{number}");
                let request: u32 = number
                    .parse()
                    .map_err(|_| (place.clone(), format!("`{number}` is not a request number")))?;
                if !requests.contains_key(&request) {
                    return Err((place, format!("the fixture has no request {request}")));
                }
                let response = response_from_parts(*status, word).ok_or_else(|| {
                    (
                        place.clone(),
                        format!("[{status}, \"{word}\"] is not an answer ingress gives"),
                    )
                })?;
                typed.insert(request, response);
            }
            Some(typed)
        }
    };
    let facts = expect.facts.clone().map(|mut facts| {
        sort_facts(&mut facts);
        facts
    });
    if let Some(ready) = &expect.ready {
        let known: BTreeSet<&String> = labels.values().collect();
        if let Some(label) = ready.keys().find(|label| !known.contains(label)) {
            return Err((
                format!("ready.{label}"),
                "no such application in the fixture".into(),
            ));
        }
    }
    let dead_letter = expect.dead_letter.clone().map(|mut ids| {
        ids.sort_unstable();
        ids
    });
    let open_conflicts = expect.open_conflicts.clone().map(|mut labels| {
        labels.sort();
        labels
    });
    Ok(Expect {
        responses,
        facts,
        duplicates: expect.duplicates,
        conflicts: expect.conflicts,
        late_mismatches: expect.late_mismatches,
        ready: expect.ready.clone(),
        pending: expect.pending,
        dead_letter,
        quarantined: expect.quarantined,
        quarantine_expired: expect.quarantine_expired,
        after_termination: expect.after_termination,
        open_conflicts,
    })
}

/// Sorts `[source, event_id]` pairs as the text they are written as.
pub fn sort_facts(facts: &mut [(Source, String)]) {
    facts.sort_by(|a, b| (a.0.as_str(), &a.1).cmp(&(b.0.as_str(), &b.1)));
}

/// The answer with this status and reason word, if ingress can give it.
pub fn response_from_parts(status: u16, word: &str) -> Option<Response> {
    [
        Response::Accepted,
        Response::Quarantined,
        Response::Unavailable,
    ]
    .into_iter()
    .chain(Reason::ALL.into_iter().map(Response::Rejected))
    .find(|response| response.status() == status && response.reason() == word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_acceptance_fixture_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/acmeflow-wf14.json");
        let scenario = Scenario::load(&path).unwrap();
        assert_eq!(scenario.setup.requests.len(), 6);
        assert_eq!(scenario.schedule.as_ref().map(Vec::len), Some(10));
        assert_eq!(
            response_from_parts(400, "bad_signature"),
            Some(Response::Rejected(Reason::BadSignature))
        );
        assert_eq!(response_from_parts(202, "bad_signature"), None);
    }
}
