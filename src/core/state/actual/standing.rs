//! What a node's index holds of one attachment there ([`Standing`]): whether the node reports
//! it, and the record's generation, which a verify answer is matched against.

/// What a node's index holds of one attachment there, in four bytes: whether the node must
/// report it, and the record's generation, new on every change so that a verify answer
/// planned before the change is ignored.
///
/// Generations are drawn from the node's counter, for a new record as for a change: a record
/// made again for the same pair started at 0 as its predecessor had, so a verify planned
/// before a detach and a new attach took its stale "not attached" for news of the new
/// record, and the core granted an attached single-node volume elsewhere
/// (`a_verify_answer_is_not_taken_for_an_attachment_made_again_since`). A verify matches
/// generations only within one node's list, so one node's numbers need not differ from
/// another's. Before the counter passes 31 bits the node's records are renumbered and the
/// node takes a new epoch ([`ActualNode::draw`]), so that no two of its standing records share
/// a generation either
/// (`a_verify_answer_is_not_taken_for_a_record_whose_generation_came_round_again`): a pause of
/// one node's records, where one counter for all had to renumber a million at once (7 to
/// 10 ms). Eight bytes would have needed no renumbering, at 8 bytes more per attachment with
/// `u32` ids.
///
/// [`ActualNode::draw`]: super::node::ActualNode::draw
///
/// The generation lives here, not in the volume's record, so that a verify reads a node's
/// attachments from the node's one sorted list: kept with the record, it cost every verified
/// attachment two lookups in the volume table (of the three a verify made per attachment),
/// each a likely cache miss at a million attachments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Standing(u32);

impl Standing {
    /// The flag's bit; the generation is the other 31, wrapping.
    pub(super) const REPORTED: u32 = 1 << 31;

    /// A new record's, with a generation never handed out before.
    pub(super) fn new(reported: bool, generation: u64) -> Self {
        let mut standing = Standing(if reported { Self::REPORTED } else { 0 });
        standing.bump(generation);
        standing
    }

    /// Whether the node must list the volume in its status.
    pub(crate) fn reported(self) -> bool {
        self.0 & Self::REPORTED != 0
    }

    /// The record's generation.
    pub(crate) fn generation(self) -> u32 {
        self.0 & !Self::REPORTED
    }

    /// Sets the flag; returns whether it changed.
    pub(super) fn set_reported(&mut self, reported: bool) -> bool {
        let was = self.reported();
        self.0 = self.generation() | if reported { Self::REPORTED } else { 0 };
        was != reported
    }

    /// The record changed: a generation never handed out before (its low 31 bits), the flag
    /// kept.
    pub(super) fn bump(&mut self, generation: u64) {
        let generation = (generation & u64::from(!Self::REPORTED)) as u32;
        self.0 = (self.0 & Self::REPORTED) | generation;
    }
}
