//! `kafka` source: topics read exactly once. Every subtask reads the partitions it owns
//! ([`assign::owner`]) with its own consumer (manual assignment, no group rebalancing); the next
//! offset of every partition is operator list state, restored as union state so a rescale deals
//! the partitions again. Output after the restored checkpoint is re-read, never skipped: the
//! file sink discards what that checkpoint did not commit, so each record lands exactly once.
//!
//! The group is only told the checkpointed offsets after a checkpoint completes, for lag tools.

mod assign;
mod config;
mod context;
mod decode;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::Int64Array;
use arrow::datatypes::SchemaRef;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use streamjob_crds::units::parse_duration;
use streamjob_crds::v1alpha1::{KafkaSource as KafkaSpec, KafkaStartingOffsets};

use crate::error::{Error, Result};
use crate::operator::{
    Collector, DataBatch, OperatorContext, RestoredState, SourceOperator, SourcePoll,
    StateDescriptor, SubtaskSnapshot, decode_state, encode_state,
};
use crate::operators::files::{event_time_millis, schema_of};

pub use assign::{PartitionState, PartitionWatermarks, TopicPartition, owner};
pub use config::ConsumerSettings;
use context::{SourceContext, is_fatal};
pub use decode::{RawRecord, ValueDecoder, ValueFormat};

/// Most records per emitted batch.
const BATCH_RECORDS: usize = 8192;
/// How long a metadata, watermark or offset request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait between discovery attempts while the brokers cannot be reached.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How often the consumer lag gauges are refreshed.
const LAG_EVERY: Duration = Duration::from_secs(1);

/// Which topics to read.
#[derive(Clone, Debug)]
pub enum Topics {
    Names(Vec<String>),
    Pattern(regex::Regex),
}

/// The planned source (shared by its subtasks).
#[derive(Clone, Debug)]
pub struct KafkaSourcePlan {
    pub uid: String,
    pub settings: ConsumerSettings,
    pub topics: Topics,
    pub starting: KafkaStartingOffsets,
    pub starting_timestamp_ms: Option<i64>,
    pub bounded: bool,
    pub commit_offsets: bool,
    pub discovery: Duration,
    pub decoder: ValueDecoder,
    pub event_time_column: Option<usize>,
    pub out_of_orderness_ms: i64,
    pub idle_ms: Option<i64>,
}

impl KafkaSourcePlan {
    /// Plans the source of step `uid` of job `job` (`<namespace>-<name>`, or the name of a job
    /// without a namespace): the default group id is `streamjob-<job>`.
    pub fn new(
        uid: &str,
        job: &str,
        spec: &KafkaSpec,
        out_of_orderness_ms: i64,
        idle_ms: Option<i64>,
    ) -> Result<Self> {
        let topics = match (&spec.topic, &spec.topics, &spec.topic_pattern) {
            (Some(t), None, None) => Topics::Names(vec![t.clone()]),
            (None, Some(t), None) => Topics::Names(t.clone()),
            (None, None, Some(p)) => {
                Topics::Pattern(regex::Regex::new(&format!("^(?:{p})$")).map_err(|e| {
                    Error::plan(
                        uid,
                        format!("kafka.topicPattern {p:?} is not a regular expression: {e}"),
                    )
                })?)
            }
            _ => {
                return Err(Error::plan(
                    uid,
                    "kafka: set exactly one of topic, topics or topicPattern",
                ));
            }
        };
        let format = if let Some(c) = &spec.format.csv {
            ValueFormat::Csv {
                delimiter: c.delimiter.bytes().next().unwrap_or(b','),
            }
        } else if spec.format.json_lines.is_some() {
            ValueFormat::Json
        } else {
            return Err(Error::plan(uid, "kafka.format: set jsonLines or csv"));
        };
        let fields = spec
            .schema
            .as_deref()
            .filter(|f| !f.is_empty())
            .ok_or_else(|| Error::plan(uid, "kafka.schema: list the columns of the values"))?;
        let value_schema = schema_of(fields);
        let decoder = ValueDecoder::new(format, value_schema.clone(), &spec.metadata_columns)
            .map_err(|e| Error::plan(uid, e.to_string()))?;
        let event_time_column = spec
            .event_time_field
            .as_ref()
            .map(|f| {
                value_schema.index_of(f).map_err(|_| {
                    Error::plan(
                        uid,
                        format!("kafka.eventTimeField {f:?} is not a column of kafka.schema"),
                    )
                })
            })
            .transpose()?;
        let starting_timestamp_ms = spec
            .starting_timestamp
            .as_ref()
            .map(|t| {
                chrono::DateTime::parse_from_rfc3339(t)
                    .map(|t| t.timestamp_millis())
                    .map_err(|e| Error::plan(uid, format!("kafka.startingTimestamp {t:?}: {e}")))
            })
            .transpose()?;
        let group_id = spec
            .group_id
            .clone()
            .unwrap_or_else(|| format!("streamjob-{job}"));
        let settings = ConsumerSettings::new(uid, spec, &group_id, &|k| std::env::var(k).ok())?;
        Ok(Self {
            uid: uid.to_string(),
            settings,
            topics,
            starting: spec.starting_offsets.unwrap_or_default(),
            starting_timestamp_ms,
            bounded: spec.stopping_offsets.is_some(),
            commit_offsets: spec.commit_offsets_on_checkpoint,
            discovery: spec
                .partition_discovery_interval
                .as_ref()
                .map(|d| parse_duration("kafka.partitionDiscoveryInterval", d))
                .transpose()?
                .unwrap_or(Duration::from_secs(30))
                .max(Duration::from_millis(100)),
            decoder,
            event_time_column,
            out_of_orderness_ms,
            idle_ms,
        })
    }

