//! The order in which the periodic verify walks the nodes, and how far this round has come.
//!
//! At a million attachments one verify of every node in one pass took 374 ms: a pause in
//! which nothing else is planned. The round is therefore spread over the sync period in
//! slices, and this ring remembers where the round is without a snapshot of every node (a
//! copy of 33,000 names, sorted, would itself cost milliseconds). Nodes keep their place while
//! the round walks, nodes that appear are appended (this round still reaches them), and a node
//! that goes is removed in O(1) without skipping any node the round has not reached yet.

/// Every node the actual state holds attachments on, in walking order, with the round's
/// cursor.
#[derive(Debug)]
pub(crate) struct VerifyRing<N> {
    /// Positions `..cursor` were visited this round, `cursor..` were not.
    order: Vec<N>,
    cursor: usize,
}

impl<N> Default for VerifyRing<N> {
    fn default() -> Self {
        VerifyRing {
            order: Vec::new(),
            cursor: 0,
        }
    }
}

impl<N: Clone> VerifyRing<N> {
    /// Appends `node` (not in the ring) and returns its position.
    pub(crate) fn push(&mut self, node: N) -> u32 {
        self.order.push(node);
        // A node count beyond u32 is far beyond any cluster; positions saturate rather than
        // wrap, and `remove` checks what it is given.
        u32::try_from(self.order.len() - 1).unwrap_or(u32::MAX)
    }

    /// Removes the node at `pos`. `moved` is told the new position of each node that had to
    /// move (at most two). A node the round has not reached yet stays unreached.
    pub(crate) fn remove(&mut self, pos: u32, mut moved: impl FnMut(&N, u32)) {
        let mut pos = pos as usize;
        if pos >= self.order.len() {
            return;
        }
        if pos < self.cursor {
            // Swap the gap to the end of the visited part, so that the unvisited node that
            // fills it below stays on the unvisited side.
            let last_visited = self.cursor - 1;
            self.order.swap(pos, last_visited);
            if pos != last_visited {
                moved(&self.order[pos], pos as u32);
            }
            self.cursor -= 1;
            pos = last_visited;
        }
        self.order.swap_remove(pos);
        if pos < self.order.len() {
            moved(&self.order[pos], pos as u32);
        }
        if self.order.capacity() > 64 && self.order.len() * 4 <= self.order.capacity() {
            self.order.shrink_to(self.order.len() * 2);
        }
    }

    /// Starts a new round from the first node.
    pub(crate) fn restart(&mut self) {
        self.cursor = 0;
    }

    /// The next node this round has not visited, now counted as visited; `None` once the round
    /// has reached every node.
    pub(crate) fn next(&mut self) -> Option<N> {
        let node = self.order.get(self.cursor)?.clone();
        self.cursor += 1;
        Some(node)
    }

    /// Whether the round has visited every node.
    pub(crate) fn is_done(&self) -> bool {
        self.cursor >= self.order.len()
    }

    /// Number of nodes in the ring.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    /// The node at `pos`.
    #[cfg(test)]
    pub(crate) fn at(&self, pos: usize) -> Option<&N> {
        self.order.get(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A ring with a position table beside it, as the actual state keeps one.
    struct Tracked {
        ring: VerifyRing<u32>,
        pos: HashMap<u32, u32>,
    }

    impl Tracked {
        fn new(nodes: impl IntoIterator<Item = u32>) -> Tracked {
            let mut t = Tracked {
                ring: VerifyRing::default(),
                pos: HashMap::new(),
            };
            for n in nodes {
                t.push(n);
            }
            t
        }

        fn push(&mut self, n: u32) {
            let p = self.ring.push(n);
            self.pos.insert(n, p);
        }

        fn remove(&mut self, n: u32) {
            let p = self.pos.remove(&n).unwrap();
            let pos = &mut self.pos;
            self.ring.remove(p, |m, at| {
                pos.insert(*m, at);
            });
            for (m, at) in &self.pos {
                assert_eq!(self.ring.order[*at as usize], *m, "positions stay true");
            }
        }
    }

    #[test]
    fn a_round_visits_every_node_once_whatever_is_removed_or_added_meanwhile() {
        let mut t = Tracked::new(0..10);
        let mut seen = vec![t.ring.next().unwrap(), t.ring.next().unwrap()];
        seen.push(t.ring.next().unwrap());
        // Remove a visited node, an unvisited one and the last one; add one.
        t.remove(1);
        t.remove(7);
        t.remove(9);
        t.push(42);
        while let Some(n) = t.ring.next() {
            seen.push(n);
        }
        assert!(t.ring.is_done());
        seen.sort();
        assert_eq!(
            seen,
            vec![0, 1, 2, 3, 4, 5, 6, 8, 42],
            "none skipped, none twice"
        );
        t.ring.restart();
        let mut round: Vec<u32> = std::iter::from_fn(|| t.ring.next()).collect();
        round.sort();
        assert_eq!(round, vec![0, 2, 3, 4, 5, 6, 8, 42]);
        assert_eq!(t.ring.len(), 8);
    }

    #[test]
    fn removing_every_node_mid_round_in_any_order_keeps_the_ring_consistent() {
        for first in 0..6 {
            let mut t = Tracked::new(0..6);
            for _ in 0..3 {
                t.ring.next();
            }
            let order: Vec<u32> = (0..6).map(|i| (first + i * 5) % 6).collect();
            for n in order {
                t.remove(n);
            }
            assert_eq!(t.ring.len(), 0);
            assert!(t.ring.is_done());
            assert_eq!(t.ring.next(), None);
        }
    }
}
