//! The subtasks of one attempt: spawned here, or spread over worker processes.

use super::*;

pub(super) struct Attempt {
    pub(super) commands: Vec<Vec<mpsc::UnboundedSender<TaskCommand>>>,
    pub(super) events: mpsc::UnboundedReceiver<TaskEvent>,
    pub(super) tasks: JoinSet<()>,
    pub(super) subtasks: usize,
}

pub(super) fn spawn_attempt(
    graph: &JobGraph,
    snapshot: Option<&LoadedSnapshot>,
    metrics: &[Arc<OperatorMetrics>],
) -> Result<Attempt> {
    spawn_subtasks(graph, snapshot, metrics, None).map(Attempt::from)
}

impl From<Subtasks> for Attempt {
    /// An attempt whose every subtask takes commands (here, or forwarded to its worker).
    fn from(s: Subtasks) -> Self {
        Attempt {
            commands: s
                .commands
                .into_iter()
                .map(|step| step.into_iter().flatten().collect())
                .collect(),
            events: s.events,
            tasks: s.tasks,
            subtasks: s.count,
        }
    }
}

/// Where the subtasks of an attempt run when they are spread over worker processes: subtask `j`
/// of every step runs on slot `j % peers.len()`, so forward chains stay in one process and only
/// repartitioning (`keyBy`, rebalance) crosses the network.
pub struct Spread<'a> {
    pub attempt: u64,
    /// This process's slot.
    pub slot: usize,
    /// Data plane address of each slot.
    pub peers: &'a [String],
    pub plane: &'a Arc<crate::cluster::dataplane::DataPlane>,
}

/// The slot that runs subtask `subtask` among `workers` workers.
pub fn slot_of(subtask: usize, workers: usize) -> usize {
    subtask % workers.max(1)
}

/// The subtasks this process runs.
pub struct Subtasks {
    /// `commands[step][subtask]`, `None` for subtasks elsewhere.
    pub commands: Vec<Vec<Option<mpsc::UnboundedSender<TaskCommand>>>>,
    pub events: mpsc::UnboundedReceiver<TaskEvent>,
    /// The subtasks and the network channels of this attempt (aborted when dropped).
    pub tasks: JoinSet<()>,
    pub count: usize,
}

