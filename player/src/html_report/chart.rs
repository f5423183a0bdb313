//! A chart of one value per capture, sorted, drawn by plotters' SVG backend into a String for
//! a report to embed inline: points coloured by kind, an optional band per capture (its noise),
//! and horizontal reference lines (thresholds). Values that are not finite (or, on a log
//! scale, not positive) are left out, so the SVG never holds NaN.

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::figures::tick;

/// Drawn size in pixels (the page scales it down to fit).
const SIZE: (u32, u32) = (1280, 460);

/// One kind of point: its legend entry, colour and points (rank from 0, value).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub rgb: (u8, u8, u8),
    pub points: Vec<(usize, f64)>,
}

/// A shaded interval per capture (rank, low, high).
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    pub label: String,
    pub spans: Vec<(usize, f64, f64)>,
}

/// A horizontal line across the chart; lines of equal label share one legend entry.
#[derive(Debug, Clone, PartialEq)]
pub struct RefLine {
    pub y: f64,
    pub label: String,
    pub rgb: (u8, u8, u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YScale {
    Linear,
    /// For times that span orders of magnitude.
    Log,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SortedChart {
    pub caption: String,
    pub x_label: String,
    pub y_label: String,
    /// How many ranks the x axis spans.
    pub count: usize,
    pub series: Vec<Series>,
    pub band: Option<Band>,
    pub lines: Vec<RefLine>,
    pub scale: YScale,
}

impl SortedChart {
    fn drawable(&self, y: f64) -> bool {
        y.is_finite() && (self.scale == YScale::Linear || y > 0.0)
    }

    /// Every value the y axis must show.
    fn values(&self) -> impl Iterator<Item = f64> + '_ {
        let points = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1));
        let band = self
            .band
            .iter()
            .flat_map(|b| b.spans.iter().flat_map(|s| [s.1, s.2]));
        let lines = self.lines.iter().map(|l| l.y);
        points
            .chain(band)
            .chain(lines)
            .filter(|&y| self.drawable(y))
    }
}

/// The y axis's range: every value with a margin; a sensible one when there is no value or
/// only one.
pub fn y_range(values: impl Iterator<Item = f64>, scale: YScale) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), y| {
        (lo.min(y), hi.max(y))
    });
    match scale {
        YScale::Linear if lo > hi => (0.0, 1.0),
        YScale::Linear if lo == hi => {
            let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            (lo - pad, hi + pad)
        }
        YScale::Linear => {
            let pad = (hi - lo) * 0.06;
            (lo - pad, hi + pad)
        }
        YScale::Log if lo > hi => (1.0, 10.0),
        YScale::Log => (lo / 1.5, hi * 1.5),
    }
}

/// A chart could not be drawn (plotters' error, as text).
#[derive(Debug, thiserror::Error)]
#[error("the chart could not be drawn: {0}")]
pub struct ChartError(String);

fn failed(e: impl std::fmt::Display) -> ChartError {
    ChartError(e.to_string())
}

/// The chart as an `<svg>` element to put inline in an HTML page.
pub fn render_svg(chart: &SortedChart) -> Result<String, ChartError> {
    let mut svg = String::new();
    let (lo, hi) = y_range(chart.values(), chart.scale);
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(failed)?;
        match chart.scale {
            YScale::Linear => draw(&root, chart, lo..hi)?,
            YScale::Log => draw(&root, chart, (lo..hi).log_scale())?,
        }
        root.present().map_err(failed)?;
    }
    // Inline in HTML the parser gives <svg> its namespace itself; without the attribute the
    // page names no address at all, which is what "links nothing outside the file" checks.
    Ok(svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1))
}

fn colour((r, g, b): (u8, u8, u8)) -> RGBColor {
    RGBColor(r, g, b)
}

fn draw<Y>(
    root: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    chart: &SortedChart,
    y: Y,
) -> Result<(), ChartError>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let x_end = chart.count.max(1) as f64 - 0.5;
    // An empty chart still draws its axes, and says why it holds nothing.
    let caption = if chart.count == 0 {
        format!("{}: no capture to plot", chart.caption)
    } else {
        chart.caption.clone()
    };
    let mut ctx = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(52)
        .y_label_area_size(84)
        .build_cartesian_2d(-0.5..x_end, y)
        .map_err(failed)?;
    ctx.configure_mesh()
        .x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .x_labels(chart.count.clamp(2, 12))
        .x_label_formatter(&|x| format!("{}", x.round() as i64 + 1))
        .y_label_formatter(&|y| tick(*y))
        .axis_desc_style(("sans-serif", 17))
        .label_style(("sans-serif", 14))
        .light_line_style(RGBColor(240, 242, 245))
        .draw()
        .map_err(failed)?;
    draw_band(&mut ctx, chart)?;
    draw_lines(&mut ctx, chart, x_end)?;
    draw_points(&mut ctx, chart)?;
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(200, 205, 210))
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(failed)?;
    Ok(())
}

type Ctx<'a, 'b, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, Y>>;

fn draw_band<Y: plotters::coord::ranged1d::Ranged<ValueType = f64>>(
    ctx: &mut Ctx<'_, '_, Y>,
    chart: &SortedChart,
) -> Result<(), ChartError> {
    let Some(band) = &chart.band else {
        return Ok(());
    };
    let fill = RGBColor(120, 150, 200).mix(0.22).filled();
    let spans = band
        .spans
        .iter()
        .filter(|s| chart.drawable(s.1) && chart.drawable(s.2));
    let cells = spans.map(|&(x, lo, hi)| {
        let x = x as f64;
        Rectangle::new([(x - 0.5, lo), (x + 0.5, hi)], fill)
    });
    ctx.draw_series(cells)
        .map_err(failed)?
        .label(&band.label)
        .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], fill));
    Ok(())
}

