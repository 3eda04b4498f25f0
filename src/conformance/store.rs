//! The checks of a [`NodeStatusStore`], each derived from a promise of its documentation.
//!
//! Run them all with [`check_store`](super::check_store), list them with [`store_checks`], or
//! call one by its function. Each check adds fresh nodes through the [`StoreHarness`], looks
//! only at them, and removes them when it ends.

use std::fmt::{self, Debug};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;

use super::report::{Check, Outcome};
use super::{ConformanceFailure, HarnessError, Steps, Supported, fresh};
use crate::domain::Domain;
use crate::reported_volumes::ReportedVolumes;
use crate::store::{
    NodeStatus, NodeStatusStore, ReportedVolume, Revision, StoreError, WriteReceipt,
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

/// One run of one check: the harness, the check's steps, and the nodes to remove at the end.
struct Cx<'h, D: Domain, H: ?Sized> {
    harness: &'h H,
    steps: Steps,
    added: Mutex<Vec<D::Node>>,
}

impl<'h, D: Domain, H: StoreHarness<D> + ?Sized> Cx<'h, D, H> {
    fn new(harness: &'h H, check: &'static str) -> Self {
        Cx {
            harness,
            steps: Steps {
                check,
                timeout: harness.call_timeout(),
            },
            added: Mutex::new(Vec::new()),
        }
    }

    /// Runs the check's `body`, then removes the nodes it added, whatever the outcome.
    async fn scoped(&self, body: impl Future<Output = Outcome>) -> Outcome {
        let outcome = body.await;
        let added = std::mem::take(&mut *self.added.lock());
        for node in added {
            // Best effort: a node left behind does not make the store wrong.
            let _ = self
                .steps
                .call("remove_node", self.harness.remove_node(&node))
                .await;
        }
        outcome
    }

    fn fail(&self, expected: impl fmt::Display, seen: impl fmt::Display) -> ConformanceFailure {
        self.steps.fail(expected, seen)
    }

    /// A fresh node, added through the harness.
    async fn node(&self) -> Result<D::Node, ConformanceFailure> {
        let node = self.missing_node();
        self.steps
            .harness("add_node", self.harness.add_node(&node))
            .await?;
        self.added.lock().push(node.clone());
        Ok(node)
    }

    /// A fresh node id, never added.
    fn missing_node(&self) -> D::Node {
        self.harness.node(fresh())
    }

    /// Removes `node` through the harness.
    async fn remove(&self, node: &D::Node) -> Result<(), ConformanceFailure> {
        self.steps
            .harness("remove_node", self.harness.remove_node(node))
            .await?;
        self.added.lock().retain(|n| n != node);
        Ok(())
    }

    /// A fresh volume reported at `device` (`None`: no device).
    fn volume(&self, device: Option<&str>) -> ReportedVolume<D> {
        ReportedVolume {
            volume: self.harness.volume(fresh()),
            device: device.map(Into::into),
        }
    }

    async fn set_in_use(
        &self,
        node: &D::Node,
        in_use: Vec<D::Volume>,
    ) -> Result<Supported, ConformanceFailure> {
        self.steps
            .harness("set_in_use", self.harness.set_in_use(node, in_use))
            .await
    }

    async fn set_fenced(
        &self,
        node: &D::Node,
        fenced: bool,
    ) -> Result<Supported, ConformanceFailure> {
        self.steps
            .harness("set_fenced", self.harness.set_fenced(node, fenced))
            .await
    }

    async fn set_healthy(
        &self,
        node: &D::Node,
        healthy: bool,
    ) -> Result<Supported, ConformanceFailure> {
        self.steps
            .harness("set_healthy", self.harness.set_healthy(node, healthy))
            .await
    }

    async fn read(
        &self,
        node: &D::Node,
    ) -> Result<Result<NodeStatus<D>, StoreError>, ConformanceFailure> {
        self.steps
            .call("read", self.harness.store().read(node))
            .await
    }

