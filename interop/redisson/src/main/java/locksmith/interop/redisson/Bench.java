package locksmith.interop.redisson;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.redisson.api.RBucket;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;

/**
 * The benchmark workloads of {@code locksmith-lab bench --peers}, run inside
 * the JVM so that Redisson is measured by itself (no request per lock over
 * the peer's stdin). Every workload first runs for WARMUP_MS untimed (the JIT
 * compiles the hot paths, the connection pool fills), then for DURATION_MS
 * timed. Tasks are asynchronous loops on Redisson's async API, each acting as
 * its own thread id, so TASKS tasks need no TASKS threads.
 */
final class Bench {

    private static final TimeUnit MS = TimeUnit.MILLISECONDS;

    private Bench() {
    }

    /**
     * {@code uncontended TASKS DURATION_MS WARMUP_MS PREFIX}: every task locks
     * and unlocks its own lock PREFIX:i (watchdog lease, as locksmith's
     * default). Answers {@code <ops> <elapsed_ms>}.
     */
    static CompletionStage<String> uncontended(RedissonClient client, String[] a) {
        int tasks = (int) Ops.num(a[0]);
        long duration = Ops.num(a[1]);
        long warmup = Ops.num(a[2]);
        String prefix = a[3];
        Window window = new Window(warmup, duration);
        List<CompletableFuture<Void>> loops = new ArrayList<>();
        for (int i = 0; i < tasks; i++) {
            RLock lock = client.getLock(prefix + ":" + i);
            long thread = 1_000_000L + i;
            CompletableFuture<Void> end = new CompletableFuture<>();
            loops.add(end);
            uncontendedStep(lock, thread, window, end);
        }
        return CompletableFuture.allOf(loops.toArray(new CompletableFuture[0]))
                .thenApply(v -> window.ops.get() + " " + duration);
    }

    private static void uncontendedStep(RLock lock, long thread, Window window,
            CompletableFuture<Void> end) {
        if (window.over()) {
            end.complete(null);
            return;
        }
        lock.lockAsync(-1, MS, thread)
                .thenCompose(v -> lock.unlockAsync(thread))
                .whenComplete((v, e) -> {
                    if (e != null) {
                        fail(lock, thread, window, end, e);
                        return;
                    }
                    window.count();
                    uncontendedStep(lock, thread, window, end);
                });
    }

    /**
     * {@code contended TASKS DURATION_MS WARMUP_MS NAME COUNTER}: every task
     * locks NAME, reads COUNTER, writes it plus one, unlocks. Answers
     * {@code <ops> <elapsed_ms> <all ops> <counter> <waits_us,...>}: the
     * timed ops, the ops of the whole run (warm-up included) and the counter
     * at the end (equal when no section overlapped another), and every timed
     * wait for the lock in microseconds.
     */
    static CompletionStage<String> contended(RedissonClient client, String[] a) {
        int tasks = (int) Ops.num(a[0]);
        long duration = Ops.num(a[1]);
        long warmup = Ops.num(a[2]);
        String name = a[3];
        RBucket<String> counter = client.getBucket(a[4], StringCodec.INSTANCE);
        Window window = new Window(warmup, duration);
        AtomicLong all = new AtomicLong();
        ConcurrentLinkedQueue<Long> waits = new ConcurrentLinkedQueue<>();
        List<CompletableFuture<Void>> loops = new ArrayList<>();
        return counter.setAsync("0").thenCompose(set -> {
            for (int i = 0; i < tasks; i++) {
                RLock lock = client.getLock(name);
                long thread = 2_000_000L + i;
                CompletableFuture<Void> end = new CompletableFuture<>();
                loops.add(end);
                contendedStep(lock, thread, counter, window, all, waits, end);
            }
            return CompletableFuture.allOf(loops.toArray(new CompletableFuture[0]));
        }).thenCompose(v -> counter.getAsync()).thenApply(total -> {
            StringBuilder out = new StringBuilder();
            out.append(window.ops.get()).append(' ').append(duration).append(' ')
                    .append(all.get()).append(' ').append(total).append(' ');
            boolean first = true;
            for (Long w : waits) {
                if (!first) {
                    out.append(',');
                }
                out.append(w);
                first = false;
            }
            if (first) {
                out.append('0');
            }
            return out.toString();
        });
    }

