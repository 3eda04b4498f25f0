//! The memory floor of a workload move: what any core must touch to move a workload, and its
//! single-node volume, from one node to another, with every id already a dense index and no
//! work but the bookkeeping itself.
//!
//! A move must read the workload's record (to learn the node it leaves), change the volume's
//! record (where it is wanted and attached), take the volume out of one node's sorted list and
//! put it into the other's, and leave each node a new copy of its list (the status write: the
//! operation owns one, the store's known copy is another). At 1,000 attachments all of it sits
//! in the caches; at 1,000,000 each record and list is a random access to memory. The
//! difference between the two sizes is what no design can take away on this machine, so it
//! says how far a core's own 1M/1k ratio can fall.

use std::hint::black_box;

use crate::common::Moves;

/// Volumes per node, as in the core's clusters.
const PER_NODE: u32 = 30;

/// A workload's placement, about the size of the core's.
#[derive(Clone, Default)]
struct Placement {
    node: u32,
    volume: u32,
    _rest: [u32; 4],
}

/// A volume's record: where it is wanted and attached, and a state word, about the size of the
/// core's per-volume records together.
#[derive(Clone, Default)]
struct VolumeRecord {
    wanted: [u32; 2],
    attached: [u32; 2],
    state: u64,
    _rest: [u64; 3],
}

/// A node's record: its sorted list and the copy its store is known to hold.
#[derive(Default)]
struct NodeRecord {
    reported: Vec<u32>,
    stored: Box<[u32]>,
    revision: u64,
}

/// `size` workloads, each with its own volume, `PER_NODE` to a node, moved the way the core's
/// clusters move theirs ([`Moves`]).
pub struct MoveFloor {
    placements: Vec<Placement>,
    volumes: Vec<VolumeRecord>,
    nodes: Vec<NodeRecord>,
    moves: Moves,
}

impl MoveFloor {
    pub fn new(size: u32) -> MoveFloor {
        let nodes = size.div_ceil(PER_NODE);
        let on = |w: u32| w / PER_NODE;
        let mut floor = MoveFloor {
            placements: (0..size)
                .map(|w| Placement {
                    node: on(w),
                    volume: w,
                    ..Placement::default()
                })
                .collect(),
            volumes: (0..size)
                .map(|w| VolumeRecord {
                    wanted: [on(w), u32::MAX],
                    attached: [on(w), u32::MAX],
                    ..VolumeRecord::default()
                })
                .collect(),
            nodes: (0..nodes).map(|_| NodeRecord::default()).collect(),
            moves: Moves::new((0..size).map(on).collect(), nodes),
        };
        for w in 0..size {
            floor.nodes[on(w) as usize].reported.push(w);
        }
        for node in &mut floor.nodes {
            node.stored = node.reported.clone().into_boxed_slice();
        }
        floor
    }

    /// Moves the next workload; returns the length of the list it joined.
    pub fn move_one(&mut self) -> usize {
        let (w, to) = self.moves.next();
        let placement = &mut self.placements[w as usize];
        let (from, volume) = (placement.node, placement.volume);
        placement.node = to;
        let record = &mut self.volumes[volume as usize];
        record.wanted[0] = to;
        record.attached[0] = to;
        record.state += 1;
        let mut joined = 0;
        for (node, joins) in [(from, false), (to, true)] {
            let node = &mut self.nodes[node as usize];
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
        let listed: usize = self.nodes.iter().map(|n| n.reported.len()).sum();
        assert_eq!(listed, self.placements.len());
        for p in &self.placements {
            let node = &self.nodes[p.node as usize];
            assert!(node.reported.binary_search(&p.volume).is_ok());
            assert_eq!(self.volumes[p.volume as usize].attached[0], p.node);
        }
        for node in &self.nodes {
            assert_eq!(&*node.stored, &node.reported[..]);
        }
    }
}
