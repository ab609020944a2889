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

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
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
/// many at once, a new connection closes the oldest one still waiting, so peers without the token
/// can hold neither the process's memory and file descriptors nor the port: a job's own peer, which
/// sends its first frame as soon as it connects, always gets in (idle strangers used to fill the
/// places and have the job's workers refused, issue #38). Authenticated connections do not count.
pub const MAX_UNAUTHENTICATED: usize = 64;

/// A place among the [`MAX_UNAUTHENTICATED`] connections of a port: drop it once the peer proved
/// it holds the token (until then a newer connection may close this one).
pub(crate) struct Handshake {
    id: u64,
    pending: Weak<Mutex<VecDeque<(u64, tokio::task::AbortHandle)>>>,
}

impl Drop for Handshake {
    fn drop(&mut self) {
        if let Some(pending) = self.pending.upgrade() {
            let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
            p.retain(|(id, _)| *id != self.id);
        }
    }
}

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
    // the connections still authenticating, oldest first, with the tasks that serve them
    let pending: Arc<Mutex<VecDeque<(u64, tokio::task::AbortHandle)>>> = Arc::default();
    let task = tokio::spawn(async move {
        let (mut next_id, mut evicted) = (0u64, 0u64);
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    let Some(o) = owner.upgrade() else { return };
                    next_id += 1;
                    let handshake = Handshake {
                        id: next_id,
                        pending: Arc::downgrade(&pending),
                    };
                    let oldest = {
                        // the lock is held across the spawn, so the task's handshake cannot be
                        // dropped (removed) before it is recorded
                        let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
                        let oldest = if p.len() >= MAX_UNAUTHENTICATED {
                            p.pop_front()
                        } else {
                            None
                        };
                        let served = tokio::spawn(serve(o, stream, peer, handshake));
                        p.push_back((next_id, served.abort_handle()));
                        oldest
                    };
                    if let Some((_, oldest)) = oldest {
                        oldest.abort();
                        evicted += 1;
                        // one line per power of two: loud, without a log flood
                        if evicted.is_power_of_two() {
                            tracing::warn!(%peer, evicted, "{MAX_UNAUTHENTICATED} {what} connections are authenticating at once; closing the oldest for each new one");
                        }
                    }
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
