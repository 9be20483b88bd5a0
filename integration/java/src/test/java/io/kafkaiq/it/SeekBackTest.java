package io.kafkaiq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
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
 * A consumer that moves its position back to the offset its fetch session last sent is read from
 * there. The Java client leaves such a partition out of its next incremental fetch (its fetch
 * data did not change), so only a broker that keeps the session's offset as the client sent it
 * serves the records again: retry-by-seek after a partial poll, and an eager rebalance that hands
 * a partition back at its committed offset.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class SeekBackTest {
    static final String TOPIC = "seek-back";
    static final int PARTITIONS = 3;
    static final int RECORDS = 3000;
    static final Duration POLL_DEADLINE = Duration.ofSeconds(30);

    static BrokerUnderTest broker;

    @BeforeAll
    static void start() throws Exception {
        broker = BrokerUnderTest.start();
        try (Admin admin = broker.admin()) {
            admin.createTopics(List.of(new NewTopic(TOPIC, PARTITIONS, (short) 1)))
                    .all().get(30, TimeUnit.SECONDS);
        }
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < RECORDS; i++) {
                for (int part = 0; part < PARTITIONS; part++) {
                    producer.send(new ProducerRecord<>(TOPIC, part, null, value(part, i)));
                }
            }
            producer.flush();
        }
    }

    @AfterAll
    static void stop() throws Exception {
        if (broker != null) {
            broker.close();
        }
    }

    static String value(int partition, long offset) {
        return "p" + partition + "-" + offset;
    }

    static Properties props() {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10);
        return p;
    }

    /**
     * Polls until a record of {@code tp} arrives and checks it is the one at {@code expected};
     * every record of any partition must be the next one of its partition ({@code next}).
     */
    static void pollExpecting(KafkaConsumer<String, String> c, Map<Integer, Long> next, TopicPartition tp,
            long expected) {
        next.put(tp.partition(), expected);
        long deadline = System.nanoTime() + POLL_DEADLINE.toNanos();
        while (true) {
            assertTrue(System.nanoTime() < deadline, "no record of " + tp + " at " + expected);
            ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
            boolean seen = false;
            for (ConsumerRecord<String, String> r : records) {
                Long want = next.get(r.partition());
                if (want != null) {
                    assertEquals(want.longValue(), r.offset(), "partition " + r.partition() + " skipped records");
                }
                assertEquals(value(r.partition(), r.offset()), r.value());
                next.put(r.partition(), r.offset() + 1);
                seen |= r.partition() == tp.partition();
            }
            if (seen) {
                return;
            }
        }
    }

    @Test
    void seekBackAfterAPartialPollReadsFromTheSoughtOffsetEveryRound() {
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(props())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < PARTITIONS; p++) {
                tps.add(new TopicPartition(TOPIC, p));
            }
            c.assign(tps);
            Map<Integer, Long> next = new HashMap<>();
            for (TopicPartition tp : tps) {
                c.seek(tp, 0);
                next.put(tp.partition(), 0L);
            }
            // Each round: read on from a new offset (a fetch sent from there), take one poll's
            // worth, then seek back to that offset, the one the session holds, and retry.
            long[] starts = {0, 0, 700, 700, 1500, 2990};
            for (long start : starts) {
                for (TopicPartition tp : tps) {
                    c.seek(tp, start);
                    pollExpecting(c, next, tp, start);
                    c.seek(tp, start);
                    pollExpecting(c, next, tp, start);
                }
            }
        }
    }

    @Test
    void anEagerRebalanceHandsPartitionsBackAtTheirCommittedOffsets() throws Exception {
        Properties p = props();
        p.put(ConsumerConfig.GROUP_ID_CONFIG, "seek-back-eager");
        p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, RangeAssignor.class.getName());
        List<Collection<TopicPartition>> assigned = new ArrayList<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(TOPIC), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {}

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    assigned.add(partitions);
                }
            });
            Map<Integer, Long> next = new HashMap<>();
            TopicPartition first = new TopicPartition(TOPIC, 0);
            pollExpecting(c, next, first, 0);
            assertEquals(PARTITIONS, c.assignment().size(), "one member owns every partition");
            for (long offset : new long[] {0, 400, 1200}) {
                // Read from `offset` on every partition (the session now holds it), commit it as
                // not yet processed, and rebalance: each partition comes back at `offset`.
                Map<TopicPartition, OffsetAndMetadata> commit = new HashMap<>();
                for (TopicPartition tp : c.assignment()) {
                    c.seek(tp, offset);
                    pollExpecting(c, next, tp, offset);
                    commit.put(tp, new OffsetAndMetadata(offset));
                }
                c.commitSync(commit);
                int rebalances = assigned.size();
                c.enforceRebalance();
                for (TopicPartition tp : commit.keySet()) {
                    next.put(tp.partition(), offset);
                }
                pollExpecting(c, next, first, offset);
                assertTrue(assigned.size() > rebalances, "the consumer rejoined");
                for (TopicPartition tp : commit.keySet()) {
                    if (next.get(tp.partition()) == offset) {
                        pollExpecting(c, next, tp, offset);
                    }
                }
            }
        }
    }
}
