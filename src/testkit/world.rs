//! The world around a core under test, faked: a node-status store with real compare-and-set
//! revisions, the answers of a failed call, operations held back to be answered later or out
//! of order, and one line of text for an operation, for a test's log.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::time::Duration;

use crate::core::{NodeFacts, Operation, Outcome};
use crate::domain::Domain;
use crate::traits::{
    BackendError, NodeStatus, ReportedVolume, ReportedVolumes, Revision, StoreError,
};

/// `volumes` as a status lists them, without devices.
pub fn listed<D: Domain>(volumes: impl IntoIterator<Item = D::Volume>) -> Vec<ReportedVolume<D>> {
    volumes
        .into_iter()
        .map(|volume| ReportedVolume {
            volume,
            device: None,
        })
        .collect()
}

/// The status a store answers for a node that lists `attached` at `revision`, with its agent's
/// `facts` (in use, fenced, healthy; each one known).
pub fn node_status<D: Domain>(
    attached: Vec<ReportedVolume<D>>,
    facts: &NodeFacts<D::Volume>,
    revision: u64,
) -> NodeStatus<D> {
    NodeStatus {
        attached,
        in_use: facts.in_use.clone(),
        fenced: Some(facts.fenced),
        healthy: Some(facts.healthy),
        revision: Revision::from(revision),
    }
}

/// The outcome of the backend call `op` failing with `error`; `None` when `op` is a store call.
pub fn backend_failure<D: Domain>(
    op: &Operation<D>,
    error: BackendError<D::Node>,
) -> Option<Outcome<D>> {
    Some(match op {
        Operation::Attach { .. } => Outcome::Attach(Err(error)),
        Operation::Detach { .. } => Outcome::Detach(Err(error)),
        Operation::Verify { .. } => Outcome::Verify(Err(error)),
        Operation::ListAttachments { .. } => Outcome::List(Err(error)),
        Operation::CheckMachine { .. } => Outcome::CheckMachine(Err(error)),
        Operation::WriteStatus { .. }
        | Operation::ReadStatus { .. }
        | Operation::ListStatuses { .. } => return None,
    })
}

/// The outcome of the store call `op` failing with `error`; `None` when `op` is a backend call.
pub fn store_failure<D: Domain>(op: &Operation<D>, error: StoreError) -> Option<Outcome<D>> {
    Some(match op {
        Operation::WriteStatus { .. } => Outcome::WriteStatus(Err(error)),
        Operation::ReadStatus { .. } => Outcome::ReadStatus(Err(error)),
        Operation::ListStatuses { .. } => Outcome::ListStatuses(Err(error)),
        _ => return None,
    })
}

/// One line for `op`, for a test's log: `attach v1 n1`, `detach v1 n1` (`forced:<reason>` when
/// forced), `verify n1 [v1,v2]`, `write n1 [v1]`, `read n1`, `list`, `list-statuses`,
/// `check-machine n1`.
pub fn describe<D: Domain>(op: &Operation<D>) -> String
where
    D::Node: Display,
    D::Volume: Display,
{
    let join = |volumes: &mut dyn Iterator<Item = &D::Volume>| {
        volumes
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    match op {
        Operation::Attach { volume, node, .. } => format!("attach {volume} {node}"),
        Operation::Detach {
            volume,
            node,
            force: None,
            ..
        } => format!("detach {volume} {node}"),
        Operation::Detach {
            volume,
            node,
            force: Some(reason),
            ..
        } => format!("detach {volume} {node} forced:{}", reason.as_str()),
        Operation::Verify { node, volumes, .. } => {
            format!(
                "verify {node} [{}]",
                join(&mut volumes.iter().map(|(v, _)| v))
            )
        }
        Operation::WriteStatus { node, attached, .. } => {
            format!("write {node} [{}]", join(&mut attached.volumes().iter()))
        }
        Operation::ReadStatus { node, .. } => format!("read {node}"),
        Operation::ListAttachments { .. } => "list".to_string(),
        Operation::ListStatuses { .. } => "list-statuses".to_string(),
        Operation::CheckMachine { node, .. } => format!("check-machine {node}"),
    }
}

/// One node in a [`FakeStore`]: its list, its agent's facts and its revision.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredNode<D: Domain> {
    /// The volumes its status lists.
    pub attached: Vec<ReportedVolume<D>>,
    /// What its agent last reported (they change without a new revision, as a node's
    /// conditions do beside the list the core writes).
    pub facts: NodeFacts<D::Volume>,
    /// The revision of its status: each write makes the next one.
    pub revision: u64,
}

