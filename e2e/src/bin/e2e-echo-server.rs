//! Tiny test workload for the e2e suite (image `streamjob/e2e-echo:*`).
//!
//! * no arguments: serves HTTP on `$POD_IP:${PORT:-8080}`: `GET /healthz` → 200 `ok`,
//!   `GET /env/NAME` → the value of env var NAME (404 if unset), anything else → 200 with the
//!   pod name. Exits 0 on SIGTERM.
//! * `exit CODE`: exits at once with CODE (for restart-policy tests).
//! * with `HANG=1` (image `streamjob/e2e-hang:*`): a pod that hangs. Every argument that is a
//!   socket address (the `--control-addr`, `--metrics-addr` … a runtime pod is given) is
//!   listened on; connections are accepted and held, and nothing is ever answered, as a stopped
//!   or wedged process looks from outside. Exits 0 on SIGTERM.

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
    if std::env::var("HANG").as_deref() == Ok("1") {
        return hang(&args).await;
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

/// Listens on every socket address among `args`, accepts and never answers.
async fn hang(args: &[String]) -> anyhow::Result<()> {
    let addrs: Vec<std::net::SocketAddr> = args.iter().filter_map(|a| a.parse().ok()).collect();
    anyhow::ensure!(
        !addrs.is_empty(),
        "HANG=1: no socket address among {args:?}"
    );
    let mut listeners = Vec::new();
    for addr in &addrs {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("bind {addr}"))?;
        listeners.push(l);
    }
    println!("hanging on {addrs:?}");
    let (held_tx, mut held_rx) = tokio::sync::mpsc::unbounded_channel();
    for l in listeners {
        let held_tx = held_tx.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = l.accept().await {
                // kept open until the peer gives up (then dropped below)
                if held_tx.send(sock).is_err() {
                    return;
                }
            }
        });
    }
    let mut held = Vec::new();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut sweep = tokio::time::interval(Duration::from_secs(10));
    loop {
        tokio::select! {
            _ = term.recv() => return Ok(()),
            Some(sock) = held_rx.recv() => held.push(sock),
            _ = sweep.tick() => {
                // what peers sent is read and ignored; one that gave up closed its end (a read
                // gives 0 bytes) and is let go
                held.retain(|sock| {
                    let mut b = [0u8; 4096];
                    loop {
                        match sock.try_read(&mut b) {
                            Ok(0) => return false,
                            Ok(_) => continue,
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                            Err(_) => return false,
                        }
                    }
                });
            }
        }
    }
}
