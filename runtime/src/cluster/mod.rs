//! Running one job over several processes: a coordinator and workers (DESIGN §3, "Roles").
//!
//! * [`workers`] — the coordinator's side: registration, deploying attempts, forwarding
//!   subtask commands and collecting events and counters.
//! * [`worker`] — the worker role (`streamjob-runtime worker`).
//! * [`dataplane`] — data channels between subtasks on different workers.
//! * [`wire`] — frames, the Arrow IPC element codec and the messages.
//!
//! The checkpoint protocol is the same as in one process: the coordinator sends barriers to the
//! sources, barriers flow with the data (over the network where channels cross workers), each
//! subtask writes its state to the checkpoint directory (shared storage: S3 or a shared file
//! system) and acknowledges; the coordinator writes `_metadata` last.

pub mod dataplane;
pub mod wire;
pub mod worker;
pub mod workers;

use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// Stops an accept loop when dropped (its owner went away).
pub(crate) struct AcceptGuard(tokio::task::AbortHandle);

impl Drop for AcceptGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Connections accepted on one port that have not authenticated yet (no channel header, no
/// worker hello with the right token). Each waits at most 10 s for its first frame; beyond this
/// many at once, new ones are closed at once, so peers without the token cannot hold the process's
/// memory or file descriptors. Authenticated connections do not count.
pub const MAX_UNAUTHENTICATED: usize = 64;

/// A place among the [`MAX_UNAUTHENTICATED`] connections of a port: drop it once the peer proved
/// it holds the token.
pub(crate) type Handshake = tokio::sync::OwnedSemaphorePermit;

/// Accepts connections on `listener`, serving each on its own task with `serve`, for as long as
/// `owner` lives (the loop holds it weakly, so dropping the owner ends it).
pub(crate) fn accept_loop<T, F, Fut>(
    listener: TcpListener,
    owner: &Arc<T>,
    what: &'static str,
    serve: F,
) -> AcceptGuard
where
    T: Send + Sync + 'static,
    F: Fn(Arc<T>, TcpStream, SocketAddr, Handshake) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let owner: Weak<T> = Arc::downgrade(owner);
    let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_UNAUTHENTICATED));
    let task = tokio::spawn(async move {
        let mut refused: u64 = 0;
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    let Some(o) = owner.upgrade() else { return };
                    let Ok(handshake) = handshakes.clone().try_acquire_owned() else {
                        refused += 1;
                        // one line per power of two: loud, without a log flood
                        if refused.is_power_of_two() {
                            tracing::warn!(%peer, refused, "{MAX_UNAUTHENTICATED} {what} connections are already authenticating; closing new ones");
                        }
                        drop(stream);
                        continue;
                    };
                    tokio::spawn(serve(o, stream, peer, handshake));
                }
                Err(e) => {
                    // e.g. out of file descriptors: back off instead of spinning
                    tracing::warn!(error = %e, "accepting a {what} connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    AcceptGuard(task.abort_handle())
}
