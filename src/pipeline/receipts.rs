//! Receipts: one row per request ingress answered, refused ones included, so "the sender
//! says it sent" can be told apart from "we refused it" and "we answered 503". The handler
//! hands each receipt to a writer thread, which writes them to the inbox in batches (one
//! transaction each), so a request never waits for the inbox's write lock. A receipt holds
//! the time, the source header, the matched key id, the answer with its reason and detail,
//! the body's SHA-256, and the tenant, application and event id once the body names them;
//! never the body, never a secret.

use super::sql::{printable, Db, InboxAt, Row, SqlError};
use super::store;
use crate::args;
use crate::facts::envelope::parse_json_object;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Mutex;
use std::time::Duration;

/// How many receipts wait for the writer before the handler logs one instead.
const QUEUE: usize = 65_536;
/// The most receipts one transaction writes.
const BATCH: usize = 512;
/// The most bytes of a header or a detail a receipt keeps: an unsigned sender must not be
/// able to grow the inbox, or to store a body in it through an error message.
pub const MAX_TEXT_BYTES: usize = 160;

/// `text` cut to at most [`MAX_TEXT_BYTES`] on a character boundary, marked when cut.
pub fn bounded(text: &str) -> String {
    if text.len() <= MAX_TEXT_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &text[..end], text.len())
}

/// One answered request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Receipt {
    /// When it was answered (Unix milliseconds, the receiver's clock).
    pub at_ms: i64,
    /// The `X-Acme-Source` header, if any.
    pub source: Option<String>,
    /// The key whose signature matched, once check 2 passed.
    pub key_id: Option<String>,
    /// The HTTP status.
    pub status: u16,
    /// The answer's reason word (`accepted`, `bad_signature`, `body_timeout`, ...).
    pub reason: String,
    /// What exactly was wrong, when the check says.
    pub detail: Option<String>,
    /// The SHA-256 of the body, lowercase hex; `None` when the body was never read whole.
    pub body_sha256: Option<String>,
    /// The tenant the body names.
    pub tenant_id: Option<String>,
    /// The application the body names.
    pub application_id: Option<String>,
    /// The event id the body names.
    pub event_id: Option<String>,
    /// The stream entry, for an answer that appended one.
    pub entry: Option<String>,
}

