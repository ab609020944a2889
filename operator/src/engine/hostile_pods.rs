//! Both clients of a tenant's pods ([`crate::http`]: our runtime's control API, Flink's REST
//! API) against hostile servers on loopback (tokio listeners, no HTTP library): bodies without
//! end, redirects to a canary, answers dripped a byte at a time; and the sanitiser.
#![allow(clippy::unwrap_used)]

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::engine::flink::FlinkError;
use crate::engine::flink::rest::FlinkRest;
use crate::engine::runtime::control::{ControlApi, Endpoint, HttpControl, SavepointRequest};
use crate::http::*;

const SECOND: Duration = Duration::from_secs(1);
/// Bounds a hostile server's misbehaviour, far above what the client may read: what the client
/// does not read stays in the two sockets' kernel buffers (a few MiB on loopback).
const MAX_SERVED: usize = 24 << 20;
/// Where an "endless" body ends after all: a client that reads it whole fails the test instead of
/// taking the machine's memory.
const ENDLESS: usize = 256 << 20;

/// How a hostile server answers every request.
#[derive(Clone)]
enum Hostile {
    /// `head`, then `len` bytes of `fill`, then the connection closes.
    Answer {
        head: &'static str,
        fill: u8,
        len: usize,
    },
    /// A 200 announcing `len` bytes, then nothing: reading any of it waits for the timeout.
    Announce(u64),
    /// A chunked 200 that does not end before [`ENDLESS`] bytes, which no client may read.
    Endless,
    /// A 307 to `location`.
    Redirect(String),
    /// The head, one byte per 100 ms, forever (a header that never ends).
    DripHead,
    /// A 200 announcing 1000 bytes, sent one per 100 ms.
    DripBody,
}

/// Serves `how` on 127.0.0.1; each connection reports the body bytes it wrote once it ends.
async fn serve(how: Hostile) -> (SocketAddr, mpsc::UnboundedReceiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (how, tx) = (how.clone(), tx.clone());
            tokio::spawn(async move {
                let _ = tx.send(answer(stream, how).await);
            });
        }
    });
    (addr, rx)
}

async fn answer(mut s: TcpStream, how: Hostile) -> usize {
    if !read_request(&mut s).await {
        return 0;
    }
    let mut written = 0;
    match how {
        Hostile::Answer { head, fill, len } => {
            let _ = s.write_all(head.as_bytes()).await;
            let chunk = vec![fill; 64 << 10];
            while written < len {
                let n = (len - written).min(chunk.len());
                if s.write_all(&chunk[..n]).await.is_err() {
                    break;
                }
                written += n;
            }
        }
        Hostile::Announce(len) => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
            );
            let _ = s.write_all(head.as_bytes()).await;
            until_closed(&mut s).await;
        }
        Hostile::Endless => {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
            let _ = s.write_all(head.as_bytes()).await;
            let mut chunk = b"10000\r\n".to_vec();
            chunk.extend(std::iter::repeat_n(b' ', 0x10000));
            chunk.extend_from_slice(b"\r\n");
            while written < ENDLESS && s.write_all(&chunk).await.is_ok() {
                written += 0x10000;
            }
            let _ = s.write_all(b"0\r\n\r\n").await;
        }
        Hostile::Redirect(location) => {
            let head = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n"
            );
            let _ = s.write_all(head.as_bytes()).await;
            until_closed(&mut s).await;
        }
        Hostile::DripHead => written = drip(&mut s, b"HTTP/1.1 200 OK\r\nX-Slow: ").await,
        Hostile::DripBody => {
            let head =
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n";
            if s.write_all(head.as_bytes()).await.is_ok() {
                written = drip(&mut s, b"").await;
            }
        }
    }
    written
}

/// Writes `first`, then spaces, one byte per 100 ms until the client goes; returns how many.
async fn drip(s: &mut TcpStream, first: &[u8]) -> usize {
    let mut written = 0;
    let mut every = tokio::time::interval(Duration::from_millis(100));
    for byte in first.iter().chain(std::iter::repeat(&b' ')) {
        every.tick().await;
        if s.write_all(&[*byte]).await.is_err() {
            break;
        }
        written += 1;
    }
    written
}

/// Reads one request, head and announced body, so that closing does not reset the connection
/// under the answer. False if the client went first.
async fn read_request(s: &mut TcpStream) -> bool {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&seen[..head_end]).to_ascii_lowercase();
    let body_len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |n| n.trim().parse().unwrap());
    while seen.len() < head_end + body_len {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    true
}

