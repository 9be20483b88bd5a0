// The Java clients' part of integration/suites/39-security-clients.sh: for each case (a
// listener's security protocol with a SASL mechanism, or TLS with a client certificate), the
// AdminClient creates the case's topics, a producer (acks=all) sends five records with a
// payload of its own, a consumer reads the partition from the start and must find exactly
// those records, and an AdminClient with the case's wrong credentials must be refused with an
// AuthenticationException. One JVM runs every case.
//
// Run as a single source file:
//   java -cp "$(integration/kafka-libs.sh)/*" SecurityClients.java \
//       OWN_PREFIX RF CREATE_PREFIXES CASE_DIR NAME...
// CASE_DIR/NAME.good.properties and NAME.bad.properties are client configs (bootstrap.servers,
// security.protocol, sasl.*, ssl.*). For each case the topics PREFIX-NAME for every PREFIX in
// the comma-separated CREATE_PREFIXES are created (one partition, replication factor RF; kept
// if they exist) and, with RF above 1, waited for until every replica is in sync; the records
// go to OWN_PREFIX-NAME. Exit 1 if any case fails.

import java.io.FileInputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class SecurityClients {
    static final int RECORDS = 5;

    public static void main(String[] args) throws Exception {
        String own = args[0];
        short rf = Short.parseShort(args[1]);
        String[] prefixes = args[2].split(",");
        String dir = args[3];
        String client = own;
        int failed = 0;
        for (int i = 4; i < args.length; i++) {
            String name = args[i];
            try {
                Properties good = load(dir + "/" + name + ".good.properties");
                createTopics(good, name, prefixes, rf);
                roundTrip(good, own + "-" + name);
                System.out.printf("%s %s: admin, %d records produced and read back%n", client, name, RECORDS);
                refused(load(dir + "/" + name + ".bad.properties"));
                System.out.printf("%s %s: wrong credentials refused%n", client, name);
            } catch (Exception e) {
                failed++;
                System.out.printf("%s %s: FAIL: %s%n", client, name, e);
                e.printStackTrace(System.out);
            }
        }
        if (failed > 0 || args.length < 5) {
            System.out.printf("%s: %d of %d cases failed%n", client, failed, args.length - 4);
            System.exit(1);
        }
    }

    static Properties load(String path) throws Exception {
        Properties p = new Properties();
        try (FileInputStream in = new FileInputStream(path)) {
            p.load(in);
        }
        return p;
    }

    static void createTopics(Properties config, String name, String[] prefixes, short rf) throws Exception {
        try (Admin admin = Admin.create(config)) {
            // A cluster's brokers register one by one: wait for as many as the replicas.
            long registered = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            int nodes;
            while ((nodes = admin.describeCluster().nodes().get(30, TimeUnit.SECONDS).size()) < rf) {
                if (System.nanoTime() > registered) {
                    throw new IllegalStateException(nodes + " brokers, fewer than the replication factor " + rf);
                }
                Thread.sleep(500);
            }
            List<String> names = new ArrayList<>();
            for (String prefix : prefixes) {
                names.add(prefix + "-" + name);
            }
            for (String topic : names) {
                try {
                    admin.createTopics(List.of(new NewTopic(topic, 1, rf))).all().get(30, TimeUnit.SECONDS);
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof TopicExistsException)) {
                        throw e;
                    }
                }
            }
            // Every replica in sync, so acks=all means every broker of the cluster.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (true) {
                boolean inSync = true;
                Collection<TopicDescription> described;
                try {
                    described = admin.describeTopics(names).allTopicNames().get(30, TimeUnit.SECONDS).values();
                } catch (ExecutionException e) {
                    // A broker that has not yet seen the new topics in its metadata.
                    if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) {
                        throw e;
                    }
                    described = List.of();
                    inSync = false;
                }
                for (TopicDescription d : described) {
                    if (d.partitions().size() != 1) {
                        throw new IllegalStateException(d.name() + " has " + d.partitions().size() + " partitions");
                    }
                    TopicPartitionInfo p = d.partitions().get(0);
                    if (p.replicas().size() != rf) {
                        throw new IllegalStateException(d.name() + " has replicas " + p.replicas());
                    }
                    inSync &= p.isr().size() == rf && p.leader() != null;
                }
                if (inSync) {
                    break;
                }
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("replicas of " + names + " not in sync within 60 s");
                }
                Thread.sleep(200);
            }
        }
    }

    static void roundTrip(Properties config, String topic) throws Exception {
        String payload = topic + "-" + UUID.randomUUID();
        List<String> sent = new ArrayList<>();
        Properties p = new Properties();
        p.putAll(config);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < RECORDS; i++) {
                String value = payload + "-" + i;
                producer.send(new ProducerRecord<>(topic, 0, null, value)).get(30, TimeUnit.SECONDS);
                sent.add(value);
            }
        }
        Properties c = new Properties();
        c.putAll(config);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(Set.of(tp));
            consumer.seekToBeginning(Set.of(tp));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (got.size() < sent.size() && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    if (r.value().startsWith(payload)) {
                        got.add(r.value());
                    }
                }
            }
        }
        if (!got.equals(sent)) {
            throw new IllegalStateException("read back " + got + ", sent " + sent);
        }
    }

    static void refused(Properties config) throws Exception {
        Properties p = new Properties();
        p.putAll(config);
        p.put("default.api.timeout.ms", "20000");
        p.put("request.timeout.ms", "15000");
        try (Admin admin = Admin.create(p)) {
            admin.describeCluster().nodes().get(30, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof AuthenticationException) {
                return;
            }
            throw new IllegalStateException("refused, but not with an AuthenticationException", e);
        }
        throw new IllegalStateException("the wrong credentials were accepted");
    }
}
