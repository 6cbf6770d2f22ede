//! The HTTP/1 server under ingress: accepts connections up to a cap, serves each with a
//! header-read timeout, and on shutdown finishes the requests in hand without waiting for
//! clients that never sent a whole request head.
//!
//! `axum::serve` has no header-read timeout and no connection cap, so this is the accept
//! loop written out with hyper's `http1::Builder` (its `header_read_timeout`, driven by
//! hyper-util's tokio timer) and a tokio semaphore:
//!
//! - **Cap.** A permit is taken before `accept`, so beyond `max_connections` new
//!   connections wait in the kernel's listen backlog (1024 with tokio's `bind`) until a
//!   connection closes; past the backlog the kernel drops them. Nothing accepted is ever
//!   closed unanswered for being over the cap.
//! - **Header timeout.** A connection that has not sent a whole request head within the
//!   timeout is closed without an answer (hyper's `HeaderTimeout`). The clock starts
//!   when hyper starts reading a head: on a new connection, and again on a kept-alive one
//!   after each answer, so an idle kept-alive connection is closed after the same time.
//! - **Shutdown.** The listener is closed, then each connection is told to stop: one that
//!   never had a request head dispatched (a client that sent nothing or half its headers)
//!   is dropped at once; one that did is let finish its request (hyper closes it after
//!   the answer, or at once when it sits idle between requests). The server returns once
//!   every connection is gone, which it counts by taking back all the permits.

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// How long a connection may take to send a whole request head, by default.
pub const DEFAULT_HEADER_TIMEOUT_MS: u64 = 10_000;
/// How many connections are served at once, by default.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 1_024;

/// The connection limits of one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a connection may take to send a whole request head (at least 1 ms).
    pub header_timeout: Duration,
    /// How many connections are served at once (at least 1).
    pub max_connections: u32,
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            header_timeout: Duration::from_millis(DEFAULT_HEADER_TIMEOUT_MS),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Told of every request head hyper refused itself, before any handler saw it: the status
/// it answered (400 for a head that does not parse, 431 for one too large) and why.
pub type Refused = Arc<dyn Fn(u16, String) + Send + Sync>;

/// Serves `router` on `listener` until `shutdown` resolves (or its sender is dropped),
/// then stops as the module says and returns once every connection is closed; each head
/// hyper refuses is told to `refused`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: tokio::sync::oneshot::Receiver<()>,
    refused: Refused,
) -> std::io::Result<()> {
    let max = limits.max_connections.max(1);
    let permits = Arc::new(Semaphore::new(max as usize));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
        };
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let connection = Connection {
                    peer,
                    refused: refused.clone(),
                    router: router.clone(),
                    header_timeout: limits.header_timeout.max(Duration::from_millis(1)),
                    stop: stop_rx.clone(),
                    _permit: permit,
                };
                tokio::spawn(connection.run(stream));
            }
            // Out of file descriptors and the like: wait a little rather than spin.
            Err(error) => {
                tracing::error!(target: "arrival::ingress", error = %error, "accept failed");
                tokio::select! {
                    _ = &mut shutdown => break,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Each open connection holds a permit: all of them back means all are closed.
    let _all = permits.acquire_many(max).await;
    Ok(())
}

/// Resolves once the server says stop (or is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// One accepted connection and what it needs.
struct Connection {
    peer: SocketAddr,
    refused: Refused,
    router: Router,
    header_timeout: Duration,
    stop: watch::Receiver<bool>,
    /// Held while the connection is open (the cap).
    _permit: OwnedSemaphorePermit,
}

impl Connection {
    async fn run(mut self, stream: TcpStream) {
        // Set when hyper hands a parsed request head to the router.
        let dispatched = Arc::new(AtomicBool::new(false));
        let service = {
            let dispatched = dispatched.clone();
            let inner = TowerToHyperService::new(self.router.clone());
            hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                dispatched.store(true, Ordering::SeqCst);
                hyper::service::Service::call(&inner, request)
            })
        };
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_timeout);
        let mut connection = pin!(builder.serve_connection(TokioIo::new(stream), service));
        let result = tokio::select! {
            result = connection.as_mut() => result,
            () = stopped(&mut self.stop) => {
                connection.as_mut().graceful_shutdown();
                if !dispatched.load(Ordering::SeqCst) {
                    // Nothing or half a head: no request in hand, nothing to finish.
                    return;
                }
                connection.await
            }
        };
        match result {
            Err(error) if error.is_timeout() && !dispatched.load(Ordering::SeqCst) => {
                tracing::info!(
                    target: "arrival::ingress",
                    peer = %self.peer,
                    header_timeout_ms = self.header_timeout.as_millis() as u64,
                    "connection closed: no whole request head in time"
                );
            }
            // hyper answered the head itself (a receipt must say so all the same).
            Err(error) if error.is_parse_too_large() => (self.refused)(431, error.to_string()),
            Err(error) if error.is_parse() => (self.refused)(400, error.to_string()),
            _ => {}
        }
    }
}