async fn until_closed(s: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
}

fn flink(addr: SocketAddr, total: Duration) -> FlinkRest {
    FlinkRest::with_timeouts(format!("http://{addr}"), SECOND, total)
}

fn endpoint(addr: SocketAddr) -> Endpoint {
    Endpoint::new(&addr.ip().to_string(), addr.port(), "t")
}

/// What a control call fails with, as text.
async fn control_error(total: Duration, addr: SocketAddr) -> String {
    let control = HttpControl::new(total).unwrap();
    control
        .status(&endpoint(addr))
        .await
        .unwrap_err()
        .to_string()
}

#[tokio::test]
async fn huge_answers_are_refused_at_the_cap() {
    // Announced: refused before reading. The server sends no byte of the body, so a client that
    // read any would end in the timeout instead.
    let (addr, _) = serve(Hostile::Announce(64 << 20)).await;
    let e = flink(addr, 5 * SECOND).jobs().await.unwrap_err();
    assert!(matches!(e, FlinkError::Answer { .. }), "{e:?}");
    assert!(e.to_string().contains("exceeds 1048576 bytes"), "{e}");
    let e = control_error(5 * SECOND, addr).await;
    assert!(e.contains("exceeds 1048576 bytes"), "{e}");

    // Streamed without end: refused once past the cap, the connection dropped, and the server
    // could not push more than the sockets buffer.
    let (addr, mut served) = serve(Hostile::Endless).await;
    let started = Instant::now();
    let e = flink(addr, 5 * SECOND).jobs().await.unwrap_err();
    assert!(e.to_string().contains("exceeds 1048576 bytes"), "{e}");
    let e = control_error(5 * SECOND, addr).await;
    assert!(e.contains("exceeds 1048576 bytes"), "{e}");
    assert!(started.elapsed() < 5 * SECOND, "{:?}", started.elapsed());
    for _ in 0..2 {
        let n = tokio::time::timeout(5 * SECOND, served.recv())
            .await
            .expect("the client keeps the connection open")
            .unwrap();
        assert!(n < MAX_SERVED, "the server pushed {n} bytes");
    }

    // Just at the cap is read; one byte more is not (no length announced: read until closed).
    let at_cap = |len| Hostile::Answer {
        head: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
        fill: b' ',
        len,
    };
    let (addr, _) = serve(at_cap(MAX_ANSWER_BYTES)).await;
    let e = flink(addr, 5 * SECOND).jobs().await.unwrap_err();
    assert!(e.to_string().contains("EOF while parsing"), "{e}");
    let (addr, _) = serve(at_cap(MAX_ANSWER_BYTES + 1)).await;
    let e = flink(addr, 5 * SECOND).jobs().await.unwrap_err();
    assert!(e.to_string().contains("exceeds 1048576 bytes"), "{e}");
}

#[tokio::test]
async fn error_answers_are_quoted_short_and_clean() {
    // too large to quote: quoted by its size
    let (addr, _) = serve(Hostile::Answer {
        head: "HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n\r\n",
        fill: b'x',
        len: 10 << 20,
    })
    .await;
    let e = control_error(5 * SECOND, addr).await;
    assert!(e.contains("runtime answered 500"), "{e}");
    assert!(e.contains("exceeds 4096 bytes"), "{e}");
    // escapes, line breaks and control characters do not reach the message
    let (addr, _) = serve(Hostile::Answer {
        head: "HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n\r\n\x1b[2J\x1b[31mboom\r\n\tforged: line\x07",
        fill: b'z',
        len: 3000,
    })
    .await;
    let e = control_error(5 * SECOND, addr).await;
    assert!(
        e.contains("runtime answered 500 Internal Server Error: boom forged: linezzz"),
        "{e}"
    );
    assert!(e.ends_with('…') && e.chars().count() < 600, "{e}");
    let e = flink(addr, 5 * SECOND).jobs().await.unwrap_err();
    assert!(matches!(e, FlinkError::Status { status: 500, .. }), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("HTTP 500: boom forged: linezzz"), "{e}");
    assert!(!e.contains(|c: char| c.is_control()), "{e}");
}

/// No connection waits on `canary` (a non-blocking accept, so nothing sleeps).
fn untouched(canary: &std::net::TcpListener) -> bool {
    match canary.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => true,
        Err(e) => panic!("canary: {e}"),
        Ok(_) => false,
    }
}

