package io.kafkaiq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeReplicaLogDirsResult.ReplicaLogDirInfo;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionReplica;
import org.apache.kafka.common.errors.LogDirNotFoundException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Moving a replica between a broker's two log dirs with {@code Admin.alterReplicaLogDirs},
 * watched through {@code Admin.describeReplicaLogDirs} and {@code Admin.describeLogDirs}, while a
 * producer writes; every acknowledged record is read back afterwards.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class LogDirsTest {
    static final long WAIT_S = 30;

    static BrokerUnderTest broker;
    static Admin admin;
    static int nodeId;

    @BeforeAll
    static void start() throws Exception {
        broker = BrokerUnderTest.start(2);
        admin = broker.admin();
        nodeId = admin.describeCluster().nodes().get(WAIT_S, TimeUnit.SECONDS).iterator().next().id();
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
     * Creates `topic` (one partition, one replica) and makes {@link #nodeId} the broker holding
     * it (an external cluster may place it on any of its brokers), which must have two log dirs.
     */
    static void create(String topic) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(WAIT_S, TimeUnit.SECONDS);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
        while (!admin.listTopics().names().get(WAIT_S, TimeUnit.SECONDS).contains(topic)) {
            assertTrue(System.nanoTime() < deadline, "created topic " + topic + " never listed");
            Thread.sleep(100);
        }
        nodeId = admin.describeTopics(List.of(topic)).allTopicNames().get(WAIT_S, TimeUnit.SECONDS)
                .get(topic).partitions().get(0).leader().id();
        if (broker.kind().equals("external")) {
            assumeTrue(logDirs().size() >= 2, "the external broker has a single log dir");
        } else {
            assertEquals(2, logDirs().size(), "two log dirs: " + logDirs().keySet());
        }
    }

    static Map<String, LogDirDescription> logDirs() throws Exception {
        return admin.describeLogDirs(List.of(nodeId)).allDescriptions().get(WAIT_S, TimeUnit.SECONDS)
                .get(nodeId);
    }

    /** The log dirs DescribeLogDirs lists `tp` under, with "(future)" for a future replica. */
    static TreeSet<String> placesOf(TopicPartition tp) throws Exception {
        TreeSet<String> out = new TreeSet<>();
        for (Map.Entry<String, LogDirDescription> e : logDirs().entrySet()) {
            ReplicaInfo r = e.getValue().replicaInfos().get(tp);
            if (r != null) {
                out.add(e.getKey() + (r.isFuture() ? " (future)" : ""));
            }
        }
        return out;
    }

    static List<String> produce(KafkaProducer<String, String> p, String topic, String tag, int n)
            throws Exception {
        String pad = "p".repeat(1000);
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        List<String> values = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            String v = tag + "-" + i + "-" + pad;
            values.add(v);
            sent.add(p.send(new ProducerRecord<>(topic, 0, null, v)));
        }
        p.flush();
        for (Future<RecordMetadata> f : sent) {
            f.get(WAIT_S, TimeUnit.SECONDS);
        }
        return values;
    }

    static KafkaProducer<String, String> producer() {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    static List<String> readAll(TopicPartition tp, int expected) {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        List<String> out = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            while (out.size() < expected && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    assertEquals(out.size(), r.offset(), "consecutive offsets from 0");
                    out.add(r.value());
                }
            }
        }
        return out;
    }

    @Test
    void alterReplicaLogDirsMovesAReplicaWhileItIsWritten() throws Exception {
        String topic = "moved-between-dirs";
        TopicPartition tp = new TopicPartition(topic, 0);
        create(topic);
        TopicPartitionReplica replica = new TopicPartitionReplica(topic, 0, nodeId);
        List<String> expected = new ArrayList<>();
        try (KafkaProducer<String, String> p = producer()) {
            expected.addAll(produce(p, topic, "before", 3000));

            ReplicaLogDirInfo info = admin.describeReplicaLogDirs(List.of(replica)).all()
                    .get(WAIT_S, TimeUnit.SECONDS).get(replica);
            String source = info.getCurrentReplicaLogDir();
            assertNull(info.getFutureReplicaLogDir());
            String destination = logDirs().keySet().stream().filter(d -> !d.equals(source))
                    .sorted().findFirst().orElseThrow();
            assertTrue(Path.of(destination).isAbsolute(), destination);

            admin.alterReplicaLogDirs(Map.of(replica, destination)).all().get(WAIT_S, TimeUnit.SECONDS);
            expected.addAll(produce(p, topic, "during", 500));

            // Until the copy has caught up the replica is current in the source and future in
            // the destination; then it is only in the destination.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (true) {
                info = admin.describeReplicaLogDirs(List.of(replica)).all()
                        .get(WAIT_S, TimeUnit.SECONDS).get(replica);
                if (info.getFutureReplicaLogDir() == null) {
                    assertEquals(destination, info.getCurrentReplicaLogDir());
                    break;
                }
                assertEquals(source, info.getCurrentReplicaLogDir());
                assertEquals(destination, info.getFutureReplicaLogDir());
                assertTrue(info.getFutureReplicaOffsetLag() >= 0, info.toString());
                assertTrue(System.nanoTime() < deadline, "the move did not complete: " + info);
                Thread.sleep(100);
            }
            assertEquals(new TreeSet<>(List.of(destination)), placesOf(tp));
            if (!broker.kind().equals("external")) {
                assertFalse(Files.exists(Path.of(source, topic + "-0")), "the source copy is removed");
                assertTrue(Files.isDirectory(Path.of(destination, topic + "-0")));
            }
            expected.addAll(produce(p, topic, "after", 500));
        }
        assertEquals(expected, readAll(tp, expected.size()));

        // Already there: nothing to do, and no error.
        String here = admin.describeReplicaLogDirs(List.of(replica)).all().get(WAIT_S, TimeUnit.SECONDS)
                .get(replica).getCurrentReplicaLogDir();
        admin.alterReplicaLogDirs(Map.of(replica, here)).all().get(WAIT_S, TimeUnit.SECONDS);
        assertEquals(new TreeSet<>(List.of(here)), placesOf(tp));
    }

    @Test
    void alterReplicaLogDirsRefusesUnknownDirsAndTopics() throws Exception {
        String topic = "log-dir-errors";
        create(topic);
        String aDir = logDirs().keySet().iterator().next();
        ExecutionException notADir = assertThrows(ExecutionException.class, () -> admin
                .alterReplicaLogDirs(Map.of(new TopicPartitionReplica(topic, 0, nodeId), aDir + "-not-configured"))
                .all().get(WAIT_S, TimeUnit.SECONDS));
        assertInstanceOf(LogDirNotFoundException.class, notADir.getCause());
        ExecutionException noTopic = assertThrows(ExecutionException.class, () -> admin
                .alterReplicaLogDirs(Map.of(new TopicPartitionReplica("no-such-topic", 0, nodeId), aDir))
                .all().get(WAIT_S, TimeUnit.SECONDS));
        assertInstanceOf(UnknownTopicOrPartitionException.class, noTopic.getCause());
    }
}