    /// Output schema.
    pub fn schema(&self) -> SchemaRef {
        self.decoder.schema()
    }

    /// State schema: list state of partition positions.
    pub fn state(&self) -> StateDescriptor {
        StateDescriptor::stateless().field("partitions", "KafkaPartitionOffsets")
    }
}

/// A Kafka source subtask.
pub struct KafkaSource {
    plan: Arc<KafkaSourcePlan>,
    consumer: Option<Arc<BaseConsumer<SourceContext>>>,
    partitions: BTreeMap<TopicPartition, PartitionState>,
    /// Whether the job had state when this subtask started (new partitions then start earliest).
    restored: bool,
    /// Whether the first discovery succeeded (after it, new partitions start earliest).
    discovered: bool,
    next_discovery: Instant,
    backoff: Duration,
    watermarks: PartitionWatermarks,
    /// Offsets per checkpoint id, committed to the group when that checkpoint completes.
    to_commit: BTreeMap<u64, Vec<PartitionState>>,
    last_lag: Option<Instant>,
    topic_names: BTreeMap<String, Arc<str>>,
}

impl KafkaSource {
    /// A subtask.
    pub fn new(plan: KafkaSourcePlan) -> Self {
        let watermarks = PartitionWatermarks::new(plan.out_of_orderness_ms, plan.idle_ms);
        Self {
            plan: Arc::new(plan),
            consumer: None,
            partitions: BTreeMap::new(),
            restored: false,
            discovered: false,
            next_discovery: Instant::now(),
            backoff: Duration::from_millis(500),
            watermarks,
            to_commit: BTreeMap::new(),
            last_lag: None,
            topic_names: BTreeMap::new(),
        }
    }

    fn consumer(&self) -> Result<Arc<BaseConsumer<SourceContext>>> {
        self.consumer
            .clone()
            .ok_or_else(|| Error::Other("kafka source used before initialize_state".into()))
    }

    fn problem(ctx: &OperatorContext, message: Option<String>) {
        if let Ok(mut p) = ctx.metrics.problem.lock() {
            if let Some(m) = &message
                && p.as_ref() != Some(m)
            {
                tracing::warn!(uid = %ctx.uid, subtask = ctx.subtask, "{m}");
            }
            *p = message;
        }
    }

