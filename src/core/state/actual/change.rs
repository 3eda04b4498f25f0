//! How the records change as the core's operations finish: an attach confirmed or uncertain, a
//! volume withheld from the node's report ahead of a detach, a detach done. Each change keeps
//! the node's index, its report and the verify ring in line with the records.

use super::ActualState;
use super::node::{OUT_OF_RING, next_generation, node_entry};
use super::record::{AttachState, Attachment, VolumeAttachments, attachments_of};
use super::sorted::{find, put, put_new, put_sparse};
use super::standing::Standing;
use super::verify::leave_ring;
use crate::core::state::progress::DetachProgress;
use crate::domain::Domain;

impl<D: Domain> ActualState<D> {
    /// Brings the node index's "reported" flag of (`volume`, `node`) in line with the record,
    /// which the caller just changed and says is `reported`, noting the node when its report
    /// changes; with `bump`, the record changed and takes a new generation.
    fn sync_reported(&mut self, volume: &D::Volume, node: &D::Node, reported: bool, bump: bool) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        if let Ok(i) = find(&n.attached, volume) {
            let generation = bump.then(|| n.draw(&mut self.report_generations));
            let standing = &mut n.attached[i].1;
            if let Some(generation) = generation {
                standing.bump(generation);
            }
            if standing.set_reported(reported) {
                n.count_reported(!reported, reported);
                n.report_gen = next_generation(&mut self.report_generations);
                self.report_changed.mark(node.clone());
            }
        }
    }

    /// Records a confirmed attach; the volume is reported (a later detach withholds it again).
    pub(crate) fn set_attached(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
        device: Option<&str>,
    ) {
        let Some(a) = self.get_mut(volume, node) else {
            return self.insert(volume, node, AttachState::Attached, device);
        };
        a.confirm();
        let reported = a.is_reported();
        if let Some(n) = self.nodes.get_mut(node) {
            n.devices.set(volume, device);
            n.report_gen = next_generation(&mut self.report_generations);
        }
        self.sync_reported(volume, node, reported, true);
    }

    /// An attach of an existing record was planned: until it answers, a call may attach the
    /// volume there again.
    pub(crate) fn attach_planned(&mut self, volume: &D::Volume, node: &D::Node) {
        if let Some(a) = self.get_mut(volume, node) {
            a.landed = false;
        }
    }

    /// Records that the volume may be attached to the node. It stops being reported.
    pub(crate) fn set_uncertain(&mut self, volume: &D::Volume, node: &D::Node) {
        let Some(a) = self.get_mut(volume, node) else {
            return self.insert(volume, node, AttachState::Uncertain, None);
        };
        a.state = AttachState::Uncertain;
        let reported = a.is_reported();
        self.sync_reported(volume, node, reported, true);
    }

    /// A new record, with `device` as its path if it is Attached. The node's index gets its
    /// "reported" flag here, and the node is noted when that changes its report: one lookup
    /// of the node and one of the volume, where making the record and then syncing the flag
    /// (`sync_reported`) took three of each (a new attachment on every move).
    fn insert(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
        state: AttachState,
        device: Option<&str>,
    ) {
        let n = node_entry(&mut self.nodes, &mut self.report_generations, node);
        let record = Attachment::new(node.clone(), state, n);
        // A new record is never withheld: it is reported exactly when Attached.
        let reported = record.is_reported();
        let standing = Standing::new(reported, n.draw(&mut self.report_generations));
        let before = put_new(&mut n.attached, volume, standing);
        n.count_reported(before.is_some_and(Standing::reported), reported);
        if state == AttachState::Attached {
            n.devices.set(volume, device);
        }
        n.report_gen = next_generation(&mut self.report_generations);
        if n.ring_pos == OUT_OF_RING {
            // Its first attachment: the verify walks it from now on.
            n.ring_pos = self.ring.push(node.clone());
        }
        attachments_of(&mut self.volumes, volume).push(record);
        self.len += 1;
        if reported {
            self.report_changed.mark(node.clone());
        }
    }

    /// Forgets the attachment: the volume is detached from the node. With `keep_record`, a
    /// volume left attached nowhere keeps its (empty) entry in the volume table, for the
    /// attach that comes next: a move detaches a volume and attaches it elsewhere, and
    /// removing the entry (moving the table's last one into its place) and making it again
    /// was about 1 % of a `u32` move's instructions. The caller keeps it only for a volume
    /// wanted elsewhere, and drops it with [`forget_volume`](Self::forget_volume) once the
    /// volume is wanted nowhere, so that idle volumes hold no entry.
    /// Returns the forgotten record's detach progress, for the indexes derived from it.
    pub(crate) fn set_detached(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
        keep_record: bool,
    ) -> Option<DetachProgress> {
        let VolumeAttachments { list, .. } = self.volumes.get_mut(volume)?;
        let i = list.iter().position(|a| a.node == *node)?;
        let gone = list.swap_remove(i);
        if list.is_empty() && !keep_record {
            self.volumes.remove(volume);
        }
        self.len -= 1;
        if let Some(n) = self.nodes.get_mut(node) {
            let before = put(&mut n.attached, volume, None);
            n.count_reported(before.is_some_and(Standing::reported), false);
            n.devices.set(volume, None);
            if gone.is_reported() {
                // A withheld volume's detach leaves the report as it was (the usual detach:
                // withheld, written, then detached), so the status book need not compare it
                // against what the store holds again.
                n.report_gen = next_generation(&mut self.report_generations);
            }
            put_sparse(
                &mut n.detach_requested,
                volume,
                None,
                &mut self.request_spares,
            );
            if n.detach_requested.as_slice().is_empty() {
                self.requesting.remove(node);
            }
            if !n.present && n.attached.is_empty() {
                self.forget_node(node);
            } else if n.attached.is_empty() {
                // Its last attachment: the verify has nothing left to walk here.
                let pos = std::mem::replace(&mut n.ring_pos, OUT_OF_RING);
                leave_ring(&mut self.ring, &mut self.nodes, pos);
            }
        }
        if gone.is_reported() {
            self.report_changed.mark(node.clone());
        }
        Some(gone.detach)
    }

    /// Drops `volume`'s entry in the volume table if it is attached nowhere: the entry
    /// [`set_detached`](Self::set_detached) kept for it.
    pub(crate) fn forget_volume(&mut self, volume: &D::Volume) {
        if self.volumes.get(volume).is_some_and(|v| v.list.is_empty()) {
            self.volumes.remove(volume);
        }
    }

    /// Drops the volume from the node's report ahead of a detach (`true`), or puts it back.
    pub(crate) fn set_withheld(&mut self, volume: &D::Volume, node: &D::Node, withheld: bool) {
        if let Some(a) = self.get_mut(volume, node) {
            a.withheld = withheld;
            let reported = a.is_reported();
            self.sync_reported(volume, node, reported, false);
        }
    }
}
