// The Java client workload of the fault suite: the official producer (kafka-clients 4.1.1,
// idempotent, acks=all) writing unique values round-robin over a topic's partitions, run by
// the driver as `java -cp KAFKA_LIBS/* FaultsProducer.java BOOTSTRAP TOPIC PARTITIONS RATE
// FIRST_ID NAME` (a single-file source program: no build step). It prints one line per event
// on stdout, which the driver records in its history:
//   sent ID PARTITION      before the send
//   ack ID OFFSET          acknowledged (OFFSET -1 when the answer named none)
//   unknown ID ERROR       failed after sending: it may be in the log
//   failed ID ERROR        refused before anything was sent
// It stops sending when its stdin closes, waits for every outcome (delivery.timeout.ms),
// prints "done" and exits.

import java.io.InputStream;
import java.io.PrintStream;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class FaultsProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        int rate = Integer.parseInt(args[3]);
        long firstId = Long.parseLong(args[4]);
        String name = args[5];

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, name);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        p.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "20");
        p.put(ProducerConfig.RETRY_BACKOFF_MAX_MS_CONFIG, "200");
        p.put(ProducerConfig.METADATA_MAX_AGE_CONFIG, "1000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());

        PrintStream out = new PrintStream(System.out, true);
        AtomicBoolean running = new AtomicBoolean(true);
        Thread stdin = new Thread(() -> {
            try {
                InputStream in = System.in;
                while (in.read() >= 0) {
                }
            } catch (Exception e) {
                // A closed stdin is the signal to stop either way.
            }
            running.set(false);
        });
        stdin.setDaemon(true);
        stdin.start();

        long pauseNanos = 1_000_000_000L / Math.max(1, rate);
        long next = System.nanoTime();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (long n = 0; running.get(); n++) {
                long id = firstId + n;
                int partition = (int) (n % partitions);
                out.println("sent " + id + " " + partition);
                try {
                    producer.send(new ProducerRecord<>(topic, partition, null, "v" + id), (md, e) -> {
                        if (e == null) {
                            out.println("ack " + id + " " + (md.hasOffset() ? md.offset() : -1));
                        } else {
                            out.println("unknown " + id + " " + e.getClass().getSimpleName());
                        }
                    });
                } catch (Exception e) {
                    out.println("failed " + id + " " + e.getClass().getSimpleName());
                }
                // Pacing of the load, not a wait for anything.
                next += pauseNanos;
                long sleep = next - System.nanoTime();
                if (sleep > 0) {
                    Thread.sleep(sleep / 1_000_000, (int) (sleep % 1_000_000));
                } else {
                    next = System.nanoTime();
                }
            }
            producer.flush();
            producer.close(Duration.ofSeconds(130));
        }
        out.println("done");
    }
}
