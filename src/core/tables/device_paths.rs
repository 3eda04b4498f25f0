//! A node's device paths in one buffer of text, and the packed paths of a reported list that
//! are copied from it.
//!
//! Why not an `Arc<str>` per path: every status write lists the node's whole report, and each
//! shared path cost a reference count on its own cold line when the list was built and another
//! when it was dropped: about a fifth of the controller's loop at 150,000 attachments.
//! Text kept together is copied into a report in
//! one contiguous read, and freed with it in one call.

/// Marks an entry of [`PackedPaths::ends`] whose volume has no path.
const NO_PATH: u32 = 1 << 31;

/// The longest a node's (or a list's) path text may be in all: offsets keep the top bit free
/// for [`NO_PATH`]. A node has at most a few hundred volumes with paths of tens of bytes.
const MAX_TEXT: usize = (NO_PATH - 1) as usize;

/// The device paths of one node's attachments that have one, sorted by volume: the paths'
/// text side by side in one string, and each volume with where its path ends.
#[derive(Debug)]
struct Paths<V> {
    /// Sorted by volume; each path runs from the previous entry's end to this one's.
    ends: Vec<(V, u32)>,
    text: String,
}

/// A node's device paths: nothing at all (8 bytes) while no attachment there has a path, as
/// with CSI, which gives none.
#[derive(Debug)]
pub(crate) struct NodeDevicePaths<V>(Option<Box<Paths<V>>>);

impl<V> Default for NodeDevicePaths<V> {
    fn default() -> Self {
        NodeDevicePaths(None)
    }
}

impl<V: Ord + Clone> NodeDevicePaths<V> {
    /// Whether no attachment here has a path.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// How many bytes of path text the node holds: a bound on what a report copies.
    pub(crate) fn text_len(&self) -> usize {
        self.0.as_ref().map_or(0, |p| p.text.len())
    }

    /// `volume`'s path.
    pub(crate) fn get(&self, volume: &V) -> Option<&str> {
        let p = self.0.as_deref()?;
        let i = p.ends.binary_search_by(|(v, _)| v.cmp(volume)).ok()?;
        Some(p.path(i))
    }

    /// Each volume with its path, sorted by volume.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&V, &str)> {
        self.0.as_deref().into_iter().flat_map(|p| {
            p.ends
                .iter()
                .enumerate()
                .map(move |(i, (volume, _))| (volume, p.path(i)))
        })
    }

    /// The paths of `volumes` (sorted by volume), packed: the node's text copied in runs, one
    /// copy for each stretch of paths that are next to each other here (mostly the whole text
    /// in one or two), rather than a slice per path.
    pub(crate) fn pack<'a>(&self, volumes: impl ExactSizeIterator<Item = &'a V>) -> PackedPaths
    where
        V: 'a,
    {
        let mut packed = PackedPaths::with_capacity(volumes.len(), self.text_len());
        let Some(p) = self.0.as_deref() else {
            packed.ends.extend(volumes.map(|_| NO_PATH));
            return packed;
        };
        let mut entries = p.ends.iter().peekable();
        // Where the next entry's path starts (the previous one's end).
        let mut next_start = 0;
        // The stretch of the node's text that is to be copied next, not copied yet.
        let (mut run_start, mut run_end) = (0, 0);
        for volume in volumes {
            while let Some((_, end)) = entries.next_if(|(v, _)| v < volume) {
                next_start = *end as usize;
            }
            let Some((_, end)) = entries.next_if(|(v, _)| v == volume) else {
                packed
                    .ends
                    .push((packed.text.len() + run_end - run_start) as u32 | NO_PATH);
                continue;
            };
            let (start, end) = (next_start, *end as usize);
            next_start = end;
            if start != run_end {
                packed.text.push_str(&p.text[run_start..run_end]);
                run_start = start;
            }
            run_end = end;
            packed
                .ends
                .push((packed.text.len() + run_end - run_start) as u32);
        }
        packed.text.push_str(&p.text[run_start..run_end]);
        packed
    }

    /// Sets `volume`'s path, or removes it (`None`). A path longer than a node can hold
    /// ([`MAX_TEXT`] with the others) is kept as no path: no backend gives one, and the
    /// offsets must not wrap.
    pub(crate) fn set(&mut self, volume: &V, path: Option<&str>) {
        let path = path.filter(|p| p.len() + self.text_len() <= MAX_TEXT);
        let p = match (&mut self.0, path) {
            (None, None) => return,
            (slot, _) => slot.get_or_insert_with(|| {
                Box::new(Paths {
                    ends: Vec::new(),
                    text: String::new(),
                })
            }),
        };
        match (p.ends.binary_search_by(|(v, _)| v.cmp(volume)), path) {
            (Ok(i), Some(path)) => {
                let old = p.range(i);
                let grew = path.len() as i64 - old.len() as i64;
                p.text.replace_range(old, path);
                p.shift(i, grew);
            }
            (Ok(i), None) => {
                let old = p.range(i);
                let shrank = old.len() as i64;
                p.text.drain(old);
                p.ends.remove(i);
                p.shift(i, -shrank);
            }
            (Err(i), Some(path)) => {
                let at = p.start(i);
                p.text.insert_str(at, path);
                p.ends.insert(i, (volume.clone(), at as u32));
                p.shift(i, path.len() as i64);
            }
            (Err(_), None) => {}
        }
        if p.ends.is_empty() {
            self.0 = None;
        }
    }
}

