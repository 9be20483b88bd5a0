package io.kafkaiq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Kafka's own command-line tools (kafka-tools 4.1.1), run as child JVMs against the broker. */
class KafkaToolsTest {
    static final int PERF_RECORDS = 1_000_000;
    static final Duration PERF_TIMEOUT = Duration.ofMinutes(5);

    /** ProducerPerformance's final summary line. */
    static final Pattern PERF_SUMMARY = Pattern.compile(
            "(?m)^(\\d+) records sent, ([\\d.]+) records/sec \\(([\\d.]+) MB/sec\\), "
                    + "([\\d.]+) ms avg latency, ([\\d.]+) ms max latency, (\\d+) ms 50th, "
                    + "(\\d+) ms 95th, (\\d+) ms 99th, (\\d+) ms 99.9th\\.$");
    /** One API line of BrokerApiVersionsCommand, e.g. "Produce(0): 0 to 13 [usable: 13],". */
    static final Pattern API_LINE = Pattern.compile(
            "(?m)^\\s*(\\w+)\\((\\d+)\\): (\\d+) to (\\d+) \\[(usable: (\\d+)|[^\\]]*)\\],?$");

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

    @Test
    @Timeout(value = 6, unit = TimeUnit.MINUTES)
    void producerPerformanceSendsAMillionRecordsWithDefaultSettings() throws Exception {
        String topic = "producer-performance";
        try (Admin admin = broker.admin()) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }
        long started = System.nanoTime();
        BrokerUnderTest.ToolResult r = BrokerUnderTest.runTool(PERF_TIMEOUT,
                "org.apache.kafka.tools.ProducerPerformance",
                "--topic", topic,
                "--num-records", Integer.toString(PERF_RECORDS),
                "--record-size", "100",
                "--throughput", "-1",
                "--producer-props", "bootstrap.servers=" + broker.bootstrap());
        double seconds = (System.nanoTime() - started) / 1e9;
        assertEquals(0, r.exitCode(), "ProducerPerformance exit code; output:\n" + r.output());
        // Send failures are printed by its callback as stack traces.
        assertFalse(r.output().contains("Exception"), "errors printed:\n" + r.output());
        assertFalse(r.output().contains("ERROR"), "errors printed:\n" + r.output());
        Matcher m = PERF_SUMMARY.matcher(r.output());
        String last = null;
        while (m.find()) {
            last = m.group();
            assertEquals(PERF_RECORDS, Long.parseLong(m.group(1)), "records sent: " + last);
        }
        assertNotNull(last, "no summary line in:\n" + r.output());
        System.err.printf("[%s] ProducerPerformance: %s (wall %.1f s)%n", broker.kind(), last, seconds);
        try (Admin admin = broker.admin()) {
            TopicPartition tp = new TopicPartition(topic, 0);
            long end = admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp)
                    .get(30, TimeUnit.SECONDS).offset();
            assertEquals(PERF_RECORDS, end, "every record acknowledged is in the log, once");
        }
    }

    @Test
    @Timeout(value = 2, unit = TimeUnit.MINUTES)
    void brokerApiVersionsCommandListsOurApis() throws Exception {
        BrokerUnderTest.ToolResult r = BrokerUnderTest.runTool(Duration.ofSeconds(90),
                "org.apache.kafka.tools.BrokerApiVersionsCommand",
                "--bootstrap-server", broker.bootstrap());
        assertEquals(0, r.exitCode(), "BrokerApiVersionsCommand exit code; output:\n" + r.output());
        assertTrue(r.output().contains(broker.bootstrap() + " (id: "),
                "lists the broker at " + broker.bootstrap() + ":\n" + r.output());
        Map<String, int[]> apis = new HashMap<>();
        Matcher m = API_LINE.matcher(r.output());
        while (m.find()) {
            int min = Integer.parseInt(m.group(3));
            int max = Integer.parseInt(m.group(4));
            assertTrue(m.group(6) != null, "the 4.1.1 tool can use " + m.group() );
            int usable = Integer.parseInt(m.group(6));
            apis.put(m.group(1), new int[] {Integer.parseInt(m.group(2)), min, max, usable});
        }
        System.err.printf("[%s] BrokerApiVersionsCommand listed %d APIs%n", broker.kind(), apis.size());
        // key, lowest version a 4.1 client needs (a broker may start lower), and the client's
        // own minimum it must be able to use.
        int[][] required = {
            {0, 3}, // Produce: 4.1 clients send v3+
            {1, 4}, // Fetch: v4+
            {3, 0}, // Metadata
            {18, 0}, // ApiVersions
        };
        String[] names = {"Produce", "Fetch", "Metadata", "ApiVersions"};
        for (int i = 0; i < names.length; i++) {
            int[] v = apis.get(names[i]);
            assertNotNull(v, names[i] + " is listed in:\n" + r.output());
            assertEquals(required[i][0], v[0], names[i] + " api key");
            assertTrue(v[1] >= 0 && v[1] <= v[2], names[i] + " range " + v[1] + " to " + v[2]);
            assertTrue(v[1] <= required[i][1], names[i] + " minimum " + v[1] + " admits v" + required[i][1]);
            assertTrue(v[2] >= required[i][1], names[i] + " maximum " + v[2]);
            assertTrue(v[3] >= v[1] && v[3] <= v[2], names[i] + " usable version within range");
        }
        // ApiVersions v3+ carries the client software name; every 4.x client starts there.
        assertTrue(apis.get("ApiVersions")[2] >= 3, "ApiVersions max >= 3");
    }
}
