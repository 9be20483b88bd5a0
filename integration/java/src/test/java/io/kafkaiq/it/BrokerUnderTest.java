package io.kafkaiq.it;

import java.io.File;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;

/**
 * The broker a test class runs against, chosen by the environment:
 *
 * <ul>
 *   <li>{@code KAFKA_BOOTSTRAP=host:port}: an already running broker (docker-compose); nothing is
 *       started or stopped.
 *   <li>{@code BROKER_UNDER_TEST=apache-kafka}: Apache Kafka 4.1.1 started with
 *       {@code integration/apache-kafka.sh} on free loopback ports, to prove the tests right.
 *   <li>otherwise the KafkaIQ binary at {@code KAFKAIQ_BIN} on a free loopback port with a temp
 *       data dir. A missing {@code KAFKAIQ_BIN} fails the tests; it never skips them.
 * </ul>
 *
 * <p>Every started broker gets its own temp directory, removed at {@link #close()}; its output
 * goes to {@code broker.log} there and is echoed to stderr if it dies early.
 *
 * <p>A broker that misbehaves fails the test class even if every test passed: {@link #close()}
 * and {@link #restart()} throw when its output has a {@code panicked at} line (a panic in any
 * KafkaIQ thread or task), when it exited before it was stopped, when it exits with anything
 * but a clean status after SIGTERM (0; Apache Kafka's JVM also 143), or when it does not exit
 * within {@link #SHUTDOWN_TIMEOUT} (it is then killed). The directory is kept in that case.
 */
public final class BrokerUnderTest implements AutoCloseable {
    /** How long a started broker gets to accept connections and answer DescribeCluster. */
    static final Duration STARTUP_TIMEOUT = Duration.ofSeconds(90);
    /** How long a stopped broker gets to shut down cleanly before it is killed. */
    static final Duration SHUTDOWN_TIMEOUT = Duration.ofSeconds(30);

    private final String kind;
    private final String bootstrap;
    private Process process;
    private final Path dir;
    private final List<String> cmd;

    private BrokerUnderTest(String kind, String bootstrap, Process process, Path dir, List<String> cmd) {
        this.kind = kind;
        this.bootstrap = bootstrap;
        this.process = process;
        this.dir = dir;
        this.cmd = cmd;
    }

    /** Starts (or connects to) the broker the environment selects and waits until it serves. */
    public static BrokerUnderTest start() throws Exception {
        return start(1);
    }

    /**
     * As {@link #start()}, with {@code logDirs} log dirs ({@code data}, {@code data-2}, ...
     * under the broker's directory; Apache Kafka's first is the one it formats). An external
     * broker keeps its own.
     */
    public static BrokerUnderTest start(int logDirs) throws Exception {
        return start(logDirs, List.of());
    }

