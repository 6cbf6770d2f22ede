//! The Redis Stream and its consumer group, spoken to with plain commands (Redis 7.0):
//! `XADD` for ingress, `XREADGROUP` (own pending with `0`, new with `>`), `XAUTOCLAIM`,
//! `XPENDING`, `XACK`, and a script that copies an entry to the dead-letter stream and
//! acknowledges it atomically, once per original entry id.

use crate::facts::envelope::Envelope;
use redis::{Connection, RedisResult, Value};
use std::collections::HashMap;
use std::time::Duration;

/// The keys and names one pipeline uses in Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    /// The stream ingress appends to.
    pub stream: String,
    /// The consumer group.
    pub group: String,
}

impl Names {
    /// The dead-letter stream: `<stream>:dead`.
    pub fn dead_letter(&self) -> String {
        format!("{}:dead", self.stream)
    }

    /// The set of original entry ids already dead-lettered: `<stream>:dead:ids`.
    pub fn dead_ids(&self) -> String {
        format!("{}:dead:ids", self.stream)
    }

    /// The hash of entry id -> deliveries that met an infrastructure failure (the inbox
    /// could not be opened, written or committed): `<stream>:infra`. Redis counts every
    /// delivery; these are subtracted, so they never count toward an entry's poison budget.
    pub fn infra(&self) -> String {
        format!("{}:infra", self.stream)
    }

    /// Every key this pipeline writes.
    pub fn keys(&self) -> [String; 4] {
        [
            self.stream.clone(),
            self.dead_letter(),
            self.dead_ids(),
            self.infra(),
        ]
    }
}

/// A stream entry as read: its id and fields (`None`: deleted from the stream while
/// pending).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawEntry {
    /// The Redis entry id (`ms-seq`).
    pub id: String,
    /// Field -> bytes.
    pub fields: Option<HashMap<String, Vec<u8>>>,
}

impl RawEntry {
    /// A field's bytes.
    pub fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields.as_ref()?.get(name).map(Vec::as_slice)
    }
}

/// Opens a plain connection with timeouts.
pub fn connect(url: &str, timeout: Duration) -> RedisResult<Connection> {
    let client = redis::Client::open(url)?;
    let conn = client.get_connection_with_timeout(timeout)?;
    conn.set_write_timeout(Some(timeout))?;
    conn.set_read_timeout(Some(timeout))?;
    Ok(conn)
}

/// Creates the group (and the stream) unless it exists.
pub fn ensure_group(conn: &mut Connection, names: &Names) -> RedisResult<()> {
    let created: RedisResult<Value> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&names.stream)
        .arg(&names.group)
        .arg("0")
        .arg("MKSTREAM")
        .query(conn);
    match created {
        Err(error) if error.code() == Some("BUSYGROUP") => Ok(()),
        other => other.map(|_| ()),
    }
}

/// The `XADD` ingress sends: source, raw body, receive time, and the tenant, application
/// and event id the body names (the chain `pipeline explain` follows from a receipt to a
/// verdict). Consumers decide on `source` and `body` alone, so an entry written before the
/// three ids were added is consumed as before.
pub fn xadd_command(
    names: &Names,
    source: &str,
    body: &[u8],
    received_ms: i64,
    named: Option<&Envelope>,
) -> redis::Cmd {
    let mut cmd = redis::cmd("XADD");
    cmd.arg(&names.stream)
        .arg("*")
        .arg("source")
        .arg(source)
        .arg("body")
        .arg(body)
        .arg("received_ms")
        .arg(received_ms);
    if let Some(envelope) = named {
        cmd.arg("tenant_id")
            .arg(envelope.tenant_id())
            .arg("application_id")
            .arg(envelope.application_id())
            .arg("event_id")
            .arg(envelope.event_id());
    }
    cmd
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        Value::Int(number) => Some(number.to_string()),
        _ => None,
    }
}

