//! A real Apache Kafka broker for tests: the jars `e2e/scripts/install.sh` fetched from Maven
//! Central (`STREAMJOB_E2E_KAFKA_LIB`), run as one KRaft node (broker and controller) on
//! loopback ports (the plain listener also on the real node's address inside its namespace),
//! with its data and log in the run folder. Besides the plain listener it has a SASL_PLAINTEXT
//! listener with a PLAIN user and a SCRAM-SHA-256 user, and a SASL_SSL listener that also
//! requires a client certificate (mutual TLS, PEM files from [`BrokerTls`]), for the security
//! tests.
//!
//! Helpers create topics, add partitions and produce records with rdkafka, the client the
//! runtime uses.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use crate::binaries::{cache_dir, env_file};
use crate::certs::BrokerTls;
use crate::error::{Error, IoContext, Result};
use crate::process::{ManagedProcess, Watchdog, free_port, free_ports, run_checked};

/// The PLAIN user of the SASL listener.
pub const PLAIN_USER: (&str, &str) = ("alice", "alice-secret");
/// The SCRAM-SHA-256 user of the SASL listener.
pub const SCRAM_USER: (&str, &str) = ("bob", "bob-secret");

/// A running broker (one KRaft node, or several: [`Kafka::start_cluster`]); stopped when
/// dropped.
#[derive(Debug)]
pub struct Kafka {
    /// The KRaft nodes, by node id - 1.
    pub(crate) nodes: Vec<Node>,
    /// `127.0.0.1:<port>` of the PLAINTEXT listener.
    pub bootstrap: String,
    /// `127.0.0.1:<port>` of the SASL_PLAINTEXT listener.
    pub sasl_bootstrap: String,
    /// `127.0.0.1:<port>` of the SASL_SSL listener (client certificate required).
    pub tls_bootstrap: String,
    /// The CA, server and client certificates of the SASL_SSL listener.
    pub tls: BrokerTls,
    /// How long start-up took (format + start until metadata answers).
    pub start_duration: Duration,
    /// The jars: what a restart reuses.
    pub(crate) lib: PathBuf,
}

/// One KRaft node (broker and controller) and its folder (server.properties, data, log).
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) id: i32,
    /// `None` while the node is down ([`Kafka::kill_node`]).
    pub(crate) process: Option<ManagedProcess>,
    pub(crate) dir: PathBuf,
}

/// The folder with the broker's jars.
pub fn kafka_lib() -> Result<PathBuf> {
    let from_env = std::env::var("STREAMJOB_E2E_KAFKA_LIB").ok();
    let from_file = || {
        std::fs::read_to_string(env_file()).ok().and_then(|t| {
            t.lines().find_map(|l| {
                l.trim()
                    .strip_prefix("export STREAMJOB_E2E_KAFKA_LIB=")
                    .map(|v| v.trim_matches(|c| c == '\'' || c == '"').to_string())
            })
        })
    };
    let lib = from_env
        .or_else(from_file)
        .map(PathBuf::from)
        .ok_or_else(|| Error::MissingBinary {
            name: "kafka".into(),
            detail: format!(
                "neither $STREAMJOB_E2E_KAFKA_LIB nor {} names the broker's jars (cache {})",
                env_file().display(),
                cache_dir().display()
            ),
        })?;
    if lib.join(".complete").is_file() {
        Ok(lib)
    } else {
        Err(Error::MissingBinary {
            name: "kafka".into(),
            detail: format!("{} holds no complete jar set", lib.display()),
        })
    }
}

/// The broker of `dir` (formatted, its server.properties written), as a managed process.
pub(crate) fn spawn_broker(
    lib: &Path,
    dir: &Path,
    watchdog: Option<&Watchdog>,
) -> Result<ManagedProcess> {
    let mut cmd = java(lib, dir);
    cmd.arg("kafka.Kafka").arg(dir.join("server.properties"));
    Ok(ManagedProcess::spawn("kafka", cmd, dir, watchdog)?.with_grace(Duration::from_secs(10)))
}