    /**
     * As {@link #start(int)}, with broker settings ({@code key=value}, Kafka's names) given to
     * either broker the same way: {@code --override} for KafkaIQ, server.properties lines for
     * Apache Kafka. An external broker keeps its own.
     */
    public static BrokerUnderTest start(int logDirs, List<String> settings) throws Exception {
        String external = System.getenv("KAFKA_BOOTSTRAP");
        if (external != null && !external.isBlank()) {
            BrokerUnderTest b = new BrokerUnderTest("external", external, null, null, List.of());
            b.awaitReady();
            return b;
        }
        Path dir = Files.createTempDirectory("kafka-under-test-");
        File log = dir.resolve("broker.log").toFile();
        int port = freePort();
        String selected = System.getenv().getOrDefault("BROKER_UNDER_TEST", "kafkaiq");
        List<String> cmd = new ArrayList<>();
        switch (selected) {
            case "apache-kafka" -> {
                int controllerPort = freePort();
                cmd.add("bash");
                cmd.add(integrationDir().resolve("apache-kafka.sh").toString());
                cmd.add(dir.resolve("kafka").toString());
                cmd.add(Integer.toString(port));
                cmd.add(Integer.toString(controllerPort));
                if (logDirs > 1) {
                    cmd.add("log.dirs=" + logDirsUnder(dir.resolve("kafka").toAbsolutePath(), logDirs));
                }
                cmd.addAll(settings);
            }
            case "kafkaiq" -> {
                String bin = System.getenv("KAFKAIQ_BIN");
                if (bin == null || bin.isBlank()) {
                    throw new IllegalStateException(
                            "KAFKAIQ_BIN is not set: point it at the kafkaiq binary, or set "
                                    + "BROKER_UNDER_TEST=apache-kafka or KAFKA_BOOTSTRAP");
                }
                String listener = "PLAINTEXT://127.0.0.1:" + port;
                cmd.addAll(List.of(
                        bin,
                        "--override", "listeners=" + listener,
                        "--override", "advertised.listeners=" + listener,
                        "--override", "log.dirs=" + logDirsUnder(dir.toAbsolutePath(), logDirs),
                        // Test classes run in parallel JVMs: no fixed HTTP port to fight over.
                        "--override", "http.listener=none"));
                for (String kv : settings) {
                    cmd.addAll(List.of("--override", kv));
                }
            }
            default -> throw new IllegalStateException("unknown BROKER_UNDER_TEST=" + selected);
        }
        BrokerUnderTest b = new BrokerUnderTest(selected, "127.0.0.1:" + port, launch(cmd, log), dir, cmd);
        try {
            b.awaitReady();
        } catch (Exception e) {
            b.dumpLog();
            try {
                b.close();
            } catch (Throwable t) {
                e.addSuppressed(t);
            }
            throw e;
        }
        System.err.printf("[broker] %s serving %s (log %s)%n", selected, b.bootstrap, log);
        return b;
    }

    /** {@code base/data,base/data-2,...}: {@code n} log dirs, comma-separated. */
    private static String logDirsUnder(Path base, int n) {
        List<String> dirs = new ArrayList<>();
        for (int i = 1; i <= n; i++) {
            dirs.add(base.resolve(i == 1 ? "data" : "data-" + i).toString());
        }
        return String.join(",", dirs);
    }

