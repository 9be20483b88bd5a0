package io.kafkaiq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The consumer group protocol of KIP-848 ({@code group.protocol=consumer}) with the Java
 * client: members join, share and hand over partitions with manual commits, so that every
 * record is read exactly once and no partition is ever owned by two members at once; a regex
 * subscription picks up a new topic; added partitions are assigned; the group survives a
 * broker restart; the admin client describes the group.
 */
class ConsumerProtocolTest {
    static final Duration TIMEOUT = Duration.ofSeconds(90);

    static BrokerUnderTest broker;

    @BeforeAll
    static void start() throws Exception {
        // Short heartbeats and sessions so rebalances and crashes play out in seconds; the
        // same keys and bounds as Kafka's.
        broker = BrokerUnderTest.start(1, List.of(
                "group.consumer.min.heartbeat.interval.ms=500",
                "group.consumer.heartbeat.interval.ms=500",
                "group.consumer.min.session.timeout.ms=6000",
                "group.consumer.session.timeout.ms=6000"));
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
        long deadline = System.nanoTime() + TIMEOUT.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out waiting until " + what);
            }
            Thread.sleep(50);
        }
    }

    /**
     * Who owns each partition right now, by the members' own rebalance callbacks. An
     * assignment of a partition another member still owns is a violation.
     */
    static final class Ownership {
        final Map<TopicPartition, String> owner = new HashMap<>();
        final List<String> violations = new CopyOnWriteArrayList<>();

        synchronized void assigned(String member, Collection<TopicPartition> tps) {
            for (TopicPartition tp : tps) {
                String other = owner.get(tp);
                if (other != null && !other.equals(member)) {
                    violations.add(tp + " assigned to " + member + " while " + other + " owns it");
                }
                owner.put(tp, member);
            }
        }

        synchronized void released(String member, Collection<TopicPartition> tps) {
            for (TopicPartition tp : tps) {
                owner.remove(tp, member);
            }
        }
    }

    /** A consumer of the new protocol polling in its own thread, committing what it read. */
    static final class Member implements AutoCloseable {
        final String name;
        final AtomicReference<Set<TopicPartition>> assignment = new AtomicReference<>(Set.of());
        final Map<String, Integer> seen;
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        private final AtomicBoolean running = new AtomicBoolean(true);
        private final Thread thread;

        Member(String name, String group, Ownership ownership, Map<String, Integer> seen,
                List<String> topics, String pattern) {
            this(name, group, "consumer", ownership, seen, topics, pattern);
        }

        Member(String name, String group, String protocol, Ownership ownership,
                Map<String, Integer> seen, List<String> topics, String pattern) {
            this(name, group, protocol, ownership, seen, topics, pattern, null);
        }

        /** A member of {@code protocol}: "consumer" (KIP-848) or "classic"; static with an instance id. */
        Member(String name, String group, String protocol, Ownership ownership,
                Map<String, Integer> seen, List<String> topics, String pattern, String instanceId) {
            this.name = name;
            this.seen = seen;
            Properties p = new Properties();
            p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
            if (instanceId != null) {
                p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instanceId);
            }
            if (protocol.equals("classic")) {
                // Heartbeats often enough that a rebalance is noticed in well under a second.
                p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
                p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
            }
            p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            p.put(ConsumerConfig.CLIENT_ID_CONFIG, name);
            p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            thread = new Thread(() -> run(p, ownership, topics, pattern), "member-" + name);
            thread.start();
        }

        private void run(Properties props, Ownership ownership, List<String> topics, String pattern) {
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(props)) {
                ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                        // What was read is committed before the partitions go elsewhere.
                        c.commitSync();
                        ownership.released(name, partitions);
                    }

                    @Override
                    public void onPartitionsLost(Collection<TopicPartition> partitions) {
                        ownership.released(name, partitions);
                    }

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                        ownership.assigned(name, partitions);
                    }
                };
                if (pattern != null) {
                    // Resolved by the broker (KIP-848), so a new topic is picked up at once.
                    c.subscribe(new SubscriptionPattern(pattern), listener);
                } else {
                    c.subscribe(topics, listener);
                }
                while (running.get()) {
                    var records = c.poll(Duration.ofMillis(100));
                    for (ConsumerRecord<String, String> r : records) {
                        seen.merge(r.value(), 1, Integer::sum);
                    }
                    if (!records.isEmpty()) {
                        c.commitSync();
                    }
                    assignment.set(new HashSet<>(c.assignment()));
                }
            } catch (Throwable t) {
                failure.set(t);
            }
        }

        int size() {
            return assignment.get().size();
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

    /** kafka-consumer-groups against the broker; asserts it exits 0 without an exception. */
    static String cli(String... args) throws Exception {
        List<String> all = new ArrayList<>(List.of("--bootstrap-server", broker.bootstrap()));
        all.addAll(List.of(args));
        BrokerUnderTest.ToolResult r = BrokerUnderTest.runTool(Duration.ofSeconds(60),
                "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", all.toArray(String[]::new));
        assertEquals(0, r.exitCode(), "kafka-consumer-groups " + all + ":\n" + r.output());
        assertTrue(!r.output().contains("Exception"), r.output());
        return r.output();
    }

    static void assertExactlyOnce(Map<String, Integer> seen, Set<String> expected) {
        List<String> problems = new ArrayList<>();
        for (String v : expected) {
            int n = seen.getOrDefault(v, 0);
            if (n != 1) {
                problems.add(v + " read " + n + " times");
            }
        }
        for (String v : seen.keySet()) {
            if (!expected.contains(v)) {
                problems.add(v + " was never produced");
            }
        }
        assertTrue(problems.isEmpty(), problems.size() + " problems, first: "
                + problems.subList(0, Math.min(10, problems.size())));
    }

    @Test
    @Timeout(value = 5, unit = TimeUnit.MINUTES)
    void membersJoinLeaveAndCrashWithEveryRecordReadOnceAndNoPartitionOwnedTwice() throws Exception {
        String topic = "kip848-six";
        String group = "kip848-g";
        createTopic(topic, 6);
        Ownership ownership = new Ownership();
        Map<String, Integer> seen = new ConcurrentHashMap<>();
        Set<String> expected = new HashSet<>();
        int round = 0;
        Member a = new Member("a", group, ownership, seen, List.of(topic), null);
        Member b = null;
        Member c = null;
        try {
            await("a owns all 6", () -> a.size() == 6);
            for (int i = 0; i < 200; i++) expected.add("r" + round + "-" + i);
            produce(topic, "r" + round++ + "-", 200);

            b = new Member("b", group, ownership, seen, List.of(topic), null);
            c = new Member("c", group, ownership, seen, List.of(topic), null);
            Member fb = b;
            Member fc = c;
            await("a, b and c own 2 each", () -> a.size() == 2 && fb.size() == 2 && fc.size() == 2);
            for (int i = 0; i < 200; i++) expected.add("r" + round + "-" + i);
            produce(topic, "r" + round++ + "-", 200);

            // The admin client sees a consumer-protocol group.
            try (Admin admin = broker.admin()) {
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group))
                        .describedGroups().get(group).get(30, TimeUnit.SECONDS);
                assertEquals(GroupType.CONSUMER, d.type());
                assertEquals(3, d.members().size());
                assertTrue(d.groupEpoch().orElse(0) >= 3, "group epoch " + d.groupEpoch());
            }
            // kafka-consumer-groups describes it: every partition with its member, and the
            // members with their epochs (ConsumerGroupDescribe).
            String offsets = cli("--describe", "--group", group);
            for (int p = 0; p < 6; p++) {
                int partition = p;
                assertTrue(offsets.lines().anyMatch(l -> l.matches(
                                "\\s*" + group + "\\s+" + topic + "\\s+" + partition + "\\s.*\\s[abc]\\s*")),
                        "partition " + p + " with its member in:\n" + offsets);
            }
            String members = cli("--describe", "--group", group, "--members");
            assertEquals(3, members.lines().filter(l -> l.trim().startsWith(group)).count(), members);
            String listed = cli("--list", "--type", "consumer");
            assertTrue(listed.lines().anyMatch(l -> l.startsWith(group) && l.contains("Consumer")
                    || l.trim().equals(group)), listed);

            // b leaves cleanly; a and c take its partitions over.
            b.close();
            b = null;
            await("a and c own 3 each", () -> a.size() == 3 && fc.size() == 3);
            for (int i = 0; i < 200; i++) expected.add("r" + round + "-" + i);
            produce(topic, "r" + round++ + "-", 200);

            // Partitions added to the topic are assigned.
            try (Admin admin = broker.admin()) {
                admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(8)))
                        .all().get(30, TimeUnit.SECONDS);
            }
            await("a and c own 4 each", () -> a.size() == 4 && fc.size() == 4);
            for (int i = 0; i < 200; i++) expected.add("r" + round + "-" + i);
            produce(topic, "r" + round++ + "-", 200);

            await("every record read", () -> expected.stream().allMatch(seen::containsKey));
        } finally {
            for (Member m : new Member[] {a, b, c}) {
                if (m != null) m.close();
            }
        }
        assertTrue(ownership.violations.isEmpty(), "ownership violations: " + ownership.violations);
        assertExactlyOnce(seen, expected);
    }

    @Test
    @Timeout(value = 4, unit = TimeUnit.MINUTES)
    void aRegexSubscriptionPicksUpANewTopicAndTheGroupSurvivesARestart() throws Exception {
        String group = "kip848-rx";
        createTopic("kip848-rx-1", 2);
        Ownership ownership = new Ownership();
        Map<String, Integer> seen = new ConcurrentHashMap<>();
        Set<String> expected = new HashSet<>();
        Member m = new Member("rx", group, ownership, seen, List.of(), "kip848-rx-.*");
        try {
            await("rx owns kip848-rx-1", () -> m.size() == 2);
            createTopic("kip848-rx-2", 3);
            await("rx owns kip848-rx-2 too", () -> m.size() == 5);
            for (int i = 0; i < 100; i++) expected.add("a" + i);
            produce("kip848-rx-2", "a", 100);
            await("the first records read", () -> expected.stream().allMatch(seen::containsKey));

            // The coordinator restarts: the group comes back from __consumer_offsets and the
            // member keeps reading from its committed offsets.
            broker.restart();
            for (int i = 0; i < 100; i++) expected.add("b" + i);
            produce("kip848-rx-2", "b", 100);
            await("records after the restart read", () -> expected.stream().allMatch(seen::containsKey));
            try (Admin admin = broker.admin()) {
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group))
                        .describedGroups().get(group).get(30, TimeUnit.SECONDS);
                assertEquals(GroupType.CONSUMER, d.type());
                assertEquals(1, d.members().size());
                assertEquals(5, d.members().iterator().next().assignment().topicPartitions().size());
                await("the group is stable", () -> {
                    try (Admin a2 = broker.admin()) {
                        return a2.describeConsumerGroups(List.of(group)).describedGroups().get(group)
                                .get(30, TimeUnit.SECONDS).groupState() == GroupState.STABLE;
                    } catch (Exception e) {
                        return false;
                    }
                });
            }
        } finally {
            m.close();
        }
        assertTrue(ownership.violations.isEmpty(), "ownership violations: " + ownership.violations);
        assertExactlyOnce(seen, expected);
    }

    static GroupType groupType(String group) throws Exception {
        try (Admin admin = broker.admin()) {
            return admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)
                    .get(30, TimeUnit.SECONDS).type();
        }
    }

    /**
     * A rolling upgrade of a group's members from the classic protocol to the consumer
     * protocol, and back: the group converts when the first consumer-protocol member joins
     * and converts back when the last one leaves (group.consumer.migration.policy's default,
     * bidirectional), with records produced at every step read exactly once and no partition
     * owned by two members at once.
     */
    @Test
    @Timeout(value = 6, unit = TimeUnit.MINUTES)
    void aRollingUpgradeFromClassicToConsumerAndBackReadsEveryRecordOnce() throws Exception {
        rollingUpgrade("kip848-migrate", false);
    }

    /**
     * The same with static members ({@code group.instance.id}): a restarted process takes its
     * old member's place under the other protocol (a classic static member sends no LeaveGroup,
     * and a consumer-protocol static member leaves with epoch -2, keeping its partitions until
     * it is replaced).
     */
    @Test
    @Timeout(value = 6, unit = TimeUnit.MINUTES)
    void aRollingUpgradeOfStaticMembersReadsEveryRecordOnce() throws Exception {
        rollingUpgrade("kip848-migrate-static", true);
    }

    void rollingUpgrade(String topic, boolean staticMembers) throws Exception {
        String group = topic + "-g";
        createTopic(topic, 6);
        Ownership ownership = new Ownership();
        Map<String, Integer> seen = new ConcurrentHashMap<>();
        Set<String> expected = new HashSet<>();
        int[] round = {0};
        Member[] members = new Member[3];
        try {
            for (int i = 0; i < 3; i++) {
                members[i] = new Member("classic-" + i, group, "classic", ownership, seen, List.of(topic), null,
                        staticMembers ? "instance-" + i : null);
            }
            awaitSpread(members);
            produceRound(topic, expected, round);
            assertEquals(GroupType.CLASSIC, groupType(group));

            // Upgrade: one member at a time leaves and comes back with the consumer protocol.
            for (int i = 0; i < 3; i++) {
                members[i].close();
                members[i] = new Member("consumer-" + i, group, "consumer", ownership, seen, List.of(topic), null,
                        staticMembers ? "instance-" + i : null);
                awaitSpread(members);
                produceRound(topic, expected, round);
                assertEquals(GroupType.CONSUMER, groupType(group), "after upgrading member " + i);
            }
            // Downgrade: the same, back to the classic protocol; the group is classic again
            // once the last consumer-protocol member has left.
            for (int i = 0; i < 3; i++) {
                members[i].close();
                members[i] = new Member("classic-again-" + i, group, "classic", ownership, seen, List.of(topic), null,
                        staticMembers ? "instance-" + i : null);
                awaitSpread(members);
                produceRound(topic, expected, round);
                assertEquals(i < 2 ? GroupType.CONSUMER : GroupType.CLASSIC, groupType(group),
                        "after downgrading member " + i);
            }
            await("every record read", () -> expected.stream().allMatch(seen::containsKey));
        } finally {
            for (Member m : members) {
                if (m != null) m.close();
            }
        }
        assertTrue(ownership.violations.isEmpty(), "ownership violations: " + ownership.violations);
        assertExactlyOnce(seen, expected);
    }

    /** Every member owns two of the six partitions. */
    static void awaitSpread(Member[] members) throws InterruptedException {
        await("each member owns 2 of 6", () -> {
            for (Member m : members) {
                if (m == null || m.size() != 2) return false;
            }
            return true;
        });
    }

    static void produceRound(String topic, Set<String> expected, int[] round) throws Exception {
        String prefix = "m" + round[0]++ + "-";
        for (int i = 0; i < 100; i++) expected.add(prefix + i);
        produce(topic, prefix, 100);
    }
}
