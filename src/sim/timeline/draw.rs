//! The picture: the lanes [`lanes`](super::lanes) sorted out, laid out as an SVG document.
//!
//! Each node's lane holds a row per volume ever attached there (a bar per attachment, coloured
//! by its state), a row per pod placed there (scheduled, running, terminating), a row of status
//! writes and the store's answers, and a row of the controller's events; the node's own
//! changes (crash, fence, deletion, a silent agent, a hung unmount, a backend partition) are
//! marks on its first row and tinted bands behind the lane. Controller restarts are dashed
//! lines across every lane, invariant and expectation violations red lines at their time.
//! The same report always gives the same bytes: everything is ordered by name and time, and
//! numbers are printed to a tenth of a pixel.

use std::time::Duration;

use svg::Document;
use svg::Node as _;
use svg::node::element::{Circle, Group, Line, Polygon, Rectangle, Style, Text, Title};

use super::axis::{Axis, fold_label};
use super::labels::{FONT_SIZE, Lines, clip, text_width};
use super::lanes::{
    ACK, ATTACHED, ATTACHING, DETACHING, EVENT, Mark, NACK, NodeState, RESTART, RUNNING, SCHEDULED,
    Segment, Shape, TERMINATING, UNCERTAIN, VIOLATION, WARNING, WRITE, sort_out,
};
use crate::sim::runner::Report;
use crate::sim::scenario::Scenario;
use crate::sim::world::fmt_time;

const WIDTH: f64 = 1600.0;
const LEFT: f64 = 200.0;
const RIGHT: f64 = 40.0;
/// The height of a row holding bars.
const ROW: f64 = 18.0;
/// The height of a bar.
const BAR: f64 = 11.0;
/// The height of a line of labels under a row of marks.
const LINE: f64 = 13.0;
/// At most this many lines of labels under a row of marks.
const MAX_LINES: usize = 3;
/// The longest row name in the left margin.
const NAME_CHARS: usize = 26;

/// A number as the picture prints it: to a tenth, so the bytes do not depend on rounding noise.
fn n(v: f64) -> String {
    format!("{:.1}", v.max(0.0))
}

fn text(x: f64, y: f64, content: &str) -> Text {
    Text::new(content.to_string()).set("x", n(x)).set("y", n(y))
}

fn shape(mark: &Mark, x: f64, y: f64) -> Group {
    let r = 4.5;
    let body: Box<dyn svg::Node> = match mark.shape {
        Shape::Square => Box::new(
            Rectangle::new()
                .set("x", n(x - r + 0.5))
                .set("y", n(y - r + 0.5))
                .set("width", n(2.0 * r - 1.0))
                .set("height", n(2.0 * r - 1.0))
                .set("fill", mark.color),
        ),
        Shape::Circle => Box::new(
            Circle::new()
                .set("cx", n(x))
                .set("cy", n(y))
                .set("r", n(r - 0.5))
                .set("fill", mark.color),
        ),
        Shape::Cross => Box::new(
            Polygon::new()
                .set(
                    "points",
                    format!(
                        "{},{} {},{} {},{} {},{} {},{} {},{} {},{} {},{} {},{} {},{} {},{} {},{}",
                        n(x - r),
                        n(y - r + 1.5),
                        n(x - r + 1.5),
                        n(y - r),
                        n(x),
                        n(y - 1.5),
                        n(x + r - 1.5),
                        n(y - r),
                        n(x + r),
                        n(y - r + 1.5),
                        n(x + 1.5),
                        n(y),
                        n(x + r),
                        n(y + r - 1.5),
                        n(x + r - 1.5),
                        n(y + r),
                        n(x),
                        n(y + 1.5),
                        n(x - r + 1.5),
                        n(y + r),
                        n(x - r),
                        n(y + r - 1.5),
                        n(x - 1.5),
                        n(y),
                    ),
                )
                .set("fill", mark.color),
        ),
        Shape::Triangle => Box::new(
            Polygon::new()
                .set(
                    "points",
                    format!(
                        "{},{} {},{} {},{}",
                        n(x),
                        n(y + r),
                        n(x - r),
                        n(y - r),
                        n(x + r),
                        n(y - r)
                    ),
                )
                .set("fill", mark.color),
        ),
        Shape::Diamond => Box::new(
            Polygon::new()
                .set(
                    "points",
                    format!(
                        "{},{} {},{} {},{} {},{}",
                        n(x),
                        n(y - r - 1.0),
                        n(x + r + 1.0),
                        n(y),
                        n(x),
                        n(y + r + 1.0),
                        n(x - r - 1.0),
                        n(y)
                    ),
                )
                .set("fill", mark.color),
        ),
    };
    Group::new()
        .set("class", mark.class.clone())
        .add(Title::new(mark.tip.clone()))
        .add(body)
}

