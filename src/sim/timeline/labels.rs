//! Labels that do not overlap: each label goes on the first of a few text lines where it
//! clears the labels already there, or is left out (its mark keeps a tooltip with the text).

/// The width of one character of the picture's monospace font at [`FONT_SIZE`], in pixels.
pub(super) const CHAR_WIDTH: f64 = 6.6;
/// The font size of labels.
pub(super) const FONT_SIZE: f64 = 11.0;
/// Room kept between two labels on one line.
const PAD: f64 = 6.0;

/// How wide `text` is drawn.
pub(super) fn text_width(text: &str) -> f64 {
    text.chars().count() as f64 * CHAR_WIDTH
}

/// `text` cut to at most `max` characters, with an ellipsis when cut.
pub(super) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Text lines filled left to right: each remembers where its last label ends.
#[derive(Debug)]
pub(super) struct Lines {
    ends: Vec<f64>,
    max: usize,
}

impl Lines {
    /// At most `max` lines.
    pub(super) fn new(max: usize) -> Lines {
        Lines {
            ends: Vec::new(),
            max,
        }
    }

    /// The line on which a label from `x` to `x + width` fits, taking that room, or `None`
    /// when all `max` lines are taken there.
    pub(super) fn place(&mut self, x: f64, width: f64) -> Option<usize> {
        let free = self.ends.iter().position(|end| x >= end + PAD);
        let line = match free {
            Some(line) => line,
            None if self.ends.len() < self.max => {
                self.ends.push(f64::NEG_INFINITY);
                self.ends.len() - 1
            }
            None => return None,
        };
        self.ends[line] = x + width;
        Some(line)
    }

    /// How many lines were used.
    pub(super) fn used(&self) -> usize {
        self.ends.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_that_would_overlap_go_to_the_next_line_or_are_left_out() {
        let mut lines = Lines::new(2);
        assert_eq!(lines.place(0.0, 50.0), Some(0));
        assert_eq!(lines.place(20.0, 50.0), Some(1));
        assert_eq!(lines.place(30.0, 50.0), None);
        assert_eq!(lines.place(60.0, 10.0), Some(0));
        assert_eq!(lines.used(), 2);
    }

    #[test]
    fn clipping_keeps_short_text() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(text_width("abcd"), 4.0 * CHAR_WIDTH);
    }
}
