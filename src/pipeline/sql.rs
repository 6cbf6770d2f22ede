//! The inbox's one connection type over its two databases: SQLite (embedded, the default)
//! and PostgreSQL (for consumers of one group on several machines). The inbox's code is
//! written once against [`Db`]: statements with typed arguments ([`Arg`], built by
//! [`args!`](crate::args)), rows of plain values ([`Row`]), explicit transactions and
//! savepoints. Statements are written with SQLite's numbered placeholders (`?1`, `?2`);
//! the PostgreSQL side rewrites them to `$1`, `$2` once per statement and keeps the
//! prepared statement. Only the migrations and how a write transaction starts differ:
//! SQLite's `BEGIN IMMEDIATE` (one writer), PostgreSQL's SERIALIZABLE (a transaction that
//! raced another is refused at some statement or at commit and is retried whole).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Where the inbox lives: an SQLite file, or a PostgreSQL database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InboxAt {
    /// An SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL connection string (`postgres://USER@HOST:PORT/DATABASE`).
    Postgres(String),
}

impl InboxAt {
    /// Reads `--db`: `postgres://...` or `postgresql://...` is PostgreSQL; `sqlite:PATH` or
    /// any other text is an SQLite file.
    pub fn parse(text: &str) -> InboxAt {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return InboxAt::Postgres(text.to_owned());
        }
        let path = text.strip_prefix("sqlite:").unwrap_or(text);
        InboxAt::Sqlite(PathBuf::from(path.strip_prefix("//").unwrap_or(path)))
    }

    /// The SQLite file, if the inbox is one.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            InboxAt::Sqlite(path) => Some(path),
            InboxAt::Postgres(_) => None,
        }
    }

    /// The whole text, password included, for a child process's `--db`. Never print it:
    /// [`fmt::Display`] is the form for people.
    pub fn connection_text(&self) -> String {
        match self {
            InboxAt::Sqlite(path) => path.display().to_string(),
            InboxAt::Postgres(url) => url.clone(),
        }
    }
}

impl fmt::Display for InboxAt {
    /// The form for people: a PostgreSQL password shown as `***`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InboxAt::Sqlite(path) => write!(f, "{}", path.display()),
            InboxAt::Postgres(url) => f.write_str(&crate::store::db::redact(url)),
        }
    }
}

impl From<PathBuf> for InboxAt {
    fn from(path: PathBuf) -> InboxAt {
        InboxAt::Sqlite(path)
    }
}

impl From<&Path> for InboxAt {
    fn from(path: &Path) -> InboxAt {
        InboxAt::Sqlite(path.to_owned())
    }
}

impl From<&PathBuf> for InboxAt {
    fn from(path: &PathBuf) -> InboxAt {
        InboxAt::Sqlite(path.clone())
    }
}

/// A statement argument, typed so PostgreSQL can bind a NULL.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg<'a> {
    /// A 64-bit integer or NULL.
    Int(Option<i64>),
    /// A text or NULL.
    Text(Option<&'a str>),
}

impl From<i64> for Arg<'_> {
    fn from(value: i64) -> Self {
        Arg::Int(Some(value))
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(value: Option<i64>) -> Self {
        Arg::Int(value)
    }
}

impl From<u32> for Arg<'_> {
    fn from(value: u32) -> Self {
        Arg::Int(Some(value.into()))
    }
}

impl From<Option<u32>> for Arg<'_> {
    fn from(value: Option<u32>) -> Self {
        Arg::Int(value.map(i64::from))
    }
}

impl From<bool> for Arg<'_> {
    fn from(value: bool) -> Self {
        Arg::Int(Some(value.into()))
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(value: &'a str) -> Self {
        Arg::Text(Some(value))
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(value: &'a String) -> Self {
        Arg::Text(Some(value))
    }
}

impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(value: Option<&'a str>) -> Self {
        Arg::Text(value)
    }
}

impl<'a> From<&'a Option<String>> for Arg<'a> {
    fn from(value: &'a Option<String>) -> Self {
        Arg::Text(value.as_deref())
    }
}

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            Arg::Int(value) => value.to_sql(),
            Arg::Text(value) => value.to_sql(),
        }
    }
}

/// Statement arguments: `args![a, b, c]` is `&[Arg::from(a), Arg::from(b), Arg::from(c)]`.
#[macro_export]
macro_rules! args {
    ($($value:expr),* $(,)?) => {
        &[$($crate::pipeline::sql::Arg::from($value)),*][..]
    };
}

