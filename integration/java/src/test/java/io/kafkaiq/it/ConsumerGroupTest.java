package io.kafkaiq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Consumer groups with the Java client's classic protocol (the 4.x default): range and
 * cooperative-sticky assignment across members, takeover when a member leaves, committed offsets
 * surviving a broker restart, and a static member coming back without a rebalance.
 */
class ConsumerGroupTest {
    static final Duration ASSIGN_TIMEOUT = Duration.ofSeconds(60);

    static BrokerUnderTest broker;

    @BeforeAll
    static void start() throws Exception {
        broker = BrokerUnderTest.start();
    }

    @AfterAll
    static void stop() throws Exception {
        if (broker != null) {
            broker.close();
        }
    }

    static void createTopic(String name, int partitions) throws Exception {
        try (Admin admin = broker.admin()) {
            admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1)))
                    .all().get(30, TimeUnit.SECONDS);
        }
    }

    static Properties consumerProps(String group) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return p;
    }

    static void produce(String topic, String prefix, int count) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, prefix + i, prefix + i));
            }
            producer.flush();
        }
    }

    static void await(String what, BooleanSupplier condition) throws InterruptedException {
        long deadline = System.nanoTime() + ASSIGN_TIMEOUT.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out waiting until " + what);
            }
            Thread.sleep(100);
        }
    }

    /**
     * A consumer polling in its own thread (KafkaConsumer is single-threaded), publishing its
     * current assignment, the records it saw and its rebalance callbacks.
     */
    static final class Member implements AutoCloseable {
        final String name;
        final AtomicReference<Set<TopicPartition>> assignment = new AtomicReference<>(Set.of());
        final AtomicInteger generation = new AtomicInteger(-1);
        /** Heartbeat responses the member's coordinator has received (its heartbeat-total). */
        final AtomicLong heartbeats = new AtomicLong(0);
        final List<Set<TopicPartition>> revoked = new CopyOnWriteArrayList<>();
        final List<Set<TopicPartition>> assigned = new CopyOnWriteArrayList<>();
        final Map<String, Integer> seen = new ConcurrentHashMap<>();
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        private final AtomicBoolean running = new AtomicBoolean(true);
        private final Thread thread;

        Member(String name, Properties props, String topic) {
            this.name = name;
            thread = new Thread(() -> run(props, topic), "member-" + name);
            thread.start();
        }

        private void run(Properties props, String topic) {
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(props)) {
                c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                        if (!partitions.isEmpty()) {
                            revoked.add(new HashSet<>(partitions));
                        }
                    }

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                        if (!partitions.isEmpty()) {
                            assigned.add(new HashSet<>(partitions));
                        }
                    }
                });
                while (running.get()) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                        seen.merge(r.value(), 1, Integer::sum);
                    }
                    assignment.set(new HashSet<>(c.assignment()));
                    generation.set(c.groupMetadata().generationId());
                    heartbeats.set(heartbeatTotal(c));
                }
            } catch (Throwable t) {
                failure.set(t);
            }
        }

        int size() {
            return assignment.get().size();
        }

        /**
         * Waits until this member has had {@code n} more heartbeats answered. The consumer stops
         * heartbeating while it rejoins, so if the broker had started a rebalance before the first
         * of them, the member has rejoined by the last one, revoking its partitions first.
         */
        void awaitHeartbeats(String why, int n) throws InterruptedException {
            long from = heartbeats.get();
            await(n + " heartbeats of " + name + " " + why, () -> heartbeats.get() >= from + n);
        }

        private static long heartbeatTotal(KafkaConsumer<?, ?> c) {
            for (Map.Entry<MetricName, ? extends org.apache.kafka.common.Metric> e : c.metrics().entrySet()) {
                MetricName m = e.getKey();
                if (m.name().equals("heartbeat-total") && m.group().equals("consumer-coordinator-metrics")) {
                    return ((Number) e.getValue().metricValue()).longValue();
                }
            }
            return 0;
        }

        @Override
        public void close() throws Exception {
            running.set(false);
            thread.join(60_000);
            if (failure.get() != null) {
                throw new AssertionError("member " + name + " failed", failure.get());
            }
        }
    }

    @Test
    @Timeout(value = 3, unit = TimeUnit.MINUTES)
    void threeMembersShareSixPartitionsAndTheRestTakeOverWhenOneLeaves() throws Exception {
        String topic = "group-six";
        createTopic(topic, 6);
        Member a = new Member("a", consumerProps("g-six"), topic);
        Member b = new Member("b", consumerProps("g-six"), topic);
        Member c = new Member("c", consumerProps("g-six"), topic);
        try (a; b) {
            await("each of three members owns 2 partitions",
                    () -> a.size() == 2 && b.size() == 2 && c.size() == 2);
            Set<TopicPartition> all = new HashSet<>(a.assignment.get());
            all.addAll(b.assignment.get());
            all.addAll(c.assignment.get());
            assertEquals(6, all.size(), "the three assignments cover all six partitions");
            c.close();
            await("the two remaining members own 3 partitions each", () -> a.size() == 3 && b.size() == 3);
            Set<TopicPartition> after = new HashSet<>(a.assignment.get());
            after.addAll(b.assignment.get());
            assertEquals(6, after.size(), "c's partitions were taken over");
            // Records produced now reach the survivors.
            produce(topic, "six-", 60);
            await("all 60 records consumed", () -> a.seen.size() + b.seen.size() == 60);
        }
    }

    @Test
    @Timeout(value = 4, unit = TimeUnit.MINUTES)
    void committedOffsetsSurviveABrokerRestart() throws Exception {
        String topic = "group-restart";
        String group = "g-restart";
        createTopic(topic, 3);
        produce(topic, "first-", 300);
        Properties props = consumerProps(group);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        Set<String> firstRun = new HashSet<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(props)) {
            c.subscribe(List.of(topic));
            long deadline = System.nanoTime() + ASSIGN_TIMEOUT.toNanos();
            while (firstRun.size() < 300 && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    assertTrue(firstRun.add(r.value()), "read twice: " + r.value());
                }
            }
            assertEquals(300, firstRun.size());
            c.commitSync(Duration.ofSeconds(30));
        }
        try (Admin admin = broker.admin()) {
            Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            assertEquals(300L, committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum(),
                    "committed offsets: " + committed);
        }

        broker.restart();
        produce(topic, "second-", 100);

        Set<String> secondRun = new HashSet<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(props)) {
            c.subscribe(List.of(topic));
            long deadline = System.nanoTime() + ASSIGN_TIMEOUT.toNanos();
            long quietUntil = Long.MAX_VALUE;
            // Read until all 100 arrived, then keep polling a few seconds to catch duplicates.
            while (System.nanoTime() < Math.min(deadline, quietUntil)) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    assertTrue(r.value().startsWith("second-"), "committed record read again: " + r.value());
                    assertTrue(secondRun.add(r.value()), "read twice: " + r.value());
                }
                if (secondRun.size() == 100 && quietUntil == Long.MAX_VALUE) {
                    quietUntil = System.nanoTime() + Duration.ofSeconds(3).toNanos();
                }
            }
        }
        assertEquals(100, secondRun.size(), "every record produced after the restart is read once");
    }

    @Test
    @Timeout(value = 3, unit = TimeUnit.MINUTES)
    void cooperativeStickyMovesOnlyThePartitionsThatChangeOwner() throws Exception {
        String topic = "group-coop";
        createTopic(topic, 4);
        Properties props = consumerProps("g-coop");
        props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
                CooperativeStickyAssignor.class.getName());
        try (Member a = new Member("a", props, topic)) {
            await("the first member owns all 4 partitions", () -> a.size() == 4);
            Set<TopicPartition> before = a.assignment.get();
            try (Member b = new Member("b", props, topic)) {
                await("two members own 2 partitions each", () -> a.size() == 2 && b.size() == 2);
                assertTrue(before.containsAll(a.assignment.get()), "a keeps a subset of what it had");
                // Cooperative rebalancing revokes only what moves: never all four at once.
                for (Set<TopicPartition> r : a.revoked) {
                    assertTrue(r.size() <= 2, "a revoked " + r);
                }
                assertEquals(1, a.revoked.size(), "one incremental revocation: " + a.revoked);
                assertEquals(a.revoked.get(0), b.assignment.get(), "what a gave up is what b got");
            }
        }
    }

    @Test
    @Timeout(value = 3, unit = TimeUnit.MINUTES)
    void staticMemberRestartingWithinItsSessionTimeoutRejoinsWithoutRebalance() throws Exception {
        String topic = "group-static";
        createTopic(topic, 4);
        Properties p1 = consumerProps("g-static");
        p1.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "static-1");
        p1.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "45000");
        p1.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        Properties p2 = consumerProps("g-static");
        p2.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "static-2");
        p2.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "45000");
        p2.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        try (Member two = new Member("static-2", p2, topic)) {
            Member one = new Member("static-1", p1, topic);
            await("two static members own 2 partitions each", () -> one.size() == 2 && two.size() == 2);
            await("both members see the same generation",
                    () -> one.generation.get() > 0 && one.generation.get() == two.generation.get());
            int generation = two.generation.get();
            Set<TopicPartition> oneHad = one.assignment.get();
            int twoAssignments = two.assigned.size();
            // A static member's close does not leave the group: the broker keeps its place, and
            // the other member's heartbeats go on being answered without a rebalance.
            one.close();
            two.awaitHeartbeats("after static-1 closed", 3);
            assertTrue(two.revoked.isEmpty(), "closing static-1 made the other member rejoin: " + two.revoked);
            try (Member again = new Member("static-1-again", p1, topic)) {
                await("the restarted member gets its partitions back", () -> again.size() == 2);
                assertEquals(oneHad, again.assignment.get(), "same partitions as before the restart");
                two.awaitHeartbeats("after static-1 came back", 3);
                assertEquals(generation, two.generation.get(), "no new generation for the other member");
                assertEquals(generation, again.generation.get(), "the restarted member is in the same generation");
                assertEquals(twoAssignments, two.assigned.size(), "the other member saw no rebalance");
                assertTrue(two.revoked.isEmpty(), "the other member lost nothing: " + two.revoked);
            }
        }
    }

    static String utf8(byte[] b) {
        return new String(b, StandardCharsets.UTF_8);
    }
}
