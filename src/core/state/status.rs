//! What each node's status in the store holds, as far as the controller knows for sure.
//!
//! Upstream decides "nothing to write" by diffing against an informer copy of the node whose age
//! it cannot know (122413). Here the only things trusted are the store's acknowledgement of our
//! own write, or a fresh read at recovery; anything else leaves the stored list unknown, and an
//! unknown list is always written.

use crate::core::calls::reported_volumes::ReportedVolume;
use crate::core::calls::reported_volumes::ReportedVolumes;
use crate::core::calls::store::Revision;
use crate::core::tables::dense_table::{DenseTable, Keyed};
use crate::core::tables::id_search;
use crate::core::tables::line_warm::warm_lines;
use crate::core::tables::marks::Marks;
use crate::domain::Domain;

#[derive(Debug)]
struct NodeRecord<D: Domain> {
    /// The node itself: the key of [`StatusBook::nodes`].
    node: D::Node,
    /// Which node object this is: a number no other record of the book was given, drawn when
    /// the record is made and again when the object is deleted (a node of the same name made
    /// later is another object). A call's answer is taken only for the object it was planned
    /// for: an acknowledgement of a write to a deleted object, taken for its successor, made
    /// the core believe the successor listed volumes it had never been written.
    object: u64,
    /// The list the store holds for the node; `None` when unknown. After our acknowledged
    /// write, the very list the write carried (shared, not copied).
    stored: Option<ReportedVolumes<D>>,
    /// The list of the write in flight (shared with the write), with the report generation
    /// it was taken at.
    writing: Option<(ReportedVolumes<D>, u64)>,
    /// The report generation (`ActualState::report_generation`) that `stored` is known to
    /// equal, 0 for none: while the node's report is still at it, the next look needs no
    /// compare. Set each time `stored` is (our acknowledged write: the write's generation; a
    /// read: none), and read only while `stored` is known. Not an `Option`: every node has a
    /// record, and the tag cost 8 bytes more each.
    matched: u64,
    /// The store said the node does not exist; nothing is written until it reappears.
    missing: bool,
    /// The revision the store held the node at when we last learned it (our acknowledged
    /// write, or a fresh read): the next write is conditional on it. `None`: read first.
    revision: Option<Revision>,
    /// Writes that lost a compare-and-set race in a row; the third backs off.
    conflicts: u8,
    /// The list the store held before the last acknowledged write, kept for the node's next
    /// write to be edited from ([`StatusBook::take_spare`]) when ids are `Name`s.
    spare: Option<ReportedVolumes<D>>,
}

impl<D: Domain> Keyed for NodeRecord<D> {
    type Key = D::Node;
    fn key(&self) -> &D::Node {
        &self.node
    }
}

impl<D: Domain> NodeRecord<D> {
    /// Whether the store certainly does not list `volume` here, and no write in flight is
    /// about to list it ([`StatusBook::confirmed_absent`]).
    fn confirms_absent(&self, volume: &D::Volume) -> bool {
        let writing_lists = || self.writing.as_ref().is_some_and(|w| w.0.contains(volume));
        if self.missing {
            return !writing_lists();
        }
        self.stored.as_ref().is_some_and(|s| !s.contains(volume)) && !writing_lists()
    }

    /// A record of a node object the book did not know, numbered from `objects`.
    fn new(node: D::Node, objects: &mut u64) -> Self {
        NodeRecord {
            node,
            object: next_object(objects),
            stored: None,
            writing: None,
            matched: 0,
            missing: false,
            revision: None,
            conflicts: 0,
            spare: None,
        }
    }
}

/// The next node object's number.
fn next_object(objects: &mut u64) -> u64 {
    *objects += 1;
    *objects
}

/// The controller's knowledge of the node-status store.
#[derive(Debug)]
pub struct StatusBook<D: Domain> {
    nodes: DenseTable<NodeRecord<D>>,
    /// The node objects numbered so far ([`NodeRecord::object`]).
    objects: u64,
    /// Nodes whose report may differ from the store.
    dirty: Marks<D::Node>,
}

impl<D: Domain> Default for StatusBook<D> {
    fn default() -> Self {
        StatusBook {
            nodes: DenseTable::default(),
            objects: 0,
            dirty: Marks::default(),
        }
    }
}

