//! The SQL state source: one query per part of the document, run in one read-only
//! transaction (one snapshot) on the receiver's SQLite file or PostgreSQL database, the
//! rows turned into the part's JSON by the protocol's column list.

use super::{Database, Kind, Part, Protocol, Shape, StateError};
use postgres::types::{FromSql, Type};
use serde_json::{Map, Value};
use std::time::Duration;

/// One value as the database gave it.
#[derive(Debug)]
enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Bool(bool),
    Json(Value),
}

/// The rows of each query, in the queries' order.
type Results = Vec<Vec<Vec<Cell>>>;

/// Runs the queries and builds the document.
pub fn read(
    database: &Database,
    queries: &[(String, String)],
    protocol: Protocol,
    timeout: Duration,
) -> Result<Value, StateError> {
    let what = match database {
        Database::Sqlite(path) => format!("state SQL on SQLite {path}"),
        Database::Postgres(url) => format!("state SQL on {}", crate::store::db::redact(url)),
    };
    let error = |message: String| StateError {
        what: what.clone(),
        message,
    };
    let results = match database {
        Database::Sqlite(path) => sqlite(path, queries, timeout),
        Database::Postgres(url) => postgres(url, queries, timeout),
    }
    .map_err(error)?;
    let mut document = Map::new();
    for ((name, query), rows) in queries.iter().zip(results) {
        let part = protocol
            .parts()
            .iter()
            .find(|part| part.name == name)
            .expect("parts are checked when the target file is read");
        let value = build(part, rows)
            .map_err(|message| error(format!("query `{name}` ({query}): {message}")))?;
        document.insert(name.clone(), value);
    }
    Ok(Value::Object(document))
}

fn sqlite(path: &str, queries: &[(String, String)], timeout: Duration) -> Result<Results, String> {
    use rusqlite::OpenFlags;
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = rusqlite::Connection::open_with_flags(path, flags)
        .map_err(|error| format!("cannot open the file: {error}"))?;
    conn.busy_timeout(timeout).map_err(|e| e.to_string())?;
    // The whole read has `timeout`: past it the running query is interrupted.
    let interrupt = conn.get_interrupt_handle();
    let (done, wait) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if wait.recv_timeout(timeout) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            interrupt.interrupt();
        }
    });
    let results = sqlite_read(&conn, queries);
    drop(done);
    results.map_err(|error| match error.contains("interrupted") {
        true => format!("{error} (the read took longer than {timeout:?})"),
        false => error,
    })
}

fn sqlite_read(
    conn: &rusqlite::Connection,
    queries: &[(String, String)],
) -> Result<Results, String> {
    use rusqlite::types::ValueRef;
    // A deferred transaction: every query reads the snapshot the first one took.
    conn.execute_batch("BEGIN").map_err(|e| e.to_string())?;
    let mut results = Vec::new();
    for (name, query) in queries {
        let failed = |error: rusqlite::Error| format!("query `{name}` ({query}): {error}");
        let mut statement = conn.prepare(query).map_err(failed)?;
        let width = statement.column_count();
        let mut rows = statement.query([]).map_err(failed)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(failed)? {
            let mut cells = Vec::with_capacity(width);
            for index in 0..width {
                cells.push(match row.get_ref(index).map_err(failed)? {
                    ValueRef::Null => Cell::Null,
                    ValueRef::Integer(n) => Cell::Int(n),
                    ValueRef::Real(x) => Cell::Real(x),
                    ValueRef::Text(bytes) => Cell::Text(String::from_utf8_lossy(bytes).into()),
                    ValueRef::Blob(_) => {
                        return Err(format!("query `{name}` ({query}): a column is a blob"))
                    }
                });
            }
            out.push(cells);
        }
        results.push(out);
    }
    conn.execute_batch("COMMIT").map_err(|e| e.to_string())?;
    Ok(results)
}

/// A `json` or `jsonb` value's text.
struct JsonText(String);

impl<'a> FromSql<'a> for JsonText {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<JsonText, Box<dyn std::error::Error + Sync + Send>> {
        // jsonb's binary form is a version byte, then the text.
        let raw = if *ty == Type::JSONB {
            raw.get(1..).unwrap_or_default()
        } else {
            raw
        };
        Ok(JsonText(std::str::from_utf8(raw)?.to_owned()))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON || *ty == Type::JSONB
    }
}