impl<V> Paths<V> {
    /// Moves the ends of entries `from` on by `by` bytes: the text before them grew or shrank.
    fn shift(&mut self, from: usize, by: i64) {
        if by != 0 {
            for (_, end) in &mut self.ends[from..] {
                *end = (i64::from(*end) + by) as u32;
            }
        }
    }

    fn start(&self, i: usize) -> usize {
        i.checked_sub(1)
            .map_or(0, |before| self.ends[before].1 as usize)
    }

    fn range(&self, i: usize) -> std::ops::Range<usize> {
        self.start(i)..self.ends[i].1 as usize
    }

    fn path(&self, i: usize) -> &str {
        &self.text[self.range(i)]
    }
}

/// The device paths of a reported list, one per volume, in one string: the list's copy of the
/// node's text, read in one go and freed in one call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PackedPaths {
    text: String,
    /// Where each volume's path ends in `text`, [`NO_PATH`] set when it has none (its path
    /// would be empty there).
    ends: Vec<u32>,
}

impl PackedPaths {
    /// Room for `volumes` entries and `text` bytes of paths.
    pub(crate) fn with_capacity(volumes: usize, text: usize) -> Self {
        PackedPaths {
            text: String::with_capacity(text),
            ends: Vec::with_capacity(volumes),
        }
    }

