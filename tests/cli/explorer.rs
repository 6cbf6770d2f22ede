//! `arrival check MODEL --explore ADDR` as a person sees it: the real binary serves
//! stateright's Explorer, Debian's headless `chromium` loads the page through `chromedriver`
//! (WebDriver over HTTP), clicks the initial state and then one action, and the state panel
//! must read in domain terms (card names, versions, records) both times, never as interned
//! ids (`Sym(0)`). The `/.states` JSON must read the same way. A screenshot of the last page
//! is left in `target/explorer.png` under the crate root. A facts model's `/.states` must
//! read in domain terms too (applications, facts, stream, consumers).
//!
//! Needs the Debian packages `chromium` and `chromium-driver`; without them the test fails
//! and says so. The HTTP client is a few lines over `std::net` (one request per connection):
//! WebDriver and Explorer need nothing more, and no HTTP client crate is a dependency.

use crate::util::ARRIVAL;
use base64::Engine;
use serde_json::{json, Value};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MODEL: &str = "models/b62-15.toml";
/// What the initial state of `MODEL` shows: both cards at their fixture versions.
const INITIAL: &[&str] = &["card-7 v10", "card-8 v3", "sender still owes: #1 #2"];
/// The state after the first action, `deliver #1 e-201`.
const FIRST_ACTION: &str = "deliver #1 e-201";
const AFTER_FIRST: &[&str] = &["card-7 v12", "e-201: applied"];
/// The key WebDriver names a found element by (W3C WebDriver, "web element identifier").
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// What a world's derived `Debug` shows and Explorer must not.
const DEBUG_MARKS: &[&str] = &["Sym(", "StateId(", "SymTable", "World {", "Some("];

/// A child process killed and reaped when the test ends, however it ends.
struct Killed(Child, &'static str);

impl Drop for Killed {
    fn drop(&mut self) {
        // The child leads its own process group (see `start`): this also ends what it
        // started, such as chromedriver's chromium.
        if let Ok(group) = i32::try_from(self.0.id()) {
            // SAFETY: kill(2) with a negative id signals a process group; no memory is touched.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A WebDriver session, closed (and its browser with it) when the test ends.
struct Session {
    driver: SocketAddr,
    id: String,
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = request(
            self.driver,
            "DELETE",
            &format!("/session/{}", self.id),
            None,
        );
    }
}

impl Session {
    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.id);
        let (status, text) = request(self.driver, method, &path, body.as_ref())
            .unwrap_or_else(|error| panic!("WebDriver {method} {path}: {error}"));
        let reply: Value = serde_json::from_str(&text)
            .unwrap_or_else(|error| panic!("WebDriver {method} {path}: {error}: {text}"));
        assert_eq!(status, 200, "WebDriver {method} {path} answered {text}");
        reply["value"].clone()
    }

    /// The element `xpath` finds, once it exists (Explorer fills the page asynchronously).
    fn element(&self, xpath: &str) -> String {
        let body = json!({"using": "xpath", "value": xpath});
        let path = format!("/session/{}/element", self.id);
        let found = wait_for(&format!("an element at {xpath}"), || {
            let (status, text) = request(self.driver, "POST", &path, Some(&body)).ok()?;
            let reply: Value = serde_json::from_str(&text).ok()?;
            (status == 200).then(|| reply["value"][ELEMENT].as_str().map(str::to_owned))?
        });
        found
    }

    fn click(&self, xpath: &str) {
        let element = self.element(xpath);
        self.command(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        );
    }

    fn script(&self, script: &str) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    /// The text of Explorer's state panel.
    fn state_panel(&self) -> String {
        self.script(
            "const panel = document.querySelector('section.main-flex-right div.font-small');\
             return panel ? panel.innerText : '';",
        )
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// Waits until the state panel shows every one of `wanted`, and returns its text.
    fn state_showing(&self, wanted: &[&str]) -> String {
        wait_for(&format!("the state panel to show {wanted:?}"), || {
            let text = self.state_panel();
            wanted.iter().all(|w| text.contains(w)).then_some(text)
        })
    }
}

/// Polls `check` for up to 30 s; panics naming `what` if it never holds.
fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "waited 30 s for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One HTTP/1.1 request on its own connection: the status and the body.
fn request(
    to: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, String), String> {
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut stream = TcpStream::connect_timeout(&to, Duration::from_secs(5))
        .map_err(|error| format!("connect to {to}: {error}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|error| error.to_string())?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body.as_bytes()))
        .map_err(|error| format!("send to {to}: {error}"))?;
    // Read until the body is complete: a server may keep the connection open regardless.
    let mut raw = Vec::new();
    let mut buffer = [0; 16 * 1024];
    let (status, content) = loop {
        let read = stream
            .read(&mut buffer)
            .map_err(|error| format!("read from {to}: {error}"))?;
        raw.extend_from_slice(&buffer[..read]);
        if let Some(done) = response(&raw, read == 0) {
            break done.map_err(|error| format!("{to}: {error}"))?;
        }
        if read == 0 {
            return Err(format!("{to} closed the connection mid-response"));
        }
    };
    let text = String::from_utf8(content).map_err(|error| format!("{to}: {error}"))?;
    Ok((status, text))
}

/// The status and body of the HTTP response in `raw`, once it is complete (`closed`: the
/// server closed the connection).
fn response(raw: &[u8], closed: bool) -> Option<Result<(u16, Vec<u8>), String>> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let headers = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let Some(status) = headers
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
    else {
        return Some(Err("no status line".into()));
    };
    let body = &raw[split + 4..];
    let header = |name: &str| {
        headers
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    if header("transfer-encoding") == Some("chunked") {
        return dechunk(body).map(|body| Ok((status, body)));
    }
    match header("content-length").map(str::parse::<usize>) {
        Some(Ok(length)) => (body.len() >= length).then(|| Ok((status, body[..length].to_vec()))),
        Some(Err(_)) => Some(Err("bad content-length".into())),
        None => closed.then(|| Ok((status, body.to_vec()))),
    }
}

/// The body of a chunked transfer, once the last chunk is in.
fn dechunk(mut raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = raw.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&raw[..line_end])
            .ok()
            .and_then(|line| usize::from_str_radix(line.split(';').next()?.trim(), 16).ok())?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(raw.get(..size)?);
        raw = raw.get(size + 2..)?;
    }
}

/// A loopback address nothing listens on right now.
fn free_address() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
}

/// `program` on `PATH`, or in `/usr/bin`.
fn installed(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|folder| folder.join(program))
        .find(|file| file.is_file())
}

