//! The one database trait the store is written against, and its two backends: SQLite
//! (embedded, one writer at a time) and PostgreSQL (several receiver processes).
//!
//! The trait is deliberately small: statements with typed parameters, rows of plain
//! values, and explicit transaction boundaries. Both backends run the same SQL text
//! (`$1`, `$2`, ... placeholders, which SQLite reads as numbered parameters); only the
//! migrations and the way a transaction starts differ.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// A statement parameter, typed so PostgreSQL can bind a NULL.
#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    /// A 64-bit integer or NULL.
    Int(Option<i64>),
    /// A text or NULL.
    Text(Option<String>),
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

impl Val {
    /// The integer, or `None` for NULL or a text.
    pub fn int(&self) -> Option<i64> {
        match self {
            Val::Int(value) => Some(*value),
            _ => None,
        }
    }

    /// The text, or `None` for NULL or an integer.
    pub fn text(&self) -> Option<&str> {
        match self {
            Val::Text(value) => Some(value),
            _ => None,
        }
    }
}

/// A database error, with whether retrying the whole transaction is the right answer
/// (serialization failure, deadlock, unique violation, busy database).
#[derive(Clone, Debug)]
pub struct DbError {
    /// What the database said.
    pub message: String,
    /// Retry the transaction from its start.
    pub retry: bool,
    /// A unique violation: another writer committed a row this transaction was about to
    /// write, and the retry reads it (and answers duplicate). The same row cannot collide
    /// again once it is read, so the store gives up when the same violation (the same
    /// message: on PostgreSQL it names the key) comes back [`UNIQUE_RETRIES`] times in a
    /// row.
    pub unique: bool,
}

/// How many times in a row the same unique violation is retried. A race ends when the
/// retry reads the row the other writer committed, after which that row cannot collide
/// again; the same violation again and again means something else (a damaged index, a row
/// the store cannot see), and waiting will not help. Violations on other rows (a large
/// batch racing a stream of small ones meets a new row almost every attempt) start over.
pub const UNIQUE_RETRIES: u32 = 8;

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DbError {}

/// What a connection sent so far: the figures behind the store's round-trip profile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DbStats {
    /// Statements that change rows ([`Database::execute`]).
    pub executes: u64,
    /// Queries ([`Database::query`]).
    pub queries: u64,
    /// Statement texts prepared (a cache miss: PostgreSQL's parse round trip, SQLite's
    /// compile).
    pub prepares: u64,
    /// Transaction boundaries and other parameterless batches (`BEGIN`, `COMMIT`,
    /// `ROLLBACK`, DDL).
    pub batches: u64,
}

impl DbStats {
    /// Everything that went to the database: on PostgreSQL each is a round trip.
    pub fn round_trips(&self) -> u64 {
        self.executes + self.queries + self.prepares + self.batches
    }

    /// The figures since `before`.
    pub fn since(&self, before: &DbStats) -> DbStats {
        DbStats {
            executes: self.executes - before.executes,
            queries: self.queries - before.queries,
            prepares: self.prepares - before.prepares,
            batches: self.batches - before.batches,
        }
    }
}

/// One versioned schema migration.
#[derive(Clone, Copy, Debug)]
pub struct Migration {
    /// Applied in increasing order; recorded in `schema_migrations`.
    pub version: i64,
    /// A short name.
    pub name: &'static str,
    /// The SQL, several statements.
    pub sql: &'static str,
}

/// SQLite's migrations, in order.
pub const SQLITE_MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "schema",
    sql: include_str!("migrations/sqlite/0001_schema.sql"),
}];

/// PostgreSQL's migrations, in order.
pub const POSTGRES_MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "schema",
    sql: include_str!("migrations/postgres/0001_schema.sql"),
}];

/// Where the store lives: `sqlite:PATH` or `postgres://...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DbUrl {
    /// An SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL connection string.
    Postgres(String),
}

impl DbUrl {
    /// Reads `sqlite:PATH`, `postgres://...` or `postgresql://...`.
    pub fn parse(text: &str) -> Result<DbUrl, String> {
        if let Some(path) = text.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err("`sqlite:` needs a file path, e.g. sqlite:arrival.db".into());
            }
            return Ok(DbUrl::Sqlite(PathBuf::from(path)));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            // A URL that does not parse is bad input, not a server that does not answer.
            let config: postgres::Config = text
                .parse()
                .map_err(|error| format!("`{}` is not a PostgreSQL URL: {error}", redact(text)))?;
            if config.get_hosts().is_empty() {
                return Err(format!(
                    "`{}` names no host: use postgres://USER@HOST:PORT/DATABASE",
                    redact(text)
                ));
            }
            return Ok(DbUrl::Postgres(text.to_owned()));
        }
        Err(format!(
            "unknown database `{text}`: use sqlite:PATH or postgres://USER@HOST:PORT/DATABASE"
        ))
    }
}

