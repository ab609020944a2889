//! `streamjob-runtime bench-kafka --bootstrap HOST:PORT --topic T`: throughput of the Kafka source
//! next to a plain rdkafka consumer reading the same topic in the same run (the baseline: what
//! the client library alone delivers on this machine), and the cost of checkpoints with Kafka
//! input. Every run reads the whole topic from its beginning to the end it had at start.
//!
//! The job is `kafka → discard` (JSON values decoded into Arrow with the given schema), so the
//! figures measure the source: fetching, decoding, offset tracking, barriers.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use streamjob_crds::v1alpha1::StreamJob;

use crate::bench::discarding_registry;
use crate::coordinator::{RestoreFrom, RunOptions, Shared, run_job};
use crate::error::{Error, Result};
use crate::graph::build_graph;

/// Records and value bytes of the whole topic read by one plain consumer, and the time it took.
fn plain_consumer(bootstrap: &str, topic: &str) -> Result<(u64, u64, Duration)> {
    let kafka = |e: rdkafka::error::KafkaError| Error::Other(format!("kafka: {e}"));
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "streamjob-bench-plain")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .map_err(kafka)?;
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(kafka)?;
    let mut ends = std::collections::BTreeMap::new();
    let mut tpl = TopicPartitionList::new();
    for t in md.topics() {
        for p in t.partitions() {
            let (_, high) = consumer
                .fetch_watermarks(topic, p.id(), Duration::from_secs(10))
                .map_err(kafka)?;
            ends.insert(p.id(), high);
            tpl.add_partition_offset(topic, p.id(), Offset::Beginning)
                .map_err(kafka)?;
        }
    }
    consumer.assign(&tpl).map_err(kafka)?;
    let start = Instant::now();
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut left: std::collections::BTreeSet<i32> = ends
        .iter()
        .filter(|(_, h)| **h > 0)
        .map(|(p, _)| *p)
        .collect();
    while !left.is_empty() {
        if start.elapsed() > Duration::from_secs(600) {
            return Err(Error::Other(
                "plain consumer: topic not read in 10 min".into(),
            ));
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                records += 1;
                bytes += m.payload().map_or(0, |p| p.len() as u64);
                if m.offset() + 1 >= ends.get(&m.partition()).copied().unwrap_or(0) {
                    left.remove(&m.partition());
                }
            }
            Some(Err(e)) => return Err(kafka(e)),
            None => {}
        }
    }
    Ok((records, bytes, start.elapsed()))
}

/// Records read by the job and the time from start to its end.
async fn job(
    bootstrap: &str,
    topic: &str,
    schema: &str,
    parallelism: u32,
    interval: &str,
) -> Result<(u64, u64, Duration)> {
    let dir = std::env::temp_dir().join(format!(
        "streamjob-bench-kafka-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_micros()
    ));
    let text = format!(
        "apiVersion: streamjob.io/v1alpha1\nkind: StreamJob\nmetadata: {{name: bench-kafka}}\nspec:\n  image: bench\n  parallelism: {parallelism}\n  checkpoints: {{dir: {d}, interval: {interval}}}\n  pipeline:\n    - uid: in\n      source:\n        kafka:\n          bootstrapServers: \"{bootstrap}\"\n          topic: {topic}\n          stoppingOffsets: latest\n          commitOffsetsOnCheckpoint: false\n          format: {{jsonLines: {{}}}}\n          schema: {schema}\n    - uid: sink\n      fileSink: {{path: {d}/out, format: {{jsonLines: {{}}}}}}\n",
        d = dir.display()
    );
    let job = StreamJob::from_yaml(&text)?;
    let graph = build_graph(&job, &discarding_registry()).await?;
    let (shared, rx) = Shared::new("bench-kafka");
    let start = Instant::now();
    // the source rides out a broker that went away; a benchmark must not wait for it forever
    tokio::time::timeout(
        Duration::from_secs(600),
        run_job(
            graph,
            RunOptions {
                restore: RestoreFrom::Empty,
                max_restarts: 0,
                standby: false,
                workers: None,
                epoch: None,
                resume_own: false,
            },
            shared.clone(),
            rx,
        ),
    )
    .await
    .map_err(|_| Error::Other("the job did not read the topic within 10 min".into()))??;
    let elapsed = start.elapsed();
    let _ = std::fs::remove_dir_all(&dir);
    Ok((
        shared.metrics.totals().0,
        shared.metrics.checkpoints_completed.load(Ordering::Relaxed),
        elapsed,
    ))
}

/// Runs the benchmark and prints a table.
pub async fn run(
    bootstrap: &str,
    topic: &str,
    schema: &str,
    parallelism: u32,
    interval: &str,
) -> Result<()> {
    let (b, t) = (bootstrap.to_string(), topic.to_string());
    let (records, bytes, plain) = tokio::task::spawn_blocking(move || plain_consumer(&b, &t))
        .await
        .map_err(|e| Error::Other(format!("plain consumer: {e}")))??;
    if records == 0 {
        return Err(Error::Other(format!("topic {topic} is empty")));
    }
    let rate = |n: u64, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    let mb = |d: Duration| bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9);
    println!(
        "kafka topic {topic}: {records} records, {:.1} MB of values; each run reads it all",
        bytes as f64 / 1e6
    );
    println!(
        "{:<44} {:>12} {:>9} {:>8} {:>12}",
        "reader", "records/s", "MB/s", "ratio", "checkpoints"
    );
    let plain_rate = rate(records, plain);
    println!(
        "{:<44} {:>12.0} {:>9.1} {:>7.2}x {:>12}",
        "plain rdkafka consumer (no decoding)",
        plain_rate,
        mb(plain),
        1.0,
        "-"
    );
    for (label, ivl) in [("checkpoints off", "1h"), ("checkpoints on", interval)] {
        let (n, ckpts, d) = job(bootstrap, topic, schema, parallelism, ivl).await?;
        if n != records {
            return Err(Error::Other(format!(
                "the job read {n} records, the topic has {records}"
            )));
        }
        println!(
            "{:<44} {:>12.0} {:>9.1} {:>7.2}x {:>12}",
            format!("kafka source, p={parallelism}, JSON→Arrow, {label} ({ivl})"),
            rate(n, d),
            mb(d),
            rate(n, d) / plain_rate,
            ckpts
        );
    }
    Ok(())
}
