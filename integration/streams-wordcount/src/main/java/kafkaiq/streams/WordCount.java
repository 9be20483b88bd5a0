package kafkaiq.streams;

import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A word count under exactly_once_v2: lines from the input topic are split on whitespace,
 * regrouped by word through the repartition topic {@code <application.id>-words-repartition}
 * and counted in the persistent (RocksDB) store {@code counts} (changelog
 * {@code <application.id>-counts-changelog}); every new count goes to the output topic as
 * {@code word -> count} (String key, 8-byte big-endian long value).
 *
 * <p>Usage: {@code WordCount BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR}. The record cache
 * is off, so each input word yields one output record. Prints each state change on stdout
 * ({@code state RUNNING}); exits 1 if the instance ends in ERROR, 0 after a SIGTERM (the
 * shutdown hook closes it, committing what it processed).
 */
public final class WordCount {
    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: WordCount BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR");
            System.exit(2);
        }
        String input = args[2];
        String output = args[3];

        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        // Internal topics (repartition, changelog) as durable as the test's own topics.
        props.put(StreamsConfig.topicPrefix("min.insync.replicas"), "2");
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        // Consumed repartition records are deleted (DeleteRecords) after a commit at most this
        // often; 1 s rather than 30 s so a short run purges many times.
        props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 1_000);
        // Every update reaches the output: a count emitted twice or skipped is visible.
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        // A killed instance's partitions move to the other one within this, not Streams'
        // 45 s default; the brokers' group.min.session.timeout.ms is 6 s.
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 10_000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1_000);
        props.put(StreamsConfig.producerPrefix(ProducerConfig.ACKS_CONFIG), "all");

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.trim().split("\\s+")))
                .filter((key, word) -> !word.isEmpty())
                .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch ended = new CountDownLatch(1);
        boolean[] failed = {false};
        streams.setStateListener((now, before) -> {
            System.out.println("state " + now);
            System.out.flush();
            if (now == KafkaStreams.State.ERROR) {
                failed[0] = true;
            }
            if (now == KafkaStreams.State.NOT_RUNNING || now == KafkaStreams.State.ERROR) {
                ended.countDown();
            }
        });
        // A thread that dies of an error (a timeout while brokers are down) is replaced, as an
        // application meant to outlive broker failures would do.
        streams.setUncaughtExceptionHandler(e -> {
            System.err.println("stream thread failed, replacing it: " + e);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
        }));
        streams.start();
        ended.await();
        streams.close(Duration.ofSeconds(30));
        System.exit(failed[0] ? 1 : 0);
    }
}
