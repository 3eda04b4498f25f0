//! The memory floor of a workload move: what any core must touch to move a workload, and its
//! single-node volume, from one node to another, with no work but the bookkeeping itself.
//!
//! A move must read the workload's record (to learn the node it leaves), change the volume's
//! record (where it is wanted and attached), take the volume out of one node's sorted list and
//! put it into the other's, and leave each node a new copy of its list (the status write: the
//! operation owns one, the store's known copy is another). At 1,000 attachments all of it sits
//! in the caches; at 1,000,000 each record and list is a random access to memory. The
//! difference between the two sizes is what no design can take away on this machine, so it
//! says how far a core's own 1M/1k ratio can fall.
//!
//! A core is handed the embedder's ids, not dense indices, so it must also find each record
//! from its id. The floor finds them four ways ([`Find`]):
//! - [`Dense`]: ids that are already places, as a core handed its own indices could;
//! - [`ById`]: through an index of (id, place) pairs apart from the records, the core's own
//!   layout (its dense tables: an index, then the entries), a line of the index and then the
//!   record's;
//! - [`InSlots`]: the records kept in the hash table's own slots and found by reading their
//!   ids, so that a found id costs the record's line alone, the least a table keyed by an id
//!   can;
//! - [`Linked`]: [`ById`] with each record naming the others by place, as a core that interns
//!   ids at its edge would: a move looks up only the two ids its input names.

use std::hint::black_box;

use crate::common::Moves;

/// Volumes per node, as in the core's clusters.
const PER_NODE: u32 = 30;

/// The id of a place no record holds ([`InSlots`]).
const FREE: u32 = u32::MAX;

/// A workload's placement, about the size of the core's.
#[derive(Clone)]
struct Placement {
    id: u32,
    node: u32,
    volume: u32,
    _rest: [u32; 3],
}

impl Default for Placement {
    fn default() -> Self {
        Placement {
            id: FREE,
            node: 0,
            volume: 0,
            _rest: [0; 3],
        }
    }
}

/// A volume's record: where it is wanted and attached, and a state word, about the size of the
/// core's per-volume records together.
#[derive(Clone)]
struct VolumeRecord {
    id: u32,
    wanted: [u32; 2],
    attached: [u32; 2],
    state: u64,
    _rest: [u64; 2],
}

impl Default for VolumeRecord {
    fn default() -> Self {
        VolumeRecord {
            id: FREE,
            wanted: [FREE; 2],
            attached: [FREE; 2],
            state: 0,
            _rest: [0; 2],
        }
    }
}

/// A node's record: its sorted list and the copy its store is known to hold.
struct NodeRecord {
    id: u32,
    reported: Vec<u32>,
    stored: Box<[u32]>,
    revision: u64,
}

impl Default for NodeRecord {
    fn default() -> Self {
        NodeRecord {
            id: FREE,
            reported: Vec::new(),
            stored: Box::default(),
            revision: 0,
        }
    }
}

/// How a move finds a record from its id.
pub trait Find: Sized {
    /// The index of ids `0..count`, and the place of each id's record.
    fn build(count: u32) -> (Self, Vec<u32>);
    /// How many places the records take, free ones included.
    fn places(&self) -> usize;
    /// Where `id`'s record is; `id_at` reads the id of the record at a place.
    fn at(&self, id: u32, id_at: impl Fn(usize) -> u32) -> usize;
    /// Records keep the places of the records they name, not their ids: a move looks up only
    /// the ids its input names (the workload, the node it goes to) and reaches the volume
    /// and the node it leaves from the workload's record.
    const LINKED: bool = false;
}

/// Ids that are already places: nothing to look up.
pub struct Dense(usize);

impl Find for Dense {
    fn build(count: u32) -> (Self, Vec<u32>) {
        (Dense(count as usize), (0..count).collect())
    }

    fn places(&self) -> usize {
        self.0
    }

    #[inline(always)]
    fn at(&self, id: u32, _: impl Fn(usize) -> u32) -> usize {
        id as usize
    }
}

/// Slots for `count` ids, at most half full, and where probing for an id starts in them: a
/// multiplicative hash's high bits, so that the ids sit in the order of their hashes, not of
/// their numbers, as the embedder's ids would.
#[derive(Clone, Copy)]
struct Probe {
    mask: usize,
}

