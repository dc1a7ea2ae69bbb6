package locksmith.interop.redisson;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

import org.redisson.RedissonFencedLock;
import org.redisson.api.RCountDownLatch;
import org.redisson.api.RLock;
import org.redisson.api.RMap;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;

import locksmith.interop.redisson.Wire.ProtocolError;

/**
 * The requests. Each one starts asynchronously and returns a stage that
 * completes with the answer's values (null: no values). Lock operations act
 * as the "thread" HOLDER through Redisson's thread-id variants.
 */
final class Ops {

    private static final TimeUnit MS = TimeUnit.MILLISECONDS;
    private static final List<String> KINDS =
            List.of("lock", "fair", "read", "write", "fenced", "nonreentrant", "nonreentrant-fair");

    private final RedissonClient client;
    private final String version;
    /** For the few calls that Redisson has only as blocking methods. */
    private final ExecutorService blocking;
    /**
     * One RLock object per (kind, name, holder), as a Java thread keeps its
     * own lock object between lock() and unlock(). Redisson keeps state in the
     * object (the lease last asked for, which unlock of a re-entered lock
     * restores with PEXPIRE), so sharing one object between holders would let
     * one holder's lease leak into another's.
     */
    private final Map<String, RLock> locks = new ConcurrentHashMap<>();

    Ops(RedissonClient client, String version, ExecutorService blocking) {
        this.client = client;
        this.version = version;
        this.blocking = blocking;
    }

