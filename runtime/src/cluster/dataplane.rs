//! The data plane of a worker: one TCP connection per channel between subtasks on different
//! workers.
//!
//! One connection per channel, not one per pair of workers: barrier alignment blocks single
//! inputs, and a blocked channel sharing a connection would stall the channels behind it (the
//! barriers the alignment waits for among them). TCP flow control plus the bounded channels at
//! both ends give backpressure.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use streamjob_crds::v1alpha1::StorageSpec;
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::wire::{
    ChannelHeader, ChannelKey, ElementDecoder, ElementEncoder, read_first_json, read_frame,
    token_matches, write_json,
};
use crate::error::{Error, Result};
use crate::task::Element;

/// How long a sender keeps trying to reach a peer's data plane.
const CONNECT_PATIENCE: Duration = Duration::from_secs(30);

/// How long an accepted connection may take to send its header.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Whichever of the two ends of a channel shows up first waits here for the other: the local
/// input (after the worker deployed the attempt) or the peer's connection.
enum Rendezvous {
    Input(mpsc::Sender<Element>),
    Connection(BufReader<TcpStream>),
}

/// A worker's data plane: the listener and the channels waiting to be joined.
pub struct DataPlane {
    addr: SocketAddr,
    token: Option<String>,
    spec_digest: String,
    storage: Option<StorageSpec>,
    waiting: Mutex<HashMap<ChannelKey, Rendezvous>>,
    acceptor: OnceLock<super::AcceptGuard>,
}