    /// Reads `node`, failing the check unless the read succeeds.
    async fn read_ok(
        &self,
        node: &D::Node,
        when: &str,
    ) -> Result<NodeStatus<D>, ConformanceFailure> {
        self.read(node).await?.map_err(|e| {
            self.fail(
                format_args!("read of node {node:?} {when} to succeed"),
                error(&e),
            )
        })
    }

    async fn write(
        &self,
        node: &D::Node,
        attached: &[ReportedVolume<D>],
        expected: &Revision,
    ) -> Result<Result<Revision, StoreError>, ConformanceFailure> {
        let attached = ReportedVolumes::from(attached.to_vec());
        let write = self
            .harness
            .store()
            .write(node, &attached, expected.clone());
        self.steps.call("write", write).await
    }

    /// Writes `attached` at `expected` through `write_reading_facts`, failing the check
    /// unless the write succeeds.
    async fn write_reading_facts_ok(
        &self,
        node: &D::Node,
        attached: &[ReportedVolume<D>],
        expected: &Revision,
        when: &str,
    ) -> Result<WriteReceipt<D>, ConformanceFailure> {
        let packed = ReportedVolumes::from(attached.to_vec());
        let write = self
            .harness
            .store()
            .write_reading_facts(node, &packed, expected.clone());
        self.steps
            .call("write_reading_facts", write)
            .await?
            .map_err(|e| {
                self.fail(
                    format_args!(
                        "write_reading_facts of {} to node {node:?} at revision {expected} ({when}) to succeed",
                        list(attached)
                    ),
                    error(&e),
                )
            })
    }

    /// Writes `attached` at `expected`, failing the check unless the write succeeds.
    async fn write_ok(
        &self,
        node: &D::Node,
        attached: &[ReportedVolume<D>],
        expected: &Revision,
        when: &str,
    ) -> Result<Revision, ConformanceFailure> {
        self.write(node, attached, expected).await?.map_err(|e| {
            self.fail(
                format_args!(
                    "write of {} to node {node:?} at revision {expected} ({when}) to succeed",
                    list(attached)
                ),
                error(&e),
            )
        })
    }

    /// The store's listing, failing the check unless it succeeds.
    async fn list(&self) -> Result<Vec<(D::Node, NodeStatus<D>)>, ConformanceFailure> {
        self.steps
            .call("list", self.harness.store().list())
            .await?
            .map_err(|e| self.fail("list to succeed", error(&e)))
    }

    /// Fails unless a read of `node` shows exactly `attached` at `revision`: what a write that
    /// landed, or one that changed nothing, must leave behind.
    async fn expect_holds(
        &self,
        node: &D::Node,
        attached: &[ReportedVolume<D>],
        revision: &Revision,
        after: &str,
    ) -> Outcome {
        let now = self.read_ok(node, after).await?;
        if now.attached != attached || now.revision != *revision {
            return Err(self.fail(
                format_args!(
                    "a read {after} to show {} at revision {revision}",
                    list(attached)
                ),
                format_args!("{} at revision {}", list(&now.attached), now.revision),
            ));
        }
        Ok(())
    }
}

/// A list as a failure shows it: `["v1" at /dev/a, "v2" (no device)]`.
fn list<D: Domain>(attached: &[ReportedVolume<D>]) -> String {
    let items: Vec<String> = attached
        .iter()
        .map(|r| match &r.device {
            Some(device) => format!("{:?} at {device}", r.volume),
            None => format!("{:?} (no device)", r.volume),
        })
        .collect();
    format!("[{}]", items.join(", "))
}

/// An error as a failure shows it: its kind (through its Display) and its text.
fn error(e: &StoreError) -> String {
    format!("the error \"{e}\"")
}

/// A call's answer as a failure shows it.
fn answer<T: Debug>(answer: &Result<T, StoreError>) -> String {
    match answer {
        Ok(value) => format!("success ({value:?})"),
        Err(e) => error(e),
    }
}

/// What a read must show for a fact the harness set to `value`: the value if the store holds
/// the fact, else `None`.
fn held<T>(supported: Supported, value: T) -> Option<T> {
    match supported {
        Supported::Yes => Some(value),
        Supported::No => None,
    }
}