/// Spawns the subtasks of `graph` placed on this process (all of them without `spread`), wired
/// by bounded channels, and by network channels to the subtasks elsewhere.
pub fn spawn_subtasks(
    graph: &JobGraph,
    snapshot: Option<&LoadedSnapshot>,
    metrics: &[Arc<OperatorMetrics>],
    spread: Option<&Spread<'_>>,
) -> Result<Subtasks> {
    let (ev_tx, ev_rx) = mpsc::unbounded_channel();
    let mp = graph.max_parallelism;
    let steps = &graph.steps;
    let here = |j: usize| spread.is_none_or(|s| slot_of(j, s.peers.len()) == s.slot);
    let mut tasks = JoinSet::new();
    // senders[k][i] = targets of subtask i of step k (indexed by target subtask);
    // receivers[k][j] = inputs of subtask j
    let mut senders: Vec<Vec<Vec<mpsc::Sender<Element>>>> = steps
        .iter()
        .map(|s| vec![Vec::new(); s.parallelism])
        .collect();
    let mut receivers: Vec<Vec<Vec<mpsc::Receiver<Element>>>> = steps
        .iter()
        .map(|s| (0..s.parallelism).map(|_| Vec::new()).collect())
        .collect();
    #[allow(clippy::needless_range_loop)]
    for k in 1..steps.len() {
        let forward = steps[k].partition == Partition::Forward
            && steps[k].parallelism == steps[k - 1].parallelism;
        for i in 0..steps[k - 1].parallelism {
            for j in 0..steps[k].parallelism {
                if forward && i != j {
                    continue;
                }
                match (here(i), here(j), spread) {
                    (true, true, _) | (_, _, None) => {
                        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                        senders[k - 1][i].push(tx);
                        receivers[k][j].push(rx);
                    }
                    (true, false, Some(s)) => {
                        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                        senders[k - 1][i].push(tx);
                        let key = crate::cluster::wire::ChannelKey {
                            attempt: s.attempt,
                            step: k,
                            from: i,
                            to: j,
                        };
                        let addr = s.peers[slot_of(j, s.peers.len())].clone();
                        let plane = s.plane.clone();
                        let events = ev_tx.clone();
                        let uid = steps[k - 1].uid.clone();
                        tasks.spawn(async move {
                            if let Err(e) = plane.send(key, addr, rx).await {
                                let _ = events.send(TaskEvent::Failed {
                                    step: k - 1,
                                    subtask: i,
                                    error: format!("{uid}[{i}]: {e}"),
                                });
                            }
                        });
                    }
                    (false, true, Some(s)) => {
                        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                        receivers[k][j].push(rx);
                        let key = crate::cluster::wire::ChannelKey {
                            attempt: s.attempt,
                            step: k,
                            from: i,
                            to: j,
                        };
                        if let Some(forward) = s.plane.expect(key, tx)? {
                            tasks.spawn(forward);
                        }
                    }
                    (false, false, Some(_)) => {}
                }
            }
        }
    }
    let dead_letter = graph
        .spec
        .dead_letter_path
        .as_ref()
        .map(|p| Location::parse(p, graph.spec.storage.as_ref()))
        .transpose()?;
    let mut commands = Vec::new();
    let mut count = 0;
    for (k, step) in steps.iter().enumerate() {
        let mut step_cmds = Vec::new();
        let hash = match steps.get(k + 1).map(|s| &s.partition) {
            Some(Partition::Hash(cols)) => Some(cols.clone()),
            _ => None,
        };
        for j in 0..step.parallelism {
            if !here(j) {
                step_cmds.push(None);
                continue;
            }
            let range = key_group_range(mp, step.parallelism as u32, j as u32);
            let restored = snapshot
                .map(|s| s.restored_for(&step.uid, j, step.parallelism, &range))
                .unwrap_or_default();
            let ctx = OperatorContext {
                uid: step.uid.clone(),
                subtask: j,
                parallelism: step.parallelism,
                max_parallelism: mp,
                key_groups: range,
                bad_record_policy: step.bad_record_policy,
                input_schema: step.input_schema.clone(),
                metrics: metrics[k].clone(),
            };
            let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
            step_cmds.push(Some(cmd_tx));
            let setup = TaskSetup {
                ctx: ctx.clone(),
                step: k,
                restored,
                output: Output::new(std::mem::take(&mut senders[k][j]), hash.clone(), mp),
                commands: cmd_rx,
                events: ev_tx.clone(),
                dead_letter: dead_letter.clone(),
            };
            let events = ev_tx.clone();
            let uid = step.uid.clone();
            match &step.node {
                Node::Source(build) => {
                    let src = build(&ctx)?;
                    tasks.spawn(async move {
                        if let Err(e) = run_source(setup, src).await {
                            let _ = events.send(TaskEvent::Failed {
                                step: k,
                                subtask: j,
                                error: format!("{uid}[{j}]: {e}"),
                            });
                        }
                    });
                }
                Node::Operator(build) => {
                    let op = build(&ctx)?;
                    let inputs = std::mem::take(&mut receivers[k][j]);
                    tasks.spawn(async move {
                        if let Err(e) = run_operator(setup, op, inputs).await {
                            let _ = events.send(TaskEvent::Failed {
                                step: k,
                                subtask: j,
                                error: format!("{uid}[{j}]: {e}"),
                            });
                        }
                    });
                }
            }
            count += 1;
        }
        commands.push(step_cmds);
    }
    Ok(Subtasks {
        commands,
        events: ev_rx,
        tasks,
        count,
    })
}
