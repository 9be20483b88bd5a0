//! A minimal HTTP/1.1 client for the HTTP listener's tests: raw requests on a real socket,
//! read until the server closes, and the value of one Prometheus sample.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `request` as it is and reads until the server closes: (status, headers, body).
pub async fn raw_http(addr: SocketAddr, request: &[u8]) -> (u16, String, String) {
    read_http(send_http(addr, request).await).await
}

/// A connection to `addr` that has sent `request` (maybe only part of one).
pub async fn send_http(addr: SocketAddr, request: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    s
}

/// The response on `s`: status, head and body, once the server closes it.
pub async fn read_http(mut s: TcpStream) -> (u16, String, String) {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out))
        .await
        .expect("the server answers and closes")
        .unwrap();
    parse_http(out)
}

/// Status, head and body of a whole response.
pub fn parse_http(out: Vec<u8>) -> (u16, String, String) {
    let text = String::from_utf8(out).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_owned(), body.to_owned())
}

pub async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    raw_http(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
    .await
}

/// The value of the sample `name{labels}` (labels exactly as the text has them), if present.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (s, v) = l.rsplit_once(' ')?;
        (s == series).then(|| v.parse().unwrap())
    })
}