/// [`StoreError::NotFound`]: "The node does not exist (any more)"; the README's "Writing a
/// store": "no such node: `StoreError::not_found()`". Checked for a node never added and for
/// one added, read and removed.
pub async fn read_of_missing_node_is_not_found<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "read_of_missing_node_is_not_found");
    cx.scoped(async {
        let never = cx.missing_node();
        let read = cx.read(&never).await?;
        if !matches!(read, Err(StoreError::NotFound { .. })) {
            return Err(cx.fail(
                format_args!("a read of node {never:?}, never added, to fail with NotFound"),
                answer(&read),
            ));
        }
        let removed = cx.node().await?;
        cx.read_ok(&removed, "just added").await?;
        cx.remove(&removed).await?;
        let read = cx.read(&removed).await?;
        if !matches!(read, Err(StoreError::NotFound { .. })) {
            return Err(cx.fail(
                format_args!("a read of node {removed:?}, removed, to fail with NotFound"),
                answer(&read),
            ));
        }
        Ok(())
    })
    .await
}

/// The controller is the only writer of a node's attached list
/// ([`NodeStatusStore::write`] "replaces `node`'s attached volumes"; the agents write the
/// other facts), so a node it never wrote to lists nothing: a store that made up volumes would
/// have a new controller take them for attached.
pub async fn new_node_lists_nothing<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "new_node_lists_nothing");
    cx.scoped(async {
        let node = cx.node().await?;
        let first = cx.read_ok(&node, "just added").await?;
        if !first.attached.is_empty() {
            return Err(cx.fail(
                format_args!("the first read of node {node:?} to list no volume"),
                list(&first.attached),
            ));
        }
        Ok(())
    })
    .await
}

/// [`Revision`]: "an opaque token the store hands out with a read and takes back with a
/// write", compared for equality only; a writer learns it lost a race when the revision "is no
/// longer the node's current one". So with nothing written, the current revision stays what
/// it was: a store whose revision changed on every read would fail every write with Conflict.
/// Checked on a new node and after a write.
pub async fn reads_are_stable<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "reads_are_stable");
    cx.scoped(async {
        let node = cx.node().await?;
        let mut written = false;
        loop {
            let when = if written {
                "after a write"
            } else {
                "of a new node"
            };
            let first = cx.read_ok(&node, when).await?;
            let second = cx.read_ok(&node, when).await?;
            if first != second {
                return Err(cx.fail(
                    format_args!(
                        "two reads {when} with nothing in between to return the same status"
                    ),
                    format_args!("{first:?}, then {second:?}"),
                ));
            }
            if written {
                return Ok(());
            }
            cx.write_ok(
                &node,
                &[cx.volume(Some("/dev/a"))],
                &first.revision,
                "after two reads",
            )
            .await?;
            written = true;
        }
    })
    .await
}

/// [`NodeStatusStore::write`]: "Replaces `node`'s attached volumes if its revision is still
/// `expected`, returning the new revision". The new revision differs from the old one (a
/// writer still holding the old one must now lose its race, [`Revision`]), and it is the
/// node's current one: a read returns it.
pub async fn write_at_current_revision_succeeds<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "write_at_current_revision_succeeds");
    cx.scoped(async {
        let node = cx.node().await?;
        let before = cx.read_ok(&node, "just added").await?;
        let attached = [cx.volume(Some("/dev/a"))];
        let new = cx
            .write_ok(&node, &attached, &before.revision, "the revision just read")
            .await?;
        if new == before.revision {
            return Err(cx.fail(
                format_args!(
                    "the write's revision to differ from the one written against ({})",
                    before.revision
                ),
                format_args!("the same revision {new}"),
            ));
        }
        cx.expect_holds(&node, &attached, &new, "after the write")
            .await
    })
    .await
}

