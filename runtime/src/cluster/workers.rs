//! The coordinator's side of the cluster: workers register, receive attempts and subtask
//! commands, and report subtask events and counters.
//!
//! Workers hold no state of their own (state lives in checkpoints), so any registered worker may
//! fill any slot; a worker that disconnects fails the running attempt, and the job restarts from
//! its latest checkpoint once the slot is filled again.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::wire::{
    FromWorker, KEEPALIVE, PEER_TIMEOUT, StepCounters, ToWorker, WireCommand, read_first_json,
    read_json, token_matches, write_json,
};
use crate::coordinator::slot_of;
use crate::error::{Error, Result};
use crate::graph::JobGraph;
use crate::metrics::OperatorMetrics;
use crate::task::{TaskCommand, TaskEvent};

/// How long the coordinator waits for workers to leave at the end of the job.
const EXIT_PATIENCE: Duration = Duration::from_secs(5);

/// How long a new connection may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

struct Registered {
    name: String,
    data_addr: String,
    /// Distinguishes a slot's current connection from an older one that is closing.
    connection: u64,
    to_worker: mpsc::UnboundedSender<ToWorker>,
    counters: Vec<StepCounters>,
}

#[derive(Default)]
struct State {
    slots: Vec<Option<Registered>>,
    attempt: u64,
    /// Events of the current attempt go here.
    events: Option<mpsc::UnboundedSender<TaskEvent>>,
    /// The coordinator's per-step counters, filled from the workers' reports.
    metrics: Vec<Arc<OperatorMetrics>>,
}

