//! Restart recovery (correction C7): the core's first phase, in which it plans the store's
//! and the backend's listings and nothing else until both are handed back.
//!
//! Upstream starts its reconciler only after the actual state is populated from node statuses
//! and the backend; a controller that plans earlier detaches what it has not seen yet, or
//! attaches twice. Each listing is retried with backoff until it loads.

use std::time::Duration;

use rustc_hash::FxHashSet;

use crate::core::calls::backend::BackendAttachment;
use crate::core::calls::store::NodeStatus;
use crate::core::rules::gate::earliest;
use crate::domain::Domain;

/// Every node's status, as the store lists it.
pub(crate) type Statuses<D> = Vec<(<D as Domain>::Node, NodeStatus<D>)>;

/// One listing to load.
#[derive(Debug)]
pub(crate) enum Load<T> {
    /// A call should start at this time.
    Due(Duration),
    /// A call is running.
    Listing,
    /// Handed back.
    Loaded(T),
}

impl<T> Load<T> {
    fn due_at(&self) -> Option<Duration> {
        match self {
            Load::Due(at) => Some(*at),
            Load::Listing | Load::Loaded(_) => None,
        }
    }

    /// Whether a call should start at `now`.
    pub(crate) fn is_due(&self, now: Duration) -> bool {
        self.due_at().is_some_and(|at| at <= now)
    }
}

/// The two listings a new core needs before it may plan.
#[derive(Debug)]
pub(crate) struct Recovery<D: Domain> {
    pub(crate) statuses: Load<Statuses<D>>,
    pub(crate) attachments: Load<Vec<BackendAttachment<D>>>,
    /// The nodes whose object was deleted while the listings ran: the store's listing may
    /// hold the deleted object's status, which says nothing of a successor of the same name.
    pub(crate) removed: FxHashSet<D::Node>,
}

impl<D: Domain> Default for Recovery<D> {
    fn default() -> Self {
        Recovery {
            statuses: Load::Due(Duration::ZERO),
            attachments: Load::Due(Duration::ZERO),
            removed: FxHashSet::default(),
        }
    }
}

impl<D: Domain> Recovery<D> {
    /// When a listing should next start, if one waits to.
    pub(crate) fn wake_at(&self) -> Option<Duration> {
        earliest([self.statuses.due_at(), self.attachments.due_at()])
    }

    /// Both listings, once both are loaded.
    pub(crate) fn take_loaded(&mut self) -> Option<(Statuses<D>, Vec<BackendAttachment<D>>)> {
        if !matches!(
            (&self.statuses, &self.attachments),
            (Load::Loaded(_), Load::Loaded(_))
        ) {
            return None;
        }
        let statuses = std::mem::replace(&mut self.statuses, Load::Listing);
        let attachments = std::mem::replace(&mut self.attachments, Load::Listing);
        match (statuses, attachments) {
            (Load::Loaded(s), Load::Loaded(a)) => Some((s, a)),
            _ => None,
        }
    }
}

/// The volumes the store's listing holds, and which of them the backend's listing has named.
///
/// A listed volume no one registered is looked at in the first pass (registered ones are
/// marked at the end of recovery unless the backend's listing showed them settled,
/// [`SettledVolumes`]). Asking the desired state of each store-listed
/// volume was a million lookups at a million attachments (with `String` ids about a seventh
/// of a restart; with `Name` ids their misses hid behind the listing's other work); the
/// backend's listing looks every volume it names up in the desired state anyway, and names
/// nearly every one the store lists. So the store-listed volumes are the volume table's first
/// `entries` positions once the statuses are in, the backend's listing notes each it names (one
/// no one registered gets the listing's spec there, and is marked with the unsettled ones), and
/// only those it never names are asked of the desired state afterwards: usually none.
#[derive(Debug)]
pub(crate) struct StoreListed {
    entries: usize,
    named: Vec<u64>,
    left: usize,
}

impl StoreListed {
    /// The volume table's first `entries` positions, none named yet.
    pub(crate) fn new(entries: usize) -> Self {
        StoreListed {
            entries,
            named: vec![0; entries.div_ceil(64)],
            left: entries,
        }
    }