impl Probe {
    fn new(count: u32) -> Probe {
        Probe {
            mask: (count as usize * 2).next_power_of_two().max(16) - 1,
        }
    }

    #[inline(always)]
    fn home(self, id: u32) -> usize {
        ((u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize) & self.mask
    }

    /// Probes linearly from `id`'s home for the slot whose id `id_at` reads as `id`.
    #[inline(always)]
    fn find(self, id: u32, id_at: impl Fn(usize) -> u32) -> usize {
        let mut i = self.home(id);
        loop {
            let held = id_at(i);
            if held == id {
                return i;
            }
            assert_ne!(held, FREE, "id {id} has no record");
            i = (i + 1) & self.mask;
        }
    }

    /// The slot each of ids `0..count` takes, inserted in order into empty slots.
    fn slots_for(self, count: u32) -> Vec<u32> {
        let mut taken = vec![false; self.mask + 1];
        (0..count)
            .map(|id| {
                let mut i = self.home(id);
                while taken[i] {
                    i = (i + 1) & self.mask;
                }
                taken[i] = true;
                i as u32
            })
            .collect()
    }
}

/// Records in id order, found through a hash table of (id, place) pairs apart from them.
/// `LINKED`: [`Find::LINKED`] ([`Linked`]).
pub struct ById<const LINKED: bool = false> {
    probe: Probe,
    slots: Vec<(u32, u32)>,
    count: usize,
}

impl<const LINKED: bool> Find for ById<LINKED> {
    fn build(count: u32) -> (Self, Vec<u32>) {
        let probe = Probe::new(count);
        let mut slots = vec![(FREE, 0); probe.mask + 1];
        for (id, slot) in probe.slots_for(count).into_iter().enumerate() {
            slots[slot as usize] = (id as u32, id as u32);
        }
        let index = ById {
            probe,
            slots,
            count: count as usize,
        };
        (index, (0..count).collect())
    }

    fn places(&self) -> usize {
        self.count
    }

    #[inline(always)]
    fn at(&self, id: u32, _: impl Fn(usize) -> u32) -> usize {
        let slot = self.probe.find(id, |i| self.slots[i].0);
        self.slots[slot].1 as usize
    }

    const LINKED: bool = LINKED;
}

/// Records in the hash table's own slots: a probe reads the records' ids.
pub struct InSlots(Probe);

impl Find for InSlots {
    fn build(count: u32) -> (Self, Vec<u32>) {
        let probe = Probe::new(count);
        (InSlots(probe), probe.slots_for(count))
    }

    fn places(&self) -> usize {
        self.0.mask + 1
    }

    #[inline(always)]
    fn at(&self, id: u32, id_at: impl Fn(usize) -> u32) -> usize {
        self.0.find(id, id_at)
    }
}

/// [`ById`], with records that name others by place: what a core that interns ids at its
/// edge (an index from each id to its record's place, the records dense in the order their
/// ids were first seen) and links its records by place would look up.
pub type Linked = ById<true>;

/// `size` workloads, each with its own volume, `PER_NODE` to a node, moved the way the core's
/// clusters move theirs ([`Moves`]), each record found as `F` finds it.
pub struct MoveFloor<F: Find> {
    placements: Vec<Placement>,
    volumes: Vec<VolumeRecord>,
    nodes: Vec<NodeRecord>,
    workload_at: F,
    volume_at: F,
    node_at: F,
    moves: Moves,
}

impl<F: Find> MoveFloor<F> {
    pub fn new(size: u32) -> Self {
        let nodes = size.div_ceil(PER_NODE);
        let on = |w: u32| w / PER_NODE;
        let (workload_at, workload_places) = F::build(size);
        let (volume_at, volume_places) = F::build(size);
        let (node_at, node_places) = F::build(nodes);
        let mut placements = vec![Placement::default(); workload_at.places()];
        let mut volumes = vec![VolumeRecord::default(); volume_at.places()];
        let mut node_records: Vec<NodeRecord> = (0..node_at.places())
            .map(|_| NodeRecord::default())
            .collect();
        // How a record names a node or volume: by place when linked, by id otherwise.
        let node_named = |n: u32| {
            if F::LINKED {
                node_places[n as usize]
            } else {
                n
            }
        };
        let volume_named = |v: u32| {
            if F::LINKED {
                volume_places[v as usize]
            } else {
                v
            }
        };
        for w in 0..size {
            placements[workload_places[w as usize] as usize] = Placement {
                id: w,
                node: node_named(on(w)),
                volume: volume_named(w),
                ..Placement::default()
            };
            volumes[volume_places[w as usize] as usize] = VolumeRecord {
                id: w,
                wanted: [node_named(on(w)), FREE],
                attached: [node_named(on(w)), FREE],
                ..VolumeRecord::default()
            };
            let node = &mut node_records[node_places[on(w) as usize] as usize];
            node.id = on(w);
            node.reported.push(w);
        }
        for node in &mut node_records {
            node.stored = node.reported.clone().into_boxed_slice();
        }
        MoveFloor {
            placements,
            volumes,
            nodes: node_records,
            workload_at,
            volume_at,
            node_at,
            moves: Moves::new((0..size).map(on).collect(), nodes),
        }
    }