impl DataPlane {
    /// Binds `addr` and accepts channels until the process ends.
    pub async fn bind(
        addr: SocketAddr,
        token: Option<String>,
        spec_digest: String,
        storage: Option<StorageSpec>,
    ) -> Result<Arc<Self>> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| Error::Cluster(format!("cannot listen for data on {addr}: {e}")))?;
        let plane = Arc::new(Self {
            addr: listener.local_addr()?,
            token,
            spec_digest,
            storage,
            waiting: Mutex::new(HashMap::new()),
            acceptor: OnceLock::new(),
        });
        let guard = super::accept_loop(
            listener,
            &plane,
            "data",
            |p, stream, peer, handshake| async move {
                if let Err(e) = p.accept(stream, handshake).await {
                    tracing::warn!(%peer, error = %e, "refused a data connection");
                }
            },
        );
        let _ = plane.acceptor.set(guard);
        Ok(plane)
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    async fn accept(self: Arc<Self>, stream: TcpStream, handshake: super::Handshake) -> Result<()> {
        stream.set_nodelay(true)?;
        let mut reader = BufReader::new(stream);
        let header: ChannelHeader =
            tokio::time::timeout(HEADER_TIMEOUT, read_first_json(&mut reader))
                .await
                .map_err(|_| Error::Cluster("no channel header within 10s".into()))??
                .ok_or_else(|| Error::Cluster("closed before its channel header".into()))?;
        if !token_matches(header.token.as_deref(), self.token.as_deref()) {
            return Err(Error::Cluster("wrong token on a data connection".into()));
        }
        drop(handshake);
        if header.spec_digest != self.spec_digest {
            return Err(Error::Cluster(format!(
                "a data connection of another job spec ({} here, {} there)",
                self.spec_digest, header.spec_digest
            )));
        }
        let key = header.key;
        let input = {
            let mut w = self
                .waiting
                .lock()
                .map_err(|_| Error::Cluster("poisoned".into()))?;
            match w.remove(&key) {
                Some(Rendezvous::Input(tx)) => Some(tx),
                _ => {
                    w.insert(key, Rendezvous::Connection(reader));
                    return Ok(());
                }
            }
        };
        if let Some(tx) = input {
            tokio::spawn(receive(reader, tx, self.storage.clone(), key));
        }
        Ok(())
    }

    /// The local end of channel `key`: elements arriving on its connection go to `input`. The
    /// returned future (spawn it with the attempt's subtasks) forwards them.
    pub fn expect(
        &self,
        key: ChannelKey,
        input: mpsc::Sender<Element>,
    ) -> Result<Option<impl Future<Output = ()> + Send + 'static>> {
        let mut w = self
            .waiting
            .lock()
            .map_err(|_| Error::Cluster("poisoned".into()))?;
        match w.remove(&key) {
            Some(Rendezvous::Connection(reader)) => {
                Ok(Some(receive(reader, input, self.storage.clone(), key)))
            }
            _ => {
                w.insert(key, Rendezvous::Input(input));
                Ok(None)
            }
        }
    }

    /// Forgets channels of attempts before `attempt` (their subtasks were cancelled).
    pub fn retire_before(&self, attempt: u64) {
        if let Ok(mut w) = self.waiting.lock() {
            w.retain(|k, _| k.attempt >= attempt);
        }
    }

    /// Sends the elements of `output` to channel `key` at the peer `addr`.
    pub async fn send(
        self: Arc<Self>,
        key: ChannelKey,
        addr: String,
        mut output: mpsc::Receiver<Element>,
    ) -> Result<()> {
        let span = tracing::debug_span!("channel-out", attempt = key.attempt, step = key.step, from = key.from, to = key.to, %addr);
        async move {
            let deadline = tokio::time::Instant::now() + CONNECT_PATIENCE;
            let stream = loop {
                match TcpStream::connect(&addr).await {
                    Ok(s) => break s,
                    Err(e) if tokio::time::Instant::now() < deadline => {
                        tracing::debug!(error = %e, "data peer not reachable yet");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => {
                        return Err(Error::Cluster(format!(
                            "cannot reach the data plane of worker {addr}: {e}"
                        )));
                    }
                }
            };
            stream.set_nodelay(true)?;
            let mut w = BufWriter::with_capacity(256 * 1024, stream);
            write_json(
                &mut w,
                &ChannelHeader {
                    token: self.token.clone(),
                    spec_digest: self.spec_digest.clone(),
                    key,
                },
            )
            .await?;
            let mut enc = ElementEncoder::default();
            let mut buf = Vec::new();
            while let Some(e) = output.recv().await {
                buf.clear();
                enc.encode(&e, &mut buf)?;
                w.write_all(&buf)
                    .await
                    .map_err(|e| Error::Cluster(format!("data channel to {addr} broke: {e}")))?;
                // write what queued up in one go; flush when the subtask has nothing more yet
                if output.is_empty() {
                    w.flush().await.map_err(|e| {
                        Error::Cluster(format!("data channel to {addr} broke: {e}"))
                    })?;
                }
            }
            w.flush().await?;
            w.shutdown().await?;
            Ok(())
        }
        .instrument(span)
        .await
    }
}

