//! [`ReportedVolumes`]: a node's whole reported list, built once per status write and shared
//! by the write and the core's record of what the store holds.

use std::fmt;
use std::sync::Arc;

use crate::core::tables::device_paths::PackedPaths;
use crate::core::tables::id_search;
use crate::core::tables::refill::Refill;
use crate::core::tables::spares::Spares;
use crate::domain::Domain;

/// One volume a node is told it has, with the device path the node should find it at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportedVolume<D: Domain> {
    /// The attached volume.
    pub volume: D::Volume,
    /// Where it shows up on the node, as the backend reported on attach.
    ///
    /// Shared, not owned: every status write repeats the node's whole list, and copying each
    /// path again per write was most of the driver's allocation.
    pub device: Option<Arc<str>>,
}

/// The volumes a node is told it has, sorted by volume, with their device paths: the list a
/// status write makes the store hold ([`Operation::WriteStatus`](crate::core::Operation)).
///
/// Immutable and shared: a clone is one reference count. Every status write repeats the
/// node's whole list, and the core keeps what it wrote to compare the next report against.
/// As a plain `Vec`, each write copied every id twice (once for the call, once for that
/// record) and dropped both copies again, two reference counts per `Name` and two
/// allocations per `String` for every volume on the node.
/// Now the call and the record hold the same list.
///
/// Packed: the volumes sit in one array, and the device paths in another only when one of
/// them has a path (CSI volumes have none), so that a record per node costs little more than
/// its ids.
///
/// ```
/// use std::sync::Arc;
/// use attach_detach::Ids;
/// use attach_detach::traits::{ReportedVolume, ReportedVolumes};
///
/// type K = Ids<String, String, String>;
/// let list: ReportedVolumes<K> = vec![
///     ReportedVolume { volume: "pv-b".to_string(), device: None },
///     ReportedVolume { volume: "pv-a".to_string(), device: Some(Arc::from("/dev/xvdf")) },
/// ]
/// .into();
/// // Sorted by volume, whatever order it was built in.
/// let volumes: Vec<&str> = list.iter().map(|(v, _)| v.as_str()).collect();
/// assert_eq!(volumes, ["pv-a", "pv-b"]);
/// assert_eq!(list.iter().next().unwrap().1, Some("/dev/xvdf"));
/// assert!(list.contains(&"pv-b".to_string()));
/// assert_eq!(list.to_vec()[1].volume, "pv-b");
/// ```
pub struct ReportedVolumes<D: Domain>(Arc<Packed<D>>);

/// The list itself: volumes in order, and one path per volume when any has a path. Every node
/// keeps one, so it costs little more than the volume ids (a `ReportedVolume` per entry cost
/// 32 bytes with `u32` ids; a packed entry costs 4, or 8 and the path's text with paths).
///
/// The paths are a copy of the node's text, in one string: building a list reads the node's
/// paths in one contiguous run, and dropping it frees them in one call. (They were once
/// `Arc<str>`s shared with the actual state: a reference count on a cold line per path, each
/// time a list was built and again when it was dropped, 18 to 30 % of the controller's loop.
/// Before those, the paths were copied into one
/// string from thirty scattered allocations and every compare read their text: the node's one
/// buffer, and a compare that looks at the volumes first, avoid both.)
struct Packed<D: Domain> {
    /// A `Vec`, not a boxed slice: a list the core alone still holds once the store holds a
    /// newer one is written over by a later write ([`ListSpares`]), and a list built with a
    /// volume withheld keeps its one slot spare instead of being reallocated.
    volumes: Vec<D::Volume>,
    /// `None` when no volume has a device path; otherwise one entry per volume.
    paths: Option<PackedPaths>,
}

impl<D: Domain> Packed<D> {
    /// Makes the list hold what `fill` writes, about `len` volumes, and the paths it returns:
    /// edited from what it holds when `editing` ([`Refill::edit`]), written over otherwise
    /// ([`Refill::run`]).
    fn fill_again(
        &mut self,
        len: usize,
        editing: bool,
        fill: impl FnOnce(&mut Refill<'_, D::Volume>) -> Option<PackedPaths>,
    ) {
        self.paths = None;
        self.volumes.reserve(len.saturating_sub(self.volumes.len()));
        let paths = if editing {
            Refill::edit(&mut self.volumes, fill)
        } else {
            Refill::run(&mut self.volumes, fill)
        };
        debug_assert!(self.volumes.is_sorted(), "a reported list is sorted");
        debug_assert!(paths.as_ref().is_none_or(|p| p.len() == self.volumes.len()));
        self.paths = paths.filter(PackedPaths::any);
    }
}

/// Lists nobody but the core held any more, for the next status writes to be written over
/// ([`Refill`]: their ids stay until then, their paths do not): each write built its list in
/// two fresh allocations (the shared record and its array) and the acknowledgement freed the
/// two of the list it replaced, four calls to the allocator per write.
pub(crate) struct ListSpares<D: Domain>(Spares<Arc<Packed<D>>>);

impl<D: Domain> Default for ListSpares<D> {
    fn default() -> Self {
        ListSpares(Spares::default())
    }
}

impl<D: Domain> fmt::Debug for ListSpares<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListSpares").finish_non_exhaustive()
    }
}