impl<D: Domain> StoredNode<D> {
    /// What a read of the node finds.
    pub fn status(&self) -> NodeStatus<D> {
        node_status(self.attached.clone(), &self.facts, self.revision)
    }
}

/// A node-status store with real compare-and-set revisions, in node order.
#[derive(Clone, Debug, PartialEq)]
pub struct FakeStore<D: Domain> {
    /// Every node the store holds.
    pub nodes: BTreeMap<D::Node, StoredNode<D>>,
    /// Whether a write of a node the store lacks creates it (expecting revision 0), as an
    /// annotation or a key does; otherwise it fails `NotFound`, as a Node object's status does.
    pub creates: bool,
}

impl<D: Domain> FakeStore<D> {
    /// An empty store; a write creates a node only if `creates`.
    pub fn new(creates: bool) -> Self {
        FakeStore {
            nodes: BTreeMap::new(),
            creates,
        }
    }

    /// What a read of `node` finds: `NotFound` when the store lacks it.
    pub fn read(&self, node: &D::Node) -> Result<NodeStatus<D>, StoreError> {
        self.nodes
            .get(node)
            .map(StoredNode::status)
            .ok_or_else(StoreError::not_found)
    }

    /// Every node's status, in node order.
    pub fn list(&self) -> Vec<(D::Node, NodeStatus<D>)> {
        self.nodes
            .iter()
            .map(|(node, stored)| (node.clone(), stored.status()))
            .collect()
    }

    /// The revision of `node`'s status (0 when the store lacks it).
    pub fn revision(&self, node: &D::Node) -> u64 {
        self.nodes.get(node).map_or(0, |n| n.revision)
    }

    /// A compare-and-set write of `attached` to `node`: the next revision when `expected` is
    /// the node's revision, a conflict naming the current one otherwise.
    pub fn write(
        &mut self,
        node: &D::Node,
        attached: &ReportedVolumes<D>,
        expected: &Revision,
    ) -> Result<Revision, StoreError> {
        if !self.creates && !self.nodes.contains_key(node) {
            return Err(StoreError::not_found());
        }
        let current = Revision::from(self.revision(node));
        if *expected != current {
            return Err(StoreError::conflict(current));
        }
        let stored = self
            .nodes
            .entry(node.clone())
            .or_insert_with(|| StoredNode {
                attached: Vec::new(),
                facts: NodeFacts::default(),
                revision: 0,
            });
        stored.attached = attached.to_vec();
        stored.revision += 1;
        Ok(Revision::from(stored.revision))
    }
}

/// Operations under way, held back to be answered later or out of order, each with a key the
/// test orders them by: the time it was planned, the pass its answer is due in.
#[derive(Clone, Debug)]
pub struct Held<D: Domain, K = Duration> {
    ops: Vec<(K, Operation<D>)>,
}

impl<D: Domain, K> Default for Held<D, K> {
    fn default() -> Self {
        Held { ops: Vec::new() }
    }
}

impl<D: Domain, K: Clone> Held<D, K> {
    /// Holds `op` under `key`.
    pub fn hold(&mut self, key: K, op: Operation<D>) {
        self.ops.push((key, op));
    }

    /// How many are held.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// What is held, in the order it was.
    pub fn iter(&self) -> impl Iterator<Item = &(K, Operation<D>)> {
        self.ops.iter()
    }

    /// The `i`-th held operation, no longer held.
    ///
    /// # Panics
    ///
    /// If fewer than `i + 1` are held.
    pub fn take(&mut self, i: usize) -> Operation<D> {
        self.ops.remove(i).1
    }

