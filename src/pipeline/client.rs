//! A minimal HTTP/1.1 client for the runner, the drills and the load generator: posts a
//! body byte for byte with exactly the headers given, over one kept-alive loopback
//! connection, and reads the status, the entry header and the body.

use std::net::SocketAddr;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The answer to one `POST`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The stream entry id of a 202 (`x-arrival-entry`).
    pub entry: Option<String>,
    /// The body.
    pub body: String,
}

impl Reply {
    /// The reason word of the body: `accepted`, or the `error` value.
    pub fn reason(&self) -> String {
        let value: serde_json::Value = serde_json::from_str(&self.body).unwrap_or_default();
        value
            .get("error")
            .or_else(|| value.get("status"))
            .and_then(|word| word.as_str())
            .unwrap_or("")
            .to_owned()
    }
}

/// One connection to ingress.
pub struct Client {
    addr: SocketAddr,
    stream: Option<BufReader<TcpStream>>,
}

impl Client {
    /// A client for ingress at `addr` (connects on first use).
    pub fn new(addr: SocketAddr) -> Client {
        Client { addr, stream: None }
    }

    /// Posts `body` to the webhook path with these headers (`None`: header left out).
    pub async fn post(
        &mut self,
        source: Option<&str>,
        signature: Option<&str>,
        body: &[u8],
    ) -> std::io::Result<Reply> {
        let mut headers = Vec::with_capacity(2);
        headers.extend(source.map(|source| ("X-Acme-Source", source)));
        headers.extend(signature.map(|signature| ("X-Acme-Signature", signature)));
        self.post_with(&headers, body).await
    }

    /// Posts `body` with these extra headers (a Standard Webhooks sender's, say).
    pub async fn post_with(
        &mut self,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Reply> {
        // A kept-alive connection the server closed is retried once on a new one.
        for attempt in 0..2 {
            match self.try_post(headers, body).await {
                Ok(reply) => return Ok(reply),
                Err(error) if attempt == 0 => {
                    self.stream = None;
                    let _ = error;
                }
                Err(error) => return Err(error),
            }
        }
        unreachable!("the loop returns")
    }

    async fn try_post(&mut self, headers: &[(&str, &str)], body: &[u8]) -> std::io::Result<Reply> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(self.addr).await?;
            stream.set_nodelay(true)?;
            self.stream = Some(BufReader::new(stream));
        }
        let stream = self.stream.as_mut().expect("connected above");
        let mut head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            super::ingress::WEBHOOK_PATH,
            self.addr,
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        stream.get_mut().write_all(&request).await?;
        let mut line = String::new();
        if stream.read_line(&mut line).await? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
        let (mut length, mut entry, mut close) = (0usize, None, false);
        loop {
            line.clear();
            stream.read_line(&mut line).await?;
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            if let Some((name, value)) = trimmed.split_once(':') {
                let value = value.trim();
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.parse().unwrap_or(0),
                    super::ingress::ENTRY_HEADER => entry = Some(value.to_owned()),
                    "connection" => close = value.eq_ignore_ascii_case("close"),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        stream.read_exact(&mut body).await?;
        if close {
            self.stream = None;
        }
        Ok(Reply {
            status,
            entry,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }
}