impl DbUrl {
    /// The whole text, password included, for handing to a child process's `--db`. Never
    /// print it: [`fmt::Display`] is the form for people (the password redacted).
    pub fn connection_text(&self) -> String {
        match self {
            DbUrl::Sqlite(path) => format!("sqlite:{}", path.display()),
            DbUrl::Postgres(url) => url.clone(),
        }
    }
}

/// A PostgreSQL URL with its password, if any, replaced by `***`: the one in the user
/// part (`postgres://user:***@host/db`; as `tokio-postgres` reads it, the user part ends
/// at the first `@`) and a `password=` parameter.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|at| at + 3) else {
        return url.to_owned();
    };
    let (head, rest) = url.split_at(scheme_end);
    let mut out = head.to_owned();
    let rest = match rest.find('@') {
        Some(at) => {
            let (user_part, after) = rest.split_at(at);
            match user_part.find(':') {
                Some(colon) => {
                    out += &user_part[..colon];
                    out += ":***";
                }
                None => out += user_part,
            }
            after
        }
        None => rest,
    };
    match rest.find('?') {
        None => out += rest,
        Some(question) => {
            out += &rest[..=question];
            let params: Vec<String> = rest[question + 1..]
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((key, _)) if key == "password" => format!("{key}=***"),
                    _ => param.to_owned(),
                })
                .collect();
            out += &params.join("&");
        }
    }
    out
}

impl fmt::Display for DbUrl {
    /// The form for people: a PostgreSQL password is shown as `***` ([`redact`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbUrl::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            DbUrl::Postgres(url) => f.write_str(&redact(url)),
        }
    }
}

/// How a write transaction starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// The store's choice: SQLite's `BEGIN IMMEDIATE` (the write lock up front),
    /// PostgreSQL's SERIALIZABLE.
    Serial,
    /// The `no-lock` mutant's: SQLite's `BEGIN IMMEDIATE` still, PostgreSQL's READ
    /// COMMITTED (the mutant reads before the transaction starts, so neither protects it).
    Weak,
}

/// The store's view of a database connection.
pub trait Database: Send {
    /// Runs one statement; the number of rows changed.
    fn execute(&mut self, sql: &str, params: &[Param]) -> Result<u64, DbError>;
    /// Runs one query; its rows.
    fn query(&mut self, sql: &str, params: &[Param]) -> Result<Vec<Vec<Val>>, DbError>;
    /// Runs several statements without parameters.
    fn batch(&mut self, sql: &str) -> Result<(), DbError>;
    /// Starts a write transaction.
    fn begin(&mut self, isolation: Isolation) -> Result<(), DbError>;
    /// Starts a transaction that changes the schema, holding the database's schema lock
    /// until it ends, and in which every statement sees what committed before it (so one
    /// that waited for the lock sees the schema the holder created).
    fn begin_schema(&mut self) -> Result<(), DbError>;
    /// Commits; the acknowledgement may go out only after this returns `Ok`.
    fn commit(&mut self) -> Result<(), DbError>;
    /// Rolls back, ignoring errors (the connection may be broken already).
    fn rollback(&mut self);
    /// This backend's migrations, in order.
    fn migrations(&self) -> &'static [Migration];
    /// The backend's own consistency check: SQLite's `PRAGMA integrity_check` (`ok` when
    /// sound); PostgreSQL has none without extensions and answers `ok (not checked)`.
    fn integrity(&mut self) -> Result<String, DbError>;
    /// `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;
    /// What this connection sent so far.
    fn stats(&self) -> DbStats;
}

/// Opens a connection.
pub fn connect(url: &DbUrl) -> Result<Box<dyn Database>, DbError> {
    match url {
        DbUrl::Sqlite(path) => Ok(Box::new(Sqlite::open(path)?)),
        DbUrl::Postgres(url) => Ok(Box::new(Postgres::connect(url)?)),
    }
}