    /// Looks for (new) partitions this subtask owns, resolves where each starts and assigns them.
    async fn discover(&mut self, ctx: &OperatorContext) -> Result<()> {
        let consumer = self.consumer()?;
        let plan = self.plan.clone();
        let known: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
        let initial = !self.discovered && !self.restored;
        let (subtask, parallelism) = (ctx.subtask, ctx.parallelism);
        let found = tokio::task::spawn_blocking(move || {
            discover_blocking(&consumer, &plan, &known, initial, subtask, parallelism)
        })
        .await
        .map_err(|e| Error::Other(format!("kafka discovery task: {e}")))?;
        match found {
            Ok((new, missing)) => {
                self.discovered = true;
                self.backoff = Duration::from_millis(500);
                self.next_discovery = Instant::now() + self.plan.discovery;
                self.assign(ctx, new)?;
                Self::problem(
                    ctx,
                    (!missing.is_empty()).then(|| {
                        format!(
                            "kafka: topic(s) {} do not exist (yet) on {}; waiting for them",
                            missing.join(", "),
                            self.plan.settings.public()["bootstrap.servers"]
                        )
                    }),
                );
                Ok(())
            }
            Err(e) if is_fatal(&e) => Err(Error::Other(format!(
                "step {:?}: kafka: {e} (check kafka.security and the credentials' Secret)",
                ctx.uid
            ))),
            Err(e) if self.consumer()?.context().fatal().is_some() => Err(Error::Other(format!(
                "step {:?}: kafka: {} ({e}; check kafka.security and the credentials' Secret)",
                ctx.uid,
                self.consumer()?.context().fatal().unwrap_or_default()
            ))),
            Err(e) => {
                self.next_discovery = Instant::now() + self.backoff;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                Self::problem(
                    ctx,
                    Some(format!(
                        "kafka: cannot read metadata from {}: {e}; retrying in {:?}",
                        self.plan.settings.public()["bootstrap.servers"],
                        self.backoff
                    )),
                );
                Ok(())
            }
        }
    }

    fn assign(&mut self, ctx: &OperatorContext, new: Vec<PartitionState>) -> Result<()> {
        let now = chrono::Utc::now().timestamp_millis();
        let mut tpl = TopicPartitionList::new();
        for s in new {
            let tp = (s.topic.clone(), s.partition);
            if s.finished() {
                self.watermarks.finished(&tp);
            } else {
                self.watermarks.assigned(&tp, s.max_event_time, now);
                let offset = s.next_offset.map_or(Offset::Beginning, Offset::Offset);
                tpl.add_partition_offset(&s.topic, s.partition, offset)
                    .map_err(|e| Error::Other(format!("kafka: {e}")))?;
            }
            tracing::info!(uid = %ctx.uid, subtask = ctx.subtask, topic = %s.topic,
                partition = s.partition, next_offset = ?s.next_offset, stop_offset = ?s.stop_offset,
                "kafka partition assigned");
            self.topic_names
                .entry(s.topic.clone())
                .or_insert_with(|| Arc::from(s.topic.as_str()));
            self.partitions.insert(tp, s);
        }
        if tpl.count() > 0 {
            self.consumer()?
                .incremental_assign(&tpl)
                .map_err(|e| Error::Other(format!("kafka: assign: {e}")))?;
        }
        Ok(())
    }

    /// Records of a partition up to event time `max` were read at `now`.
    fn observe(&mut self, (topic, partition, max): (Arc<str>, i32, i64), now: i64) {
        let tp = (topic.to_string(), partition);
        self.watermarks.observe(&tp, max, now);
        if let Some(s) = self.partitions.get_mut(&tp) {
            s.max_event_time = Some(s.max_event_time.map_or(max, |m| m.max(max)));
        }
    }

    fn all_finished(&self) -> bool {
        self.plan.bounded
            && self.discovered
            && self.partitions.values().all(PartitionState::finished)
    }

