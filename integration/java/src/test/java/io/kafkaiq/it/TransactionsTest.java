package io.kafkaiq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The Java client's transactions (KIP-98): commit and abort seen at read_committed and
 * read_uncommitted, the last stable offset held back by an open transaction (seekToEnd and
 * endOffsets at read_committed stop there), a zombie fenced by a new instance with the same
 * transactional id, and a consume-transform-produce step whose offsets commit with it
 * (sendOffsetsToTransaction from a subscribed consumer's group).
 */
class TransactionsTest {
    static BrokerUnderTest broker;

    @BeforeAll
    static void start() throws Exception {
        broker = BrokerUnderTest.start(1, List.of(
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "transaction.state.log.num.partitions=5"));
    }

    @AfterAll
    static void stop() throws Exception {
        if (broker != null) {
            broker.close();
        }
    }

    static void createTopic(String topic, int partitions) throws Exception {
        try (Admin admin = broker.admin()) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }
    }

    static KafkaProducer<String, String> producer(String transactionalId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        KafkaProducer<String, String> producer = new KafkaProducer<>(p);
        producer.initTransactions();
        return producer;
    }

    static KafkaConsumer<String, String> consumer(String group, String isolation) {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return new KafkaConsumer<>(c);
    }

    /** Every value of `topic` from the beginning at `isolation`, once `expected` are read. */
    static Set<String> readAll(String topic, int partitions, String isolation, int expected) {
        Set<String> values = new TreeSet<>();
        try (KafkaConsumer<String, String> c = consumer("reader-" + topic + "-" + isolation, isolation)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < partitions; p++) {
                tps.add(new TopicPartition(topic, p));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(expected == 0 ? 3 : 60);
            int quietPolls = 0;
            while (System.nanoTime() < deadline) {
                int before = values.size();
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    values.add(r.value());
                }
                quietPolls = values.size() == before ? quietPolls + 1 : 0;
                if (values.size() >= expected && quietPolls >= 5) {
                    break;
                }
            }
        }
        return values;
    }

    static List<String> values(String prefix, int n) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(String.format("%s-%03d", prefix, i));
        }
        return out;
    }

    static void send(KafkaProducer<String, String> producer, String topic, List<String> values) {
        for (String v : values) {
            producer.send(new ProducerRecord<>(topic, v, v));
        }
    }

    @Test
    @Timeout(value = 3, unit = TimeUnit.MINUTES)
    void committedRecordsAreReadAndAbortedOnesOnlyAtReadUncommitted() throws Exception {
        String topic = "java-txn-commit-abort";
        createTopic(topic, 3);
        try (KafkaProducer<String, String> producer = producer("java-txn-commit-abort")) {
            producer.beginTransaction();
            send(producer, topic, values("committed", 30));
            producer.commitTransaction();
            producer.beginTransaction();
            send(producer, topic, values("aborted", 20));
            producer.flush();
            producer.abortTransaction();
        }
        Set<String> committed = new TreeSet<>(values("committed", 30));
        assertEquals(committed, readAll(topic, 3, "read_committed", 30));
        Set<String> all = new TreeSet<>(committed);
        all.addAll(values("aborted", 20));
        assertEquals(all, readAll(topic, 3, "read_uncommitted", 50));
    }

    @Test
    @Timeout(value = 3, unit = TimeUnit.MINUTES)
    void anOpenTransactionHoldsTheLastStableOffsetBack() throws Exception {
        String topic = "java-txn-lso";
        createTopic(topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> producer = producer("java-txn-lso")) {
            producer.beginTransaction();
            send(producer, topic, values("first", 5));
            producer.commitTransaction();
            producer.beginTransaction();
            send(producer, topic, values("open", 5));
            producer.flush();
            // The first transaction and its marker end at offset 6: the last stable offset.
            try (KafkaConsumer<String, String> c = consumer("lso-committed", "read_committed");
                    KafkaConsumer<String, String> u = consumer("lso-uncommitted", "read_uncommitted")) {
                assertEquals(Map.of(tp, 6L), c.endOffsets(List.of(tp)));
                assertEquals(Map.of(tp, 11L), u.endOffsets(List.of(tp)));
                c.assign(List.of(tp));
                c.seekToEnd(List.of(tp));
                assertEquals(6L, c.position(tp));
            }
            assertEquals(new TreeSet<>(values("first", 5)), readAll(topic, 1, "read_committed", 5));
            producer.commitTransaction();
        }
        Set<String> all = new TreeSet<>(values("first", 5));
        all.addAll(values("open", 5));
        assertEquals(all, readAll(topic, 1, "read_committed", 10));
    }

    @Test
    @Timeout(value = 3, unit = TimeUnit.MINUTES)
    void aNewInstanceFencesTheZombie() throws Exception {
        String topic = "java-txn-fencing";
        createTopic(topic, 1);
        KafkaProducer<String, String> zombie = producer("java-txn-fencing");
        try {
            zombie.beginTransaction();
            send(zombie, topic, values("zombie", 5));
            zombie.flush();
            try (KafkaProducer<String, String> fresh = producer("java-txn-fencing")) {
                KafkaException e = assertThrows(KafkaException.class, zombie::commitTransaction);
                assertTrue(e.getClass().getSimpleName().contains("Fenced")
                        || e.getCause() != null && e.getCause().getClass().getSimpleName().contains("Fenced"),
                        "the zombie is fenced: " + e);
                fresh.beginTransaction();
                send(fresh, topic, values("fresh", 5));
                fresh.commitTransaction();
            }
        } finally {
            zombie.close(Duration.ofSeconds(5));
        }
        assertEquals(new TreeSet<>(values("fresh", 5)), readAll(topic, 1, "read_committed", 5));
    }

    @Test
    @Timeout(value = 3, unit = TimeUnit.MINUTES)
    void offsetsSentToATransactionCommitWithIt() throws Exception {
        String input = "java-txn-copy-in";
        String output = "java-txn-copy-out";
        String group = "java-txn-copier";
        createTopic(input, 2);
        createTopic(output, 2);
        try (KafkaProducer<String, String> seed = producer("java-txn-copy-seed")) {
            seed.beginTransaction();
            send(seed, input, values("in", 40));
            seed.commitTransaction();
        }
        try (KafkaConsumer<String, String> consumer = consumer(group, "read_committed");
                KafkaProducer<String, String> copier = producer("java-txn-copier")) {
            consumer.subscribe(List.of(input));
            List<String> read = new ArrayList<>();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (read.size() < 40 && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    read.add(r.value());
                }
            }
            assertEquals(40, read.size());
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            for (TopicPartition tp : consumer.assignment()) {
                offsets.put(tp, new OffsetAndMetadata(consumer.position(tp)));
            }
            // Aborted: nothing is committed.
            copier.beginTransaction();
            send(copier, output, values("aborted-copy", 4));
            copier.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
            copier.abortTransaction();
            Map<TopicPartition, OffsetAndMetadata> none = consumer.committed(offsets.keySet());
            for (TopicPartition tp : offsets.keySet()) {
                assertEquals(null, none.get(tp), "no offset for " + tp + " after the abort");
            }
            // Committed: the offsets commit with the records.
            copier.beginTransaction();
            for (String v : read) {
                copier.send(new ProducerRecord<>(output, v, "copy-" + v));
            }
            copier.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
            copier.commitTransaction();
            Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(offsets.keySet());
            for (TopicPartition tp : offsets.keySet()) {
                assertEquals(offsets.get(tp).offset(), committed.get(tp).offset(), "committed offset of " + tp);
            }
        }
        Set<String> copies = new TreeSet<>();
        for (String v : values("in", 40)) {
            copies.add("copy-" + v);
        }
        assertEquals(copies, readAll(output, 2, "read_committed", 40));
    }
}