/// The workers of a job, as the coordinator sees them.
pub struct Workers {
    expected: usize,
    token: Option<String>,
    spec_digest: String,
    addr: SocketAddr,
    register_timeout: Duration,
    state: Mutex<State>,
    /// Number of filled slots.
    filled: watch::Sender<usize>,
    connections: AtomicU64,
    acceptor: OnceLock<super::AcceptGuard>,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("expected", &self.expected)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Workers {
    /// Listens on `addr` for `expected` workers running the job whose spec digest is
    /// `spec_digest`.
    pub async fn listen(
        addr: SocketAddr,
        expected: usize,
        token: Option<String>,
        spec_digest: String,
        register_timeout: Duration,
    ) -> Result<Arc<Self>> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| Error::Cluster(format!("cannot listen for workers on {addr}: {e}")))?;
        let bound = listener.local_addr()?;
        let workers = Arc::new(Self {
            expected,
            token,
            spec_digest,
            addr: bound,
            register_timeout,
            state: Mutex::new(State {
                slots: (0..expected).map(|_| None).collect(),
                ..Default::default()
            }),
            filled: watch::channel(0).0,
            connections: AtomicU64::new(0),
            acceptor: OnceLock::new(),
        });
        tracing::info!(%bound, workers = expected, "listening for workers");
        let guard = super::accept_loop(
            listener,
            &workers,
            "worker",
            |w, stream, peer, handshake| {
                let id = w.connections.fetch_add(1, Ordering::Relaxed) + 1;
                let span = tracing::info_span!("worker-connection", %peer, connection = id);
                w.serve(stream, id, handshake).instrument(span)
            },
        );
        let _ = workers.acceptor.set(guard);
        Ok(workers)
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| Error::Cluster("worker registry poisoned".into()))
    }

    fn publish_filled(&self, state: &State) {
        let n = state.slots.iter().filter(|s| s.is_some()).count();
        self.filled.send_replace(n);
    }

    async fn serve(
        self: Arc<Self>,
        stream: TcpStream,
        connection: u64,
        handshake: super::Handshake,
    ) {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!(error = %e, "set_nodelay");
        }
        let (read, write) = stream.into_split();
        let mut read = BufReader::new(read);
        let mut write = BufWriter::new(write);
        let hello =
            match tokio::time::timeout(HELLO_TIMEOUT, read_first_json::<_, FromWorker>(&mut read))
                .await
            {
                Ok(Ok(Some(h))) => h,
                Ok(Ok(None)) => return,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "a worker connection did not say hello");
                    return;
                }
                Err(_) => {
                    tracing::warn!("a worker connection said nothing for 10s");
                    return;
                }
            };
        let (to_worker, mut outbox) = mpsc::unbounded_channel();
        let admitted = self.admit(hello, connection, to_worker);
        drop(handshake);
        let (slot, name) = match admitted {
            Ok(x) => x,
            Err(reason) => {
                tracing::warn!(%reason, "refused a worker");
                let _ = write_json(&mut write, &ToWorker::Refused { reason }).await;
                let _ = write.flush().await;
                return;
            }
        };
        let span = tracing::info_span!("worker", %name, slot);
        async move {
            let writer = tokio::spawn(async move {
                let mut ping = tokio::time::interval(KEEPALIVE);
                loop {
                    let msg = tokio::select! {
                        m = outbox.recv() => match m {
                            Some(m) => m,
                            None => return,
                        },
                        _ = ping.tick() => ToWorker::Ping,
                    };
                    let exit = matches!(msg, ToWorker::Exit { .. });
                    if write_json(&mut write, &msg).await.is_err() {
                        return;
                    }
                    if (outbox.is_empty() || exit) && write.flush().await.is_err() {
                        return;
                    }
                    if exit {
                        return;
                    }
                }
            });
            let why = loop {
                match tokio::time::timeout(PEER_TIMEOUT, read_json::<_, FromWorker>(&mut read))
                    .await
                {
                    Ok(Ok(Some(msg))) => self.on_message(slot, connection, msg),
                    Ok(Ok(None)) => break "closed the connection".to_string(),
                    Ok(Err(e)) => break e.to_string(),
                    Err(_) => break format!("sent nothing for {PEER_TIMEOUT:?}"),
                }
            };
            writer.abort();
            self.on_disconnect(slot, connection, &name, &why);
        }
        .instrument(span)
        .await
    }

    /// Checks a hello and gives the worker a free slot.
    fn admit(
        &self,
        hello: FromWorker,
        connection: u64,
        to_worker: mpsc::UnboundedSender<ToWorker>,
    ) -> std::result::Result<(usize, String), String> {
        let FromWorker::Hello {
            name,
            token,
            spec_digest,
            runtime_version,
            data_addr,
        } = hello
        else {
            return Err("the first message must be a hello".into());
        };
        if !token_matches(token.as_deref(), self.token.as_deref()) {
            return Err(format!(
                "worker {name}: wrong or missing token (pass the job's --token-file or STREAMJOB_CONTROL_TOKEN)"
            ));
        }
        if spec_digest != self.spec_digest {
            return Err(format!(
                "worker {name} runs another job spec (digest {spec_digest}, the coordinator's is {}): give the worker the coordinator's manifest",
                self.spec_digest
            ));
        }
        let mut state = self.lock().map_err(|e| e.to_string())?;
        let Some(slot) = state.slots.iter().position(Option::is_none) else {
            return Err(format!(
                "worker {name}: all {} worker slots are taken",
                self.expected
            ));
        };
        let _ = to_worker.send(ToWorker::Welcome {
            slot,
            workers: self.expected,
        });
        state.slots[slot] = Some(Registered {
            name: name.clone(),
            data_addr,
            connection,
            to_worker,
            counters: Vec::new(),
        });
        self.publish_filled(&state);
        tracing::info!(%name, slot, %runtime_version, "worker registered");
        Ok((slot, name))
    }

    fn on_message(&self, slot: usize, connection: u64, msg: FromWorker) {
        let Ok(mut state) = self.lock() else { return };
        match msg {
            FromWorker::Event { attempt, event } if attempt == state.attempt => {
                if let Some(ev) = &state.events {
                    let _ = ev.send(event);
                }
            }
            FromWorker::DeployFailed { attempt, error } if attempt == state.attempt => {
                if let Some(ev) = &state.events {
                    let _ = ev.send(TaskEvent::Failed {
                        step: 0,
                        subtask: slot,
                        error: format!("worker slot {slot} could not deploy: {error}"),
                    });
                }
            }
            FromWorker::Metrics { steps } => {
                if let Some(Some(r)) = state.slots.get_mut(slot)
                    && r.connection == connection
                {
                    r.counters = steps;
                }
                sum_counters(&state);
            }
            FromWorker::Event { .. } | FromWorker::DeployFailed { .. } => {}
            FromWorker::Hello { .. } => {
                tracing::warn!(slot, "ignoring a second hello");
            }
        }
    }

    fn on_disconnect(&self, slot: usize, connection: u64, name: &str, why: &str) {
        let Ok(mut state) = self.lock() else { return };
        if state.slots[slot]
            .as_ref()
            .is_some_and(|r| r.connection == connection)
        {
            state.slots[slot] = None;
            self.publish_filled(&state);
            if state.events.is_none() {
                tracing::info!(%name, slot, "worker left");
            } else {
                tracing::warn!(%name, slot, %why, "worker lost");
            }
            if let Some(ev) = &state.events {
                let _ = ev.send(TaskEvent::Failed {
                    step: 0,
                    subtask: slot,
                    error: format!("worker {name} (slot {slot}) was lost: {why}"),
                });
            }
        }
    }

    /// Waits until every slot is filled (at most the registration timeout).
    async fn wait_for_all(&self) -> Result<()> {
        let mut rx = self.filled.subscribe();
        let expected = self.expected;
        let waited = tokio::time::timeout(self.register_timeout, rx.wait_for(|n| *n >= expected))
            .await
            .map(|r| r.is_ok());
        match waited {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::Cluster("the worker registry closed".into())),
            Err(_) => Err(Error::Cluster(format!(
                "only {} of {expected} workers registered within {:?} (workers connect to {})",
                *rx.borrow(),
                self.register_timeout,
                self.addr
            ))),
        }
    }

    /// Deploys a new attempt of `graph` on the workers, restored from `restore`. Returns the
    /// command senders per subtask, the attempt's events, the forwarding tasks and the number of
    /// subtasks.
    pub async fn deploy(
        &self,
        graph: &JobGraph,
        restore: Option<&str>,
        metrics: &[Arc<OperatorMetrics>],
    ) -> Result<crate::coordinator::Subtasks> {
        self.wait_for_all().await?;
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        let mut tasks = JoinSet::new();
        let mut commands = Vec::new();
        let mut count = 0;
        let mut state = self.lock()?;
        state.attempt += 1;
        let attempt = state.attempt;
        state.events = Some(ev_tx);
        state.metrics = metrics.to_vec();
        let mut peers = Vec::with_capacity(self.expected);
        let mut outboxes = Vec::with_capacity(self.expected);
        for (slot, r) in state.slots.iter().enumerate() {
            let r = r.as_ref().ok_or_else(|| {
                Error::Cluster(format!("worker slot {slot} emptied during the deploy"))
            })?;
            peers.push(r.data_addr.clone());
            outboxes.push(r.to_worker.clone());
        }
        let names: Vec<String> = state
            .slots
            .iter()
            .flatten()
            .map(|r| r.name.clone())
            .collect();
        drop(state);
        tracing::info!(attempt, workers = ?names, restore = ?restore, "deploying on workers");
        for outbox in &outboxes {
            let _ = outbox.send(ToWorker::Deploy {
                attempt,
                restore: restore.map(str::to_string),
                peers: peers.clone(),
            });
        }
        for (k, step) in graph.steps.iter().enumerate() {
            let mut step_cmds = Vec::new();
            for j in 0..step.parallelism {
                let outbox = outboxes[slot_of(j, self.expected)].clone();
                let (tx, mut rx) = mpsc::unbounded_channel::<TaskCommand>();
                tasks.spawn(async move {
                    while let Some(c) = rx.recv().await {
                        let msg = ToWorker::Command {
                            attempt,
                            step: k,
                            subtask: j,
                            command: WireCommand::of(&c),
                        };
                        if outbox.send(msg).is_err() {
                            return;
                        }
                    }
                });
                step_cmds.push(Some(tx));
                count += 1;
            }
            commands.push(step_cmds);
        }
        Ok(crate::coordinator::Subtasks {
            commands,
            events: ev_rx,
            tasks,
            count,
        })
    }

    /// Stops the current attempt's subtasks on every worker (it failed; a new one follows).
    pub fn cancel_attempt(&self) {
        if let Ok(mut state) = self.lock() {
            state.events = None;
            let attempt = state.attempt;
            for r in state.slots.iter().flatten() {
                let _ = r.to_worker.send(ToWorker::Cancel { attempt });
            }
        }
    }

    /// Tells the workers to exit (the job is over) and waits (a few seconds at most) until they
    /// closed their connections.
    pub async fn shutdown(&self, reason: &str) {
        if let Ok(mut state) = self.lock() {
            state.events = None;
            for r in state.slots.iter().flatten() {
                let _ = r.to_worker.send(ToWorker::Exit {
                    reason: reason.to_string(),
                });
            }
        }
        let mut rx = self.filled.subscribe();
        if tokio::time::timeout(EXIT_PATIENCE, rx.wait_for(|n| *n == 0))
            .await
            .is_err()
        {
            tracing::warn!("workers did not disconnect after being told to exit");
        }
    }
}

/// Sets the coordinator's per-step counters to the sum over the workers' reports.
fn sum_counters(state: &State) {
    for (k, m) in state.metrics.iter().enumerate() {
        let mut total = StepCounters::default();
        for r in state.slots.iter().flatten() {
            if let Some(c) = r.counters.get(k) {
                total.add(c);
            }
        }
        total.write(m);
    }
}
