//! The HTTP ingress and the running pipeline: a thin axum handler that takes a token from
//! the source's rate-limit bucket (429 when it is empty), limits the body before reading
//! it, calls [`facts::ingress::admit`](crate::facts::ingress::admit) (or a mutant's) with
//! the clock injected, and answers 202 only after `XADD` returned the entry id (503 when
//! Redis cannot be written); [`start`] runs it with N consumers behind the capped server
//! of [`super::server`], and [`Running::shutdown`] stops accepting, lets the consumers
//! finish the batch in hand, and returns.

use super::consumer::{Consumer, ConsumerOptions, Faults, Point};
pub use super::keys::{load_keys, KeysFile};
use super::metrics::{self, Metrics, Sources};
use super::rate_limit::{Limited, RateLimit, RateLimiter};
use super::receipts::{bounded, Receipt, Receipts};
use super::server::ConnectionLimits;
use super::sql::{Db, InboxAt, SqlError};
use super::store;
use super::stream::{self, Names};
use crate::facts::application::Applications;
use crate::facts::envelope::Source;
use crate::facts::fixture::Keys;
use crate::facts::ingress::{
    Admission, IngressConfig, Key, Reason, Request, Response, WebhookHeaders,
};
use crate::facts::mutants::{admit_under, Mutant};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// The path ingress answers on.
pub const WEBHOOK_PATH: &str = "/webhook";
/// The response header that names the stream entry of a 202.
pub const ENTRY_HEADER: &str = "x-arrival-entry";
/// How long ingress waits for `XADD` before answering 503.
pub const XADD_TIMEOUT: Duration = Duration::from_secs(2);

/// How long ingress waits for a request's whole body by default: a sender that trickles
/// its body (or stalls) is answered 408 and holds no connection beyond this.
pub const DEFAULT_BODY_TIMEOUT_MS: u64 = 10_000;

/// How long a body still arriving when the pipeline stops is waited for.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// The receiver's clock: the real one, or the real one shifted by a number of seconds (the
/// fixture runner sets the shift per request so each request's `received_at` is now).
#[derive(Debug, Default)]
pub struct Clock {
    shift: Option<AtomicI64>,
}

impl Clock {
    /// The real clock.
    pub fn real() -> Clock {
        Clock { shift: None }
    }

    /// A clock whose shift can be set.
    pub fn shifted() -> Clock {
        Clock {
            shift: Some(AtomicI64::new(0)),
        }
    }

    /// Sets the shift so that now reads `at` (Unix seconds); no effect on the real clock.
    pub fn set_now(&self, at: i64) {
        if let Some(shift) = &self.shift {
            shift.store(at - store::now_ms() / 1000, Ordering::SeqCst);
        }
    }

    /// Now, in Unix milliseconds (the receive time written with each stream entry).
    pub fn now_ms(&self) -> i64 {
        let shift = self
            .shift
            .as_ref()
            .map_or(0, |shift| shift.load(Ordering::SeqCst));
        store::now_ms() + shift * 1000
    }

    /// Now, in Unix seconds.
    pub fn now(&self) -> i64 {
        let shift = self
            .shift
            .as_ref()
            .map_or(0, |shift| shift.load(Ordering::SeqCst));
        store::now_ms() / 1000 + shift
    }
}

struct AppsCache {
    conn: Db,
    /// Where `conn` came from, to open it again when the server closed it.
    at: InboxAt,
    busy_timeout_ms: u64,
    version: i64,
    apps: Arc<Applications>,
}

/// What the handler needs.
pub struct IngressState {
    /// Limits and keys; the keys are replaced when `serve` reloads its keys file.
    config: RwLock<Arc<IngressConfig>>,
    /// The per-source rate limit, checked before a body is read.
    limiter: RateLimiter,
    apps: Mutex<AppsCache>,
    redis: redis::aio::ConnectionManager,
    names: Names,
    /// The receiver's clock.
    pub clock: Clock,
    mutant: Option<Mutant>,
    /// How long to wait for a request's whole body.
    body_timeout: Duration,
    /// When set, every accepted request is answered 503 as if `XADD` failed (the fixture
    /// runner's `stream_unavailable` step).
    pub stream_down: AtomicBool,
    /// Set when the pipeline starts to stop: a body still arriving is not waited for.
    stopping: tokio::sync::watch::Sender<bool>,
    /// Where each answered request's receipt goes.
    pub receipts: Receipts,
    /// Counters and the commit histogram, shared with the consumers.
    pub metrics: Arc<Metrics>,
    /// Where `/metrics` and `/readyz` read Redis and the inbox.
    sources: Sources,
}

