//! Per-log configuration with Kafka's topic-config names and defaults, and the small value types
//! shared by the whole crate. Parsing `server.properties` is the broker's job, not this crate's.

use std::fmt;

/// A partition of a topic; its log lives in the directory `<topic>-<partition>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// The log directory name, `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// Parses a log directory name; the partition is what follows the last '-'. Kafka's
    /// directories being deleted or moved (`*-delete`, `*-future`, `*-stray`) are not logs.
    pub fn parse_dir_name(name: &str) -> Option<TopicPartition> {
        if name.ends_with("-delete") || name.ends_with("-future") || name.ends_with("-stray") {
            return None;
        }
        let (topic, partition) = name.rsplit_once('-')?;
        let partition: i32 = partition.parse().ok()?;
        if topic.is_empty() || partition < 0 {
            return None;
        }
        Some(TopicPartition::new(topic, partition))
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// `message.timestamp.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// A log's configuration. Field docs give the Kafka topic-config name and Kafka's default.
#[derive(Clone, Debug, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`, 1073741824
    pub segment_bytes: u32,
    /// `segment.ms`, 604800000
    pub segment_ms: i64,
    /// `segment.index.bytes`, 10485760
    pub segment_index_bytes: u32,
    /// `index.interval.bytes`, 4096
    pub index_interval_bytes: u32,
    /// `retention.ms`, 604800000 (-1 = forever)
    pub retention_ms: i64,
    /// `retention.bytes`, -1 (unbounded)
    pub retention_bytes: i64,
    /// `max.message.bytes`, 1048588
    pub max_message_bytes: u32,
    /// `flush.messages`, i64::MAX (never by count)
    pub flush_messages: i64,
    /// `flush.ms`, i64::MAX (never by time)
    pub flush_ms: i64,
    /// `message.timestamp.type`, CreateTime
    pub message_timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms`, i64::MAX: how old a CreateTime timestamp a producer
    /// may write (checked by the produce path).
    pub message_timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`, 3600000 (1 h): how far ahead of the broker's clock.
    pub message_timestamp_after_max_ms: i64,
    /// `producer.id.expiration.ms` (a broker key), 86400000: producers idle this long (by the
    /// timestamp of their last batch) are forgotten.
    pub producer_id_expiration_ms: i64,
    /// Whether `cleanup.policy` (`delete`) includes `compact`: Kafka's `LogConfig.compact`. A
    /// compacted log refuses records without a key.
    pub compact: bool,
    /// `min.cleanable.dirty.ratio`, 0.5: the share of a compacted log's cleanable bytes that
    /// must be dirty before the cleaner picks it.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`, 0: records younger than this stay uncleaned.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`, i64::MAX: a dirty record older than this makes its log
    /// cleanable whatever its dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// `delete.retention.ms`, 86400000: how long a tombstone stays readable after the cleaning
    /// that first reached it.
    pub delete_retention_ms: i64,
}

impl Default for LogConfig {
    fn default() -> LogConfig {
        LogConfig {
            segment_bytes: 1_073_741_824,
            segment_ms: 604_800_000,
            segment_index_bytes: 10_485_760,
            index_interval_bytes: 4096,
            retention_ms: 604_800_000,
            retention_bytes: -1,
            max_message_bytes: 1_048_588,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            message_timestamp_type: TimestampType::CreateTime,
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: 3_600_000,
            producer_id_expiration_ms: crate::producer_state::PRODUCER_ID_EXPIRATION_MS_DEFAULT,
            compact: false,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            delete_retention_ms: 86_400_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_names_round_trip() {
        let tp = TopicPartition::new("my-topic", 12);
        assert_eq!(tp.dir_name(), "my-topic-12");
        assert_eq!(TopicPartition::parse_dir_name("my-topic-12"), Some(tp));
        assert_eq!(TopicPartition::parse_dir_name("topic"), None);
        assert_eq!(TopicPartition::parse_dir_name("-3"), None);
        assert_eq!(TopicPartition::parse_dir_name("t-0.abc-delete"), None);
    }
}