/// Starts `command` and waits until it accepts connections on `address`. Its stderr goes to
/// a scratch file (a pipe nobody reads could fill and stall it), shown if it exits early.
fn start(mut command: Command, name: &'static str, address: SocketAddr) -> Killed {
    let mut stderr = tempfile::tempfile().expect("a scratch file");
    let child = command
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(stderr.try_clone().expect("a scratch file handle"))
        .spawn()
        .unwrap_or_else(|error| panic!("cannot start {name}: {error}"));
    let mut child = Killed(child, name);
    wait_for(&format!("{name} to listen on {address}"), || {
        if let Ok(Some(status)) = child.0.try_wait() {
            let mut said = String::new();
            let _ = stderr.seek(SeekFrom::Start(0));
            let _ = stderr.read_to_string(&mut said);
            panic!("{} exited ({status}) before listening: {said}", child.1);
        }
        TcpStream::connect_timeout(&address, Duration::from_millis(200))
            .ok()
            .map(drop)
    });
    child
}

fn assert_domain_terms(what: &str, text: &str) {
    for mark in DEBUG_MARKS {
        assert!(
            !text.contains(mark),
            "{what} shows Rust Debug output ({mark}):\n{text}"
        );
    }
}

#[test]
fn explorer_shows_states_in_domain_terms() {
    let crate_root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (Some(chromium), Some(chromedriver)) = (installed("chromium"), installed("chromedriver"))
    else {
        panic!(
            "this test drives headless chromium through chromedriver: install the Debian \
             packages `chromium` and `chromium-driver` (apt-get install -y chromium \
             chromium-driver) and run it again"
        );
    };

    let explorer = free_address();
    let mut serve = Command::new(ARRIVAL);
    serve
        .current_dir(crate_root)
        .args(["check", MODEL, "--explore", &explorer.to_string()]);
    let _server = start(serve, "arrival check --explore", explorer);

    // The JSON Explorer's page reads: the initial state, then the states after each action.
    let (status, initial) = request(explorer, "GET", "/.states", None).expect("GET /.states");
    assert_eq!(status, 200, "{initial}");
    assert_domain_terms("/.states", &initial);
    for wanted in INITIAL {
        assert!(
            initial.contains(wanted),
            "/.states lacks {wanted:?}: {initial}"
        );
    }
    let (status, next) = request(explorer, "GET", "/.states/0", None).expect("GET /.states/0");
    assert_eq!(status, 200, "{next}");
    assert_domain_terms("/.states/0", &next);
    let next: Vec<Value> = serde_json::from_str(&next).expect("/.states/0 is JSON");
    assert!(next.len() > 1, "the initial state has several actions");

    let driver = free_address();
    let mut chromedriver = Command::new(chromedriver);
    chromedriver.arg(format!("--port={}", driver.port()));
    let _driver = start(chromedriver, "chromedriver", driver);
    let capabilities = json!({"capabilities": {"alwaysMatch": {
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1400,1000"],
        },
    }}});
    let (status, reply) =
        request(driver, "POST", "/session", Some(&capabilities)).expect("a WebDriver session");
    let reply: Value = serde_json::from_str(&reply).expect("WebDriver answers JSON");
    assert_eq!(
        status, 200,
        "chromedriver could not start chromium: {reply}"
    );
    let session = Session {
        driver,
        id: reply["value"]["sessionId"]
            .as_str()
            .expect("a session id")
            .to_owned(),
    };

    session.command(
        "POST",
        "/url",
        Some(json!({"url": format!("http://{explorer}/")})),
    );
    // Before any click Explorer offers the initial state as the action `Init 0`.
    let choice = |text: &str| {
        format!("//h2[text()='Next Action Choices']/following-sibling::ul[1]//a[text()='{text}']")
    };
    session.click(&choice("Init 0"));
    let text = session.state_showing(INITIAL);
    assert_domain_terms("the initial state", &text);

    // "Complete State" shows the state itself rather than the step's outcome.
    session.click("//label[contains(., 'Complete State')]/input");
    let text = session.state_showing(INITIAL);
    assert_domain_terms("the complete initial state", &text);

    session.click(&choice(FIRST_ACTION));
    let text = session.state_showing(AFTER_FIRST);
    assert_domain_terms("the state after one step", &text);
    let url = session.command("GET", "/url", None);
    assert!(
        url.as_str().is_some_and(|url| url.ends_with("#/steps/0/0")),
        "the click followed the action: {url}"
    );
    let page = session.script("return document.body.innerText;");
    let page = page.as_str().unwrap_or_default();
    assert_domain_terms("the page", page);
    assert!(
        page.contains(FIRST_ACTION),
        "the path lists the action: {page}"
    );

    let screenshot = session.command("GET", "/screenshot", None);
    let png = base64::engine::general_purpose::STANDARD
        .decode(screenshot.as_str().expect("a base64 screenshot"))
        .expect("the screenshot is base64");
    let target = crate_root.join("target");
    std::fs::create_dir_all(&target).expect("target/ under the crate root");
    std::fs::write(target.join("explorer.png"), png).expect("write target/explorer.png");
}

#[test]
fn facts_explorer_states_read_in_domain_terms() {
    let explorer = free_address();
    let mut serve = Command::new(ARRIVAL);
    serve.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "check",
        "models/acmeflow-wf14.toml",
        "--explore",
        &explorer.to_string(),
    ]);
    let _server = start(serve, "arrival check --explore (facts)", explorer);
    let (status, initial) = request(explorer, "GET", "/.states", None).expect("GET /.states");
    assert_eq!(status, 200, "{initial}");
    assert_domain_terms("facts /.states", &initial);
    for wanted in [
        "application 3f6b2c1e-8d4a-4f7b-9c2e-5a1d0e7f9b34 (material v1): READY false",
        "stream: none",
        "sender: not yet sent #1 #2 #3 #4 #5 #6",
    ] {
        assert!(
            initial.contains(wanted),
            "/.states lacks {wanted:?}: {initial}"
        );
    }
    let (status, next) = request(explorer, "GET", "/.states/0", None).expect("GET /.states/0");
    assert_eq!(status, 200, "{next}");
    assert_domain_terms("facts /.states/0", &next);
    assert!(next.contains("stream: 1 from #1 (open)"), "{next}");
}
