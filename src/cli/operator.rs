//! `arrival pipeline applications|conflicts|quarantine|dead-letters ...`: the operator's
//! commands on a real inbox, each one transaction of [`crate::pipeline::operator`] (the
//! dead letters' of [`crate::pipeline::dead_letters`]). A refused step (a
//! downgrade, another business key, a terminated application, no open conflict) is bad
//! input naming the flag (exit 2) and leaves the inbox as it was; an inbox that fails is
//! the environment (exit 3).

use super::inbox::{env_error, open_existing};
use super::{pretty_json, print, Error, Outcome};
use crate::facts::application::AppKey;
use crate::facts::envelope::{Envelope, FactId, Source};
use crate::facts::operator::DEFAULT_QUARANTINE_SECONDS;
use crate::harness::timestamp::{format_rfc3339, parse_rfc3339};
use crate::harness::InputError;
use crate::pipeline::operator::{self as op, Keep};
use crate::pipeline::sql::{Db, InboxAt};
use crate::pipeline::store as pstore;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};

/// The inbox and an application of it.
#[derive(Args, Clone, Debug)]
pub struct Target {
    /// The inbox database.
    #[arg(long, env = "ARRIVAL_DB", value_parser = super::inbox::inbox_at)]
    pub db: crate::pipeline::sql::InboxAt,
    /// The tenant.
    #[arg(long)]
    pub tenant: String,
    /// The application id.
    #[arg(long)]
    pub application: String,
}

impl Target {
    fn key(&self) -> AppKey {
        AppKey {
            tenant_id: self.tenant.clone(),
            application_id: self.application.clone(),
        }
    }
}

