//! The demo's results: the table, the JSON file and the SVG chart.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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
    /// Purchases the gate let through beyond the stock: 201s plus the
    /// buyers the database's stock guard had to refuse (409 `oversold`),
    /// minus the stock.
    pub oversold: usize,
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
}

impl StrategyResult {
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

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
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
}

/// The table printed at the end of the demo.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12} {:>8} {:>8} {:>7} {:>8} {:>5} {:>5} {:>9} {:>8} {:>8}",
        "strategy",
        "requests",
        "accepted",
        "in db",
        "oversold",
        "dup",
        "lost",
        "req/s",
        "p50 ms",
        "p99 ms"
    );
    for r in &report.results {
        let _ = writeln!(
            out,
            "{:<12} {:>8} {:>8} {:>7} {:>8} {:>5} {:>5} {:>9.0} {:>8.1} {:>8.1}",
            r.strategy.as_str(),
            r.requests,
            r.accepted,
            r.orders_in_db,
            r.oversold,
            r.duplicate_pairs,
            r.lost,
            r.requests_per_sec,
            r.p50_ms,
            r.p99_ms
        );
    }
    out
}

/// Writes `seckill-demo.json` and `seckill-demo.svg` into `dir`; returns
/// their paths.
///
/// # Errors
/// When the directory or files cannot be written.
pub fn write(report: &Report, dir: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir)?;
    let json = dir.join("seckill-demo.json");
    let svg = dir.join("seckill-demo.svg");
    std::fs::write(&json, serde_json::to_string_pretty(report)?)?;
    std::fs::write(&svg, chart(report))?;
    Ok((json, svg))
}

/// One bar series: label, colour, value of a row.
type Series = (&'static str, &'static str, fn(&StrategyResult) -> f64);

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Two panels: per strategy, a bar group of accepted / in db / oversold /
/// lost (left), and requests per second (right).
pub fn chart(report: &Report) -> String {
    const W: f64 = 960.0;
    const H: f64 = 420.0;
    const TOP: f64 = 60.0;
    const BOTTOM: f64 = 360.0;
    let series: [Series; 4] = [
        ("accepted", "#4e79a7", |r| r.accepted as f64),
        ("orders in db", "#59a14f", |r| r.orders_in_db as f64),
        ("oversold", "#e15759", |r| r.oversold as f64),
        ("lost", "#f28e2b", |r| r.lost as f64),
    ];
    let n = report.results.len().max(1) as f64;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="16">Flash sale: {} buyers for {} items on {} instances, per strategy</text>"#,
        W / 2.0,
        report.buyers,
        report.stock,
        report.instances
    );

    // Left panel: outcomes.
    let (lx, lw) = (60.0, 560.0);
    let max_count = report
        .results
        .iter()
        .flat_map(|r| series.iter().map(move |s| (s.2)(r)))
        .fold(report.stock as f64, f64::max)
        .max(1.0);
    axis(&mut svg, lx, lw, TOP, BOTTOM, max_count, "orders");
    // The stock line: everything above it is oversold.
    let stock_y = BOTTOM - (report.stock as f64 / max_count) * (BOTTOM - TOP);
    let _ = writeln!(
        svg,
        r##"<line x1="{lx}" x2="{}" y1="{stock_y:.1}" y2="{stock_y:.1}" stroke="#333" stroke-dasharray="4 3"/><text x="{}" y="{:.1}" text-anchor="end" fill="#333">stock {}</text>"##,
        lx + lw,
        lx + lw,
        stock_y - 4.0,
        report.stock
    );
    let group = lw / n;
    let bar = (group * 0.8) / series.len() as f64;
    for (i, r) in report.results.iter().enumerate() {
        let gx = lx + group * i as f64 + group * 0.1;
        for (j, (_, color, value)) in series.iter().enumerate() {
            let v = value(r);
            let h = (v / max_count) * (BOTTOM - TOP);
            let _ = writeln!(
                svg,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"><title>{} {}: {v}</title></rect>"#,
                gx + bar * j as f64,
                BOTTOM - h,
                bar - 1.0,
                h,
                r.strategy.as_str(),
                series[j].0
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            gx + group * 0.4,
            BOTTOM + 16.0,
            escape(r.strategy.as_str())
        );
    }
    for (j, (label, color, _)) in series.iter().enumerate() {
        let x = lx + 10.0 + j as f64 * 130.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{x}" y="{}" width="12" height="12" fill="{color}"/><text x="{}" y="{}">{label}</text>"#,
            BOTTOM + 30.0,
            x + 16.0,
            BOTTOM + 40.0
        );
    }

    // Right panel: throughput.
    let (rx, rw) = (700.0, 230.0);
    let max_rps = report
        .results
        .iter()
        .map(|r| r.requests_per_sec)
        .fold(1.0, f64::max);
    axis(&mut svg, rx, rw, TOP, BOTTOM, max_rps, "requests/s");
    let group = rw / n;
    for (i, r) in report.results.iter().enumerate() {
        let h = (r.requests_per_sec / max_rps) * (BOTTOM - TOP);
        let x = rx + group * i as f64 + group * 0.15;
        let _ = writeln!(
            svg,
            r##"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="#76b7b2"><title>{}: {:.0} req/s, p99 {:.1} ms</title></rect>"##,
            BOTTOM - h,
            group * 0.7,
            r.strategy.as_str(),
            r.requests_per_sec,
            r.p99_ms
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{}" text-anchor="end" transform="rotate(-35 {:.1} {})">{}</text>"#,
            x + group * 0.35,
            BOTTOM + 14.0,
            x + group * 0.35,
            BOTTOM + 14.0,
            escape(r.strategy.as_str())
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn axis(svg: &mut String, x: f64, w: f64, top: f64, bottom: f64, max: f64, label: &str) {
    let _ = writeln!(
        svg,
        r##"<line x1="{x}" x2="{x}" y1="{top}" y2="{bottom}" stroke="#999"/><line x1="{x}" x2="{}" y1="{bottom}" y2="{bottom}" stroke="#999"/>"##,
        x + w
    );
    for k in 0..=4 {
        let v = max * k as f64 / 4.0;
        let y = bottom - (bottom - top) * k as f64 / 4.0;
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="{:.1}" text-anchor="end" fill="#666">{v:.0}</text>"##,
            x - 4.0,
            y + 4.0
        );
    }
    let _ = writeln!(
        svg,
        r##"<text x="{x}" y="{}" fill="#666">{label}</text>"##,
        top - 8.0
    );
}