fn bytes(value: &Value) -> Vec<u8> {
    match value {
        Value::BulkString(bytes) => bytes.clone(),
        Value::SimpleString(text) => text.as_bytes().to_vec(),
        Value::Int(number) => number.to_string().into_bytes(),
        _ => Vec::new(),
    }
}

/// Parses `[[id, [field, value, ...] | nil], ...]`.
fn entries(value: &Value) -> Vec<RawEntry> {
    let Value::Array(items) = value else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| {
            let Value::Array(parts) = item else {
                return None;
            };
            let id = text(parts.first()?)?;
            let fields = match parts.get(1) {
                Some(Value::Array(flat)) => Some(
                    flat.chunks(2)
                        .filter_map(|pair| Some((text(&pair[0])?, bytes(pair.get(1)?))))
                        .collect(),
                ),
                Some(Value::Map(pairs)) => Some(
                    pairs
                        .iter()
                        .filter_map(|(k, v)| Some((text(k)?, bytes(v))))
                        .collect(),
                ),
                _ => None,
            };
            Some(RawEntry { id, fields })
        })
        .collect()
}

/// `XREADGROUP GROUP g c COUNT n [BLOCK ms] STREAMS key <from>`: `from` is `0` (own
/// pending) or `>` (new).
pub fn read_group(
    conn: &mut Connection,
    names: &Names,
    consumer: &str,
    from: &str,
    count: usize,
    block_ms: Option<u64>,
) -> RedisResult<Vec<RawEntry>> {
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP")
        .arg(&names.group)
        .arg(consumer)
        .arg("COUNT")
        .arg(count);
    if let Some(block) = block_ms {
        cmd.arg("BLOCK").arg(block);
    }
    cmd.arg("STREAMS").arg(&names.stream).arg(from);
    let reply: Value = cmd.query(conn)?;
    let streams = match reply {
        Value::Array(streams) => streams,
        Value::Map(pairs) => pairs
            .into_iter()
            .map(|(k, v)| Value::Array(vec![k, v]))
            .collect(),
        _ => return Ok(Vec::new()),
    };
    Ok(streams
        .iter()
        .filter_map(|stream| match stream {
            Value::Array(parts) => parts.get(1).map(entries),
            _ => None,
        })
        .flatten()
        .collect())
}

/// `XAUTOCLAIM key group consumer min_idle start COUNT n`: `(next cursor, claimed)`.
pub fn autoclaim(
    conn: &mut Connection,
    names: &Names,
    consumer: &str,
    min_idle_ms: u64,
    start: &str,
    count: usize,
) -> RedisResult<(String, Vec<RawEntry>)> {
    let reply: Value = redis::cmd("XAUTOCLAIM")
        .arg(&names.stream)
        .arg(&names.group)
        .arg(consumer)
        .arg(min_idle_ms)
        .arg(start)
        .arg("COUNT")
        .arg(count)
        .query(conn)?;
    let Value::Array(parts) = reply else {
        return Ok(("0-0".into(), Vec::new()));
    };
    let next = parts.first().and_then(text).unwrap_or_else(|| "0-0".into());
    let mut claimed = parts.get(1).map(entries).unwrap_or_default();
    // Since 7.0 the third element lists pending ids whose entries were deleted: Redis drops
    // them from the pending list. They come back as entries without fields, so the consumer
    // dead-letters them instead of losing them without a trace.
    if let Some(Value::Array(deleted)) = parts.get(2) {
        claimed.extend(
            deleted
                .iter()
                .filter_map(text)
                .map(|id| RawEntry { id, fields: None }),
        );
    }
    Ok((next, claimed))
}

/// One pending entry: id, owner, idle time, delivery count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingEntry {
    /// The entry id.
    pub id: String,
    /// The consumer holding it.
    pub consumer: String,
    /// Milliseconds since it was last delivered.
    pub idle_ms: u64,
    /// How many times it has been delivered.
    pub deliveries: u32,
}