/// A spare list with room for more than this many volumes is dropped: a node's list is rarely
/// longer (Kubernetes' own limits are 16 to 128 volumes a node), and a spare is memory nobody
/// uses.
const MAX_SPARE_VOLUMES: usize = 256;

impl<D: Domain> ReportedVolumes<D> {
    /// Packs `volumes` and `paths` (one per volume, or `None` for no paths at all), which the
    /// caller has sorted by volume.
    pub(crate) fn from_sorted(volumes: Vec<D::Volume>, paths: Option<PackedPaths>) -> Self {
        debug_assert!(volumes.is_sorted(), "a reported list is sorted by volume");
        debug_assert!(paths.as_ref().is_none_or(|p| p.len() == volumes.len()));
        // A list of paths that holds none is kept as no list.
        let paths = paths.filter(PackedPaths::any);
        ReportedVolumes(Arc::new(Packed { volumes, paths }))
    }

    /// A list of about `len` volumes that `fill` builds, sorted by volume, into a spare from
    /// `spares` unless every spare has room for far more (a list keeps the room it was built
    /// with; one with too little grows once); `fill` writes the volumes and returns their
    /// paths as [`from_sorted`](Self::from_sorted) takes them.
    pub(crate) fn build_sorted(
        spares: &mut ListSpares<D>,
        len: usize,
        fill: impl FnOnce(&mut Refill<'_, D::Volume>) -> Option<PackedPaths>,
    ) -> Self {
        // Of the spares without far too much room, one with room enough first: a list that
        // grows reallocates (a node gaining a volume took a spare as long as its old list and
        // grew it, 0.11 reallocations a `u32` move at 1,000). Two plain searches of the few
        // spares: choosing the least room enough cost a third as much as the rest of the build.
        let fits = |p: &Arc<Packed<D>>| p.volumes.capacity() <= 2 * len + 4;
        let roomy = |p: &Arc<Packed<D>>| p.volumes.capacity() >= len && fits(p);
        if let Some(mut spare) = (spares.0.take_where(roomy)).or_else(|| spares.0.take_where(fits))
        {
            // Only a list nobody else held was kept, and nobody could take a share since.
            if let Some(packed) = Arc::get_mut(&mut spare) {
                debug_assert!(packed.paths.is_none(), "a spare keeps no paths");
                packed.fill_again(len, false, fill);
                return ReportedVolumes(spare);
            }
        }
        // With a little room to spare: the node's next lists are built into this one
        // (edited, or taken as a spare), and a node gaining a volume grew a list built to the
        // length.
        let mut volumes = Vec::with_capacity(len + len / 8 + 1);
        let paths = Refill::run(&mut volumes, fill);
        Self::from_sorted(volumes, paths)
    }

    /// [`build_sorted`](Self::build_sorted), edited from `own`, an older list of the same
    /// node, when nobody else holds it ([`Refill::edit`]): only what changed since is copied
    /// or dropped. Built into a spare from `spares` otherwise.
    pub(crate) fn build_over(
        mut own: Self,
        spares: &mut ListSpares<D>,
        len: usize,
        fill: impl FnOnce(&mut Refill<'_, D::Volume>) -> Option<PackedPaths>,
    ) -> Self {
        let Some(packed) = Arc::get_mut(&mut own.0) else {
            return Self::build_sorted(spares, len, fill);
        };
        packed.fill_again(len, true, fill);
        own
    }

    /// Gives the list to `spares` if nobody else holds it (the store and the write's call
    /// dropped their shares); otherwise just drops this share. Its ids stay, to be written
    /// over by the next list built into it ([`Refill`]); its paths go.
    pub(crate) fn give_back(mut self, spares: &mut ListSpares<D>) {
        if let Some(packed) = Arc::get_mut(&mut self.0) {
            packed.paths = None;
            if packed.volumes.capacity() <= MAX_SPARE_VOLUMES {
                spares.0.give(self.0);
            }
        }
    }

    /// Packs a copy of `list` (each id copied once), sorted by volume if it is not already.
    pub(crate) fn copy_of(list: &[ReportedVolume<D>]) -> Self {
        Self::from(list.to_vec())
    }

    /// The number of volumes.
    pub fn len(&self) -> usize {
        self.0.volumes.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.0.volumes.is_empty()
    }

    /// The volumes, sorted.
    pub fn volumes(&self) -> &[D::Volume] {
        &self.0.volumes
    }

    /// Each volume with its device path, in volume order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&D::Volume, Option<&str>)> + '_ {
        self.0.volumes.iter().zip(self.devices())
    }

    /// Whether `volume` is on the list.
    pub fn contains(&self, volume: &D::Volume) -> bool {
        id_search::contains(&self.0.volumes, volume)
    }

    /// The list as owned entries (a copy of every id).
    pub fn to_vec(&self) -> Vec<ReportedVolume<D>> {
        self.iter()
            .map(|(volume, device)| ReportedVolume {
                volume: volume.clone(),
                device: device.map(Arc::from),
            })
            .collect()
    }

    /// Each volume's device path, in volume order.
    pub(crate) fn devices(&self) -> impl ExactSizeIterator<Item = Option<&str>> + '_ {
        (0..self.len()).map(|i| self.device_at(i))
    }