fn draw_lines<Y: plotters::coord::ranged1d::Ranged<ValueType = f64>>(
    ctx: &mut Ctx<'_, '_, Y>,
    chart: &SortedChart,
    x_end: f64,
) -> Result<(), ChartError> {
    let mut labelled: Vec<&str> = Vec::new();
    for line in chart.lines.iter().filter(|l| chart.drawable(l.y)) {
        let style = colour(line.rgb).stroke_width(2);
        let dashes = DashedLineSeries::new([(-0.5, line.y), (x_end, line.y)], 8, 5, style);
        let drawn = ctx.draw_series(dashes).map_err(failed)?;
        if !labelled.contains(&line.label.as_str()) {
            labelled.push(&line.label);
            drawn
                .label(&line.label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], style));
        }
    }
    Ok(())
}

fn draw_points<Y: plotters::coord::ranged1d::Ranged<ValueType = f64>>(
    ctx: &mut Ctx<'_, '_, Y>,
    chart: &SortedChart,
) -> Result<(), ChartError> {
    for series in chart.series.iter().filter(|s| !s.points.is_empty()) {
        let fill = colour(series.rgb).filled();
        let points = series.points.iter().filter(|p| chart.drawable(p.1));
        let dots = points.map(|&(x, y)| Circle::new((x as f64, y), 4, fill));
        ctx.draw_series(dots)
            .map_err(failed)?
            .label(&series.label)
            .legend(move |(x, y)| Circle::new((x + 9, y), 4, fill));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(points: Vec<(usize, f64)>, scale: YScale) -> SortedChart {
        SortedChart {
            caption: "c <&>".into(),
            x_label: "captures, sorted".into(),
            y_label: "ratio NEW/BASE".into(),
            count: points.len(),
            band: Some(Band {
                label: "noise".into(),
                spans: points.iter().map(|&(x, _)| (x, 0.95, 1.05)).collect(),
            }),
            series: vec![Series {
                label: "ratio".into(),
                rgb: (200, 30, 30),
                points,
            }],
            lines: vec![
                RefLine {
                    y: 1.05,
                    label: "±5 %".into(),
                    rgb: (0, 0, 0),
                },
                RefLine {
                    y: 0.95,
                    label: "±5 %".into(),
                    rgb: (0, 0, 0),
                },
            ],
            scale,
        }
    }

    #[test]
    fn the_range_holds_every_value_with_a_margin() {
        let (lo, hi) = y_range([0.8, 1.3, 1.0].into_iter(), YScale::Linear);
        assert!(lo < 0.8 && hi > 1.3 && hi - lo < 0.7, "{lo} {hi}");
        assert_eq!(y_range(std::iter::empty(), YScale::Linear), (0.0, 1.0));
        let (lo, hi) = y_range([2.0].into_iter(), YScale::Linear);
        assert!(lo < 2.0 && hi > 2.0);
        let (lo, hi) = y_range([0.0].into_iter(), YScale::Linear);
        assert!(lo < 0.0 && hi > 0.0);
        assert_eq!(y_range(std::iter::empty(), YScale::Log), (1.0, 10.0));
        let (lo, hi) = y_range([3.0, 3000.0].into_iter(), YScale::Log);
        assert!(lo > 0.0 && lo < 3.0 && hi > 3000.0);
    }

    #[test]
    fn values_that_cannot_be_drawn_stay_out_of_the_range() {
        let mut c = chart(
            vec![(0, f64::NAN), (1, 2.0), (2, f64::INFINITY)],
            YScale::Linear,
        );
        c.band = None;
        c.lines.clear();
        let (lo, hi) = y_range(c.values(), c.scale);
        assert!(lo.is_finite() && hi.is_finite() && lo < 2.0 && hi > 2.0);
        c.series[0].points.push((3, -1.0));
        c.scale = YScale::Log;
        let (lo, _) = y_range(c.values(), c.scale);
        assert!(lo > 0.0, "{lo}");
    }

    #[test]
    fn a_chart_is_one_svg_with_its_points_legend_and_no_address() {
        let svg =
            render_svg(&chart(vec![(0, 0.9), (1, 1.0), (2, 1.2)], YScale::Linear)).expect("drawn");
        assert!(svg.starts_with("<svg"), "{svg}");
        assert_eq!(svg.matches("<svg").count(), 1);
        assert_eq!(
            svg.matches("<circle").count(),
            3 + 1,
            "three points and a legend dot"
        );
        assert!(svg.contains("c &lt;&amp;&gt;"), "the caption is escaped");
        assert!(svg.contains("ratio NEW/BASE") && svg.contains("±5 %"));
        assert_eq!(
            svg.matches(">\n±5 %\n<").count(),
            1,
            "one legend entry for both lines"
        );
        assert!(!svg.contains("http") && !svg.contains("NaN"));
    }

    #[test]
    fn empty_one_point_and_undrawable_charts_still_draw_without_nan() {
        for c in [
            chart(vec![], YScale::Linear),
            chart(vec![(0, 1.1)], YScale::Linear),
            chart(vec![], YScale::Log),
            chart(vec![(0, 5.0)], YScale::Log),
            chart(vec![(0, f64::NAN), (1, -2.0)], YScale::Log),
        ] {
            let svg = render_svg(&c).expect("drawn");
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
            assert_eq!(svg.contains("no capture to plot"), c.count == 0);
            assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        }
    }
}