/// `XPENDING key group start end count`: the pending entries in that range.
pub fn pending_range(
    conn: &mut Connection,
    names: &Names,
    start: &str,
    end: &str,
    count: usize,
) -> RedisResult<Vec<PendingEntry>> {
    pending_of(conn, names, start, end, count, None)
}

/// `XPENDING key group start end count [consumer]`: the pending entries in that range,
/// only `consumer`'s when it is named.
pub fn pending_of(
    conn: &mut Connection,
    names: &Names,
    start: &str,
    end: &str,
    count: usize,
    consumer: Option<&str>,
) -> RedisResult<Vec<PendingEntry>> {
    let mut cmd = redis::cmd("XPENDING");
    cmd.arg(&names.stream)
        .arg(&names.group)
        .arg(start)
        .arg(end)
        .arg(count);
    if let Some(consumer) = consumer {
        cmd.arg(consumer);
    }
    let reply: Value = cmd.query(conn)?;
    let Value::Array(items) = reply else {
        return Ok(Vec::new());
    };
    Ok(items
        .iter()
        .filter_map(|item| {
            let Value::Array(parts) = item else {
                return None;
            };
            Some(PendingEntry {
                id: text(parts.first()?)?,
                consumer: text(parts.get(1)?)?,
                idle_ms: text(parts.get(2)?)?.parse().ok()?,
                deliveries: text(parts.get(3)?)?.parse().ok()?,
            })
        })
        .collect())
}

/// Removes `consumer` from the group if it holds no pending entry (`XPENDING ... consumer`,
/// then `XGROUP DELCONSUMER`); `true` when it was removed. A consumer that stopped holds
/// nothing new between the two commands (no other consumer can hand it an entry), so no
/// pending entry is lost with it. Unique consumer names per process would otherwise pile up
/// in the group, one per process ever started.
pub fn leave_group_if_idle(
    conn: &mut Connection,
    names: &Names,
    consumer: &str,
) -> RedisResult<bool> {
    let reply: Value = redis::cmd("XPENDING")
        .arg(&names.stream)
        .arg(&names.group)
        .arg("-")
        .arg("+")
        .arg(1)
        .arg(consumer)
        .query(conn)?;
    if matches!(&reply, Value::Array(items) if !items.is_empty()) {
        return Ok(false);
    }
    redis::cmd("XGROUP")
        .arg("DELCONSUMER")
        .arg(&names.stream)
        .arg(&names.group)
        .arg(consumer)
        .query::<Value>(conn)?;
    Ok(true)
}

/// The names of the group's consumers (`XINFO CONSUMERS`).
pub fn consumer_names(conn: &mut Connection, names: &Names) -> RedisResult<Vec<String>> {
    let reply: Value = redis::cmd("XINFO")
        .arg("CONSUMERS")
        .arg(&names.stream)
        .arg(&names.group)
        .query(conn)?;
    let Value::Array(consumers) = reply else {
        return Ok(Vec::new());
    };
    Ok(consumers.iter().filter_map(field_name).collect())
}

/// The `name` field of one `XINFO` record (a flat array or a map).
fn field_name(record: &Value) -> Option<String> {
    let pairs: Vec<(String, &Value)> = match record {
        Value::Array(flat) => flat
            .chunks(2)
            .filter_map(|pair| Some((text(&pair[0])?, pair.get(1)?)))
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, v)))
            .collect(),
        _ => return None,
    };
    pairs
        .iter()
        .find(|(k, _)| k == "name")
        .and_then(|(_, v)| text(v))
}

/// The delivery count of a pending entry (0 when it is not pending).
pub fn deliveries(conn: &mut Connection, names: &Names, id: &str) -> RedisResult<u32> {
    Ok(pending_range(conn, names, id, id, 1)?
        .first()
        .map_or(0, |entry| entry.deliveries))
}

/// How many entries the group has pending.
pub fn pending_count(conn: &mut Connection, names: &Names) -> RedisResult<usize> {
    let reply: Value = redis::cmd("XPENDING")
        .arg(&names.stream)
        .arg(&names.group)
        .query(conn)?;
    Ok(match reply {
        Value::Array(parts) => parts
            .first()
            .and_then(text)
            .and_then(|count| count.parse().ok())
            .unwrap_or(0),
        _ => 0,
    })
}