pub(crate) fn java(lib: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(std::env::var("STREAMJOB_JAVA").unwrap_or_else(|_| "java".into()));
    cmd.arg("-Xms128m")
        .arg("-Xmx512m")
        .arg("-XX:+UseSerialGC")
        .arg("-XX:TieredStopAtLevel=1")
        .arg("-Djava.net.preferIPv4Stack=true")
        .arg(format!(
            "-Dlog4j2.configurationFile={}",
            dir.join("log4j2.properties").display()
        ))
        .arg("-cp")
        .arg(format!("{}/*", lib.display()));
    cmd
}

pub(crate) const LOG4J2: &str = "status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
";

impl Kafka {
    /// Formats a data folder in `dir` and starts the broker; returns once it answers metadata
    /// requests on both listeners.
    pub fn start(dir: &Path, watchdog: Option<&Watchdog>) -> Result<Self> {
        Self::start_on(dir, watchdog, None)
    }

    /// [`Kafka::start`] with the plain listener on `port` (a free port when `None`).
    pub fn start_on(dir: &Path, watchdog: Option<&Watchdog>, port: Option<u16>) -> Result<Self> {
        let t0 = Instant::now();
        let lib = kafka_lib()?;
        std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
        let port = match port {
            Some(p) => p,
            None => free_port()?,
        };
        let (sasl_port, tls_port, controller) = match free_ports(3, &[port])?[..] {
            [a, b, c] => (a, b, c),
            _ => return Err(Error::Other("free_ports: not 3 ports".into())),
        };
        let data = dir.join("kafka-data");
        let tls = BrokerTls::generate(&dir.join("tls"))?;
        let props = format!(
            "process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://{listen}:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},SASL_SSL://127.0.0.1:{tls_port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://{host}:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},SASL_SSL://127.0.0.1:{tls_port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
log.dirs={data}
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_{pu}=\"{pp}\";
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_{pu}=\"{pp}\";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location={keystore}
listener.name.sasl_ssl.ssl.truststore.type=PEM
listener.name.sasl_ssl.ssl.truststore.location={truststore}
listener.name.sasl_ssl.ssl.client.auth=required
",
            keystore = tls.server_keystore.display(),
            truststore = tls.ca.cert.display(),
            data = data.display(),
            listen = crate::cluster::listen_address(),
            host = crate::cluster::host_address(),
            pu = PLAIN_USER.0,
            pp = PLAIN_USER.1,
        );
        let props_path = dir.join("server.properties");
        std::fs::write(&props_path, props).ctx(|| format!("write {}", props_path.display()))?;
        std::fs::write(dir.join("log4j2.properties"), LOG4J2)
            .ctx(|| format!("write log4j2.properties in {}", dir.display()))?;
        let id = cluster_id(rand::random::<u128>());
        run_checked(
            java(&lib, dir)
                .arg("kafka.tools.StorageTool")
                .arg("format")
                .arg("-t")
                .arg(&id)
                .arg("-c")
                .arg(&props_path)
                .arg("--add-scram")
                .arg(format!(
                    "SCRAM-SHA-256=[name={},password={}]",
                    SCRAM_USER.0, SCRAM_USER.1
                )),
        )?;
        let process = spawn_broker(&lib, dir, watchdog)?;
        let kafka = Self {
            nodes: vec![Node {
                id: 1,
                process: Some(process),
                dir: dir.to_path_buf(),
            }],
            // the plain listener: on the real node's address too, for its pods
            bootstrap: format!("{}:{port}", crate::cluster::host_address()),
            sasl_bootstrap: format!("127.0.0.1:{sasl_port}"),
            tls_bootstrap: format!("127.0.0.1:{tls_port}"),
            tls,
            start_duration: Duration::ZERO,
            lib,
        };
        kafka.wait_ready()?;
        let start_duration = t0.elapsed();
        tracing::info!(?start_duration, bootstrap = %kafka.bootstrap, "kafka ready");
        Ok(Self {
            start_duration,
            ..kafka
        })
    }