/// A text for a diagnostic row (a receipt, a decision failure): a NUL, which PostgreSQL's
/// text cannot hold, is written as U+FFFD, so a row that describes a bad request can
/// always be stored. Never used for an identity the inbox decides on.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// A value read from a row.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    /// NULL.
    Null,
    /// A 64-bit integer.
    Int(i64),
    /// A text.
    Text(String),
}

/// One row of a query's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Row(pub Vec<Val>);

impl Row {
    fn at(&self, index: usize) -> Result<&Val, SqlError> {
        self.0
            .get(index)
            .ok_or_else(|| SqlError::Data(format!("a row has no column {index}")))
    }

    /// Column `index` as a text that must be there.
    pub fn text(&self, index: usize) -> Result<String, SqlError> {
        self.opt_text(index)?
            .ok_or_else(|| SqlError::Data(format!("column {index} is NULL, a text was expected")))
    }

    /// Column `index` as a text or NULL.
    pub fn opt_text(&self, index: usize) -> Result<Option<String>, SqlError> {
        match self.at(index)? {
            Val::Null => Ok(None),
            Val::Text(text) => Ok(Some(text.clone())),
            Val::Int(value) => Err(SqlError::Data(format!(
                "column {index} holds the integer {value}, a text was expected"
            ))),
        }
    }

    /// Column `index` as an integer that must be there.
    pub fn int(&self, index: usize) -> Result<i64, SqlError> {
        self.opt_int(index)?.ok_or_else(|| {
            SqlError::Data(format!("column {index} is NULL, an integer was expected"))
        })
    }

    /// Column `index` as an integer or NULL.
    pub fn opt_int(&self, index: usize) -> Result<Option<i64>, SqlError> {
        match self.at(index)? {
            Val::Null => Ok(None),
            Val::Int(value) => Ok(Some(*value)),
            Val::Text(text) => Err(SqlError::Data(format!(
                "column {index} holds the text `{text}`, an integer was expected"
            ))),
        }
    }
}

/// A database error of either backend, or a stored value this build cannot read.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// SQLite's.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL's.
    #[error("postgres: {}", postgres_text(.0))]
    Postgres(#[from] postgres::Error),
    /// A stored value that does not read as what the inbox wrote (a fact that no longer
    /// parses, a column of the wrong type).
    #[error("{0}")]
    Data(String),
}

fn postgres_text(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => error.to_string(),
    }
}

impl SqlError {
    /// Whether the error is about the data one entry's decision touched rather than about
    /// the inbox: a stored value that no longer converts, a constraint or size limit the
    /// entry's rows break. Everything else, including errors not listed, is the inbox
    /// failing: the entries stay pending and are retried, which can stall but never drops
    /// or dead-letters a whole batch because a disk filled up.
    pub fn is_entry_fault(&self) -> bool {
        match self {
            SqlError::Sqlite(error) => sqlite_entry_fault(error),
            SqlError::Postgres(error) => error.code().is_some_and(|code| {
                let class = &code.code()[..2];
                // 22: data exception; 23: integrity constraint violation (but not a
                // unique violation, which is a race with another consumer: retried).
                class == "22" || (class == "23" && code.code() != "23505")
            }),
            SqlError::Data(_) => true,
        }
    }

    /// Whether retrying the whole transaction at once is the right answer: PostgreSQL's
    /// serialization failure or deadlock (another consumer's transaction won a race), a
    /// unique violation from such a race, or SQLite's busy database.
    pub fn is_retryable(&self) -> bool {
        match self {
            SqlError::Sqlite(rusqlite::Error::SqliteFailure(failure, _)) => matches!(
                failure.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ),
            SqlError::Postgres(error) => error
                .code()
                .is_some_and(|code| matches!(code.code(), "40001" | "40P01" | "23505")),
            _ => false,
        }
    }
}

fn sqlite_entry_fault(error: &rusqlite::Error) -> bool {
    use rusqlite::Error as E;
    use rusqlite::ErrorCode;
    match error {
        E::SqliteFailure(failure, _) => matches!(
            failure.code,
            ErrorCode::ConstraintViolation | ErrorCode::TooBig | ErrorCode::TypeMismatch
        ),
        E::FromSqlConversionFailure(..)
        | E::IntegralValueOutOfRange(..)
        | E::Utf8Error(..)
        | E::NulError(..)
        | E::InvalidColumnType(..)
        | E::ToSqlConversionFailure(..) => true,
        _ => false,
    }
}

/// A PostgreSQL connection with its prepared statements.
pub struct Pg {
    /// Taken only by `drop`.
    client: RefCell<Option<postgres::Client>>,
    statements: RefCell<HashMap<String, postgres::Statement>>,
}

