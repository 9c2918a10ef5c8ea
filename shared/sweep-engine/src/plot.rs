//! `metric.svg`: the metric against the time attribute, one line per trial; a stopped trial's
//! line ends where it was stopped, with a cross, and the best trial is drawn thicker, last (over
//! the others) and marked at its end. The legend names each trial by its config. A time
//! attribute of whole numbers (epochs) gets whole-number ticks.

use std::fmt::Write as _;

/// One trial's curve.
#[derive(Debug)]
pub struct Curve<'a> {
    pub trial: usize,
    pub status: &'a str,
    /// The config as the legend shows it (`lr=0.1, batch_size=64`).
    pub config: String,
    pub points: &'a [(f64, f64)],
}

const PALETTE: &[&str] = &[
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// Round tick positions covering [lo, hi] (finite, lo < hi); whole numbers only when `whole`.
/// At most a dozen, each computed as k·step (a sum of steps may not move a large value), from
/// halves (the span of the widest finite range is no finite number).
fn ticks(lo: f64, hi: f64, whole: bool) -> Vec<f64> {
    let half_span = (hi / 2.0 - lo / 2.0).max(f64::MIN_POSITIVE);
    let raw = half_span / 2.5;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| half_span / s <= 3.0)
        .unwrap_or(10.0 * mag);
    let step = if whole { step.max(1.0).round() } else { step };
    let first = (lo / step).ceil();
    let count = ((hi / step + 1e-9).floor() - first).clamp(0.0, 12.0) as usize;
    let mut out: Vec<f64> = Vec::new();
    for k in 0..=count {
        let t = (first + k as f64) * step;
        let t = if t.abs() < step * 1e-9 { 0.0 } else { t };
        if t.is_finite() && t <= hi + step * 1e-9 && out.last().is_none_or(|&l| l < t) {
            out.push(t);
        }
    }
    out
}

/// Where `v` lies between `lo` and `hi` (0 to 1), from halves: no difference overflows.
fn fraction(v: f64, lo: f64, hi: f64) -> f64 {
    (v / 2.0 - lo / 2.0) / (hi / 2.0 - lo / 2.0)
}

/// [lo, hi] made wider by `by` on each side where it is one value (at least what moves it),
/// within the finite floats.
fn widened(lo: f64, hi: f64, by: f64) -> (f64, f64) {
    if hi > lo {
        return (lo, hi);
    }
    let by = by.max(lo.abs() * 1e-9);
    ((lo - by).max(-f64::MAX), (hi + by).min(f64::MAX))
}