/// [`NodeStatusStore::write`] replaces the attached list with `attached`, and
/// [`ReportedVolume::device`] is "where it shows up on the node, as the backend reported":
/// a read gives back the same volumes in the same order with the same device paths, a missing
/// one included; a second write with other paths replaces them. (The core sorts what it reads,
/// so a store that only reordered would not mislead it, but the docs promise the list as
/// written, and node agents read it too.)
pub async fn written_list_reads_back_exactly<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "written_list_reads_back_exactly");
    cx.scoped(async {
        let node = cx.node().await?;
        let before = cx.read_ok(&node, "just added").await?;
        let mut volumes = [cx.volume(None), cx.volume(None), cx.volume(None)];
        volumes.sort_by(|a, b| a.volume.cmp(&b.volume));
        // A write hands the store a list in volume order (`ReportedVolumes`): a store that
        // reorders it, or loses a path, shows here.
        let [low, mid, high] = volumes;
        let first = vec![
            ReportedVolume {
                device: None,
                ..low.clone()
            },
            ReportedVolume {
                device: Some("/dev/disk/b".into()),
                ..mid.clone()
            },
            ReportedVolume {
                device: Some("/dev/disk/c".into()),
                ..high.clone()
            },
        ];
        let rev = cx
            .write_ok(&node, &first, &before.revision, "the revision just read")
            .await?;
        cx.expect_holds(&node, &first, &rev, "after the write")
            .await?;
        let second = vec![
            ReportedVolume {
                device: Some("/dev/disk/a2".into()),
                ..low
            },
            ReportedVolume {
                device: None,
                ..mid
            },
            ReportedVolume {
                device: Some("/dev/disk/c2".into()),
                ..high
            },
        ];
        let rev = cx
            .write_ok(&node, &second, &rev, "the revision of the previous write")
            .await?;
        cx.expect_holds(&node, &second, &rev, "after a second write")
            .await
    })
    .await
}

/// [`NodeStatusStore::write`]: if the revision is no longer `expected`, it "fails with
/// [`StoreError::Conflict`] and changes nothing"; [`StoreError::Conflict`]: "Nothing was
/// written". The store's whole point ([`NodeStatusStore`]): a writer with a stale view must
/// never erase another's volumes.
pub async fn stale_write_conflicts_and_changes_nothing<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "stale_write_conflicts_and_changes_nothing");
    cx.scoped(async {
        let node = cx.node().await?;
        let stale = cx.read_ok(&node, "just added").await?.revision;
        let first = [cx.volume(Some("/dev/a"))];
        let current = cx
            .write_ok(&node, &first, &stale, "the revision just read")
            .await?;
        let second = [cx.volume(Some("/dev/b"))];
        let lost = cx.write(&node, &second, &stale).await?;
        if !matches!(lost, Err(StoreError::Conflict { .. })) {
            return Err(cx.fail(
                format_args!(
                    "a write at revision {stale}, replaced since by {current}, to fail with Conflict"
                ),
                answer(&lost),
            ));
        }
        cx.expect_holds(&node, &first, &current, "after the conflicting write")
            .await
    })
    .await
}

/// [`StoreError::Conflict`]'s `current`: "The revision the store holds now, when the store
/// says". A store may leave it `None` (Kubernetes does); one that names a revision names the
/// one a read returns, since the core may write against it.
pub async fn conflict_names_the_current_revision<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "conflict_names_the_current_revision");
    cx.scoped(async {
        let node = cx.node().await?;
        let stale = cx.read_ok(&node, "just added").await?.revision;
        cx.write_ok(
            &node,
            &[cx.volume(Some("/dev/a"))],
            &stale,
            "the revision just read",
        )
        .await?;
        let lost = cx.write(&node, &[], &stale).await?;
        let current = match lost {
            Err(StoreError::Conflict { current, .. }) => current,
            other => {
                return Err(cx.fail(
                    format_args!("a write at the replaced revision {stale} to fail with Conflict"),
                    answer(&other),
                ));
            }
        };
        let Some(current) = current else {
            return Ok(());
        };
        let read = cx.read_ok(&node, "after the conflict").await?;
        if read.revision != current {
            return Err(cx.fail(
                format_args!(
                    "the Conflict's current revision to be what a read returns ({})",
                    read.revision
                ),
                format_args!("Conflict with current revision {current}"),
            ));
        }
        Ok(())
    })
    .await
}

