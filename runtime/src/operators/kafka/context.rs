//! The client context of a source's consumer: librdkafka's log lines go to `tracing`, and client
//! errors that waiting cannot heal (bad credentials, TLS failures, no permission) are kept so the
//! source fails loudly instead of retrying forever.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::statistics::Statistics;

/// Whether a client error cannot heal by waiting.
pub fn is_fatal(e: &KafkaError) -> bool {
    matches!(e, KafkaError::MessageConsumptionFatal(_))
        || matches!(
            e.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::SaslAuthenticationFailed
                    | RDKafkaErrorCode::Authentication
                    | RDKafkaErrorCode::TopicAuthorizationFailed
                    | RDKafkaErrorCode::GroupAuthorizationFailed
                    | RDKafkaErrorCode::ClusterAuthorizationFailed
                    | RDKafkaErrorCode::SSL
                    | RDKafkaErrorCode::Fatal
            )
        )
}

/// Context of one source subtask's consumer.
#[derive(Clone, Default)]
pub struct SourceContext {
    fatal: Arc<Mutex<Option<String>>>,
    /// (topic, partition) → the end a consumer can read to: the last stable offset under
    /// read_committed, else the high watermark; from the client's statistics (every second).
    ends: Arc<Mutex<BTreeMap<(String, i32), i64>>>,
}

impl SourceContext {
    /// The first fatal client error seen, if any.
    pub fn fatal(&self) -> Option<String> {
        self.fatal.lock().ok().and_then(|f| f.clone())
    }

    /// The readable end of a partition, as of the latest statistics.
    pub fn end_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        self.ends
            .lock()
            .ok()
            .and_then(|e| e.get(&(topic.to_string(), partition)).copied())
    }
}

impl ClientContext for SourceContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(target: "librdkafka", fac, "{message}"),
            RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", fac, "{message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", fac, "{message}");
            }
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", fac, "{message}"),
        }
    }

    fn stats(&self, statistics: Statistics) {
        let Ok(mut ends) = self.ends.lock() else {
            return;
        };
        for (topic, t) in statistics.topics {
            for (id, p) in t.partitions {
                // -1 is librdkafka's internal unassigned partition; negative offsets are unknown
                let end = if p.ls_offset >= 0 {
                    p.ls_offset
                } else {
                    p.hi_offset
                };
                if id >= 0 && end >= 0 {
                    ends.insert((topic.clone(), id), end);
                }
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // the end of a partition is news for bounded reads (seen in poll), not an error
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF)
            || matches!(error, KafkaError::PartitionEOF(_))
        {
            return;
        }
        if is_fatal(&error) {
            if let Ok(mut f) = self.fatal.lock()
                && f.is_none()
            {
                *f = Some(format!("{error}: {reason}"));
            }
        } else {
            tracing::warn!(target: "librdkafka", "{error}: {reason}");
        }
    }
}

impl ConsumerContext for SourceContext {}