/// Reads the frames of one channel into the local input. A connection that ends early just ends:
/// the input's channel closes and the subtask fails with "upstream subtask is gone".
async fn receive(
    mut reader: BufReader<TcpStream>,
    input: mpsc::Sender<Element>,
    storage: Option<StorageSpec>,
    key: ChannelKey,
) {
    let mut dec = ElementDecoder::new(storage);
    loop {
        let frame = match read_frame(&mut reader).await {
            Ok(Some(f)) => f,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(?key, error = %e, "data channel broke");
                return;
            }
        };
        match dec.decode(frame) {
            Ok(Some(e)) => {
                if input.send(e).await.is_err() {
                    return;
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(?key, error = %e, "bad frame on a data channel");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(to: usize) -> ChannelKey {
        ChannelKey {
            attempt: 1,
            step: 1,
            from: 0,
            to,
        }
    }

    async fn plane(token: Option<&str>, digest: &str) -> Arc<DataPlane> {
        DataPlane::bind(
            ([127, 0, 0, 1], 0).into(),
            token.map(str::to_string),
            digest.into(),
            None,
        )
        .await
        .unwrap()
    }

    /// Sends watermarks 1..=n then End from `from` to channel `k` of `to`.
    fn sender(from: &Arc<DataPlane>, to: &Arc<DataPlane>, k: ChannelKey, n: i64) {
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(from.clone().send(k, to.local_addr().to_string(), rx));
        tokio::spawn(async move {
            for i in 1..=n {
                tx.send(Element::Watermark(i)).await.unwrap();
            }
            tx.send(Element::End).await.unwrap();
        });
    }

    async fn drain(mut rx: mpsc::Receiver<Element>) -> Vec<i64> {
        let mut got = Vec::new();
        while let Some(e) = rx.recv().await {
            match e {
                Element::Watermark(w) => got.push(w),
                Element::End => break,
                other => panic!("{other:?}"),
            }
        }
        got
    }

    #[tokio::test]
    async fn channels_join_whichever_end_comes_first() {
        let a = plane(Some("t"), "d").await;
        let b = plane(Some("t"), "d").await;
        // the input first
        let (tx, rx) = mpsc::channel(2);
        assert!(b.expect(key(0), tx).unwrap().is_none());
        sender(&a, &b, key(0), 100);
        assert_eq!(drain(rx).await, (1..=100).collect::<Vec<_>>());
        // the connection first: wait until it is parked, then join it
        sender(&a, &b, key(1), 50);
        while !matches!(
            b.waiting.lock().unwrap().get(&key(1)),
            Some(Rendezvous::Connection(_))
        ) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (tx, rx) = mpsc::channel(2);
        let forward = (
            b.expect(key(1), tx).unwrap().expect("parked connection"),
            rx,
        );
        tokio::spawn(forward.0);
        assert_eq!(drain(forward.1).await, (1..=50).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn connections_with_another_token_or_spec_are_refused() {
        let b = plane(Some("right"), "d").await;
        for (token, digest) in [(Some("wrong"), "d"), (None, "d"), (Some("right"), "other")] {
            let a = plane(token, digest).await;
            let (tx, mut rx) = mpsc::channel(2);
            assert!(b.expect(key(7), tx).unwrap().is_none());
            sender(&a, &b, key(7), 3);
            let got = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await;
            assert!(
                got.is_err(),
                "{token:?}/{digest}: data got through: {got:?}"
            );
            b.waiting.lock().unwrap().remove(&key(7));
        }
    }

    /// Peers without the token hold at most `MAX_UNAUTHENTICATED` connections: each new one
    /// closes the oldest still authenticating, so idle strangers cannot lock the job's own peers
    /// out (issue #38: they used to fill the places and have every worker refused).
    #[tokio::test]
    async fn silent_peers_cannot_lock_out_peers_with_the_token() {
        use tokio::io::AsyncReadExt;
        let b = plane(Some("t"), "d").await;
        let addr = b.local_addr();
        let mut silent = Vec::new();
        for _ in 0..super::super::MAX_UNAUTHENTICATED {
            silent.push(TcpStream::connect(addr).await.unwrap());
        }
        // a 65th: the oldest silent one is closed at once, long before the 10 s header timeout
        let mut newest = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(5), silent[0].read(&mut buf))
            .await
            .expect("the oldest silent connection is closed at once");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        // the newest is held for its header
        assert!(
            tokio::time::timeout(Duration::from_millis(300), newest.read(&mut buf))
                .await
                .is_err(),
            "the newest connection waits for its header"
        );
        // with every place taken by strangers, a peer with the token gets its data through
        let a = plane(Some("t"), "d").await;
        let (tx, rx) = mpsc::channel(2);
        assert!(b.expect(key(3), tx).unwrap().is_none());
        sender(&a, &b, key(3), 100);
        let got = tokio::time::timeout(Duration::from_secs(5), drain(rx))
            .await
            .expect("the peer with the token is served");
        assert_eq!(got, (1..=100).collect::<Vec<_>>());
        drop(silent);
    }
}