/// `arrival pipeline applications ...`.
#[derive(Subcommand, Debug)]
pub enum ApplicationsCommand {
    /// Register an application, or register it again at a newer material version; its
    /// quarantined entries are decided again in the same transaction.
    Register {
        /// The inbox and the application.
        #[command(flatten)]
        target: Target,
        /// Its business key (checked against every fact; never changes).
        #[arg(long)]
        business_key: String,
        /// Its material version (never moves backwards).
        #[arg(long)]
        material_version: u64,
        /// Print what it did as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Move an application to a newer material version (READY recomputed).
    Upgrade {
        /// The inbox and the application.
        #[command(flatten)]
        target: Target,
        /// The new material version.
        #[arg(long)]
        material_version: u64,
    },
    /// Terminate an application: final, READY false for ever, later facts kept aside.
    Terminate {
        /// The inbox and the application.
        #[command(flatten)]
        target: Target,
        /// Why (kept with the termination).
        #[arg(long)]
        reason: String,
        /// When (RFC 3339; now when left out).
        #[arg(long)]
        at: Option<String>,
    },
}

/// `arrival pipeline conflicts ...`.
#[derive(Subcommand, Debug)]
pub enum ConflictsCommand {
    /// Every identity with a conflict, open ones first, with the contents recorded.
    List {
        /// The inbox database.
        #[arg(long, env = "ARRIVAL_DB", value_parser = super::inbox::inbox_at)]
        db: crate::pipeline::sql::InboxAt,
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Resolve the open conflict of one identity; both contents stay recorded.
    Resolve {
        /// The inbox database.
        #[arg(long, env = "ARRIVAL_DB", value_parser = super::inbox::inbox_at)]
        db: crate::pipeline::sql::InboxAt,
        /// The identity, `TENANT/SOURCE/EVENT_ID`.
        #[arg(long)]
        event: String,
        /// `first` (the first content stays the fact) or `variant` (a recorded variant
        /// becomes it).
        #[arg(long, value_enum)]
        keep: KeepArg,
        /// With `--keep variant` when several variants are recorded: a file holding the
        /// content of the one to keep (an envelope body; `sent_at` is not compared).
        #[arg(long)]
        content: Option<PathBuf>,
        /// Why (kept with the resolution).
        #[arg(long)]
        reason: String,
    },
}

/// What a person keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KeepArg {
    /// The first content.
    First,
    /// A recorded variant.
    Variant,
}

/// `arrival pipeline quarantine ...`.
#[derive(Subcommand, Debug)]
pub enum QuarantineCommand {
    /// Entries waiting for their application (and those whose wait expired), oldest first.
    List {
        /// The inbox database.
        #[arg(long, env = "ARRIVAL_DB", value_parser = super::inbox::inbox_at)]
        db: crate::pipeline::sql::InboxAt,
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Expire entries quarantined longer than the period: kept for a person, never facts.
    Expire {
        /// The inbox database.
        #[arg(long, env = "ARRIVAL_DB", value_parser = super::inbox::inbox_at)]
        db: crate::pipeline::sql::InboxAt,
        /// The quarantine period in seconds.
        #[arg(long, default_value_t = DEFAULT_QUARANTINE_SECONDS)]
        older_than_seconds: i64,
        /// The sweep's clock (RFC 3339; now when left out).
        #[arg(long)]
        now: Option<String>,
    },
}

pub(super) fn open(db: &InboxAt) -> Result<Db, Error> {
    open_existing(db)
}

fn refused(flag: &str, why: impl std::fmt::Display) -> Error {
    InputError::invalid(Path::new(flag), "command line", why.to_string()).into()
}

fn time_flag(flag: &str, text: Option<&str>) -> Result<i64, Error> {
    match text {
        None => Ok(op::now_seconds()),
        Some(text) => parse_rfc3339(text)
            .ok_or_else(|| refused(flag, format!("`{text}` is not an RFC 3339 time"))),
    }
}

/// Runs an `applications` command.
pub fn applications(command: ApplicationsCommand) -> Outcome {
    match command {
        ApplicationsCommand::Register {
            target,
            business_key,
            material_version,
            json,
        } => {
            let conn = open(&target.db)?;
            let key = target.key();
            let done = op::register(&conn, &key, &business_key, material_version, None)
                .map_err(|error| env_error(&target.db, error))?
                .map_err(|why| refused(why.flag(), why))?;
            if json {
                print(&pretty_json(&done));
            } else {
                let mut out = format!("{key} v{material_version}: {}\n", done.registered.as_str());
                for (entry, verdict) in &done.released {
                    out += &format!("  released {entry}: {}\n", verdict.as_str());
                }
                print(&out);
            }
            Ok(true)
        }
        ApplicationsCommand::Upgrade {
            target,
            material_version,
        } => upgrade(&target, material_version),
        ApplicationsCommand::Terminate { target, reason, at } => {
            let at = time_flag("--at", at.as_deref())?;
            let conn = open(&target.db)?;
            let key = target.key();
            op::terminate(&conn, &key, &reason, at)
                .map_err(|error| env_error(&target.db, error))?
                .map_err(|why| refused(why.flag(), why))?;
            print(&format!("{key}: terminated at {}\n", format_rfc3339(at)));
            Ok(true)
        }
    }
}

/// `applications upgrade` (and the older `pipeline upgrade`).
pub fn upgrade(target: &Target, material_version: u64) -> Outcome {
    let conn = open(&target.db)?;
    let key = target.key();
    let from = op::upgrade(&conn, &key, material_version, None)
        .map_err(|error| env_error(&target.db, error))?
        .map_err(|why| refused(why.flag(), why))?;
    print(&format!("{key} v{from} -> v{material_version}\n"));
    Ok(true)
}

/// `TENANT/SOURCE/EVENT_ID`, where the tenant and the event id may hold `/` themselves:
/// the source is the one part that is `finance` or `contracts`. Refused when no split, or
/// more than one, reads so.
pub(super) fn identity(text: &str) -> Result<FactId, Error> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices('/') {
        let (tenant_id, rest) = (&text[..at], &text[at + 1..]);
        let Some((source, event_id)) = rest.split_once('/') else {
            continue;
        };
        if let (Some(source), false, false) = (
            Source::from_wire(source),
            tenant_id.is_empty(),
            event_id.is_empty(),
        ) {
            found.push(FactId {
                tenant_id: tenant_id.to_owned(),
                source,
                event_id: event_id.to_owned(),
            });
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(refused(
            "--event",
            format!("`{text}` is not TENANT/SOURCE/EVENT_ID with SOURCE finance or contracts"),
        )),
        _ => Err(refused(
            "--event",
            format!("`{text}` splits into TENANT/SOURCE/EVENT_ID in more than one way"),
        )),
    }
}

/// Runs a `conflicts` command.
pub fn conflicts(command: ConflictsCommand) -> Outcome {
    match command {
        ConflictsCommand::List { db, json } => {
            let conn = open(&db)?;
            let rows = op::conflicts(&conn).map_err(|error| env_error(&db, error))?;
            if json {
                print(&pretty_json(&rows));
            } else if rows.is_empty() {
                print("no conflicts\n");
            } else {
                let mut out = String::new();
                for row in &rows {
                    out += &format!(
                        "{} ({}): stops {}\n",
                        row.identity,
                        row.state,
                        row.applications.join(", ")
                    );
                    if let Some(fact) = &row.fact {
                        out += &format!("  fact:    {fact}\n");
                    }
                    for variant in &row.variants {
                        out += &format!("  variant: {variant}\n");
                    }
                    if let Some(reason) = &row.reason {
                        out += &format!("  reason:  {reason}\n");
                    }
                }
                print(&out);
            }
            Ok(true)
        }
        ConflictsCommand::Resolve {
            db,
            event,
            keep,
            content,
            reason,
        } => {
            let id = identity(&event)?;
            let keep = match (keep, content) {
                (KeepArg::First, None) => Keep::First,
                (KeepArg::First, Some(_)) => {
                    return Err(refused(
                        "--content",
                        "`--content` names a variant: use it with `--keep variant`",
                    ));
                }
                (KeepArg::Variant, None) => Keep::OnlyVariant,
                (KeepArg::Variant, Some(file)) => {
                    let bytes = std::fs::read(&file).map_err(|source| InputError::Io {
                        file: file.clone(),
                        source,
                    })?;
                    let envelope = Envelope::parse(&bytes, id.source).map_err(|error| {
                        InputError::invalid(&file, "--content", error.to_string())
                    })?;
                    Keep::Variant(Box::new(envelope))
                }
            };
            let conn = open(&db)?;
            let kept = op::resolve(&conn, &id, &keep, &reason)
                .map_err(|error| env_error(&db, error))?
                .map_err(|why| refused("--event", why))?;
            print(&format!(
                "{event}: resolved, kept the {}\n",
                pstore::kept_word(kept)
            ));
            Ok(true)
        }
    }
}

/// Runs a `quarantine` command.
pub fn quarantine(command: QuarantineCommand) -> Outcome {
    match command {
        QuarantineCommand::List { db, json } => {
            let conn = open(&db)?;
            let rows = op::parked(&conn, &["quarantined", "quarantine_expired"])
                .map_err(|error| env_error(&db, error))?;
            if json {
                print(&pretty_json(&rows));
            } else if rows.is_empty() {
                print("nothing quarantined\n");
            } else {
                let mut out = String::new();
                for row in &rows {
                    out += &format!(
                        "{} {} {} application {} since {}\n",
                        row.entry,
                        row.state,
                        row.identity,
                        row.application_id,
                        format_rfc3339(row.since)
                    );
                }
                print(&out);
            }
            Ok(true)
        }
        QuarantineCommand::Expire {
            db,
            older_than_seconds,
            now,
        } => {
            if older_than_seconds < 0 {
                return Err(refused("--older-than-seconds", "a period is not negative"));
            }
            let now = time_flag("--now", now.as_deref())?;
            let conn = open(&db)?;
            let expired = op::expire_quarantine(&conn, now, older_than_seconds)
                .map_err(|error| env_error(&db, error))?;
            print(&format!("{} entries expired\n", expired.len()));
            for entry in expired {
                print(&format!("  {entry}\n"));
            }
            Ok(true)
        }
    }
}

/// `pipeline receipts`: what ingress answered, oldest of the newest `limit` first.
pub fn receipts(db: &InboxAt, event: Option<&str>, limit: usize, json: bool) -> Outcome {
    let event = event.map(identity).transpose()?;
    let conn = open(db)?;
    let rows = crate::pipeline::receipts::list(&conn, event.as_ref(), limit)
        .map_err(|error| env_error(db, error))?;
    if json {
        print(&pretty_json(&rows));
        return Ok(true);
    }
    let mut out = String::new();
    for r in &rows {
        let named = match (&r.tenant_id, &r.event_id) {
            (Some(tenant), Some(event)) => {
                format!(" {tenant}/{}/{event}", r.source.as_deref().unwrap_or("?"))
            }
            _ => String::new(),
        };
        out += &format!(
            "{} {} {}{named}{}{}{}\n",
            format_rfc3339(r.at_ms / 1000),
            r.status,
            r.reason,
            r.key_id
                .as_ref()
                .map_or(String::new(), |key| format!(" key {key}")),
            r.entry
                .as_ref()
                .map_or(String::new(), |entry| format!(" entry {entry}")),
            r.detail
                .as_ref()
                .map_or(String::new(), |detail| format!(": {detail}")),
        );
    }
    if rows.is_empty() {
        out += "no receipts\n";
    }
    print(&out);
    Ok(true)
}

/// `arrival pipeline dead-letters ...`.
#[derive(Subcommand, Debug)]
pub enum DeadLettersCommand {
    /// Every dead letter, oldest first: its entry, category, deliveries, error, identity.
    List {
        /// Redis, stream and group.
        #[command(flatten)]
        redis: super::inbox::RedisArgs,
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Append a dead letter's body to the stream again as a new entry (after the cause was
    /// fixed); the letter leaves the dead-letter stream, the action is kept in the inbox.
    Replay {
        /// The inbox database (where the action is recorded).
        #[arg(long, env = "ARRIVAL_DB", value_parser = super::inbox::inbox_at)]
        db: crate::pipeline::sql::InboxAt,
        /// Redis, stream and group.
        #[command(flatten)]
        redis: super::inbox::RedisArgs,
        /// The original stream entry the letter holds.
        #[arg(long)]
        entry: String,
        /// Why (kept with the action).
        #[arg(long)]
        reason: String,
    },
    /// Remove a dead letter for good; the action and its reason are kept in the inbox.
    Discard {
        /// The inbox database (where the action is recorded).
        #[arg(long, env = "ARRIVAL_DB", value_parser = super::inbox::inbox_at)]
        db: crate::pipeline::sql::InboxAt,
        /// Redis, stream and group.
        #[command(flatten)]
        redis: super::inbox::RedisArgs,
        /// The original stream entry the letter holds.
        #[arg(long)]
        entry: String,
        /// Why (kept with the action).
        #[arg(long)]
        reason: String,
    },
}

fn redis_of(redis: &super::inbox::RedisArgs) -> Result<redis::Connection, Error> {
    crate::pipeline::stream::connect(&redis.redis_url, std::time::Duration::from_secs(5))
        .map_err(|error| env_error(&&redis.redis_url, error))
}

fn action_error(db: &InboxAt, error: crate::pipeline::dead_letters::ActionError) -> Error {
    use crate::pipeline::dead_letters::ActionError;
    match error {
        ActionError::NotFound(_) => refused("--entry", error),
        other => env_error(db, other),
    }
}

/// Runs a `dead-letters` command.
pub fn dead_letters(command: DeadLettersCommand) -> Outcome {
    use crate::pipeline::dead_letters as dl;
    match command {
        DeadLettersCommand::List { redis, json } => {
            let mut conn = redis_of(&redis)?;
            let letters = dl::list(&mut conn, &redis.names())
                .map_err(|error| env_error(&&redis.redis_url, error))?;
            if json {
                print(&pretty_json(&letters));
                return Ok(true);
            }
            let mut out = String::new();
            for l in &letters {
                let named = match (&l.tenant_id, &l.event_id) {
                    (Some(t), Some(e)) => {
                        format!(" {t}/{}/{e}", l.source.as_deref().unwrap_or("?"))
                    }
                    _ => String::new(),
                };
                out += &format!(
                    "{} {}{named} after {} deliveries: {}\n",
                    l.entry,
                    l.category,
                    l.deliveries.map_or("?".to_owned(), |n| n.to_string()),
                    l.reason
                );
            }
            if letters.is_empty() {
                out += "no dead letters\n";
            }
            print(&out);
            Ok(true)
        }
        DeadLettersCommand::Replay {
            db,
            redis,
            entry,
            reason,
        } => {
            let inbox = open(&db)?;
            let mut conn = redis_of(&redis)?;
            let new = dl::replay(&mut conn, &inbox, &redis.names(), &entry, &reason)
                .map_err(|error| action_error(&db, error))?;
            print(&format!("entry {entry} replayed as {new}\n"));
            Ok(true)
        }
        DeadLettersCommand::Discard {
            db,
            redis,
            entry,
            reason,
        } => {
            let inbox = open(&db)?;
            let mut conn = redis_of(&redis)?;
            let letter = dl::discard(&mut conn, &inbox, &redis.names(), &entry, &reason)
                .map_err(|error| action_error(&db, error))?;
            print(&format!("entry {entry} ({}) discarded\n", letter.category));
            Ok(true)
        }
    }
}
