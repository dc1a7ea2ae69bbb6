//! The benchmark's SVG chart: one horizontal bar per phase, its rate in
//! operations per second, the phase names on the axis.

use plotters::prelude::*;

use super::Phase;

/// Bar colour.
const BAR: RGBColor = RGBColor(0x4e, 0x79, 0xa7);

/// An SVG of the phases' rates, titled `title`.
pub(super) fn bars(title: &str, phases: &[&Phase]) -> Result<String, String> {
    let err = |e: &dyn std::fmt::Display| format!("cannot draw the chart: {e}");
    let n = phases.len().max(1) as u32;
    let top = phases.iter().map(|p| p.rate()).fold(1.0, f64::max);
    let height = 120 + 44 * n;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let names: Vec<String> = phases.iter().map(|p| p.name.clone()).collect();
        let label = |v: &SegmentValue<u32>| match v {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(300)
            .build_cartesian_2d(0f64..top * 1.15, (0..n - 1).into_segmented())
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n as usize)
            .y_label_formatter(&label)
            .x_desc("operations per second (higher is better)")
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .x_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(|e| err(&e))?;
        chart
            .draw_series(
                Histogram::horizontal(&chart)
                    .style(BAR.filled())
                    .margin(8)
                    .data(phases.iter().enumerate().map(|(i, p)| (i as u32, p.rate()))),
            )
            .map_err(|e| err(&e))?;
        // The value at the end of each bar.
        chart
            .draw_series(phases.iter().enumerate().map(|(i, p)| {
                Text::new(
                    format!(" {:.0}/s", p.rate()),
                    (p.rate(), SegmentValue::CenterOf(i as u32)),
                    ("sans-serif", 13),
                )
            }))
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}