/// [`NodeStatusStore::write`] is a compare-and-set: of two writes at the same revision, run
/// concurrently (`tokio::join!`), one lands and the other fails with
/// [`StoreError::Conflict`]; a read then shows the winner's list at the winner's revision.
/// This is the race the store exists for ([`NodeStatusStore`]: two writers "can never silently
/// erase each other's volumes").
pub async fn concurrent_writers_one_wins<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "concurrent_writers_one_wins");
    cx.scoped(async {
        let node = cx.node().await?;
        let base = cx.read_ok(&node, "just added").await?.revision;
        let a = [cx.volume(Some("/dev/a"))];
        let b = [cx.volume(Some("/dev/b"))];
        let (wrote_a, wrote_b) = tokio::join!(cx.write(&node, &a, &base), cx.write(&node, &b, &base));
        let (wrote_a, wrote_b) = (wrote_a?, wrote_b?);
        let (winner, revision) = match (&wrote_a, &wrote_b) {
            (Ok(rev), Err(StoreError::Conflict { .. })) => (&a, rev),
            (Err(StoreError::Conflict { .. }), Ok(rev)) => (&b, rev),
            _ => {
                return Err(cx.fail(
                    format_args!(
                        "of two concurrent writes at revision {base}, one to succeed and the other to fail with Conflict"
                    ),
                    format_args!(
                        "writing {}: {}; writing {}: {}",
                        list(&a),
                        answer(&wrote_a),
                        list(&b),
                        answer(&wrote_b)
                    ),
                ));
            }
        };
        cx.expect_holds(&node, winner, revision, "after the race").await
    })
    .await
}

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

/// [`StoreError::NotFound`]: "The node does not exist (any more). Nothing was written." A
/// write does not create a node (the harness's agents do): checked for a node never added, and
/// for one removed after its revision was read; neither then reads or lists.
pub async fn write_to_missing_node_is_not_found<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "write_to_missing_node_is_not_found");
    cx.scoped(async {
        // A revision this store hands out, to write a node that has none.
        let other = cx.node().await?;
        let revision = cx.read_ok(&other, "just added").await?.revision;
        let never = cx.missing_node();
        let removed = cx.node().await?;
        let removed_rev = cx.read_ok(&removed, "just added").await?.revision;
        cx.remove(&removed).await?;
        for (node, revision, what) in [
            (&never, &revision, "never added"),
            (&removed, &removed_rev, "removed"),
        ] {
            let wrote = cx
                .write(node, &[cx.volume(Some("/dev/a"))], revision)
                .await?;
            if !matches!(wrote, Err(StoreError::NotFound { .. })) {
                return Err(cx.fail(
                    format_args!("a write to node {node:?}, {what}, to fail with NotFound"),
                    answer(&wrote),
                ));
            }
            let read = cx.read(node).await?;
            if !matches!(read, Err(StoreError::NotFound { .. })) {
                return Err(cx.fail(
                    format_args!("node {node:?}, {what}, to read as NotFound after a write to it"),
                    answer(&read),
                ));
            }
        }
        let listed = cx.list().await?;
        if let Some((node, _)) = listed.iter().find(|(n, _)| *n == never || *n == removed) {
            return Err(cx.fail(
                format_args!("node {node:?}, written to while missing, not to be listed"),
                "it listed",
            ));
        }
        Ok(())
    })
    .await
}

/// [`NodeStatusStore::list`]: "Every node's status, for recovery after a controller restart":
/// a recovering core takes each listed status and revision as what the store holds, so the
/// listing shows each node once, with the status and revision a read returns. Foreign nodes
/// (a shared store) are ignored.
pub async fn list_agrees_with_read<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "list_agrees_with_read");
    cx.scoped(async {
        let written = cx.node().await?;
        let fresh = cx.node().await?;
        let rev = cx.read_ok(&written, "just added").await?.revision;
        cx.write_ok(
            &written,
            &[cx.volume(Some("/dev/a")), cx.volume(None)],
            &rev,
            "the revision just read",
        )
        .await?;
        let listed = cx.list().await?;
        for node in [&written, &fresh] {
            let mine: Vec<&NodeStatus<D>> = listed
                .iter()
                .filter(|(n, _)| n == node)
                .map(|(_, status)| status)
                .collect();
            let read = cx.read_ok(node, "after the listing").await?;
            match mine[..] {
                [status] if *status == read => {}
                [status] => {
                    return Err(cx.fail(
                        format_args!("list to show node {node:?} as a read does: {read:?}"),
                        format_args!("{status:?}"),
                    ));
                }
                _ => {
                    return Err(cx.fail(
                        format_args!("list to show node {node:?} once"),
                        format_args!("it {} times", mine.len()),
                    ));
                }
            }
        }
        Ok(())
    })
    .await
}

