//! The buyers: N distinct users hitting the instances at once, bounded in
//! concurrency and in time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::routes::USER_HEADER;

/// What one buyer got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 201 with this order id.
    Accepted(i64),
    /// 200: the answer of a route that buys nothing ([`Route::Empty`]).
    Served,
    /// 202 `outcome_unknown`: the purchase was still running at the
    /// service's deadline, or the gate's reply was lost; the buyer must
    /// look at `GET /vouchers/{id}/orders/mine`.
    Unknown,
    /// An error answer: HTTP status and the body's `error` code.
    Rejected(u16, String),
    /// No answer (connection failure).
    Transport,
    /// The time bound ran out first.
    TimedOut,
}

/// One buyer's result.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The buyer.
    pub user_id: i64,
    /// The answer.
    pub outcome: Outcome,
    /// Request latency.
    pub latency: Duration,
}

/// A load run's results.
#[derive(Debug, Clone)]
pub struct LoadRun {
    /// One per buyer, in completion order.
    pub samples: Vec<Sample>,
    /// From the first request to the last answer.
    pub elapsed: Duration,
}

/// What every request of a load run asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `POST /vouchers/{id}/orders` as buyer `X-User-Id`: a purchase.
    Purchase,
    /// `GET /livez` with the same header: the service's HTTP stack and
    /// nothing else (no Redis, no database), the ceiling a purchase route
    /// can reach through the same balancer and instances.
    Empty,
}

/// Plan of one load run.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// Instance base URLs; buyer i goes to instance i mod len.
    pub instances: Vec<String>,
    /// The voucher to buy.
    pub voucher_id: i64,
    /// First user id; buyers are `first_user .. first_user + buyers`.
    pub first_user: i64,
    /// How many distinct buyers.
    pub buyers: usize,
    /// Concurrent requests each buyer sends (1: one purchase per buyer;
    /// more: the one-order-per-user race).
    pub requests_per_buyer: usize,
    /// Requests in flight at most.
    pub concurrency: usize,
    /// The whole run stops after this long; unanswered buyers time out.
    pub time_limit: Duration,
    /// What the requests ask for.
    pub route: Route,
}

/// Runs the buyers; ticks `progress` once per answer.
pub async fn run(plan: &LoadPlan, progress: &ProgressBar) -> LoadRun {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(plan.concurrency)
        .timeout(plan.time_limit)
        .build()
        .expect("a plain HTTP client builds");
    let gate = Arc::new(Semaphore::new(plan.concurrency.max(1)));
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + plan.time_limit;
    let mut tasks = JoinSet::new();
    let per_buyer = plan.requests_per_buyer.max(1);
    // A buyer's requests go out back to back (spread over the instances),
    // so they race each other.
    for i in 0..plan.buyers * per_buyer {
        let user_id = plan.first_user + (i / per_buyer) as i64;
        let base = &plan.instances[i % plan.instances.len()];
        let route = plan.route;
        let url = match route {
            Route::Purchase => format!("{base}/vouchers/{}/orders", plan.voucher_id),
            Route::Empty => format!("{base}/livez"),
        };
        let http = http.clone();
        let gate = gate.clone();
        tasks.spawn(async move {
            let Ok(_permit) = gate.acquire_owned().await else {
                return Sample {
                    user_id,
                    outcome: Outcome::TimedOut,
                    latency: Duration::ZERO,
                };
            };
            let t0 = Instant::now();
            let request = match route {
                Route::Purchase => http.post(&url),
                Route::Empty => http.get(&url),
            }
            .header(USER_HEADER, user_id)
            .send();
            let outcome = match tokio::time::timeout_at(deadline, async {
                let response = request.await?;
                let status = response.status().as_u16();
                let body: Value = response.json().await.unwrap_or(Value::Null);
                Ok::<_, reqwest::Error>((status, body))
            })
            .await
            {
                Err(_) => Outcome::TimedOut,
                Ok(Err(e)) if e.is_timeout() => Outcome::TimedOut,
                Ok(Err(_)) => Outcome::Transport,
                Ok(Ok((201, body))) => match body["order_id"].as_str().and_then(|s| s.parse().ok())
                {
                    Some(id) => Outcome::Accepted(id),
                    None => Outcome::Rejected(201, "no order id".into()),
                },
                Ok(Ok((200, _))) if route == Route::Empty => Outcome::Served,
                Ok(Ok((202, _))) => Outcome::Unknown,
                Ok(Ok((status, body))) => Outcome::Rejected(
                    status,
                    body["error"].as_str().unwrap_or("unknown").to_owned(),
                ),
            };
            Sample {
                user_id,
                outcome,
                latency: t0.elapsed(),
            }
        });
    }
    let mut samples = Vec::with_capacity(plan.buyers * per_buyer);
    while let Some(done) = tasks.join_next().await {
        if let Ok(sample) = done {
            samples.push(sample);
        }
        progress.inc(1);
    }
    LoadRun {
        samples,
        elapsed: started.elapsed(),
    }
}

/// The `q`-quantile (0..=1) of the samples' latencies, answered ones only.
pub fn latency_quantile(samples: &[Sample], q: f64) -> Duration {
    let mut latencies: Vec<Duration> = samples
        .iter()
        .filter(|s| {
            matches!(
                s.outcome,
                Outcome::Accepted(_) | Outcome::Served | Outcome::Unknown | Outcome::Rejected(..)
            )
        })
        .map(|s| s.latency)
        .collect();
    if latencies.is_empty() {
        return Duration::ZERO;
    }
    latencies.sort();
    let rank = ((latencies.len() as f64 - 1.0) * q).round() as usize;
    latencies[rank.min(latencies.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_the_ranked_sample() {
        let samples: Vec<Sample> = (1..=100)
            .map(|ms| Sample {
                user_id: ms,
                outcome: Outcome::Rejected(409, "sold_out".into()),
                latency: Duration::from_millis(ms as u64),
            })
            .collect();
        assert_eq!(latency_quantile(&samples, 0.5), Duration::from_millis(51));
        assert_eq!(latency_quantile(&samples, 0.99), Duration::from_millis(99));
        assert_eq!(latency_quantile(&[], 0.5), Duration::ZERO);
    }
}