/// `XLEN key` (0 for a stream that does not exist).
pub fn length(conn: &mut Connection, key: &str) -> RedisResult<i64> {
    redis::cmd("XLEN").arg(key).query(conn)
}

/// The group's pending entries per consumer (`XPENDING key group`), and the idle time in
/// milliseconds of the most idle among the first 1000 pending entries; nothing when the
/// group does not exist yet.
pub fn pending_by_consumer(
    conn: &mut Connection,
    names: &Names,
) -> RedisResult<(Vec<(String, i64)>, u64)> {
    let reply: RedisResult<Value> = redis::cmd("XPENDING")
        .arg(&names.stream)
        .arg(&names.group)
        .query(conn);
    let reply = match reply {
        Err(error) if error.code() == Some("NOGROUP") => return Ok((Vec::new(), 0)),
        other => other?,
    };
    let mut per_consumer = Vec::new();
    if let Value::Array(parts) = &reply {
        if let Some(Value::Array(consumers)) = parts.get(3) {
            for consumer in consumers {
                let Value::Array(pair) = consumer else {
                    continue;
                };
                if let (Some(name), Some(count)) = (
                    pair.first().and_then(text),
                    pair.get(1).and_then(text).and_then(|n| n.parse().ok()),
                ) {
                    per_consumer.push((name, count));
                }
            }
        }
    }
    let idle = pending_range(conn, names, "-", "+", 1000)?
        .iter()
        .map(|entry| entry.idle_ms)
        .max()
        .unwrap_or(0);
    Ok((per_consumer, idle))
}

/// `XACK key group id...`, and the acknowledged ids' infrastructure counts dropped
/// (`HDEL`), in one round trip.
pub fn ack(conn: &mut Connection, names: &Names, ids: &[String]) -> RedisResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    redis::pipe()
        .cmd("XACK")
        .arg(&names.stream)
        .arg(&names.group)
        .arg(ids)
        .ignore()
        .cmd("HDEL")
        .arg(names.infra())
        .arg(ids)
        .ignore()
        .query::<()>(conn)
}

/// Counts one delivery of each of `ids` as met by an infrastructure failure (`HINCRBY`).
pub fn note_infrastructure(
    conn: &mut Connection,
    names: &Names,
    ids: &[String],
) -> RedisResult<()> {
    let mut pipe = redis::pipe();
    for id in ids {
        pipe.cmd("HINCRBY")
            .arg(names.infra())
            .arg(id)
            .arg(1)
            .ignore();
    }
    pipe.query::<()>(conn)
}

/// How many deliveries of `id` met an infrastructure failure.
pub fn infrastructure_deliveries(
    conn: &mut Connection,
    names: &Names,
    id: &str,
) -> RedisResult<u32> {
    let count: Option<u32> = redis::cmd("HGET").arg(names.infra()).arg(id).query(conn)?;
    Ok(count.unwrap_or(0))
}

const DEAD_LETTER_SCRIPT: &str = r"
if redis.call('SADD', KEYS[3], ARGV[1]) == 1 then
  redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
end
redis.call('HDEL', KEYS[4], ARGV[1])
return redis.call('XACK', KEYS[1], ARGV[2], ARGV[1])
";

/// What a dead letter says about its entry besides the entry's own fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// `unparseable` or `undecidable`.
    pub category: &'static str,
    /// The deliveries that counted toward the budget (infrastructure failures left out).
    pub deliveries: u32,
    /// Every delivery, as Redis counted them.
    pub redis_deliveries: u32,
    /// The error text.
    pub reason: String,
    /// `(tenant_id, event_id)` when the entry parsed (the source is the entry's `source`).
    pub identity: Option<(String, String)>,
}