/// A connection to the inbox.
pub enum Db {
    /// An SQLite file.
    Sqlite(rusqlite::Connection),
    /// A PostgreSQL database (boxed: its client is large, and an inbox is opened rarely).
    Postgres(Box<Pg>),
}

/// `?1` placeholders as PostgreSQL's `$1`.
fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

/// Runs a call of the synchronous PostgreSQL client, which drives a runtime of its own:
/// tokio refuses to start one on a worker thread of another, so there the call first
/// leaves the runtime ([`tokio::task::block_in_place`]; the runtimes of this crate are
/// multi-threaded). Elsewhere (a plain thread, a blocking task) it runs as it is.
fn outside_runtime<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

fn client(cell: &RefCell<Option<postgres::Client>>) -> std::cell::RefMut<'_, postgres::Client> {
    std::cell::RefMut::map(cell.borrow_mut(), |client| {
        client.as_mut().expect("a connection is open until dropped")
    })
}

impl Drop for Pg {
    /// Closing the client runs on its runtime too.
    fn drop(&mut self) {
        if let Some(client) = self.client.get_mut().take() {
            outside_runtime(|| drop(client));
        }
    }
}

impl Pg {
    /// Connects (no TLS: the server is local or on a trusted network).
    pub fn connect(url: &str) -> Result<Pg, SqlError> {
        let client = outside_runtime(|| {
            let mut client = postgres::Client::connect(url, postgres::NoTls)?;
            client.batch_execute("SET client_min_messages = warning")?;
            Ok::<_, postgres::Error>(client)
        })?;
        Ok(Pg {
            client: RefCell::new(Some(client)),
            statements: RefCell::new(HashMap::new()),
        })
    }