impl<D: Domain> StatusBook<D> {
    /// Reads `node`'s record and every line of the list the store holds for it, which the
    /// next write's compare walks.
    pub(crate) fn warm_node(&self, node: &D::Node) {
        let Some(r) = self.nodes.get(node) else {
            return;
        };
        // The list kept for the next write to be edited from, too: that write is planned at
        // the end of this pass or the next.
        for list in [&r.stored, &r.spare].into_iter().flatten() {
            warm_lines(list.volumes());
        }
    }

    /// `node`'s report may now differ from what the store holds.
    pub(crate) fn mark(&mut self, node: D::Node) {
        self.dirty.mark(node);
    }

    pub(crate) fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    pub(crate) fn take_dirty(&mut self) -> Vec<D::Node> {
        self.dirty.take()
    }

    /// Hands back a list [`take_dirty`](Self::take_dirty) gave, for reuse.
    pub(crate) fn recycle_dirty(&mut self, list: Vec<D::Node>) {
        self.dirty.recycle(list);
    }

    /// Every node of `nodes`' report may now differ from what the store holds.
    pub(crate) fn mark_all(&mut self, nodes: impl IntoIterator<Item = D::Node>) {
        self.dirty.extend(nodes);
    }

    /// A fresh read found `list` for `node`, at `revision`: both are now known.
    pub(crate) fn read(&mut self, node: D::Node, list: &[ReportedVolume<D>], revision: &Revision) {
        if let Some(record) = self.learn(node, list, revision) {
            record.stored = Some(ReportedVolumes::copy_of(list));
        }
    }

    /// The store's listing at recovery found `list` for `node`, at `revision`, which the core
    /// owns: its ids are moved into the book, not copied. (Copied, a restart cloned every
    /// listed volume and dropped the listing's own: two reference counts on a cold name, or
    /// an allocation and a free per `String`, for each of a million attachments.)
    pub(crate) fn read_owned(
        &mut self,
        node: D::Node,
        list: Vec<ReportedVolume<D>>,
        revision: &Revision,
    ) {
        if let Some(record) = self.learn(node, &list, revision) {
            record.stored = Some(ReportedVolumes::from(list));
        }
    }

    /// Takes in that the store holds `list` for `node` at `revision`. Returns the node's
    /// record for the list to be stored in, or `None` when the record holds it already.
    fn learn(
        &mut self,
        node: D::Node,
        list: &[ReportedVolume<D>],
        revision: &Revision,
    ) -> Option<&mut NodeRecord<D>> {
        let record = self.record(&node);
        record.missing = false;
        let same = record.revision.as_ref() == Some(revision)
            && record.stored.as_ref().is_some_and(|stored| {
                stored.matches(list.iter().map(|r| (&r.volume, r.device.as_deref())))
            });
        if same {
            // What our own acknowledged write (or an earlier read) left: already packed. Most
            // reads before a detach find just that, and comparing costs no allocation.
            return None;
        }
        record.matched = 0;
        record.revision = Some(revision.clone());
        Some(record)
    }

    /// The revision the next write of `node` is conditional on; `None` when a fresh read must
    /// come first.
    pub fn revision(&self, node: &D::Node) -> Option<&Revision> {
        self.nodes.get(node)?.revision.as_ref()
    }

    /// The node object a call planned now is about, recorded with the call and handed back
    /// to [`is_object`](Self::is_object) with its answer. Makes the node's record if it has
    /// none.
    pub(crate) fn object(&mut self, node: &D::Node) -> u64 {
        self.record(node).object
    }

    /// Whether `object` ([`object`](Self::object)) is still `node`'s: if not, the node object
    /// the call was planned for was deleted since, and its answer tells nothing of this one.
    pub(crate) fn is_object(&self, node: &D::Node, object: u64) -> bool {
        self.nodes.get(node).is_some_and(|r| r.object == object)
    }

    /// A write's answer about a node object deleted since: no write is in flight for the
    /// node any more, and nothing else is learned.
    pub(crate) fn write_superseded(&mut self, node: &D::Node) {
        if let Some(r) = self.nodes.get_mut(node) {
            r.writing = None;
        }
    }

    /// `node`'s record, made if it has none.
    fn record(&mut self, node: &D::Node) -> &mut NodeRecord<D> {
        let objects = &mut self.objects;
        self.nodes
            .get_or_make(node, |node| NodeRecord::new(node.clone(), objects))
    }

    /// What the store holds for `node`, if known, sorted by volume.
    pub fn stored(&self, node: &D::Node) -> Option<&ReportedVolumes<D>> {
        self.nodes.get(node)?.stored.as_ref()
    }