/// Copies an entry to the dead-letter stream (once per original id, even when delivered
/// again after a crash) with `entry`, `category`, `deliveries`, `redis_deliveries`,
/// `reason`, `source`, `body` and, when it parsed, `tenant_id` and `event_id`; drops its
/// infrastructure count and acknowledges it; all atomically.
pub fn dead_letter(
    conn: &mut Connection,
    names: &Names,
    entry: &RawEntry,
    letter: &DeadLetter,
) -> RedisResult<()> {
    let script = redis::Script::new(DEAD_LETTER_SCRIPT);
    let mut invocation = script.prepare_invoke();
    invocation
        .key(&names.stream)
        .key(names.dead_letter())
        .key(names.dead_ids())
        .key(names.infra())
        .arg(&entry.id)
        .arg(&names.group)
        .arg("entry")
        .arg(&entry.id)
        .arg("category")
        .arg(letter.category)
        .arg("deliveries")
        .arg(letter.deliveries)
        .arg("redis_deliveries")
        .arg(letter.redis_deliveries)
        .arg("reason")
        .arg(&letter.reason)
        .arg("source")
        .arg(entry.field("source").unwrap_or_default())
        .arg("body")
        .arg(entry.field("body").unwrap_or_default());
    if let Some((tenant_id, event_id)) = &letter.identity {
        invocation
            .arg("tenant_id")
            .arg(tenant_id)
            .arg("event_id")
            .arg(event_id);
    }
    invocation.invoke::<Value>(conn).map(|_| ())
}

/// Every entry of a stream, in order.
pub fn range_all(conn: &mut Connection, key: &str) -> RedisResult<Vec<RawEntry>> {
    let reply: Value = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query(conn)?;
    Ok(entries(&reply))
}

/// What the group still owes: entries pending (delivered, not acknowledged) plus entries
/// not yet delivered, and the dead-letter stream's length.
pub fn backlog(conn: &mut Connection, names: &Names) -> RedisResult<(usize, usize)> {
    let dead = length(conn, &names.dead_letter())? as usize;
    if length(conn, &names.stream)? == 0 {
        return Ok((0, dead));
    }
    let pending = pending_count(conn, names)?;
    let undelivered = match last_delivered(conn, names)? {
        Some(last) => range_all(conn, &names.stream)?
            .iter()
            .filter(|entry| id_order(&entry.id, &last) == std::cmp::Ordering::Greater)
            .count(),
        None => length(conn, &names.stream)? as usize,
    };
    Ok((pending + undelivered, dead))
}

/// Deletes every key of this pipeline.
pub fn delete_keys(conn: &mut Connection, names: &Names) -> RedisResult<()> {
    redis::cmd("DEL")
        .arg(&names.keys())
        .query::<Value>(conn)
        .map(|_| ())
}

/// The group's last delivered id: entries after it are new (`>`).
pub fn last_delivered(conn: &mut Connection, names: &Names) -> RedisResult<Option<String>> {
    let reply: Value = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(&names.stream)
        .query(conn)?;
    let Value::Array(groups) = reply else {
        return Ok(None);
    };
    for group in &groups {
        let pairs: Vec<(String, &Value)> = match group {
            Value::Array(flat) => flat
                .chunks(2)
                .filter_map(|pair| Some((text(&pair[0])?, pair.get(1)?)))
                .collect(),
            Value::Map(pairs) => pairs
                .iter()
                .filter_map(|(k, v)| Some((text(k)?, v)))
                .collect(),
            _ => continue,
        };
        let name = pairs
            .iter()
            .find(|(k, _)| k == "name")
            .and_then(|(_, v)| text(v));
        if name.as_deref() == Some(names.group.as_str()) {
            return Ok(pairs
                .iter()
                .find(|(k, _)| k == "last-delivered-id")
                .and_then(|(_, v)| text(v)));
        }
    }
    Ok(None)
}