    /// A bounded partition reached its stop offset: stop fetching it.
    fn finish(&mut self, tp: &TopicPartition) -> Result<()> {
        if let Some(s) = self.partitions.get_mut(tp) {
            if let Some(stop) = s.stop_offset {
                s.next_offset = Some(s.next_offset.unwrap_or(0).max(stop));
            }
            self.watermarks.finished(tp);
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&tp.0, tp.1);
            self.consumer()?
                .incremental_unassign(&tpl)
                .map_err(|e| Error::Other(format!("kafka: unassign: {e}")))?;
        }
        Ok(())
    }

    fn update_lag(&mut self, ctx: &OperatorContext) {
        if self.last_lag.is_some_and(|t| t.elapsed() < LAG_EVERY) {
            return;
        }
        self.last_lag = Some(Instant::now());
        let Some(consumer) = &self.consumer else {
            return;
        };
        let Ok(mut lag) = ctx.metrics.lag.lock() else {
            return;
        };
        for ((topic, partition), s) in &self.partitions {
            // from the client's statistics: no request
            if let Some(end) = consumer.context().end_offset(topic, *partition) {
                let next = s.next_offset.unwrap_or(0);
                let end = s.stop_offset.map_or(end, |stop| stop.min(end));
                lag.insert(format!("{topic}/{partition}"), (end - next).max(0));
            }
        }
    }
}

/// Resolves the partitions this subtask owns and does not read yet. Returns their states and the
/// named topics that do not exist.
fn discover_blocking(
    consumer: &BaseConsumer<SourceContext>,
    plan: &KafkaSourcePlan,
    known: &[TopicPartition],
    initial: bool,
    subtask: usize,
    parallelism: usize,
) -> std::result::Result<(Vec<PartitionState>, Vec<String>), KafkaError> {
    let mut owned: Vec<TopicPartition> = Vec::new();
    let mut missing = Vec::new();
    let mut scan = |topic: Option<&str>| -> std::result::Result<(), KafkaError> {
        let md = consumer.fetch_metadata(topic, REQUEST_TIMEOUT)?;
        for t in md.topics() {
            let wanted = match &plan.topics {
                Topics::Names(names) => names.iter().any(|n| n == t.name()),
                Topics::Pattern(re) => !t.name().starts_with("__") && re.is_match(t.name()),
            };
            if !wanted {
                continue;
            }
            if t.error().is_some() || t.partitions().is_empty() {
                missing.push(t.name().to_string());
                continue;
            }
            for p in t.partitions() {
                let tp = (t.name().to_string(), p.id());
                if owner(&tp.0, tp.1, parallelism) == subtask && !known.contains(&tp) {
                    owned.push(tp);
                }
            }
        }
        Ok(())
    };
    match &plan.topics {
        Topics::Names(names) => {
            for n in names {
                scan(Some(n))?;
            }
        }
        Topics::Pattern(_) => scan(None)?,
    }
    let mut states = Vec::with_capacity(owned.len());
    for (topic, partition) in owned {
        let next_offset = if initial {
            start_offset(consumer, plan, &topic, partition)?
        } else {
            None
        };
        let stop_offset = if plan.bounded {
            Some(
                consumer
                    .fetch_watermarks(&topic, partition, REQUEST_TIMEOUT)?
                    .1,
            )
        } else {
            None
        };
        states.push(PartitionState {
            topic,
            partition,
            next_offset,
            stop_offset,
            max_event_time: None,
        });
    }
    Ok((states, missing))
}

/// Where a partition starts on a job's first run.
fn start_offset(
    consumer: &BaseConsumer<SourceContext>,
    plan: &KafkaSourcePlan,
    topic: &str,
    partition: i32,
) -> std::result::Result<Option<i64>, KafkaError> {
    let resolved = |tpl: TopicPartitionList| {
        tpl.find_partition(topic, partition)
            .and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            })
    };
    Ok(match plan.starting {
        KafkaStartingOffsets::Earliest => None,
        KafkaStartingOffsets::Latest => Some(
            consumer
                .fetch_watermarks(topic, partition, REQUEST_TIMEOUT)?
                .1,
        ),
        KafkaStartingOffsets::Committed => {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(topic, partition);
            resolved(consumer.committed_offsets(tpl, REQUEST_TIMEOUT)?)
        }
        KafkaStartingOffsets::Timestamp => {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(
                topic,
                partition,
                Offset::Offset(plan.starting_timestamp_ms.unwrap_or(0)),
            )?;
            match resolved(consumer.offsets_for_times(tpl, REQUEST_TIMEOUT)?) {
                Some(o) => Some(o),
                // no record at or after the timestamp: start after the last one
                None => Some(
                    consumer
                        .fetch_watermarks(topic, partition, REQUEST_TIMEOUT)?
                        .1,
                ),
            }
        }
    })
}

