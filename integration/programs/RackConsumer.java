// A Java KafkaConsumer (kafka-clients 4.1.1) with client.rack, for tests/follower_fetch_cluster.rs:
// reads the given partitions of a topic from the beginning until it has `expect` records of each
// (offsets contiguous from 0), then prints, per partition, the records read and the consumer's
// own `preferred-read-replica` fetch metric (consumer-fetch-manager-metrics, -1 = the leader).
//
// Run as a single source file: java -cp "$(integration/kafka-libs.sh)/*" RackConsumer.java
//   BOOTSTRAP TOPIC PARTITIONS(comma separated) RACK EXPECT TIMEOUT_MS [KEY=VALUE ...]
// (the optional KEY=VALUE pairs are further consumer properties).
// Output lines: `partition P records N preferred-read-replica R`; exit 1 when the records did
// not all arrive before the timeout or an offset was skipped or repeated.

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class RackConsumer {
    public static void main(String[] args) {
        String bootstrap = args[0];
        String topic = args[1];
        String rack = args[3];
        long expect = Long.parseLong(args[4]);
        long timeoutMs = Long.parseLong(args[5]);
        List<TopicPartition> partitions = new ArrayList<>();
        for (String p : args[2].split(",")) {
            partitions.add(new TopicPartition(topic, Integer.parseInt(p)));
        }
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.CLIENT_RACK_CONFIG, rack);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "rack-consumer-" + rack);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        // A reset would hide a skipped or refetched range: there is none to fall back on.
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        for (int i = 6; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }
        Map<Integer, Long> next = new HashMap<>();
        int status = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            for (TopicPartition tp : partitions) {
                next.put(tp.partition(), consumer.position(tp));
            }
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (next.values().stream().anyMatch(n -> n < expect) && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    long want = next.get(r.partition());
                    if (r.offset() != want) {
                        System.out.println("partition " + r.partition() + " offset " + r.offset() + " expected " + want);
                        status = 1;
                    }
                    next.put(r.partition(), r.offset() + 1);
                }
            }
            Map<MetricName, ? extends Metric> metrics = consumer.metrics();
            for (TopicPartition tp : partitions) {
                Object replica = "absent";
                for (Map.Entry<MetricName, ? extends Metric> m : metrics.entrySet()) {
                    MetricName n = m.getKey();
                    if (n.name().equals("preferred-read-replica")
                            && topic.equals(n.tags().get("topic"))
                            && String.valueOf(tp.partition()).equals(n.tags().get("partition"))) {
                        replica = m.getValue().metricValue();
                    }
                }
                long got = next.get(tp.partition());
                System.out.println("partition " + tp.partition() + " records " + got + " preferred-read-replica " + replica);
                if (got < expect) {
                    status = 1;
                }
            }
        }
        System.exit(status);
    }
}