/// The SQLite backend: WAL, `synchronous=FULL`, a busy timeout, `BEGIN IMMEDIATE`.
pub struct Sqlite {
    connection: rusqlite::Connection,
    stats: DbStats,
    prepared: std::collections::HashSet<String>,
}

fn sqlite_error(error: rusqlite::Error) -> DbError {
    // A unique violation means another writer recorded the row first (only a store that
    // reads outside its transaction can see one): retrying re-reads and answers duplicate.
    let unique = matches!(
        &error,
        rusqlite::Error::SqliteFailure(failure, _)
            if failure.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                || failure.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
    );
    let retry = unique
        || matches!(
            error.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        );
    DbError {
        message: clip(format!("sqlite: {error}")),
        retry,
        unique,
    }
}

/// A database's message cut to a readable length: some quote the whole statement, and a
/// batch's can run to hundreds of kilobytes of placeholders.
fn clip(message: String) -> String {
    const SHOWN: usize = 400;
    match message.char_indices().nth(SHOWN) {
        None => message,
        Some((cut, _)) => format!(
            "{} ... ({} more bytes)",
            &message[..cut],
            message.len() - cut
        ),
    }
}

impl Sqlite {
    /// Opens (creating) the file and sets the durability pragmas.
    pub fn open(path: &std::path::Path) -> Result<Sqlite, DbError> {
        let connection = rusqlite::Connection::open(path).map_err(sqlite_error)?;
        connection
            .busy_timeout(Duration::from_secs(60))
            .map_err(sqlite_error)?;
        // A fresh file that other receivers are opening at the same moment may keep its old
        // mode for an instant (SQLite answers with the mode it kept): ask again, briefly.
        let mut mode = String::new();
        for _ in 0..100 {
            mode = connection
                .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
                .map_err(sqlite_error)?;
            if mode == "wal" {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if mode != "wal" {
            return Err(DbError {
                message: format!("sqlite: journal_mode is {mode}, not wal"),
                retry: false,
                unique: false,
            });
        }
        connection
            .execute_batch("PRAGMA synchronous=FULL;")
            .map_err(sqlite_error)?;
        // A batch's statements differ by their row count: keep them all compiled.
        connection.set_prepared_statement_cache_capacity(256);
        Ok(Sqlite {
            connection,
            stats: DbStats::default(),
            prepared: std::collections::HashSet::new(),
        })
    }
}

fn sqlite_params(params: &[Param]) -> Vec<&dyn rusqlite::ToSql> {
    params
        .iter()
        .map(|param| match param {
            Param::Int(value) => value as &dyn rusqlite::ToSql,
            Param::Text(value) => value as &dyn rusqlite::ToSql,
        })
        .collect()
}

impl Sqlite {
    /// Counts a statement text compiled for the first time on this connection.
    fn count_prepare(&mut self, sql: &str) {
        if !self.prepared.contains(sql) {
            self.prepared.insert(sql.to_owned());
            self.stats.prepares += 1;
        }
    }
}

impl Database for Sqlite {
    fn execute(&mut self, sql: &str, params: &[Param]) -> Result<u64, DbError> {
        self.stats.executes += 1;
        self.count_prepare(sql);
        let mut statement = self.connection.prepare_cached(sql).map_err(sqlite_error)?;
        let changed = statement
            .execute(sqlite_params(params).as_slice())
            .map_err(sqlite_error)?;
        Ok(changed as u64)
    }

    fn query(&mut self, sql: &str, params: &[Param]) -> Result<Vec<Vec<Val>>, DbError> {
        self.stats.queries += 1;
        self.count_prepare(sql);
        let mut statement = self.connection.prepare_cached(sql).map_err(sqlite_error)?;
        let columns = statement.column_count();
        let mut rows = statement
            .query(sqlite_params(params).as_slice())
            .map_err(sqlite_error)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(sqlite_error)? {
            let mut values = Vec::with_capacity(columns);
            for index in 0..columns {
                use rusqlite::types::ValueRef;
                let value = match row.get_ref(index).map_err(sqlite_error)? {
                    ValueRef::Null => Val::Null,
                    ValueRef::Integer(value) => Val::Int(value),
                    ValueRef::Text(bytes) => Val::Text(String::from_utf8_lossy(bytes).into()),
                    ValueRef::Real(value) => Val::Text(value.to_string()),
                    ValueRef::Blob(bytes) => Val::Text(String::from_utf8_lossy(bytes).into()),
                };
                values.push(value);
            }
            out.push(values);
        }
        Ok(out)
    }

    fn batch(&mut self, sql: &str) -> Result<(), DbError> {
        self.stats.batches += 1;
        self.connection.execute_batch(sql).map_err(sqlite_error)
    }

    fn begin(&mut self, _isolation: Isolation) -> Result<(), DbError> {
        // IMMEDIATE: the write lock is taken now, so the busy timeout applies; a deferred
        // transaction that reads and then writes fails with SQLITE_BUSY at once in WAL mode.
        self.batch("BEGIN IMMEDIATE")
    }

    fn begin_schema(&mut self) -> Result<(), DbError> {
        // The write lock serialises schema changes with everything else.
        self.begin(Isolation::Serial)
    }

    fn commit(&mut self) -> Result<(), DbError> {
        self.batch("COMMIT")
    }

    fn rollback(&mut self) {
        let _ = self.batch("ROLLBACK");
    }

    fn migrations(&self) -> &'static [Migration] {
        SQLITE_MIGRATIONS
    }

    fn integrity(&mut self) -> Result<String, DbError> {
        let rows = self.query("PRAGMA integrity_check", &[])?;
        Ok(rows
            .iter()
            .filter_map(|row| row.first().and_then(Val::text).map(str::to_owned))
            .collect::<Vec<_>>()
            .join("; "))
    }

    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn stats(&self) -> DbStats {
        self.stats
    }
}

/// The key of the PostgreSQL advisory lock held by schema changes (migrations, resets): an
/// arbitrary constant, "arrival" in ASCII, shared by every receiver of the database.
pub const SCHEMA_LOCK: i64 = 0x61_7272_6976_616c;

/// The PostgreSQL backend: SERIALIZABLE transactions, retried by the store on
/// serialization failures, deadlocks and unique violations.
pub struct Postgres {
    client: postgres::Client,
    statements: HashMap<String, postgres::Statement>,
    stats: DbStats,
}

fn postgres_error(error: postgres::Error) -> DbError {
    use postgres::error::SqlState;
    let retry = error.code().is_some_and(|code| {
        *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
            || *code == SqlState::UNIQUE_VIOLATION
    });
    let message = match error.as_db_error() {
        Some(db) => match db.detail() {
            // The detail names the key of a unique violation.
            Some(detail) => format!(
                "postgres: {} ({}): {detail}",
                db.message(),
                db.code().code()
            ),
            None => format!("postgres: {} ({})", db.message(), db.code().code()),
        },
        None => format!("postgres: {error}"),
    };
    DbError {
        message: clip(message),
        retry,
        unique: error.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION),
    }
}

