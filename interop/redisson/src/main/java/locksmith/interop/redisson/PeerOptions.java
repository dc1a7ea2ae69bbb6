package locksmith.interop.redisson;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

import org.redisson.client.codec.StringCodec;
import org.redisson.config.ClusterServersConfig;
import org.redisson.config.Config;
import org.redisson.config.NameMapper;
import org.redisson.config.ReadMode;
import org.redisson.config.ShardedSubscriptionMode;
import org.redisson.config.SingleServerConfig;

/** Command-line options of the peer, and the Redisson {@link Config} they make. */
final class PeerOptions {

    static final String USAGE = String.join("\n",
            "usage: java -jar redisson-peer.jar --url redis://127.0.0.1:PORT",
            "         [--cluster redis://h:p,redis://h:p,...] [--prefix PREFIX]",
            "         [--watchdog-ms N] [--fair-wait-ms N] [--user U] [--password P]",
            "         [--sharded-subscription auto|on|off] [--pool N]",
            "Reads requests '<id> <op> <args...>' on stdin, answers on stdout;",
            "see interop/redisson/README.md.");

    String url;
    final List<String> clusterNodes = new ArrayList<>();
    String prefix;
    Long watchdogMs;
    Long fairWaitMs;
    Integer pool;
    String user;
    String password;
    ShardedSubscriptionMode sharded;

    static PeerOptions parse(String[] args) {
        PeerOptions o = new PeerOptions();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (a.equals("-h") || a.equals("--help")) {
                throw new IllegalArgumentException("help");
            }
            String v;
            int eq = a.indexOf('=');
            if (a.startsWith("--") && eq > 0) {
                v = a.substring(eq + 1);
                a = a.substring(0, eq);
            } else {
                if (i + 1 >= args.length) {
                    throw new IllegalArgumentException("option " + a + " needs a value");
                }
                v = args[++i];
            }
            switch (a) {
                case "--url":
                    o.url = v;
                    break;
                case "--cluster":
                    for (String n : v.split(",")) {
                        if (!n.isBlank()) {
                            o.clusterNodes.add(n.strip());
                        }
                    }
                    break;
                case "--prefix":
                    o.prefix = v;
                    break;
                case "--pool":
                    o.pool = Integer.parseInt(v);
                    break;
                case "--watchdog-ms":
                    o.watchdogMs = Long.parseLong(v);
                    break;
                case "--fair-wait-ms":
                    o.fairWaitMs = Long.parseLong(v);
                    break;
                case "--user":
                    o.user = v;
                    break;
                case "--password":
                    o.password = v;
                    break;
                case "--sharded-subscription":
                    o.sharded = ShardedSubscriptionMode.valueOf(v.toUpperCase(Locale.ROOT));
                    break;
                default:
                    throw new IllegalArgumentException("unknown option " + a);
            }
        }
        if (o.url == null && o.clusterNodes.isEmpty()) {
            throw new IllegalArgumentException("--url or --cluster is required");
        }
        return o;
    }

    Config toConfig() {
        Config config = new Config();
        // Strings only: no Kryo/Fory codec is created or needed at run time.
        config.setCodec(StringCodec.INSTANCE);
        if (watchdogMs != null) {
            config.setLockWatchdogTimeout(watchdogMs);
        }
        if (fairWaitMs != null) {
            config.setFairLockWaitTimeout(fairWaitMs);
        }
        if (prefix != null && !prefix.isEmpty()) {
            config.setNameMapper(new PrefixNameMapper(prefix));
        }
        // Redisson 4 keeps credentials on Config (the per-server setters are deprecated).
        if (user != null) {
            config.setUsername(user);
        }
        if (password != null) {
            config.setPassword(password);
        }
        if (!clusterNodes.isEmpty()) {
            ClusterServersConfig c = config.useClusterServers();
            c.addNodeAddress(clusterNodes.toArray(new String[0]));
            if (url != null && !clusterNodes.contains(url)) {
                c.addNodeAddress(url);
            }
            // Reads (PTTL, HGET for holdcount) from primaries, so answers are not stale.
            c.setReadMode(ReadMode.MASTER);
            c.setMasterConnectionMinimumIdleSize(2);
            c.setSlaveConnectionMinimumIdleSize(1);
            if (sharded != null) {
                c.setShardedSubscriptionMode(sharded);
            }
        } else {
            SingleServerConfig s = config.useSingleServer();
            s.setAddress(url);
            if (pool != null) {
                // Benchmarks: a pool as large as the concurrency, opened at
                // start, so no task waits for a connection.
                s.setConnectionPoolSize(pool);
                s.setConnectionMinimumIdleSize(pool);
            } else {
                // Fewer idle connections at start-up (default 24): quicker "ready".
                s.setConnectionMinimumIdleSize(2);
            }
        }
        return config;
    }

    /** Maps NAME to PREFIX + NAME, and back. */
    static final class PrefixNameMapper implements NameMapper {
        private final String prefix;

        PrefixNameMapper(String prefix) {
            this.prefix = prefix;
        }

        @Override
        public String map(String name) {
            return prefix + name;
        }

        @Override
        public String unmap(String name) {
            return name.startsWith(prefix) ? name.substring(prefix.length()) : name;
        }
    }
}
