// How fast a consumer group settles after a member joins or leaves, with the KIP-848 protocol
// (group.protocol=consumer) or the classic one, as its members see it: the time from starting
// (or closing) a member until every partition of the topic is assigned to exactly one member and
// the newcomer has its share. Run with the source launcher against a Kafka client's jars:
//   java -cp "<kafka-libs>/*" GroupRebalance.java <bootstrap> <topic> <partitions> <members> <rounds> <consumer|classic> [rate]
// The topic is created if missing. Prints one line per measured change and then
//   REBALANCE <join p50 ms> <join max ms> <leave p50 ms> <leave max ms>
// With a rate (records per second), a producer writes at that rate throughout, and after the
// join/leave rounds every member is restarted in turn (closed, then replaced by a new one that
// must get its share before the next goes). Then
//   ROLLING <seconds> <records consumed per second> <p99 produce-to-consume ms> <max ms>
// over the rolling restart, against the same figures before it (STEADY ...).

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;
import java.util.concurrent.ConcurrentLinkedQueue;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class GroupRebalance {
    /** Records consumed by every member, and their produce-to-consume delays in ms. */
    static final LongAdder CONSUMED = new LongAdder();
    static final ConcurrentLinkedQueue<Long> DELAYS = new ConcurrentLinkedQueue<>();

    static final class Member implements AutoCloseable {
        final AtomicReference<Set<TopicPartition>> owned = new AtomicReference<>(Set.of());
        final AtomicBoolean running = new AtomicBoolean(true);
        final Thread thread;

        Member(Properties props, String topic) {
            thread = new Thread(() -> {
                try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
                    c.subscribe(List.of(topic));
                    while (running.get()) {
                        var records = c.poll(Duration.ofMillis(5));
                        long now = System.currentTimeMillis();
                        for (ConsumerRecord<byte[], byte[]> r : records) {
                            DELAYS.add(now - r.timestamp());
                        }
                        CONSUMED.add(records.count());
                        if (!records.isEmpty()) {
                            try {
                                c.commitSync();
                            } catch (org.apache.kafka.common.KafkaException e) {
                                // A commit racing a rebalance (a stale epoch): the next
                                // owner reads from the last committed offset.
                            }
                        }
                        owned.set(new HashSet<>(c.assignment()));
                    }
                    owned.set(Set.of());
                }
            });
            thread.setDaemon(true);
            thread.start();
        }

        @Override
        public void close() throws InterruptedException {
            running.set(false);
            thread.join(60_000);
        }
    }

    /** Every partition owned by exactly one member, and each member with at least `min`. */
    static boolean settled(List<Member> members, int partitions, int min) {
        Set<TopicPartition> all = new HashSet<>();
        int total = 0;
        for (Member m : members) {
            Set<TopicPartition> s = m.owned.get();
            if (s.size() < min) return false;
            total += s.size();
            all.addAll(s);
        }
        return total == partitions && all.size() == partitions;
    }

    static long awaitSettled(List<Member> members, int partitions, int min, long startNanos)
            throws InterruptedException {
        long deadline = startNanos + TimeUnit.SECONDS.toNanos(120);
        while (!settled(members, partitions, min)) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("the group did not settle in 120 s");
            }
            Thread.sleep(2);
        }
        return (System.nanoTime() - startNanos) / 1_000_000;
    }

    static long percentile(List<Long> values, double p) {
        List<Long> sorted = new ArrayList<>(values);
        Collections.sort(sorted);
        return sorted.get((int) Math.min(sorted.size() - 1, Math.floor(p * sorted.size())));
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        int size = Integer.parseInt(args[3]);
        int rounds = Integer.parseInt(args[4]);
        String protocol = args[5];
        Properties admin = new Properties();
        admin.put("bootstrap.servers", bootstrap);
        try (Admin a = Admin.create(admin)) {
            try {
                a.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
            } catch (java.util.concurrent.ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) throw e;
            }
        }
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", "rebalance-" + topic + "-" + protocol);
        props.put("group.protocol", protocol);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        if (protocol.equals("classic")) {
            props.put("partition.assignment.strategy",
                    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");
        }
        List<Member> members = new ArrayList<>();
        for (int i = 0; i < size; i++) {
            members.add(new Member(props, topic));
        }
        awaitSettled(members, partitions, partitions / size, System.nanoTime());
        List<Long> joins = new ArrayList<>();
        List<Long> leaves = new ArrayList<>();
        for (int r = 0; r < rounds; r++) {
            long start = System.nanoTime();
            members.add(new Member(props, topic));
            long join = awaitSettled(members, partitions, partitions / members.size(), start);
            joins.add(join);
            System.out.println("join " + r + " " + join + " ms");
            Member leaving = members.remove(0);
            start = System.nanoTime();
            leaving.close();
            long leave = awaitSettled(members, partitions, partitions / members.size(), start);
            leaves.add(leave);
            System.out.println("leave " + r + " " + leave + " ms");
        }
        System.out.printf("REBALANCE %d %d %d %d%n", percentile(joins, 0.5), percentile(joins, 1.0),
                percentile(leaves, 0.5), percentile(leaves, 1.0));
        if (args.length > 6) {
            rolling(bootstrap, topic, partitions, props, members, Integer.parseInt(args[6]));
        }
        for (Member m : members) {
            m.close();
        }
    }

    /** The STEADY and ROLLING lines: throughput and delays before and during a rolling restart. */
    static void rolling(String bootstrap, String topic, int partitions, Properties props,
            List<Member> members, int rate) throws Exception {
        AtomicBoolean producing = new AtomicBoolean(true);
        Thread producer = new Thread(() -> {
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("linger.ms", "5");
            p.put("key.serializer", ByteArraySerializer.class.getName());
            p.put("value.serializer", ByteArraySerializer.class.getName());
            byte[] value = new byte[100];
            try (KafkaProducer<byte[], byte[]> producer1 = new KafkaProducer<>(p)) {
                long start = System.nanoTime();
                long sent = 0;
                while (producing.get()) {
                    long due = (System.nanoTime() - start) * rate / 1_000_000_000L;
                    for (; sent < due; sent++) {
                        producer1.send(new ProducerRecord<>(topic, value));
                    }
                    Thread.sleep(1);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        producer.start();
        Thread.sleep(5_000); // the group catches up with the producer
        window("STEADY", () -> Thread.sleep(10_000));
        window("ROLLING", () -> {
            int n = members.size();
            for (int i = 0; i < n; i++) {
                Member leaving = members.remove(0);
                leaving.close();
                members.add(new Member(props, topic));
                awaitSettled(members, partitions, partitions / members.size(), System.nanoTime());
            }
        });
        producing.set(false);
        producer.join();
    }

    interface Step {
        void run() throws Exception;
    }

    static void window(String name, Step step) throws Exception {
        DELAYS.clear();
        long before = CONSUMED.sum();
        long start = System.nanoTime();
        step.run();
        double seconds = (System.nanoTime() - start) / 1e9;
        List<Long> delays = new ArrayList<>(DELAYS);
        long consumed = CONSUMED.sum() - before;
        System.out.printf("%s %.1f %.0f %d %d%n", name, seconds, consumed / seconds,
                delays.isEmpty() ? -1 : percentile(delays, 0.99),
                delays.isEmpty() ? -1 : percentile(delays, 1.0));
    }
}