    /// Whether a write for `node` is in flight.
    pub fn is_writing(&self, node: &D::Node) -> bool {
        self.nodes.get(node).is_some_and(|r| r.writing.is_some())
    }

    /// Whether the store is known to hold `node`'s report at `generation` (our write of that
    /// generation was acknowledged and nothing has been learned since), with no call running:
    /// a look at the node would find nothing to write.
    pub(crate) fn holds_report_at(&self, node: &D::Node, generation: u64) -> bool {
        generation != 0
            && self.nodes.get(node).is_some_and(|r| {
                !r.missing && r.writing.is_none() && r.stored.is_some() && r.matched == generation
            })
    }

    /// Whether the store reported `node` missing.
    pub fn is_missing(&self, node: &D::Node) -> bool {
        self.nodes.get(node).is_some_and(|r| r.missing)
    }

    /// Whether the store certainly does not list `volume` for `node`, and no write in flight
    /// is about to list it: only then may the node's agent be assumed not to start mounting it.
    pub fn confirmed_absent(&self, node: &D::Node, volume: &D::Volume) -> bool {
        self.nodes
            .get(node)
            .is_some_and(|record| record.confirms_absent(volume))
    }

    /// [`is_missing`](Self::is_missing) and [`confirmed_absent`](Self::confirmed_absent), in
    /// one lookup of the node: every look at a detach asks both.
    pub(crate) fn missing_and_absent(&self, node: &D::Node, volume: &D::Volume) -> (bool, bool) {
        self.nodes.get(node).map_or((false, false), |record| {
            (record.missing, record.confirms_absent(volume))
        })
    }

    /// Whether the node's report at `generation` must be written for `node`: no write in
    /// flight and the store is not known to hold it already. `holds_report` says whether a
    /// list the store holds is that report.
    ///
    /// A report already matched at the same generation is not compared again: a node is looked
    /// at several times per change (each answer on it marks it), and the compare of a
    /// 30-volume list was about a tenth of a workload move.
    pub(crate) fn needs_write(
        &mut self,
        node: &D::Node,
        generation: u64,
        holds_report: impl FnOnce(&ReportedVolumes<D>) -> bool,
    ) -> bool {
        let Some(r) = self.nodes.get_mut(node) else {
            return true;
        };
        if r.missing || r.writing.is_some() {
            return false;
        }
        let Some(stored) = &r.stored else {
            return true;
        };
        if generation != 0 && r.matched == generation {
            return false;
        }
        let same = holds_report(stored);
        if same {
            r.matched = generation;
        }
        !same
    }

    /// A write of `list` (sorted by volume), the node's report at `generation`, is in flight
    /// for `node`.
    pub(crate) fn start_write(
        &mut self,
        node: &D::Node,
        generation: u64,
        list: ReportedVolumes<D>,
    ) {
        self.record(node).writing = Some((list, generation));
    }

    /// The store acknowledged the write in flight, which it now holds at `revision`. Returns
    /// the list it held before, which the book no longer needs.
    pub(crate) fn write_acked(
        &mut self,
        node: &D::Node,
        revision: Revision,
    ) -> Option<ReportedVolumes<D>> {
        let r = self.nodes.get_mut(node)?;
        let (stored, matched) = r.writing.take().map_or((None, 0), |w| (Some(w.0), w.1));
        r.matched = matched;
        r.revision = Some(revision);
        r.conflicts = 0;
        let replaced = std::mem::replace(&mut r.stored, stored);
        if id_search::equal_by_identity::<D::Volume>() {
            // Kept for the node's next write, which differs from it only by what changed over
            // two writes: edited (`Refill::edit`), it copies only that. Other ids gain less
            // (a `String`'s equality reads its text as a copy does), and the list goes to the
            // shared spares, to be written over by any node's next list.
            r.spare = replaced;
            return None;
        }
        replaced
    }

    /// The list kept for `node`'s next write to be edited from, if any ([`write_acked`]).
    /// Only lists of `Name`s are kept: with other ids there is none, and the node is not
    /// looked up for it.
    ///
    /// [`write_acked`]: Self::write_acked
    pub(crate) fn take_spare(&mut self, node: &D::Node) -> Option<ReportedVolumes<D>> {
        if !id_search::equal_by_identity::<D::Volume>() {
            return None;
        }
        self.nodes.get_mut(node)?.spare.take()
    }