/// [`NodeStatusStore::write`] returns "the new revision" whatever the list: writing the list
/// the store already holds succeeds, and what it returns is the node's current revision (a
/// read agrees, and a write at it succeeds). Whether the revision moves is up to the store:
/// Kubernetes does not bump `resourceVersion` for an update that changes nothing.
pub async fn rewriting_same_list_returns_current_revision<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "rewriting_same_list_returns_current_revision");
    cx.scoped(async {
        let node = cx.node().await?;
        let rev = cx.read_ok(&node, "just added").await?.revision;
        let attached = [cx.volume(Some("/dev/a"))];
        let rev = cx
            .write_ok(&node, &attached, &rev, "the revision just read")
            .await?;
        let again = cx
            .write_ok(
                &node,
                &attached,
                &rev,
                "the same list again, at the revision it returned",
            )
            .await?;
        cx.expect_holds(
            &node,
            &attached,
            &again,
            "after writing the same list again",
        )
        .await?;
        let last = cx
            .write_ok(
                &node,
                &[],
                &again,
                "the revision the repeated write returned",
            )
            .await?;
        cx.expect_holds(&node, &[], &last, "after a write at that revision")
            .await
    })
    .await
}

/// [`NodeStatusStore::write`] replaces the attached list with the one given, the empty one
/// included: the core's last write for a node whose volumes all left (before it detaches them,
/// C5) is an empty list.
pub async fn empty_list_write_clears<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "empty_list_write_clears");
    cx.scoped(async {
        let node = cx.node().await?;
        let rev = cx.read_ok(&node, "just added").await?.revision;
        let rev = cx
            .write_ok(
                &node,
                &[cx.volume(Some("/dev/a")), cx.volume(Some("/dev/b"))],
                &rev,
                "the revision just read",
            )
            .await?;
        let rev = cx
            .write_ok(&node, &[], &rev, "the revision of the previous write")
            .await?;
        cx.expect_holds(&node, &[], &rev, "after writing an empty list")
            .await
    })
    .await
}

/// The facts one read shows, as a failure names them.
fn facts<D: Domain>(status: &NodeStatus<D>) -> String {
    format!(
        "in_use {:?}, fenced {:?}, healthy {:?}",
        status.in_use, status.fenced, status.healthy
    )
}

/// What the agents' facts must read as, once the harness set them.
struct Facts<D: Domain> {
    in_use: Option<Vec<D::Volume>>,
    fenced: Option<bool>,
    healthy: Option<bool>,
}

impl<D: Domain> Facts<D> {
    fn shown_by(&self, status: &NodeStatus<D>) -> bool {
        status.in_use == self.in_use
            && status.fenced == self.fenced
            && status.healthy == self.healthy
    }
}

impl<D: Domain> fmt::Display for Facts<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "in_use {:?}, fenced {:?}, healthy {:?}",
            self.in_use, self.fenced, self.healthy
        )
    }
}

impl<'h, D: Domain, H: StoreHarness<D> + ?Sized> Cx<'h, D, H> {
    /// Has the harness set all three facts of `node`, and returns what a read must show.
    async fn set_facts(
        &self,
        node: &D::Node,
        in_use: Vec<D::Volume>,
        fenced: bool,
        healthy: bool,
    ) -> Result<Facts<D>, ConformanceFailure> {
        let in_use_held = self.set_in_use(node, in_use.clone()).await?;
        let fenced_held = self.set_fenced(node, fenced).await?;
        let healthy_held = self.set_healthy(node, healthy).await?;
        Ok(Facts {
            in_use: held(in_use_held, in_use),
            fenced: held(fenced_held, fenced),
            healthy: held(healthy_held, healthy),
        })
    }