    CompletionStage<String> run(String op, String[] a) {
        switch (op) {
            // ---- every lock kind ----
            case "lock": {
                need(a, 4, "lock KIND NAME HOLDER LEASE_MS");
                long holder = num(a[2]);
                return done(lock(a[0], a[1], holder).lockAsync(num(a[3]), MS, holder));
            }
            case "trylock": {
                need(a, 5, "trylock KIND NAME HOLDER WAIT_MS LEASE_MS");
                long holder = num(a[2]);
                return str(lock(a[0], a[1], holder).tryLockAsync(num(a[3]), num(a[4]), MS, holder));
            }
            case "unlock": {
                need(a, 3, "unlock KIND NAME HOLDER");
                long holder = num(a[2]);
                return done(lock(a[0], a[1], holder).unlockAsync(holder));
            }
            case "forceunlock":
                need(a, 2, "forceunlock KIND NAME");
                return str(fresh(a[0], a[1]).forceUnlockAsync());
            case "held": {
                need(a, 3, "held KIND NAME HOLDER");
                long holder = num(a[2]);
                return str(lock(a[0], a[1], holder).isHeldByThreadAsync(holder));
            }
            case "holdcount": {
                need(a, 3, "holdcount KIND NAME HOLDER");
                // RLock.getHoldCount() only asks for the calling thread, and
                // there is no thread-id variant: read the owner's hash field.
                String field = ownerField(a[0], num(a[2]));
                RMap<String, String> hash = client.getMap(a[1], StringCodec.INSTANCE);
                return hash.getAsync(field).thenApply(v -> v == null ? "0" : v);
            }
            case "locked": {
                need(a, 2, "locked KIND NAME");
                RLock l = fresh(a[0], a[1]);
                if (a[0].equals("read") || a[0].equals("write")) {
                    // The read and write locks override only the blocking
                    // isLocked() (mode-aware); isLockedAsync() is a plain EXISTS.
                    return blocking(() -> String.valueOf(l.isLocked()));
                }
                return str(l.isLockedAsync());
            }
            case "ttl":
                need(a, 2, "ttl KIND NAME");
                return str(fresh(a[0], a[1]).remainTimeToLiveAsync());

            // ---- fenced lock ----
            case "fencedlock": {
                need(a, 3, "fencedlock NAME HOLDER LEASE_MS");
                long holder = num(a[1]);
                return token(fenced(a[0], holder).tryLockAndGetTokenAsync(-1, num(a[2]), MS, holder));
            }
            case "fencedtrylock": {
                need(a, 4, "fencedtrylock NAME HOLDER WAIT_MS LEASE_MS");
                long holder = num(a[1]);
                return token(fenced(a[0], holder).tryLockAndGetTokenAsync(num(a[2]), num(a[3]), MS, holder));
            }
            case "token":
                need(a, 1, "token NAME");
                return token(client.getFencedLock(a[0]).getTokenAsync());

            // ---- semaphore ----
            case "sem-trysetpermits":
                need(a, 2, "sem-trysetpermits NAME N");
                return str(sem(a[0]).trySetPermitsAsync(count(a[1])));
            case "sem-acquire":
                need(a, 2, "sem-acquire NAME N");
                return done(sem(a[0]).acquireAsync(count(a[1])));
            case "sem-tryacquire":
                need(a, 3, "sem-tryacquire NAME N WAIT_MS");
                return str(sem(a[0]).tryAcquireAsync(count(a[1]), num(a[2]), MS));
            case "sem-release":
                need(a, 2, "sem-release NAME N");
                return done(sem(a[0]).releaseAsync(count(a[1])));
            case "sem-available":
                need(a, 1, "sem-available NAME");
                return str(sem(a[0]).availablePermitsAsync());

            // ---- permit-expirable semaphore ----
            case "psem-trysetpermits":
                need(a, 2, "psem-trysetpermits NAME N");
                return str(psem(a[0]).trySetPermitsAsync(count(a[1])));
            case "psem-acquire":
                need(a, 2, "psem-acquire NAME LEASE_MS");
                return str(psem(a[0]).acquireAsync(num(a[1]), MS));
            case "psem-tryacquire":
                need(a, 3, "psem-tryacquire NAME WAIT_MS LEASE_MS");
                return psem(a[0]).tryAcquireAsync(num(a[1]), num(a[2]), MS)
                        .thenApply(id -> id == null ? "none" : id);
            case "psem-release": {
                need(a, 2, "psem-release NAME ID [ID...]");
                List<String> ids = rest(a, 1);
                if (ids.size() == 1) {
                    return done(psem(a[0]).releaseAsync(ids.get(0)));
                }
                return done(psem(a[0]).releaseAsync(ids));
            }
            case "psem-tryrelease": {
                need(a, 2, "psem-tryrelease NAME ID [ID...]");
                List<String> ids = rest(a, 1);
                if (ids.size() == 1) {
                    return str(psem(a[0]).tryReleaseAsync(ids.get(0)));
                }
                return str(psem(a[0]).tryReleaseAsync(ids));
            }
            case "psem-available":
                need(a, 1, "psem-available NAME");
                return str(psem(a[0]).availablePermitsAsync());

            // ---- count-down latch ----
            case "latch-trysetcount":
                need(a, 2, "latch-trysetcount NAME N");
                return str(latch(a[0]).trySetCountAsync(num(a[1])));
            case "latch-countdown":
                need(a, 1, "latch-countdown NAME");
                return done(latch(a[0]).countDownAsync());
            case "latch-await":
                need(a, 2, "latch-await NAME WAIT_MS");
                return str(latch(a[0]).awaitAsync(num(a[1]), MS));
            case "latch-count":
                need(a, 1, "latch-count NAME");
                return str(latch(a[0]).getCountAsync());

            // ---- the client ----
            case "id":
                need(a, 0, "id");
                return CompletableFuture.completedFuture(client.getId());
            case "version":
                need(a, 0, "version");
                return CompletableFuture.completedFuture(version);
            case "ping":
                return CompletableFuture.completedFuture(null);

            // ---- benchmark workloads (Bench) ----
            case "bench-uncontended":
                need(a, 4, "bench-uncontended TASKS DURATION_MS WARMUP_MS PREFIX");
                return Bench.uncontended(client, a);
            case "bench-contended":
                need(a, 5, "bench-contended TASKS DURATION_MS WARMUP_MS NAME COUNTER");
                return Bench.contended(client, a);
            case "bench-handoff":
                need(a, 2, "bench-handoff N NAME");
                return Bench.handoff(client, blocking, a);
            default:
                throw new ProtocolError("UnknownOp", op);
        }
    }

    // ---- objects ----

