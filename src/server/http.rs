//! The HTTP listener (`http.listener`): `/metrics` for Prometheus, the leadership page at `/`
//! and its JSON API under `/api/`. A small HTTP/1.1 server written here rather than `hyper`:
//! it serves a handful of GETs, one request per connection (`Connection: close`), so a
//! bounded read of the request head and a formatted response are all it needs.
//!
//! It can never stall the broker: it runs on its own task, holds at most
//! [`HTTP_CONNECTIONS_MAX`] connections, at most [`HTTP_CONNECTIONS_PER_CLIENT_MAX`] of them
//! from one client address (one more is closed on accept), reads at most
//! [`HTTP_REQUEST_HEAD_BYTES_MAX`] within [`HTTP_REQUEST_TIMEOUT_MS`], bounds every write by
//! [`HTTP_RESPONSE_WRITE_TIMEOUT_MS`], and computes a scrape or a view on a blocking thread.
//! A request it cannot serve gets a 4xx: 400 (malformed), 404 (unknown path), 405 (not GET
//! or HEAD), 408 (too slow), 413 (a body), 431 (head too large), 505 (not HTTP/1.x).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use super::per_ip::PerIpSlots;
use crate::config::topic::TopicSettings;
use crate::config::ConnectionsPerIp;
use crate::context::Context;
use crate::insight;
use crate::limits::{
    HTTP_CONNECTIONS_MAX, HTTP_CONNECTIONS_PER_CLIENT_MAX, HTTP_REQUEST_HEAD_BYTES_MAX,
    HTTP_REQUEST_TIMEOUT_MS, HTTP_RESPONSE_WRITE_TIMEOUT_MS,
};

/// Accepts HTTP connections until `shutdown` turns true.
pub async fn serve(listener: TcpListener, ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let permits = Arc::new(Semaphore::new(HTTP_CONNECTIONS_MAX));
    let per_client = PerIpSlots::new(ConnectionsPerIp {
        default_max: HTTP_CONNECTIONS_PER_CLIENT_MAX,
        overrides: BTreeMap::new(),
    });
    let mut connections = JoinSet::new();
    let mut backoff_ms = 5u64;
    loop {
        tokio::select! {
            _ = shutdown.changed() => {
                if *shutdown.borrow() { break; }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => { backoff_ms = 5; a }
                    Err(e) => {
                        super::accept_failed(&ctx, &e, &mut backoff_ms, "http accept failed").await;
                        continue;
                    }
                };
                let Ok(client_slot) = per_client.try_take(peer.ip()) else {
                    tracing::debug!(%peer, max = HTTP_CONNECTIONS_PER_CLIENT_MAX, "http connections of one client at their bound; closing a new one");
                    continue;
                };
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    tracing::debug!(max = HTTP_CONNECTIONS_MAX, "http connections at their bound; closing a new one");
                    continue;
                };
                let ctx = ctx.clone();
                connections.spawn(async move {
                    connection(stream, ctx).await;
                    drop((permit, client_slot));
                });
            }
        }
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

