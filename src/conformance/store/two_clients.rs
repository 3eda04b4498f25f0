//! Checks that race the harness's two clients: each reads the other's writes, a write after the
//! other's conflicts, one of two racing writers wins, and an old revision stays stale whatever
//! was read since.

use std::fmt::{self, Debug};

use super::StoreHarness;
use super::cx::{Cx, answer, error, list};
use crate::conformance::ConformanceFailure;
use crate::conformance::report::Outcome;
use crate::core::calls::reported_volumes::{ReportedVolume, ReportedVolumes};
use crate::domain::Domain;
use crate::traits::{NodeStatus, NodeStatusStore, Revision, StoreError};

/// Which of the harness's two clients a call goes through.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Client {
    /// [`StoreHarness::store`].
    First,
    /// [`StoreHarness::second_store`].
    Second,
}

use Client::{First, Second};

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            First => "the first client",
            Second => "the second client",
        })
    }
}

/// Calls through a named client, for the checks that race two; each failure names the client.
impl<'h, D: Domain, H: StoreHarness<D> + ?Sized> Cx<'h, D, H> {
    fn client(&self, client: Client) -> &'h dyn NodeStatusStore<D> {
        match client {
            First => self.harness.store(),
            Second => self.harness.second_store(),
        }
    }

    async fn read_on(
        &self,
        client: Client,
        node: &D::Node,
    ) -> Result<Result<NodeStatus<D>, StoreError>, ConformanceFailure> {
        let what = format!("{client}'s read");
        self.steps.call(&what, self.client(client).read(node)).await
    }

    /// Reads `node` through `client`, failing the check unless the read succeeds.
    async fn read_ok_on(
        &self,
        client: Client,
        node: &D::Node,
        when: &str,
    ) -> Result<NodeStatus<D>, ConformanceFailure> {
        self.read_on(client, node).await?.map_err(|e| {
            self.fail(
                format_args!("{client}'s read of node {node:?} {when} to succeed"),
                error(&e),
            )
        })
    }

    /// Reads `node` through both clients, failing the check unless both succeed and agree:
    /// the revision both then hold.
    async fn read_both(&self, node: &D::Node, when: &str) -> Result<Revision, ConformanceFailure> {
        let first = self.read_ok_on(First, node, when).await?;
        let second = self.read_ok_on(Second, node, when).await?;
        if first != second {
            return Err(self.fail(
                format_args!("the two clients' reads of node {node:?} {when} to agree"),
                format_args!("{first:?} through {First}, then {second:?} through {Second}"),
            ));
        }
        Ok(first.revision)
    }

    async fn write_on(
        &self,
        client: Client,
        node: &D::Node,
        attached: &[ReportedVolume<D>],
        expected: &Revision,
    ) -> Result<Result<Revision, StoreError>, ConformanceFailure> {
        let what = format!("{client}'s write");
        let attached = ReportedVolumes::from(attached.to_vec());
        let write = self.client(client).write(node, &attached, expected.clone());
        self.steps.call(&what, write).await
    }

    /// Writes `attached` at `expected` through `client`, failing the check unless the write
    /// succeeds.
    async fn write_ok_on(
        &self,
        client: Client,
        node: &D::Node,
        attached: &[ReportedVolume<D>],
        expected: &Revision,
        when: &str,
    ) -> Result<Revision, ConformanceFailure> {
        self.write_on(client, node, attached, expected)
            .await?
            .map_err(|e| {
                self.fail(
                    format_args!(
                        "{client}'s write of {} to node {node:?} at revision {expected} ({when}) to succeed",
                        list(attached)
                    ),
                    error(&e),
                )
            })
    }

    /// Writes `attached` at `stale` through `client`, failing the check unless the write
    /// fails with Conflict; `why` says why `stale` is no longer current.
    async fn write_conflicts_on(
        &self,
        client: Client,
        node: &D::Node,
        attached: &[ReportedVolume<D>],
        stale: &Revision,
        why: &str,
    ) -> Outcome {
        let lost = self.write_on(client, node, attached, stale).await?;
        if matches!(lost, Err(StoreError::Conflict { .. })) {
            return Ok(());
        }
        Err(self.fail(
            format_args!(
                "{client}'s write of {} at revision {stale}, {why}, to fail with Conflict",
                list(attached)
            ),
            answer(&lost),
        ))
    }

    /// Fails unless a read through `client` shows exactly `attached` at `revision`.
    async fn expect_holds_on(
        &self,
        client: Client,
        node: &D::Node,
        attached: &[ReportedVolume<D>],
        revision: &Revision,
        after: &str,
    ) -> Outcome {
        let now = self.read_ok_on(client, node, after).await?;
        if now.attached != attached || now.revision != *revision {
            return Err(self.fail(
                format_args!(
                    "{client}'s read {after} to show {} at revision {revision}",
                    list(attached)
                ),
                format_args!("{} at revision {}", list(&now.attached), now.revision),
            ));
        }
        Ok(())
    }

    /// Fails unless a read through each client shows exactly `attached` at `revision`.
    async fn expect_both_hold(
        &self,
        node: &D::Node,
        attached: &[ReportedVolume<D>],
        revision: &Revision,
        after: &str,
    ) -> Outcome {
        for client in [First, Second] {
            self.expect_holds_on(client, node, attached, revision, after)
                .await?;
        }
        Ok(())
    }
}