    /// Appends the next volume's path. `false`, and nothing appended, when the text would pass
    /// what the offsets can hold ([`MAX_TEXT`]).
    pub(crate) fn push(&mut self, path: Option<&str>) -> bool {
        match path {
            Some(path) if self.text.len() + path.len() > MAX_TEXT => return false,
            Some(path) => {
                self.text.push_str(path);
                self.ends.push(self.text.len() as u32);
            }
            None => self.ends.push(self.text.len() as u32 | NO_PATH),
        }
        true
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether some entry has a path.
    pub(crate) fn any(&self) -> bool {
        self.ends.iter().any(|end| end & NO_PATH == 0)
    }

    /// The `i`th volume's path.
    pub(crate) fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        if end & NO_PATH != 0 {
            return None;
        }
        let start = i
            .checked_sub(1)
            .map_or(0, |before| (self.ends[before] & !NO_PATH) as usize);
        Some(&self.text[start..end as usize])
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Every change a node sees, in a fixed pseudo-random order, against a plain map: the
    /// paths read back are exactly the ones set, in volume order, and the text holds nothing
    /// else (no path's bytes left behind by a removal or a shorter replacement).
    #[test]
    fn a_nodes_paths_are_what_was_set_with_no_text_left_over() {
        let mut paths = NodeDevicePaths::<u32>::default();
        let mut model: BTreeMap<u32, String> = BTreeMap::new();
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for step in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let volume = (state % 40) as u32;
            let path = match (state >> 8) % 4 {
                0 => None,
                // Empty, short and long paths, so a replacement grows and shrinks the text.
                n => Some("/dev/disk/by-id/x".repeat(n as usize - 1) + &step.to_string()),
            };
            paths.set(&volume, path.as_deref());
            match path {
                Some(p) => model.insert(volume, p),
                None => model.remove(&volume),
            };
            let read: Vec<(u32, &str)> = paths.iter().map(|(v, p)| (*v, p)).collect();
            let want: Vec<(u32, &str)> = model.iter().map(|(v, p)| (*v, p.as_str())).collect();
            assert_eq!(read, want, "step {step}");
            let total: usize = model.values().map(String::len).sum();
            assert_eq!(paths.text_len(), total, "step {step}: text left over");
            assert_eq!(paths.is_empty(), model.is_empty());
            assert_eq!(paths.get(&volume), model.get(&volume).map(String::as_str));
        }
    }

    /// Packing any sorted choice of volumes gives each its own path, whatever runs of the
    /// node's text it copies: chosen volumes with and without paths, next to each other and
    /// with gaps, against the paths read one by one.
    #[test]
    fn a_packed_choice_of_volumes_holds_each_ones_path() {
        let mut paths = NodeDevicePaths::<u32>::default();
        let none: Vec<u32> = (0..5).collect();
        let packed = paths.pack(none.iter());
        assert_eq!((0..5).map(|i| packed.get(i)).collect::<Vec<_>>(), [None; 5]);
        for v in 0..12u32 {
            if v % 3 != 1 {
                paths.set(&v, Some(&format!("/dev/{}", "x".repeat(v as usize))));
            }
        }
        for choice in 0u32..1 << 14 {
            let volumes: Vec<u32> = (0..14).filter(|v| choice & (1 << v) != 0).collect();
            let packed = paths.pack(volumes.iter());
            let read: Vec<Option<&str>> = (0..packed.len()).map(|i| packed.get(i)).collect();
            let want: Vec<Option<&str>> = volumes.iter().map(|v| paths.get(v)).collect();
            assert_eq!(read, want, "volumes {volumes:?}");
            let text: usize = want.iter().flatten().map(|p| p.len()).sum();
            assert_eq!(
                packed.text.len(),
                text,
                "volumes {volumes:?}: text not chosen"
            );
        }
    }

    #[test]
    fn a_node_without_paths_holds_no_allocation() {
        let mut paths = NodeDevicePaths::<u32>::default();
        paths.set(&1, None);
        assert!(paths.0.is_none());
        paths.set(&1, Some("/dev/a"));
        paths.set(&2, Some(""));
        assert_eq!(paths.get(&2), Some(""), "an empty path is a path");
        paths.set(&1, None);
        paths.set(&2, None);
        assert!(paths.0.is_none(), "the last path gone, the box goes too");
        assert_eq!(std::mem::size_of::<NodeDevicePaths<u32>>(), 8);
    }

    #[test]
    fn packed_paths_tell_no_path_from_an_empty_one() {
        let mut packed = PackedPaths::with_capacity(4, 8);
        for path in [Some("/dev/a"), None, Some(""), Some("/dev/bb")] {
            assert!(packed.push(path));
        }
        let read: Vec<_> = (0..packed.len()).map(|i| packed.get(i)).collect();
        assert_eq!(read, [Some("/dev/a"), None, Some(""), Some("/dev/bb")]);
        assert_eq!(packed.get(4), None);
        assert!(packed.any());
        let mut none = PackedPaths::default();
        none.push(None);
        assert!(!none.any());
    }
}