impl SourceOperator for KafkaSource {
    async fn initialize_state(
        &mut self,
        ctx: &OperatorContext,
        restored: RestoredState,
    ) -> Result<()> {
        let consumer: BaseConsumer<SourceContext> = self
            .plan
            .settings
            .client_config()
            .create_with_context(SourceContext::default())
            .map_err(|e| Error::plan(&ctx.uid, format!("kafka consumer: {e}")))?;
        self.consumer = Some(Arc::new(consumer));
        self.restored = restored.checkpoint_id.is_some();
        let union = restored
            .union
            .iter()
            .map(|b| decode_state::<PartitionState>(&ctx.uid, b))
            .collect::<Result<Vec<_>>>()?;
        let mut share: Vec<PartitionState> =
            assign::restored_share(union, ctx.subtask, ctx.parallelism)
                .into_values()
                .collect();
        // The stop offsets follow this run's plan: a bounded run stops restored partitions at
        // their end now (unless an earlier bounded run fixed it), an unbounded run never stops.
        for s in &mut share {
            if !self.plan.bounded {
                s.stop_offset = None;
            }
        }
        if self.plan.bounded && share.iter().any(|s| s.stop_offset.is_none()) {
            let consumer = self.consumer()?;
            share = tokio::task::spawn_blocking(move || {
                for s in &mut share {
                    if s.stop_offset.is_none() {
                        s.stop_offset = Some(
                            consumer
                                .fetch_watermarks(&s.topic, s.partition, REQUEST_TIMEOUT)?
                                .1,
                        );
                    }
                }
                Ok::<_, KafkaError>(share)
            })
            .await
            .map_err(|e| Error::Other(format!("kafka: {e}")))?
            .map_err(|e| {
                Error::Other(format!(
                    "step {:?}: kafka: cannot read the end offsets of the restored partitions: {e}",
                    ctx.uid
                ))
            })?;
        }
        self.assign(ctx, share)?;
        self.discover(ctx).await
    }

