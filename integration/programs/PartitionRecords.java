// Partition 0 of a topic through the Java clients (kafka-clients 4.1.1), for suites that check
// what a partition holds (integration/suites/37-cluster-cli.sh: a topic deleted and created
// again serves only its own records).
//
// Run as a single source file: java -cp "$(integration/kafka-libs.sh)/*" PartitionRecords.java
//   produce BOOTSTRAP TOPIC VALUE...   sends each value (acks=all, one at a time), prints
//                                      `offset O` for each
//   read BOOTSTRAP TOPIC TIMEOUT_MS    reads from the beginning to the end offset it finds at the
//                                      start, prints `O VALUE` for each record
// Exit 1 on any error or when the reading does not reach the end offset before the timeout.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class PartitionRecords {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[1];
        String topic = args[2];
        switch (args[0]) {
            case "produce" -> produce(bootstrap, topic, List.of(args).subList(3, args.length));
            case "read" -> System.exit(read(bootstrap, topic, Long.parseLong(args[3])));
            default -> throw new IllegalArgumentException("produce or read, not " + args[0]);
        }
    }

    static void produce(String bootstrap, String topic, List<String> values) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (String value : values) {
                long offset = producer.send(new ProducerRecord<>(topic, 0, null, value)).get().offset();
                System.out.println("offset " + offset);
            }
        }
    }

    static int read(String bootstrap, String topic, long timeoutMs) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long end = consumer.endOffsets(List.of(tp), Duration.ofMillis(timeoutMs)).get(tp);
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (consumer.position(tp) < end) {
                if (System.currentTimeMillis() > deadline) {
                    System.out.println("timed out at " + consumer.position(tp) + " of " + end);
                    return 1;
                }
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println(r.offset() + " " + r.value());
                }
            }
        }
        return 0;
    }
}
