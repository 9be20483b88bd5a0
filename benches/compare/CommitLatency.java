// Commit latency of a transactional Java producer: each transaction sends a few records and
// commits; the time of every commitTransaction() call is recorded. Run with the source
// launcher against a Kafka client's jars:
//   java -cp "<kafka-libs>/*" CommitLatency.java <bootstrap> <topic> <transactions> <records per transaction> <record size>
// Prints one line: COMMITS <count> <avg ms> <p50 ms> <p99 ms> <p99.9 ms> <max ms> <transactions/s>

import java.util.Arrays;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class CommitLatency {
    public static void main(String[] args) {
        String bootstrap = args[0];
        String topic = args[1];
        int transactions = Integer.parseInt(args[2]);
        int perTransaction = Integer.parseInt(args[3]);
        byte[] value = new byte[Integer.parseInt(args[4])];
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("transactional.id", "commit-latency-" + topic);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        long[] nanos = new long[transactions];
        long started;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            // Two unmeasured transactions: metadata, coordinator lookup, partition leaders.
            for (int i = 0; i < 2; i++) {
                producer.beginTransaction();
                producer.send(new ProducerRecord<>(topic, value));
                producer.commitTransaction();
            }
            started = System.nanoTime();
            for (int t = 0; t < transactions; t++) {
                producer.beginTransaction();
                for (int r = 0; r < perTransaction; r++) {
                    producer.send(new ProducerRecord<>(topic, value));
                }
                producer.flush();
                long before = System.nanoTime();
                producer.commitTransaction();
                nanos[t] = System.nanoTime() - before;
            }
        }
        double seconds = (System.nanoTime() - started) / 1e9;
        long[] sorted = nanos.clone();
        Arrays.sort(sorted);
        double avg = Arrays.stream(sorted).average().orElse(0) / 1e6;
        System.out.printf("COMMITS %d %.3f %.3f %.3f %.3f %.3f %.1f%n", transactions, avg,
                at(sorted, 0.50), at(sorted, 0.99), at(sorted, 0.999),
                sorted[sorted.length - 1] / 1e6, transactions / seconds);
    }

    private static double at(long[] sorted, double quantile) {
        int index = (int) Math.ceil(quantile * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, index))] / 1e6;
    }
}