#[tokio::test]
async fn redirects_are_refused_not_followed() {
    let canary = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    canary.set_nonblocking(true).unwrap();
    let canary_url = format!("http://{}/v1/savepoints", canary.local_addr().unwrap());
    let (addr, _) = serve(Hostile::Redirect(canary_url.clone())).await;

    // a 307 keeps method and body: the trigger would be POSTed to the canary
    let e = flink(addr, 2 * SECOND)
        .trigger_savepoint("j", "t", "s3://b/sp")
        .await
        .unwrap_err();
    assert!(matches!(e, FlinkError::Status { status: 307, .. }), "{e:?}");
    assert!(
        e.to_string().contains("HTTP 307: redirect not followed"),
        "{e}"
    );
    assert!(untouched(&canary), "the Flink client followed the redirect");

    let control = HttpControl::new(2 * SECOND).unwrap();
    let req = SavepointRequest {
        dir: None,
        stop: true,
        standby: false,
    };
    let e = control
        .trigger_savepoint(&endpoint(addr), &req)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("runtime answered 307 Temporary Redirect"), "{e}");
    assert!(
        untouched(&canary),
        "the control client followed the redirect"
    );

    // The check sees a client that follows: reqwest's default one connects to the canary (which
    // never answers, so the call ends in its timeout).
    let follows = reqwest::Client::builder().timeout(SECOND).build().unwrap();
    let _ = follows
        .post(format!("http://{addr}/x"))
        .body("{}")
        .send()
        .await;
    assert!(!untouched(&canary), "a following client went unnoticed");
}

/// `call`'s outcome, or a failure if it outlives 3 s: a client without a total timeout would wait
/// for a dripping server for ever.
async fn bounded<T>(call: impl Future<Output = T>) -> T {
    tokio::time::timeout(3 * SECOND, call)
        .await
        .expect("the call outlived its timeout")
}

#[tokio::test]
async fn dripping_servers_end_in_the_timeout() {
    for how in [Hostile::DripHead, Hostile::DripBody] {
        let (addr, _) = serve(how).await;
        let started = Instant::now();
        match bounded(flink(addr, SECOND).jobs()).await.unwrap_err() {
            FlinkError::Request { source, .. } => assert!(source.is_timeout(), "{source:?}"),
            other => panic!("{other:?}"),
        }
        let e = bounded(control_error(SECOND, addr)).await;
        assert!(e.contains("timed out"), "{e}");
        // two calls of a 1 s total timeout each, with room for a loaded machine
        let took = started.elapsed();
        assert!(took >= 2 * SECOND && took < 4 * SECOND, "{took:?}");
    }
}

#[test]
fn remote_text_is_sanitised() {
    assert_eq!(
        sanitize_remote("boom\n\tat x.y(Z.java:1)\r\n", 100),
        "boom at x.y(Z.java:1)"
    );
    assert_eq!(
        sanitize_remote("\x1b[1;31mred\x1b[0m  text", 100),
        "red text"
    );
    assert_eq!(
        sanitize_remote("\x1b]0;title\x07after \x1b]8;;u\x1b\\link", 100),
        "after link"
    );
    assert_eq!(
        sanitize_remote("a\0b\x07c\x7fd\u{9b}e\x1bcf", 100),
        "abcdef"
    );
    assert_eq!(
        sanitize_remote("abc\u{202e}fed\u{200b}\u{feff}", 100),
        "abcfed"
    );
    assert_eq!(sanitize_remote("  a \u{2028}\u{a0} b  ", 100), "a b");
    assert_eq!(sanitize_remote("abcde", 5), "abcde");
    assert_eq!(sanitize_remote("abcdef", 5), "abcd…");
    assert_eq!(sanitize_remote("abc  def", 5), "abc…");
    assert_eq!(sanitize_remote(&"é".repeat(20), 5), "éééé…");
    assert_eq!(sanitize_remote("abc", 0), "");
    assert_eq!(
        sanitize_remote(&"x".repeat(1 << 20), QUOTE_CHARS)
            .chars()
            .count(),
        QUOTE_CHARS
    );
}

proptest! {
    #[test]
    fn sanitised_text_is_one_short_clean_line(text in any::<String>(), max in 0usize..64) {
        let out = sanitize_remote(&text, max);
        prop_assert!(out.chars().count() <= max);
        prop_assert!(!out.contains(|c: char| c.is_control() || invisible(c)));
        prop_assert!(!out.contains(|c: char| c.is_whitespace() && c != ' '));
        prop_assert!(!out.contains("  ") && out.trim() == out);
    }
}
