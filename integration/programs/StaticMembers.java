// Static group members (KIP-345) with the Java KafkaConsumer, for integration/suites/37-cluster-cli.sh:
// N consumers with group.instance.id subscribe to one pattern at the same moment (each polls in
// its own thread, as separate applications would), against a broker with
// group.initial.rebalance.delay.ms=0.
//
// - First assignment: each member's listener sees one onPartitionsAssigned with partitions and
//   no revocation of any partition, and together they hold every partition of the topic once.
// - Restart: the last member closes (a static member sends no LeaveGroup) and comes back with
//   the same group.instance.id: it gets the same partitions back within the session timeout and
//   the other members see no rebalance.
//
// Run as a single source file: java -cp "$(integration/kafka-libs.sh)/*" StaticMembers.java
//   BOOTSTRAP TOPIC PARTITIONS N
// Prints `ok: ...` lines; exits 1 on the first wrong outcome.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.TreeSet;
import java.util.regex.Pattern;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class StaticMembers {
    static final class Member implements ConsumerRebalanceListener, Runnable {
        final List<String> events = java.util.Collections.synchronizedList(new ArrayList<>());
        final java.util.Set<Integer> held = java.util.Collections.synchronizedSet(new TreeSet<>());
        final Properties props = new Properties();
        final String topic;
        final java.util.concurrent.CountDownLatch subscribed = new java.util.concurrent.CountDownLatch(1);
        volatile boolean running = true;
        final Thread thread = new Thread(this);

        Member(String bootstrap, String group, int i, String topic) {
            this.topic = topic;
            props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "member-" + i);
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
            props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
            props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        }

        /** Polls until stopped, then closes (as a static member: no LeaveGroup). */
        @Override
        public void run() {
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
                consumer.subscribe(Pattern.compile(Pattern.quote(topic) + ".*"), this);
                subscribed.countDown();
                while (running) {
                    consumer.poll(Duration.ofMillis(100));
                }
            }
        }

        boolean assigned() {
            synchronized (events) {
                return events.stream().anyMatch(e -> e.startsWith("assign"));
            }
        }

        void stop() throws InterruptedException {
            running = false;
            thread.join();
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
            TreeSet<Integer> ps = new TreeSet<>();
            parts.forEach(tp -> ps.add(tp.partition()));
            held.clear();
            held.addAll(ps);
            events.add("assign " + ps);
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
            // The eager protocol calls this before every join, the first one included.
            if (!parts.isEmpty()) {
                events.add("revoke " + parts.size());
            }
        }
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAIL: " + what);
            System.exit(1);
        }
        System.out.println("ok: " + what);
    }

    /** Waits until each member has had an assignment (or the deadline), then a while longer. */
    static void awaitAssigned(List<Member> members, long timeoutMs) throws InterruptedException {
        long end = System.currentTimeMillis() + timeoutMs;
        while (System.currentTimeMillis() < end && !members.stream().allMatch(Member::assigned)) {
            Thread.sleep(50);
        }
        Thread.sleep(2_000);
    }

    public static void main(String[] args) throws InterruptedException {
        String bootstrap = args[0], topic = args[1];
        int partitions = Integer.parseInt(args[2]), n = Integer.parseInt(args[3]);
        String group = "g-java-static-" + n + "-" + System.nanoTime();
        List<Member> members = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            members.add(new Member(bootstrap, group, i, topic));
        }
        members.forEach(m -> m.thread.start());
        awaitAssigned(members, 60_000);
        TreeSet<Integer> all = new TreeSet<>();
        int held = 0;
        for (Member m : members) {
            check(m.events.size() == 1 && m.events.get(0).startsWith("assign") && !m.held.isEmpty(),
                    n + " members: one assignment each, no revocation " + m.events);
            all.addAll(m.held);
            held += m.held.size();
        }
        check(all.size() == partitions && held == partitions, "every partition held once " + all);

        Member last = members.get(n - 1);
        TreeSet<Integer> before = new TreeSet<>(last.held);
        last.stop();
        members.forEach(m -> m.events.clear());
        Member again = new Member(bootstrap, group, n - 1, topic);
        members.set(n - 1, again);
        long started = System.currentTimeMillis();
        again.thread.start();
        awaitAssigned(List.of(again), 20_000);
        long took = System.currentTimeMillis() - started - 2_000;
        check(again.events.equals(List.of("assign " + before)),
                "the restarted member got its partitions back " + again.events);
        check(took < 10_000, "within the session timeout (" + took + " ms)");
        for (Member m : members.subList(0, n - 1)) {
            check(m.events.isEmpty(), "the others saw no rebalance " + m.events);
        }
        for (Member m : members) {
            m.stop();
        }
    }
}