fn label(v: f64) -> String {
    // Very large and very small values in scientific notation, trimmed (1e308, 2.5e-7).
    if v != 0.0 && !(1e-4..1e9).contains(&v.abs()) {
        let s = format!("{v:.4e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
        return format!("{mantissa}e{exp}");
    }
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

/// The legend's room for a config, in characters (the full text is its tooltip).
const LEGEND_CHARS: usize = 34;

/// The room the bold "best" label takes, in pixels (12 px sans-serif, generously).
const BEST_LABEL_WIDTH: f64 = 34.0;

/// `s` cut to `n` characters, with an ellipsis where it was cut.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The SVG text.
///
/// Kept in one piece: the drawing from the back to the front (frame, grid, ticks, curves, legend),
/// all on the same scales.
pub fn svg(curves: &[Curve<'_>], time_attr: &str, metric: &str, best: Option<usize>) -> String {
    let (w, h, left, right, top, bottom) = (1100.0, 540.0, 70.0, 370.0, 40.0, 55.0);
    // A NaN or infinite metric (a result Ray takes too) has no place on the plot.
    let finite = |&&(x, y): &&(f64, f64)| x.is_finite() && y.is_finite();
    let pts = curves.iter().flat_map(|c| c.points.iter().filter(finite));
    let (mut x0, mut x1, mut y0, mut y1) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if x1 <= x0 {
        // One time: a unit wide (an epoch), where that moves it.
        (x0, x1) = if x0 + 1.0 > x0 && (x0 + 1.0).is_finite() {
            (x0, x0 + 1.0)
        } else {
            widened(x0, x1, 0.5)
        };
    }
    (y0, y1) = widened(y0, y1, 0.5);
    // Epochs and iterations: whole numbers, whose ticks must be too (not 1.5 epochs).
    let whole = (curves.iter())
        .flat_map(|c| c.points.iter().filter(finite))
        .all(|&(x, _)| x.fract() == 0.0);
    // 5% of the span above and below, within the finite floats.
    let pad = (y1 / 2.0 - y0 / 2.0) * 0.1;
    let (y0, y1) = ((y0 - pad).max(-f64::MAX), (y1 + pad).min(f64::MAX));
    let (pw, ph) = (w - left - right, h - top - bottom);
    let sx = |x: f64| left + fraction(x, x0, x1) * pw;
    let sy = |y: f64| top + (1.0 - fraction(y, y0, y1)) * ph;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{} by {}, one line per trial</text>"#,
        left + pw / 2.0,
        esc(metric),
        esc(time_attr)
    );
    for t in ticks(x0, x1, whole) {
        let x = sx(t);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{:.1}" stroke="#e5e5e5"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            top + ph,
            top + ph + 16.0,
            label(t)
        );
    }
    for t in ticks(y0, y1, false) {
        let y = sy(t);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + pw,
            left - 6.0,
            y + 4.0,
            label(t)
        );
    }
    let _ = writeln!(
        s,
        r#"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        h - 12.0,
        esc(time_attr)
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#,
        top + ph / 2.0,
        top + ph / 2.0,
        esc(metric)
    );
    // A trial's colour, line width and dashes (past the palette, the colours repeat with
    // another dash pattern).
    let is_best = |i: &usize| best == Some(curves[*i].trial);
    let style = |i: usize| {
        let width = if is_best(&i) { 3.0 } else { 1.5 };
        let dash = ["none", "6,3", "2,2", "8,2,2,2"][(i / PALETTE.len()) % 4];
        (PALETTE[i % PALETTE.len()], width, dash)
    };
    // The best trial last, over the others (a flat line drawn later hid it).
    let order = (0..curves.len())
        .filter(|i| !is_best(i))
        .chain((0..curves.len()).filter(is_best));
    for i in order {
        let c = &curves[i];
        let (color, width, dash) = style(i);
        let path: Vec<String> = c
            .points
            .iter()
            .filter(finite)
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="{width}" stroke-dasharray="{dash}"><title>trial {} ({}): {}</title></polyline>"#,
            path.join(" "),
            c.trial,
            c.status,
            esc(&c.config)
        );
        if let Some(&(x, y)) = c.points.iter().rfind(|p| finite(p)) {
            let (x, y) = (sx(x), sy(y));
            if c.status == "stopped" {
                let _ = writeln!(
                    s,
                    r#"<path d="M{:.1},{:.1}l8,8m0,-8l-8,8" stroke="{color}" stroke-width="2"/>"#,
                    x - 4.0,
                    y - 4.0
                );
            } else {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{color}"/>"#
                );
            }
            if is_best(&i) {
                // The label stays inside the frame (the legend is right of it): left of the
                // mark where the mark is near the right edge, below it near the top.
                let (lx, anchor) = if x + 9.0 + BEST_LABEL_WIDTH <= left + pw {
                    (x + 9.0, "start")
                } else {
                    (x - 9.0, "end")
                };
                let ly = if y - 8.0 - 12.0 >= top {
                    y - 8.0
                } else {
                    y + 20.0
                };
                let _ = writeln!(
                    s,
                    r#"<circle cx="{x:.1}" cy="{y:.1}" r="7" fill="none" stroke="black" stroke-width="1.5"/><text x="{lx:.1}" y="{ly:.1}" text-anchor="{anchor}" font-weight="bold">best</text>"#,
                );
            }
        }
    }
    for (i, c) in curves.iter().enumerate() {
        let (color, width, dash) = style(i);
        if i < 30 {
            let ly = top + 14.0 * i as f64 + 8.0;
            let star = if best == Some(c.trial) { ", best" } else { "" };
            let _ = writeln!(
                s,
                r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="{width}" stroke-dasharray="{dash}"/><text x="{:.1}" y="{:.1}">{} ({} {}{star})<title>trial {}: {}</title></text>"#,
                left + pw + 10.0,
                left + pw + 28.0,
                left + pw + 32.0,
                ly + 4.0,
                esc(&cut(&c.config, LEGEND_CHARS)),
                c.trial,
                c.status,
                c.trial,
                esc(&c.config)
            );
        }
    }
    if curves.len() > 30 {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">… {} more</text>"#,
            left + pw + 10.0,
            top + 14.0 * 30.0 + 12.0,
            curves.len() - 30
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0, false), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(
            ticks(0.12, 0.5, false),
            [0.2, 0.30000000000000004, 0.4, 0.5]
        );
        // Three epochs: 1, 2, 3 (not 1.5 and 2.5).
        assert_eq!(ticks(1.0, 3.0, false), [1.0, 1.5, 2.0, 2.5, 3.0]);
        assert_eq!(ticks(1.0, 3.0, true), [1.0, 2.0, 3.0]);
        assert_eq!(label(0.30000000000000004), "0.3");
    }

    #[test]
    fn ticks_end_where_a_step_no_longer_moves_a_large_value() {
        // 1e16 + 0.5 == 1e16: a loop adding the step never reached the end (and filled memory).
        let t = ticks(1e16, 1e16 + 2.0, false);
        assert!(!t.is_empty() && t.len() <= 12, "{t:?}");
        assert!(t.iter().all(|x| (1e16..=1e16 + 2.0).contains(x)), "{t:?}");
        // The widest finite range.
        let t = ticks(-f64::MAX, f64::MAX, false);
        assert!(
            !t.is_empty() && t.len() <= 12 && t.iter().all(|x| x.is_finite()),
            "{t:?}"
        );
    }

    #[test]
    fn metrics_at_the_ends_of_the_float_range_are_drawn() {
        let (a, b) = (
            [(1.0, 1e308), (2.0, -1e308)],
            [(1.0, -f64::MAX), (2.0, f64::MAX)],
        );
        let curve = |trial, points| Curve {
            trial,
            status: "completed",
            config: format!("x={trial}"),
            points,
        };
        let s = svg(&[curve(0, &a[..]), curve(1, &b[..])], "epoch", "m", Some(0));
        assert!(!s.contains("NaN") && !s.contains("inf"), "{s}");
        assert_eq!(s.matches("<polyline points=\"").count(), 2);
        for line in s.lines().filter(|l| l.starts_with("<polyline")) {
            let points = line.split('"').nth(1).unwrap();
            assert_eq!(points.split(' ').count(), 2, "{line}");
        }
        // Tick labels stay short.
        assert!(s.lines().all(|l| l.len() < 400), "{s}");
    }

    #[test]
    fn every_trial_is_a_line_and_stops_are_marked() {
        let a = [(1.0, 0.1), (2.0, 0.3), (3.0, 0.5)];
        let b = [(1.0, 0.05)];
        let s = svg(
            &[
                Curve {
                    trial: 0,
                    status: "completed",
                    config: "lr=0.1, batch_size=64".into(),
                    points: &a,
                },
                Curve {
                    trial: 1,
                    status: "stopped",
                    config: "lr=0.001, batch_size=256, weight_decay=0.0001".into(),
                    points: &b,
                },
            ],
            "epoch",
            "val_top1",
            Some(0),
        );
        assert_eq!(s.matches("<polyline").count(), 2);
        // The best trial (0) is drawn after the other, and marked.
        let line = |trial: usize| s.find(&format!("<title>trial {trial} (")).unwrap();
        assert!(line(0) > line(1), "{s}");
        assert_eq!(s.matches(">best</text>").count(), 1);
        // Whole-number times: whole-number ticks only.
        assert!(s.contains(">2</text>") && !s.contains(">1.5</text>"), "{s}");
        assert_eq!(
            s.matches("<path d=").count(),
            1,
            "one stopped trial, one cross"
        );
        // The legend names configs (a long one cut, whole in its tooltip).
        assert!(
            s.contains(">lr=0.1, batch_size=64 (0 completed, best)<"),
            "{s}"
        );
        assert!(
            s.contains(">lr=0.001, batch_size=256, weight_… (1 stopped)<"),
            "{s}"
        );
        assert!(
            s.contains("<title>trial 1: lr=0.001, batch_size=256, weight_decay=0.0001</title>")
        );
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
    }
    /// An element's number attribute `name="…"` in `line`, after `from`.
    fn attr(line: &str, from: usize, name: &str) -> f64 {
        let key = format!(" {name}=\"");
        let at = line[from..].find(&key).unwrap() + from + key.len();
        let end = at + line[at..].find('"').unwrap();
        line[at..end].parse().unwrap()
    }

    /// Boxes (x0, y0, x1, y1) of a 12 px sans-serif text of `chars` characters at (x, y),
    /// generously wide (0.7 em a character, bold included), from its baseline up one em.
    fn text_box(x: f64, y: f64, chars: usize, end_anchored: bool) -> (f64, f64, f64, f64) {
        let width = chars as f64 * 12.0 * 0.7;
        let x0 = if end_anchored { x - width } else { x };
        (x0, y - 12.0, x0 + width, y + 3.0)
    }

    fn intersect(a: (f64, f64, f64, f64), b: (f64, f64, f64, f64)) -> bool {
        a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
    }

    #[test]
    fn the_best_label_stays_clear_of_the_legend() {
        // The best trial ends at the last time with the highest metric: its mark is at the
        // plot's top right corner, beside the legend's first entries.
        let best = [(1.0, 0.1), (2.0, 0.5), (9.0, 0.9)];
        let other = [(1.0, 0.2), (9.0, 0.3)];
        let third = [(1.0, 0.05), (4.0, 0.6)];
        let curve = |trial, points| Curve {
            trial,
            status: "completed",
            config: format!("lr=0.{trial}, batch_size=64"),
            points,
        };
        let s = svg(
            &[
                curve(0, &other[..]),
                curve(1, &best[..]),
                curve(2, &third[..]),
            ],
            "epoch",
            "val_top1",
            Some(1),
        );
        let line = s.lines().find(|l| l.contains(">best</text>")).unwrap();
        let text = line.find("<text").unwrap();
        let label = text_box(
            attr(line, text, "x"),
            attr(line, text, "y"),
            "best".len(),
            line[text..].contains("text-anchor=\"end\""),
        );
        // The legend: from its first line's start to the end of the picture, over its rows.
        let rows: Vec<&str> = s
            .lines()
            .filter(|l| l.starts_with("<line") && l.contains("<title>trial"))
            .collect();
        assert_eq!(rows.len(), 3, "{s}");
        let legend = (
            attr(rows[0], 0, "x1"),
            attr(rows[0], 0, "y1") - 12.0,
            attr(&s, 0, "width"),
            attr(rows[2], 0, "y1") + 8.0,
        );
        assert!(
            !intersect(label, legend),
            "the best label {label:?} overlaps the legend {legend:?}: {line}"
        );
        // Inside the picture too.
        assert!(label.0 >= 0.0 && label.1 >= 0.0, "{label:?}");
    }
}