async fn connection(mut stream: TcpStream, ctx: Arc<Context>) {
    let timeout = Duration::from_millis(HTTP_REQUEST_TIMEOUT_MS);
    let response = match tokio::time::timeout(timeout, read_head(&mut stream)).await {
        Err(_) => Response::error(408, "request head not received in time"),
        Ok(Err(HeadError::Closed)) => return,
        Ok(Err(HeadError::TooLarge)) => Response::error(431, "request head too large"),
        Ok(Ok(head)) => match parse(&head) {
            Err(response) => response,
            Ok(request) => {
                let head_only = request.method == "HEAD";
                let path = request.path.to_owned();
                let ctx = ctx.clone();
                // A scrape walks every partition: off the async threads.
                let mut response = tokio::task::spawn_blocking(move || route(&path, &ctx))
                    .await
                    .unwrap_or_else(|_| Response::error(500, "internal error"));
                response.head_only = head_only;
                response
            }
        },
    };
    let write = Duration::from_millis(HTTP_RESPONSE_WRITE_TIMEOUT_MS);
    let _ = tokio::time::timeout(write, async {
        stream.write_all(&response.to_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

enum HeadError {
    Closed,
    TooLarge,
}

/// Reads until the blank line that ends the request head, at most
/// [`HTTP_REQUEST_HEAD_BYTES_MAX`] bytes.
async fn read_head(stream: &mut TcpStream) -> Result<Vec<u8>, HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|_| HeadError::Closed)?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        let searched_from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find_head_end(&buf[searched_from..]) {
            buf.truncate(searched_from + end);
            return Ok(buf);
        }
        if buf.len() >= HTTP_REQUEST_HEAD_BYTES_MAX {
            return Err(HeadError::TooLarge);
        }
    }
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

#[derive(Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
}

/// Checks a request head: request line, version, method, no body.
pub fn parse(head: &[u8]) -> Result<Request<'_>, Response> {
    let text =
        std::str::from_utf8(head).map_err(|_| Response::error(400, "request head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Response::error(400, "malformed request line"));
    };
    if method.is_empty() || !target.starts_with('/') {
        return Err(Response::error(400, "malformed request line"));
    }
    if !version.starts_with("HTTP/") {
        return Err(Response::error(400, "malformed request line"));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(Response::error(
            505,
            "only HTTP/1.0 and HTTP/1.1 are served",
        ));
    }
    for header in lines {
        let Some((name, value)) = header.split_once(':') else {
            return Err(Response::error(400, "malformed header"));
        };
        let name = name.trim();
        let has_body = (name.eq_ignore_ascii_case("content-length") && value.trim() != "0")
            || name.eq_ignore_ascii_case("transfer-encoding");
        if has_body {
            return Err(Response::error(413, "no request here takes a body"));
        }
    }
    if method != "GET" && method != "HEAD" {
        let mut r = Response::error(405, "only GET and HEAD are served");
        r.allow = true;
        return Err(r);
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    Ok(Request { method, path })
}

fn route(path: &str, ctx: &Context) -> Response {
    let json = |v: serde_json::Value| Response::ok("application/json", v.to_string());
    match path {
        "/" | "/index.html" => {
            Response::ok("text/html; charset=utf-8", insight::PAGE_HTML.to_owned())
        }
        "/metrics" => Response::ok(insight::scrape::CONTENT_TYPE, insight::scrape::scrape(ctx)),
        "/api/brokers" => json(insight::views::brokers(
            &ctx.image(),
            ctx.node_id,
            ctx.config.elections.leader_imbalance_per_broker_percentage,
        )),
        "/api/partitions" => {
            let image = ctx.image();
            let local = insight::local_partitions(ctx);
            let dirty = ctx
                .replicas
                .log_manager
                .compacted_logs(ctx.clock.now_ms())
                .into_iter()
                .map(|l| {
                    let ratio = l.dirty_ratio();
                    (l.tp, ratio)
                })
                .collect();
            json(insight::views::partitions(
                &image,
                &local,
                &dirty,
                |topic| {
                    let configs = image.topic(topic).map(|t| &t.configs);
                    TopicSettings::resolve(configs.unwrap_or(&BTreeMap::new()), &ctx.config)
                        .min_insync_replicas
                },
            ))
        }
        "/api/history" => {
            json(insight::views::history(&ctx.image(), None).expect("no partition asked for"))
        }
        _ if path.starts_with("/api/history/") => {
            let name = &path["/api/history/".len()..];
            match insight::views::parse_topic_partition(name) {
                None => Response::error(400, "expected /api/history/<topic>-<partition>"),
                Some(tp) => match insight::views::history(&ctx.image(), Some(tp)) {
                    Some(v) => json(v),
                    None => Response::error(404, "no such partition"),
                },
            }
        }
        "/api/groups" => {
            let (consumer, classic) = ctx.groups.group_views();
            json(insight::views::groups(&consumer, classic))
        }
        "/api/quorum" => json(insight::views::quorum(
            &ctx.controller.quorum(),
            ctx.node_id,
            ctx.controller.is_active(),
        )),
        _ => Response::error(404, "not found"),
    }
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    head_only: bool,
    allow: bool,
}

impl Response {
    fn ok(content_type: &'static str, body: String) -> Response {
        Response {
            status: 200,
            content_type,
            body,
            head_only: false,
            allow: false,
        }
    }

    fn error(status: u16, message: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: format!("{message}\n"),
            head_only: false,
            allow: false,
        }
    }

    fn reason(&self) -> &'static str {
        match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            413 => "Content Too Large",
            431 => "Request Header Fields Too Large",
            505 => "HTTP Version Not Supported",
            _ => "Internal Server Error",
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n",
            self.status,
            self.reason(),
            self.content_type,
            self.body.len()
        );
        if self.allow {
            head.push_str("Allow: GET, HEAD\r\n");
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        if !self.head_only {
            out.extend_from_slice(self.body.as_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads_are_checked_before_anything_is_served() {
        let cases: &[(&str, Result<&str, u16>)] = &[
            ("GET /metrics HTTP/1.1\r\nHost: x", Ok("/metrics")),
            ("HEAD /api/brokers?x=1 HTTP/1.0", Ok("/api/brokers")),
            ("GET /metrics HTTP/1.1\r\nContent-Length: 0", Ok("/metrics")),
            ("POST /metrics HTTP/1.1", Err(405)),
            ("GET /metrics HTTP/2.0", Err(505)),
            ("GET /metrics", Err(400)),
            ("GET metrics HTTP/1.1", Err(400)),
            ("GET  /metrics HTTP/1.1", Err(400)),
            ("GET /metrics FTP/1.1", Err(400)),
            ("GET /metrics HTTP/1.1\r\nbroken header", Err(400)),
            ("GET /metrics HTTP/1.1\r\nContent-Length: 5", Err(413)),
            (
                "GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked",
                Err(413),
            ),
        ];
        for (head, want) in cases {
            let got = parse(head.as_bytes()).map(|r| r.path).map_err(|r| r.status);
            assert_eq!(got, *want, "{head:?}");
        }
        assert_eq!(parse(b"\xff\xfe").unwrap_err().status, 400);
    }

    #[test]
    fn head_answers_carry_no_body_and_405_says_what_is_allowed() {
        let mut r = Response::ok("text/plain", "hello".into());
        r.head_only = true;
        let bytes = String::from_utf8(r.to_bytes()).unwrap();
        assert!(bytes.contains("Content-Length: 5\r\n"));
        assert!(bytes.ends_with("\r\n\r\n"));
        let e = parse(b"PUT / HTTP/1.1").unwrap_err();
        assert!(String::from_utf8(e.to_bytes())
            .unwrap()
            .contains("Allow: GET, HEAD\r\n"));
    }
}
