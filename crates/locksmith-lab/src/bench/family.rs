//! `locksmith-lab bench --family`: the Redisson family beside the plain lock,
//! in one run on one server: the fair lock's contended rate, hand-off and
//! commands per acquisition against the plain lock's; semaphore
//! acquire+release pairs with `--tasks` tasks sharing 8 permits; and how
//! long after the last count-down 100 latch waiters in two clients have
//! all woken.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::contender::Contender;
use super::stats::Latencies;
use super::{drive, progress, ratio, report, Bench, Outcome, Phase};

/// Permits of the semaphore phase.
const PERMITS: u64 = 8;

/// Latch waiters (split over two clients) and rounds of the latch phase.
const LATCH_WAITERS: usize = 100;
const LATCH_ROUNDS: usize = 20;

impl Bench {
    /// Runs the family phases and prints the table and targets.
    pub(super) async fn run_family(&self) -> Result<(), String> {
        let ping = self.ping_series(1000).await?;
        println!(
            "PING RTT (1000 sequential): p50 {:?}, p99 {:?}\n",
            ping.p50(),
            ping.p99()
        );
        let plain = self.contended(self.locksmith().await?).await?;
        progress(&plain);
        let fair = self.contended(self.fair().await?).await?;
        progress(&fair);
        let plain_h = self
            .handoff(self.locksmith().await?, self.locksmith().await?)
            .await?;
        let fair_h = self.handoff(self.fair().await?, self.fair().await?).await?;
        let semaphore = self.semaphore().await?;
        progress(&semaphore);
        let (latch, latch_pings) = self.latch().await?;

        println!();
        report(
            &self.args,
            "locksmith-lab bench --family",
            &[&plain, &fair, &semaphore],
        )?;
        println!();
        println!("Hand-off to a waiter in another client (release to grant):");
        for (name, h) in [("lock", &plain_h), ("fair lock", &fair_h)] {
            println!(
                "  {name:<10} n={:<4} p50 {:>10.1?}  p99 {:>10.1?}  = {:.2} PING RTTs",
                h.handoffs.len(),
                h.handoffs.p50(),
                h.handoffs.p99(),
                ratio(h.handoffs.p50(), h.pings.p50()),
            );
        }
        println!(
            "Latch: last count-down to all {LATCH_WAITERS} waiters (2 clients) awake, {} rounds: p50 {:.1?}, max {:.1?} = {:.2} PING RTTs",
            latch.len(),
            latch.p50(),
            latch.max(),
            ratio(latch.p50(), latch_pings.p50()),
        );

        println!("\nTargets:");
        let fair_vs_plain = fair.rate() / plain.rate().max(1e-9);
        let fair_rtts = ratio(fair_h.handoffs.p50(), fair_h.pings.p50());
        let latch_rtts = ratio(latch.p50(), latch_pings.p50());
        let targets = [
            (
                fair_rtts < 2.0,
                format!("fair lock median hand-off < 2 PING RTTs: {fair_rtts:.2}"),
            ),
            (
                // The phase counts acquire and release; a release is one
                // script call, so the acquisition is the rest.
                fair.lock_cmds - 1.0 <= 3.0,
                format!(
                    "fair lock <= 3 Redis commands per acquisition: {:.2} ({:.2} with the release: {})",
                    fair.lock_cmds - 1.0,
                    fair.lock_cmds,
                    fair.detail
                ),
            ),
            (
                fair_vs_plain >= 0.7,
                format!(
                    "fair lock contended >= 0.7x the plain lock: {fair_vs_plain:.2}x ({:.0}/s vs {:.0}/s)",
                    fair.rate(),
                    plain.rate()
                ),
            ),
            (
                latch_rtts < 3.0,
                format!("latch wakes all {LATCH_WAITERS} waiters < 3 PING RTTs at the median: {latch_rtts:.2}"),
            ),
        ];
        for (pass, text) in &targets {
            println!("  [{}] {text}", if *pass { "PASS" } else { "FAIL" });
        }
        let failed = targets.iter().filter(|(pass, _)| !pass).count();
        println!("{} passed, {failed} missed", targets.len() - failed);
        Ok(())
    }

