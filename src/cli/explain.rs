//! `arrival pipeline explain`: why an application is (not) READY, or where an event went,
//! from the rows [`crate::pipeline::explain::load`] reads (the inbox and Redis) and the
//! answer [`crate::pipeline::explain::reason`] gives; text for people, `--json` for
//! machines. Naming neither or both of an application and an event is bad input (exit 2);
//! an inbox or a Redis that does not answer is the environment (exit 3).

use super::inbox::env_error;
use super::inbox::RedisArgs;
use super::operator::identity;
use super::{pretty_json, print, Error, Outcome};
use crate::facts::application::AppKey;
use crate::harness::InputError;
use crate::pipeline::explain::{load, reason, Target};
use clap::Args;
use std::path::Path;
use std::time::Duration;

/// `arrival pipeline explain`.
#[derive(Args, Debug, Clone)]
pub struct ExplainArgs {
    /// The inbox database.
    #[arg(long, env = "ARRIVAL_DB", value_parser = super::inbox::inbox_at)]
    pub db: crate::pipeline::sql::InboxAt,
    /// The application's tenant (with `--application`).
    #[arg(long)]
    pub tenant: Option<String>,
    /// The application (with `--tenant`).
    #[arg(long)]
    pub application: Option<String>,
    /// An event instead: `TENANT/SOURCE/EVENT_ID`.
    #[arg(long)]
    pub event: Option<String>,
    /// Redis, stream and group.
    #[command(flatten)]
    pub redis: RedisArgs,
    /// As JSON: the answer and every row it was drawn from.
    #[arg(long)]
    pub json: bool,
}

fn target(args: &ExplainArgs) -> Result<Target, Error> {
    let refuse = |why: &str| -> Error {
        InputError::invalid(Path::new("--event"), "command line", why.to_owned()).into()
    };
    match (&args.tenant, &args.application, &args.event) {
        (Some(tenant), Some(application), None) => Ok(Target::Application {
            key: AppKey {
                tenant_id: tenant.clone(),
                application_id: application.clone(),
            },
        }),
        (None, None, Some(event)) => Ok(Target::Event {
            id: identity(event)?,
        }),
        (_, _, Some(_)) => Err(refuse(
            "give either --event or --tenant with --application, not both",
        )),
        _ => Err(refuse(
            "name an application (--tenant T --application A) or an event (--event TENANT/SOURCE/EVENT_ID)",
        )),
    }
}

/// Runs `pipeline explain`.
pub fn explain(args: &ExplainArgs) -> Outcome {
    let target = target(args)?;
    let conn = super::operator::open(&args.db)?;
    let url = &args.redis.redis_url;
    let mut redis = crate::pipeline::stream::connect(url, Duration::from_secs(5))
        .map_err(|error| env_error(&url, error))?;
    let now_ms = crate::pipeline::store::now_ms();
    let evidence = load::load(&conn, &mut redis, &args.redis.names(), target, now_ms)
        .map_err(|error| env_error(&args.db, error))?;
    let explanation = reason::explain(&evidence);
    if args.json {
        let document = serde_json::json!({
            "explanation": explanation,
            "evidence": evidence,
        });
        print(&pretty_json(&document));
    } else {
        print(&reason::render(&explanation, now_ms));
    }
    Ok(true)
}
