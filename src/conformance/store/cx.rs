//! One run of one check: the harness, the nodes it added (removed whatever the outcome), and
//! the steps every check takes (read, write, expect), each failing with what it expected and
//! what it saw.

use std::fmt::{self, Debug};

use parking_lot::Mutex;

use super::StoreHarness;
use crate::conformance::report::Outcome;
use crate::conformance::{ConformanceFailure, Steps, Supported, fresh};
use crate::core::calls::reported_volumes::{ReportedVolume, ReportedVolumes};
use crate::domain::Domain;
use crate::traits::{NodeStatus, Revision, StoreError, WriteReceipt};

/// One run of one check: the harness, the check's steps, and the nodes to remove at the end.
pub(super) struct Cx<'h, D: Domain, H: ?Sized> {
    pub(super) harness: &'h H,
    pub(super) steps: Steps,
    added: Mutex<Vec<D::Node>>,
}

impl<'h, D: Domain, H: StoreHarness<D> + ?Sized> Cx<'h, D, H> {
    pub(super) fn new(harness: &'h H, check: &'static str) -> Self {
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
    pub(super) async fn scoped(&self, body: impl Future<Output = Outcome>) -> Outcome {
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

    pub(super) fn fail(
        &self,
        expected: impl fmt::Display,
        seen: impl fmt::Display,
    ) -> ConformanceFailure {
        self.steps.fail(expected, seen)
    }

    /// A fresh node, added through the harness.
    pub(super) async fn node(&self) -> Result<D::Node, ConformanceFailure> {
        let node = self.missing_node();
        self.steps
            .harness("add_node", self.harness.add_node(&node))
            .await?;
        self.added.lock().push(node.clone());
        Ok(node)
    }

    /// A fresh node id, never added.
    pub(super) fn missing_node(&self) -> D::Node {
        self.harness.node(fresh())
    }

    /// Removes `node` through the harness.
    pub(super) async fn remove(&self, node: &D::Node) -> Result<(), ConformanceFailure> {
        self.steps
            .harness("remove_node", self.harness.remove_node(node))
            .await?;
        self.added.lock().retain(|n| n != node);
        Ok(())
    }

    /// A fresh volume reported at `device` (`None`: no device).
    pub(super) fn volume(&self, device: Option<&str>) -> ReportedVolume<D> {
        ReportedVolume {
            volume: self.harness.volume(fresh()),
            device: device.map(Into::into),
        }
    }

    pub(super) async fn set_in_use(
        &self,
        node: &D::Node,
        in_use: Vec<D::Volume>,
    ) -> Result<Supported, ConformanceFailure> {
        self.steps
            .harness("set_in_use", self.harness.set_in_use(node, in_use))
            .await
    }

    pub(super) async fn set_fenced(
        &self,
        node: &D::Node,
        fenced: bool,
    ) -> Result<Supported, ConformanceFailure> {
        self.steps
            .harness("set_fenced", self.harness.set_fenced(node, fenced))
            .await
    }

    pub(super) async fn set_healthy(
        &self,
        node: &D::Node,
        healthy: bool,
    ) -> Result<Supported, ConformanceFailure> {
        self.steps
            .harness("set_healthy", self.harness.set_healthy(node, healthy))
            .await
    }

    pub(super) async fn read(
        &self,
        node: &D::Node,
    ) -> Result<Result<NodeStatus<D>, StoreError>, ConformanceFailure> {
        self.steps
            .call("read", self.harness.store().read(node))
            .await
    }

    /// Reads `node`, failing the check unless the read succeeds.
    pub(super) async fn read_ok(
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

    pub(super) async fn write(
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
    pub(super) async fn write_reading_facts_ok(
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
    pub(super) async fn write_ok(
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
    pub(super) async fn list(&self) -> Result<Vec<(D::Node, NodeStatus<D>)>, ConformanceFailure> {
        self.steps
            .call("list", self.harness.store().list())
            .await?
            .map_err(|e| self.fail("list to succeed", error(&e)))
    }

    /// Fails unless a read of `node` shows exactly `attached` at `revision`: what a write that
    /// landed, or one that changed nothing, must leave behind.
    pub(super) async fn expect_holds(
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
pub(super) fn list<D: Domain>(attached: &[ReportedVolume<D>]) -> String {
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
pub(super) fn error(e: &StoreError) -> String {
    format!("the error \"{e}\"")
}

/// A call's answer as a failure shows it.
pub(super) fn answer<T: Debug>(answer: &Result<T, StoreError>) -> String {
    match answer {
        Ok(value) => format!("success ({value:?})"),
        Err(e) => error(e),
    }
}

/// What a read must show for a fact the harness set to `value`: the value if the store holds
/// the fact, else `None`.
pub(super) fn held<T>(supported: Supported, value: T) -> Option<T> {
    match supported {
        Supported::Yes => Some(value),
        Supported::No => None,
    }
}