    /// SIGKILLs the broker (a crash: no controlled shutdown) and starts it again on the same
    /// ports and data; returns once it answers metadata requests again, with how long it was
    /// gone.
    pub fn crash_and_restart(&mut self, watchdog: Option<&Watchdog>) -> Result<Duration> {
        let t0 = Instant::now();
        self.kill_node(1)?;
        self.start_node(1, watchdog)?;
        Ok(t0.elapsed())
    }

    /// SIGKILLs node `id` (a crash: no controlled shutdown); it stays down until
    /// [`Kafka::start_node`].
    pub fn kill_node(&mut self, id: i32) -> Result<()> {
        let node = self.node(id)?;
        if let Some(mut process) = node.process.take() {
            process.set_grace(Duration::ZERO);
            process.stop();
        }
        Ok(())
    }

    /// Starts node `id` again on its ports and data; returns once the cluster's metadata lists
    /// every running node.
    pub fn start_node(&mut self, id: i32, watchdog: Option<&Watchdog>) -> Result<()> {
        let lib = self.lib.clone();
        let node = self.node(id)?;
        if node.process.is_none() {
            node.process = Some(spawn_broker(&lib, &node.dir, watchdog)?);
        }
        self.wait_ready()
    }

    fn node(&mut self, id: i32) -> Result<&mut Node> {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .ok_or_else(|| Error::Other(format!("kafka: no node {id}")))
    }

