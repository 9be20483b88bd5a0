package io.kafkaiq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import java.time.Duration;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.OffsetOutOfRangeException;
import org.apache.kafka.common.errors.InvalidReplicationFactorException;
import org.apache.kafka.common.errors.InvalidTopicException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** AdminClient operations against one broker: topics, configs, partitions, records, offsets. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class AdminTest {
    static final long WAIT_S = 30;

    static BrokerUnderTest broker;
    static Admin admin;
    static Node node;

    @BeforeAll
    static void start() throws Exception {
        broker = BrokerUnderTest.start();
        admin = broker.admin();
        Collection<Node> nodes = admin.describeCluster().nodes().get(WAIT_S, TimeUnit.SECONDS);
        assertEquals(1, nodes.size(), "a single-node cluster");
        node = nodes.iterator().next();
    }

    @AfterAll
    static void stop() throws Exception {
        if (admin != null) {
            admin.close();
        }
        if (broker != null) {
            broker.close();
        }
    }

    /**
     * Creates a topic and waits until the broker lists it: Apache Kafka acknowledges creation
     * when the controller commits it, and the broker's metadata follows shortly after.
     */
    static void create(String topic, int partitions, Map<String, String> configs) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1).configs(configs)))
                .all().get(WAIT_S, TimeUnit.SECONDS);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
        while (!admin.listTopics().names().get(WAIT_S, TimeUnit.SECONDS).contains(topic)) {
            assertTrue(System.nanoTime() < deadline, "created topic " + topic + " never listed");
            Thread.sleep(100);
        }
    }

    static TopicDescription describe(String topic) throws Exception {
        return admin.describeTopics(List.of(topic)).allTopicNames().get(WAIT_S, TimeUnit.SECONDS)
                .get(topic);
    }

    static KafkaProducer<byte[], byte[]> producer() {
        return producer(Map.of());
    }

    static KafkaProducer<byte[], byte[]> producer(Map<String, String> extra) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    /** Produces one record per timestamp to partition 0, returning each record's offset. */
    static List<Long> produce(String topic, List<Long> timestamps) throws Exception {
        return produce(topic, timestamps, Map.of());
    }

    /** As {@link #produce(String, List)}, with extra producer configs. */
    static List<Long> produce(String topic, List<Long> timestamps, Map<String, String> producerConfigs)
            throws Exception {
        List<Future<RecordMetadata>> fs = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> p = producer(producerConfigs)) {
            for (int i = 0; i < timestamps.size(); i++) {
                fs.add(p.send(new ProducerRecord<>(topic, 0, timestamps.get(i),
                        ("k" + i).getBytes(StandardCharsets.UTF_8),
                        ("v" + i).getBytes(StandardCharsets.UTF_8))));
            }
            p.flush();
        }
        List<Long> offsets = new ArrayList<>();
        for (Future<RecordMetadata> f : fs) {
            offsets.add(f.get(WAIT_S, TimeUnit.SECONDS).offset());
        }
        return offsets;
    }

    static ListOffsetsResultInfo listOffset(TopicPartition tp, OffsetSpec spec) throws Exception {
        return admin.listOffsets(Map.of(tp, spec)).partitionResult(tp).get(WAIT_S, TimeUnit.SECONDS);
    }

    static Config describeConfig(ConfigResource r) throws Exception {
        return admin.describeConfigs(List.of(r)).all().get(WAIT_S, TimeUnit.SECONDS).get(r);
    }

    @Test
    void describeCluster() throws Exception {
        DescribeClusterResult r = admin.describeCluster();
        String clusterId = r.clusterId().get(WAIT_S, TimeUnit.SECONDS);
        assertNotNull(clusterId);
        assertFalse(clusterId.isBlank());
        Node controller = r.controller().get(WAIT_S, TimeUnit.SECONDS);
        assertNotNull(controller);
        assertFalse(controller.isEmpty(), "a controller is known");
        assertEquals(List.of(node), List.copyOf(r.nodes().get(WAIT_S, TimeUnit.SECONDS)));
        assertTrue(node.id() >= 0);
        assertEquals(broker.bootstrap(), node.host() + ":" + node.port(), "advertised listener");
    }

    @Test
    void createTopicsThenDescribeTopics() throws Exception {
        create("admin-create", 4, Map.of("retention.ms", "3600000"));
        TopicDescription d = describe("admin-create");
        assertEquals("admin-create", d.name());
        assertFalse(d.isInternal());
        assertNotEquals(Uuid.ZERO_UUID, d.topicId(), "topics have ids");
        assertEquals(4, d.partitions().size());
        for (int p = 0; p < 4; p++) {
            TopicPartitionInfo info = d.partitions().get(p);
            assertEquals(p, info.partition());
            assertEquals(node, info.leader(), "partition " + p + " leader");
            assertEquals(List.of(node), info.replicas(), "partition " + p + " replicas");
            assertEquals(List.of(node), info.isr(), "partition " + p + " ISR");
        }
        // Leader epoch as clients see it: carried on ListOffsets answers from the leader.
        ListOffsetsResultInfo latest = listOffset(new TopicPartition("admin-create", 0), OffsetSpec.latest());
        assertEquals(0, latest.offset());
        assertTrue(latest.leaderEpoch().isPresent(), "ListOffsets answer carries the leader epoch");
        assertTrue(latest.leaderEpoch().get() >= 0);

        // Described by topic id (Metadata v12+ / DescribeTopicPartitions), the same topic.
        TopicDescription byId = admin.describeTopics(TopicCollection.ofTopicIds(List.of(d.topicId())))
                .allTopicIds().get(WAIT_S, TimeUnit.SECONDS).get(d.topicId());
        assertEquals("admin-create", byId.name());
        assertEquals(4, byId.partitions().size());

        ExecutionException again = assertThrows(ExecutionException.class,
                () -> create("admin-create", 1, Map.of()));
        assertInstanceOf(TopicExistsException.class, again.getCause());
        ExecutionException missing = assertThrows(ExecutionException.class,
                () -> describe("admin-no-such-topic"));
        assertInstanceOf(UnknownTopicOrPartitionException.class, missing.getCause());
    }

    @Test
    void describeConfigsOfTopicAndBroker() throws Exception {
        create("admin-configs", 1, Map.of("retention.ms", "3600000", "cleanup.policy", "delete"));
        Config topic = describeConfig(new ConfigResource(ConfigResource.Type.TOPIC, "admin-configs"));
        ConfigEntry retention = topic.get("retention.ms");
        assertNotNull(retention, "retention.ms is described");
        assertEquals("3600000", retention.value());
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, retention.source());
        ConfigEntry segment = topic.get("segment.bytes");
        assertNotNull(segment, "defaults are described too");
        assertEquals("1073741824", segment.value());
        assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, segment.source());
        assertNotNull(topic.get("max.message.bytes"));
        assertNotNull(topic.get("message.timestamp.type"));
        assertEquals("CreateTime", topic.get("message.timestamp.type").value());

        Config b = describeConfig(new ConfigResource(ConfigResource.Type.BROKER, Integer.toString(node.id())));
        assertTrue(b.entries().size() > 10, "broker configs are described: " + b.entries().size());
        ConfigEntry partitions = b.get("num.partitions");
        assertNotNull(partitions, "num.partitions is described");
        assertEquals("1", partitions.value());
        assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, partitions.source());
        ConfigEntry autoCreate = b.get("auto.create.topics.enable");
        assertNotNull(autoCreate);
        assertEquals("true", autoCreate.value());
        // Both brokers under test are started with log.dirs set: a static broker config.
        ConfigEntry logDirs = b.get("log.dirs");
        assertNotNull(logDirs, "log.dirs is described");
        if (!broker.kind().equals("external")) {
            assertTrue(logDirs.value() != null && !logDirs.value().isBlank(), "log.dirs value");
            assertEquals(ConfigEntry.ConfigSource.STATIC_BROKER_CONFIG, logDirs.source(), "log.dirs source");
        }
    }

    @Test
    void createTopicsValidation() throws Exception {
        ExecutionException rf = assertThrows(ExecutionException.class, () -> admin.createTopics(
                List.of(new NewTopic("admin-rf-too-high", 1, (short) 2))).all().get(WAIT_S, TimeUnit.SECONDS));
        assertInstanceOf(InvalidReplicationFactorException.class, rf.getCause(),
                "replication factor beyond the live brokers");
        ExecutionException name = assertThrows(ExecutionException.class,
                () -> create("admin/bad name", 1, Map.of()));
        assertInstanceOf(InvalidTopicException.class, name.getCause());
        ExecutionException config = assertThrows(ExecutionException.class,
                () -> create("admin-bad-config", 1, Map.of("retention.ms", "not-a-number")));
        assertInstanceOf(InvalidConfigurationException.class, config.getCause());

        admin.createTopics(List.of(new NewTopic("admin-validate-only", 2, (short) 1)),
                new CreateTopicsOptions().validateOnly(true)).all().get(WAIT_S, TimeUnit.SECONDS);
        var names = admin.listTopics().names().get(WAIT_S, TimeUnit.SECONDS);
        assertFalse(names.contains("admin-validate-only"), "validateOnly creates nothing");
        assertFalse(names.contains("admin-rf-too-high"));
        assertFalse(names.contains("admin-bad-config"));
    }

    @Test
    void incrementalAlterConfigsThenDescribeConfigsShowsIt() throws Exception {
        create("admin-alter", 1, Map.of());
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, "admin-alter");
        assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, describeConfig(r).get("retention.ms").source());

        admin.incrementalAlterConfigs(Map.of(r, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "12345"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("max.message.bytes", "200000"), AlterConfigOp.OpType.SET))))
                .all().get(WAIT_S, TimeUnit.SECONDS);
        Config after = describeConfig(r);
        assertEquals("12345", after.get("retention.ms").value());
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, after.get("retention.ms").source());
        assertEquals("200000", after.get("max.message.bytes").value());

        ExecutionException bad = assertThrows(ExecutionException.class, () -> admin.incrementalAlterConfigs(
                Map.of(r, List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET))))
                .all().get(WAIT_S, TimeUnit.SECONDS));
        assertInstanceOf(InvalidConfigurationException.class, bad.getCause(), "invalid value rejected");
        ExecutionException unknown = assertThrows(ExecutionException.class, () -> admin.incrementalAlterConfigs(
                Map.of(r, List.of(new AlterConfigOp(new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET))))
                .all().get(WAIT_S, TimeUnit.SECONDS));
        assertInstanceOf(InvalidConfigurationException.class, unknown.getCause(), "unknown name rejected");
        assertEquals("12345", describeConfig(r).get("retention.ms").value(), "a rejected change changes nothing");

        admin.incrementalAlterConfigs(Map.of(r, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE))))
                .all().get(WAIT_S, TimeUnit.SECONDS);
        Config reverted = describeConfig(r);
        assertEquals("604800000", reverted.get("retention.ms").value(), "back to the default");
        assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, reverted.get("retention.ms").source());
        assertEquals("200000", reverted.get("max.message.bytes").value(), "other overrides stay");
    }

    @Test
    void createPartitionsGrowsTheTopic() throws Exception {
        create("admin-grow", 1, Map.of());
        admin.createPartitions(Map.of("admin-grow", NewPartitions.increaseTo(3)))
                .all().get(WAIT_S, TimeUnit.SECONDS);
        // Metadata may take a moment to show new partitions; Kafka's own tests wait for it too.
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
        TopicDescription d = describe("admin-grow");
        while (d.partitions().size() != 3 && System.nanoTime() < deadline) {
            Thread.sleep(200);
            d = describe("admin-grow");
        }
        assertEquals(3, d.partitions().size());
        for (TopicPartitionInfo info : d.partitions()) {
            assertEquals(node, info.leader());
            assertEquals(List.of(node), info.isr());
        }
        // The new partition takes writes.
        try (KafkaProducer<byte[], byte[]> p = producer()) {
            RecordMetadata md = p.send(new ProducerRecord<>("admin-grow", 2, null, "x".getBytes()))
                    .get(WAIT_S, TimeUnit.SECONDS);
            assertEquals(2, md.partition());
            assertEquals(0, md.offset());
        }
    }

    @Test
    void deleteRecordsMovesTheLowWatermark() throws Exception {
        create("admin-delete-records", 1, Map.of());
        long now = System.currentTimeMillis();
        List<Long> ts = new ArrayList<>();
        for (int i = 0; i < 100; i++) {
            ts.add(now + i);
        }
        assertEquals(99L, produce("admin-delete-records", ts).get(99));
        TopicPartition tp = new TopicPartition("admin-delete-records", 0);
        long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(40)))
                .lowWatermarks().get(tp).get(WAIT_S, TimeUnit.SECONDS).lowWatermark();
        assertEquals(40, low);
        assertEquals(40, listOffset(tp, OffsetSpec.earliest()).offset());
        assertEquals(100, listOffset(tp, OffsetSpec.latest()).offset());
        // Consumers see the new log start: the beginning is 40, and offsets below it are out of
        // range.
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(cp)) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            assertEquals(40, c.position(tp, Duration.ofSeconds(WAIT_S)));
            ConsumerRecords<byte[], byte[]> first = ConsumerRecords.empty();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            while (first.isEmpty()) {
                assertTrue(System.nanoTime() < deadline, "no records after the new log start");
                first = c.poll(Duration.ofMillis(500));
            }
            assertEquals(40, first.iterator().next().offset(), "the first record read is at the log start");
            c.seek(tp, 10);
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            assertThrows(org.apache.kafka.clients.consumer.OffsetOutOfRangeException.class, () -> {
                while (System.nanoTime() < until) {
                    c.poll(Duration.ofMillis(500));
                }
            }, "an offset below the log start is out of range");
        }
        // -1 means "up to the high watermark".
        low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(-1)))
                .lowWatermarks().get(tp).get(WAIT_S, TimeUnit.SECONDS).lowWatermark();
        assertEquals(100, low);
        assertEquals(100, listOffset(tp, OffsetSpec.earliest()).offset());
    }

    @Test
    void listOffsetsEarliestLatestByTimestampAndMaxTimestamp() throws Exception {
        create("admin-list-offsets", 1, Map.of());
        long t = System.currentTimeMillis() - 3_600_000;
        // Timestamps rise by a second per record, except offset 5 which is the newest.
        List<Long> ts = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            ts.add(i == 5 ? t + 100_000 : t + i * 1000L);
        }
        assertEquals(List.of(0L, 1L, 2L, 3L, 4L, 5L, 6L, 7L, 8L, 9L), produce("admin-list-offsets", ts));
        TopicPartition tp = new TopicPartition("admin-list-offsets", 0);

        assertEquals(0, listOffset(tp, OffsetSpec.earliest()).offset());
        assertEquals(10, listOffset(tp, OffsetSpec.latest()).offset());

        ListOffsetsResultInfo exact = listOffset(tp, OffsetSpec.forTimestamp(t + 3000));
        assertEquals(3, exact.offset(), "first record with timestamp >= target");
        assertEquals(t + 3000, exact.timestamp());
        ListOffsetsResultInfo between = listOffset(tp, OffsetSpec.forTimestamp(t + 3500));
        assertEquals(4, between.offset());
        assertEquals(t + 4000, between.timestamp());
        ListOffsetsResultInfo early = listOffset(tp, OffsetSpec.forTimestamp(t - 5000));
        assertEquals(0, early.offset());
        assertEquals(t, early.timestamp());
        ListOffsetsResultInfo past = listOffset(tp, OffsetSpec.forTimestamp(t + 50_000));
        assertEquals(5, past.offset(), "offset 5 is the first at or after t+50s");
        ListOffsetsResultInfo none = listOffset(tp, OffsetSpec.forTimestamp(t + 200_000));
        assertEquals(-1, none.offset(), "no record at or after the target");

        ListOffsetsResultInfo max = listOffset(tp, OffsetSpec.maxTimestamp());
        assertEquals(5, max.offset(), "offset of the record with the largest timestamp");
        assertEquals(t + 100_000, max.timestamp());
        assertTrue(max.leaderEpoch().isPresent());
    }

    @Test
    void listOffsetsFindsTheExactRecordInsideCompressedBatches() throws Exception {
        long t = System.currentTimeMillis() - 3_600_000;
        // As above: offset 5 is the newest, now inside one compressed batch (snappy is xerial-
        // framed by this client, lz4 is Kafka's LZ4 frame writer).
        List<Long> ts = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            ts.add(i == 5 ? t + 100_000 : t + i * 1000L);
        }
        for (String codec : List.of("gzip", "snappy", "lz4", "zstd")) {
            String topic = "admin-list-offsets-" + codec;
            create(topic, 1, Map.of());
            assertEquals(List.of(0L, 1L, 2L, 3L, 4L, 5L, 6L, 7L, 8L, 9L), produce(topic, ts,
                    Map.of(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec, ProducerConfig.LINGER_MS_CONFIG, "500")));
            TopicPartition tp = new TopicPartition(topic, 0);
            ListOffsetsResultInfo exact = listOffset(tp, OffsetSpec.forTimestamp(t + 3000));
            assertEquals(3, exact.offset(), codec);
            assertEquals(t + 3000, exact.timestamp(), codec);
            ListOffsetsResultInfo between = listOffset(tp, OffsetSpec.forTimestamp(t + 3500));
            assertEquals(4, between.offset(), codec);
            assertEquals(t + 4000, between.timestamp(), codec);
            assertEquals(5, listOffset(tp, OffsetSpec.forTimestamp(t + 50_000)).offset(), codec);
            assertEquals(-1, listOffset(tp, OffsetSpec.forTimestamp(t + 200_000)).offset(), codec);
            ListOffsetsResultInfo max = listOffset(tp, OffsetSpec.maxTimestamp());
            assertEquals(5, max.offset(), codec + ": record with the largest timestamp");
            assertEquals(t + 100_000, max.timestamp(), codec);
        }
    }

    @Test
    void deleteTopicsRemovesTheTopic() throws Exception {
        create("admin-delete-me", 2, Map.of());
        admin.deleteTopics(List.of("admin-delete-me")).all().get(WAIT_S, TimeUnit.SECONDS);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
        while (admin.listTopics().names().get(WAIT_S, TimeUnit.SECONDS).contains("admin-delete-me")) {
            assertTrue(System.nanoTime() < deadline, "deleted topic still listed");
            Thread.sleep(200);
        }
        ExecutionException gone = assertThrows(ExecutionException.class, () -> describe("admin-delete-me"));
        assertInstanceOf(UnknownTopicOrPartitionException.class, gone.getCause());
        ExecutionException twice = assertThrows(ExecutionException.class,
                () -> admin.deleteTopics(List.of("admin-delete-me")).all().get(WAIT_S, TimeUnit.SECONDS));
        assertInstanceOf(UnknownTopicOrPartitionException.class, twice.getCause());
        // The name can be used again, starting from offset 0, under a new topic id.
        create("admin-delete-me", 1, Map.of());
        assertEquals(0, listOffset(new TopicPartition("admin-delete-me", 0), OffsetSpec.latest()).offset());

        // DeleteTopics by topic id (v6+).
        Uuid id = describe("admin-delete-me").topicId();
        admin.deleteTopics(TopicCollection.ofTopicIds(List.of(id))).all().get(WAIT_S, TimeUnit.SECONDS);
        deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
        while (admin.listTopics().names().get(WAIT_S, TimeUnit.SECONDS).contains("admin-delete-me")) {
            assertTrue(System.nanoTime() < deadline, "topic deleted by id still listed");
            Thread.sleep(200);
        }
    }

    @Test
    void adminErrorsFollowKafka() throws Exception {
        create("admin-errors", 2, Map.of());
        ExecutionException fewer = assertThrows(ExecutionException.class, () -> admin.createPartitions(
                Map.of("admin-errors", NewPartitions.increaseTo(1))).all().get(WAIT_S, TimeUnit.SECONDS));
        assertInstanceOf(InvalidPartitionsException.class, fewer.getCause(), "shrinking a topic");
        ExecutionException same = assertThrows(ExecutionException.class, () -> admin.createPartitions(
                Map.of("admin-errors", NewPartitions.increaseTo(2))).all().get(WAIT_S, TimeUnit.SECONDS));
        assertInstanceOf(InvalidPartitionsException.class, same.getCause(), "the same partition count");
        ExecutionException missingTopic = assertThrows(ExecutionException.class, () -> admin.createPartitions(
                Map.of("admin-no-such-topic", NewPartitions.increaseTo(3))).all().get(WAIT_S, TimeUnit.SECONDS));
        assertInstanceOf(UnknownTopicOrPartitionException.class, missingTopic.getCause());

        ExecutionException noConfigs = assertThrows(ExecutionException.class,
                () -> describeConfig(new ConfigResource(ConfigResource.Type.TOPIC, "admin-no-such-topic")));
        assertInstanceOf(UnknownTopicOrPartitionException.class, noConfigs.getCause());

        TopicPartition tp = new TopicPartition("admin-errors", 0);
        produce("admin-errors", List.of(1L, 2L, 3L));
        ExecutionException beyond = assertThrows(ExecutionException.class, () -> admin.deleteRecords(
                Map.of(tp, RecordsToDelete.beforeOffset(10))).all().get(WAIT_S, TimeUnit.SECONDS));
        assertInstanceOf(OffsetOutOfRangeException.class, beyond.getCause(), "deleting past the high watermark");
        assertEquals(0, listOffset(tp, OffsetSpec.earliest()).offset(), "nothing deleted");

        // read_committed ListOffsets: with no transactions the last stable offset is the HW.
        ListOffsetsResultInfo committed = admin.listOffsets(Map.of(tp, OffsetSpec.latest()),
                new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).partitionResult(tp).get(WAIT_S, TimeUnit.SECONDS);
        assertEquals(3, committed.offset());
        // An empty partition has no offset for any timestamp.
        TopicPartition empty = new TopicPartition("admin-errors", 1);
        assertEquals(-1, listOffset(empty, OffsetSpec.forTimestamp(0)).offset());
        assertEquals(0, listOffset(empty, OffsetSpec.latest()).offset());
    }

    /** Every topic config Apache Kafka 4.1.1 describes for a new topic, with its default. */
    static final Map<String, String> KAFKA_TOPIC_CONFIG_DEFAULTS = Map.ofEntries(
            Map.entry("cleanup.policy", "delete"),
            Map.entry("compression.gzip.level", "-1"),
            Map.entry("compression.lz4.level", "9"),
            Map.entry("compression.type", "producer"),
            Map.entry("compression.zstd.level", "3"),
            Map.entry("delete.retention.ms", "86400000"),
            Map.entry("file.delete.delay.ms", "60000"),
            Map.entry("flush.messages", "9223372036854775807"),
            Map.entry("flush.ms", "9223372036854775807"),
            Map.entry("follower.replication.throttled.replicas", ""),
            Map.entry("index.interval.bytes", "4096"),
            Map.entry("leader.replication.throttled.replicas", ""),
            Map.entry("local.retention.bytes", "-2"),
            Map.entry("local.retention.ms", "-2"),
            Map.entry("max.compaction.lag.ms", "9223372036854775807"),
            Map.entry("max.message.bytes", "1048588"),
            Map.entry("message.timestamp.after.max.ms", "3600000"),
            Map.entry("message.timestamp.before.max.ms", "9223372036854775807"),
            Map.entry("message.timestamp.type", "CreateTime"),
            Map.entry("min.cleanable.dirty.ratio", "0.5"),
            Map.entry("min.compaction.lag.ms", "0"),
            Map.entry("min.insync.replicas", "1"),
            Map.entry("preallocate", "false"),
            Map.entry("remote.log.copy.disable", "false"),
            Map.entry("remote.log.delete.on.disable", "false"),
            Map.entry("remote.storage.enable", "false"),
            Map.entry("retention.bytes", "-1"),
            Map.entry("retention.ms", "604800000"),
            Map.entry("segment.bytes", "1073741824"),
            Map.entry("segment.index.bytes", "10485760"),
            Map.entry("segment.jitter.ms", "0"),
            Map.entry("segment.ms", "604800000"),
            Map.entry("unclean.leader.election.enable", "false"));

    @Test
    void describeConfigsListsEveryTopicConfigWithKafkasDefaults() throws Exception {
        create("admin-all-configs", 1, Map.of());
        Config c = describeConfig(new ConfigResource(ConfigResource.Type.TOPIC, "admin-all-configs"));
        List<String> problems = new ArrayList<>();
        for (Map.Entry<String, String> e : new java.util.TreeMap<>(KAFKA_TOPIC_CONFIG_DEFAULTS).entrySet()) {
            ConfigEntry got = c.get(e.getKey());
            if (got == null) {
                problems.add(e.getKey() + " missing");
            } else if (!e.getValue().equals(got.value() == null ? "" : got.value())) {
                problems.add(e.getKey() + "=" + got.value() + " (Kafka: " + e.getValue() + ")");
            } else if (got.source() != ConfigEntry.ConfigSource.DEFAULT_CONFIG
                    // Kafka 4.x writes a cluster-wide min.insync.replicas when it formats storage.
                    && got.source() != ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG) {
                problems.add(e.getKey() + " source " + got.source());
            }
        }
        assertEquals(List.of(), problems, "topic configs as Kafka 4.1.1 describes them");
    }

    static java.util.Set<ConfigResource> configResources(ConfigResource.Type... types) throws Exception {
        return java.util.Set.copyOf(admin.listConfigResources(java.util.Set.of(types),
                new org.apache.kafka.clients.admin.ListConfigResourcesOptions()).all().get(WAIT_S, TimeUnit.SECONDS));
    }

    /** ListConfigResources (KIP-1142): what configs can be described for, all types or some. */
    @Test
    void listConfigResourcesListsTopicsBrokersAndBrokerLoggers() throws Exception {
        create("admin-config-resources", 1, Map.of());
        String id = String.valueOf(node.id());
        ConfigResource topic = new ConfigResource(ConfigResource.Type.TOPIC, "admin-config-resources");
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, id);
        ConfigResource logger = new ConfigResource(ConfigResource.Type.BROKER_LOGGER, id);

        java.util.Set<ConfigResource> all = java.util.Set.copyOf(
                admin.listConfigResources().all().get(WAIT_S, TimeUnit.SECONDS));
        assertTrue(all.containsAll(List.of(topic, broker, logger)), all.toString());

        java.util.Set<ConfigResource> topics = configResources(ConfigResource.Type.TOPIC);
        assertTrue(topics.contains(topic), topics.toString());
        assertTrue(topics.stream().allMatch(r -> r.type() == ConfigResource.Type.TOPIC), topics.toString());
        assertEquals(java.util.Set.of(broker), configResources(ConfigResource.Type.BROKER));
        assertEquals(java.util.Set.of(broker, logger),
                configResources(ConfigResource.Type.BROKER, ConfigResource.Type.BROKER_LOGGER));
        // No group configs or client-metrics subscriptions were set: nothing of those types.
        assertEquals(java.util.Set.of(),
                configResources(ConfigResource.Type.GROUP, ConfigResource.Type.CLIENT_METRICS));
        java.util.Set<ConfigResource> everyType = configResources(ConfigResource.Type.TOPIC,
                ConfigResource.Type.BROKER, ConfigResource.Type.BROKER_LOGGER);
        assertEquals(all, everyType);
    }

    /** DescribeQuorum through Admin.describeMetadataQuorum: a leader among the voters. */
    @Test
    void describeMetadataQuorumNamesALeaderAmongTheVoters() throws Exception {
        org.apache.kafka.clients.admin.QuorumInfo q =
                admin.describeMetadataQuorum().quorumInfo().get(WAIT_S, TimeUnit.SECONDS);
        assertTrue(q.leaderId() >= 0, q.toString());
        assertTrue(q.leaderEpoch() >= 0, q.toString());
        assertTrue(q.highWatermark() > 0, q.toString());
        assertFalse(q.voters().isEmpty(), q.toString());
        assertTrue(q.voters().stream().anyMatch(v -> v.replicaId() == q.leaderId()), q.toString());
        for (org.apache.kafka.clients.admin.QuorumInfo.ReplicaState v : q.voters()) {
            if (v.replicaId() == q.leaderId()) {
                assertTrue(v.logEndOffset() >= q.highWatermark(), q.toString());
            }
        }
    }

    /**
     * Admin.describeTopics goes through DescribeTopicPartitions (API 75) on a broker that offers
     * it; a limit of 2 partitions per response makes the client page with the cursor.
     */
    @Test
    void describeTopicsPagesPartitionsWithTheCursor() throws Exception {
        create("admin-paged", 7, Map.of());
        create("admin-paged-other", 3, Map.of());
        Map<String, TopicDescription> got = admin.describeTopics(List.of("admin-paged", "admin-paged-other"),
                        new org.apache.kafka.clients.admin.DescribeTopicsOptions().partitionSizeLimitPerResponse(2))
                .allTopicNames().get(WAIT_S, TimeUnit.SECONDS);
        for (Map.Entry<String, Integer> want : Map.of("admin-paged", 7, "admin-paged-other", 3).entrySet()) {
            TopicDescription d = got.get(want.getKey());
            assertNotNull(d, want.getKey());
            List<Integer> indexes = d.partitions().stream().map(p -> p.partition()).toList();
            List<Integer> expected = java.util.stream.IntStream.range(0, want.getValue()).boxed().toList();
            assertEquals(expected, indexes, want.getKey());
            assertTrue(d.partitions().stream().allMatch(p -> p.leader() != null && p.isr().size() == 1),
                    d.toString());
        }
    }
}