    /// The write lost a compare-and-set race: someone else wrote, so both the list and the
    /// revision are unknown and the next write starts with a fresh read. Returns the number of
    /// conflicts in a row.
    pub(crate) fn write_conflicted(&mut self, node: &D::Node) -> u8 {
        let Some(r) = self.nodes.get_mut(node) else {
            return 0;
        };
        r.writing = None;
        r.stored = None;
        r.revision = None;
        r.conflicts = r.conflicts.saturating_add(1);
        r.conflicts
    }

    /// The write failed. If it may have landed, what the store holds is unknown; the revision
    /// is kept either way: had the write landed, the next one conflicts on it and reads.
    pub(crate) fn write_failed(&mut self, node: &D::Node, may_have_landed: bool) {
        if let Some(r) = self.nodes.get_mut(node) {
            r.writing = None;
            if may_have_landed {
                r.stored = None;
            }
        }
    }

    /// The store has no such node.
    pub(crate) fn not_found(&mut self, node: &D::Node) {
        if let Some(r) = self.nodes.get_mut(node) {
            r.writing = None;
            r.stored = None;
            r.revision = None;
            r.missing = true;
        }
    }

    /// The node object appeared (again): if it was gone, its status is written afresh (50721).
    pub(crate) fn node_appeared(&mut self, node: D::Node) {
        let objects = &mut self.objects;
        let record = self
            .nodes
            .get_or_make(&node, |node| NodeRecord::new(node.clone(), objects));
        if record.missing {
            // Gone (deleted, or the store had no such node): another object now.
            record.object = next_object(objects);
            record.missing = false;
            record.stored = None;
            record.revision = None;
        }
        self.dirty.mark(node);
    }

    /// The node object is gone; a node of the same name will be a new object.
    /// Its record goes (so node churn does not grow the book), unless a write is in flight,
    /// whose answer drops it (see [`forget_idle`](Self::forget_idle)).
    pub(crate) fn node_gone(&mut self, node: &D::Node) {
        if let Some(r) = self.nodes.get_mut(node) {
            if r.writing.is_none() {
                self.nodes.remove(node);
            } else {
                r.stored = None;
                r.missing = true;
                // The write in flight is about this object, whatever comes next.
                r.object = next_object(&mut self.objects);
            }
        }
    }

    /// Drops `node`'s record if no write is in flight: the node is gone.
    pub(crate) fn forget_idle(&mut self, node: &D::Node) {
        if self.nodes.get(node).is_some_and(|r| r.writing.is_none()) {
            self.nodes.remove(node);
        }
    }

    /// Number of nodes with a record.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no node has a record.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::domain::Ids;

    type T = Ids<&'static str, &'static str, &'static str>;

    fn rv(v: &'static str) -> ReportedVolume<T> {
        ReportedVolume {
            volume: v,
            device: None,
        }
    }

    fn list(entries: &[ReportedVolume<T>]) -> ReportedVolumes<T> {
        entries.to_vec().into()
    }