    /// Every held operation whose key `due` accepts, in the order they were held; the others
    /// stay held.
    pub fn take_due(&mut self, mut due: impl FnMut(&K) -> bool) -> Vec<Operation<D>> {
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.ops)
            .into_iter()
            .partition(|(k, _)| due(k));
        self.ops = later;
        now.into_iter().map(|(_, op)| op).collect()
    }

    /// Every held operation, in the order they were held.
    pub fn take_all(&mut self) -> Vec<Operation<D>> {
        self.take_due(|_| true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::OpId;
    use crate::domain::Ids;

    type D = Ids<&'static str, &'static str, &'static str, ()>;

    fn list(volumes: &[&'static str]) -> ReportedVolumes<D> {
        listed::<D>(volumes.iter().copied()).into()
    }

    #[test]
    fn a_store_write_is_a_compare_and_set() {
        let mut store = FakeStore::<D>::new(false);
        assert_eq!(
            store.write(&"n1", &list(&["v1"]), &Revision::from(0)),
            Err(StoreError::not_found()),
            "a store that does not create"
        );
        assert!(store.nodes.is_empty());
        assert_eq!(store.read(&"n1"), Err(StoreError::not_found()));

        let mut store = FakeStore::<D>::new(true);
        assert_eq!(
            store.write(&"n1", &list(&["v1"]), &Revision::from(3)),
            Err(StoreError::conflict(Revision::from(0)))
        );
        assert!(store.nodes.is_empty(), "a refused write creates nothing");
        assert_eq!(
            store.write(&"n1", &list(&["v1"]), &Revision::from(0)),
            Ok(Revision::from(1))
        );
        assert_eq!(
            store.write(&"n1", &list(&[]), &Revision::from(0)),
            Err(StoreError::conflict(Revision::from(1))),
            "a stale revision"
        );
        store.nodes.get_mut("n1").unwrap().facts.fenced = true;
        let read = store.read(&"n1").unwrap();
        assert_eq!(read.attached, listed::<D>(["v1"]));
        assert_eq!(
            (read.fenced, read.revision.clone()),
            (Some(true), Revision::from(1))
        );
        assert_eq!(store.list(), vec![("n1", read)]);
    }

    #[test]
    fn held_operations_come_back_when_due_in_the_order_held() {
        let op = |id| Operation::<D>::CheckMachine {
            id: OpId(id),
            node: "n1",
        };
        let mut held = Held::<D, usize>::default();
        for (due, id) in [(2, 1), (1, 2), (3, 3), (1, 4)] {
            held.hold(due, op(id));
        }
        let ids = |ops: Vec<Operation<D>>| ops.iter().map(Operation::id).collect::<Vec<_>>();
        assert_eq!(ids(held.take_due(|due| *due <= 1)), [OpId(2), OpId(4)]);
        assert_eq!(held.take(1).id(), OpId(3));
        assert_eq!(held.len(), 1);
        assert_eq!(ids(held.take_all()), [OpId(1)]);
        assert!(held.is_empty());
    }

    #[test]
    fn a_failure_answers_only_its_own_kind_of_call() {
        let statuses = Operation::<D>::ListStatuses { id: OpId(1) };
        let check = Operation::<D>::CheckMachine {
            id: OpId(2),
            node: "n1",
        };
        assert_eq!(
            backend_failure(&statuses, BackendError::transient("x")),
            None
        );
        assert_eq!(store_failure(&check, StoreError::transient("x")), None);
        assert_eq!(
            store_failure(&statuses, StoreError::not_found()),
            Some(Outcome::ListStatuses(Err(StoreError::not_found())))
        );
        assert!(matches!(
            backend_failure(&check, BackendError::transient("x")),
            Some(Outcome::CheckMachine(Err(_)))
        ));
        assert_eq!(describe(&statuses), "list-statuses");
        assert_eq!(describe(&check), "check-machine n1");
    }
}
