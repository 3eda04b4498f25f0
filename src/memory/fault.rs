//! The queue of injected failures that every test double shares: the in-memory backend and store
//! (`fail_next`, `fail_next_write`) and the simulator's backend (a scenario's `fail` lines).
//!
//! Each double decides what a fault matches and what it returns; the queue only keeps the
//! failures in the order they were injected and hands out the first one a call matches, as many
//! times as it was asked to.

/// Injected failures, each for its next `times` matching calls; the first match is used.
///
/// `M` says which calls a fault is for (the double matches it against each call), `E` what the
/// call gets instead of its result.
#[derive(Debug)]
pub(crate) struct Faults<M, E> {
    queue: Vec<(M, u32, E)>,
}

impl<M, E> Default for Faults<M, E> {
    fn default() -> Self {
        Faults { queue: Vec::new() }
    }
}

impl<M, E: Clone> Faults<M, E> {
    /// Queues `error` for the next `times` calls that `matcher` accepts; `times` of 0 queues
    /// nothing.
    pub(crate) fn push(&mut self, matcher: M, times: u32, error: E) {
        if times > 0 {
            self.queue.push((matcher, times, error));
        }
    }

    /// Consumes one use of the first fault whose matcher accepts the call, if any.
    pub(crate) fn take(&mut self, matches: impl Fn(&M) -> bool) -> Option<E> {
        let i = self.queue.iter().position(|(m, _, _)| matches(m))?;
        let (_, remaining, error) = &mut self.queue[i];
        *remaining -= 1;
        let error = error.clone();
        if *remaining == 0 {
            self.queue.remove(i);
        }
        Some(error)
    }
}

#[cfg(test)]
mod tests {
    use super::Faults;

    type Queue = Faults<&'static str, &'static str>;

    fn take(faults: &mut Queue, call: &str) -> Option<&'static str> {
        faults.take(|m| *m == call)
    }

    #[test]
    fn the_first_match_is_used_as_often_as_asked_and_zero_times_queues_nothing() {
        let mut faults = Queue::default();
        faults.push("a", 0, "never");
        faults.push("a", 2, "first");
        faults.push("a", 1, "second");
        faults.push("b", 1, "other");
        assert_eq!(take(&mut faults, "a"), Some("first"));
        assert_eq!(take(&mut faults, "a"), Some("first"));
        assert_eq!(take(&mut faults, "a"), Some("second"));
        assert_eq!(take(&mut faults, "a"), None);
        assert_eq!(take(&mut faults, "b"), Some("other"));
        assert_eq!(take(&mut faults, "b"), None);
    }
}