    async fn fair(&self) -> Result<Contender, String> {
        match self.locksmith().await? {
            Contender::Locksmith(client) => Ok(Contender::LocksmithFair(client)),
            other => Ok(other),
        }
    }

    pub(super) async fn client(&self) -> Result<locksmith::Client, String> {
        match self.locksmith().await? {
            Contender::Locksmith(client) => Ok(client),
            _ => Err("not a locksmith client".into()),
        }
    }

    /// `--tasks` tasks share one semaphore of [`PERMITS`] permits, each
    /// looping acquire(1) + release; a holder count checks the bound.
    async fn semaphore(&self) -> Result<Phase, String> {
        let client = self.client().await?;
        let name = format!("{}:semaphore", self.prefix);
        let pool = client.semaphore(name.clone()).map_err(|e| e.to_string())?;
        pool.try_set_permits(PERMITS)
            .await
            .map_err(|e| e.to_string())?;
        let before = self.commandstats().await?;
        let holders = Arc::new(AtomicU64::new(0));
        let most = Arc::new(AtomicU64::new(0));
        let (ops, elapsed, waits) = drive(self.args.tasks, self.args.duration, |_, deadline| {
            let (pool, holders, most) = (pool.clone(), holders.clone(), most.clone());
            async move {
                let mut outcome = Outcome::default();
                while Instant::now() < deadline {
                    let started = Instant::now();
                    let permit = pool.acquire(1).await.map_err(|e| e.to_string())?;
                    outcome.waits.push(started.elapsed());
                    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    holders.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.map_err(|e| e.to_string())?;
                    outcome.ops += 1;
                }
                Ok(outcome)
            }
        })
        .await?;
        let after = self.commandstats().await?;
        let left = pool.available().await.map_err(|e| e.to_string())?;
        let most = most.load(Ordering::SeqCst);
        let mut phase = Phase {
            name: format!("locksmith semaphore ({PERMITS} permits)"),
            ops,
            elapsed,
            waits: Some(Latencies::new(waits)),
            check: if most <= PERMITS && left == PERMITS as i64 {
                format!("<= {PERMITS} holders, none lost")
            } else {
                format!("{most} HOLDERS, {left} LEFT")
            },
            ..Phase::default()
        };
        Self::count_commands(&mut phase, &before, &after, 0, false);
        Ok(phase)
    }

    /// [`LATCH_WAITERS`] waiters in two clients wait on a latch of count 1;
    /// the time from the count-down until the last waiter woke,
    /// over [`LATCH_ROUNDS`] rounds, with a PING before each.
    async fn latch(&self) -> Result<(Latencies, Latencies), String> {
        let clients = [self.client().await?, self.client().await?];
        let mut conn = self.conn.clone();
        let (mut wakes, mut pings) = (Vec::new(), Vec::new());
        for round in 0..LATCH_ROUNDS {
            let name = format!("{}:latch:{round}", self.prefix);
            let latch = clients[0]
                .count_down_latch(name.clone())
                .map_err(|e| e.to_string())?;
            latch.try_set_count(1).await.map_err(|e| e.to_string())?;
            let mut waiters = Vec::new();
            for i in 0..LATCH_WAITERS {
                let latch = clients[i % 2]
                    .count_down_latch(name.clone())
                    .map_err(|e| e.to_string())?;
                waiters.push(tokio::spawn(async move {
                    latch
                        .wait_for(Duration::from_secs(30))
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok::<_, String>(Instant::now())
                }));
            }
            // Every waiter subscribed (one channel per client).
            let ready = Instant::now() + Duration::from_secs(10);
            while clients.iter().any(|c| c.subscription_count() == 0) && Instant::now() < ready {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            pings.push(super::ping(&mut conn).await?);
            let sent = Instant::now();
            latch.count_down().await.map_err(|e| e.to_string())?;
            let acked = Instant::now();
            // As for hand-offs: the count-down is taken to happen in the
            // middle of its call.
            let opened = sent + (acked - sent) / 2;
            let mut last = opened;
            for w in waiters {
                let woke = w.await.map_err(|e| e.to_string())??;
                last = last.max(woke);
            }
            wakes.push(last.saturating_duration_since(opened));
        }
        Ok((Latencies::new(wakes), Latencies::new(pings)))
    }
}
