package io.kafkaiq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
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
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The default (idempotent) producer keeps sending through a clean broker restart: sends in flight
 * when the broker stops are retried with their original sequence numbers, and the log ends up
 * with every record exactly once, in send order. The broker's producer state must survive the
 * restart for that.
 */
class IdempotentRestartTest {
    static final int PER_PHASE = 5000;

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
    @Timeout(value = 4, unit = TimeUnit.MINUTES)
    void idempotentProducerSurvivesABrokerRestartWithoutDuplicatesOrGaps() throws Exception {
        String topic = "idempotent-restart";
        try (Admin admin = broker.admin()) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            int i = 0;
            for (; i < PER_PHASE; i++) {
                futures.add(producer.send(new ProducerRecord<>(topic, 0, null, Integer.toString(i))));
            }
            producer.flush();
            // Leave these in flight (or in the accumulator) while the broker stops.
            for (; i < 2 * PER_PHASE; i++) {
                futures.add(producer.send(new ProducerRecord<>(topic, 0, null, Integer.toString(i))));
            }
            broker.restart();
            for (; i < 3 * PER_PHASE; i++) {
                futures.add(producer.send(new ProducerRecord<>(topic, 0, null, Integer.toString(i))));
            }
            producer.flush();
        }
        for (int i = 0; i < futures.size(); i++) {
            RecordMetadata md = futures.get(i).get(60, TimeUnit.SECONDS);
            assertEquals(i, md.offset(), "record " + i + " acknowledged at its own offset");
        }

        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seek(tp, 0);
            List<String> got = new ArrayList<>();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (got.size() < 3 * PER_PHASE) {
                assertTrue(System.nanoTime() < deadline, "read " + got.size() + " records");
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    assertEquals(got.size(), r.offset());
                    got.add(new String(r.value(), StandardCharsets.UTF_8));
                }
            }
            for (int i = 0; i < got.size(); i++) {
                assertEquals(Integer.toString(i), got.get(i), "offset " + i);
            }
            assertEquals(3L * PER_PHASE, consumer.endOffsets(List.of(tp), Duration.ofSeconds(30)).get(tp),
                    "no duplicates past the last record");
        }
    }
}