    private static Process launch(List<String> cmd, File log) throws IOException {
        ProcessBuilder pb = new ProcessBuilder(cmd)
                .redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(log));
        pb.environment().putIfAbsent("RUST_LOG", "info");
        return pb.start();
    }

    /**
     * Stops the broker cleanly (SIGTERM) and starts it again on the same port and data, waiting
     * until it serves. Not possible for an external broker.
     */
    public void restart() throws Exception {
        if (process == null) {
            throw new IllegalStateException("cannot restart an external broker");
        }
        failIfMisbehaved(stopProcess());
        process = launch(cmd, dir.resolve("broker.log").toFile());
        awaitReady();
        System.err.printf("[broker] %s restarted on %s%n", kind, bootstrap);
    }

    /**
     * Stops the broker with SIGTERM (SIGKILL after {@link #SHUTDOWN_TIMEOUT}) and returns what
     * was wrong with how it ran and stopped; empty if nothing was.
     */
    private List<String> stopProcess() throws Exception {
        List<String> problems = new ArrayList<>();
        if (!process.isAlive()) {
            problems.add("exited (status " + process.exitValue() + ") before it was stopped");
        }
        // Children first (apache-kafka.sh execs java, but be safe), then the process itself.
        List<ProcessHandle> all = new ArrayList<>();
        process.toHandle().descendants().forEach(all::add);
        all.add(process.toHandle());
        all.forEach(ProcessHandle::destroy);
        for (ProcessHandle h : all) {
            try {
                h.onExit().get(SHUTDOWN_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            } catch (TimeoutException e) {
                problems.add("did not stop within " + SHUTDOWN_TIMEOUT.toSeconds() + " s of SIGTERM (killed)");
                h.destroyForcibly();
                h.onExit().get(10, TimeUnit.SECONDS);
            }
        }
        process.waitFor(10, TimeUnit.SECONDS);
        int status = process.exitValue();
        boolean clean = status == 0 || (status == 143 && kind.equals("apache-kafka"));
        if (problems.isEmpty() && !clean) {
            problems.add("exited with status " + status + " after SIGTERM");
        }
        try (Stream<String> lines = Files.lines(dir.resolve("broker.log"), StandardCharsets.UTF_8)) {
            lines.filter(l -> l.contains("panicked at")).findFirst()
                    .ifPresent(l -> problems.add("panicked: " + l));
        } catch (IOException | java.io.UncheckedIOException e) {
            problems.add("its log is unreadable: " + e);
        }
        return problems;
    }

    /** Throws (after printing the log's tail) if the broker misbehaved. */
    private void failIfMisbehaved(List<String> problems) {
        if (problems.isEmpty()) {
            return;
        }
        dumpLog();
        throw new AssertionError("[broker] " + kind + " misbehaved: " + String.join("; ", problems)
                + " (data and log kept in " + dir + ")");
    }

    public String kind() {
        return kind;
    }

    public String bootstrap() {
        return bootstrap;
    }

    public Admin admin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30_000);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 15_000);
        return Admin.create(p);
    }

    private void awaitReady() throws Exception {
        long deadline = System.nanoTime() + STARTUP_TIMEOUT.toNanos();
        String[] hp = bootstrap.split(":");
        InetSocketAddress addr = new InetSocketAddress(hp[0], Integer.parseInt(hp[1]));
        while (true) {
            if (process != null && !process.isAlive()) {
                throw new IllegalStateException(kind + " exited with " + process.exitValue()
                        + " before serving " + bootstrap);
            }
            try (Socket s = new Socket()) {
                s.connect(addr, 1000);
                break;
            } catch (IOException e) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException(kind + " did not listen on " + bootstrap, e);
                }
                Thread.sleep(200);
            }
        }
        // Listening is not serving: Apache Kafka accepts before its metadata is loaded.
        try (Admin admin = admin()) {
            while (true) {
                try {
                    admin.describeCluster().nodes().get(10, TimeUnit.SECONDS);
                    return;
                } catch (Exception e) {
                    if (System.nanoTime() > deadline) {
                        throw new IllegalStateException(kind + " did not answer DescribeCluster", e);
                    }
                    Thread.sleep(500);
                }
            }
        }
    }

    private void dumpLog() {
        if (dir == null) {
            return;
        }
        try {
            List<String> lines = Files.readAllLines(dir.resolve("broker.log"), StandardCharsets.UTF_8);
            System.err.println("[broker] last lines of " + kind + " output:");
            lines.subList(Math.max(0, lines.size() - 60), lines.size()).forEach(System.err::println);
        } catch (IOException ignored) {
            // The log is best-effort diagnostics; the failure itself is already being thrown.
        }
    }

    @Override
    public void close() throws Exception {
        if (process == null) {
            return;
        }
        List<String> problems = stopProcess();
        process = null;
        failIfMisbehaved(problems);
        if (System.getenv("KEEP_BROKER_DIR") == null) {
            try (Stream<Path> walk = Files.walk(dir)) {
                walk.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
            }
        }
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket()) {
            s.setReuseAddress(false);
            s.bind(new InetSocketAddress("127.0.0.1", 0));
            return s.getLocalPort();
        }
    }

    /** integration/: from KAFKAIQ_ROOT when set, else relative to this Maven project. */
    static Path integrationDir() {
        String root = System.getenv("KAFKAIQ_ROOT");
        if (root != null && !root.isBlank()) {
            return Paths.get(root, "integration");
        }
        return Paths.get(System.getProperty("basedir", ".")).toAbsolutePath().getParent();
    }

    /** Runs a Kafka tool's main class in a child JVM on this suite's classpath. */
    static ToolResult runTool(Duration timeout, String mainClass, String... args) throws Exception {
        List<String> cmd = new ArrayList<>();
        cmd.add(Paths.get(System.getProperty("java.home"), "bin", "java").toString());
        cmd.add("-Xmx512m");
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(mainClass);
        cmd.addAll(List.of(args));
        Path out = Files.createTempFile("kafka-tool-", ".out");
        try {
            Process p = new ProcessBuilder(cmd)
                    .redirectErrorStream(true)
                    .redirectOutput(out.toFile())
                    .start();
            if (!p.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
                p.destroyForcibly().waitFor();
                throw new AssertionError(mainClass + " did not finish within " + timeout + ":\n"
                        + Files.readString(out));
            }
            return new ToolResult(p.exitValue(), Files.readString(out));
        } finally {
            Files.deleteIfExists(out);
        }
    }

    record ToolResult(int exitCode, String output) {}
}
