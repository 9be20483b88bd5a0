package io.kafkaiq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
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
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A topic deleted and created again under the same name is a new topic: it starts empty, its
 * first record is at offset 0, and no record of the deleted one is ever read from it, whether it
 * is created again at once or after the broker restarted in between (the deleted log must not be
 * loaded again at startup).
 */
class RecreatedTopicTest {
    static final int OLD_RECORDS = 500;

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

    @Test
    @Timeout(value = 3, unit = TimeUnit.MINUTES)
    void aTopicCreatedAgainServesOnlyItsOwnRecords() throws Exception {
        String topic = "recreated";
        create(topic);
        List<Long> offsets = produce(topic, "first-", OLD_RECORDS);
        assertEquals(OLD_RECORDS - 1, offsets.get(OLD_RECORDS - 1), "the first topic's last offset");
        assertEquals(OLD_RECORDS, readAll(topic).size(), "the first topic's records are read");

        delete(topic);
        create(topic);
        assertEquals(List.of(0L), produce(topic, "second-", 1), "created again at once: offset 0");
        assertEquals(List.of("0 second-0"), readAll(topic), "created again at once");
        produce(topic, "second-", OLD_RECORDS);

        delete(topic);
        broker.restart();
        create(topic);
        assertEquals(List.of(0L), produce(topic, "third-", 1), "created again after a restart: offset 0");
        assertEquals(List.of("0 third-0"), readAll(topic), "created again after a restart");
    }

    static void create(String topic) throws Exception {
        try (Admin admin = broker.admin()) {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (true) {
                try {
                    admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
                    return;
                } catch (ExecutionException e) {
                    // The deletion may still be under way: Kafka answers TOPIC_ALREADY_EXISTS until
                    // it is done.
                    if (!(e.getCause() instanceof TopicExistsException) || System.nanoTime() > deadline) {
                        throw e;
                    }
                    Thread.sleep(100);
                }
            }
        }
    }

    static void delete(String topic) throws Exception {
        try (Admin admin = broker.admin()) {
            admin.deleteTopics(List.of(topic)).all().get(30, TimeUnit.SECONDS);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (admin.listTopics().names().get(30, TimeUnit.SECONDS).contains(topic)) {
                assertTrue(System.nanoTime() < deadline, topic + " still listed after its deletion");
                Thread.sleep(100);
            }
        }
    }

    static List<Long> produce(String topic, String prefix, int count) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, 0, null, prefix + i)));
            }
            producer.flush();
        }
        List<Long> offsets = new ArrayList<>();
        for (Future<RecordMetadata> f : sent) {
            offsets.add(f.get(30, TimeUnit.SECONDS).offset());
        }
        return offsets;
    }

    /** Every record of partition 0, from the beginning to the end offset, as "offset value". */
    static List<String> readAll(String topic) throws Exception {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        TopicPartition tp = new TopicPartition(topic, 0);
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.assign(Set.of(tp));
            consumer.seekToBeginning(Set.of(tp));
            long end = consumer.endOffsets(Set.of(tp), Duration.ofSeconds(30)).get(tp);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (consumer.position(tp) < end) {
                assertTrue(System.nanoTime() < deadline, "read " + got.size() + " records of " + end);
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    got.add(r.offset() + " " + r.value());
                }
            }
        }
        return got;
    }
}
