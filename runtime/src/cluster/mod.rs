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
    F: Fn(Arc<T>, TcpStream, SocketAddr) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let owner: Weak<T> = Arc::downgrade(owner);
    let task = tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    let Some(o) = owner.upgrade() else { return };
                    tokio::spawn(serve(o, stream, peer));
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