    /// Waits until the metadata on the plain listener lists every running node.
    pub(crate) fn wait_ready(&self) -> Result<()> {
        let kafka = self;
        let running = self.nodes.iter().filter(|n| n.process.is_some()).count();
        let log = self
            .nodes
            .iter()
            .find_map(|n| n.process.as_ref())
            .map(|p| p.log().display().to_string())
            .unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            for process in self.nodes.iter().filter_map(|n| n.process.as_ref()) {
                process.check_running()?;
            }
            let consumer: BaseConsumer = kafka
                .client_config()
                .create()
                .map_err(|e| Error::Other(format!("kafka client: {e}")))?;
            match consumer.fetch_metadata(None, Duration::from_secs(2)) {
                Ok(md) if md.brokers().len() >= running => break,
                Ok(_) | Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Ok(_) => return Err(Error::Other("kafka: no broker in metadata".into())),
                Err(e) => {
                    return Err(Error::Timeout {
                        what: "the Kafka broker's metadata".into(),
                        timeout: Duration::from_secs(120),
                        last: format!(": {e}; log {log}"),
                    });
                }
            }
        }
        Ok(())
    }

    /// Client settings for the plain listener.
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        c.set("group.id", "streamjob-e2e-probe");
        c
    }

    fn group_consumer(&self, group: &str) -> Result<BaseConsumer> {
        let mut c = self.client_config();
        c.set("group.id", group).set("enable.auto.commit", "false");
        c.create()
            .map_err(|e| Error::Other(format!("kafka consumer: {e}")))
    }

    /// Commits `offsets` (partition, next offset) of `topic` for consumer group `group`, as an
    /// application that consumed the topic before would have.
    pub fn commit_offsets(&self, group: &str, topic: &str, offsets: &[(i32, i64)]) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        for (p, o) in offsets {
            tpl.add_partition_offset(topic, *p, Offset::Offset(*o))
                .map_err(|e| Error::Other(format!("kafka: {e}")))?;
        }
        self.group_consumer(group)?
            .commit(&tpl, CommitMode::Sync)
            .map_err(|e| Error::Other(format!("kafka commit for group {group}: {e}")))
    }

    /// The offsets group `group` committed for partitions `0..partitions` of `topic` (`None`
    /// where it committed none).
    pub fn committed_offsets(
        &self,
        group: &str,
        topic: &str,
        partitions: i32,
    ) -> Result<Vec<Option<i64>>> {
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        let got = self
            .group_consumer(group)?
            .committed_offsets(tpl, Duration::from_secs(10))
            .map_err(|e| Error::Other(format!("kafka committed offsets of {group}: {e}")))?;
        Ok((0..partitions)
            .map(|p| match got.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Some(o),
                _ => None,
            })
            .collect())
    }

    fn admin(&self) -> Result<AdminClient<DefaultClientContext>> {
        self.client_config()
            .create()
            .map_err(|e| Error::Other(format!("kafka admin client: {e}")))
    }

    /// A client on the plain listener and `topic`'s metadata as the cluster answers it now.
    pub(crate) fn topic_metadata(
        &self,
        topic: &str,
        timeout: Duration,
    ) -> Result<(BaseConsumer, rdkafka::metadata::Metadata)> {
        let consumer: BaseConsumer = self
            .client_config()
            .create()
            .map_err(|e| Error::Other(format!("kafka client: {e}")))?;
        let md = consumer
            .fetch_metadata(Some(topic), timeout)
            .map_err(|e| Error::Other(format!("metadata of {topic}: {e}")))?;
        Ok((consumer, md))
    }

    /// The end offset of each of `topic`'s partitions, by partition id: what a test can tell a
    /// reader that waits for records.
    pub fn end_offsets(&self, topic: &str) -> Result<Vec<(i32, i64)>> {
        let (consumer, md) = self.topic_metadata(topic, Duration::from_secs(10))?;
        let mut ends = Vec::new();
        for t in md.topics() {
            for p in t.partitions() {
                let (_, high) = consumer
                    .fetch_watermarks(topic, p.id(), Duration::from_secs(10))
                    .map_err(|e| Error::Other(format!("end offset of {topic}/{}: {e}", p.id())))?;
                ends.push((p.id(), high));
            }
        }
        ends.sort_unstable();
        Ok(ends)
    }

    /// Creates `topic` with `partitions` partitions and waits until its metadata shows them.
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<()> {
        let admin = self.admin()?;
        // every node holds a replica (up to three)
        let replicas = i32::try_from(self.nodes.len().min(3)).unwrap_or(1);
        let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(replicas));
        let results = futures::executor::block_on(admin.create_topics(
            [&new],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        ))
        .map_err(|e| Error::Other(format!("create topic {topic}: {e}")))?;
        for r in results {
            r.map_err(|(t, e)| Error::Other(format!("create topic {t}: {e}")))?;
        }
        self.wait_partitions(topic, partitions)
    }

    /// Grows `topic` to `total` partitions.
    pub fn add_partitions(&self, topic: &str, total: usize) -> Result<()> {
        let admin = self.admin()?;
        let new = NewPartitions::new(topic, total);
        let results =
            futures::executor::block_on(admin.create_partitions([&new], &AdminOptions::new()))
                .map_err(|e| Error::Other(format!("add partitions to {topic}: {e}")))?;
        for r in results {
            r.map_err(|(t, e)| Error::Other(format!("add partitions to {t}: {e}")))?;
        }
        self.wait_partitions(topic, i32::try_from(total).unwrap_or(i32::MAX))
    }

    fn wait_partitions(&self, topic: &str, partitions: i32) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, md) = self.topic_metadata(topic, Duration::from_secs(5))?;
            let ready = md.topics().iter().any(|t| {
                t.name() == topic
                    && t.error().is_none()
                    && t.partitions().len() == partitions as usize
                    && t.partitions().iter().all(|p| p.leader() >= 0)
            });
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("{partitions} partitions of {topic} with leaders"),
                    timeout: Duration::from_secs(30),
                    last: String::new(),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A producer that waits for every write (acks=all, idempotent).
    pub fn producer(&self) -> Result<ThreadedProducer<DefaultProducerContext>> {
        self.client_config()
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .create()
            .map_err(|e| Error::Other(format!("kafka producer: {e}")))
    }

    /// Writes `records` (partition, key, value) to `topic` and waits until every one is
    /// acknowledged; a record the broker did not take fails the call, naming its partition.
    pub fn produce(&self, topic: &str, records: &[(i32, String, Vec<u8>)]) -> Result<()> {
        let records = records.iter().map(|(p, k, v)| (*p, k.clone(), v.clone()));
        produce_to(&self.bootstrap, topic, records, None).map(|_| ())
    }

    /// The process id of node 1 (0 while it is down).
    pub fn pid(&self) -> u32 {
        self.nodes
            .first()
            .and_then(|n| n.process.as_ref())
            .map_or(0, ManagedProcess::pid)
    }
}

