//! Checks of the agents' facts (in use, fenced, healthy): read back as set, kept by the
//! controller's writes, never lost to a write racing an agent, and current when a write answers
//! them.

use std::fmt;

use super::StoreHarness;
use super::cx::{Cx, answer, held};
use crate::conformance::report::Outcome;
use crate::conformance::{ConformanceFailure, Supported};
use crate::core::calls::reported_volumes::ReportedVolume;
use crate::domain::Domain;
use crate::traits::{NodeStatus, Revision, StoreError};
// Only the checks' docs name the trait (they cite its promises).
#[cfg(doc)]
use crate::traits::NodeStatusStore;

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
/// agent wrote ("read fresh (never from a cache)", docs/embedding.md, "Writing a store"), each "`None`
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
