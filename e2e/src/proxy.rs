//! A fault-injecting TCP proxy on loopback, for store outages: clients connect to
//! [`FaultProxy::addr`] and are piped to the upstream server until an outage starts. During an
//! outage every open connection is cut and every new one is closed at once (the client sees a
//! reset or an early end of stream, as when a load balancer loses its backends), so a client
//! fails fast and its retry policy — not a socket timeout — decides what happens next. A
//! slowdown delays every chunk forwarded either way (a congested or throttling store).
//!
//! Plain threads: it runs beside any test runtime and keeps working while the test blocks.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::error::{Error, Result};

#[derive(Debug, Default)]
struct Shared {
    outage: AtomicBool,
    /// Milliseconds each forwarded chunk waits (0: none).
    delay_ms: AtomicU64,
    stopping: AtomicBool,
    /// Both ends of every piped connection, by id, so an outage can cut them.
    open: Mutex<BTreeMap<u64, (TcpStream, TcpStream)>>,
    next_id: AtomicU64,
    /// Connections closed because of an outage (cut or refused).
    refused: AtomicU64,
}

/// A running proxy; stopped when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on a free port of `upstream`'s address (loopback, or the real node's address that
    /// its pods reach) and pipes every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind((upstream.ip(), 0))
            .map_err(|e| Error::Other(format!("fault proxy: bind: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Other(format!("fault proxy: {e}")))?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let acceptor = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = conn else { continue };
                if s.outage.load(Ordering::SeqCst) {
                    s.refused.fetch_add(1, Ordering::SeqCst);
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                pipe(&s, client, server);
            }
        });
        Ok(Self {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts an outage: open connections are cut, new ones closed on arrival.
    pub fn start_outage(&self) {
        let open = {
            let mut open = lock(&self.shared.open);
            // under the lock: a connection being piped right now is either cut here or
            // refused by `pipe`
            self.shared.outage.store(true, Ordering::SeqCst);
            std::mem::take(&mut *open)
        };
        if !open.is_empty() {
            self.shared.refused.fetch_add(1, Ordering::SeqCst);
        }
        for (a, b) in open.into_values() {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }

    /// Ends the outage: new connections are piped again.
    pub fn end_outage(&self) {
        self.shared.outage.store(false, Ordering::SeqCst);
    }

    /// Delays every chunk forwarded from now on by `delay` (zero ends the slowdown).
    pub fn set_delay(&self, delay: std::time::Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.shared.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Connections an outage cut or refused so far (a cut of several at once counts once).
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::SeqCst)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.start_outage();
        // wake the acceptor so it sees `stopping`
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }
}

/// Copies both ways on two threads; the pair is registered so an outage can cut it, and
/// forgotten when the client's side ends.
fn pipe(shared: &Arc<Shared>, client: TcpStream, server: TcpStream) {
    let (Ok(client2), Ok(server2), Ok(a), Ok(b)) = (
        client.try_clone(),
        server.try_clone(),
        client.try_clone(),
        server.try_clone(),
    ) else {
        return;
    };
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    {
        let mut open = lock(&shared.open);
        if shared.outage.load(Ordering::SeqCst) {
            shared.refused.fetch_add(1, Ordering::SeqCst);
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
            return;
        }
        open.insert(id, (a, b));
    }
    let s = shared.clone();
    std::thread::spawn(move || {
        copy(&s, client, server);
        lock(&s.open).remove(&id);
    });
    let s = shared.clone();
    std::thread::spawn(move || copy(&s, server2, client2));
}

fn copy(shared: &Shared, mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let delay = shared.delay_ms.load(Ordering::SeqCst);
                if delay > 0 {
                    // the slowdown itself, not synchronisation
                    std::thread::sleep(std::time::Duration::from_millis(delay));
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn pipes_until_an_outage_and_again_after_it() {
        let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
        let up = upstream.local_addr().unwrap();
        std::thread::spawn(move || {
            for c in upstream.incoming() {
                let mut c = c.unwrap();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 5];
                    while c.read_exact(&mut buf).is_ok() {
                        c.write_all(&buf).unwrap();
                    }
                });
            }
        });
        let proxy = FaultProxy::start(up).unwrap();
        let echo = |s: &mut TcpStream| -> std::io::Result<[u8; 5]> {
            s.write_all(b"hello")?;
            let mut got = [0u8; 5];
            s.read_exact(&mut got)?;
            Ok(got)
        };
        let mut before = TcpStream::connect(proxy.addr).unwrap();
        assert_eq!(&echo(&mut before).unwrap(), b"hello");
        proxy.start_outage();
        assert!(echo(&mut before).is_err(), "an open connection is cut");
        let mut during = TcpStream::connect(proxy.addr).unwrap();
        assert!(echo(&mut during).is_err(), "a new connection is closed");
        assert!(proxy.refused() >= 2);
        proxy.end_outage();
        let mut after = TcpStream::connect(proxy.addr).unwrap();
        assert_eq!(&echo(&mut after).unwrap(), b"hello");
        // a slowdown: each chunk waits, both ways (a lower bound: never flaky)
        proxy.set_delay(std::time::Duration::from_millis(150));
        let t0 = std::time::Instant::now();
        assert_eq!(&echo(&mut after).unwrap(), b"hello");
        assert!(t0.elapsed() >= std::time::Duration::from_millis(300));
        proxy.set_delay(std::time::Duration::ZERO);
        assert_eq!(&echo(&mut after).unwrap(), b"hello");
    }
}
