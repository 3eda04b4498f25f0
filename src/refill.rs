//! [`Refill`]: a list written over the ids it still holds from its last use.
//!
//! A status write's list, built into a spare (`ListSpares`), would otherwise be emptied and
//! cloned into: with `String` ids, a free and an allocation per id, half the allocations of a
//! move. Overwriting an id with `clone_from` keeps its buffer. Ids that own nothing (`u32`)
//! are simply appended.
//!
//! (The nodes a look at a volume decides on were written over the same way for a while: with
//! `String` ids 1.9 % fewer instructions a move, with `Name` ids 1.3 % more, and a list that
//! keeps the last look's nodes where a decision reads them. Not kept.)

/// A list being written over from its start; what is left over is dropped at the end.
pub(crate) struct Refill<'a, V> {
    list: &'a mut Vec<V>,
    len: usize,
}

impl<'a, V: Clone> Refill<'a, V> {
    /// Runs `fill` over `list`, then drops what it did not write over: `list` holds exactly
    /// what `fill` wrote.
    pub(crate) fn run<R>(list: &'a mut Vec<V>, fill: impl FnOnce(&mut Refill<'_, V>) -> R) -> R {
        let mut refill = Refill { list, len: 0 };
        let out = fill(&mut refill);
        let Refill { list, len } = refill;
        list.truncate(len);
        out
    }

    /// Appends copies of `ids`: over the old ones while they last, then pushed.
    pub(crate) fn extend<'b>(&mut self, ids: impl ExactSizeIterator<Item = &'b V>)
    where
        V: 'b,
    {
        let count = ids.len();
        if !std::mem::needs_drop::<V>() {
            // Nothing to keep in an id that owns nothing (`u32`): appended in one tight loop
            // (the iterator taken whole: a borrowed one is not known to be of exact length),
            // which the writes over the old ones, an id at a time, were not (1.6 % of a move).
            self.list.truncate(self.len);
            self.list.extend(ids.cloned());
            self.len += count;
            return;
        }
        let mut ids = ids;
        let over = count.min(self.list.len() - self.len);
        let slots = &mut self.list[self.len..self.len + over];
        for (slot, id) in slots.iter_mut().zip(ids.by_ref().take(over)) {
            slot.clone_from(id);
        }
        self.list.extend(ids.cloned());
        self.len += count;
    }

    /// Reads the blocks of the ids still to be written over, all at once ([`id_warm`]): a
    /// spare's ids are another node's, long cold at a million attachments, and each is
    /// dropped with an atomic update that waits for its miss before the next starts.
    ///
    /// [`id_warm`]: crate::id_warm
    pub(crate) fn warm_rest(&self)
    where
        V: 'static,
    {
        crate::id_warm::warm(self.list[self.len..].iter());
    }

    /// What was written so far.
    pub(crate) fn written(&self) -> &[V] {
        &self.list[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_list_written_over_holds_exactly_what_was_written_and_keeps_its_buffers() {
        let mut list = names(&["node-0001", "node-0002", "node-0003"]);
        let buffer = list[0].as_ptr();
        let shorter = names(&["node-0004", "node-0005"]);
        Refill::run(&mut list, |r| {
            r.extend(shorter[..1].iter());
            r.extend(shorter[1..].iter());
            assert_eq!(r.written(), shorter);
        });
        assert_eq!(list, shorter, "the rest dropped");
        assert_eq!(list[0].as_ptr(), buffer, "the id's buffer kept");
        let longer = names(&["a", "b", "c", "d"]);
        Refill::run(&mut list, |r| r.extend(longer.iter()));
        assert_eq!(list, longer, "pushed past the old ones");
        Refill::run(&mut list, |_| ());
        assert!(list.is_empty(), "nothing written, nothing left");
        let mut numbers = vec![7_u32, 8, 9];
        Refill::run(&mut numbers, |r| r.extend([1, 2].iter()));
        assert_eq!(numbers, [1, 2], "ids that own nothing are appended");
    }
}