impl IngressState {
    /// The limits and keys in force.
    fn config(&self) -> Arc<IngressConfig> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The keys in force.
    pub fn keys(&self) -> Keys {
        self.config().keys.clone()
    }

    /// Puts `keys` in force for every request judged from now on (the limits stay).
    pub fn replace_keys(&self, keys: Keys) {
        let mut config = self.config.write().unwrap_or_else(|e| e.into_inner());
        let mut next = IngressConfig::clone(&config);
        next.keys = keys;
        *config = Arc::new(next);
    }

    /// The applications as they stand (re-read when an upgrade changed them).
    fn applications(&self) -> Result<Arc<Applications>, SqlError> {
        let mut cache = self.apps.lock().unwrap_or_else(|e| e.into_inner());
        if cache.conn.is_broken() {
            let reopened = store::open(&cache.at, cache.busy_timeout_ms)
                .map_err(|error| SqlError::Data(format!("cannot open the inbox again: {error}")))?;
            cache.conn = reopened;
        }
        let version = store::applications_version(&cache.conn)?;
        if version != cache.version {
            cache.apps = Arc::new(store::applications(&cache.conn)?);
            cache.version = version;
        }
        Ok(cache.apps.clone())
    }
}

fn answer(response: Response, entry: Option<String>) -> axum::response::Response {
    let mut reply = axum::response::Response::new(Body::from(response.body()));
    *reply.status_mut() =
        StatusCode::from_u16(response.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    reply.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(value) = entry.and_then(|id| HeaderValue::from_str(&id).ok()) {
        reply.headers_mut().insert(ENTRY_HEADER, value);
    }
    reply
}

/// 408 with `{"error":"body_timeout"}`: the body did not arrive in time. A transport
/// answer, not an admission check: nothing of the request was judged or recorded.
fn body_timed_out() -> axum::response::Response {
    let mut reply = axum::response::Response::new(Body::from(r#"{"error":"body_timeout"}"#));
    *reply.status_mut() = StatusCode::REQUEST_TIMEOUT;
    reply.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    reply
}

/// 429 with `Retry-After` and `{"error":"rate_limited"}`, and its receipt: the source's
/// bucket is empty. Nothing of the request was read or judged.
fn rate_limited(limited: &Limited) -> (Receipt, axum::response::Response) {
    let mut reply = axum::response::Response::new(Body::from(r#"{"error":"rate_limited"}"#));
    *reply.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    reply.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    reply
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(limited.retry_after));
    let receipt = Receipt {
        status: 429,
        reason: "rate_limited".into(),
        detail: Some(limited.detail()),
        ..Receipt::default()
    };
    (receipt, reply)
}

/// Answers a request the router has no place for, with a receipt like every answer.
fn unrouted(
    state: &IngressState,
    status: StatusCode,
    reason: &str,
    method: &axum::http::Method,
    uri: &axum::http::Uri,
) -> axum::response::Response {
    let receipt = Receipt {
        at_ms: state.clock.now_ms(),
        status: status.as_u16(),
        reason: reason.into(),
        detail: Some(bounded(&format!("{method} {}", uri.path()))),
        ..Receipt::default()
    };
    state.metrics.request(receipt.status, &receipt.reason);
    log_request(&receipt, std::time::Duration::ZERO);
    state.receipts.record(receipt);
    let mut reply = axum::response::Response::new(Body::from(format!(r#"{{"error":"{reason}"}}"#)));
    *reply.status_mut() = status;
    reply
}

/// 404 for a path ingress does not serve.
async fn no_route(
    State(state): State<Arc<IngressState>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> axum::response::Response {
    unrouted(
        &state,
        StatusCode::NOT_FOUND,
        "no_such_route",
        &method,
        &uri,
    )
}

/// 405 for a method a route does not take.
async fn not_allowed(
    State(state): State<Arc<IngressState>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> axum::response::Response {
    unrouted(
        &state,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        &method,
        &uri,
    )
}

/// Whether reading a body failed on the size limit (axum's `to_bytes` under a limit).
fn is_length_limit(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if cause.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = cause.source();
    }
    false
}

async fn webhook(
    State(state): State<Arc<IngressState>>,
    headers: HeaderMap,
    body: Body,
) -> axum::response::Response {
    let source = headers
        .get("x-acme-source")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let started = std::time::Instant::now();
    let (receipt, reply) = match state.limiter.check(source.as_deref()) {
        Ok(()) => judge(&state, &headers, body).await,
        Err(limited) => rate_limited(&limited),
    };
    let receipt = Receipt {
        at_ms: state.clock.now_ms(),
        source,
        ..receipt
    };
    state.metrics.request(receipt.status, &receipt.reason);
    log_request(&receipt, started.elapsed());
    state.receipts.record(receipt);
    reply
}

/// One log line per request: the receipt's fields (headers and details cut to their
/// bound), never the body or a secret.
fn log_request(r: &Receipt, took: Duration) {
    let text = |value: &Option<String>| value.as_deref().map(bounded).unwrap_or_default();
    tracing::info!(
        target: "arrival::ingress",
        status = r.status,
        reason = %r.reason,
        source = %text(&r.source),
        key_id = %text(&r.key_id),
        tenant_id = %text(&r.tenant_id),
        application_id = %text(&r.application_id),
        event_id = %text(&r.event_id),
        entry = %text(&r.entry),
        body_sha256 = %text(&r.body_sha256),
        detail = %text(&r.detail),
        micros = took.as_micros() as u64,
        "request"
    );
}

/// `GET /metrics`: the counters, and the levels read now; 503 when they cannot be read.
async fn metrics_page(State(state): State<Arc<IngressState>>) -> axum::response::Response {
    let sources = state.sources.clone();
    let levels = tokio::task::spawn_blocking(move || metrics::read_levels(&sources)).await;
    match levels {
        Ok(Ok(levels)) => {
            let mut reply =
                axum::response::Response::new(Body::from(state.metrics.render(&levels)));
            reply.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(metrics::CONTENT_TYPE),
            );
            reply
        }
        Ok(Err(error)) => plain(StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n")),
        Err(error) => plain(StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")),
    }
}

/// `GET /healthz`: the process serves.
async fn healthz() -> axum::response::Response {
    plain(StatusCode::OK, "ok\n".into())
}

/// `GET /readyz`: 200 when Redis and the inbox answer, 503 naming the one that does not.
async fn readyz(State(state): State<Arc<IngressState>>) -> axum::response::Response {
    let sources = state.sources.clone();
    match tokio::task::spawn_blocking(move || metrics::check_ready(&sources)).await {
        Ok(Ok(())) => plain(StatusCode::OK, "ready\n".into()),
        Ok(Err(why)) => plain(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
        Err(error) => plain(StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")),
    }
}

fn plain(status: StatusCode, text: String) -> axum::response::Response {
    let mut reply = axum::response::Response::new(Body::from(text));
    *reply.status_mut() = status;
    reply.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    reply
}

/// The answer to one request, and its receipt (without time and source).
async fn judge(
    state: &IngressState,
    headers: &HeaderMap,
    body: Body,
) -> (Receipt, axum::response::Response) {
    let refused = |mut receipt: Receipt, response: Response, detail: Option<String>| {
        receipt.status = response.status();
        receipt.reason = response.reason().to_owned();
        receipt.detail = detail;
        (receipt, answer(response, None))
    };
    let too_large = Response::Rejected(Reason::BodyTooLarge);
    let config = state.config();
    let limit = config.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        let detail = format!(
            "Content-Length {} over the limit of {limit} bytes",
            declared.unwrap_or(0)
        );
        return refused(Receipt::default(), too_large, Some(detail));
    }
    let mut stopping = state.stopping.subscribe();
    let mut read = std::pin::pin!(tokio::time::timeout(
        state.body_timeout,
        axum::body::to_bytes(body, limit)
    ));
    // A body still arriving when the pipeline stops gets a short grace, not the whole body
    // timeout: then the sender is answered 503 (nothing was put in the stream) and resends,
    // so a slow sender cannot hold up a shutdown.
    let read = tokio::select! {
        read = &mut read => read,
        () = async { drop(stopping.wait_for(|stop| *stop).await) } => {
            match tokio::time::timeout(STOP_GRACE, &mut read).await {
                Ok(read) => read,
                Err(_) => {
                    let receipt = Receipt {
                        status: 503,
                        reason: "shutting_down".into(),
                        detail: Some("the pipeline stopped before the body arrived".into()),
                        ..Receipt::default()
                    };
                    return (receipt, answer(Response::unavailable(), None));
                }
            }
        }
    };
    let bytes = match read {
        Ok(Ok(bytes)) => bytes,
        // Over the limit, or a body that broke off or whose chunks do not parse: only the
        // first is a 413.
        Ok(Err(error)) if is_length_limit(&error) => {
            let detail = format!("the body ran over the limit of {limit} bytes");
            return refused(Receipt::default(), too_large, Some(detail));
        }
        Ok(Err(error)) => {
            let receipt = Receipt {
                status: 400,
                reason: "body_unreadable".into(),
                detail: Some(bounded(&format!("the body could not be read: {error}"))),
                ..Receipt::default()
            };
            let mut reply =
                axum::response::Response::new(Body::from(r#"{"error":"body_unreadable"}"#));
            *reply.status_mut() = StatusCode::BAD_REQUEST;
            reply.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return (receipt, reply);
        }
        // Nothing was read into the stream: the sender retries as after any failure.
        Err(_) => {
            let receipt = Receipt {
                status: 408,
                reason: "body_timeout".into(),
                detail: Some(format!(
                    "the body did not arrive within {} ms",
                    state.body_timeout.as_millis()
                )),
                ..Receipt::default()
            };
            return (receipt, body_timed_out());
        }
    };
    let receipt = Receipt::for_body(&bytes);
    let apps = match state.applications() {
        Ok(apps) => apps,
        Err(error) => {
            let detail = format!("the inbox did not answer: {error}");
            return refused(receipt, Response::unavailable(), Some(detail));
        }
    };
    let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    let webhook = WebhookHeaders {
        id: text("webhook-id"),
        timestamp: text("webhook-timestamp"),
        signature: text("webhook-signature"),
    };
    let request = Request {
        source: text("x-acme-source"),
        signature: text("x-acme-signature"),
        webhook: (webhook != WebhookHeaders::default()).then_some(webhook),
        body: &bytes,
    };
    let admission = admit_under(state.mutant, &request, state.clock.now(), &config, &apps);
    let admitted = match admission {
        Admission::Reject(rejection) => {
            let receipt = Receipt {
                key_id: rejection.key_id.clone(),
                ..receipt
            };
            return refused(receipt, rejection.response(), rejection.detail);
        }
        Admission::Accept(admitted) => admitted,
    };
    let receipt = Receipt {
        key_id: Some(admitted.key_id.clone()),
        ..receipt
    };
    if state.stream_down.load(Ordering::SeqCst) {
        let detail = Some("the stream is down (a fixture's fault)".to_owned());
        return refused(receipt, Response::unavailable(), detail);
    }
    let command = stream::xadd_command(
        &state.names,
        admitted.envelope.source().as_str(),
        &bytes,
        state.clock.now_ms(),
        Some(&admitted.envelope),
    );
    let mut redis = state.redis.clone();
    match tokio::time::timeout(XADD_TIMEOUT, command.query_async::<String>(&mut redis)).await {
        Ok(Ok(id)) => {
            let response = admitted.response();
            let receipt = Receipt {
                status: response.status(),
                reason: response.reason().to_owned(),
                entry: Some(id.clone()),
                ..receipt
            };
            (receipt, answer(response, Some(id)))
        }
        Ok(Err(error)) => {
            let detail = Some(format!("XADD failed: {error}"));
            refused(receipt, Response::unavailable(), detail)
        }
        Err(_) => {
            let detail = Some(format!(
                "XADD took longer than {} ms",
                XADD_TIMEOUT.as_millis()
            ));
            refused(receipt, Response::unavailable(), detail)
        }
    }
}

/// How a pipeline runs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Where ingress listens (loopback by default).
    pub listen: SocketAddr,
    /// The inbox (an SQLite file or a PostgreSQL database).
    pub db: InboxAt,
    /// Each source's keys.
    pub keys: BTreeMap<Source, Vec<Key>>,
    /// Redis URL.
    pub redis_url: String,
    /// Stream and group.
    pub names: Names,
    /// How many consumers to run.
    pub consumers: usize,
    /// Entries per batch.
    pub count: usize,
    /// Pending entries idle longer than this are taken over (ms).
    pub min_idle_ms: u64,
    /// Deliveries before an unprocessable entry is dead-lettered.
    pub max_deliveries: u32,
    /// SQLite busy timeout (ms).
    pub busy_timeout_ms: u64,
    /// Body limit in bytes.
    pub max_body_bytes: usize,
    /// Freshness window in seconds.
    pub freshness_seconds: i64,
    /// How long to wait for a request's whole body (ms) before answering 408 (0 is taken
    /// as 1 ms; the command line refuses 0).
    pub body_timeout_ms: u64,
    /// A wrong pipeline to run instead.
    pub mutant: Option<Mutant>,
    /// Use a clock the caller shifts ([`Clock::set_now`]) instead of the real one.
    pub shifted_clock: bool,
}

impl ServeOptions {
    /// Consumer `name`'s options.
    pub fn consumer(&self, name: &str) -> ConsumerOptions {
        ConsumerOptions {
            redis_url: self.redis_url.clone(),
            names: self.names.clone(),
            name: name.to_owned(),
            db: self.db.clone(),
            count: self.count,
            block_ms: 100,
            min_idle_ms: self.min_idle_ms,
            claim_every_ms: self.min_idle_ms.clamp(10, 1_000),
            max_deliveries: self.max_deliveries,
            busy_timeout_ms: self.busy_timeout_ms,
            mutant: self.mutant,
        }
    }
}

/// What `serve` sets beyond [`ServeOptions`]: the per-source rate limit and the
/// connection limits. Drills, `run` and `load` take the defaults, which they never reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeLimits {
    /// Requests per second per source (`None`: no limit).
    pub rate: Option<RateLimit>,
    /// The header-read timeout and the connection cap.
    pub connections: ConnectionLimits,
}

impl Default for ServeLimits {
    fn default() -> ServeLimits {
        ServeLimits {
            rate: Some(RateLimit::default()),
            connections: ConnectionLimits::default(),
        }
    }
}

/// Why the pipeline could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// Redis failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The inbox database failed.
    #[error("inbox database: {0}")]
    Db(#[from] rusqlite::Error),
    /// The inbox database failed (either backend).
    #[error("inbox database: {0}")]
    Sql(#[from] SqlError),
    /// The inbox's schema could not be brought to this build's version.
    #[error("{0}")]
    Schema(#[from] super::schema::SchemaError),
    /// Socket or file trouble.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Anything else, in words.
    #[error("{0}")]
    Other(String),
}

/// A running pipeline (ingress plus consumers).
pub struct Running {
    /// Where ingress listens.
    pub addr: SocketAddr,
    /// The handler's state (clock, fault switch).
    pub state: Arc<IngressState>,
    stop: Arc<AtomicBool>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    consumers: Vec<tokio::task::JoinHandle<Option<Point>>>,
}

/// Starts ingress and `options.consumers` consumer tasks (blocking tasks, each with its
/// own Redis and SQLite connection), with the default [`ServeLimits`].
pub async fn start(
    options: &ServeOptions,
    faults: Arc<dyn Faults>,
) -> Result<Running, PipelineError> {
    start_with(options, &ServeLimits::default(), faults).await
}

/// [`start`] with these limits.
pub async fn start_with(
    options: &ServeOptions,
    limits: &ServeLimits,
    faults: Arc<dyn Faults>,
) -> Result<Running, PipelineError> {
    let conn = store::open(&options.db, options.busy_timeout_ms)?;
    let client = redis::Client::open(options.redis_url.as_str())?;
    let manager_config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(XADD_TIMEOUT))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(500));
    let redis = redis::aio::ConnectionManager::new_lazy_with_config(client, manager_config)?;
    let mut config = IngressConfig::with_keys(options.keys.clone());
    config.max_body_bytes = options.max_body_bytes;
    config.freshness_seconds = options.freshness_seconds;
    let state = Arc::new(IngressState {
        config: RwLock::new(Arc::new(config)),
        limiter: RateLimiter::new(limits.rate),
        apps: Mutex::new(AppsCache {
            conn,
            at: options.db.clone(),
            busy_timeout_ms: options.busy_timeout_ms,
            version: -1,
            apps: Arc::new(Applications::new()),
        }),
        redis,
        names: options.names.clone(),
        clock: if options.shifted_clock {
            Clock::shifted()
        } else {
            Clock::real()
        },
        mutant: options.mutant,
        body_timeout: Duration::from_millis(options.body_timeout_ms.max(1)),
        stream_down: AtomicBool::new(false),
        stopping: tokio::sync::watch::Sender::new(false),
        receipts: Receipts::start(&options.db, options.busy_timeout_ms)?,
        metrics: Arc::new(Metrics::new()),
        sources: Sources {
            redis_url: options.redis_url.clone(),
            names: options.names.clone(),
            db: options.db.clone(),
        },
    });
    let router = axum::Router::new()
        .route(WEBHOOK_PATH, axum::routing::post(webhook))
        .route("/metrics", axum::routing::get(metrics_page))
        .route("/healthz", axum::routing::get(healthz))
        .route("/readyz", axum::routing::get(readyz))
        .method_not_allowed_fallback(not_allowed)
        .fallback(no_route)
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind(options.listen).await?;
    let addr = listener.local_addr()?;
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
    let refused_state = state.clone();
    let refused: super::server::Refused = Arc::new(move |status, detail| {
        let receipt = Receipt {
            at_ms: refused_state.clock.now_ms(),
            status,
            reason: "malformed_request_head".into(),
            detail: Some(bounded(&detail)),
            ..Receipt::default()
        };
        refused_state
            .metrics
            .request(receipt.status, &receipt.reason);
        log_request(&receipt, std::time::Duration::ZERO);
        refused_state.receipts.record(receipt);
    });
    let server = tokio::spawn(super::server::serve(
        listener,
        router,
        limits.connections,
        shutdown_rx,
        refused,
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let mut consumers = Vec::new();
    let prefix = process_prefix();
    for index in 1..=options.consumers {
        let consumer_options = options.consumer(&format!("{prefix}-{index}"));
        consumers.push(spawn_consumer(
            consumer_options,
            faults.clone(),
            stop.clone(),
            Some(state.metrics.clone()),
        ));
    }
    Ok(Running {
        addr,
        state,
        stop,
        shutdown: Some(shutdown_tx),
        server,
        consumers,
    })
}

/// What the consumers of this process are named after: `<hostname>-<pid>`, so several
/// `serve` processes (on one host or many) can share a group without two of them reading
/// as one consumer. The host name is kept to letters, digits, `.`, `_` and `-`.
pub fn process_prefix() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname(2) writes at most `len` bytes into the buffer we own.
    let named = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } == 0;
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    let host: String = String::from_utf8_lossy(&buffer[..end])
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .collect();
    let host = if named && !host.is_empty() {
        host
    } else {
        "host".to_owned()
    };
    format!("{host}-{}", std::process::id())
}

/// Runs one consumer as a blocking task until `stop` (or a kill); a consumer that cannot
/// connect keeps trying.
pub fn spawn_consumer(
    options: ConsumerOptions,
    faults: Arc<dyn Faults>,
    stop: Arc<AtomicBool>,
    metrics: Option<Arc<Metrics>>,
) -> tokio::task::JoinHandle<Option<Point>> {
    tokio::task::spawn_blocking(move || loop {
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        match Consumer::connect(options.clone(), faults.clone()) {
            Ok(consumer) => return consumer.with_metrics(metrics.clone()).run(&stop),
            Err(error) => {
                eprintln!("arrival consumer {}: {error}; retrying", options.name);
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    })
}

impl Running {
    /// Graceful stop: no new connections, in-flight requests answered, each consumer
    /// finishes the batch in hand (commit, then `XACK`) and stops.
    pub async fn shutdown(mut self) {
        self.state.stopping.send_replace(true);
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = self.server.await;
        self.state.receipts.close();
        self.stop.store(true, Ordering::SeqCst);
        for consumer in self.consumers {
            let _ = consumer.await;
        }
    }
}

/// `arrival pipeline serve`: runs until SIGTERM or Ctrl-C, then shuts down gracefully;
/// SIGHUP reads `keys_file` again (a bad file keeps the keys in force).
pub async fn serve(
    options: &ServeOptions,
    limits: &ServeLimits,
    keys_file: &Path,
) -> Result<(), PipelineError> {
    use tokio::signal::unix::{signal, SignalKind};
    // Before the address is printed: a SIGHUP from then on reloads, never kills.
    let mut term = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    super::keys::warn_if_loose(keys_file);
    let running = start_with(options, limits, Arc::new(super::consumer::NoFaults)).await?;
    eprintln!(
        "arrival pipeline: listening on http://{}{WEBHOOK_PATH} with {} consumer(s), stream {}, group {}",
        running.addr, options.consumers, options.names.stream, options.names.group
    );
    println!("listening {}", running.addr);
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = hangup.recv() => {
                if let Some(keys) = super::keys::reread(keys_file, &running.state.keys()) {
                    running.state.replace_keys(keys);
                }
            }
        }
    }
    eprintln!("arrival pipeline: stopping (finishing in-flight entries)");
    running.shutdown().await;
    eprintln!("arrival pipeline: stopped");
    Ok(())
}
