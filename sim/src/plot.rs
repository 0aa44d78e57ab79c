//! Line charts as SVG (with `plotters`), for the scenarios' plots.

use plotters::prelude::*;

/// One line: its name and points.
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
}

/// A line chart of `series`, 800 × 400, as an SVG document.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let mut svg = String::new();
    let (mut x1, mut y1) = (1e-9f64, 1e-9f64);
    for s in series {
        for &(x, y) in &s.points {
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
    }
    let palette = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    {
        let root = SVGBackend::with_string(&mut svg, (800, 400)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..x1, 0f64..y1 * 1.08);
        if let Ok(mut chart) = chart {
            let _ = chart.configure_mesh().x_desc(x_label).y_desc(y_label).draw();
            for (i, s) in series.iter().enumerate() {
                let c = palette[i % palette.len()];
                if let Ok(a) = chart.draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2))) {
                    a.label(s.name.clone())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
                }
            }
            let _ = chart.configure_series_labels().background_style(WHITE.mix(0.85)).border_style(BLACK).draw();
        }
        let _ = root.present();
    }
    svg
}

#[cfg(test)]
mod tests {
    #[test]
    fn draws_an_svg_with_its_labels() {
        let s = super::line_chart(
            "t",
            "x",
            "y",
            &[super::Series { name: "flow 0".into(), points: vec![(0.0, 1.0), (2.0, 3.0)] }],
        );
        assert!(s.starts_with("<svg") && s.contains("flow 0") && s.contains("<polyline"), "{}", &s[..200.min(s.len())]);
    }
}
