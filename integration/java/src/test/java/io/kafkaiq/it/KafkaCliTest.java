package io.kafkaiq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Kafka's topic and offset command-line tools (kafka-tools 4.1.1) against the broker:
 * TopicCommand (create, list, describe, alter, delete), GetOffsetShell and DeleteRecordsCommand.
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class KafkaCliTest {
    static final Duration TOOL_TIMEOUT = Duration.ofSeconds(90);

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

    /** Runs a tool, asserting it exits 0 and prints no exception; returns its output. */
    static String tool(String mainClass, String... args) throws Exception {
        BrokerUnderTest.ToolResult r = BrokerUnderTest.runTool(TOOL_TIMEOUT, mainClass, args);
        String cmd = mainClass.substring(mainClass.lastIndexOf('.') + 1) + " " + String.join(" ", args);
        assertEquals(0, r.exitCode(), cmd + " exit code; output:\n" + r.output());
        assertFalse(r.output().contains("Exception"), cmd + " printed an exception:\n" + r.output());
        return r.output();
    }

    static String topics(String... args) throws Exception {
        List<String> all = new ArrayList<>(List.of("--bootstrap-server", broker.bootstrap()));
        all.addAll(List.of(args));
        return tool("org.apache.kafka.tools.TopicCommand", all.toArray(String[]::new));
    }

    /** Waits until `--list` shows (or no longer shows) the topic; metadata follows the controller. */
    static void awaitListed(String topic, boolean listed) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (topics("--list").lines().anyMatch(topic::equals) != listed) {
            assertTrue(System.nanoTime() < deadline, topic + (listed ? " never listed" : " still listed"));
            Thread.sleep(200);
        }
    }

    @Test
    void topicCommandCreatesDescribesAltersAndDeletes() throws Exception {
        String t = "cli-topic";
        String created = topics("--create", "--topic", t, "--partitions", "2", "--replication-factor", "1",
                "--config", "retention.ms=7200000");
        assertTrue(created.contains("Created topic " + t + "."), created);
        awaitListed(t, true);

        String d = topics("--describe", "--topic", t);
        Matcher head = Pattern.compile("(?m)^Topic: " + t + "\\tTopicId: (\\S+)\\tPartitionCount: 2\\t"
                + "ReplicationFactor: 1\\tConfigs: (.*)$").matcher(d);
        assertTrue(head.find(), "describe header:\n" + d);
        assertFalse(head.group(1).equals("AAAAAAAAAAAAAAAAAAAAAA"), "a real topic id");
        assertTrue(head.group(2).contains("retention.ms=7200000"), "configs: " + head.group(2));
        Pattern part = Pattern.compile("(?m)^\\tTopic: " + t + "\\tPartition: (\\d+)\\tLeader: (\\d+)\\t"
                + "Replicas: (\\d+)\\tIsr: (\\d+)");
        Matcher pm = part.matcher(d);
        int partitions = 0;
        while (pm.find()) {
            assertEquals(Integer.toString(partitions), pm.group(1));
            assertEquals(pm.group(2), pm.group(3), "leader is the replica");
            assertEquals(pm.group(2), pm.group(4), "leader is the ISR");
            partitions++;
        }
        assertEquals(2, partitions, "partition lines:\n" + d);

        topics("--alter", "--topic", t, "--partitions", "5");
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!topics("--describe", "--topic", t).contains("PartitionCount: 5")) {
            assertTrue(System.nanoTime() < deadline, "partition count never became 5");
            Thread.sleep(200);
        }

        topics("--delete", "--topic", t);
        awaitListed(t, false);
    }

    @Test
    void getOffsetShellAndDeleteRecordsCommand() throws Exception {
        String t = "cli-offsets";
        topics("--create", "--topic", t, "--partitions", "1", "--replication-factor", "1");
        awaitListed(t, true);
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        long t0 = System.currentTimeMillis() - 600_000;
        List<Future<RecordMetadata>> fs = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < 50; i++) {
                fs.add(producer.send(new ProducerRecord<>(t, 0, t0 + i * 1000L, "k" + i, "v" + i)));
            }
            producer.flush();
        }
        for (Future<RecordMetadata> f : fs) {
            f.get(30, TimeUnit.SECONDS);
        }

        String shell = "org.apache.kafka.tools.GetOffsetShell";
        String b = broker.bootstrap();
        assertEquals(List.of(t + ":0:50"), outLines(tool(shell, "--bootstrap-server", b, "--topic", t, "--time", "-1")));
        assertEquals(List.of(t + ":0:0"), outLines(tool(shell, "--bootstrap-server", b, "--topic", t, "--time", "-2")));
        assertEquals(List.of(t + ":0:20"), outLines(tool(shell, "--bootstrap-server", b, "--topic", t,
                "--time", Long.toString(t0 + 19_500))));
        assertEquals(List.of(t + ":0:49"), outLines(tool(shell, "--bootstrap-server", b, "--topic", t, "--time", "-3")),
                "max timestamp: the last record");

        Path json = Files.createTempFile("delete-records-", ".json");
        try {
            Files.writeString(json, "{\"partitions\":[{\"topic\":\"" + t + "\",\"partition\":0,\"offset\":30}],\"version\":1}");
            String out = tool("org.apache.kafka.tools.DeleteRecordsCommand", "--bootstrap-server", b,
                    "--offset-json-file", json.toString());
            assertTrue(out.contains("partition: " + t + "-0\tlow_watermark: 30"), out);
        } finally {
            Files.deleteIfExists(json);
        }
        assertEquals(List.of(t + ":0:30"), outLines(tool(shell, "--bootstrap-server", b, "--topic", t, "--time", "-2")));
    }

    /** Output lines of the form topic:partition:offset (tools may log other lines). */
    static List<String> outLines(String out) {
        return out.lines().filter(l -> l.matches("[\\w.-]+:\\d+:-?\\d+")).toList();
    }
}