    /// Fails unless `status` shows `facts`.
    fn expect_facts(&self, status: &NodeStatus<D>, facts: &Facts<D>, when: &str) -> Outcome {
        if facts.shown_by(status) {
            return Ok(());
        }
        Err(self.fail(
            format_args!("a read {when} to show {facts}"),
            self::facts(status),
        ))
    }
}

/// [`NodeStatus::in_use`], [`fenced`](NodeStatus::fenced) and
/// [`healthy`](NodeStatus::healthy) are read fresh from what the node agent and the fencing
/// agent wrote ("read fresh (never from a cache)", README "Writing a store"), each "`None`
/// when this store does not know": set one way and then the other, a read shows each fact the
/// store holds as set, and each it does not hold as `None`, never a guess.
pub async fn agent_facts_read_back<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "agent_facts_read_back");
    cx.scoped(async {
        let node = cx.node().await?;
        let volume = cx.volume(None).volume;
        let set = cx.set_facts(&node, vec![volume], true, false).await?;
        let read = cx.read_ok(&node, "after the agents' update").await?;
        cx.expect_facts(
            &read,
            &set,
            "after the agents set in_use, fenced, unhealthy",
        )?;
        let set = cx.set_facts(&node, Vec::new(), false, true).await?;
        let read = cx.read_ok(&node, "after the agents' second update").await?;
        cx.expect_facts(
            &read,
            &set,
            "after the agents set nothing in use, unfenced, healthy",
        )
    })
    .await
}

/// [`NodeStatusStore::write`] "replaces `node`'s attached volumes", and only those: the
/// agents' facts next to them ([`NodeStatus::in_use`]: "which lives in the same node status")
/// are theirs. A write that cleared `in_use` would let the next fresh read confirm a detach
/// under a mounted volume.
pub async fn write_keeps_agent_facts<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "write_keeps_agent_facts");
    cx.scoped(async {
        let node = cx.node().await?;
        let reported = cx.volume(Some("/dev/a"));
        let set = cx
            .set_facts(&node, vec![reported.volume.clone()], true, false)
            .await?;
        let before = cx.read_ok(&node, "after the agents' update").await?;
        cx.expect_facts(&before, &set, "before the controller's write")?;
        let rev = cx
            .write_ok(
                &node,
                std::slice::from_ref(&reported),
                &before.revision,
                "the revision just read",
            )
            .await?;
        let after = cx.read_ok(&node, "after the controller's write").await?;
        cx.expect_facts(&after, &set, "after the controller's write")?;
        let rev = cx
            .write_ok(&node, &[], &rev, "the revision of the previous write")
            .await?;
        let after = cx.read_ok(&node, "after a second controller write").await?;
        cx.expect_facts(
            &after,
            &set,
            "after a second controller write (an empty list)",
        )?;
        cx.expect_holds(&node, &[], &rev, "after a second controller write")
            .await
    })
    .await
}