/// The layers of the picture, drawn in this order.
struct Canvas {
    back: Group,
    grid: Group,
    bars: Group,
    marks: Group,
    over: Group,
    y: f64,
}

impl Canvas {
    /// A row name in the left margin, at the row's middle `y`.
    fn row_name(&mut self, name: &str, y: f64, class: &str) {
        self.marks.append(
            text(LEFT - 8.0, y + FONT_SIZE * 0.35, &clip(name, NAME_CHARS))
                .set("text-anchor", "end")
                .set("class", class.to_string()),
        );
    }

    /// A row of bars.
    fn bar_row(&mut self, axis: &Axis, name: &str, segments: &[Segment], group_class: &str) {
        let mid = self.y + ROW / 2.0;
        self.row_name(name, mid, "row-name");
        let mut row = Group::new()
            .set("class", group_class.to_string())
            .set("data-name", name.to_string());
        for s in segments {
            let (x0, x1) = (axis.x(s.from), axis.x(s.to));
            row.append(
                Group::new()
                    .set("class", s.class.clone())
                    .add(Title::new(s.tip.clone()))
                    .add(
                        Rectangle::new()
                            .set("x", n(x0))
                            .set("y", n(mid - BAR / 2.0))
                            .set("width", n((x1 - x0).max(1.5)))
                            .set("height", n(BAR))
                            .set("fill", s.color),
                    ),
            );
        }
        self.bars.append(row);
        self.y += ROW;
    }

    /// A row of marks with their labels on up to [`MAX_LINES`] lines below.
    fn mark_row(&mut self, axis: &Axis, name: &str, marks: &[Mark], class: &str) -> f64 {
        let mid = self.y + ROW / 2.0;
        self.row_name(name, mid, "row-name");
        let mut lines = Lines::new(MAX_LINES);
        let mut placed = Vec::new();
        for mark in marks {
            let x = axis.x(mark.at);
            // A write and its answer land a few milliseconds apart: the write above the
            // row's middle, the answer below, so neither hides the other.
            let dy = match mark.class.as_str() {
                "mark write" => -3.5,
                "mark ack" | "mark nack" => 3.5,
                _ => 0.0,
            };
            self.marks.append(shape(mark, x, mid + dy));
            if mark.label.is_empty() {
                continue;
            }
            let label = clip(&mark.label, 40);
            // Near the right edge a label ends there rather than running off the picture.
            let lx = (x - 3.0).min(WIDTH - 6.0 - text_width(&label));
            if let Some(line) = lines.place(lx, text_width(&label)) {
                placed.push((lx, line, label, mark.color));
            }
        }
        let mut labels = Group::new().set("class", format!("labels {class}"));
        for (x, line, label, color) in placed {
            labels.append(
                text(
                    x,
                    mid + ROW / 2.0 + FONT_SIZE + line as f64 * LINE - 2.0,
                    &label,
                )
                .set("fill", color),
            );
        }
        self.marks.append(labels);
        self.y += ROW + lines.used() as f64 * LINE;
        mid
    }
}

/// The legend: a swatch and a word for each colour and mark.
fn legend(y: f64) -> (Group, f64) {
    let mut items: Vec<(String, &'static str, bool)> = vec![
        ("attaching".into(), ATTACHING, true),
        ("attached".into(), ATTACHED, true),
        ("uncertain".into(), UNCERTAIN, true),
        ("detaching".into(), DETACHING, true),
        ("pod scheduled".into(), SCHEDULED, true),
        ("pod running".into(), RUNNING, true),
        ("pod terminating".into(), TERMINATING, true),
        ("status write".into(), WRITE, false),
        ("acknowledged".into(), ACK, false),
        ("write failed".into(), NACK, false),
        ("event".into(), EVENT, false),
        ("warning event".into(), WARNING, false),
        ("controller restart".into(), RESTART, false),
        ("violation".into(), VIOLATION, false),
    ];
    items.extend(
        NodeState::ALL
            .iter()
            .map(|s| (format!("node {}", s.name()), s.color(), true)),
    );
    let mut group = Group::new().set("class", "legend");
    let first = y;
    let (mut x, mut y) = (LEFT, y);
    for (name, color, bar) in items {
        let width = 18.0 + text_width(&name) + 18.0;
        if x + width > WIDTH - RIGHT {
            x = LEFT;
            y += 18.0;
        }
        let swatch: Box<dyn svg::Node> = if bar {
            Box::new(
                Rectangle::new()
                    .set("x", n(x))
                    .set("y", n(y - 9.0))
                    .set("width", "14")
                    .set("height", "10")
                    .set("fill", color),
            )
        } else {
            Box::new(
                Circle::new()
                    .set("cx", n(x + 7.0))
                    .set("cy", n(y - 4.0))
                    .set("r", "4.5")
                    .set("fill", color),
            )
        };
        group.append(
            Group::new()
                .set("class", "legend-item")
                .add(swatch)
                .add(text(x + 18.0, y, &name)),
        );
        x += width;
    }
    group.append(text(16.0, first, "legend").set("class", "row-name"));
    (group, y + 10.0)
}