/// Why a connection failed, for people: the server's own message and SQLSTATE when it
/// answered (a wrong database name, a refused login), else the client's error with its
/// causes and the hint to start a server. The URL's password is never shown.
fn connect_error(url: &str, error: &postgres::Error) -> DbError {
    let shown = redact(url);
    let message = match error.as_db_error() {
        Some(db) => format!(
            "postgres: cannot connect to {shown}: the server answered: {} ({})",
            db.message(),
            db.code().code()
        ),
        None => {
            let mut why = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                let text = cause.to_string();
                if !why.contains(&text) {
                    why += ": ";
                    why += &text;
                }
                source = cause.source();
            }
            // The client's errors do not quote the connection string, but be sure.
            if let Some(password) = password_of(url) {
                why = why.replace(&password, "***");
            }
            format!(
                "postgres: cannot connect to {shown}: {why} (is PostgreSQL installed and \
                 running? `apt-get install postgresql` then `service postgresql start`, or \
                 give --db a server that answers)"
            )
        }
    };
    DbError {
        message,
        retry: false,
        unique: false,
    }
}

/// The password in a connection URL, if it has one (to take it out of messages).
pub fn password_of(url: &str) -> Option<String> {
    let rest = &url[url.find("://")? + 3..];
    let user_part = &rest[..rest.find('@')?];
    let password = &user_part[user_part.find(':')? + 1..];
    (!password.is_empty()).then(|| password.to_owned())
}

impl Postgres {
    /// Connects (no TLS: the server is local or on a trusted network).
    pub fn connect(url: &str) -> Result<Postgres, DbError> {
        let client = postgres::Client::connect(url, postgres::NoTls)
            .map_err(|error| connect_error(url, &error))?;
        let mut this = Postgres {
            client,
            statements: HashMap::new(),
            stats: DbStats::default(),
        };
        // The store's own notices (CREATE TABLE IF NOT EXISTS ...) are not worth a line.
        // No sequential or bitmap scans: under SERIALIZABLE a sequential scan takes a
        // predicate lock on the whole table, so on a small table (the cards) every
        // transaction would conflict with every other writer; index scans lock only the
        // index pages and rows they read. The answers are the same either way.
        this.batch(
            "SET client_min_messages = warning; SET enable_seqscan = off; \
             SET enable_bitmapscan = off",
        )?;
        Ok(this)
    }

