//! The closed word sets of the format (`on|off`, `single-node|multi-node`, `running|pending|gone`,
//! ...): each is one table that both the parser and the printer read, so the two cannot drift.

use std::fmt;

use super::types::{CallOp, Cmp, ExpectedWait, PodState, UpstreamBug};
use crate::core::WaitKind;
use crate::core::calls::volume::Access;

/// A closed set of words, one table for both parsing and printing so the two cannot drift.
pub(super) trait Keyword: Copy + PartialEq + 'static {
    /// The words and the values they stand for.
    const WORDS: &'static [(&'static str, Self)];

    /// The word for this value.
    fn word(self) -> &'static str {
        Self::WORDS
            .iter()
            .find(|(_, value)| *value == self)
            .map_or("?", |(word, _)| word)
    }

    /// The words as an error message lists them: "`a`, `b` or `c`".
    fn expected() -> String {
        let words: Vec<String> = Self::WORDS.iter().map(|(w, _)| format!("`{w}`")).collect();
        match words.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => words.concat(),
        }
    }
}

impl Keyword for bool {
    const WORDS: &'static [(&'static str, Self)] = &[("on", true), ("off", false)];
}

impl Keyword for Access {
    const WORDS: &'static [(&'static str, Self)] = &[
        ("single-node", Access::SingleNode),
        ("multi-node", Access::MultiNode),
    ];
}

impl Keyword for UpstreamBug {
    const WORDS: &'static [(&'static str, Self)] = &[
        ("c1", UpstreamBug::C1),
        ("c2", UpstreamBug::C2),
        ("c3", UpstreamBug::C3),
        ("c4", UpstreamBug::C4),
        ("c5", UpstreamBug::C5),
        ("c6", UpstreamBug::C6),
        ("l1", UpstreamBug::L1),
        ("l2", UpstreamBug::L2),
    ];
}

impl Keyword for PodState {
    const WORDS: &'static [(&'static str, Self)] = &[
        ("running", PodState::Running),
        ("pending", PodState::Pending),
        ("gone", PodState::Gone),
    ];
}

impl Keyword for CallOp {
    const WORDS: &'static [(&'static str, Self)] =
        &[("attach", CallOp::Attach), ("detach", CallOp::Detach)];
}

impl Keyword for Cmp {
    const WORDS: &'static [(&'static str, Self)] =
        &[("=", Cmp::Eq), ("<=", Cmp::Le), (">=", Cmp::Ge)];
}

impl Keyword for ExpectedWait {
    const WORDS: &'static [(&'static str, Self)] = &[
        ("settled", ExpectedWait::Kind(WaitKind::Settled)),
        ("recovery", ExpectedWait::Kind(WaitKind::Recovery)),
        ("call", ExpectedWait::Kind(WaitKind::Call)),
        ("backoff", ExpectedWait::Kind(WaitKind::Backoff)),
        ("backend-load", ExpectedWait::Kind(WaitKind::BackendLoad)),
        ("node-full", ExpectedWait::Kind(WaitKind::NodeFull)),
        (
            "backend-said-full",
            ExpectedWait::Kind(WaitKind::BackendSaidFull),
        ),
        (
            "held-elsewhere",
            ExpectedWait::Kind(WaitKind::HeldElsewhere),
        ),
        ("store-ack", ExpectedWait::Kind(WaitKind::StoreAck)),
        ("status-write", ExpectedWait::Kind(WaitKind::StatusWrite)),
        ("unmount", ExpectedWait::Kind(WaitKind::Unmount)),
        (
            "held-back-by-read",
            ExpectedWait::Kind(WaitKind::HeldBackByRead),
        ),
        ("fence", ExpectedWait::Kind(WaitKind::Fence)),
        ("node-deleted", ExpectedWait::Kind(WaitKind::NodeDeleted)),
        ("fresh-read", ExpectedWait::Kind(WaitKind::FreshRead)),
        (
            "release-verify",
            ExpectedWait::Kind(WaitKind::ReleaseVerify),
        ),
        ("next-pass", ExpectedWait::Kind(WaitKind::NextPass)),
        ("unknown", ExpectedWait::Kind(WaitKind::Unknown)),
        ("missing", ExpectedWait::Missing),
    ];
}

macro_rules! display_keyword {
    ($($ty:ty),*) => {$(
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.word())
            }
        }
    )*};
}

display_keyword!(UpstreamBug, PodState, CallOp, Cmp, ExpectedWait);
