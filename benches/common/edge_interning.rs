//! The first step of the redesign (PERFORMANCE.md, the twenty-eighth step's plan), modelled
//! before it is built: a core that runs on dense `u32` indices inside, with the embedder's
//! [`Name`]s interned where they come in and looked up where they go out.
//!
//! The model is a `u32` core plus what such a core would add at its edge for `Name` ids: one
//! lookup per id an input names, a `Name` cloned for every id an operation or an event hands
//! out, and each status write's list handed to the store as names, edited from the node's
//! last one (the store holds names). What it leaves out, so that it is a lower bound on what
//! the step would cost a move:
//! - the interning of ids seen for the first time and the freeing of indices (not part of a
//!   move);
//! - the order by name: the store's lists are sorted by volume name, and a core on indices
//!   would find where a volume goes by comparing names (about five compares in a list of 30,
//!   each reading a name's block). The model's lists are in the indices' order, which for the
//!   bench's UUID-shaped volume names is not the names'.

use std::hint::black_box;

use attach_detach::core::{Event, Holder, Operation};
use attach_detach::{Ids, Name};
use rustc_hash::FxHashMap;

use crate::HandOut;

/// The core's ids inside: what the model interns `Name`s to.
type Indices = Ids<u32, u32, u32, ()>;
/// The embedder's ids outside.
type Names = Ids<Name, Name, Name, ()>;

/// One kind of id, both ways: a name's index, and an index's name.
pub struct Interner {
    index: FxHashMap<Name, u32>,
    names: Vec<Name>,
}

impl Interner {
    /// `names[i]` gets index `i`, as a core interning them in that order would give them.
    pub fn new(names: Vec<Name>) -> Interner {
        let index = (names.iter().cloned())
            .zip(0..)
            .collect::<FxHashMap<Name, u32>>();
        assert_eq!(index.len(), names.len(), "distinct names");
        Interner { index, names }
    }

    /// The index of a name an input hands the core.
    pub fn intern(&self, name: &Name) -> u32 {
        self.index[name]
    }

    /// The name of an index the core hands out: a clone, as an operation or an event owns it.
    pub fn name(&self, index: u32) -> Name {
        self.names[index as usize].clone()
    }

    /// The name of an index, borrowed.
    pub fn get(&self, index: u32) -> &Name {
        &self.names[index as usize]
    }
}

/// The edge of the modelled core: an interner per kind, and what it keeps to hand the store
/// its lists without allocating.
pub struct Edge {
    /// The core's node `i` is `nodes.get(i)`.
    pub nodes: Interner,
    /// The core's volume `i`, used by workload `i`.
    pub volumes: Interner,
    /// The core's workload `i`.
    pub workloads: Interner,
    /// Per node, the list its last status write handed the store, as indices and as names:
    /// the next write's list is edited from it, as the core edits its own lists.
    lists: Vec<Option<HandedList>>,
    /// Operations and events handed out, by kind: [attach, detach, write, read, event].
    pub handed: [u64; 5],
    /// Moves made through the edge.
    pub moves: u64,
}

impl Edge {
    /// An edge for the given names: `nodes[i]`, `volumes[i]` and `workloads[i]` are the names
    /// of the `u32` core's node, volume and workload `i`.
    pub fn new(nodes: Vec<Name>, volumes: Vec<Name>, workloads: Vec<Name>) -> Edge {
        Edge {
            lists: (0..nodes.len()).map(|_| None).collect(),
            nodes: Interner::new(nodes),
            volumes: Interner::new(volumes),
            workloads: Interner::new(workloads),
            handed: [0; 5],
            moves: 0,
        }
    }

    /// The list of names the last status write of `node` handed the store, if one did.
    pub fn handed_list(&self, node: u32) -> Option<&[Name]> {
        self.lists[node as usize].as_ref().map(|l| &l.names[..])
    }
}