/// [`NodeStatusStore::read`] reads "fresh from the source of truth, never from a cache", so
/// what one client wrote is what any client then reads: a second replica, or a leader taking
/// over, starts from the list the last writer left, at the revision a write against it
/// needs. Checked both ways round, so that a client answering a read from its own last write
/// shows.
pub async fn clients_read_each_others_writes<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "clients_read_each_others_writes");
    cx.scoped(async {
        let node = cx.node().await?;
        let base = cx.read_both(&node, "just added").await?;
        let a = [cx.volume(Some("/dev/a"))];
        let rev = cx
            .write_ok_on(First, &node, &a, &base, "the revision both just read")
            .await?;
        cx.expect_holds_on(Second, &node, &a, &rev, "after the first client's write")
            .await?;
        let b = [cx.volume(Some("/dev/b"))];
        let rev = cx
            .write_ok_on(
                Second,
                &node,
                &b,
                &rev,
                "the revision of the first client's write, as the second read it",
            )
            .await?;
        cx.expect_holds_on(First, &node, &b, &rev, "after the second client's write")
            .await
    })
    .await
}

/// [`NodeStatusStore::write`] lands "if its revision is still `expected`", the node's
/// revision in the store, whoever moved it, and "otherwise fails with
/// [`StoreError::Conflict`] and changes nothing": the promise that two writers "can never
/// silently erase each other's volumes" ([`NodeStatusStore`]). Both clients read the node;
/// the first writes; the second, still holding the revision both read, must lose. Then the
/// other way round, the first holding the revision of its own write. A client that compares
/// the revision with the last one it saw itself and then writes unconditionally keeps every
/// promise through one client, and fails here.
pub async fn write_after_another_clients_write_conflicts<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "write_after_another_clients_write_conflicts");
    cx.scoped(async {
        let node = cx.node().await?;
        let base = cx.read_both(&node, "just added").await?;
        let a = [cx.volume(Some("/dev/a"))];
        let rev_a = cx
            .write_ok_on(First, &node, &a, &base, "the revision both just read")
            .await?;
        cx.write_conflicts_on(
            Second,
            &node,
            &[cx.volume(Some("/dev/b"))],
            &base,
            &format!("which {First} replaced with {rev_a}"),
        )
        .await?;
        cx.expect_both_hold(&node, &a, &rev_a, "after the second client's write lost")
            .await?;
        // The other way round: the second catches up and writes; the first still holds the
        // revision of its own write.
        let c = [cx.volume(Some("/dev/c"))];
        let rev_c = cx
            .write_ok_on(Second, &node, &c, &rev_a, "the revision it just read")
            .await?;
        cx.write_conflicts_on(
            First,
            &node,
            &[],
            &rev_a,
            &format!("its own write's, which {Second} replaced with {rev_c}"),
        )
        .await?;
        cx.expect_both_hold(&node, &c, &rev_c, "after the first client's write lost")
            .await
    })
    .await
}