/// An agent writes after the controller read and before it writes. The docs allow both
/// designs: a store whose revision covers the agents' facts (Kubernetes: one Node object) must
/// then answer the controller's write with Conflict, one whose revision covers the attached
/// list only (etcd: the facts under keys of their own) lets it land. Which one the store is,
/// a read after the agent's change tells: [`NodeStatusStore::write`] lands "if its revision is
/// still `expected`" and otherwise "fails with [`StoreError::Conflict`] and changes nothing".
/// Either way the agent's fact survives. The first fact the harness supports is used
/// (`in_use`, then `fenced`, then `healthy`); a store that holds none passes.
pub async fn agent_change_between_read_and_write<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "agent_change_between_read_and_write");
    cx.scoped(async {
        let node = cx.node().await?;
        let reported = cx.volume(Some("/dev/a"));
        let before = cx.read_ok(&node, "just added").await?;
        // The agent's change: the first fact the store holds, set against its default.
        let mut facts = Facts::<D> {
            in_use: before.in_use.clone(),
            fenced: before.fenced,
            healthy: before.healthy,
        };
        if cx.set_in_use(&node, vec![reported.volume.clone()]).await? == Supported::Yes {
            facts.in_use = Some(vec![reported.volume.clone()]);
        } else if cx.set_fenced(&node, true).await? == Supported::Yes {
            facts.fenced = Some(true);
        } else if cx.set_healthy(&node, false).await? == Supported::Yes {
            facts.healthy = Some(false);
        } else {
            return Ok(());
        }
        let probe = cx.read_ok(&node, "after the agent's change").await?;
        cx.expect_facts(&probe, &facts, "after the agent's change")?;
        let wrote = cx
            .write(&node, std::slice::from_ref(&reported), &before.revision)
            .await?;
        let (attached, revision): (&[ReportedVolume<D>], Revision) = if probe.revision == before.revision {
            // The agent's change left the revision as it was: the write is at the current one.
            match wrote {
                Ok(rev) => (std::slice::from_ref(&reported), rev),
                other => {
                    return Err(cx.fail(
                        format_args!(
                            "a write at revision {}, still current after the agent's change (a read returns it), to succeed",
                            before.revision
                        ),
                        answer(&other),
                    ));
                }
            }
        } else {
            match wrote {
                Err(StoreError::Conflict { .. }) => (&[], probe.revision.clone()),
                other => {
                    return Err(cx.fail(
                        format_args!(
                            "a write at revision {}, replaced by the agent's change with {}, to fail with Conflict",
                            before.revision, probe.revision
                        ),
                        answer(&other),
                    ));
                }
            }
        };
        let after = cx.read_ok(&node, "after the controller's write").await?;
        cx.expect_facts(&after, &facts, "after the controller's write")?;
        cx.expect_holds(&node, attached, &revision, "after the controller's write")
            .await
    })
    .await
}

/// [`NodeStatusStore::write_reading_facts`] answers facts "read no earlier than the write":
/// after the agents change their facts, a write that answers facts must answer the changed
/// ones (a store answering from a cache, or from a read taken before the write, would let a
/// detach go under a mount), and the facts a read then shows; its revision is the one the
/// write created, as [`write`](NodeStatusStore::write)'s. A store that answers no facts (the
/// default) passes: the core then reads the node itself.
pub async fn facts_read_with_a_write_are_current<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "facts_read_with_a_write_are_current");
    cx.scoped(async {
        let node = cx.node().await?;
        let reported = cx.volume(Some("/dev/a"));
        // Two rounds, the facts flipped between them: the second write must not answer the
        // first round's.
        let rounds = [
            (vec![reported.volume.clone()], true, false),
            (Vec::new(), false, true),
        ];
        for (round, (in_use, fenced, healthy)) in rounds.into_iter().enumerate() {
            let set = cx.set_facts(&node, in_use, fenced, healthy).await?;
            // Written at the revision a read gives after the agents' update (a store whose
            // revision covers the agents' facts moved it).
            let revision = cx
                .read_ok(&node, "after the agents' update")
                .await?
                .revision;
            let attached: &[ReportedVolume<D>] = if round == 0 {
                std::slice::from_ref(&reported)
            } else {
                &[]
            };
            let receipt = cx
                .write_reading_facts_ok(&node, attached, &revision, "after the agents' update")
                .await?;
            let Some(facts) = &receipt.facts else {
                // No facts: the default, always allowed. Its write must still be a write.
                return cx
                    .expect_holds(&node, attached, &receipt.revision, "after the write")
                    .await;
            };
            let answered = NodeStatus {
                attached: Vec::new(),
                in_use: facts.in_use.clone(),
                fenced: facts.fenced,
                healthy: facts.healthy,
                revision: receipt.revision.clone(),
            };
            if !set.shown_by(&answered) {
                return Err(cx.fail(
                    format_args!("the facts a write answers after the agents' update to be {set}"),
                    self::facts(&answered),
                ));
            }
            cx.expect_holds(
                &node,
                attached,
                &receipt.revision,
                "after a write that read facts",
            )
            .await?;
        }
        Ok(())
    })
    .await
}
