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
        ("GET", Some(raw)) if !raw.is_empty() => {
            // An HTTP client escapes what a request line cannot carry (a space, `/`, `?`).
            let id = percent_decoded(raw);
            let id = id.as_str();
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

/// `text` with every `%XX` turned back into its byte (a `%` not followed by two hex digits
/// stays as it is), read as UTF-8.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|pair| std::str::from_utf8(pair).ok())
            .and_then(|pair| u8::from_str_radix(pair, 16).ok());
        match (bytes[at], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::percent_decoded;

    #[test]
    fn a_card_id_escaped_by_the_receiver_s_http_client_is_read_back() {
        assert_eq!(percent_decoded("card%207%2F%C3%BC%3F"), "card 7/ü?");
        assert_eq!(percent_decoded("card-7"), "card-7");
        assert_eq!(percent_decoded("100%"), "100%");
        assert_eq!(percent_decoded("%zz%4"), "%zz%4");
    }
}
