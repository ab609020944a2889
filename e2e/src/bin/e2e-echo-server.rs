//! Tiny test workload for the e2e suite (image `streamjob/e2e-echo:*`).
//!
//! * no arguments: serves HTTP on `$POD_IP:${PORT:-8080}`: `GET /healthz` → 200 `ok`,
//!   `GET /env/NAME` → the value of env var NAME (404 if unset), anything else → 200 with the
//!   pod name. Exits 0 on SIGTERM.
//! * `exit CODE`: exits at once with CODE (for restart-policy tests).

use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("exit") {
        let code: i32 = args.get(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        println!("exiting with {code}");
        std::process::exit(code);
    }
    let ip = std::env::var("POD_IP").unwrap_or_else(|_| "127.0.0.1".into());
    let port = std::env::var("PORT").unwrap_or_else(|_| "8080".into());
    let addr = format!("{ip}:{port}");
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("bind {addr}"))?;
    println!("listening on {addr}");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = term.recv() => {
                println!("SIGTERM: exiting");
                return Ok(());
            }
            accepted = listener.accept() => {
                let (mut sock, _) = accepted?;
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let n = match tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf)).await {
                        Ok(Ok(n)) => n,
                        _ => return,
                    };
                    let req = String::from_utf8_lossy(&buf[..n]);
                    let path = req.split_whitespace().nth(1).unwrap_or("/").to_string();
                    let (status, body) = if path == "/healthz" {
                        ("200 OK", "ok".to_string())
                    } else if let Some(name) = path.strip_prefix("/env/") {
                        match std::env::var(name) {
                            Ok(v) => ("200 OK", v),
                            Err(_) => ("404 Not Found", String::new()),
                        }
                    } else {
                        ("200 OK", std::env::var("POD_NAME").unwrap_or_default())
                    };
                    let resp = format!(
                        "HTTP/1.1 {status}\r\ncontent-length: {}\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = sock.write_all(resp.as_bytes()).await;
                    let _ = sock.shutdown().await;
                });
            }
        }
    }
}