    fn statement(&mut self, sql: &str) -> Result<postgres::Statement, DbError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        self.stats.prepares += 1;
        let statement = self.client.prepare(sql).map_err(postgres_error)?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

fn postgres_params(params: &[Param]) -> Vec<&(dyn postgres::types::ToSql + Sync)> {
    params
        .iter()
        .map(|param| match param {
            Param::Int(value) => value as &(dyn postgres::types::ToSql + Sync),
            Param::Text(value) => value as &(dyn postgres::types::ToSql + Sync),
        })
        .collect()
}

impl Database for Postgres {
    fn execute(&mut self, sql: &str, params: &[Param]) -> Result<u64, DbError> {
        self.stats.executes += 1;
        let statement = self.statement(sql)?;
        self.client
            .execute(&statement, &postgres_params(params))
            .map_err(postgres_error)
    }

    fn query(&mut self, sql: &str, params: &[Param]) -> Result<Vec<Vec<Val>>, DbError> {
        use postgres::types::Type;
        self.stats.queries += 1;
        let statement = self.statement(sql)?;
        let rows = self
            .client
            .query(&statement, &postgres_params(params))
            .map_err(postgres_error)?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let mut values = Vec::with_capacity(row.len());
            for (index, column) in row.columns().iter().enumerate() {
                let value = match *column.type_() {
                    Type::INT8 => row
                        .try_get::<_, Option<i64>>(index)
                        .map_err(postgres_error)?
                        .map_or(Val::Null, Val::Int),
                    Type::INT4 => row
                        .try_get::<_, Option<i32>>(index)
                        .map_err(postgres_error)?
                        .map_or(Val::Null, |value| Val::Int(value.into())),
                    _ => row
                        .try_get::<_, Option<String>>(index)
                        .map_err(postgres_error)?
                        .map_or(Val::Null, Val::Text),
                };
                values.push(value);
            }
            out.push(values);
        }
        Ok(out)
    }

    fn batch(&mut self, sql: &str) -> Result<(), DbError> {
        self.stats.batches += 1;
        self.client.batch_execute(sql).map_err(postgres_error)
    }

    fn begin(&mut self, isolation: Isolation) -> Result<(), DbError> {
        let sql = match isolation {
            Isolation::Serial => "BEGIN ISOLATION LEVEL SERIALIZABLE",
            Isolation::Weak => "BEGIN ISOLATION LEVEL READ COMMITTED",
        };
        self.batch(sql)
    }

    fn begin_schema(&mut self) -> Result<(), DbError> {
        // READ COMMITTED: each statement takes a fresh snapshot, so the statements after
        // the lock see what the previous holder committed (a SERIALIZABLE snapshot would be
        // taken by the lock's own SELECT, before the wait). DDL takes no predicate locks,
        // so SERIALIZABLE would protect nothing here anyway: the advisory lock does.
        self.batch(&format!(
            "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock({SCHEMA_LOCK})"
        ))
    }

    fn commit(&mut self) -> Result<(), DbError> {
        self.batch("COMMIT")
    }

    fn rollback(&mut self) {
        let _ = self.batch("ROLLBACK");
    }

    fn migrations(&self) -> &'static [Migration] {
        POSTGRES_MIGRATIONS
    }

    fn integrity(&mut self) -> Result<String, DbError> {
        Ok("ok (not checked)".into())
    }

    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn stats(&self) -> DbStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn a_long_database_message_is_cut_and_says_how_much_is_left_out() {
        assert_eq!(clip("short".into()), "short");
        let long = format!("sqlite: too many SQL variables in {}", "?,".repeat(1000));
        let shown = clip(long.clone());
        assert!(shown.starts_with("sqlite: too many SQL variables in ?,?,"));
        assert!(shown.ends_with(&format!(" ... ({} more bytes)", long.len() - 400)));
        // Never cut inside a character.
        assert_eq!(
            clip("é".repeat(401)),
            format!("{} ... (2 more bytes)", "é".repeat(400))
        );
    }
}
