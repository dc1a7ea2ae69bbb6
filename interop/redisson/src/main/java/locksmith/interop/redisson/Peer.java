package locksmith.interop.redisson;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RedissonClient;

/**
 * The Redisson peer: a real Redisson client driven over stdin/stdout by
 * locksmith's Rust interop tests. See interop/redisson/README.md for the
 * protocol.
 *
 * <pre>
 * start:    java -jar redisson-peer.jar --url redis://127.0.0.1:PORT [options]
 * peer:     ready &lt;redisson-version&gt;
 * request:  &lt;id&gt; &lt;op&gt; &lt;args...&gt;
 * answer:   &lt;id&gt; ok [values...]   |   &lt;id&gt; err &lt;ExceptionSimpleName&gt; [message]
 * </pre>
 */
public final class Peer {

    private Peer() {
    }

    public static void main(String[] args) {
        // Protocol lines go to the real stdout; anything a library prints
        // with System.out goes to stderr instead.
        PrintStream stdout = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        Wire wire = new Wire(stdout);

        PeerOptions options;
        try {
            options = PeerOptions.parse(args);
        } catch (IllegalArgumentException e) {
            if (!"help".equals(e.getMessage())) {
                System.err.println("redisson-peer: " + e.getMessage());
            }
            System.err.println(PeerOptions.USAGE);
            System.exit(2);
            return;
        }

        String version = redissonVersion();
        RedissonClient client;
        try {
            client = Redisson.create(options.toConfig());
        } catch (Throwable e) {
            System.err.println("redisson-peer: cannot connect: " + e);
            wire.lastLine("fatal " + Wire.describe(e));
            System.exit(1);
            return;
        }

        ExecutorService blocking = Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r, "peer-blocking");
            t.setDaemon(true);
            return t;
        });
        Ops ops = new Ops(client, version, blocking);
        wire.line("ready " + version);

        try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                if (handle(line, ops, wire)) {
                    break;
                }
            }
        } catch (IOException e) {
            System.err.println("redisson-peer: stdin: " + e);
        }

        wire.close();
        try {
            client.shutdown(0, 2, TimeUnit.SECONDS);
        } catch (Throwable e) {
            System.err.println("redisson-peer: shutdown: " + e);
        }
        blocking.shutdownNow();
        stdout.flush();
        System.exit(0);
    }

    /** Starts one request; true on {@code quit}. */
    private static boolean handle(String line, Ops ops, Wire wire) {
        String trimmed = line.strip();
        if (trimmed.isEmpty()) {
            return false;
        }
        String[] parts = trimmed.split("\\s+");
        String id = parts[0];
        if (parts.length < 2) {
            wire.line(id + " err IllegalArgumentException missing op");
            return false;
        }
        String op = parts[1];
        if (op.equals("quit")) {
            wire.lastLine(id + " ok");
            return true;
        }
        String[] rest = Arrays.copyOfRange(parts, 2, parts.length);
        CompletionStage<String> answer;
        try {
            answer = ops.run(op, rest);
        } catch (Throwable e) {
            wire.err(id, e);
            return false;
        }
        answer.whenComplete((value, e) -> {
            if (e != null) {
                wire.err(id, e);
            } else {
                wire.ok(id, value);
            }
        });
        return false;
    }

    /**
     * Redisson's own version: from the pom.properties that Redisson's jar
     * carries (kept in the fat jar), else the version the peer was built
     * against.
     */
    static String redissonVersion() {
        String v = property("META-INF/maven/org.redisson/redisson/pom.properties", "version");
        if (v == null) {
            v = property("redisson-peer.properties", "redisson.version");
        }
        return v == null ? "unknown" : v;
    }

    private static String property(String resource, String key) {
        try (InputStream in = Peer.class.getClassLoader().getResourceAsStream(resource)) {
            if (in == null) {
                return null;
            }
            Properties p = new Properties();
            p.load(in);
            String v = p.getProperty(key);
            return v == null || v.isBlank() || v.contains("${") ? null : v.strip();
        } catch (IOException e) {
            return null;
        }
    }
}