/// What the edge hands out, as a driver would be handed it.
impl HandOut<Indices> for Edge {
    /// What a driver would be handed for `op`: the same operation with names. Dropped at once,
    /// as a driver drops it once its call is made. A status write's list is the node's kept
    /// list, edited to the core's.
    fn operation(&mut self, op: &Operation<Indices>) {
        match op {
            Operation::Attach {
                id, volume, node, ..
            } => {
                self.handed[0] += 1;
                black_box(Operation::<Names>::Attach {
                    id: *id,
                    volume: self.volumes.name(*volume),
                    node: self.nodes.name(*node),
                    payload: (),
                });
            }
            Operation::Detach {
                id,
                volume,
                node,
                force,
                ..
            } => {
                self.handed[1] += 1;
                black_box(Operation::<Names>::Detach {
                    id: *id,
                    volume: self.volumes.name(*volume),
                    node: self.nodes.name(*node),
                    payload: (),
                    force: *force,
                });
            }
            Operation::WriteStatus {
                id, node, attached, ..
            } => {
                self.handed[2] += 1;
                let list = self.lists[*node as usize].get_or_insert_with(HandedList::default);
                list.edit(attached.volumes(), &self.volumes);
                black_box((*id, self.nodes.name(*node), &list.names));
            }
            Operation::ReadStatus { id, node, .. } => {
                self.handed[3] += 1;
                black_box((*id, self.nodes.name(*node)));
            }
            other => panic!("a move plans no {:?}", other.kind()),
        }
    }

    /// What an event recorder would be handed for `event`: the same event with names.
    fn event(&mut self, event: &Event<Indices>) {
        self.handed[4] += 1;
        match event {
            Event::MultiAttach {
                volume,
                node,
                workloads,
                holders,
            } => {
                black_box(Event::<Names>::MultiAttach {
                    volume: self.volumes.name(*volume),
                    node: self.nodes.name(*node),
                    workloads: workloads.iter().map(|w| self.workloads.name(*w)).collect(),
                    holders: (holders.iter())
                        .map(|h| Holder {
                            node: self.nodes.name(h.node),
                            workloads: h
                                .workloads
                                .iter()
                                .map(|w| self.workloads.name(*w))
                                .collect(),
                        })
                        .collect(),
                });
            }
            Event::AttachSucceeded { volume, node } => {
                black_box(Event::<Names>::AttachSucceeded {
                    volume: self.volumes.name(*volume),
                    node: self.nodes.name(*node),
                });
            }
            Event::DetachSucceeded {
                volume,
                node,
                force,
            } => {
                black_box(Event::<Names>::DetachSucceeded {
                    volume: self.volumes.name(*volume),
                    node: self.nodes.name(*node),
                    force: *force,
                });
            }
            other => panic!("a move emits no {other:?}"),
        }
    }
}

/// A node's list as the store was last handed it: the core's indices, and their names.
#[derive(Default)]
struct HandedList {
    indices: Vec<u32>,
    names: Vec<Name>,
}

impl HandedList {
    /// Edits the list into `indices`, as the core edits a node's list: a write differs from
    /// the node's last by a volume or two. The difference is found on the indices, the
    /// node's own few lines: comparing names would read the names table once a volume, and in
    /// a cluster whose volumes came and went each read is anywhere in it. A volume in or out
    /// is then one insert or remove of a name (a shift of pointers, one count touched).
    /// Anything else is copied over, name by name.
    fn edit(&mut self, indices: &[u32], volumes: &Interner) {
        let (old, names) = (&mut self.indices, &mut self.names);
        let same = old.iter().zip(indices).take_while(|(a, b)| a == b).count();
        if old.len() + 1 == indices.len() && old[same..] == indices[same + 1..] {
            names.insert(same, volumes.name(indices[same]));
        } else if old.len() == indices.len() + 1 && old[same + 1..] == indices[same..] {
            names.remove(same);
        } else {
            names.truncate(indices.len());
            for (name, i) in names.iter_mut().zip(indices).skip(same) {
                name.clone_from(volumes.get(*i));
            }
            let have = names.len();
            names.extend(indices[have..].iter().map(|i| volumes.name(*i)));
        }
        old.clear();
        old.extend_from_slice(indices);
    }
}