    fn device_at(&self, i: usize) -> Option<&str> {
        self.0.paths.as_ref()?.get(i)
    }

    /// Whether this is exactly `list` (volume order), device paths included.
    pub(crate) fn matches<'a>(
        &self,
        list: impl IntoIterator<Item = (&'a D::Volume, Option<&'a str>)>,
    ) -> bool {
        let mut i = 0;
        for (volume, device) in list {
            if self.0.volumes.get(i) != Some(volume) || self.device_at(i) != device {
                return false;
            }
            i += 1;
        }
        i == self.len()
    }
}

impl<D: Domain> Clone for ReportedVolumes<D> {
    /// Shares the list: one reference count, no copy of its ids.
    fn clone(&self) -> Self {
        ReportedVolumes(Arc::clone(&self.0))
    }
}

impl<D: Domain> Default for ReportedVolumes<D> {
    fn default() -> Self {
        Self::from_sorted(Vec::new(), None)
    }
}

impl<D: Domain> PartialEq for ReportedVolumes<D> {
    /// The same entries, device paths included; the same shared list without a look at them.
    fn eq(&self, other: &Self) -> bool {
        // One encoding per list (a path-less list keeps no paths at all), so equal lists hold
        // equal arrays and text.
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.volumes == other.0.volumes && self.0.paths == other.0.paths)
    }
}

impl<D: Domain> Eq for ReportedVolumes<D> {}

impl<D: Domain> fmt::Debug for ReportedVolumes<D> {
    /// As the list of [`ReportedVolume`]s it holds.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.to_vec()).finish()
    }
}

impl<D: Domain> From<Vec<ReportedVolume<D>>> for ReportedVolumes<D> {
    /// Packs `list`, sorting it by volume first if it is not sorted. Its ids are moved, not
    /// copied; its paths' text is copied into the list's one string.
    fn from(mut list: Vec<ReportedVolume<D>>) -> Self {
        if !list.is_sorted_by(|a, b| a.volume <= b.volume) {
            list.sort_by(|a, b| a.volume.cmp(&b.volume));
        }
        let text: usize = list
            .iter()
            .filter_map(|r| r.device.as_deref())
            .map(str::len)
            .sum();
        let mut paths = PackedPaths::with_capacity(list.len(), text);
        let volumes = list
            .into_iter()
            .map(|r| {
                if !paths.push(r.device.as_deref()) {
                    // Paths of over 2 GiB in all on one node: none is, and the offsets
                    // cannot hold them. Kept as no path rather than a wrong one.
                    paths.push(None);
                }
                r.volume
            })
            .collect();
        Self::from_sorted(volumes, Some(paths))
    }
}

impl<D: Domain, const N: usize> From<[ReportedVolume<D>; N]> for ReportedVolumes<D> {
    /// Packs `list`, sorted by volume.
    fn from(list: [ReportedVolume<D>; N]) -> Self {
        Vec::from(list).into()
    }
}