/// [`NodeStatusStore::write`] is a compare-and-set made by the store, not by its client: of
/// two clients writing one node at the revision both read, at once (`tokio::join!`), one
/// lands and the other fails with [`StoreError::Conflict`], and each client then reads the
/// winner's list at the winner's revision. This is two controller replicas, or a deposed
/// leader and its successor, racing for one node.
pub async fn two_clients_racing_one_wins<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "two_clients_racing_one_wins");
    cx.scoped(async {
        let node = cx.node().await?;
        let base = cx.read_both(&node, "just added").await?;
        let a = [cx.volume(Some("/dev/a"))];
        let b = [cx.volume(Some("/dev/b"))];
        let (wrote_a, wrote_b) = tokio::join!(
            cx.write_on(First, &node, &a, &base),
            cx.write_on(Second, &node, &b, &base)
        );
        let (wrote_a, wrote_b) = (wrote_a?, wrote_b?);
        let (winner, revision) = match (&wrote_a, &wrote_b) {
            (Ok(rev), Err(StoreError::Conflict { .. })) => (&a, rev),
            (Err(StoreError::Conflict { .. }), Ok(rev)) => (&b, rev),
            _ => {
                return Err(cx.fail(
                    format_args!(
                        "of two clients' concurrent writes at revision {base}, one to succeed and the other to fail with Conflict"
                    ),
                    format_args!(
                        "{First} writing {}: {}; {Second} writing {}: {}",
                        list(&a),
                        answer(&wrote_a),
                        list(&b),
                        answer(&wrote_b)
                    ),
                ));
            }
        };
        cx.expect_both_hold(&node, winner, revision, "after the race")
            .await
    })
    .await
}

/// A revision that is no longer the node's current one stays stale whatever the client read
/// since: [`NodeStatusStore::write`] compares the caller's `expected`, never a newer revision
/// its client holds ([`Revision`]: a writer holding one that "is no longer the node's current
/// one learns it lost a race"). The core may write at a revision read a while ago, after
/// other reads of the node. The first client reads the node, the second replaces its list,
/// the first reads again and then writes at its first read's revision: Conflict, nothing
/// changed. Then with the first client's own write in between: write, read, write at the
/// revision before the read.
pub async fn write_at_a_revision_older_than_the_last_read_conflicts<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(
        harness,
        "write_at_a_revision_older_than_the_last_read_conflicts",
    );
    cx.scoped(async {
        let node = cx.node().await?;
        let old = cx.read_both(&node, "just added").await?;
        let b = [cx.volume(Some("/dev/b"))];
        let rev_b = cx
            .write_ok_on(Second, &node, &b, &old, "the revision it just read")
            .await?;
        // The first client's last read.
        cx.expect_holds_on(First, &node, &b, &rev_b, "after the second client's write")
            .await?;
        cx.write_conflicts_on(
            First,
            &node,
            &[cx.volume(Some("/dev/a"))],
            &old,
            &format!("read before its last read showed {rev_b}"),
        )
        .await?;
        cx.expect_both_hold(
            &node,
            &b,
            &rev_b,
            "after a write at a revision older than the last read",
        )
        .await?;
        // Its own write in between.
        let c = [cx.volume(Some("/dev/c"))];
        let rev_c = cx
            .write_ok_on(First, &node, &c, &rev_b, "the revision of its last read")
            .await?;
        cx.expect_holds_on(First, &node, &c, &rev_c, "after its own write")
            .await?;
        cx.write_conflicts_on(
            First,
            &node,
            &[],
            &rev_b,
            &format!("read before its own write and its last read showed {rev_c}"),
        )
        .await?;
        cx.expect_both_hold(
            &node,
            &c,
            &rev_c,
            "after a write at a revision from before its own write",
        )
        .await
    })
    .await
}
