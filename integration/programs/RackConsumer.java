// A Java KafkaConsumer (kafka-clients 4.1.1) with client.rack, for tests/follower_fetch_cluster.rs:
// reads the given partitions of a topic from the beginning until it has `expect` records of each
// (offsets contiguous from 0), then prints, per partition, the records read and the consumer's
// own `preferred-read-replica` fetch metric (consumer-fetch-manager-metrics, -1 = the leader).
//
// Run as a single source file: java -cp "$(integration/kafka-libs.sh)/*" RackConsumer.java
//   BOOTSTRAP TOPIC PARTITIONS(comma separated) RACK EXPECT TIMEOUT_MS [KEY=VALUE ...]
// (the optional KEY=VALUE pairs are further consumer properties). With `--seek-from-stdin`
// among them, once `expect` records are read it prints `reached EXPECT preferred-read-replica
// V...` (the metric of each partition), reads a line
// `seek FROM UNTIL` from stdin, seeks every partition to FROM and reads on to UNTIL, printing
// `preferred-read-replica-seen P V1,V2,...`: the values its metric took after the seek.
// Output lines: `partition P records N preferred-read-replica R`; exit 1 when the records did
// not all arrive before the timeout or an offset was skipped or repeated.

import java.io.BufferedReader;
import java.io.InputStreamReader;
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
    public static void main(String[] args) throws Exception {
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
        boolean seekFromStdin = false;
        for (int i = 6; i < args.length; i++) {
            if (args[i].equals("--seek-from-stdin")) {
                seekFromStdin = true;
                continue;
            }
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }
        Map<Integer, Long> next = new HashMap<>();
        int status = 0;
        long until = expect;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            for (TopicPartition tp : partitions) {
                next.put(tp.partition(), consumer.position(tp));
            }
            long deadline = System.currentTimeMillis() + timeoutMs;
            status = readUntil(consumer, next, expect, deadline, null, topic);
            if (seekFromStdin) {
                StringBuilder replicas = new StringBuilder();
                for (Map.Entry<MetricName, ? extends Metric> m : consumer.metrics().entrySet()) {
                    if (m.getKey().name().equals("preferred-read-replica") && topic.equals(m.getKey().tags().get("topic"))) {
                        replicas.append(" ").append(m.getValue().metricValue());
                    }
                }
                System.out.println("reached " + expect + " preferred-read-replica" + replicas);
                System.out.flush();
                String[] cmd = new BufferedReader(new InputStreamReader(System.in)).readLine().split(" ");
                long from = Long.parseLong(cmd[1]);
                until = Long.parseLong(cmd[2]);
                for (TopicPartition tp : partitions) {
                    consumer.seek(tp, from);
                    next.put(tp.partition(), from);
                }
                Map<Integer, List<String>> seen = new HashMap<>();
                status |= readUntil(consumer, next, until, System.currentTimeMillis() + timeoutMs, seen, topic);
                for (Map.Entry<Integer, List<String>> e : seen.entrySet()) {
                    System.out.println("preferred-read-replica-seen " + e.getKey() + " " + String.join(",", e.getValue()));
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
                if (got < until) {
                    status = 1;
                }
            }
        }
        System.exit(status);
    }

    /** Polls until every partition's next offset reaches `until`; 1 if an offset was skipped or
     * repeated or the deadline passed. With `seen`, records each change of the partitions'
     * preferred-read-replica metric. */
    static int readUntil(KafkaConsumer<byte[], byte[]> consumer, Map<Integer, Long> next, long until,
                         long deadline, Map<Integer, List<String>> seen, String topic) {
        int status = 0;
        while (next.values().stream().anyMatch(n -> n < until) && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(50))) {
                long want = next.get(r.partition());
                if (r.offset() != want) {
                    System.out.println("partition " + r.partition() + " offset " + r.offset() + " expected " + want);
                    status = 1;
                }
                next.put(r.partition(), r.offset() + 1);
            }
            if (seen != null) {
                for (Map.Entry<MetricName, ? extends Metric> m : consumer.metrics().entrySet()) {
                    MetricName n = m.getKey();
                    if (n.name().equals("preferred-read-replica") && topic.equals(n.tags().get("topic"))) {
                        int p = Integer.parseInt(n.tags().get("partition"));
                        String v = String.valueOf(m.getValue().metricValue());
                        List<String> l = seen.computeIfAbsent(p, k -> new ArrayList<>());
                        if (l.isEmpty() || !l.get(l.size() - 1).equals(v)) {
                            l.add(v);
                        }
                    }
                }
            }
        }
        return next.values().stream().anyMatch(n -> n < until) ? 1 : status;
    }
}
