package io.kafkaiq.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.clients.consumer.LogTruncationException;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;

/**
 * The default KafkaProducer (acks=all, idempotence on) writes records with keys, headers and null
 * values; a KafkaConsumer using assign/seek/poll reads every one of them back unchanged.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class ProducerConsumerTest {
    static final String TOPIC = "producer-consumer";
    static final int PARTITIONS = 3;
    static final int RECORDS = 3000;
    static final Duration POLL_DEADLINE = Duration.ofSeconds(60);

    static BrokerUnderTest broker;
    /** What was sent, per partition, in offset order; filled by the producer test. */
    static final Map<Integer, List<Sent>> sent = new HashMap<>();

    record Sent(long offset, long timestamp, byte[] key, byte[] value, List<Header> headers) {}

    @BeforeAll
    static void start() throws Exception {
        broker = BrokerUnderTest.start();
        try (Admin admin = broker.admin()) {
            admin.createTopics(List.of(new NewTopic(TOPIC, PARTITIONS, (short) 1)))
                    .all().get(30, TimeUnit.SECONDS);
        }
    }

    @AfterAll
    static void stop() throws Exception {
        if (broker != null) {
            broker.close();
        }
    }

    static ProducerRecord<byte[], byte[]> record(int i) {
        // Every 7th key is null (partitioned by the sticky partitioner, so pin it), every 10th
        // value is null, every 3rd record carries headers including one with a null value.
        byte[] key = i % 7 == 0 ? null : ("key-" + i).getBytes(StandardCharsets.UTF_8);
        byte[] value = i % 10 == 0 ? null : ("value-" + i + "-" + "x".repeat(i % 50))
                .getBytes(StandardCharsets.UTF_8);
        List<Header> headers = new ArrayList<>();
        if (i % 3 == 0) {
            headers.add(new RecordHeader("h-index", Integer.toString(i).getBytes(StandardCharsets.UTF_8)));
            headers.add(new RecordHeader("h-null", null));
            headers.add(new RecordHeader("h-index", new byte[] {1, 2, (byte) (i & 0xff)}));
        }
        return new ProducerRecord<>(TOPIC, i % PARTITIONS, null, key, value, headers);
    }

    @Test
    @Order(1)
    void defaultProducerSendsAllRecordsWithIncreasingOffsets() throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < RECORDS; i++) {
                ProducerRecord<byte[], byte[]> r = record(i);
                records.add(r);
                futures.add(producer.send(r));
            }
            producer.flush();
        }
        Map<Integer, Long> next = new HashMap<>();
        for (int i = 0; i < RECORDS; i++) {
            RecordMetadata md = futures.get(i).get(30, TimeUnit.SECONDS);
            ProducerRecord<byte[], byte[]> r = records.get(i);
            assertEquals(TOPIC, md.topic());
            assertEquals(r.partition(), md.partition());
            // One producer, idempotent, one topic created empty: offsets per partition are
            // exactly 0, 1, 2, ... in send order.
            long expected = next.getOrDefault(md.partition(), 0L);
            assertEquals(expected, md.offset(), "offset of record " + i);
            next.put(md.partition(), expected + 1);
            assertTrue(md.timestamp() > 0, "record " + i + " has a timestamp");
            sent.computeIfAbsent(md.partition(), k -> new ArrayList<>()).add(new Sent(
                    md.offset(), md.timestamp(), r.key(), r.value(), List.of(r.headers().toArray())));
        }
        assertEquals(PARTITIONS, next.size());
        assertEquals(RECORDS, next.values().stream().mapToLong(Long::longValue).sum());
    }

    static KafkaConsumer<byte[], byte[]> consumer() {
        return consumer(new Properties());
    }

    static KafkaConsumer<byte[], byte[]> consumer(Properties extra) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        // Small fetches so reading back takes several Fetch round trips per partition.
        p.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, 16 * 1024);
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    /** Polls until {@code count} records of each listed partition have arrived from the seeks. */
    static Map<Integer, List<ConsumerRecord<byte[], byte[]>>> pollUntil(
            KafkaConsumer<byte[], byte[]> c, Map<Integer, Integer> count) {
        Map<Integer, List<ConsumerRecord<byte[], byte[]>>> got = new HashMap<>();
        long deadline = System.nanoTime() + POLL_DEADLINE.toNanos();
        while (count.entrySet().stream().anyMatch(e ->
                got.getOrDefault(e.getKey(), List.of()).size() < e.getValue())) {
            assertTrue(System.nanoTime() < deadline, () -> "timed out polling; got " + sizes(got)
                    + " of " + count);
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                got.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r);
            }
        }
        return got;
    }

    static Map<Integer, Integer> sizes(Map<Integer, List<ConsumerRecord<byte[], byte[]>>> got) {
        Map<Integer, Integer> m = new HashMap<>();
        got.forEach((k, v) -> m.put(k, v.size()));
        return m;
    }

    static void assertSame(Sent s, ConsumerRecord<byte[], byte[]> r) {
        String at = "partition " + r.partition() + " offset " + s.offset();
        assertEquals(s.offset(), r.offset(), at);
        assertEquals(s.timestamp(), r.timestamp(), at + " timestamp");
        assertArrayEquals(s.key(), r.key(), at + " key");
        if (s.value() == null) {
            assertNull(r.value(), at + " value should be null");
        } else {
            assertArrayEquals(s.value(), r.value(), at + " value");
        }
        Header[] got = r.headers().toArray();
        assertEquals(s.headers().size(), got.length, at + " header count");
        for (int h = 0; h < got.length; h++) {
            assertEquals(s.headers().get(h).key(), got[h].key(), at + " header " + h + " key");
            assertArrayEquals(s.headers().get(h).value(), got[h].value(), at + " header " + h + " value");
        }
        assertTrue(r.leaderEpoch().isPresent() && r.leaderEpoch().get() >= 0,
                at + " carries the leader epoch it was written in");
    }

    @Test
    @Order(2)
    void consumerAssignSeekToBeginningReadsEverythingBackIdentical() {
        assertEquals(PARTITIONS, sent.size(), "the producer test ran first");
        try (KafkaConsumer<byte[], byte[]> c = consumer()) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < PARTITIONS; p++) {
                tps.add(new TopicPartition(TOPIC, p));
            }
            c.assign(tps);
            assertEquals(Set.copyOf(tps), c.assignment());
            c.seekToBeginning(tps);
            Map<Integer, Integer> want = new HashMap<>();
            sent.forEach((p, l) -> want.put(p, l.size()));
            Map<Integer, List<ConsumerRecord<byte[], byte[]>>> got = pollUntil(c, want);
            for (int p = 0; p < PARTITIONS; p++) {
                List<Sent> s = sent.get(p);
                List<ConsumerRecord<byte[], byte[]>> r = got.get(p);
                assertEquals(s.size(), r.size(), "partition " + p + " record count");
                for (int i = 0; i < s.size(); i++) {
                    assertSame(s.get(i), r.get(i));
                }
                assertEquals(s.size(), c.position(new TopicPartition(TOPIC, p)));
            }
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(30));
            Map<TopicPartition, Long> begin = c.beginningOffsets(tps, Duration.ofSeconds(30));
            for (TopicPartition tp : tps) {
                assertEquals(sent.get(tp.partition()).size(), end.get(tp), tp + " end offset");
                assertEquals(0L, begin.get(tp), tp + " beginning offset");
            }
        }
    }

    /** Fetch responses the consumer has received (its fetch-total). */
    static long fetchTotal(KafkaConsumer<?, ?> c) {
        for (Map.Entry<MetricName, ? extends Metric> e : c.metrics().entrySet()) {
            MetricName m = e.getKey();
            if (m.name().equals("fetch-total") && m.group().equals("consumer-fetch-manager-metrics")
                    && m.tags().keySet().equals(Set.of("client-id"))) {
                return ((Number) e.getValue().metricValue()).longValue();
            }
        }
        throw new AssertionError("no fetch-total metric");
    }

    @Test
    @Order(3)
    void consumerSeekToMiddleReadsFromThatOffset() {
        try (KafkaConsumer<byte[], byte[]> c = consumer()) {
            TopicPartition tp = new TopicPartition(TOPIC, 1);
            List<Sent> s = sent.get(1);
            int from = s.size() / 2 + 3;
            c.assign(List.of(tp));
            c.seek(tp, from);
            Map<Integer, List<ConsumerRecord<byte[], byte[]>>> got =
                    pollUntil(c, Map.of(1, s.size() - from));
            List<ConsumerRecord<byte[], byte[]>> r = got.get(1);
            assertEquals(s.size() - from, r.size());
            for (int i = 0; i < r.size(); i++) {
                assertSame(s.get(from + i), r.get(i));
            }
            // Nothing beyond the end: polls return nothing while the broker answers two more
            // fetches (the consumer's fetch-total), the second sent from the log end.
            long fetchedBefore = fetchTotal(c);
            long deadline = System.nanoTime() + POLL_DEADLINE.toNanos();
            while (fetchTotal(c) < fetchedBefore + 2) {
                assertTrue(System.nanoTime() < deadline, "no fetch from the log end was answered");
                assertTrue(c.poll(Duration.ofMillis(100)).isEmpty(), "no records past the log end");
            }
            assertEquals(s.size(), c.position(tp));
        }
    }

    @Test
    @Order(4)
    void readCommittedConsumerReadsNonTransactionalRecords() {
        Properties extra = new Properties();
        extra.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, IsolationLevel.READ_COMMITTED.toString());
        try (KafkaConsumer<byte[], byte[]> c = consumer(extra)) {
            TopicPartition tp = new TopicPartition(TOPIC, 2);
            List<Sent> s = sent.get(2);
            c.assign(List.of(tp));
            c.seek(tp, 0);
            List<ConsumerRecord<byte[], byte[]>> r = pollUntil(c, Map.of(2, s.size())).get(2);
            assertEquals(s.size(), r.size());
            for (int i = 0; i < r.size(); i++) {
                assertSame(s.get(i), r.get(i));
            }
            // With no transactions the last stable offset is the high watermark.
            assertEquals((long) s.size(), c.endOffsets(List.of(tp), Duration.ofSeconds(30)).get(tp));
        }
    }

    @Test
    @Order(5)
    void seekPastTheLogEndIsOffsetOutOfRange() {
        try (KafkaConsumer<byte[], byte[]> c = consumer()) {
            TopicPartition tp = new TopicPartition(TOPIC, 0);
            long end = sent.get(0).size();
            c.assign(List.of(tp));
            c.seek(tp, end + 100);
            long deadline = System.nanoTime() + POLL_DEADLINE.toNanos();
            OffsetOutOfRangeException e = assertThrows(OffsetOutOfRangeException.class, () -> {
                while (System.nanoTime() < deadline) {
                    c.poll(Duration.ofMillis(500));
                }
            }, "auto.offset.reset=none surfaces the broker's OFFSET_OUT_OF_RANGE");
            assertEquals(Map.of(tp, end + 100), e.offsetOutOfRangePartitions());
        }
    }

    @Test
    @Order(6)
    void everyCompressionTypeRoundTrips() throws Exception {
        for (String codec : List.of("gzip", "snappy", "lz4", "zstd")) {
            String topic = "java-codec-" + codec;
            try (Admin admin = broker.admin()) {
                admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
            }
            Properties p = new Properties();
            p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
            p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
                for (int i = 0; i < 2000; i++) {
                    ProducerRecord<byte[], byte[]> r = record(i);
                    r = new ProducerRecord<>(topic, 0, null, r.key(), r.value(), r.headers());
                    records.add(r);
                    futures.add(producer.send(r));
                }
                producer.flush();
            }
            List<Sent> s = new ArrayList<>();
            for (int i = 0; i < records.size(); i++) {
                RecordMetadata md = futures.get(i).get(30, TimeUnit.SECONDS);
                assertEquals(i, md.offset(), codec + " record " + i + " offset");
                ProducerRecord<byte[], byte[]> r = records.get(i);
                s.add(new Sent(md.offset(), md.timestamp(), r.key(), r.value(), List.of(r.headers().toArray())));
            }
            try (KafkaConsumer<byte[], byte[]> c = consumer()) {
                TopicPartition tp = new TopicPartition(topic, 0);
                c.assign(List.of(tp));
                c.seek(tp, 0);
                List<ConsumerRecord<byte[], byte[]>> got = pollUntil(c, Map.of(0, s.size())).get(0);
                assertEquals(s.size(), got.size(), codec);
                for (int i = 0; i < s.size(); i++) {
                    assertSame(s.get(i), got.get(i));
                }
            }
        }
    }

    @Test
    @Order(7)
    void aBatchLargerThanTheFetchLimitsIsStillReturned() throws Exception {
        // KIP-74: the first batch is returned whole even when it exceeds max.partition.fetch.bytes
        // and fetch.max.bytes, so consumers always make progress.
        String topic = "java-large-record";
        try (Admin admin = broker.admin()) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }
        byte[] big = new byte[600 * 1024];
        new java.util.Random(42).nextBytes(big);
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            assertEquals(0, producer.send(new ProducerRecord<>(topic, 0, null, "small-0".getBytes())).get(30, TimeUnit.SECONDS).offset());
            assertEquals(1, producer.send(new ProducerRecord<>(topic, 0, null, big)).get(30, TimeUnit.SECONDS).offset());
            assertEquals(2, producer.send(new ProducerRecord<>(topic, 0, null, "small-2".getBytes())).get(30, TimeUnit.SECONDS).offset());
        }
        Properties extra = new Properties();
        extra.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, 16 * 1024);
        extra.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, 16 * 1024);
        try (KafkaConsumer<byte[], byte[]> c = consumer(extra)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seek(tp, 0);
            List<ConsumerRecord<byte[], byte[]>> r = pollUntil(c, Map.of(0, 3)).get(0);
            assertEquals(3, r.size());
            assertArrayEquals("small-0".getBytes(), r.get(0).value());
            assertArrayEquals(big, r.get(1).value(), "the 600 KiB record");
            assertArrayEquals("small-2".getBytes(), r.get(2).value());
        }
    }

    @Test
    @Order(8)
    void acksZeroAndOneProducersWriteEverything() throws Exception {
        for (String acks : List.of("0", "1")) {
            String topic = "java-acks-" + acks;
            try (Admin admin = broker.admin()) {
                admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
            }
            Properties p = new Properties();
            p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
            p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            p.put(ProducerConfig.ACKS_CONFIG, acks);
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false);
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
                // Wait for the topic's metadata first so acks=0 sends are not lost to a
                // not-yet-known leader (the client, not the broker, would drop them).
                producer.partitionsFor(topic);
                for (int i = 0; i < 1000; i++) {
                    futures.add(producer.send(new ProducerRecord<>(topic, 0, null, ("acks" + acks + "-" + i).getBytes())));
                }
                producer.flush();
            }
            for (int i = 0; i < futures.size(); i++) {
                RecordMetadata md = futures.get(i).get(30, TimeUnit.SECONDS);
                if (acks.equals("1")) {
                    assertEquals(i, md.offset(), "acks=1 record " + i);
                } else {
                    assertEquals(-1, md.offset(), "acks=0 has no offset to report");
                }
            }
            try (KafkaConsumer<byte[], byte[]> c = consumer()) {
                TopicPartition tp = new TopicPartition(topic, 0);
                c.assign(List.of(tp));
                c.seek(tp, 0);
                List<ConsumerRecord<byte[], byte[]>> got = pollUntil(c, Map.of(0, 1000)).get(0);
                for (int i = 0; i < 1000; i++) {
                    assertEquals(i, got.get(i).offset());
                    assertArrayEquals(("acks" + acks + "-" + i).getBytes(), got.get(i).value(), "acks=" + acks);
                }
            }
        }
    }

    @Test
    @Order(9)
    void seekWithALeaderEpochIsValidatedWithOffsetsForLeaderEpoch() {
        TopicPartition tp = new TopicPartition(TOPIC, 0);
        List<Sent> s = sent.get(0);
        try (KafkaConsumer<byte[], byte[]> c = consumer()) {
            c.assign(List.of(tp));
            // A position from epoch 0 inside the log validates and reads on from there.
            c.seek(tp, new OffsetAndMetadata(10, java.util.Optional.of(0), ""));
            List<ConsumerRecord<byte[], byte[]>> r = pollUntil(c, Map.of(0, s.size() - 10)).get(0);
            assertEquals(s.size() - 10, r.size());
            assertSame(s.get(10), r.get(0));
        }
        try (KafkaConsumer<byte[], byte[]> c = consumer()) {
            c.assign(List.of(tp));
            // A position from epoch 0 past where epoch 0 ends: the leader's answer shows the log
            // diverged, and with auto.offset.reset=none the consumer reports truncation.
            long end = s.size();
            c.seek(tp, new OffsetAndMetadata(end + 50, java.util.Optional.of(0), ""));
            long deadline = System.nanoTime() + POLL_DEADLINE.toNanos();
            LogTruncationException e = assertThrows(LogTruncationException.class, () -> {
                while (System.nanoTime() < deadline) {
                    c.poll(Duration.ofMillis(500));
                }
            });
            assertEquals(end, e.divergentOffsets().get(tp).offset(), "epoch 0 ends at the log end");
        }
    }

    @Test
    @Order(10)
    void aRecordOverTheBrokersMessageMaxBytesIsRejected() throws Exception {
        // The broker default message.max.bytes is 1048588; the producer is allowed to send more.
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, 4 * 1024 * 1024);
        p.put(ProducerConfig.BUFFER_MEMORY_CONFIG, 16 * 1024 * 1024);
        byte[] huge = new byte[1536 * 1024];
        new java.util.Random(7).nextBytes(huge);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            Future<RecordMetadata> f = producer.send(new ProducerRecord<>(TOPIC, 0, null, huge));
            java.util.concurrent.ExecutionException e = assertThrows(
                    java.util.concurrent.ExecutionException.class, () -> f.get(60, TimeUnit.SECONDS));
            assertTrue(e.getCause() instanceof RecordTooLargeException,
                    "MESSAGE_TOO_LARGE from the broker, got " + e.getCause());
            // The producer and partition carry on.
            long next = sent.get(0).size();
            assertEquals(next, producer.send(new ProducerRecord<>(TOPIC, 0, null, "after".getBytes()))
                    .get(30, TimeUnit.SECONDS).offset(), "nothing of the rejected record was appended");
        }
    }
}
