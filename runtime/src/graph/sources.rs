//! Planning a source step: one function per [`SourceKind`], each giving the records' schema, the
//! state the source checkpoints and how a subtask is built.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use streamjob_crds::v1alpha1::{
    FilesSource as FilesSpec, GeneratorSource as GeneratorSpec, KafkaSource as KafkaSpec,
    NexmarkEventKind, NexmarkSource as NexmarkSpec, SourceSpec, StreamJob,
};
use streamjob_crds::validation::SourceKind;

use super::{BuildSource, millis, opt_millis};
use crate::error::{Error, Result};
use crate::operator::{DynSource, StateDescriptor};
use crate::operators::files::{FilesSource, FilesSourcePlan};
use crate::operators::generator::{
    DEFAULT_START_MS, GeneratorConfig, GeneratorSource, generator_schema, generator_state,
};
use crate::operators::kafka::{KafkaSource, KafkaSourcePlan};
use crate::operators::nexmark::{NexmarkSettings, NexmarkSource, nexmark_schema, nexmark_state};

/// A planned source.
pub(super) struct SourcePlan {
    pub schema: SchemaRef,
    pub state: StateDescriptor,
    pub build: BuildSource,
}

/// Plans the source `src` of step `uid` of `job` (named `name`).
pub(super) async fn plan_source(
    job: &StreamJob,
    name: &str,
    uid: &str,
    src: &SourceSpec,
) -> Result<SourcePlan> {
    let out_of_orderness = opt_millis(
        "watermark.maxOutOfOrderness",
        src.watermark
            .as_ref()
            .and_then(|w| w.max_out_of_orderness.as_ref()),
    )?;
    let kind = src
        .kind()
        .map_err(|why| Error::plan(uid, format!("source: {why}")))?;
    match kind {
        SourceKind::Generator(g) => generator(uid, g, out_of_orderness),
        SourceKind::Nexmark(n) => Ok(nexmark(n, out_of_orderness)),
        SourceKind::Files(f) => files(job, uid, f, out_of_orderness).await,
        SourceKind::Kafka(k) => kafka(job, name, uid, src, k, out_of_orderness),
    }
}

fn generator(uid: &str, g: &GeneratorSpec, out_of_orderness_ms: i64) -> Result<SourcePlan> {
    let start_ms = match &g.start_time {
        Some(t) => chrono::DateTime::parse_from_rfc3339(t)
            .map_err(|e| Error::plan(uid, format!("generator.startTime {t:?}: {e}")))?
            .timestamp_millis(),
        None => DEFAULT_START_MS,
    };
    let cfg = GeneratorConfig {
        count: g.count,
        rate_per_second: g.rate_per_second,
        keys: g.keys,
        seed: g.seed,
        start_ms,
        interval_ms: g
            .event_interval
            .as_ref()
            .map(|v| millis("generator.eventInterval", v))
            .transpose()?
            .unwrap_or(1),
        out_of_orderness_ms,
    };
    Ok(SourcePlan {
        schema: generator_schema(),
        state: generator_state(),
        build: Arc::new(move |_ctx| {
            Ok(Box::new(GeneratorSource::new(cfg.clone())) as Box<dyn DynSource>)
        }),
    })
}

fn nexmark(n: &NexmarkSpec, out_of_orderness_ms: i64) -> SourcePlan {
    let settings = NexmarkSettings {
        events: n.events,
        rate_per_second: n.rate_per_second,
        kinds: n.event_kinds.as_ref().map(|k| {
            k.iter()
                .map(|k| match k {
                    NexmarkEventKind::Person => nexmark::event::EventType::Person,
                    NexmarkEventKind::Auction => nexmark::event::EventType::Auction,
                    NexmarkEventKind::Bid => nexmark::event::EventType::Bid,
                })
                .collect()
        }),
        out_of_orderness_ms,
    };
    SourcePlan {
        schema: nexmark_schema(),
        state: nexmark_state(),
        build: Arc::new(move |_ctx| {
            Ok(Box::new(NexmarkSource::new(settings.clone())) as Box<dyn DynSource>)
        }),
    }
}

async fn files(
    job: &StreamJob,
    uid: &str,
    f: &FilesSpec,
    out_of_orderness_ms: i64,
) -> Result<SourcePlan> {
    let plan = FilesSourcePlan::new(uid, f, job.spec.storage.as_ref(), out_of_orderness_ms).await?;
    Ok(SourcePlan {
        schema: plan.schema.clone(),
        state: plan.state(),
        build: Arc::new(move |_ctx| {
            Ok(Box::new(FilesSource::new(plan.clone())) as Box<dyn DynSource>)
        }),
    })
}

fn kafka(
    job: &StreamJob,
    name: &str,
    uid: &str,
    src: &SourceSpec,
    k: &KafkaSpec,
    out_of_orderness_ms: i64,
) -> Result<SourcePlan> {
    let idle = src
        .watermark
        .as_ref()
        .and_then(|w| w.idle_timeout.as_ref())
        .map(|v| millis("watermark.idleTimeout", v))
        .transpose()?;
    // the default group, streamjob-<namespace>-<name>: jobs of one name in two namespaces do not
    // share committed offsets
    let group_base = match &job.metadata.namespace {
        Some(ns) => format!("{ns}-{name}"),
        None => name.to_string(),
    };
    let plan = KafkaSourcePlan::new(uid, &group_base, k, out_of_orderness_ms, idle)?;
    Ok(SourcePlan {
        schema: plan.schema(),
        state: plan.state(),
        build: Arc::new(move |_ctx| {
            Ok(Box::new(KafkaSource::new(plan.clone())) as Box<dyn DynSource>)
        }),
    })
}
