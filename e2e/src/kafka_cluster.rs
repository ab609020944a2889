//! A Kafka cluster of several KRaft nodes (each broker and controller) on loopback, for the
//! faults a single broker cannot show: a partition's leader moving to another broker while a
//! job reads it, when its broker crashes and again when it is back (the controller hands each
//! partition back to its preferred replica within seconds here). Plain listeners only; the
//! helpers of [`Kafka`] (topics, producing, offsets) work on it unchanged, with topics
//! replicated to every node (up to three).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::certs::BrokerTls;
use crate::error::{Error, IoContext, Result};
use crate::kafka::{Kafka, LOG4J2, Node, cluster_id, java, kafka_lib, spawn_broker};
use crate::process::{Watchdog, free_ports, run_checked};

impl Kafka {
    /// Formats `nodes` KRaft nodes (one cluster id, every node a voter) in `dir/node-<id>` and
    /// starts them; returns once the metadata lists them all. With three nodes, topics and the
    /// internal topics have three replicas and need two in sync, so one node may be down.
    pub fn start_cluster(dir: &Path, nodes: usize, watchdog: Option<&Watchdog>) -> Result<Self> {
        let t0 = Instant::now();
        let lib = kafka_lib()?;
        // every node's client and controller ports, all different
        let picked = free_ports(2 * nodes, &[])?;
        let ports: Vec<(u16, u16)> = picked.chunks(2).map(|p| (p[0], p[1])).collect();
        let voters: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, controller))| format!("{}@127.0.0.1:{controller}", i + 1))
            .collect();
        let voters = voters.join(",");
        let replicas = nodes.min(3);
        let min_isr = replicas.saturating_sub(1).max(1);
        let id = cluster_id(rand::random::<u128>());
        let mut started = Vec::new();
        for (i, (port, controller)) in ports.iter().enumerate() {
            let node_id = i32::try_from(i + 1).unwrap_or(i32::MAX);
            let node_dir = dir.join(format!("node-{node_id}"));
            std::fs::create_dir_all(&node_dir).ctx(|| format!("create {}", node_dir.display()))?;
            let props = format!(
                "process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={voters}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={data}
num.partitions=1
default.replication.factor={replicas}
min.insync.replicas={min_isr}
auto.create.topics.enable=false
offsets.topic.replication.factor={replicas}
offsets.topic.num.partitions=4
transaction.state.log.replication.factor={replicas}
transaction.state.log.min.isr={min_isr}
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor={replicas}
share.coordinator.state.topic.min.isr={min_isr}
group.initial.rebalance.delay.ms=0
auto.leader.rebalance.enable=true
leader.imbalance.check.interval.seconds=3
leader.imbalance.per.broker.percentage=0
",
                data = node_dir.join("kafka-data").display(),
            );
            let props_path = node_dir.join("server.properties");
            std::fs::write(&props_path, props).ctx(|| format!("write {}", props_path.display()))?;
            std::fs::write(node_dir.join("log4j2.properties"), LOG4J2)
                .ctx(|| format!("write log4j2.properties in {}", node_dir.display()))?;
            run_checked(
                java(&lib, &node_dir)
                    .arg("kafka.tools.StorageTool")
                    .arg("format")
                    .arg("-t")
                    .arg(&id)
                    .arg("-c")
                    .arg(&props_path),
            )?;
            started.push((node_id, node_dir));
        }
        // every node at once: the quorum elects a controller only with a majority up
        let mut list = Vec::new();
        for (node_id, node_dir) in started {
            list.push(Node {
                id: node_id,
                process: Some(spawn_broker(&lib, &node_dir, watchdog)?),
                dir: node_dir,
            });
        }
        let bootstrap: Vec<String> = ports
            .iter()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        let kafka = Self {
            nodes: list,
            bootstrap: bootstrap.join(","),
            sasl_bootstrap: String::new(),
            tls_bootstrap: String::new(),
            // no TLS listener here; the field stays for the single broker's tests
            tls: BrokerTls::generate(&dir.join("tls"))?,
            start_duration: Duration::ZERO,
            lib,
        };
        kafka.wait_ready()?;
        let start_duration = t0.elapsed();
        tracing::info!(?start_duration, nodes, bootstrap = %kafka.bootstrap, "kafka cluster ready");
        Ok(Self {
            start_duration,
            ..kafka
        })
    }

    /// The node leading `partition` of `topic` (`None`: no leader now).
    pub fn leader_of(&self, topic: &str, partition: i32) -> Result<Option<i32>> {
        let (_, md) = self.topic_metadata(topic, Duration::from_secs(10))?;
        Ok(md
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .and_then(|t| t.partitions().iter().find(|p| p.id() == partition))
            .map(|p| p.leader())
            .filter(|l| *l >= 0))
    }

    /// Waits until `partition` of `topic` has a leader that `wanted` accepts; returns it.
    pub fn wait_leader(
        &self,
        topic: &str,
        partition: i32,
        what: &str,
        wanted: impl Fn(i32) -> bool,
    ) -> Result<i32> {
        let timeout = Duration::from_secs(60);
        let deadline = Instant::now() + timeout;
        loop {
            let leader = self.leader_of(topic, partition)?;
            match leader {
                Some(l) if wanted(l) => return Ok(l),
                _ if Instant::now() > deadline => {
                    return Err(Error::Timeout {
                        what: format!("{what} leading {topic}/{partition}"),
                        timeout,
                        last: format!(": the leader is {leader:?}"),
                    });
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}
