"""Python peers for `locksmith-lab bench --peers`: redis-py's Lock and
python-redis-lock, run the way a Python service would (one client, one
thread per task), with the same workloads as the Rust contenders.

Prints one JSON object: {"ops": N, "elapsed": seconds, "total": counter}.
"""
import argparse
import json
import threading
import time

import redis


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--lib", choices=["redis-py", "python-redis-lock"], required=True)
    ap.add_argument("--mode", choices=["uncontended", "contended"], required=True)
    ap.add_argument("--tasks", type=int, required=True)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--prefix", required=True)
    args = ap.parse_args()

    conn = redis.Redis.from_url(args.url, max_connections=args.tasks + 4)
    counter = f"{args.prefix}:{args.lib}:counter"

    def make_lock(name):
        if args.lib == "redis-py":
            return conn.lock(name, timeout=30)
        import redis_lock

        return redis_lock.Lock(conn, name, expire=30)

    counts = [0] * args.tasks
    deadline = time.monotonic() + args.duration

    def work(i):
        name = (
            f"{args.prefix}:{args.lib}:own:{i}"
            if args.mode == "uncontended"
            else f"{args.prefix}:{args.lib}:contended"
        )
        while time.monotonic() < deadline:
            lock = make_lock(name)
            lock.acquire(blocking=True)
            if args.mode == "contended":
                value = int(conn.get(counter) or 0)
                conn.set(counter, value + 1)
            lock.release()
            counts[i] += 1

    started = time.monotonic()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(args.tasks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    print(json.dumps({"ops": sum(counts), "elapsed": elapsed, "total": int(conn.get(counter) or 0)}))


if __name__ == "__main__":
    main()