/// Draws `report` (a run of `scenario`, called `name`) as an SVG document.
///
/// Deterministic: the same scenario and report give the same bytes.
pub fn render_svg(name: &str, scenario: &Scenario, report: &Report) -> String {
    let end = report.end.max(Duration::from_millis(100));
    let picture = sort_out(scenario, &report.timeline, end);
    let mut moments: Vec<Duration> = report.timeline.iter().map(|r| r.at).collect();
    moments.extend(report.violations.iter().map(|v| v.at));
    moments.extend(scenario.steps.iter().map(|s| s.at));
    let axis = Axis::new(&moments, end, LEFT, WIDTH - LEFT - RIGHT);

    let mut canvas = Canvas {
        back: Group::new().set("class", "lanes"),
        grid: Group::new().set("class", "grid"),
        bars: Group::new().set("class", "bars"),
        marks: Group::new().set("class", "marks"),
        over: Group::new().set("class", "overlay"),
        y: 0.0,
    };
    let verdict = if report.passed() { "pass" } else { "FAIL" };
    let heading = format!(
        "{name}: {verdict}, converged at {}, {} attach, {} detach calls, {} status writes \
         (virtual time; idle stretches folded)",
        fmt_time(report.converged),
        report.attach_calls,
        report.detach_calls,
        report.status_writes
    );
    let title = text(16.0, 24.0, &heading).set("class", "heading");
    let (legend, below_legend) = legend(50.0);
    canvas.y = below_legend + 14.0;

    // Violations first, so their labels sit above the lanes.
    let violation_marks: Vec<Mark> = report
        .violations
        .iter()
        .map(|v| Mark {
            at: v.at,
            shape: Shape::Cross,
            color: VIOLATION,
            class: "mark violation".to_string(),
            label: clip(&v.message, 60),
            tip: format!("{} {}", fmt_time(v.at), v.message),
        })
        .collect();
    let lanes_top = canvas.y;
    if !violation_marks.is_empty() {
        let _ = canvas.mark_row(&axis, "violations", &violation_marks, "violations");
    }
    let controller_top = canvas.y;
    let _ = canvas.mark_row(&axis, "controller", &picture.controller, "controller");
    canvas.back.append(
        Rectangle::new()
            .set("x", "0")
            .set("y", n(controller_top))
            .set("width", n(WIDTH))
            .set("height", n(canvas.y - controller_top))
            .set("fill", "#eef1f6"),
    );
    for (index, node) in picture.nodes.iter().enumerate() {
        let Some(lane) = picture.lanes.get(node) else {
            continue;
        };
        let top = canvas.y;
        canvas.y += 4.0;
        let mut changes = lane.changes.clone();
        changes.sort_by_key(|m| m.at);
        let _ = canvas.mark_row(&axis, "node", &changes, "changes");
        for (volume, segments) in &lane.volumes {
            canvas.bar_row(&axis, &format!("volume {volume}"), segments, "volume-row");
        }
        for (pod, segments) in &lane.pods {
            canvas.bar_row(&axis, &format!("pod {pod}"), segments, "pod-row");
        }
        let status_mid = canvas.mark_row(&axis, "status", &lane.status, "status");
        for (sent, answered, failed) in &lane.writes {
            canvas.bars.append(
                Line::new()
                    .set("class", "write-line")
                    .set("x1", n(axis.x(*sent)))
                    .set("x2", n(axis.x(*answered)))
                    .set("y1", n(status_mid))
                    .set("y2", n(status_mid))
                    .set("stroke", if *failed { NACK } else { WRITE })
                    .set("stroke-width", "2"),
            );
        }
        let _ = canvas.mark_row(&axis, "events", &lane.events, "events");
        canvas.y += 4.0;
        let height = canvas.y - top;
        let mut back = Group::new()
            .set("class", "lane")
            .set("data-node", node.clone())
            .add(
                Rectangle::new()
                    .set("x", "0")
                    .set("y", n(top))
                    .set("width", n(WIDTH))
                    .set("height", n(height))
                    .set("fill", if index % 2 == 0 { "#ffffff" } else { "#f6f7f9" })
                    .set("stroke", "#c9ced6")
                    .set("stroke-width", "0.5"),
            );
        for (state, from, to) in &lane.states {
            let (x0, x1) = (axis.x(*from), axis.x(*to));
            back.append(
                Group::new()
                    .set("class", format!("state {}", state.class()))
                    .add(Title::new(format!(
                        "{node} {} {} – {}",
                        state.name(),
                        fmt_time(*from),
                        fmt_time(*to)
                    )))
                    .add(
                        Rectangle::new()
                            .set("x", n(x0))
                            .set("y", n(top))
                            .set("width", n((x1 - x0).max(1.5)))
                            .set("height", n(height))
                            .set("fill", state.color())
                            .set("fill-opacity", "0.16"),
                    ),
            );
        }
        back.append(
            text(
                12.0,
                top + 4.0 + ROW / 2.0 + FONT_SIZE * 0.35,
                &clip(node, 14),
            )
            .set("class", "node-name"),
        );
        canvas.back.append(back);
    }
    let lanes_bottom = canvas.y;

    // Grid and axis.
    let axis_y = lanes_bottom + 6.0;
    for (t, label) in axis.ticks() {
        let x = axis.x(t);
        canvas.grid.append(
            Line::new()
                .set("x1", n(x))
                .set("x2", n(x))
                .set("y1", n(lanes_top))
                .set("y2", n(axis_y))
                .set("stroke", "#dde1e7")
                .set("stroke-width", "1"),
        );
        canvas.over.append(
            text(x, axis_y + 16.0, &label)
                .set("text-anchor", "middle")
                .set("class", "tick"),
        );
    }
    for span in axis.spans.iter().filter(|s| s.folded) {
        let mid = (span.x0 + span.x1) / 2.0;
        canvas.grid.append(
            Group::new()
                .set("class", "fold")
                .add(Title::new(format!(
                    "{} – {}: nothing happened; folded",
                    fmt_time(span.from),
                    fmt_time(span.to)
                )))
                .add(
                    Rectangle::new()
                        .set("x", n(span.x0 + 3.0))
                        .set("y", n(lanes_top))
                        .set("width", n(span.x1 - span.x0 - 6.0))
                        .set("height", n(axis_y - lanes_top))
                        .set("fill", "#e9ecf1")
                        .set("fill-opacity", "0.7")
                        .set("stroke", "#9aa3ad")
                        .set("stroke-dasharray", "2 3"),
                ),
        );
        canvas.over.append(
            Group::new()
                .set("class", "fold-mark")
                .add(
                    Line::new()
                        .set("x1", n(mid - 4.0))
                        .set("x2", n(mid + 4.0))
                        .set("y1", n(axis_y + 5.0))
                        .set("y2", n(axis_y - 5.0))
                        .set("stroke", "#333"),
                )
                .add(
                    text(mid, axis_y + 30.0, &format!("≈{} idle", fold_label(span)))
                        .set("text-anchor", "middle")
                        .set("class", "tick fold-label"),
                ),
        );
    }
    canvas.over.append(
        Line::new()
            .set("x1", n(LEFT))
            .set("x2", n(WIDTH - RIGHT))
            .set("y1", n(axis_y))
            .set("y2", n(axis_y))
            .set("stroke", "#333"),
    );
    canvas.over.append(
        text(LEFT - 8.0, axis_y + 16.0, "virtual time")
            .set("text-anchor", "end")
            .set("class", "row-name"),
    );
    for at in &picture.restarts {
        let x = axis.x(*at);
        canvas.over.append(
            Line::new()
                .set("class", "restart-line")
                .set("x1", n(x))
                .set("x2", n(x))
                .set("y1", n(controller_top))
                .set("y2", n(axis_y))
                .set("stroke", RESTART)
                .set("stroke-dasharray", "6 4")
                .set("stroke-width", "1.2"),
        );
    }
    for v in &report.violations {
        let x = axis.x(v.at);
        canvas.over.append(
            Group::new()
                .set("class", "violation-line")
                .add(Title::new(format!("{} {}", fmt_time(v.at), v.message)))
                .add(
                    Line::new()
                        .set("x1", n(x))
                        .set("x2", n(x))
                        .set("y1", n(lanes_top))
                        .set("y2", n(axis_y))
                        .set("stroke", VIOLATION)
                        .set("stroke-width", "2"),
                ),
        );
    }
    let height = axis_y + 42.0;
    let style = Style::new(
        "text { font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: 11px; \
         fill: #222; } .heading { font-size: 14px; font-weight: bold; } \
         .node-name { font-size: 13px; font-weight: bold; } .row-name { fill: #555; } \
         .tick { fill: #333; } .fold-label { fill: #777; }",
    );
    Document::new()
        .set("width", n(WIDTH))
        .set("height", n(height))
        .set("viewBox", format!("0 0 {} {}", n(WIDTH), n(height)))
        .add(style)
        .add(
            Rectangle::new()
                .set("width", "100%")
                .set("height", "100%")
                .set("fill", "#ffffff"),
        )
        .add(title)
        .add(legend)
        .add(canvas.back)
        .add(canvas.grid)
        .add(canvas.bars)
        .add(canvas.marks)
        .add(canvas.over)
        .to_string()
}