    fn statement(&self, sql: &str) -> Result<postgres::Statement, SqlError> {
        if let Some(statement) = self.statements.borrow().get(sql) {
            return Ok(statement.clone());
        }
        let statement =
            outside_runtime(|| client(&self.client).prepare(&dollar_placeholders(sql)))?;
        self.statements
            .borrow_mut()
            .insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    fn params<'a>(args: &'a [Arg<'a>]) -> Vec<&'a (dyn postgres::types::ToSql + Sync)> {
        args.iter()
            .map(|arg| match arg {
                Arg::Int(value) => value as &(dyn postgres::types::ToSql + Sync),
                Arg::Text(value) => value as &(dyn postgres::types::ToSql + Sync),
            })
            .collect()
    }

    fn rows(&self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Row>, SqlError> {
        use postgres::types::Type;
        let statement = self.statement(sql)?;
        let rows = outside_runtime(|| client(&self.client).query(&statement, &Pg::params(args)))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let mut values = Vec::with_capacity(row.len());
            for (index, column) in row.columns().iter().enumerate() {
                let value = match *column.type_() {
                    Type::INT8 => row.try_get::<_, Option<i64>>(index)?.map(Val::Int),
                    Type::INT4 => row
                        .try_get::<_, Option<i32>>(index)?
                        .map(|value| Val::Int(value.into())),
                    _ => row.try_get::<_, Option<String>>(index)?.map(Val::Text),
                };
                values.push(value.unwrap_or(Val::Null));
            }
            out.push(Row(values));
        }
        Ok(out)
    }
}

fn sqlite_rows(
    conn: &rusqlite::Connection,
    sql: &str,
    args: &[Arg<'_>],
) -> Result<Vec<Row>, SqlError> {
    use rusqlite::types::ValueRef;
    let mut statement = conn.prepare_cached(sql)?;
    let width = statement.column_count();
    let mut rows = statement.query(rusqlite::params_from_iter(args.iter()))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let mut values = Vec::with_capacity(width);
        for index in 0..width {
            values.push(match row.get_ref(index)? {
                ValueRef::Null => Val::Null,
                ValueRef::Integer(value) => Val::Int(value),
                ValueRef::Text(text) => Val::Text(String::from_utf8_lossy(text).into_owned()),
                other => {
                    return Err(SqlError::Data(format!(
                        "column {index} holds a {:?}, not an integer or a text",
                        other.data_type()
                    )))
                }
            });
        }
        out.push(Row(values));
    }
    Ok(out)
}

impl Db {
    /// Runs one statement; the number of rows it changed.
    pub fn exec(&self, sql: &str, args: &[Arg<'_>]) -> Result<u64, SqlError> {
        match self {
            Db::Sqlite(conn) => Ok(conn
                .prepare_cached(sql)?
                .execute(rusqlite::params_from_iter(args.iter()))?
                as u64),
            Db::Postgres(pg) => {
                let statement = pg.statement(sql)?;
                Ok(outside_runtime(|| {
                    client(&pg.client).execute(&statement, &Pg::params(args))
                })?)
            }
        }
    }

    /// Runs one query; its rows.
    pub fn rows(&self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Row>, SqlError> {
        match self {
            Db::Sqlite(conn) => sqlite_rows(conn, sql, args),
            Db::Postgres(pg) => pg.rows(sql, args),
        }
    }

    /// Runs one query; its first row, if any.
    pub fn row(&self, sql: &str, args: &[Arg<'_>]) -> Result<Option<Row>, SqlError> {
        Ok(self.rows(sql, args)?.into_iter().next())
    }

    /// Runs several statements without arguments.
    pub fn batch(&self, sql: &str) -> Result<(), SqlError> {
        match self {
            Db::Sqlite(conn) => Ok(conn.execute_batch(sql)?),
            Db::Postgres(pg) => Ok(outside_runtime(|| client(&pg.client).batch_execute(sql))?),
        }
    }

    /// Starts a write transaction: SQLite's `BEGIN IMMEDIATE`, PostgreSQL's SERIALIZABLE.
    pub fn begin(&self) -> Result<(), SqlError> {
        self.batch(match self {
            Db::Sqlite(_) => "BEGIN IMMEDIATE",
            Db::Postgres(_) => "BEGIN ISOLATION LEVEL SERIALIZABLE",
        })
    }

    /// Starts a transaction that only reads, seeing one snapshot throughout.
    pub fn begin_read(&self) -> Result<(), SqlError> {
        self.batch(match self {
            Db::Sqlite(_) => "BEGIN",
            Db::Postgres(_) => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        })
    }

    /// Commits; an acknowledgement may go out only after this returns `Ok`.
    pub fn commit(&self) -> Result<(), SqlError> {
        self.batch("COMMIT")
    }

    /// Rolls back, ignoring errors (the connection may be broken already, or no
    /// transaction open).
    pub fn rollback(&self) {
        let _ = self.batch("ROLLBACK");
    }

    /// Whether a transaction is open (SQLite only knows; PostgreSQL answers `false`).
    pub fn in_transaction(&self) -> bool {
        match self {
            Db::Sqlite(conn) => !conn.is_autocommit(),
            Db::Postgres(_) => false,
        }
    }

    /// Whether the connection is gone (PostgreSQL's server closed it: a restart, a
    /// failover, an idle timeout, `pg_terminate_backend`); the holder should open a new one.
    pub fn is_broken(&self) -> bool {
        match self {
            Db::Sqlite(_) => false,
            Db::Postgres(pg) => pg.client.borrow().as_ref().is_none_or(|c| c.is_closed()),
        }
    }

    /// `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "sqlite",
            Db::Postgres(_) => "postgres",
        }
    }

    /// The SQLite connection, for the tools that speak SQLite only.
    pub fn sqlite(&self) -> Option<&rusqlite::Connection> {
        match self {
            Db::Sqlite(conn) => Some(conn),
            Db::Postgres(_) => None,
        }
    }

    /// The backend's own consistency check: SQLite's `PRAGMA integrity_check` (`ok` when
    /// sound); PostgreSQL has none without extensions and answers `ok (not checked)`.
    pub fn integrity(&self) -> Result<String, SqlError> {
        match self {
            Db::Sqlite(conn) => Ok(conn.query_row("PRAGMA integrity_check", [], |row| row.get(0))?),
            Db::Postgres(_) => Ok("ok (not checked)".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_placeholders_become_dollars_and_nothing_else_changes() {
        assert_eq!(
            dollar_placeholders("SELECT ?1, '?', ?12 WHERE a = ?2"),
            "SELECT $1, '?', $12 WHERE a = $2"
        );
    }

    #[test]
    fn a_db_flag_names_its_backend_by_its_scheme() {
        assert_eq!(
            InboxAt::parse("postgres://u:secret@h/db"),
            InboxAt::Postgres("postgres://u:secret@h/db".into())
        );
        assert_eq!(
            InboxAt::parse("sqlite:inbox.db"),
            InboxAt::Sqlite("inbox.db".into())
        );
        assert_eq!(
            InboxAt::parse("inbox.db"),
            InboxAt::Sqlite("inbox.db".into())
        );
        assert!(!InboxAt::parse("postgres://u:secret@h/db")
            .to_string()
            .contains("secret"));
    }
}