    private static void contendedStep(RLock lock, long thread, RBucket<String> counter,
            Window window, AtomicLong all, ConcurrentLinkedQueue<Long> waits,
            CompletableFuture<Void> end) {
        if (window.over()) {
            end.complete(null);
            return;
        }
        long asked = System.nanoTime();
        lock.lockAsync(-1, MS, thread)
                .thenCompose(v -> {
                    if (window.timed(asked)) {
                        waits.add((System.nanoTime() - asked) / 1_000);
                    }
                    return counter.getAsync();
                })
                .thenCompose(value -> counter.setAsync(Long.toString(Long.parseLong(value) + 1)))
                .thenCompose(v -> lock.unlockAsync(thread))
                .whenComplete((v, e) -> {
                    if (e != null) {
                        fail(lock, thread, window, end, e);
                        return;
                    }
                    all.incrementAndGet();
                    window.count();
                    contendedStep(lock, thread, counter, window, all, waits, end);
                });
    }

    /**
     * {@code handoff N NAME}: thread 1 holds NAME while thread 2 waits; thread
     * 1 unlocks and the time until thread 2 holds is one hand-off, taken from
     * the middle of the unlock call (as locksmith's bench does); then the two
     * swap. Runs on a blocking thread. Answers {@code <p50_us> <p99_us> <n>}.
     */
    static CompletionStage<String> handoff(RedissonClient client, ExecutorService blocking,
            String[] a) {
        int rounds = (int) Ops.num(a[0]);
        String name = a[1];
        return CompletableFuture.supplyAsync(() -> {
            List<Long> samples = new ArrayList<>();
            RLock[] locks = {client.getLock(name), client.getLock(name)};
            long[] threads = {1, 2};
            try {
                locks[0].lockAsync(-1, MS, threads[0]).toCompletableFuture().get();
                int holder = 0;
                for (int r = 0; r < rounds; r++) {
                    int waiter = 1 - holder;
                    long[] granted = new long[1];
                    CompletableFuture<Void> waiting = locks[waiter]
                            .lockAsync(-1, MS, threads[waiter]).toCompletableFuture()
                            .whenComplete((v, e) -> granted[0] = System.nanoTime());
                    // Let the waiter subscribe and find the lock busy.
                    Thread.sleep(20);
                    long before = System.nanoTime();
                    locks[holder].unlockAsync(threads[holder]).toCompletableFuture().get();
                    long after = System.nanoTime();
                    waiting.get(10, TimeUnit.SECONDS);
                    long released = before + (after - before) / 2;
                    samples.add(Math.max(0, granted[0] - released) / 1_000);
                    holder = waiter;
                }
                locks[holder].unlockAsync(threads[holder]).toCompletableFuture().get();
            } catch (Exception e) {
                throw new java.util.concurrent.CompletionException(e);
            }
            Collections.sort(samples);
            long p50 = samples.get(samples.size() / 2);
            long p99 = samples.get(Math.min(samples.size() - 1, (int) (samples.size() * 0.99)));
            return p50 + " " + p99 + " " + samples.size();
        }, blocking);
    }

    /**
     * Ends a loop that failed: gives back the lock if this thread id still
     * holds it (a failure after the lock was taken would otherwise keep every
     * other loop waiting while the watchdog renews it), stops the other
     * loops at once, and fails the run with the error.
     */
    private static void fail(RLock lock, long thread, Window window,
            CompletableFuture<Void> end, Throwable e) {
        window.stop();
        lock.isHeldByThreadAsync(thread)
                .thenCompose(held -> {
                    if (Boolean.TRUE.equals(held)) {
                        return lock.unlockAsync(thread);
                    }
                    return CompletableFuture.<Void>completedFuture(null);
                })
                .whenComplete((x, ignored) -> end.completeExceptionally(e));
    }

    /** The warm-up and the timed window after it. */
    private static final class Window {
        private final long start = System.nanoTime();
        private final long timedFrom;
        private final long end;
        private volatile boolean stopped;
        final AtomicLong ops = new AtomicLong();

        Window(long warmupMs, long durationMs) {
            timedFrom = start + warmupMs * 1_000_000L;
            end = timedFrom + durationMs * 1_000_000L;
        }

        boolean over() {
            return stopped || System.nanoTime() >= end;
        }

        void stop() {
            stopped = true;
        }

        boolean timed(long at) {
            return at >= timedFrom && at < end;
        }

        /** Counts an op that ended inside the timed window. */
        void count() {
            long now = System.nanoTime();
            if (now >= timedFrom && now < end) {
                ops.incrementAndGet();
            }
        }
    }
}
