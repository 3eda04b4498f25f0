//! What each node must report: its list of attached volumes (with device paths), built or
//! compared from the node's index, the report generation that tells whether it changed, and the
//! nodes whose report changed since last taken.

use super::ActualState;
use crate::core::calls::reported_volumes::{ListSpares, ReportedVolumes};
use crate::core::tables::id_warm;
use crate::core::tables::refill::Refill;
use crate::domain::Domain;

impl<D: Domain> ActualState<D> {
    /// The list `node` must report, in volume order.
    pub fn report(&self, node: &D::Node) -> ReportedVolumes<D> {
        self.report_with(node, &mut ListSpares::default(), None, false)
    }

    /// [`report`](Self::report), edited from `own`, an older list of the node, or else built
    /// into a spare list from `spares` when one fits. With `warm`, a list built afresh reads
    /// the volumes' names first, all at once ([`id_warm`]): each copy changes a name's count,
    /// an atomic update that waits for its cache miss before the next starts, and at a
    /// million attachments a node's thirty names are all cold.
    pub(crate) fn report_with(
        &self,
        node: &D::Node,
        spares: &mut ListSpares<D>,
        own: Option<ReportedVolumes<D>>,
        warm: bool,
    ) -> ReportedVolumes<D> {
        let Some(n) = self.nodes.get(node) else {
            return ReportedVolumes::default();
        };
        if warm && own.is_none() {
            id_warm::warm(n.attached.iter().map(|(volume, _)| volume));
        }
        // Sized once (room for every volume here): the filter hid the length from `collect`,
        // which grew the list by doubling (four reallocations for a node of 30 volumes, on
        // every status write).
        let len = n.attached.len();
        let fill = |volumes: &mut Refill<'_, D::Volume>| {
            if warm {
                volumes.warm_rest();
            }
            // Copied in runs between the withheld entries (at most one in a move's write, none
            // in most): a run of known length is copied in one tight loop, where a filter
            // checked the room and bumped the length on every entry (a twentieth of a `u32`
            // move).
            let mut rest = &n.attached[..];
            if n.reported as usize == rest.len() {
                // Nothing withheld (an attach's write, and most others): one run, not searched.
                volumes.extend(rest.iter().map(|(volume, _)| volume));
                rest = &[];
            }
            while !rest.is_empty() {
                let run = (rest.iter())
                    .position(|(_, standing)| !standing.reported())
                    .unwrap_or(rest.len());
                volumes.extend(rest[..run].iter().map(|(volume, _)| volume));
                rest = rest.get(run + 1..).unwrap_or_default();
            }
            // No device paths (CSI): the volumes alone. Otherwise the paths are copied in one
            // walk beside the volumes, their text in runs.
            (!n.devices.is_empty()).then(|| n.devices.pack(volumes.written().iter()))
        };
        match own {
            Some(own) => ReportedVolumes::build_over(own, spares, len, fill),
            None => ReportedVolumes::build_sorted(spares, len, fill),
        }
    }

    /// What [`report`](Self::report) lists, borrowed: compared against what the store holds
    /// without copying a device path.
    pub(crate) fn reported(
        &self,
        node: &D::Node,
    ) -> impl Iterator<Item = (&D::Volume, Option<&str>)> {
        let n = self.nodes.get(node);
        let mut devices = n.into_iter().flat_map(|n| n.devices.iter()).peekable();
        n.map_or(&[][..], |n| &n.attached[..])
            .iter()
            .filter(|(_, standing)| standing.reported())
            .map(move |(volume, _)| {
                // Both lists are sorted by volume: walk them together.
                while devices.next_if(|(v, _)| *v < volume).is_some() {}
                let device = devices.next_if(|(v, _)| *v == volume).map(|(_, d)| d);
                (volume, device)
            })
    }

    /// Whether `list` is exactly what [`report`](Self::report) would build for `node`. The
    /// volumes are compared first, then the paths alone: a report that differs from what the
    /// store holds mostly differs by a volume, found without reading a device path.
    pub(crate) fn report_matches(&self, node: &D::Node, list: &ReportedVolumes<D>) -> bool {
        let n = self.nodes.get(node);
        let attached = n.map_or(&[][..], |n| &n.attached[..]);
        let count = n.map_or(0, |n| n.reported as usize);
        debug_assert_eq!(
            count,
            attached.iter().filter(|(_, s)| s.reported()).count(),
            "the node's count of reported volumes is out of line with its list"
        );
        if count != list.volumes().len() {
            // A move's write: one volume more or fewer than the store holds.
            return false;
        }
        let reported = attached
            .iter()
            .filter(|(_, standing)| standing.reported())
            .map(|(volume, _)| volume);
        reported.eq(list.volumes())
            && list
                .devices()
                .eq(self.reported(node).map(|(_, device)| device))
    }

    /// A number that is the same on two calls only if `node`'s report (what
    /// [`reported`](Self::reported) lists) is the same: every change to the node's list, flags
    /// or device paths hands out a new one, and a node made anew never reuses an old one. A
    /// node without a record reports nothing, and is 0. It lets the status book skip
    /// comparing a report it already matched against what the store holds.
    pub(crate) fn report_generation(&self, node: &D::Node) -> u64 {
        self.nodes.get(node).map_or(0, |n| n.report_gen)
    }

    pub(crate) fn has_report_changes(&self) -> bool {
        !self.report_changed.is_empty()
    }

    /// Nodes whose report may have changed since the last call.
    pub(crate) fn take_report_changed(&mut self) -> Vec<D::Node> {
        self.report_changed.take()
    }

    /// Hands back a list [`take_report_changed`](Self::take_report_changed) gave, for reuse.
    pub(crate) fn recycle_report_changed(&mut self, list: Vec<D::Node>) {
        self.report_changed.recycle(list);
    }
}
