//! The demo's results: the table, the JSON file and the SVG chart (drawn
//! with plotters).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::Serialize;

use crate::config::Strategy;

/// One strategy's row.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyResult {
    /// Which strategy both instances ran.
    pub strategy: Strategy,
    /// Buyers sent (each buys once).
    pub requests: usize,
    /// 201 answers: purchases the service promised.
    pub accepted: usize,
    /// Orders the database holds for the voucher after draining.
    pub orders_in_db: usize,
    /// The database's stock after the sale: `stock - orders_in_db`, below
    /// zero when the racy strategies wrote more orders than items.
    pub db_stock: i64,
    /// Sold beyond the stock: orders written (or 201s promised) past the
    /// last item.
    pub oversold: usize,
    /// Buyers a safe strategy's gate let through but the database's stock
    /// guard refused (409 `oversold`): the last line of defense firing.
    /// Always 0 unless a gate is broken.
    pub refused_by_db_guard: usize,
    /// (user, voucher) pairs with more than one order in the database.
    pub duplicate_pairs: usize,
    /// Accepted orders the database never got.
    pub lost: usize,
    /// 409 sold out / already bought.
    pub sold_out: usize,
    /// 503 answers (busy lock, Redis trouble).
    pub unavailable: usize,
    /// Other errors, transport failures and time-outs.
    pub errors: usize,
    /// Requests per second over the load phase.
    pub requests_per_sec: f64,
    /// Median latency, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
    /// Items on sale.
    pub stock: i64,
    /// What the same balancer and instances answered on the empty route
    /// (`GET /livez`) just before the sale, with as many requests and as
    /// many in flight: the HTTP stack's own limit in this round.
    pub ceiling: Ceiling,
}

/// The empty route's run in one round (the best of [`CEILING_RUNS`]).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Ceiling {
    /// Requests per second.
    pub requests_per_sec: f64,
    /// Median latency, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
}

/// Runs of the empty route per round; the fastest counts, as a ceiling
/// should (a slower run only met more noise from the shared machine).
pub const CEILING_RUNS: usize = 3;

impl StrategyResult {
    /// The strategy's requests per second as a fraction of its round's
    /// ceiling.
    pub fn of_ceiling(&self) -> f64 {
        self.requests_per_sec / self.ceiling.requests_per_sec.max(1e-9)
    }

    /// True when the row meets the safe strategies' promise: exactly the
    /// stock sold, to distinct users, nothing lost, nothing oversold.
    pub fn is_exact(&self) -> bool {
        self.oversold == 0
            && self.duplicate_pairs == 0
            && self.lost == 0
            && self.orders_in_db as i64 == self.stock
            && self.accepted as i64 == self.stock
    }
}

/// The one-order-per-user race: each buyer sends many purchases at once.
#[derive(Debug, Clone, Serialize)]
pub struct DuplicateResult {
    /// Which strategy both instances ran.
    pub strategy: Strategy,
    /// Distinct buyers.
    pub buyers: usize,
    /// Requests in all (`buyers` x requests per buyer).
    pub requests: usize,
    /// 201 answers.
    pub accepted: usize,
    /// Orders in the database after draining.
    pub orders_in_db: usize,
    /// Buyers with more than one order.
    pub dup: usize,
    /// Accepted orders never written.
    pub lost: usize,
    /// Buyers without an order after the run: every one of their requests
    /// was refused. Under load a buyer can be refused ten times for a
    /// reason that goes away (the database busy, the deadline); that is
    /// no fault of the strategy, and [`DuplicateResult::unserved_answers`]
    /// says which.
    pub unserved: usize,
    /// What the unserved buyers' requests got, by answer ("503
    /// unavailable", "timed out", ...).
    pub unserved_answers: std::collections::BTreeMap<String, usize>,
    /// Unserved buyers told "already bought" (409): refused as a
    /// duplicate with no order to show for it. A defect, always.
    pub wrongly_refused: usize,
    /// No duplicate, nothing lost, and nobody refused as a duplicate
    /// without an order.
    pub pass: bool,
}

