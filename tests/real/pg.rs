//! A fresh PostgreSQL database per test, on the server at `ARRIVAL_DATABASE_URL`, dropped
//! when the test ends: shared by the card store's tests and the pipeline's.

pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A fresh PostgreSQL database, dropped when the value goes.
pub struct PgDatabase {
    admin: String,
    name: String,
    /// Its URL.
    pub url: String,
}

impl PgDatabase {
    /// Creates one on the server at `ARRIVAL_DATABASE_URL`.
    pub fn new() -> PgDatabase {
        let admin = std::env::var("ARRIVAL_DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.into());
        let mut client =
            postgres::Client::connect(&admin, postgres::NoTls).unwrap_or_else(|error| {
                panic!(
                    "PostgreSQL does not answer at {admin}: {error}\n\
                 The store's tests need a real server. Install and start one \
                 (`apt-get install postgresql && service postgresql start`, trust auth for \
                 user postgres on 127.0.0.1), or run `bash .ci/test`, which starts a private \
                 one, or set ARRIVAL_DATABASE_URL to a server that answers."
                )
            });
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .subsec_nanos();
        let name = format!(
            "arrival_test_{}_{nanos}_{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        );
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create the test database");
        let base = admin.split('?').next().expect("a url");
        let cut = base.rfind('/').expect("a database path");
        let url = if cut > "postgres://".len() {
            format!("{}/{name}", &base[..cut])
        } else {
            format!("{base}/{name}")
        };
        PgDatabase { admin, name, url }
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = client.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}
