//! Facts fixture files (top-level `"protocol": "facts"`) read, validated and turned into a
//! typed [`Scenario`]; every bad input is an [`InputError`] naming the file, the JSON path
//! and the problem.
//!
//! Without a `schedule`, replay posts every request in file order, then lets consumer `c1`
//! consume until the stream is drained (every entry delivered and acknowledged).

use super::application::{AppKey, Application, Applications};
use super::envelope::Source;
use super::ingress::{IngressConfig, Reason, Response, Secret, DEFAULT_MAX_BODY_BYTES};
use super::mutants::Mutant;
use super::property::Property;
use super::step::{Consumer, Crash, PostFault, Step};
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
    /// Each source's active keys.
    pub secrets: BTreeMap<Source, Vec<String>>,
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
        let mut keys = BTreeMap::new();
        for (source, secrets) in &raw.secrets {
            let mut list = Vec::new();
            for (at, key) in secrets.iter().enumerate() {
                let secret = Secret::from_config(key)
                    .map_err(|message| bad(format!("secrets.{source}[{at}]"), message))?;
                list.push(secret);
            }
            keys.insert(*source, list);
        }
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
            let application = Application {
                business_key: app.business_key.clone(),
                material_version: app.material_version,
            };
            if applications.insert(key.clone(), application).is_some() {
                return Err(bad(
                    place("application_id"),
                    format!("application {key} is listed twice"),
                ));
            }
        }
        let labels = labels(&applications);
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
            let posted = PostedRequest {
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
                        typed_step(step, &requests, &applications).map_err(|(field, message)| {
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
        let mut config = IngressConfig::new(keys);
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
    ];
    let whole = |message: &str| (None, message.to_owned());
    match actions.iter().filter(|&&set| set).count() {
        0 => {
            return Err(whole(
                "a step needs one of `post`, `consume`, `recover`, `claim`, `upgrade`, `poison`",
            ))
        }
        1 => {}
        _ => {
            return Err(whole(
                "a step does one thing: only one of `post`, `consume`, `recover`, `claim`, `upgrade`, `poison`",
            ))
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
        let matching: Vec<&AppKey> = applications
            .iter()
            .map(|(key, _)| key)
            .filter(|key| {
                key.application_id == upgrade.application
                    && upgrade
                        .tenant_id
                        .as_ref()
                        .is_none_or(|tenant| *tenant == key.tenant_id)
            })
            .collect();
        return match matching.as_slice() {
            [key] => Ok(Step::Upgrade {
                application: (*key).clone(),
                material_version: upgrade.material_version,
            }),
            [] => Err((
                Some("upgrade.application"),
                format!("no application `{}` in the fixture", upgrade.application),
            )),
            _ => Err((
                Some("upgrade.tenant_id"),
                format!(
                    "`{}` exists under several tenants: say which with `tenant_id`",
                    upgrade.application
                ),
            )),
        };
    }
    Ok(Step::Poison)
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
    if let Some(facts) = &facts {
        if let Some(pair) = facts.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err((
                "facts".into(),
                format!("[{}, {}] is listed twice", pair[0].0, pair[0].1),
            ));
        }
    }
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
    Ok(Expect {
        responses,
        facts,
        duplicates: expect.duplicates,
        conflicts: expect.conflicts,
        late_mismatches: expect.late_mismatches,
        ready: expect.ready.clone(),
        pending: expect.pending,
        dead_letter,
    })
}

/// Sorts `[source, event_id]` pairs as the text they are written as.
pub fn sort_facts(facts: &mut [(Source, String)]) {
    facts.sort_by(|a, b| (a.0.as_str(), &a.1).cmp(&(b.0.as_str(), &b.1)));
}

/// The answer with this status and reason word, if ingress can give it.
pub fn response_from_parts(status: u16, word: &str) -> Option<Response> {
    [Response::Accepted, Response::Unavailable]
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