/// Every group of `stream` with its last delivered id (`XINFO GROUPS`); none when the
/// stream does not exist.
pub fn groups(conn: &mut Connection, stream: &str) -> RedisResult<Vec<(String, String)>> {
    if redis::cmd("EXISTS").arg(stream).query::<i64>(conn)? == 0 {
        return Ok(Vec::new());
    }
    let reply: Value = redis::cmd("XINFO").arg("GROUPS").arg(stream).query(conn)?;
    let Value::Array(groups) = reply else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for group in &groups {
        let pairs: Vec<(String, &Value)> = match group {
            Value::Array(flat) => flat
                .chunks(2)
                .filter_map(|pair| Some((text(&pair[0])?, pair.get(1)?)))
                .collect(),
            Value::Map(pairs) => pairs
                .iter()
                .filter_map(|(k, v)| Some((text(k)?, v)))
                .collect(),
            _ => continue,
        };
        let field = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| text(v))
        };
        if let (Some(name), Some(last)) = (field("name"), field("last-delivered-id")) {
            out.push((name, last));
        }
    }
    Ok(out)
}

/// The first entry id every group has acknowledged everything before: per group, its
/// oldest pending entry, or (nothing pending) the id just after its last delivered one;
/// the smallest over the groups. `None` when the stream has no group (nobody acknowledged
/// anything).
pub fn acknowledged_before(conn: &mut Connection, stream: &str) -> RedisResult<Option<String>> {
    let mut boundary: Option<String> = None;
    for (group, last) in groups(conn, stream)? {
        let summary: Value = redis::cmd("XPENDING").arg(stream).arg(&group).query(conn)?;
        let oldest = match &summary {
            Value::Array(parts) => parts.get(1).and_then(text),
            _ => None,
        };
        let bound = oldest.unwrap_or_else(|| {
            let (ms, seq) = last.split_once('-').unwrap_or((&last, "0"));
            format!("{ms}-{}", seq.parse::<u64>().unwrap_or(0) + 1)
        });
        if boundary
            .as_ref()
            .is_none_or(|b| id_order(&bound, b) == std::cmp::Ordering::Less)
        {
            boundary = Some(bound);
        }
    }
    Ok(boundary)
}

/// Stream retention: removes (`XTRIM MINID`, exact) the entries every group has
/// acknowledged and that are older than `retention_ms` at `now_ms`. Returns the boundary
/// used (entries before it were removed) and how many were removed. Not atomic with the
/// groups' progress, which only moves forward; a group created afterwards from id 0 finds
/// the trimmed entries gone.
pub fn trim_acknowledged(
    conn: &mut Connection,
    stream: &str,
    retention_ms: i64,
    now_ms: i64,
) -> RedisResult<(Option<String>, i64)> {
    let Some(acknowledged) = acknowledged_before(conn, stream)? else {
        return Ok((None, 0));
    };
    let old = format!("{}-0", (now_ms - retention_ms).max(0));
    let boundary = match id_order(&old, &acknowledged) {
        std::cmp::Ordering::Less => old,
        _ => acknowledged,
    };
    let removed: i64 = redis::cmd("XTRIM")
        .arg(stream)
        .arg("MINID")
        .arg(&boundary)
        .query(conn)?;
    Ok((Some(boundary), removed))
}

/// Age retention for a stream no group reads (the dead-letter stream): removes, with an
/// exact `XTRIM MINID`, the entries older than `retention_ms` at `now_ms`; how many.
pub fn trim_older(
    conn: &mut Connection,
    stream: &str,
    retention_ms: i64,
    now_ms: i64,
) -> RedisResult<i64> {
    redis::cmd("XTRIM")
        .arg(stream)
        .arg("MINID")
        .arg(format!("{}-0", (now_ms - retention_ms).max(0)))
        .query(conn)
}

/// Compares two entry ids (`ms-seq`) numerically.
pub fn id_order(a: &str, b: &str) -> std::cmp::Ordering {
    let parse = |id: &str| {
        let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
        (
            ms.parse::<u64>().unwrap_or(0),
            seq.parse::<u64>().unwrap_or(0),
        )
    };
    parse(a).cmp(&parse(b))
}
