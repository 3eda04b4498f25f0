//! What both benchmark binaries share: which workload moves where next, and how a goal is
//! reported.

/// Placement of every workload (index) on a node, and a cursor walking them.
pub struct Moves {
    /// `placed[w]` is the node workload `w` runs on.
    pub placed: Vec<u32>,
    nodes: u32,
    cursor: u64,
}

impl Moves {
    /// `size` workloads spread over `nodes` nodes, `size / nodes` each, in order.
    pub fn new(placed: Vec<u32>, nodes: u32) -> Moves {
        Moves {
            placed,
            nodes,
            cursor: 0,
        }
    }

    /// The next workload to move and the node it moves to (never the one it is on). A stride
    /// coprime with the sizes used visits every workload once per round, all over the maps
    /// rather than in a row.
    pub fn next(&mut self) -> (u32, u32) {
        let (w, _, to) = self.next_from();
        (w, to)
    }

    /// As [`next`](Moves::next), with the node the workload leaves: `(workload, from, to)`.
    pub fn next_from(&mut self) -> (u32, u32, u32) {
        let size = self.placed.len() as u64;
        self.cursor = (self.cursor + 7919) % size;
        let w = self.cursor as u32;
        let from = self.placed[w as usize];
        let to = (from + 1 + (self.cursor as u32 % 7)) % self.nodes;
        let to = if to == from {
            (to + 1) % self.nodes
        } else {
            to
        };
        self.placed[w as usize] = to;
        (w, from, to)
    }
}

/// Prints a `GOAL MET` or `GOAL MISSED` line; a miss panics only when the environment variable
/// `enforce` is set (the figures depend on what else the machine runs).
pub fn goal(met: bool, what: String, enforce: &str) {
    if met {
        println!("GOAL MET: {what}");
        return;
    }
    let message = format!("GOAL MISSED: {what}");
    if std::env::var_os(enforce).is_some() {
        panic!("{message}");
    }
    println!("{message}");
}

/// The median of `xs` (the upper one of an even count).
pub fn median<X: Copy + PartialOrd>(mut xs: Vec<X>) -> X {
    xs.sort_by(|a, b| a.partial_cmp(b).expect("comparable"));
    xs[xs.len() / 2]
}
