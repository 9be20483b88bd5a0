// A producer whose records go to partitions by Zipf weight: the record's partition is drawn per
// record, rank r (1-based) with weight 1 / r^s, and rank r is written to partition map[r-1].
// s = 0 is uniform. Run with the source launcher against a Kafka client's jars:
//   java -cp "<kafka-libs>/*" ZipfProducer.java <bootstrap> <topic> <s> <rank→partition map,
//       comma separated> <record size> <rate records/s, -1 = as fast as it can> <warm-up s>
//       <measured s> <seed> [batch.size, default 16384] [max.request.size, default 1048576]
// acks=all, idempotent, linger.ms 5 (the client's defaults otherwise).
//
// Saturated (rate -1): records acknowledged during the measured window (callback time), per
// second. Fixed rate: record i is due at start + i / rate; its latency runs from when it was due
// to its callback (so time spent blocked in send() counts: no coordinated omission), for records
// due in the measured window. Prints one line:
//   RESULT acked=<n> errors=<n> seconds=<s> records_per_s=<x> p50_ms=<x> p99_ms=<x>
//       p999_ms=<x> max_ms=<x> per_partition=<n,n,...>

import java.util.Arrays;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ZipfProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        double s = Double.parseDouble(args[2]);
        int[] map = Arrays.stream(args[3].split(",")).mapToInt(Integer::parseInt).toArray();
        byte[] value = new byte[Integer.parseInt(args[4])];
        double rate = Double.parseDouble(args[5]);
        double warmupS = Double.parseDouble(args[6]);
        double measureS = Double.parseDouble(args[7]);
        Random random = new Random(Long.parseLong(args[8]));
        random.nextBytes(value);

        int n = map.length;
        double[] cumulative = new double[n];
        double sum = 0;
        for (int r = 1; r <= n; r++) {
            sum += 1.0 / Math.pow(r, s);
            cumulative[r - 1] = sum;
        }
        for (int i = 0; i < n; i++) cumulative[i] /= sum;
        int partitions = Arrays.stream(map).max().getAsInt() + 1;

        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("acks", "all");
        props.put("enable.idempotence", "true");
        // One batch per partition per request, at most 5 requests in flight per broker: with
        // the default 16 KiB batches (and still with 128 KiB ones) the hottest partition's
        // pipeline, not a broker, limits a skewed load: its records wait for round trips that
        // CPU-throttled brokers make long. Larger batches let the brokers be what is measured.
        props.put("batch.size", args.length > 9 ? args[9] : "16384");
        props.put("max.request.size", args.length > 10 ? args[10] : "1048576");
        props.put("linger.ms", "5");
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());

        long start = System.nanoTime();
        long windowStart = start + (long) (warmupS * 1e9);
        long windowEnd = windowStart + (long) (measureS * 1e9);
        AtomicLong acked = new AtomicLong();
        AtomicLong errors = new AtomicLong();
        AtomicLongArray perPartition = new AtomicLongArray(partitions);
        boolean fixed = rate > 0;
        // Latencies of the records due in the window (fixed rate only).
        int capacity = fixed ? (int) Math.min(Integer.MAX_VALUE - 8, rate * measureS * 1.1 + 16) : 1;
        long[] latencies = new long[capacity];
        AtomicLong recorded = new AtomicLong();

        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (long i = 0; ; i++) {
                long due;
                if (fixed) {
                    due = start + (long) (i * 1e9 / rate);
                    // Parked, not spun: a spinning sender would use up the generator's CPU quota
                    // and the throttled JVM would stall its I/O thread too.
                    long wait = due - System.nanoTime();
                    if (wait > 0) LockSupport.parkNanos(wait);
                } else {
                    due = System.nanoTime();
                }
                if (due >= windowEnd) break;
                double u = random.nextDouble();
                int rank = Arrays.binarySearch(cumulative, u);
                if (rank < 0) rank = -rank - 1;
                if (rank >= n) rank = n - 1;
                int partition = map[rank];
                final long dueAt = due;
                final boolean inWindow = due >= windowStart;
                producer.send(new ProducerRecord<>(topic, partition, null, value), (md, err) -> {
                    long now = System.nanoTime();
                    if (err != null) {
                        errors.incrementAndGet();
                        return;
                    }
                    if (now >= windowStart && now < windowEnd) {
                        acked.incrementAndGet();
                        perPartition.incrementAndGet(partition);
                    }
                    if (fixed && inWindow) {
                        long k = recorded.getAndIncrement();
                        if (k < latencies.length) latencies[(int) k] = now - dueAt;
                    }
                });
            }
            producer.flush();
        }
        int count = (int) Math.min(recorded.get(), latencies.length);
        long[] sorted = Arrays.copyOf(latencies, count);
        Arrays.sort(sorted);
        StringBuilder per = new StringBuilder();
        for (int p = 0; p < partitions; p++) per.append(p == 0 ? "" : ",").append(perPartition.get(p));
        System.out.printf("RESULT acked=%d errors=%d seconds=%.3f records_per_s=%.1f p50_ms=%.3f "
                + "p99_ms=%.3f p999_ms=%.3f max_ms=%.3f per_partition=%s%n",
                acked.get(), errors.get(), measureS, acked.get() / measureS,
                at(sorted, 0.50), at(sorted, 0.99), at(sorted, 0.999),
                count == 0 ? 0.0 : sorted[count - 1] / 1e6, per);
    }

    private static double at(long[] sorted, double quantile) {
        if (sorted.length == 0) return 0.0;
        int index = (int) Math.ceil(quantile * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, index))] / 1e6;
    }
}
