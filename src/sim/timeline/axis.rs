//! The time axis: virtual time to a horizontal position, with long idle stretches folded into a
//! narrow gap, so that a burst at 10 s and another at 10 min are both readable on one page.

use std::time::Duration;

/// An idle stretch longer than this (with nothing recorded in it) is folded.
const FOLD_AFTER: Duration = Duration::from_secs(20);
/// How wide a folded stretch is drawn, in pixels.
pub(super) const GAP_WIDTH: f64 = 44.0;
/// Time kept on each side of the recorded moments around a fold, so marks do not sit on it.
const MARGIN: Duration = Duration::from_secs(2);
/// The least room between two labelled ticks, in pixels.
const TICK_ROOM: f64 = 80.0;

/// A stretch of time drawn at the common scale (`folded: false`) or folded into
/// [`GAP_WIDTH`] pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Span {
    pub(super) from: Duration,
    pub(super) to: Duration,
    pub(super) x0: f64,
    pub(super) x1: f64,
    pub(super) folded: bool,
}

/// The mapping from virtual time to x, from `left` to `left + width`.
#[derive(Clone, Debug)]
pub(super) struct Axis {
    pub(super) spans: Vec<Span>,
}

impl Axis {
    /// An axis over `0..=end` for the given moments (any order, repeats allowed), drawn
    /// between `left` and `left + width`.
    pub(super) fn new(moments: &[Duration], end: Duration, left: f64, width: f64) -> Axis {
        let mut times: Vec<Duration> = moments.iter().copied().filter(|t| *t <= end).collect();
        times.push(Duration::ZERO);
        times.push(end);
        times.sort();
        times.dedup();
        // Stretches [from, to] and whether each is folded.
        let mut stretches: Vec<(Duration, Duration, bool)> = Vec::new();
        let mut start = Duration::ZERO;
        for pair in times.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b.saturating_sub(a) > FOLD_AFTER + MARGIN * 2 {
                let (fold_from, fold_to) = (a + MARGIN, b - MARGIN);
                stretches.push((start, fold_from, false));
                stretches.push((fold_from, fold_to, true));
                start = fold_to;
            }
        }
        stretches.push((start, end.max(start), false));
        let folds = stretches.iter().filter(|s| s.2).count();
        let open: f64 = stretches
            .iter()
            .filter(|s| !s.2)
            .map(|s| (s.1 - s.0).as_secs_f64())
            .sum();
        let room = (width - GAP_WIDTH * folds as f64).max(width / 4.0);
        let scale = if open > 0.0 { room / open } else { 0.0 };
        let mut x = left;
        let spans = stretches
            .into_iter()
            .map(|(from, to, folded)| {
                let w = if folded {
                    GAP_WIDTH
                } else {
                    (to - from).as_secs_f64() * scale
                };
                let span = Span {
                    from,
                    to,
                    x0: x,
                    x1: x + w,
                    folded,
                };
                x += w;
                span
            })
            .collect();
        Axis { spans }
    }

    /// Where `t` is drawn (a time inside a fold is placed proportionally within it).
    pub(super) fn x(&self, t: Duration) -> f64 {
        let Some(first) = self.spans.first() else {
            return 0.0;
        };
        let span = self
            .spans
            .iter()
            .find(|s| t <= s.to)
            .or(self.spans.last())
            .unwrap_or(first);
        let length = (span.to.saturating_sub(span.from)).as_secs_f64();
        if length <= 0.0 {
            return span.x0;
        }
        let part = (t.saturating_sub(span.from)).as_secs_f64() / length;
        span.x0 + (span.x1 - span.x0) * part.min(1.0)
    }

    /// Labelled ticks: in each unfolded stretch, the multiples of a round interval wide enough
    /// apart for their labels.
    pub(super) fn ticks(&self) -> Vec<(Duration, String)> {
        const STEPS_MS: [u64; 16] = [
            100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000,
            600_000, 1_800_000, 3_600_000, 21_600_000,
        ];
        let mut ticks: Vec<(Duration, String)> = Vec::new();
        for span in self.spans.iter().filter(|s| !s.folded) {
            let length = span.to.saturating_sub(span.from).as_secs_f64();
            if length <= 0.0 {
                continue;
            }
            let per_second = (span.x1 - span.x0) / length;
            let step = STEPS_MS
                .iter()
                .copied()
                .find(|ms| *ms as f64 / 1000.0 * per_second >= TICK_ROOM)
                .unwrap_or(21_600_000);
            let from = u64::try_from(span.from.as_millis()).unwrap_or(u64::MAX);
            let to = u64::try_from(span.to.as_millis()).unwrap_or(u64::MAX);
            let mut ms = from.div_ceil(step).saturating_mul(step);
            while ms <= to {
                let t = Duration::from_millis(ms);
                let far_enough = ticks
                    .last()
                    .is_none_or(|(last, _)| self.x(t) - self.x(*last) >= TICK_ROOM * 0.75);
                if far_enough {
                    ticks.push((t, tick_label(t)));
                }
                ms = ms.saturating_add(step);
            }
        }
        ticks
    }
}

