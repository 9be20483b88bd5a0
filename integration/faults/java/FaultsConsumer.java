// The Java client's consumers in the fault suite (kafka-clients 4.1.1), run by the driver as
// `java -cp KAFKA_LIBS/* FaultsConsumer.java BOOTSTRAP TOPIC PARTITIONS MODE GROUP NAME`
// (a single-file source program: no build step). MODE is
//   assign   every partition assigned by hand, read from the beginning, nothing committed;
//   group    subscribed in consumer group GROUP, committing automatically every second.
// It prints one line per record it polls on stdout, which the driver records in its history:
//   poll GENERATION PARTITION OFFSET VALUE     (VALUE "-" for a record without one)
// GENERATION is 0 for the assigned consumer; the group consumer adds one at every assignment
// it receives (after a rebalance it may go back to the committed offset). It stops when its
// stdin closes, prints "done" and exits.

import java.io.InputStream;
import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class FaultsConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        boolean group = args[3].equals("group");
        String groupId = args[4];
        String name = args[5];

        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, name);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, group ? "true" : "false");
        p.put(ConsumerConfig.AUTO_COMMIT_INTERVAL_MS_CONFIG, "1000");
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        p.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "1000");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());

        PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false);
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

        AtomicLong generation = new AtomicLong(0);
        long errors = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            if (group) {
                consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> revoked) {
                    }

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> assigned) {
                        generation.incrementAndGet();
                    }
                });
            } else {
                List<TopicPartition> all = new ArrayList<>();
                for (int i = 0; i < partitions; i++) {
                    all.add(new TopicPartition(topic, i));
                }
                consumer.assign(all);
                consumer.seekToBeginning(all);
            }
            while (running.get()) {
                try {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) {
                        out.println("poll " + generation.get() + " " + r.partition() + " " + r.offset()
                                + " " + (r.value() == null ? "-" : r.value()));
                    }
                    out.flush();
                } catch (Exception e) {
                    // Retriable errors of a cluster under faults: logged, and the poll goes on.
                    errors++;
                    System.err.println(name + ": poll: " + e);
                }
            }
        }
        out.println("done " + errors);
        out.flush();
    }
}