    async fn poll_next(
        &mut self,
        ctx: &OperatorContext,
        out: &mut Collector,
    ) -> Result<SourcePoll> {
        // bounded reads discover once; unbounded ones keep looking for new partitions
        let wanted = !self.plan.bounded || !self.discovered;
        if wanted && Instant::now() >= self.next_discovery {
            self.discover(ctx).await?;
        }
        if self.all_finished() {
            return Ok(SourcePoll::Finished);
        }
        let consumer = self.consumer()?;
        if let Some(fatal) = consumer.context().fatal() {
            return Err(Error::Other(format!(
                "step {:?}: kafka: {fatal} (check kafka.security and the credentials' Secret)",
                ctx.uid
            )));
        }
        let mut records: Vec<RawRecord> = Vec::new();
        let mut finished: Vec<TopicPartition> = Vec::new();
        while records.len() < BATCH_RECORDS {
            let Some(polled) = consumer.poll(Duration::ZERO) else {
                break;
            };
            let m = match polled {
                Ok(m) => m,
                Err(e) if is_fatal(&e) => {
                    return Err(Error::Other(format!(
                        "step {:?}: kafka: {e} (check kafka.security and the credentials' Secret)",
                        ctx.uid
                    )));
                }
                Err(KafkaError::PartitionEOF(p)) => {
                    // Bounded reads of transactional topics: the stop offset can be a commit
                    // marker no record reaches; the end of the log says the partition is done.
                    // Only partition ids no other unfinished topic shares are unambiguous.
                    let candidates: Vec<TopicPartition> = self
                        .partitions
                        .iter()
                        .filter(|(tp, s)| tp.1 == p && !s.finished())
                        .map(|(tp, _)| tp.clone())
                        .collect();
                    if let [tp] = candidates.as_slice() {
                        finished.push(tp.clone());
                    }
                    continue;
                }
                Err(e) => {
                    Self::problem(ctx, Some(format!("kafka: {e}")));
                    continue;
                }
            };
            let tp = (m.topic().to_string(), m.partition());
            let Some(state) = self.partitions.get_mut(&tp) else {
                continue; // not (or no longer) ours
            };
            if let Some(stop) = state.stop_offset
                && m.offset() >= stop
            {
                finished.push(tp);
                continue;
            }
            state.next_offset = Some(m.offset() + 1);
            if state.finished() {
                finished.push(tp.clone());
            }
            let topic = self
                .topic_names
                .get(&tp.0)
                .cloned()
                .unwrap_or_else(|| Arc::from(tp.0.as_str()));
            records.push(RawRecord {
                topic,
                partition: m.partition(),
                offset: m.offset(),
                timestamp: m.timestamp().to_millis(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
                headers: m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                            .collect()
                    })
                    .unwrap_or_default(),
            });
        }
        for tp in finished {
            self.finish(&tp)?;
        }
        self.update_lag(ctx);
        if records.is_empty() {
            if self.all_finished() {
                return Ok(SourcePoll::Finished);
            }
            return Ok(SourcePoll::Idle(Duration::from_millis(20)));
        }
        Self::problem(ctx, None);
        let (batch, kept) = self.plan.decoder.decode(&records, out)?;
        let now = chrono::Utc::now().timestamp_millis();
        let event_time = match self.plan.event_time_column {
            Some(i) => event_time_millis(batch.column(i))?,
            None => Int64Array::from_iter_values(kept.iter().map(|r| r.timestamp.unwrap_or(now))),
        };
        // records come in runs per partition: one watermark update per run, not per record
        let mut run: Option<(Arc<str>, i32, i64)> = None;
        for (r, ts) in kept.iter().zip(event_time.iter()) {
            let ts = ts.unwrap_or(now);
            match &mut run {
                Some((t, p, max)) if Arc::ptr_eq(t, &r.topic) && *p == r.partition => {
                    *max = (*max).max(ts);
                }
                _ => {
                    if let Some(done) = run.replace((r.topic.clone(), r.partition, ts)) {
                        self.observe(done, now);
                    }
                }
            }
        }
        if let Some(done) = run {
            self.observe(done, now);
        }
        let wm = self.watermarks.current(now);
        Ok(SourcePoll::Batch(DataBatch::new(batch, event_time)?, wm))
    }

    fn is_idle(&self, now_ms: i64) -> bool {
        self.watermarks.is_idle(now_ms)
    }

    fn watermark(&self, now_ms: i64) -> Option<i64> {
        self.watermarks.current(now_ms)
    }

    async fn snapshot_state(
        &mut self,
        _ctx: &OperatorContext,
        checkpoint_id: u64,
    ) -> Result<SubtaskSnapshot> {
        let mut snap = SubtaskSnapshot::default();
        for s in self.partitions.values() {
            snap.operator.push(encode_state(s)?);
        }
        if self.plan.commit_offsets {
            self.to_commit
                .insert(checkpoint_id, self.partitions.values().cloned().collect());
        }
        Ok(snap)
    }

    async fn notify_checkpoint_complete(
        &mut self,
        ctx: &OperatorContext,
        checkpoint_id: u64,
    ) -> Result<()> {
        let Some(&id) = self
            .to_commit
            .range(..=checkpoint_id)
            .next_back()
            .map(|(k, _)| k)
        else {
            return Ok(());
        };
        let offsets = self.to_commit.remove(&id).unwrap_or_default();
        self.to_commit = self.to_commit.split_off(&(checkpoint_id + 1));
        let mut tpl = TopicPartitionList::new();
        for s in offsets.iter().filter(|s| s.next_offset.is_some()) {
            tpl.add_partition_offset(
                &s.topic,
                s.partition,
                Offset::Offset(s.next_offset.unwrap_or(0)),
            )
            .map_err(|e| Error::Other(format!("kafka: {e}")))?;
        }
        if tpl.count() > 0
            && let Err(e) = self.consumer()?.commit(&tpl, CommitMode::Async)
        {
            // monitoring only: the offsets that matter are in the checkpoint
            tracing::warn!(uid = %ctx.uid, "kafka: committing offsets to the group failed: {e}");
        }
        Ok(())
    }
}