    /// The place of workload `id`'s record, as the input names it.
    fn workload(&self, id: u32) -> usize {
        self.workload_at.at(id, |i| self.placements[i].id)
    }

    /// The place of the volume a record names.
    fn volume(&self, named: u32) -> usize {
        if F::LINKED {
            return named as usize;
        }
        self.volume_at.at(named, |i| self.volumes[i].id)
    }

    /// The place of the node a record names.
    fn node(&self, named: u32) -> usize {
        if F::LINKED {
            return named as usize;
        }
        self.node_by_id(named)
    }

    /// The place of the node with id `id`, as an input names it.
    fn node_by_id(&self, id: u32) -> usize {
        self.node_at.at(id, |i| self.nodes[i].id)
    }

    /// Moves the next workload; returns the length of the list it joined.
    pub fn move_one(&mut self) -> usize {
        let (w, to) = self.moves.next();
        let at = self.workload(w);
        // The node the input names, as records name it.
        let to = if F::LINKED {
            self.node_by_id(to) as u32
        } else {
            to
        };
        let placement = &mut self.placements[at];
        let (from, volume_named) = (placement.node, placement.volume);
        placement.node = to;
        let at = self.volume(volume_named);
        let record = &mut self.volumes[at];
        record.wanted[0] = to;
        record.attached[0] = to;
        record.state += 1;
        // The nodes list volumes by id, as a status write carries them.
        let volume = record.id;
        let mut joined = 0;
        for (node, joins) in [(from, false), (to, true)] {
            let at = self.node(node);
            let node = &mut self.nodes[at];
            match (node.reported.binary_search(&volume), joins) {
                (Ok(at), false) => {
                    node.reported.remove(at);
                }
                (Err(at), true) => node.reported.insert(at, volume),
                _ => panic!("volume {volume} listed wrongly on a node"),
            }
            black_box(node.reported.clone().into_boxed_slice());
            node.stored = node.reported.clone().into_boxed_slice();
            node.revision += 1;
            joined = node.reported.len();
        }
        joined
    }

    /// Panics unless every volume is listed, once, on the node its workload is placed on, and
    /// each node's stored copy is its list: the floor does the bookkeeping it claims to.
    pub fn check(&self) {
        let held = |ids: &mut dyn Iterator<Item = u32>| ids.filter(|id| *id != FREE).count();
        let workloads = held(&mut self.placements.iter().map(|p| p.id));
        assert_eq!(held(&mut self.volumes.iter().map(|v| v.id)), workloads);
        let listed: usize = self.nodes.iter().map(|n| n.reported.len()).sum();
        assert_eq!(listed, workloads);
        for w in 0..workloads as u32 {
            let p = &self.placements[self.workload(w)];
            assert_eq!(p.id, w);
            let node = &self.nodes[self.node(p.node)];
            let volume = &self.volumes[self.volume(p.volume)];
            assert!(node.reported.binary_search(&volume.id).is_ok());
            assert_eq!(volume.attached[0], p.node);
        }
        for node in &self.nodes {
            assert_eq!(&*node.stored, &node.reported[..]);
        }
    }
}
