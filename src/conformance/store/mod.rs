//! The checks of a [`NodeStatusStore`], each derived from a promise of its documentation.
//!
//! Run them all with [`check_store`](super::check_store), list them with [`store_checks`], or
//! call one by its function. Each check adds fresh nodes through the [`StoreHarness`], looks
//! only at them, and removes them when it ends.
//!
//! Here: the harness a store's author writes, and the list of checks. The checks live in groups
//! beside: reads, writes and revisions through one client; races and reads across two clients;
//! missing nodes, the listing and rewritten lists; the agents' facts. A check's steps and the way
//! its failures read are shared by all, in `cx`.

mod cx;
mod facts;
mod lists;
mod one_client;
mod two_clients;

use std::time::Duration;

use async_trait::async_trait;

use super::report::Check;
use super::{HarnessError, Supported};
use crate::domain::Domain;
use crate::traits::NodeStatusStore;
// Only the harness's docs name these.
#[cfg(doc)]
use crate::traits::{NodeStatus, StoreError};

pub use facts::{
    agent_change_between_read_and_write, agent_facts_read_back,
    facts_read_with_a_write_are_current, write_keeps_agent_facts,
};
pub use lists::{
    empty_list_write_clears, list_agrees_with_read, rewriting_same_list_returns_current_revision,
    write_to_missing_node_is_not_found,
};
pub use one_client::{
    concurrent_writers_one_wins, conflict_names_the_current_revision, new_node_lists_nothing,
    read_of_missing_node_is_not_found, reads_are_stable, stale_write_conflicts_and_changes_nothing,
    write_at_current_revision_succeeds, written_list_reads_back_exactly,
};
pub use two_clients::{
    clients_read_each_others_writes, two_clients_racing_one_wins,
    write_after_another_clients_write_conflicts,
    write_at_a_revision_older_than_the_last_read_conflicts,
};

/// What the store suite needs besides the store: nodes to write to, and the node agent's and
/// fencing agent's side of a node's status, which only the harness can play.
///
/// Write one per store implementation; see the [module docs](super) for a complete one.
#[async_trait]
pub trait StoreHarness<D: Domain>: Send + Sync {
    /// The store under test.
    fn store(&self) -> &dyn NodeStatusStore<D>;

    /// A second client of the store under test, over the same backing: what another replica
    /// of the controller, or a deposed leader still writing, would hold.
    ///
    /// It must be a client of its own, sharing with [`store`](Self::store) only what the
    /// backing keeps: its own connection, its own cache and its own memory of what it read
    /// and wrote (for etcd, a second `Client`; for Kubernetes, a second `kube::Client`). A
    /// store that keeps no state of its own in the client (the in-memory one) may hand out a
    /// second handle. Through one client a compare-and-set made on the client side cannot be
    /// told from one made by the backing; the suite races the two clients to tell them apart.
    fn second_store(&self) -> &dyn NodeStatusStore<D>;

    /// The id of node `n`. Each `n` is asked for once per process; build the id from `n` and
    /// a tag unique to this run, so that ids never repeat across runs on a shared store.
    fn node(&self, n: usize) -> D::Node;

    /// The id of volume `n`, on the same terms as [`node`](Self::node). The store suite never
    /// attaches anything: volumes are only names written into lists.
    fn volume(&self, n: usize) -> D::Volume;

    /// Registers `node` as a new node's agent would: the store then holds a status for it,
    /// with no attached volumes (the controller writes those) and whatever agent facts a new
    /// node has.
    async fn add_node(&self, node: &D::Node) -> Result<(), HarnessError>;

    /// Deletes `node`, as deleting the node from the cluster would: reads and writes of it
    /// then fail with [`StoreError::NotFound`]. Removing a node that is not there does
    /// nothing (the suite removes every node it added when a check ends).
    async fn remove_node(&self, node: &D::Node) -> Result<(), HarnessError>;

    /// Records that `node`'s agent reports `in_use` in use, as the agent itself would write it
    /// ([`NodeStatus::in_use`]), or answers [`Supported::No`] for a store that does not hold
    /// it.
    async fn set_in_use(
        &self,
        node: &D::Node,
        in_use: Vec<D::Volume>,
    ) -> Result<Supported, HarnessError>;

    /// Records whether `node` is fenced, as the fencing agent or the operator would
    /// ([`NodeStatus::fenced`]), or answers [`Supported::No`].
    async fn set_fenced(&self, node: &D::Node, fenced: bool) -> Result<Supported, HarnessError>;

    /// Records whether `node` answers, as its agent's lease or Ready condition would
    /// ([`NodeStatus::healthy`]), or answers [`Supported::No`].
    async fn set_healthy(&self, node: &D::Node, healthy: bool) -> Result<Supported, HarnessError>;

    /// How long any one call may take before it counts as a failure: a store call, or one of
    /// this harness's. Ten seconds unless overridden (a slow remote store may need more).
    fn call_timeout(&self) -> Duration {
        Duration::from_secs(10)
    }
}

/// Every store check, in the order [`check_store`](super::check_store) runs them.
pub fn store_checks<D, H>() -> Vec<Check<H>>
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    vec![
        check!(
            read_of_missing_node_is_not_found,
            "a read of a node never added, or removed, fails with NotFound"
        ),
        check!(
            new_node_lists_nothing,
            "a node's first read lists no attached volume"
        ),
        check!(
            reads_are_stable,
            "two reads with no write in between return the same status and revision"
        ),
        check!(
            write_at_current_revision_succeeds,
            "a write at the revision just read succeeds with a new revision, which a read then shows"
        ),
        check!(
            written_list_reads_back_exactly,
            "a read shows exactly the list written: volume order, device paths, a missing device"
        ),
        check!(
            stale_write_conflicts_and_changes_nothing,
            "a write at a revision no longer current fails with Conflict and changes nothing"
        ),
        check!(
            conflict_names_the_current_revision,
            "a Conflict that carries a revision carries the one a read returns"
        ),
        check!(
            concurrent_writers_one_wins,
            "of two concurrent writes at the same revision, exactly one lands"
        ),
        check!(
            clients_read_each_others_writes,
            "a write through one client is what a read through another then shows"
        ),
        check!(
            write_after_another_clients_write_conflicts,
            "a write at a revision another client has since replaced fails with Conflict and changes nothing"
        ),
        check!(
            two_clients_racing_one_wins,
            "of two clients writing one node at the same revision at once, exactly one lands"
        ),
        check!(
            write_at_a_revision_older_than_the_last_read_conflicts,
            "a write at a revision from before the writer's last read, replaced since, fails with Conflict"
        ),
        check!(
            write_to_missing_node_is_not_found,
            "a write to a node never added, or removed, fails with NotFound and creates nothing"
        ),
        check!(
            list_agrees_with_read,
            "list holds each node once, with the status and revision a read returns"
        ),
        check!(
            rewriting_same_list_returns_current_revision,
            "writing the list the store holds succeeds with the revision a read then returns"
        ),
        check!(
            empty_list_write_clears,
            "writing an empty list leaves no attached volume"
        ),
        check!(
            agent_facts_read_back,
            "in_use, fenced and healthy read as the agents set them, or None if not held"
        ),
        check!(
            write_keeps_agent_facts,
            "a controller write replaces the attached list only, never the agents' facts"
        ),
        check!(
            agent_change_between_read_and_write,
            "an agent's change after the controller's read is neither lost nor overwritten"
        ),
        check!(
            facts_read_with_a_write_are_current,
            "a write that answers facts answers the node's facts as of the write, never older, and its revision"
        ),
    ]
}