impl<D: Domain> FromIterator<ReportedVolume<D>> for ReportedVolumes<D> {
    /// Packs the entries, sorted by volume.
    fn from_iter<I: IntoIterator<Item = ReportedVolume<D>>>(entries: I) -> Self {
        entries.into_iter().collect::<Vec<_>>().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Ids;

    type T = Ids<&'static str, &'static str, &'static str>;

    fn entry(volume: &'static str, device: Option<&str>) -> ReportedVolume<T> {
        ReportedVolume {
            volume,
            device: device.map(Arc::from),
        }
    }

    #[test]
    fn a_list_is_sorted_and_keeps_each_volumes_own_path() {
        let list: ReportedVolumes<T> = vec![
            entry("c", None),
            entry("a", Some("/dev/a")),
            entry("b", None),
        ]
        .into();
        assert_eq!(list.volumes(), ["a", "b", "c"]);
        assert_eq!(
            list.to_vec(),
            [
                entry("a", Some("/dev/a")),
                entry("b", None),
                entry("c", None)
            ]
        );
        assert!(list.contains(&"b") && !list.contains(&"d"));
        assert_eq!(list.len(), 3);
    }

    #[test]
    fn lists_are_equal_by_their_entries_paths_included() {
        let a: ReportedVolumes<T> = vec![entry("a", Some("/dev/a")), entry("b", None)].into();
        let same: ReportedVolumes<T> = vec![entry("b", None), entry("a", Some("/dev/a"))].into();
        let other_path: ReportedVolumes<T> =
            vec![entry("a", Some("/dev/x")), entry("b", None)].into();
        let no_path: ReportedVolumes<T> = vec![entry("a", None), entry("b", None)].into();
        let shorter: ReportedVolumes<T> = vec![entry("a", Some("/dev/a"))].into();
        assert_eq!(a, same);
        assert_eq!(a, a.clone());
        assert_ne!(a, other_path);
        assert_ne!(a, no_path);
        assert_ne!(a, shorter);
        assert_ne!(shorter, a);
        assert!(a.matches(same.iter()) && !a.matches(shorter.iter()));
    }

    #[test]
    fn a_clone_shares_the_list_and_a_list_without_paths_keeps_none() {
        let a: ReportedVolumes<T> = vec![entry("a", None), entry("b", None)].into();
        let b = a.clone();
        assert!(Arc::ptr_eq(&a.0, &b.0), "a clone copies no id");
        assert!(a.0.paths.is_none(), "no path, no list of paths");
        let copied = ReportedVolumes::copy_of(&[entry("b", None), entry("a", None)]);
        assert_eq!(copied, a);
        assert_eq!(format!("{a:?}"), format!("{:?}", a.to_vec()));
        assert!(ReportedVolumes::<T>::default().is_empty());
    }

    #[test]
    fn a_nodes_own_list_is_edited_in_place_unless_another_holds_it() {
        use crate::domain::name::Name;
        type N = Ids<Name, Name, Name>;
        let names =
            |texts: &[&str]| -> Vec<Name> { texts.iter().map(|t| Name::from(*t)).collect() };
        let build_over = |own: ReportedVolumes<N>, spares: &mut ListSpares<N>, volumes: &[Name]| {
            ReportedVolumes::build_over(own, spares, volumes.len(), |list| {
                list.extend(volumes.iter());
                let mut paths = PackedPaths::with_capacity(volumes.len(), 8);
                for (i, _) in volumes.iter().enumerate() {
                    paths.push((i == 0).then_some("/dev/x"));
                }
                Some(paths)
            })
        };
        let mut spares = ListSpares::<N>::default();
        let first = ReportedVolumes::<N>::from_sorted(names(&["own-a", "own-b", "own-d"]), None);
        let at = Arc::as_ptr(&first.0);
        let wanted = names(&["own-b", "own-c", "own-d"]);
        let edited = build_over(first, &mut spares, &wanted);
        assert_eq!(Arc::as_ptr(&edited.0), at, "edited where it was");
        assert_eq!(edited.volumes(), &wanted[..]);
        assert_eq!(
            edited.iter().next().unwrap().1,
            Some("/dev/x"),
            "paths built afresh"
        );
        // Held by another (the user's copy from `status()`): left as it is, built elsewhere.
        let held = edited.clone();
        let again = build_over(edited, &mut spares, &names(&["own-c"]));
        assert_ne!(Arc::as_ptr(&again.0), at);
        assert_eq!(again.volumes(), &names(&["own-c"])[..]);
        assert_eq!(held.volumes(), &wanted[..], "the shared list untouched");
    }

    #[test]
    fn a_list_nobody_else_holds_is_filled_again_and_a_shared_one_is_left_alone() {
        let mut spares = ListSpares::<T>::default();
        let build = |spares: &mut ListSpares<T>, volumes: &[&'static str], path: bool| {
            ReportedVolumes::build_sorted(spares, volumes.len(), |list| {
                list.extend(volumes.iter());
                let mut paths = PackedPaths::with_capacity(volumes.len(), 8);
                for (i, _) in volumes.iter().enumerate() {
                    paths.push((path && i == 0).then_some("/dev/a"));
                }
                Some(paths)
            })
        };
        let first = build(&mut spares, &["a", "b"], true);
        assert_eq!(
            first,
            vec![entry("a", Some("/dev/a")), entry("b", None)].into()
        );
        let held = first.clone();
        first.give_back(&mut spares);
        assert!(
            spares.0.take().is_none(),
            "a list the store still holds is not kept"
        );
        assert_eq!(held.volumes(), ["a", "b"], "and is left as it was");
        let at = Arc::as_ptr(&held.0);
        held.give_back(&mut spares);
        let second = build(&mut spares, &["c"], false);
        assert_eq!(
            Arc::as_ptr(&second.0),
            at,
            "the last share's list is filled again"
        );
        assert_eq!(
            second,
            vec![entry("c", None)].into(),
            "written over, the rest and the paths dropped"
        );
        assert!(second.0.paths.is_none(), "no path, no list of paths");
    }

    #[test]
    fn a_spare_with_room_enough_is_taken_before_a_shorter_one_kept_after_it() {
        let build = |spares: &mut ListSpares<T>, volumes: &[&'static str]| {
            ReportedVolumes::build_sorted(spares, volumes.len(), |list| {
                list.extend(volumes.iter());
                None
            })
        };
        let mut spares = ListSpares::<T>::default();
        let roomy = build(&mut spares, &["a", "b", "c", "d"]);
        let short = build(&mut spares, &["a"]);
        let at = Arc::as_ptr(&roomy.0);
        roomy.give_back(&mut spares);
        short.give_back(&mut spares);
        // A node gaining a volume: four, where the last spare kept has room for fewer.
        let list = build(&mut spares, &["a", "b", "c", "e"]);
        assert_eq!(
            Arc::as_ptr(&list.0),
            at,
            "the spare with room, not the last kept"
        );
        assert_eq!(list.volumes(), ["a", "b", "c", "e"]);
        // With none that has room, one that fits is grown.
        let grown = build(&mut spares, &["a", "b", "c"]);
        assert_eq!(grown.volumes(), ["a", "b", "c"]);
        assert!(spares.0.take().is_none(), "both spares were used");
    }

    #[test]
    fn a_refill_writes_over_the_old_ids_keeping_their_buffers_and_drops_the_rest() {
        type S = Ids<String, String, String>;
        let names = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let build = |spares: &mut ListSpares<S>, volumes: &[String]| {
            ReportedVolumes::<S>::build_sorted(spares, volumes.len(), |list| {
                // In two runs, as a report with a withheld volume between them copies.
                let (a, b) = volumes.split_at(volumes.len() / 2);
                list.extend(a.iter());
                list.extend(b.iter());
                assert_eq!(list.written(), volumes);
                None
            })
        };
        let mut spares = ListSpares::<S>::default();
        let old = build(&mut spares, &names(&["pv-0001", "pv-0002", "pv-0003"]));
        let buffer = old.volumes()[0].as_ptr();
        old.give_back(&mut spares);
        let kept = spares.0.take().expect("kept");
        assert_eq!(kept.volumes.len(), 3, "a spare keeps its ids to write over");
        spares.0.give(kept);
        let shorter = build(&mut spares, &names(&["pv-0004", "pv-0005"]));
        assert_eq!(shorter.volumes(), names(&["pv-0004", "pv-0005"]));
        assert_eq!(
            shorter.volumes()[0].as_ptr(),
            buffer,
            "the id's buffer is reused"
        );
        shorter.give_back(&mut spares);
        let longer = build(&mut spares, &names(&["a", "b", "c", "d", "e"]));
        assert_eq!(longer.volumes(), names(&["a", "b", "c", "d", "e"]));
        let mut spares = ListSpares::<S>::default();
        let many: Vec<String> = (0..=MAX_SPARE_VOLUMES).map(|i| format!("{i:04}")).collect();
        build(&mut spares, &many).give_back(&mut spares);
        assert!(
            spares.0.take().is_none(),
            "a list with too much room is dropped"
        );
    }
}
