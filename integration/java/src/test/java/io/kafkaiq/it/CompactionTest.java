package io.kafkaiq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Log compaction as the Java client sees it: the Java producer's batches in every codec are
 * compacted to the last value of each key at the offset it was written at, tombstones go after
 * {@code delete.retention.ms}; a consumer that seeks into a removed range, or whose group
 * committed an offset there, continues at the next record kept; and {@code __consumer_offsets}
 * is compacted, so 20,000 offset commits leave a bounded log and the group's last commit.
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class CompactionTest {
    static final int RECORDS = 100_000;
    static final int KEYS = 10;
    static final Duration COMPACT_DEADLINE = Duration.ofSeconds(90);

    static BrokerUnderTest broker;

    @BeforeAll
    static void start() throws Exception {
        // A short cleaner back-off, and offsets topic segments that roll within the test.
        broker = BrokerUnderTest.start(1, List.of("log.cleaner.backoff.ms=200",
                "offsets.topic.segment.bytes=1048576"));
    }

    @AfterAll
    static void stop() throws Exception {
        if (broker != null) {
            broker.close();
        }
    }

    static Map<String, String> compactConfigs() {
        return Map.of("cleanup.policy", "compact", "segment.bytes", "1048576",
                "min.cleanable.dirty.ratio", "0.01", "delete.retention.ms", "1000", "segment.ms", "1000");
    }

    static void createTopic(String topic, int partitions, Map<String, String> configs) throws Exception {
        try (Admin admin = broker.admin()) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1).configs(configs)))
                    .all().get(30, TimeUnit.SECONDS);
        }
    }

    static KafkaProducer<String, String> producer(String codec) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<String, String> consumer(String group) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        return new KafkaConsumer<>(p);
    }

    /** Every record of partition 0 of {@code topic}, from its start to its end offset now. */
    static List<ConsumerRecord<String, String>> readAll(String topic) {
        TopicPartition tp = new TopicPartition(topic, 0);
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(null)) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long end = c.endOffsets(List.of(tp)).get(tp);
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (c.position(tp) < end) {
                assertTrue(System.nanoTime() < deadline, "reading " + tp + " to " + end);
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    out.add(r);
                }
            }
        }
        return out;
    }

    /**
     * Writes a tick each second until the records of {@code topic} other than ticks are exactly
     * {@code expected} (key → "offset value"); returns the last read.
     */
    static List<ConsumerRecord<String, String>> awaitCompacted(String topic, Map<String, String> expected,
            KafkaProducer<String, String> producer) throws Exception {
        long deadline = System.nanoTime() + COMPACT_DEADLINE.toNanos();
        int tick = 0;
        while (true) {
            List<ConsumerRecord<String, String>> read = readAll(topic);
            Map<String, String> got = new TreeMap<>();
            int others = 0;
            for (ConsumerRecord<String, String> r : read) {
                if (!"tick".equals(r.key())) {
                    others++;
                    got.put(r.key(), r.offset() + " " + r.value());
                }
            }
            if (others == expected.size() && got.equals(expected)) {
                System.err.printf("%s compacted to %d records after %d ticks%n", topic, others, tick);
                return read;
            }
            assertTrue(System.nanoTime() < deadline, topic + " not compacted: " + others
                    + " records besides ticks, last values " + got + ", expected " + expected);
            producer.send(new ProducerRecord<>(topic, 0, "tick", "t" + ++tick)).get(30, TimeUnit.SECONDS);
            Thread.sleep(1000);
        }
    }

    @Test
    void everyCodecIsCompactedToTheLastValuePerKeyAndTombstonesGo() throws Exception {
        for (String codec : List.of("none", "gzip", "snappy", "lz4", "zstd")) {
            String topic = "java-compact-" + codec;
            createTopic(topic, 1, compactConfigs());
            Map<String, String> expected = new TreeMap<>();
            try (KafkaProducer<String, String> producer = producer(codec)) {
                for (int i = 0; i < RECORDS; i++) {
                    String key = "k" + (i % KEYS);
                    String value = "v-" + i + "-" + codec;
                    producer.send(new ProducerRecord<>(topic, 0, key, value));
                    expected.put(key, i + " " + value);
                }
                producer.send(new ProducerRecord<>(topic, 0, "k" + (KEYS - 1), null)).get(30, TimeUnit.SECONDS);
                expected.remove("k" + (KEYS - 1));
                awaitCompacted(topic, expected, producer);
            }
        }
    }

    @Test
    void aSeekOrACommittedOffsetInARemovedRangeContinuesAtTheNextRecordKept() throws Exception {
        String topic = "java-compact-gap";
        TopicPartition tp = new TopicPartition(topic, 0);
        createTopic(topic, 1, compactConfigs());
        Map<String, String> expected = new TreeMap<>();
        List<ConsumerRecord<String, String>> read;
        try (KafkaProducer<String, String> producer = producer("lz4")) {
            for (int i = 0; i < 20_000; i++) {
                producer.send(new ProducerRecord<>(topic, 0, "k" + (i % KEYS), "v-" + i));
                expected.put("k" + (i % KEYS), i + " v-" + i);
            }
            producer.flush();
            read = awaitCompacted(topic, expected, producer);
        }
        long firstKept = read.stream().mapToLong(ConsumerRecord::offset).filter(o -> o >= 500).min().getAsLong();
        assertTrue(firstKept > 500, "offset 500 should have been removed");
        try (KafkaConsumer<String, String> c = consumer(null)) {
            c.assign(List.of(tp));
            c.seek(tp, 500);
            assertEquals(firstKept, firstPolled(c).offset(), "a seek into a removed range");
        }
        String group = "gap-group";
        try (KafkaConsumer<String, String> c = consumer(group)) {
            c.commitSync(Map.of(tp, new OffsetAndMetadata(500)));
        }
        try (KafkaConsumer<String, String> c = consumer(group)) {
            c.subscribe(List.of(topic));
            assertEquals(firstKept, firstPolled(c).offset(), "a committed offset in a removed range");
        }
    }

    static ConsumerRecord<String, String> firstPolled(KafkaConsumer<String, String> c) {
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (true) {
            assertTrue(System.nanoTime() < deadline, "no record polled");
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                return r;
            }
        }
    }

    @Test
    void offsetCommitsAreCompactedAndTheLastCommitStays() throws Exception {
        String topic = "commit-heavy";
        int partitions = 10;
        int rounds = 2_000;
        createTopic(topic, partitions, Map.of());
        String group = "commit-heavy-group";
        String metadata = "m".repeat(100);
        Map<TopicPartition, OffsetAndMetadata> last = new HashMap<>();
        try (KafkaConsumer<String, String> c = consumer(group)) {
            for (int round = 1; round <= rounds; round++) {
                Map<TopicPartition, OffsetAndMetadata> commit = new HashMap<>();
                for (int p = 0; p < partitions; p++) {
                    commit.put(new TopicPartition(topic, p), new OffsetAndMetadata(round, metadata));
                }
                c.commitSync(commit);
                last = commit;
            }
        }
        // 20,000 commits of ~170 bytes each were written; compacted, what is left is at most
        // the active 1 MiB segment and one record per partition.
        long bound = 1_300_000;
        long deadline = System.nanoTime() + COMPACT_DEADLINE.toNanos();
        long size;
        int nudges = 0;
        try (Admin admin = broker.admin()) {
            while (true) {
                size = offsetsTopicBytes(admin);
                if (size < bound) {
                    break;
                }
                assertTrue(System.nanoTime() < deadline,
                        "__consumer_offsets holds " + size + " bytes after " + (rounds * partitions) + " commits");
                Thread.sleep(500);
                nudges++;
            }
        }
        System.err.printf("__consumer_offsets: %d bytes after %d commits (%d checks)%n", size,
                rounds * partitions, nudges);
        try (KafkaConsumer<String, String> c = consumer(group)) {
            Map<TopicPartition, OffsetAndMetadata> committed = c.committed(last.keySet());
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : last.entrySet()) {
                assertNotNull(committed.get(e.getKey()), "no committed offset for " + e.getKey());
                assertEquals(e.getValue().offset(), committed.get(e.getKey()).offset());
                assertEquals(metadata, committed.get(e.getKey()).metadata());
            }
        }
    }

    static long offsetsTopicBytes(Admin admin) throws Exception {
        long total = 0;
        Map<Integer, Map<String, LogDirDescription>> dirs = admin
                .describeLogDirs(admin.describeCluster().nodes().get(30, TimeUnit.SECONDS).stream()
                        .map(n -> n.id()).toList())
                .allDescriptions().get(30, TimeUnit.SECONDS);
        for (Map<String, LogDirDescription> byDir : dirs.values()) {
            for (LogDirDescription d : byDir.values()) {
                for (Map.Entry<TopicPartition, ReplicaInfo> r : d.replicaInfos().entrySet()) {
                    if (r.getKey().topic().equals("__consumer_offsets")) {
                        total += r.getValue().size();
                    }
                }
            }
        }
        return total;
    }
}