/// An instance killed (SIGKILL) in the middle of a `lua` sale, its consumer
/// with it: the survivor must claim and write what the dead one held.
#[derive(Debug, Clone, Serialize)]
pub struct KilledResult {
    /// Always `lua`: the strategy whose orders wait in a stream.
    pub strategy: Strategy,
    /// Buyers sent.
    pub buyers: usize,
    /// Answers received before the kill.
    pub killed_after: u64,
    /// 201 answers.
    pub accepted: usize,
    /// Orders in the database after draining.
    pub orders_in_db: usize,
    /// Accepted orders never written.
    pub lost: usize,
    /// Entries the survivor claimed from the dead consumer (its
    /// `seckill_pipeline_claimed_total`): the orders the kill left
    /// unacknowledged. 0 means the kill happened to find none in flight.
    pub claimed: u64,
    /// Answers that were not 201 or 409: requests the balancer sent to the
    /// killed instance (answered 502).
    pub errors: usize,
    /// Nothing lost, nothing oversold.
    pub pass: bool,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// How the load reached the instances (nginx, or the client-side
    /// fallback and why).
    pub balancer: String,
    /// Service instances per strategy.
    pub instances: usize,
    /// Buyers per strategy.
    pub buyers: usize,
    /// Stock per voucher.
    pub stock: i64,
    /// Requests in flight at most.
    pub concurrency: usize,
    /// One row per strategy.
    pub results: Vec<StrategyResult>,
    /// The median of the rounds' ceilings (by requests per second): the
    /// table's `empty route` row.
    pub ceiling: Option<Ceiling>,
    /// The one-order-per-user race, per strategy (empty without
    /// experiments).
    pub duplicates: Vec<DuplicateResult>,
    /// The killed-consumer experiment, when run.
    pub killed: Option<KilledResult>,
}

/// The median of the rounds' ceilings by requests per second (the upper
/// one of an even count); `None` without rounds.
pub fn median_ceiling(results: &[StrategyResult]) -> Option<Ceiling> {
    let mut ceilings: Vec<Ceiling> = results.iter().map(|r| r.ceiling).collect();
    ceilings.sort_by(|a, b| a.requests_per_sec.total_cmp(&b.requests_per_sec));
    ceilings.get(ceilings.len() / 2).copied()
}

/// `PASS` or `FAIL`.
fn verdict(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "FAIL"
    }
}