/// A tick's label: `0s`, `1.5s`, `45s`, `10m`, `10m30s`, `2h`.
pub(super) fn tick_label(t: Duration) -> String {
    let ms = t.as_millis();
    if ms % 1000 != 0 {
        let tenths = ms / 100;
        return format!("{}.{}s", tenths / 10, tenths % 10);
    }
    let s = ms / 1000;
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

/// How long a fold lasts, as its label says: `9m 36s idle`.
pub(super) fn fold_label(span: &Span) -> String {
    let s = span.to.saturating_sub(span.from).as_secs();
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_short_run_is_one_linear_stretch() {
        let axis = Axis::new(&[s(1), s(5)], s(10), 100.0, 1000.0);
        assert_eq!(axis.spans.len(), 1);
        assert_eq!(axis.x(s(0)), 100.0);
        assert_eq!(axis.x(s(5)), 600.0);
        assert_eq!(axis.x(s(10)), 1100.0);
    }

    #[test]
    fn idle_stretches_fold_and_time_keeps_its_order() {
        // Idle from 30 s to 600 s and from 610 s to the end at 700 s; 10 s to 30 s is short.
        let moments = [s(0), s(10), s(30), s(600), s(610)];
        let axis = Axis::new(&moments, s(700), 0.0, 1000.0);
        let folds: Vec<&Span> = axis.spans.iter().filter(|s| s.folded).collect();
        assert_eq!(folds.len(), 2, "{:?}", axis.spans);
        assert_eq!((folds[0].from, folds[0].to), (s(32), s(598)));
        assert_eq!((folds[1].from, folds[1].to), (s(612), s(698)));
        assert_eq!(fold_label(folds[0]), "9m26s");
        let xs: Vec<f64> = [0, 10, 30, 300, 600, 610, 650, 700]
            .into_iter()
            .map(|t| axis.x(s(t)))
            .collect();
        assert!(xs.windows(2).all(|w| w[0] < w[1]), "{xs:?}");
        assert!((axis.x(s(700)) - 1000.0).abs() < 1e-6);
        // The folded nine minutes take no more room than the gap.
        assert!(axis.x(s(598)) - axis.x(s(32)) <= GAP_WIDTH + 1e-9);
    }

    #[test]
    fn ticks_are_round_labelled_and_apart() {
        let axis = Axis::new(&[s(3), s(15), s(30), s(45)], s(60), 0.0, 1200.0);
        let ticks = axis.ticks();
        let labels: Vec<&str> = ticks.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(
            labels,
            [
                "0s", "5s", "10s", "15s", "20s", "25s", "30s", "35s", "40s", "45s", "50s", "55s",
                "1m"
            ]
        );
        for pair in ticks.windows(2) {
            assert!(axis.x(pair[1].0) - axis.x(pair[0].0) >= TICK_ROOM * 0.75);
        }
        assert_eq!(tick_label(Duration::from_millis(1500)), "1.5s");
        assert_eq!(tick_label(s(630)), "10m30s");
        assert_eq!(tick_label(s(7200)), "2h");
    }
}