/// URL-safe base64 (no padding) of 16 bytes: Kafka's cluster id format. The top bit is cleared so
/// the id never starts with `-` (one random id in 64 did, and `kafka-storage format -t -…` then
/// reads it as an option: "argument --cluster-id/-t: expected one argument"); Kafka's own
/// `Uuid.randomUuid()` refuses such ids for the same reason.
pub(crate) fn cluster_id(v: u128) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = (v & (u128::MAX >> 1)).to_be_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// Writes `records` (partition, key, value) to `topic` on the broker at `bootstrap`, idempotent
/// with `acks=all` (a retry across a broker restart writes nothing twice), at most `per_second`
/// records a second when given (pacing a feed, not synchronisation), and waits until every one is
/// acknowledged. Returns how many were written; a record the broker did not take fails the call,
/// naming its partition.
pub fn produce_to(
    bootstrap: &str,
    topic: &str,
    records: impl Iterator<Item = (i32, String, Vec<u8>)>,
    per_second: Option<u64>,
) -> Result<usize> {
    let producer: ThreadedProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create_with_context(Deliveries::default())
        .map_err(|e| Error::Other(format!("kafka producer: {e}")))?;
    let t0 = Instant::now();
    let mut sent = 0usize;
    for (partition, key, value) in records {
        let mut record = BaseRecord::to(topic)
            .partition(partition)
            .key(&key)
            .payload(&value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((e, r))
                    if e.rdkafka_error_code()
                        == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) =>
                {
                    record = r;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => return Err(Error::Other(format!("produce to {topic}: {e}"))),
            }
        }
        sent += 1;
        if let Some(rate) = per_second.filter(|r| *r > 0) {
            let due = Duration::from_millis(sent as u64 * 1000 / rate);
            if let Some(wait) = due.checked_sub(t0.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .map_err(|e| Error::Other(format!("flush to {topic}: {e}")))?;
    if producer.in_flight_count() > 0 {
        return Err(Error::Other(format!(
            "{} records to {topic} not acknowledged",
            producer.in_flight_count()
        )));
    }
    let ctx = producer.context();
    let failed = ctx.failed.lock().map(|f| f.clone()).unwrap_or_default();
    if let Some((partition, e)) = failed.first() {
        return Err(Error::Other(format!(
            "{} of {sent} records to {topic} were not written; the first, to partition {partition}: {e}",
            failed.len(),
        )));
    }
    let delivered = ctx.delivered.load(std::sync::atomic::Ordering::SeqCst);
    if delivered != sent {
        return Err(Error::Other(format!(
            "{delivered} of {sent} records to {topic} acknowledged"
        )));
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ids_are_22_url_safe_characters() {
        assert_eq!(cluster_id(0), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(cluster_id(u128::MAX), "f____________________w");
        assert_eq!(cluster_id(rand::random()).len(), 22);
        // The CI failure: an id starting with `-` is an option to kafka-storage's parser.
        assert_eq!(cluster_id(62 << 122), "eAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(cluster_id(63 << 122), "fAAAAAAAAAAAAAAAAAAAAA");
    }
}

/// A producer context that counts acknowledged records and keeps the errors of the others: the
/// default context drops delivery errors, and a test that produced less than it thinks waits
/// for records that never come.
#[derive(Default)]
struct Deliveries {
    delivered: std::sync::atomic::AtomicUsize,
    failed: std::sync::Mutex<Vec<(i32, String)>>,
}

impl rdkafka::ClientContext for Deliveries {}

impl rdkafka::producer::ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        use rdkafka::Message;
        match result {
            Ok(_) => {
                self.delivered
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            Err((e, m)) => {
                if let Ok(mut f) = self.failed.lock() {
                    f.push((m.partition(), e.to_string()));
                }
            }
        }
    }
}