/// The table printed at the end of the demo, with a legend, so it reads
/// without the README.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} buyers for {} items, {} instances behind {}",
        report.buyers, report.stock, report.instances, report.balancer
    );
    let _ = writeln!(
        out,
        "{:<12} {:>6} {:>6} {:>6} {:>8} {:>8} {:>4} {:>4} {:>8} {:>6} {:>7} {:>6} {:>7} {:>7}  verdict",
        "strategy",
        "buyers",
        "201 ok",
        "in db",
        "db stock",
        "oversold",
        "dup",
        "lost",
        "sold_out",
        "errors",
        "req/s",
        "x ceil",
        "p50 ms",
        "p99 ms"
    );
    if let Some(c) = &report.ceiling {
        let _ = writeln!(
            out,
            "{:<12} {:>6} {:>6} {:>6} {:>8} {:>8} {:>4} {:>4} {:>8} {:>6} {:>7.0} {:>6} {:>7.1} {:>7.1}  -",
            "empty route",
            report.buyers,
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            c.requests_per_sec,
            "1.00",
            c.p50_ms,
            c.p99_ms
        );
    }
    for r in &report.results {
        let _ = writeln!(
            out,
            "{:<12} {:>6} {:>6} {:>6} {:>8} {:>8} {:>4} {:>4} {:>8} {:>6} {:>7.0} {:>6.2} {:>7.1} {:>7.1}  {}",
            label(r.strategy),
            r.requests,
            r.accepted,
            r.orders_in_db,
            r.db_stock,
            r.oversold,
            r.duplicate_pairs,
            r.lost,
            r.sold_out,
            r.errors + r.unavailable,
            r.requests_per_sec,
            r.of_ceiling(),
            r.p50_ms,
            r.p99_ms,
            verdict(r.is_exact())
        );
    }
    let _ = writeln!(
        out,
        "in db = orders written; anything above {} is oversold, and db stock goes below zero by as much.\n\
         dup = buyers with two orders; lost = answered 201 but never written; sold_out = 409 answers;\n\
         errors = 503s, time-outs and transport failures. PASS = exactly the stock sold, once per buyer,\n\
         nothing lost (the racy strategies unsafe and local-mutex are expected to FAIL).\n\
         lua* answers 201 before the database write: a stream consumer writes the order afterwards.\n\
         empty route = GET /livez (no Redis, no database) through the same balancer and instances,\n\
         as many requests, as many in flight: the HTTP stack's own limit (median of the rounds).\n\
         x ceil = a strategy's req/s over the empty route's, measured just before it on its own instances.",
        report.stock
    );
    if !report.duplicates.is_empty() {
        let d = &report.duplicates[0];
        let _ = writeln!(
            out,
            "\none user, many requests: {} buyers, {} requests each, all at once",
            d.buyers,
            d.requests / d.buyers.max(1)
        );
        let _ = writeln!(
            out,
            "{:<12} {:>8} {:>6} {:>6} {:>4} {:>4} {:>8}  verdict",
            "strategy", "requests", "201 ok", "in db", "dup", "lost", "unserved"
        );
        for d in &report.duplicates {
            let _ = writeln!(
                out,
                "{:<12} {:>8} {:>6} {:>6} {:>4} {:>4} {:>8}  {}",
                label(d.strategy),
                d.requests,
                d.accepted,
                d.orders_in_db,
                d.dup,
                d.lost,
                d.unserved,
                verdict(d.pass)
            );
        }
        for d in report.duplicates.iter().filter(|d| d.unserved > 0) {
            let answers: Vec<String> = d
                .unserved_answers
                .iter()
                .map(|(answer, n)| format!("{n} x {answer}"))
                .collect();
            let _ = writeln!(
                out,
                "  {}: the {} unserved buyer(s) got {}",
                label(d.strategy),
                d.unserved,
                answers.join(", ")
            );
        }
        let _ = writeln!(
            out,
            "dup = buyers with more than one order: the racy strategies check \"already bought?\" and\n\
             record the buyer in separate steps, so a buyer's concurrent requests pass the check together\n\
             (local-mutex only across instances: each mutex covers its own instance's requests).\n\
             unserved = buyers none of whose requests got an order (all refused: under load, for a reason\n\
             that goes away; refused as \"already bought\" without an order fails the verdict)."
        );
    }
    if let Some(k) = &report.killed {
        let _ = writeln!(
            out,
            "\nconsumer killed mid-sale: {} buyers; one of the two lua instances SIGKILLed after {} answers",
            k.buyers, k.killed_after
        );
        let _ = writeln!(
            out,
            "{:<12} {:>6} {:>6} {:>4} {:>7} {:>6}  verdict",
            "strategy", "201 ok", "in db", "lost", "claimed", "errors"
        );
        let _ = writeln!(
            out,
            "{:<12} {:>6} {:>6} {:>4} {:>7} {:>6}  {}",
            label(k.strategy),
            k.accepted,
            k.orders_in_db,
            k.lost,
            k.claimed,
            k.errors,
            verdict(k.pass)
        );
        let _ = writeln!(
            out,
            "claimed = orders the dead consumer had read but not acknowledged, claimed and written by the\n\
             survivor: lost stays 0;\n\
             errors are requests the balancer sent to the killed instance (answered 502)."
        );
    }
    out
}

/// A strategy's name in tables and charts; `lua*` marks the one that
/// answers before the database write.
pub fn label(strategy: Strategy) -> String {
    if strategy == Strategy::Lua {
        "lua*".to_owned()
    } else {
        strategy.as_str().to_owned()
    }
}

/// Writes `seckill-demo.json` and `seckill-demo.svg` into `dir`; returns
/// their paths.
///
/// # Errors
/// When the directory or a file cannot be written, or the chart cannot be
/// drawn.
pub fn write(report: &Report, dir: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir)?;
    let json = dir.join("seckill-demo.json");
    let svg = dir.join("seckill-demo.svg");
    std::fs::write(&json, serde_json::to_string_pretty(report)?)?;
    std::fs::write(&svg, chart(report).map_err(std::io::Error::other)?)?;
    Ok((json, svg))
}