fn postgres(url: &str, queries: &[(String, String)], timeout: Duration) -> Result<Results, String> {
    let hide = |text: String| match crate::store::db::password_of(url) {
        Some(password) => text.replace(&password, "***"),
        None => text,
    };
    let mut config: postgres::Config = url
        .parse()
        .map_err(|error| hide(format!("not a PostgreSQL URL: {error}")))?;
    config.connect_timeout(timeout);
    let mut client = config
        .connect(postgres::NoTls)
        .map_err(|error| hide(format!("cannot connect: {}", full(&error))))?;
    let mut transaction = client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .map_err(|error| hide(full(&error)))?;
    transaction
        .batch_execute(&format!(
            "SET LOCAL statement_timeout = {}",
            timeout.as_millis()
        ))
        .map_err(|error| hide(full(&error)))?;
    let mut results = Vec::new();
    for (name, query) in queries {
        let failed = |error: String| format!("query `{name}` ({query}): {error}");
        let rows = transaction
            .query(query.as_str(), &[])
            .map_err(|error| failed(full(&error)))?;
        let mut out = Vec::new();
        for row in &rows {
            let cells: Result<Vec<Cell>, String> =
                (0..row.len()).map(|i| pg_cell(row, i)).collect();
            out.push(cells.map_err(failed)?);
        }
        results.push(out);
    }
    transaction.commit().map_err(|error| hide(full(&error)))?;
    Ok(results)
}

/// A PostgreSQL error with its causes (the server's message, when it answered).
fn full(error: &postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text += &format!(": {cause}");
        source = cause.source();
    }
    text
}

fn pg_cell(row: &postgres::Row, index: usize) -> Result<Cell, String> {
    let column = &row.columns()[index];
    let ty = column.type_().clone();
    let got = |error: postgres::Error| format!("column `{}`: {error}", column.name());
    let cell = match ty {
        Type::BOOL => row
            .try_get::<_, Option<bool>>(index)
            .map_err(got)?
            .map(Cell::Bool),
        Type::INT2 => row
            .try_get::<_, Option<i16>>(index)
            .map_err(got)?
            .map(|n| Cell::Int(n.into())),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(index)
            .map_err(got)?
            .map(|n| Cell::Int(n.into())),
        Type::INT8 => row
            .try_get::<_, Option<i64>>(index)
            .map_err(got)?
            .map(Cell::Int),
        Type::FLOAT8 => row
            .try_get::<_, Option<f64>>(index)
            .map_err(got)?
            .map(Cell::Real),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => row
            .try_get::<_, Option<String>>(index)
            .map_err(got)?
            .map(Cell::Text),
        Type::JSON | Type::JSONB => match row.try_get::<_, Option<JsonText>>(index).map_err(got)? {
            Some(JsonText(text)) => Some(Cell::Json(
                serde_json::from_str(&text)
                    .map_err(|error| format!("column `{}`: not JSON: {error}", column.name()))?,
            )),
            None => None,
        },
        other => {
            return Err(format!(
                "column `{}` has type {other}: cast it to text, bigint, boolean or json",
                column.name()
            ))
        }
    };
    Ok(cell.unwrap_or(Cell::Null))
}

/// One cell as the JSON value its column's kind says.
fn value(cell: Cell, column: &str, kind: Kind) -> Result<Value, String> {
    let wrong = |cell: &Cell, wanted: &str| format!("column `{column}` is {cell:?}, not {wanted}");
    match (kind, cell) {
        (_, Cell::Null) => Err(format!("column `{column}` is NULL")),
        (Kind::Text, Cell::Text(text)) => Ok(Value::String(text)),
        (Kind::Count, Cell::Int(n)) if n >= 0 => Ok(Value::from(n as u64)),
        (Kind::Count, Cell::Text(text)) if digits(&text).is_some() => {
            Ok(Value::from(digits(&text).expect("checked")))
        }
        (Kind::Count, Cell::Real(x)) if x >= 0.0 && x.fract() == 0.0 && x < 9.0e15 => {
            Ok(Value::from(x as u64))
        }
        (Kind::Bool, Cell::Bool(flag)) => Ok(Value::Bool(flag)),
        (Kind::Bool, Cell::Int(n @ (0 | 1))) => Ok(Value::Bool(n == 1)),
        (Kind::Json, Cell::Json(json)) => Ok(json),
        (Kind::Json, Cell::Text(text)) => serde_json::from_str(&text)
            .map_err(|error| format!("column `{column}` is not JSON text ({error}): {text}")),
        (Kind::Text, cell) => Err(wrong(&cell, "text")),
        (Kind::Count, cell) => Err(wrong(&cell, "a non-negative integer")),
        (Kind::Bool, cell) => Err(wrong(&cell, "a boolean (or 0/1)")),
        (Kind::Json, cell) => Err(wrong(&cell, "JSON")),
    }
}

