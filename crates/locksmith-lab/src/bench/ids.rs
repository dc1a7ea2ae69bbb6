//! `locksmith-lab bench --ids`: the id generator in both modes against a plain
//! `INCR` loop, side by side in one run: `--tasks` tasks in one client
//! take ids for `--duration` each.

use tokio::time::Instant;

use super::{drive, progress, report, Bench, Outcome, Phase};

/// Ids per round trip in block mode.
const BLOCK: u32 = 1000;

impl Bench {
    /// Runs the three phases and prints the table and the target.
    pub(super) async fn run_ids(&self) -> Result<(), String> {
        let plain = self.incr_loop().await?;
        progress(&plain);
        let single = self.generator(1).await?;
        progress(&single);
        let block = self.generator(BLOCK).await?;
        progress(&block);
        println!();
        report(
            &self.args,
            "locksmith-lab bench --ids: ids per second",
            &[&plain, &single, &block],
        )?;
        let ratio = block.rate() / single.rate().max(1e-9);
        println!("\nTargets:");
        let pass = ratio >= 20.0;
        println!(
            "  [{}] block mode ({BLOCK} per round trip) >= 20x one INCR per id: {ratio:.1}x ({:.0}/s vs {:.0}/s; a bare INCR loop: {:.0}/s)",
            if pass { "PASS" } else { "FAIL" },
            block.rate(),
            single.rate(),
            plain.rate()
        );
        Ok(())
    }

    /// A bare `INCR` loop: the ceiling of one round trip per id.
    async fn incr_loop(&self) -> Result<Phase, String> {
        let key = format!("{}:incr", self.prefix);
        let (ops, elapsed, _) = drive(self.args.tasks, self.args.duration, |_, deadline| {
            let (mut conn, key) = (self.conn.clone(), key.clone());
            async move {
                let mut outcome = Outcome::default();
                while Instant::now() < deadline {
                    let _: i64 = redis::cmd("INCR")
                        .arg(&key)
                        .query_async(&mut conn)
                        .await
                        .map_err(|e| e.to_string())?;
                    outcome.ops += 1;
                }
                Ok(outcome)
            }
        })
        .await?;
        Ok(Phase {
            name: "INCR loop (no id logic)".into(),
            ops,
            elapsed,
            ..Phase::default()
        })
    }

    /// The library's generator with `block` ids per round trip; checks the
    /// ids of each task increase and all are unique.
    async fn generator(&self, block: u32) -> Result<Phase, String> {
        let client = self.client().await?;
        let ids = client
            .id_generator(format!("{}:ids{block}", self.prefix))
            .and_then(|g| g.with_block(block))
            .map_err(|e| e.to_string())?;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (ops, elapsed, _) = drive(self.args.tasks, self.args.duration, |_, deadline| {
            let (ids, seen) = (ids.clone(), seen.clone());
            async move {
                let mut outcome = Outcome::default();
                let mut mine = Vec::new();
                while Instant::now() < deadline {
                    let id = ids.next_id().await.map_err(|e| e.to_string())?;
                    if mine.last().is_some_and(|&last| id <= last) {
                        return Err(format!("id {id} not above the task's last"));
                    }
                    mine.push(id);
                    outcome.ops += 1;
                }
                seen.lock().map_err(|e| e.to_string())?.extend(mine);
                Ok(outcome)
            }
        })
        .await?;
        let mut all = std::mem::take(&mut *seen.lock().map_err(|e| e.to_string())?);
        let taken = all.len();
        all.sort_unstable();
        all.dedup();
        Ok(Phase {
            name: if block == 1 {
                "IdGenerator, one INCR per id".into()
            } else {
                format!("IdGenerator, block of {block}")
            },
            ops,
            elapsed,
            check: if all.len() == taken {
                "unique, increasing per task".into()
            } else {
                format!("{} DUPLICATES", taken - all.len())
            },
            ..Phase::default()
        })
    }
}
