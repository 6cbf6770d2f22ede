//! The authority served over HTTP for a receiver that reconciles in pull mode
//! (`reconcile = "pull"` in the target file): the fixture's authority snapshots on a
//! loopback port of arrival's own (`GET /cards/{object_id}` answers `{"object_id",
//! "version", "state"}`, 404 for a card without one), every fetch recorded.

use crate::card::conform::HarnessError;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server shares with its owner.
#[derive(Default)]
struct Shared {
    /// The snapshots by card.
    cards: BTreeMap<String, Value>,
    /// Every card fetched (`GET /cards/{id}`, found or not), in order.
    fetches: Vec<String>,
}

/// The authority on its own loopback port, answering from a thread until dropped.
pub struct AuthorityServer {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
}

impl AuthorityServer {
    /// Binds a free loopback port and starts answering.
    pub fn start() -> Result<AuthorityServer, HarnessError> {
        let failed = |error: std::io::Error| HarnessError {
            what: "the authority's port on 127.0.0.1".into(),
            message: error.to_string(),
        };
        let listener = TcpListener::bind("127.0.0.1:0").map_err(failed)?;
        let addr = listener.local_addr().map_err(failed)?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (serving, stopped) = (Arc::clone(&shared), Arc::clone(&stop));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    let _ = answer(stream, &serving);
                }
            }
        });
        Ok(AuthorityServer { addr, shared, stop })
    }

    /// `http://127.0.0.1:PORT`, what `{authority}` becomes.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Serves these snapshots (`{"object_id", "version", "state"}` by card).
    pub fn set_cards(&self, cards: BTreeMap<String, Value>) {
        self.lock().cards = cards;
    }

    /// The cards fetched so far, in order.
    pub fn fetches(&self) -> Vec<String> {
        self.lock().fetches.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for AuthorityServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(100));
    }
}

/// Answers one request: the fetch is recorded before the answer is written, so it is
/// there when the receiver's reconciliation answer reaches arrival.
fn answer(stream: TcpStream, shared: &Mutex<Shared>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let mut header = String::new();
    while reader.read_line(&mut header)? > 0 && !header.trim().is_empty() {
        header.clear();
    }
    let (status, body) = match (method, path.strip_prefix("/cards/")) {
        ("GET", Some(id)) if !id.is_empty() => {
            let mut shared = shared.lock().unwrap_or_else(|p| p.into_inner());
            shared.fetches.push(id.to_owned());
            match shared.cards.get(id) {
                Some(snapshot) => ("200 OK", snapshot.to_string()),
                None => (
                    "404 Not Found",
                    format!("{{\"error\":\"no snapshot of {id}\"}}"),
                ),
            }
        }
        _ => (
            "404 Not Found",
            "{\"error\":\"GET /cards/{object_id}\"}".to_owned(),
        ),
    };
    let mut stream = reader.into_inner();
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}