    private RLock lock(String kind, String name, long holder) {
        String key = kind + '\u0000' + name + '\u0000' + holder;
        RLock l = locks.get(key);
        if (l == null) {
            l = locks.computeIfAbsent(key, k -> fresh(kind, name));
        }
        return l;
    }

    /** A new lock object, as a Java caller of {@code redisson.getXxxLock(name)} gets. */
    private RLock fresh(String kind, String name) {
        switch (kind) {
            case "lock":
                return client.getLock(name);
            case "fair":
                return client.getFairLock(name);
            case "read":
                return client.getReadWriteLock(name).readLock();
            case "write":
                return client.getReadWriteLock(name).writeLock();
            case "fenced":
                return client.getFencedLock(name);
            case "nonreentrant":
                return optionalLock("getNonReentrantLock", name);
            case "nonreentrant-fair":
                return optionalLock("getNonReentrantFairLock", name);
            default:
                throw new ProtocolError("UnknownKind", kind + " (one of " + KINDS + ")");
        }
    }

    /**
     * getNonReentrantLock / getNonReentrantFairLock are new in Redisson 4.x;
     * looked up by name so the peer still builds against an older Redisson
     * and then answers {@code err Unsupported}.
     */
    private RLock optionalLock(String method, String name) {
        Method m;
        try {
            m = RedissonClient.class.getMethod(method, String.class);
        } catch (NoSuchMethodException e) {
            throw new ProtocolError("Unsupported", "RedissonClient." + method + " is not in Redisson " + version);
        }
        try {
            return (RLock) m.invoke(client, name);
        } catch (InvocationTargetException e) {
            Throwable c = e.getCause();
            if (c instanceof RuntimeException) {
                throw (RuntimeException) c;
            }
            throw new IllegalStateException(c);
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
    }

    private RedissonFencedLock fenced(String name, long holder) {
        RLock l = lock("fenced", name, holder);
        if (!(l instanceof RedissonFencedLock)) {
            throw new ProtocolError("Unsupported", "getFencedLock returned " + l.getClass().getName());
        }
        return (RedissonFencedLock) l;
    }

    private RSemaphore sem(String name) {
        return client.getSemaphore(name);
    }

    private RPermitExpirableSemaphore psem(String name) {
        return client.getPermitExpirableSemaphore(name);
    }

    private RCountDownLatch latch(String name) {
        return client.getCountDownLatch(name);
    }

    /** The hash field Redisson writes for HOLDER on a lock of KIND. */
    private String ownerField(String kind, long holder) {
        if (!KINDS.contains(kind)) {
            throw new ProtocolError("UnknownKind", kind + " (one of " + KINDS + ")");
        }
        String field = client.getId() + ":" + holder;
        return kind.equals("write") ? field + ":write" : field;
    }

    // ---- helpers ----

    private CompletionStage<String> blocking(Supplier<String> call) {
        return CompletableFuture.supplyAsync(call, blocking);
    }

    private static CompletionStage<String> done(CompletionStage<Void> f) {
        return f.thenApply(v -> null);
    }

    private static <T> CompletionStage<String> str(CompletionStage<T> f) {
        return f.thenApply(String::valueOf);
    }

    private static CompletionStage<String> token(CompletionStage<Long> f) {
        return f.thenApply(t -> t == null ? "none" : t.toString());
    }

    private static void need(String[] a, int n, String usage) {
        if (a.length < n) {
            throw new ProtocolError("IllegalArgumentException", "usage: " + usage);
        }
        if (a.length > n && !usage.endsWith("...]")) {
            throw new ProtocolError("IllegalArgumentException", "too many arguments; usage: " + usage);
        }
    }

    static long num(String s) {
        try {
            return Long.parseLong(s);
        } catch (NumberFormatException e) {
            throw new ProtocolError("IllegalArgumentException", "not a number: " + s);
        }
    }

    private static int count(String s) {
        long v = num(s);
        if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) {
            throw new ProtocolError("IllegalArgumentException", "out of int range: " + s);
        }
        return (int) v;
    }

    private static List<String> rest(String[] a, int from) {
        return Arrays.asList(Arrays.copyOfRange(a, from, a.length));
    }
}