    /// Notes the volume at position `at` as named by the backend's listing: true the first
    /// time for a store-listed one, false for a position past them (a volume only the backend
    /// lists) or one named before.
    pub(crate) fn name(&mut self, at: usize) -> bool {
        if at >= self.entries {
            return false;
        }
        let (word, bit) = (at / 64, 1u64 << (at % 64));
        if self.named[word] & bit != 0 {
            return false;
        }
        self.named[word] |= bit;
        self.left -= 1;
        true
    }

    /// Whether the backend's listing named every store-listed volume (the usual case).
    pub(crate) fn all_named(&self) -> bool {
        self.left == 0
    }

    /// Whether the volume at position `at` is store-listed and was never named.
    pub(crate) fn unnamed(&self, at: usize) -> bool {
        at < self.entries && self.named[at / 64] & (1u64 << (at % 64)) == 0
    }
}

/// The registered volumes a restart found settled, by their position in the desired volume
/// table: attached exactly where they are wanted, every attachment Attached and reported. Only
/// the others are looked at in the first pass.
///
/// Why: the first pass after a restart looked at every registered volume (the inputs that
/// registered them marked them), a million at a million attachments: it sorted their marks and
/// looked each up in both volume tables again, with text ids from all over the heap, well over
/// half of a restart. Over a settled cluster it planned nothing for any of them: a volume
/// attached where it is wanted, Attached and reported, has nothing to detach, attach or report
/// again, and at a restart no call, backoff or wait is under way for it. The backend's listing
/// looks each volume it names up in both tables anyway, so each entry notes its volume there,
/// settled or not as the entry leaves it: a later entry of the same volume (attached on another
/// node too) unsettles it again. A volume the listing never names is not settled.
#[derive(Debug)]
pub(crate) struct SettledVolumes {
    /// Positions past this many (entries made during the listing) are never settled.
    positions: usize,
    settled: Vec<u64>,
}

impl SettledVolumes {
    /// The desired volume table's first `positions` entries, none settled yet.
    pub(crate) fn new(positions: usize) -> Self {
        SettledVolumes {
            positions,
            settled: vec![0; positions.div_ceil(64)],
        }
    }

    /// Notes the volume at position `at` settled or not; the last note holds.
    pub(crate) fn note(&mut self, at: usize, settled: bool) {
        if at >= self.positions {
            return;
        }
        let (word, bit) = (at / 64, 1u64 << (at % 64));
        if settled {
            self.settled[word] |= bit;
        } else {
            self.settled[word] &= !bit;
        }
    }

    /// Whether the volume at position `at` was last noted settled.
    pub(crate) fn is_settled(&self, at: usize) -> bool {
        at < self.positions && self.settled[at / 64] & (1u64 << (at % 64)) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::{SettledVolumes, StoreListed};

    #[test]
    fn a_volume_is_settled_as_its_last_note_says_and_only_within_the_table() {
        let mut settled = SettledVolumes::new(130);
        assert!((0..200).all(|at| !settled.is_settled(at)));
        settled.note(0, true);
        settled.note(64, true);
        settled.note(129, true);
        settled.note(130, true);
        assert!(settled.is_settled(0) && settled.is_settled(64) && settled.is_settled(129));
        assert!(!settled.is_settled(130), "past the table's first positions");
        settled.note(64, false);
        assert!(!settled.is_settled(64), "unsettled by a later note");
        assert!(settled.is_settled(0) && settled.is_settled(129));
        assert_eq!((0..200).filter(|&at| settled.is_settled(at)).count(), 2);
        assert!(!SettledVolumes::new(0).is_settled(0));
    }

    #[test]
    fn store_listed_volumes_are_named_once_and_the_rest_found() {
        let mut listed = StoreListed::new(130);
        assert!(listed.name(0));
        assert!(!listed.name(0), "named twice");
        assert!(listed.name(64));
        assert!(listed.name(129));
        assert!(!listed.name(130), "past the store's volumes");
        let unnamed: Vec<usize> = (0..200).filter(|&at| listed.unnamed(at)).collect();
        assert_eq!(unnamed.len(), 127);
        assert!(!unnamed.contains(&0) && !unnamed.contains(&64) && !unnamed.contains(&129));
        assert_eq!((unnamed[0], unnamed[62], unnamed[63]), (1, 63, 65));
        assert!(!listed.all_named());
        for at in 0..130 {
            listed.name(at);
        }
        assert!(listed.all_named());
        assert!((0..200).all(|at| !listed.unnamed(at)));
        assert!(StoreListed::new(0).all_named());
    }
}
