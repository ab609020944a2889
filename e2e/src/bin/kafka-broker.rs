//! Runs the project's pinned Kafka broker (KRaft, loopback) until Ctrl-C, for trying Kafka jobs
//! locally: `cargo run -p streamjob-e2e --bin kafka-broker -- --port 9092 --topic clicks --demo 100000`.
//! Needs the jars from `bash e2e/scripts/install.sh`. Data lives in a temporary folder.

use anyhow::Context;
use clap::Parser;
use std::io::Read;
use streamjob_e2e::kafka::Kafka;
use streamjob_e2e::process::Watchdog;

#[derive(Debug, Parser)]
#[command(about = "Run a single-node Kafka broker on 127.0.0.1 until Ctrl-C")]
struct Args {
    /// Port of the PLAINTEXT listener.
    #[arg(long, default_value_t = 9092)]
    port: u16,
    /// Create this topic.
    #[arg(long)]
    topic: Option<String>,
    /// Partitions of the created topic.
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    /// Write this many demo click records `{user, amount, ts}` to the topic.
    #[arg(long, default_value_t = 0)]
    demo: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    streamjob_e2e::fixtures::init_process_tracing("info");
    let args = Args::parse();
    let dir = tempfile::tempdir().context("temporary folder")?;
    // the watchdog stops the broker's JVM even if this process is killed
    let watchdog = Watchdog::start(dir.path())?;
    let kafka = Kafka::start_on(dir.path(), Some(&watchdog), Some(args.port))?;
    if let Some(topic) = &args.topic {
        kafka.create_topic(topic, args.partitions)?;
        let start = chrono::Utc::now().timestamp_millis();
        let records: Vec<(i32, String, Vec<u8>)> = (0..args.demo)
            .map(|i| {
                let user = format!("user-{}", i % 50);
                let ts = chrono::DateTime::from_timestamp_millis(start + (i as i64) * 10)
                    .unwrap_or_default()
                    .to_rfc3339();
                let value = format!(r#"{{"user":"{user}","amount":{},"ts":"{ts}"}}"#, i % 100);
                (
                    (i % args.partitions.max(1) as u64) as i32,
                    user,
                    value.into_bytes(),
                )
            })
            .collect();
        kafka.produce(topic, &records)?;
        eprintln!(
            "topic {topic}: {} partitions, {} records",
            args.partitions, args.demo
        );
    }
    // a reader that stops reading (closes the pipe) must not end the broker
    {
        use std::io::Write;
        let mut out = std::io::stdout();
        let _ = writeln!(
            out,
            "sasl bootstrap (SASL_PLAINTEXT, PLAIN alice/alice-secret, SCRAM-SHA-256 bob/bob-secret): {}",
            kafka.sasl_bootstrap
        );
        let _ = writeln!(out, "bootstrap: {}", kafka.bootstrap);
        let _ = out.flush();
    }
    // until Ctrl-C, or until standard input closes (a parent process that went away)
    // (a plain thread: it must not keep the process alive after Ctrl-C)
    let (closed, stdin_closed) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        let _ = closed.send(());
    });
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
        _ = stdin_closed => {}
    }
    drop(kafka);
    drop(watchdog);
    Ok(())
}
