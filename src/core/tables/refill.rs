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
    /// The list is an older version of what is written, sorted as it is: each id is kept
    /// where the list already holds it ([`edit`](Refill::edit)).
    editing: bool,
}

impl<'a, V: Clone + Ord + 'static> Refill<'a, V> {
    /// Runs `fill` over `list`, then drops what it did not write over: `list` holds exactly
    /// what `fill` wrote.
    pub(crate) fn run<R>(list: &'a mut Vec<V>, fill: impl FnOnce(&mut Refill<'_, V>) -> R) -> R {
        Self::run_as(list, false, fill)
    }

    /// [`run`](Self::run) over a list that holds an older version of what `fill` writes,
    /// both sorted and without repeats (a node's own list from an earlier status write): an
    /// id the list holds stays where it is, moved along as ids before it come and go, and
    /// only the ids new to the list are copied. With `Name` ids that is what saves the
    /// copies: a write over another node's list changed the count of each id twice, an
    /// atomic update each, on a name whose block is cold at a million attachments. Other
    /// ids are written over as by [`run`](Self::run), with the same result.
    pub(crate) fn edit<R>(list: &'a mut Vec<V>, fill: impl FnOnce(&mut Refill<'_, V>) -> R) -> R {
        debug_assert!(list.is_sorted(), "an edited list is sorted");
        Self::run_as(list, true, fill)
    }

    fn run_as<R>(
        list: &'a mut Vec<V>,
        editing: bool,
        fill: impl FnOnce(&mut Refill<'_, V>) -> R,
    ) -> R {
        let mut refill = Refill {
            list,
            len: 0,
            editing,
        };
        let out = fill(&mut refill);
        let Refill { list, len, .. } = refill;
        list.truncate(len);
        out
    }

    /// Appends copies of `ids`: over the old ones while they last, then pushed. When
    /// editing, `ids` continue the sorted sequence written so far.
    pub(crate) fn extend<'b>(&mut self, ids: impl ExactSizeIterator<Item = &'b V>)
    where
        V: 'b,
    {
        // Only lists of `Name`s are edited: for other ids the test is a constant, and the
        // loop below stays as tight as before.
        if crate::core::tables::id_search::equal_by_identity::<V>() && self.editing {
            for id in ids {
                match self.list.get(self.len) {
                    Some(old) if old == id => self.len += 1,
                    _ => self.keep_or_insert(id),
                }
            }
            return;
        }
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
    /// dropped with an atomic update that waits for its miss before the next starts. An
    /// edited list's ids are mostly kept, and are not read.
    ///
    /// [`id_warm`]: crate::core::tables::id_warm
    pub(crate) fn warm_rest(&self) {
        if !self.editing {
            crate::core::tables::id_warm::warm(self.list[self.len..].iter());
        }
    }

    /// Writes `id` next when editing: the old ids before it, gone from the new version, are
    /// dropped; an equal old id is kept as it is (for `Name`s, equal is the same pointer,
    /// decided without reading either name); otherwise a copy goes in before the rest.
    #[inline(never)]
    fn keep_or_insert(&mut self, id: &V) {
        loop {
            match self.list.get(self.len) {
                Some(old) if old == id => break,
                Some(old) if old < id => {
                    self.list.remove(self.len);
                }
                _ => {
                    self.list.insert(self.len, id.clone());
                    break;
                }
            }
        }
        self.len += 1;
    }

    /// What was written so far.
    pub(crate) fn written(&self) -> &[V] {
        &self.list[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::name::Name;

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

    /// Sorted, without repeats.
    fn sorted<T: Ord>(mut items: Vec<T>) -> Vec<T> {
        items.sort();
        items.dedup();
        items
    }

    proptest::proptest! {
        /// An edited list holds exactly what was written, in runs, whatever it held before;
        /// so does a list of ids that are not edited (written over).
        #[test]
        fn an_edited_list_holds_exactly_what_was_written(
            old in proptest::collection::vec("[a-f]{1,2}", 0..40),
            new in proptest::collection::vec("[a-f]{1,2}", 0..40),
            cut in 0usize..40,
        ) {
            let (old, new) = (sorted(old), sorted(new));
            let cut = cut.min(new.len());
            let as_names = |texts: &[String]| -> Vec<Name> { texts.iter().map(Name::from).collect() };
            let (mut list, written) = (as_names(&old), as_names(&new));
            Refill::edit(&mut list, |r| {
                r.extend(written[..cut].iter());
                r.extend(written[cut..].iter());
                proptest::prop_assert_eq!(r.written(), &written[..]);
                Ok(())
            })?;
            proptest::prop_assert_eq!(&list, &written);
            let mut texts = old.clone();
            Refill::edit(&mut texts, |r| r.extend(new.iter()));
            proptest::prop_assert_eq!(texts, new);
        }
    }
}