/// Text that is a version as the contract writes one: decimal digits only, no sign, no
/// spaces, no leading zero, within 64 bits.
fn digits(text: &str) -> Option<u64> {
    let plain = !text.is_empty()
        && text.bytes().all(|byte| byte.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    plain.then(|| text.parse().ok()).flatten()
}

/// The part's value from its rows.
fn build(part: &Part, rows: Vec<Vec<Cell>>) -> Result<Value, String> {
    let names: Vec<&str> = part.columns.iter().map(|(name, _)| *name).collect();
    if let Some(row) = rows.iter().find(|row| row.len() != names.len()) {
        return Err(format!(
            "returned {} columns, not {} ({})",
            row.len(),
            names.len(),
            names.join(", ")
        ));
    }
    if part.shape == Shape::Number && rows.len() != 1 {
        return Err(format!(
            "returned {} rows, not one row with one count",
            rows.len()
        ));
    }
    let mut objects = Vec::new();
    for row in rows {
        let mut object = Map::new();
        for (cell, (name, kind)) in row.into_iter().zip(part.columns) {
            object.insert((*name).to_owned(), value(cell, name, *kind)?);
        }
        objects.push(object);
    }
    let first = |object: &mut Map<String, Value>| object.remove(names[0]).expect("a column");
    Ok(match part.shape {
        Shape::List => Value::Array(objects.into_iter().map(Value::Object).collect()),
        Shape::Column | Shape::Number => {
            let mut values: Vec<Value> = objects.iter_mut().map(first).collect();
            if part.shape == Shape::Number {
                values.pop().expect("one row")
            } else {
                Value::Array(values)
            }
        }
        Shape::Map => {
            let mut map = Map::new();
            for mut object in objects {
                let key = first(&mut object);
                let key = key.as_str().expect("the key column is text").to_owned();
                if map.insert(key.clone(), Value::Object(object)).is_some() {
                    return Err(format!("returned `{key}` twice"));
                }
            }
            Value::Object(map)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::{CARD_PARTS, FACTS_PARTS};
    use super::{build, digits, sqlite, Cell};
    use serde_json::json;

    #[test]
    fn a_sqlite_query_that_never_ends_is_interrupted_at_the_timeout() {
        let path = std::env::temp_dir().join(format!("arrival-sql-{}.db", std::process::id()));
        let _ = std::fs::remove_file(&path);
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE t (x INTEGER)")
            .unwrap();
        let endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) \
                       SELECT count(*) FROM c";
        let queries = [("cards".to_owned(), endless.to_owned())];
        let timeout = std::time::Duration::from_millis(200);
        let error = sqlite(path.to_str().unwrap(), &queries, timeout).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(error.contains("interrupted"), "{error}");
        assert!(error.contains("longer than 200ms"), "{error}");
    }

    #[test]
    fn version_text_is_plain_digits_only() {
        for (text, read) in [
            ("0", Some(0)),
            ("10", Some(10)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            (" 10", None),
            ("10 ", None),
            ("+10", None),
            ("-1", None),
            ("010", None),
            ("", None),
            ("1e3", None),
        ] {
            assert_eq!(digits(text), read, "{text:?}");
        }
    }

    #[test]
    fn card_rows_become_the_cards_object_with_text_versions_past_two_to_the_sixty_three() {
        let rows = vec![
            vec![
                Cell::Text("card-7".into()),
                Cell::Text("18446744073709551615".into()),
                Cell::Text("{\"title\":\"x\"}".into()),
            ],
            vec![
                Cell::Text("card-8".into()),
                Cell::Int(3),
                Cell::Json(json!({})),
            ],
        ];
        let value = build(&CARD_PARTS[0], rows).unwrap();
        assert_eq!(
            value,
            json!({"card-7": {"version": 18446744073709551615u64, "state": {"title": "x"}},
                   "card-8": {"version": 3, "state": {}}})
        );
    }

    #[test]
    fn a_row_of_the_wrong_width_and_a_key_given_twice_are_named() {
        let narrow = vec![vec![Cell::Text("card-7".into())]];
        assert_eq!(
            build(&CARD_PARTS[0], narrow).unwrap_err(),
            "returned 1 columns, not 3 (object_id, version, state)"
        );
        let row = || {
            vec![
                Cell::Text("card-7".into()),
                Cell::Int(1),
                Cell::Text("{}".into()),
            ]
        };
        assert_eq!(
            build(&CARD_PARTS[0], vec![row(), row()]).unwrap_err(),
            "returned `card-7` twice"
        );
    }

    #[test]
    fn application_flags_take_0_and_1_and_a_count_is_one_row() {
        let rows = vec![vec![
            Cell::Text("xinghe-demo".into()),
            Cell::Text("3f6b".into()),
            Cell::Int(1),
            Cell::Bool(false),
        ]];
        assert_eq!(
            build(&FACTS_PARTS[1], rows).unwrap(),
            json!([{"tenant_id": "xinghe-demo", "application_id": "3f6b",
                    "ready": true, "open_conflict": false}])
        );
        assert_eq!(
            build(&FACTS_PARTS[2], vec![vec![Cell::Int(3)]]).unwrap(),
            json!(3)
        );
        assert_eq!(
            build(&FACTS_PARTS[2], vec![]).unwrap_err(),
            "returned 0 rows, not one row with one count"
        );
        let flag = vec![vec![
            Cell::Text("t".into()),
            Cell::Text("a".into()),
            Cell::Int(2),
            Cell::Bool(true),
        ]];
        assert_eq!(
            build(&FACTS_PARTS[1], flag).unwrap_err(),
            "column `ready` is Int(2), not a boolean (or 0/1)"
        );
    }
}
