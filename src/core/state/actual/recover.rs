//! Restart recovery's side of the actual state: the store's listing of a node taken in at once,
//! and the volume table read by position.

use super::ActualState;
use super::node::{OUT_OF_RING, next_generation, node_entry};
use super::record::{AttachState, Attachment, attachments_of};
use super::sorted::find;
use super::standing::Standing;
use crate::core::calls::reported_volumes::ReportedVolume;
use crate::core::tables::dense_table::WARM_BATCH;
use crate::core::tables::id_warm;
use crate::domain::Domain;

impl<D: Domain> ActualState<D> {
    /// Restart recovery: where `volume`'s entry sits in the volume table, and its records. A
    /// position holds until a volume's last record goes, which never happens while the core
    /// recovers, and is below [`volumes_with_records`](Self::volumes_with_records) at the time
    /// the entry was made.
    pub(crate) fn volume_entry(&self, volume: &D::Volume) -> Option<(usize, &[Attachment<D>])> {
        let (at, entry) = self.volumes.get_with_position(volume)?;
        Some((at, entry.list.as_slice()))
    }

    /// How many volumes have a record.
    pub(crate) fn volumes_with_records(&self) -> usize {
        self.volumes.len()
    }

    /// The volumes with a record, by position ([`volume_entry`](Self::volume_entry)).
    pub(crate) fn volumes_by_position(&self) -> impl Iterator<Item = &D::Volume> {
        self.volumes.iter().map(|v| &v.volume)
    }

    /// Restart recovery: the store lists `reported` for `node`, so each is Attached there, as
    /// [`set_attached`](Self::set_attached) would make them one by one (a volume listed twice
    /// is set twice, its last device path kept). The node is looked up once and each volume
    /// once, where `set_attached` looks each up three times: at a million attachments those
    /// lookups, each a likely cache miss, were most of taking the store's listing in.
    pub(crate) fn recover_reported(&mut self, node: &D::Node, reported: &[ReportedVolume<D>]) {
        if reported.is_empty() {
            return;
        }
        let n = node_entry(&mut self.nodes, &mut self.report_generations, node);
        // The node's index, in one sort when it is new (at recovery it is); else one
        // insertion each, as `set_attached` makes.
        let fresh = n.attached.is_empty();
        let mut changed = fresh;
        for (i, r) in reported.iter().enumerate() {
            if i % WARM_BATCH == 0 {
                // A restart takes a million of these in: their lookups' misses overlap, and
                // so do those of the names' blocks that the clones below count in.
                let batch = || reported[i..].iter().take(WARM_BATCH).map(|r| &r.volume);
                self.volumes.warm(batch());
                id_warm::warm(batch());
            }
            let list = attachments_of(&mut self.volumes, &r.volume);
            match list.iter_mut().find(|a| a.node == *node) {
                Some(a) => a.confirm(),
                None => {
                    list.push(Attachment::new(node.clone(), AttachState::Attached, n));
                    self.len += 1;
                }
            }
            if !fresh {
                // The index has an entry exactly where a record was found above: that one
                // changes, else a new one goes in.
                match find(&n.attached, &r.volume) {
                    Ok(i) => {
                        let generation = n.draw(&mut self.report_generations);
                        let standing = &mut n.attached[i].1;
                        standing.bump(generation);
                        if standing.set_reported(true) {
                            n.count_reported(false, true);
                            changed = true;
                        }
                    }
                    Err(i) => {
                        let standing = Standing::new(true, n.draw(&mut self.report_generations));
                        n.attached.insert(i, (r.volume.clone(), standing));
                        n.count_reported(false, true);
                        changed = true;
                    }
                }
            }
            n.devices.set(&r.volume, r.device.as_deref());
        }
        if fresh {
            // Every draw below fits this epoch: the list is built apart from the node's, where
            // a renumber would not reach it.
            n.make_room(2 * reported.len(), &mut self.report_generations);
            let mut listed: Vec<_> = reported
                .iter()
                .map(|r| {
                    let standing = Standing::new(true, n.draw(&mut self.report_generations));
                    (r.volume.clone(), standing)
                })
                .collect();
            listed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            // A volume listed again was set again: its record changed once more.
            listed.dedup_by(|again, first| {
                let same = again.0 == first.0;
                if same {
                    first.1.bump(n.draw(&mut self.report_generations));
                }
                same
            });
            // Every entry is reported, and the list was empty: so was the count.
            n.reported = u32::try_from(listed.len()).unwrap_or(u32::MAX);
            n.attached = listed;
        }
        if n.ring_pos == OUT_OF_RING {
            // Its first attachments: the verify walks it from now on.
            n.ring_pos = self.ring.push(node.clone());
        }
        n.report_gen = next_generation(&mut self.report_generations);
        if changed {
            self.report_changed.mark(node.clone());
        }
    }

    /// Makes room for `volumes` more volumes with attachments at once: restart recovery knows
    /// how many the store lists before it takes them in.
    pub(crate) fn reserve(&mut self, volumes: usize) {
        self.volumes.reserve(volumes);
    }
}