/// Colours of the chart.
const WRITTEN: RGBColor = RGBColor(0x59, 0xa1, 0x4f);
const OVERSOLD: RGBColor = RGBColor(0xe1, 0x57, 0x59);
const THROUGHPUT: RGBColor = RGBColor(0x4e, 0x79, 0xa7);

/// The chart: per strategy, orders written against the stock line (the
/// part above the line, red, is the oversell), and requests per second.
///
/// # Errors
/// When plotters fails to lay the chart out.
pub fn chart(report: &Report) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1100, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let root = root
            .titled(
                &format!(
                    "Flash sale: {} buyers for {} items, {} instances behind {}",
                    report.buyers, report.stock, report.instances, report.balancer
                ),
                ("sans-serif", 18),
            )
            .map_err(err)?;
        let (left, right) = root.split_horizontally(680);
        let names: Vec<String> = report.results.iter().map(|r| label(r.strategy)).collect();
        let n = names.len().max(1) as u32;
        // Segments 0..=last, one per strategy.
        let last = n - 1;
        let label = |v: &SegmentValue<u32>| match v {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        };

        let stock = report.stock.max(0) as u64;
        let top = report
            .results
            .iter()
            .map(|r| r.orders_in_db as u64)
            .fold(stock, u64::max);
        let mut orders = ChartBuilder::on(&left)
            .caption(
                "orders written per strategy (red: beyond the stock = oversold)",
                ("sans-serif", 14),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d((0..last).into_segmented(), 0u64..(top + top / 8 + 1))
            .map_err(err)?;
        orders
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n as usize)
            .x_label_formatter(&label)
            .y_desc("orders in the database")
            .y_labels(8)
            .draw()
            .map_err(err)?;
        let written: Vec<(u32, u64)> = report
            .results
            .iter()
            .enumerate()
            .map(|(i, r)| (i as u32, (r.orders_in_db as u64).min(stock)))
            .collect();
        orders
            .draw_series(
                Histogram::vertical(&orders)
                    .style(WRITTEN.filled())
                    .margin(14)
                    .data(written),
            )
            .map_err(err)?
            .label("written, within the stock")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], WRITTEN.filled()));
        let beyond: Vec<(u32, u64)> = report
            .results
            .iter()
            .enumerate()
            .filter(|(_, r)| r.orders_in_db as u64 > stock)
            .map(|(i, r)| (i as u32, r.orders_in_db as u64))
            .collect();
        orders
            .draw_series(
                Histogram::vertical(&orders)
                    .style(OVERSOLD.filled())
                    .margin(14)
                    .baseline(stock)
                    .data(beyond),
            )
            .map_err(err)?
            .label("written beyond the stock (oversold)")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], OVERSOLD.filled()));
        orders
            .draw_series(DashedLineSeries::new(
                [(SegmentValue::Exact(0), stock), (SegmentValue::Last, stock)],
                8,
                5,
                BLACK.stroke_width(2),
            ))
            .map_err(err)?
            .label(format!("stock: {stock} items"))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], BLACK.stroke_width(2)));
        orders
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.4))
            .draw()
            .map_err(err)?;

        let fastest = report
            .results
            .iter()
            .map(|r| r.requests_per_sec)
            .fold(1.0, f64::max);
        let mut speed = ChartBuilder::on(&right)
            .caption(
                "requests per second (lua*: 201 before the database write)",
                ("sans-serif", 14),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d((0..last).into_segmented(), 0.0..fastest * 1.15)
            .map_err(err)?;
        speed
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n as usize)
            .x_label_formatter(&label)
            .y_desc("requests / s")
            .y_labels(8)
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(err)?;
        speed
            .draw_series(
                Histogram::vertical(&speed)
                    .style(THROUGHPUT.filled())
                    .margin(10)
                    .data(
                        report
                            .results
                            .iter()
                            .enumerate()
                            .map(|(i, r)| (i as u32, r.requests_per_sec)),
                    ),
            )
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Plotters' drawing errors, as a plain message.
fn err<E: std::error::Error + Send + Sync>(
    e: DrawingAreaErrorKind<E>,
) -> Box<dyn std::error::Error + Send + Sync> {
    e.to_string().into()
}