impl Receipt {
    /// A receipt for `body`: its digest, and the ids it names when it is a JSON object.
    pub fn for_body(body: &[u8]) -> Receipt {
        let mut receipt = Receipt {
            body_sha256: Some(hex(&Sha256::digest(body))),
            ..Receipt::default()
        };
        if let Ok(object) = parse_json_object(body) {
            let text = |name: &str| object.get(name)?.as_str().map(bounded);
            receipt.tenant_id = text("tenant_id");
            receipt.application_id = text("application_id");
            receipt.event_id = text("event_id");
        }
        receipt
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The handler's end of the writer.
#[derive(Debug)]
pub struct Receipts {
    queue: Mutex<Option<SyncSender<Receipt>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Receipts {
    /// Starts the writer on its own connection to the inbox.
    pub fn start(
        db: &InboxAt,
        busy_timeout_ms: u64,
    ) -> Result<Receipts, super::schema::SchemaError> {
        let conn = store::open(db, busy_timeout_ms)?;
        let at = db.clone();
        let reopen = move || store::open(&at, busy_timeout_ms).ok();
        let (queue, inbox) = mpsc::sync_channel(QUEUE);
        let writer = std::thread::Builder::new()
            .name("arrival-receipts".into())
            .spawn(move || write_all(conn, &inbox, &reopen))
            .map_err(|error| {
                super::schema::SchemaError::Db(rusqlite::Error::ToSqlConversionFailure(Box::new(
                    error,
                )))
            })?;
        Ok(Receipts {
            queue: Mutex::new(Some(queue)),
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Hands a receipt to the writer; when its queue is full the receipt is logged on
    /// stderr instead, so it is never lost silently.
    pub fn record(&self, receipt: Receipt) {
        let queue = self
            .queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let sent = match queue.as_ref() {
            Some(queue) => queue.try_send(receipt),
            None => Err(TrySendError::Disconnected(receipt)),
        };
        if let Err(TrySendError::Full(receipt) | TrySendError::Disconnected(receipt)) = sent {
            let line = serde_json::to_string(&receipt).unwrap_or_default();
            eprintln!("arrival ingress: receipt not stored: {line}");
        }
    }

    /// Writes what is queued and stops the writer.
    pub fn close(&self) {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }
}

impl Drop for Receipts {
    fn drop(&mut self) {
        self.close();
    }
}

fn write_all(mut conn: Db, inbox: &Receiver<Receipt>, reopen: &dyn Fn() -> Option<Db>) {
    let mut batch: Vec<Receipt> = Vec::new();
    loop {
        let open = match inbox.recv_timeout(Duration::from_millis(50)) {
            Ok(receipt) => {
                batch.push(receipt);
                batch.extend(inbox.try_iter().take(BATCH - 1));
                true
            }
            Err(RecvTimeoutError::Timeout) => true,
            Err(RecvTimeoutError::Disconnected) => false,
        };
        if !batch.is_empty() {
            if conn.is_broken() {
                conn = reopen().unwrap_or(conn);
            }
            match write(&conn, &batch) {
                Ok(()) => batch.clear(),
                // One receipt the database refuses must not hold back the others: each is
                // written alone, and the refused ones go to stderr.
                Err(error) if error.is_entry_fault() => {
                    for receipt in batch.drain(..) {
                        if let Err(error) = write(&conn, std::slice::from_ref(&receipt)) {
                            let line = serde_json::to_string(&receipt).unwrap_or_default();
                            eprintln!("arrival ingress: receipt not stored ({error}): {line}");
                        }
                    }
                }
                Err(error) if open && batch.len() < QUEUE => {
                    eprintln!("arrival ingress: receipts wait for the inbox: {error}");
                }
                Err(error) => {
                    for receipt in batch.drain(..) {
                        let line = serde_json::to_string(&receipt).unwrap_or_default();
                        eprintln!("arrival ingress: receipt not stored ({error}): {line}");
                    }
                }
            }
        }
        if !open && batch.is_empty() {
            return;
        }
    }
}

fn write(db: &Db, batch: &[Receipt]) -> Result<(), SqlError> {
    let bound = |text: &Option<String>| text.as_deref().map(|text| bounded(&printable(text)));
    let plain = |text: &Option<String>| text.as_deref().map(|text| printable(text).into_owned());
    store::in_transaction(db, |tx| {
        for r in batch {
            let (source, detail) = (bound(&r.source), bound(&r.detail));
            let (tenant, application, event) = (
                plain(&r.tenant_id),
                plain(&r.application_id),
                plain(&r.event_id),
            );
            tx.exec(
                "INSERT INTO receipts (at_ms, source, key_id, status, reason, detail, body_sha256,
                                       tenant_id, application_id, event_id, entry)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                args![
                    r.at_ms,
                    source.as_deref(),
                    &r.key_id,
                    i64::from(r.status),
                    r.reason.as_str(),
                    detail.as_deref(),
                    &r.body_sha256,
                    tenant.as_deref(),
                    application.as_deref(),
                    event.as_deref(),
                    &r.entry
                ],
            )?;
        }
        Ok(())
    })
}

/// Receipt retention: deletes the receipts answered before `before_ms`; how many.
pub fn trim(db: &Db, before_ms: i64) -> Result<u64, SqlError> {
    db.exec("DELETE FROM receipts WHERE at_ms < ?1", args![before_ms])
}

/// The receipts of one event (`tenant/source/event_id`), or the last `limit` of all, oldest
/// first.
pub fn list(
    db: &Db,
    event: Option<&crate::facts::envelope::FactId>,
    limit: usize,
) -> Result<Vec<Receipt>, SqlError> {
    let sql = "SELECT at_ms, source, key_id, status, reason, detail, body_sha256, tenant_id,
                      application_id, event_id, entry FROM receipts";
    let limit = limit.min(i64::MAX as usize) as i64;
    let rows = match event {
        Some(id) => db.rows(
            &format!(
                "{sql} WHERE tenant_id = ?1 AND source = ?2 AND event_id = ?3 ORDER BY seq DESC LIMIT ?4"
            ),
            args![&id.tenant_id, id.source.as_str(), &id.event_id, limit],
        )?,
        None => db.rows(&format!("{sql} ORDER BY seq DESC LIMIT ?1"), args![limit])?,
    };
    let mut out = rows.iter().map(row_of).collect::<Result<Vec<_>, _>>()?;
    out.reverse();
    Ok(out)
}

/// Every receipt whose body names application `key`, oldest first.
pub fn of_application(
    db: &Db,
    key: &crate::facts::application::AppKey,
) -> Result<Vec<Receipt>, SqlError> {
    db.rows(
        "SELECT at_ms, source, key_id, status, reason, detail, body_sha256, tenant_id,
                application_id, event_id, entry FROM receipts
         WHERE tenant_id = ?1 AND application_id = ?2 ORDER BY seq",
        args![&key.tenant_id, &key.application_id],
    )?
    .iter()
    .map(row_of)
    .collect()
}

fn row_of(row: &Row) -> Result<Receipt, SqlError> {
    Ok(Receipt {
        at_ms: row.int(0)?,
        source: row.opt_text(1)?,
        key_id: row.opt_text(2)?,
        status: u16::try_from(row.int(3)?)
            .map_err(|_| SqlError::Data("a receipt's status is not an HTTP status".into()))?,
        reason: row.text(4)?,
        detail: row.opt_text(5)?,
        body_sha256: row.opt_text(6)?,
        tenant_id: row.opt_text(7)?,
        application_id: row.opt_text(8)?,
        event_id: row.opt_text(9)?,
        entry: row.opt_text(10)?,
    })
}