    /// `needs_write` against an owned list, at a generation never seen before: always
    /// compared.
    fn needs(book: &mut StatusBook<T>, node: &'static str, list: &[ReportedVolume<T>]) -> bool {
        static FRESH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 40);
        let generation = FRESH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        needs_at(book, node, generation, list)
    }

    /// `needs_write` against an owned list, said to be the report at `generation`.
    fn needs_at(
        book: &mut StatusBook<T>,
        node: &'static str,
        generation: u64,
        list: &[ReportedVolume<T>],
    ) -> bool {
        book.needs_write(&node, generation, |stored| {
            stored.matches(list.iter().map(|r| (&r.volume, r.device.as_deref())))
        })
    }

    #[test]
    fn a_node_object_deleted_and_made_again_is_another_object_to_answers() {
        let mut book = StatusBook::<T>::default();
        let first = book.object(&"n1");
        assert!(book.is_object(&"n1", first));
        book.start_write(&"n1", 1, list(&[rv("v1")]));
        // Deleted under its write: the record stays for the write's answer, as another object.
        book.node_gone(&"n1");
        assert!(!book.is_object(&"n1", first));
        let gone = book.object(&"n1");
        book.node_appeared("n1");
        let second = book.object(&"n1");
        assert!(![first, gone].contains(&second), "{first} {gone} {second}");
        // The old write's answer frees the record and teaches nothing.
        book.write_superseded(&"n1");
        assert!(!book.is_writing(&"n1"));
        assert_eq!(book.stored(&"n1").map(ReportedVolumes::to_vec), None);
        assert_eq!(book.revision(&"n1"), None);
        // Deleted with no call running, the record goes; a new one is another object still.
        book.node_gone(&"n1");
        assert!(!book.is_object(&"n1", second));
        book.node_appeared("n1");
        assert!(![first, gone, second].contains(&book.object(&"n1")));
    }

    #[test]
    fn a_replaced_list_of_names_is_kept_for_the_nodes_next_write() {
        use crate::domain::name::Name;
        type N = Ids<Name, Name, Name>;
        let (node, other) = (Name::from("status-spare-n"), Name::from("status-spare-m"));
        let names = |volume: &str| -> ReportedVolumes<N> {
            vec![ReportedVolume {
                volume: Name::from(volume),
                device: None,
            }]
            .into()
        };
        let mut book: StatusBook<N> = StatusBook::default();
        book.start_write(&node, 1, names("a"));
        assert!(book.write_acked(&node, Revision::from(2)).is_none());
        assert!(book.take_spare(&node).is_none(), "nothing was replaced");
        book.start_write(&node, 2, names("b"));
        assert!(
            book.write_acked(&node, Revision::from(3)).is_none(),
            "kept, not handed back"
        );
        assert!(book.take_spare(&other).is_none(), "another node's");
        let spare = book
            .take_spare(&node)
            .expect("the list the store held before");
        assert_eq!(spare, names("a"));
        assert!(book.take_spare(&node).is_none(), "taken once");
        // Other ids hand the replaced list back for the shared spares.
        let mut book: StatusBook<T> = StatusBook::default();
        book.start_write(&"n", 1, list(&[rv("a")]));
        book.write_acked(&"n", Revision::from(2));
        book.start_write(&"n", 2, list(&[rv("b")]));
        let replaced = book.write_acked(&"n", Revision::from(3));
        assert_eq!(replaced.map(|l| l.to_vec()), Some(vec![rv("a")]));
        assert!(book.take_spare(&"n").is_none());
    }

    #[test]
    fn only_an_acknowledged_write_makes_the_list_known() {
        let mut book: StatusBook<T> = StatusBook::default();
        assert!(needs(&mut book, "n", &[]), "unknown is always written");
        book.start_write(&"n", 0, list(&[rv("a")]));
        assert!(
            !needs(&mut book, "n", &[rv("b")]),
            "one write in flight per node"
        );
        assert!(!book.confirmed_absent(&"n", &"a"));
        book.write_acked(&"n", Revision::from(2));
        assert_eq!(
            book.stored(&"n").map(ReportedVolumes::to_vec),
            Some(vec![rv("a")])
        );
        assert!(!needs(&mut book, "n", &[rv("a")]), "no change, no write");
        assert!(book.confirmed_absent(&"n", &"b"));
        book.start_write(&"n", 0, list(&[]));
        assert!(!book.confirmed_absent(&"n", &"a"), "not until acknowledged");
        book.write_failed(&"n", true);
        assert_eq!(book.stored(&"n").map(ReportedVolumes::to_vec), None);
        assert!(!book.confirmed_absent(&"n", &"a"));
        assert!(needs(&mut book, "n", &[rv("a")]));
    }

    #[test]
    fn device_paths_are_part_of_what_is_stored() {
        let mut book: StatusBook<T> = StatusBook::default();
        let with = |v, d: &str| ReportedVolume::<T> {
            volume: v,
            device: Some(d.into()),
        };
        let list = vec![rv("a"), with("b", "/dev/b")];
        book.read("n", &[list[1].clone(), list[0].clone()], &Revision::from(1));
        assert_eq!(
            book.stored(&"n").map(ReportedVolumes::to_vec),
            Some(list.clone()),
            "sorted by volume"
        );
        assert!(!needs(&mut book, "n", &list));
        assert!(
            needs(&mut book, "n", &[rv("a"), with("b", "/dev/c")]),
            "new device path"
        );
        assert!(
            needs(&mut book, "n", &[rv("a"), rv("b")]),
            "device path gone"
        );
        assert!(needs(&mut book, "n", &[rv("a")]));
        assert!(book.confirmed_absent(&"n", &"c"));
        assert!(!book.confirmed_absent(&"n", &"b"));
        let mixed = vec![
            with("a", "/dev/a"),
            rv("b"),
            with("c", ""),
            with("d", "/dev/d"),
        ];
        book.read("n", &mixed, &Revision::from(2));
        assert_eq!(
            book.stored(&"n").map(ReportedVolumes::to_vec),
            Some(mixed.clone()),
            "paths kept per volume"
        );
        assert!(!needs(&mut book, "n", &mixed));
        let copies = vec![
            with("a", "/dev/a"),
            rv("b"),
            with("c", ""),
            with("d", "/dev/d"),
        ];
        assert!(
            !needs(&mut book, "n", &copies),
            "the same paths in other allocations are the same list"
        );
        assert!(needs(&mut book, "n", &mixed[..3]), "one volume fewer");
        assert!(
            needs(
                &mut book,
                "n",
                &[with("a", "/dev/a"), rv("b"), rv("c"), with("d", "/dev/d")]
            ),
            "an empty path is not no path"
        );
    }

    #[test]
    fn a_missing_node_is_rewritten_when_it_reappears() {
        let mut book: StatusBook<T> = StatusBook::default();
        book.read("n", &[rv("a")], &Revision::from(1));
        book.start_write(&"n", 0, list(&[]));
        book.not_found(&"n");
        assert!(!needs(&mut book, "n", &[rv("a")]));
        assert!(
            book.confirmed_absent(&"n", &"a"),
            "no status, no agent reading it"
        );
        book.node_appeared("n");
        assert!(needs(&mut book, "n", &[rv("a")]));
        assert_eq!(book.take_dirty().len(), 1);
    }

    #[test]
    fn a_gone_node_is_missing_whatever_the_write_in_flight_lists() {
        let mut book: StatusBook<T> = StatusBook::default();
        book.read("n", &[rv("a")], &Revision::from(1));
        book.start_write(&"n", 0, list(&[rv("a")]));
        book.node_gone(&"n");
        // Asked together as a detach asks them, and one by one: the same answers. The write
        // in flight still lists `a`, so `a` is not confirmed absent, but the node is missing,
        // which settles its detach on its own.
        for (node, volume, both) in [
            ("n", "a", (true, false)),
            ("n", "b", (true, true)),
            ("m", "a", (false, false)),
        ] {
            assert_eq!(
                book.missing_and_absent(&node, &volume),
                both,
                "{node} {volume}"
            );
            assert_eq!(
                (
                    book.is_missing(&node),
                    book.confirmed_absent(&node, &volume)
                ),
                both
            );
        }
    }

    #[test]
    fn a_report_matched_at_its_generation_is_not_compared_again() {
        let mut book: StatusBook<T> = StatusBook::default();
        book.start_write(&"n", 7, list(&[rv("a")]));
        book.write_acked(&"n", Revision::from(2));
        // Said to be generation 7, the list is taken on trust: not read, so not written.
        assert!(
            !needs_at(&mut book, "n", 7, &[rv("b")]),
            "the write's own generation"
        );
        assert!(
            needs_at(&mut book, "n", 8, &[rv("b")]),
            "a new generation is compared"
        );
        assert!(
            !needs_at(&mut book, "n", 9, &[rv("a")]),
            "equal: matched at 9"
        );
        assert!(!needs_at(&mut book, "n", 9, &[rv("c")]), "and trusted at 9");
        // A read replaces the stored list: no generation matches it until compared.
        book.read("n", &[rv("z")], &Revision::from(3));
        assert!(
            needs_at(&mut book, "n", 9, &[rv("a")]),
            "compared after a read"
        );
        // A write that may have landed leaves the list unknown, whatever the generation.
        book.start_write(&"n", 10, list(&[rv("a")]));
        book.write_failed(&"n", true);
        assert!(needs_at(&mut book, "n", 10, &[rv("a")]));
    }

    #[test]
    fn a_listing_the_core_owns_is_moved_into_the_book_not_copied() {
        use crate::core::tables::counted::{Cloned, clones};
        type C = Ids<&'static str, Cloned, &'static str>;
        let list = |ids: &[u32]| -> Vec<ReportedVolume<C>> {
            ids.iter()
                .map(|&i| ReportedVolume {
                    volume: Cloned(i),
                    device: (i % 2 == 0).then(|| Arc::from(format!("/dev/{i}"))),
                })
                .collect()
        };
        let mut book = StatusBook::<C>::default();
        let (owned, borrowed) = (list(&[3, 1, 2]), list(&[4, 5]));
        clones();
        book.read_owned("n1", owned, &Revision::from(1));
        assert_eq!(clones(), 0, "a restart's listing: moved, not copied");
        book.read("n2", &borrowed, &Revision::from(1));
        assert_eq!(clones(), 2, "a fresh read's list is the caller's: copied");
        let stored = book.stored(&"n1").unwrap().to_vec();
        assert_eq!(
            stored,
            list(&[1, 2, 3]),
            "sorted, each path with its volume"
        );
    }
}
