//! "Why is my pod stuck?": each (volume, node) pair's wait, read off the state and the same
//! rules a pass applies ([`decide_attach`], [`decide_detach`], the gate, the node's room, the
//! backend-load queue), without changing anything.

use super::attach::NoRoom;
use super::*;
use crate::core::explain::{
    PairExplanation, Placement, VolumeExplanation, Wait, WorkloadExplanation,
};
use crate::core::rules::decision::DELETED_NODE;

impl<D: Domain> Reconciler<D> {
    /// Why `volume` is where it is: for each node where it is wanted or attached, what that
    /// pair waits for and what will end the wait, as of `now` (the core's time, as passed to
    /// [`poll`](Self::poll)). Reads only.
    pub fn explain_volume(&self, volume: &D::Volume, now: Duration) -> VolumeExplanation<D> {
        let wanted: Vec<&D::Node> = self.desired.wanted(volume).map(|(n, _)| n).collect();
        let mut nodes: Vec<D::Node> = wanted.iter().map(|n| (*n).clone()).collect();
        nodes.extend(
            self.actual
                .attachments(volume)
                .iter()
                .map(|a| a.node.clone()),
        );
        nodes.sort_unstable();
        nodes.dedup();
        let known = self.desired.is_registered(volume) || !nodes.is_empty();
        let pairs = nodes
            .into_iter()
            .map(|node| {
                let is_wanted = wanted.contains(&&node);
                self.explain_pair(now, volume, node, is_wanted)
            })
            .collect();
        VolumeExplanation {
            volume: volume.clone(),
            known,
            recovering: self.is_recovering(),
            pairs,
        }
    }

    /// Why `workload` waits, if it does: its placement, and each of its volumes explained
    /// ([`explain_volume`](Self::explain_volume)), holders elsewhere included.
    pub fn explain_workload(
        &self,
        workload: &D::Workload,
        now: Duration,
    ) -> WorkloadExplanation<D> {
        let (placement, mut volumes) =
            if let Some((node, volumes)) = self.desired.placement(workload) {
                let placement = Placement::Placed { node: node.clone() };
                (placement, volumes.to_vec())
            } else if let Some(pending) = self.desired.pending(workload) {
                let placement = Placement::Pending {
                    node: pending.node,
                    missing: pending.missing,
                    since: pending.since,
                };
                (placement, pending.volumes)
            } else {
                (Placement::Unknown, Vec::new())
            };
        volumes.sort_unstable();
        volumes.dedup();
        WorkloadExplanation {
            workload: workload.clone(),
            placement,
            volumes: volumes
                .iter()
                .map(|v| self.explain_volume(v, now))
                .collect(),
            at: now,
        }
    }

    /// Explains, in an [`Event::WaitExplained`], each workload placed
    /// `Config::explain_waits_after` ago on the node it is still placed on, if it still waits.
    pub(super) fn explain_waits(&mut self, now: Duration) {
        for (workload, node) in self.waits.take_due(now) {
            let Some((placed, volumes)) = self.desired.placement(&workload) else {
                continue;
            };
            // Moved since: its new placement has an entry of its own.
            if *placed != node {
                continue;
            }
            // The usual case, without building an answer: everything is attached.
            let attached = volumes
                .iter()
                .all(|v| self.actual.state(v, &node) == AttachState::Attached);
            if attached {
                continue;
            }
            let explanation = self.explain_workload(&workload, now);
            if explanation.is_settled() {
                continue;
            }
            info!(workload = ?workload, node = ?node, %explanation, "a workload still waits for its volumes");
            self.events.push(Event::WaitExplained {
                workload,
                node,
                waited: self.config.explain_waits_after.unwrap_or_default(),
                explanation: Box::new(explanation),
            });
        }
    }

    fn explain_pair(
        &self,
        now: Duration,
        volume: &D::Volume,
        node: D::Node,
        wanted: bool,
    ) -> PairExplanation<D> {
        let record = self.actual.get(volume, &node);
        let attached = record.map(|a| a.state);
        let kind = if wanted {
            OpKind::Attach
        } else {
            OpKind::Detach
        };
        let key = gate_key_ref::<D>(self.access(volume), volume, &node);
        let last_failure = (self.calls.gate.last_failure(&key, kind)).or_else(|| {
            wanted
                .then(|| {
                    (self.calls.gate).last_failure(&GateKeyRef::<D>::NodeCapacity(&node), kind)
                })
                .flatten()
        });
        let (wait, since) = if self.is_recovering() {
            (Wait::Recovery, None)
        } else if let Some((kind, on, at)) = self.call_on(volume, &node) {
            let wait = Wait::Call {
                kind,
                node: on,
                since: at,
            };
            (wait, Some(at))
        } else if wanted {
            self.attach_wait(now, volume, &node, &key)
        } else {
            self.detach_wait(now, volume, &node, &key)
        };
        let last_failure = match wait {
            Wait::StatusWrite => {
                (self.calls.gate).last_failure(&GateKeyRef::<D>::Status(&node), OpKind::WriteStatus)
            }
            _ => last_failure,
        };
        PairExplanation {
            volume: volume.clone(),
            node,
            wanted,
            attached,
            wait,
            since,
            last_failure,
            at: now,
        }
    }

    /// The attach or detach of `volume` running on `node`, else one on another node that
    /// holds a single-node volume's key: its kind, node and planning time.
    fn call_on(&self, volume: &D::Volume, node: &D::Node) -> Option<(OpKind, D::Node, Duration)> {
        if !self.calls.in_flight.runs_on(volume) {
            return None;
        }
        let mut elsewhere = None;
        for (op, at) in self.calls.in_flight.planned() {
            let (InFlight::Attach {
                volume: v, node: n, ..
            }
            | InFlight::Detach {
                volume: v, node: n, ..
            }) = op
            else {
                continue;
            };
            if v != volume {
                continue;
            }
            if n == node {
                return Some((op.kind(), n.clone(), at));
            }
            if op.holds_volume() {
                elsewhere = Some((op.kind(), n.clone(), at));
            }
        }
        elsewhere
    }

    /// A wanted pair's wait: [`decide_attach`], then room on the node and the backend-load
    /// queue, as [`consider_attach`](Self::consider_attach) asks them.
    fn attach_wait(
        &self,
        now: Duration,
        volume: &D::Volume,
        node: &D::Node,
        key: &GateKeyRef<'_, D>,
    ) -> (Wait<D>, Option<Duration>) {
        let Some(spec) = self.desired.spec(volume) else {
            return (Wait::Unknown, None);
        };
        let single_node = spec.access == Access::SingleNode;
        let (here, elsewhere) = self.attach_view(volume, node, single_node);
        let facts = self.attach_facts(now, key, volume, here, elsewhere, single_node);
        match decide_attach(&facts) {
            // The node's agent mounts only what the store lists for it.
            Attach::Attached { .. } if !self.listed(volume, node) => (Wait::StatusWrite, None),
            Attach::Attached { .. } => (Wait::Settled, None),
            // Nothing of the volume runs here (`call_on` looked): a status write or a read of
            // the key's node, or an operation whose record is not the volume's.
            Attach::Running => (Wait::NextPass, None),
            Attach::RetryAt(until) => (
                Wait::Backoff {
                    kind: OpKind::Attach,
                    until,
                },
                None,
            ),
            Attach::HeldBy(holders) => (
                Wait::HeldElsewhere {
                    holders: holders.into_vec(),
                },
                None,
            ),
            Attach::Go if !spec.attach_required => (Wait::NextPass, None),
            Attach::Go => {
                let no_room = here.is_none().then(|| self.room(now, node, spec.driver));
                match no_room.flatten() {
                    Some(NoRoom::BackendSaidFull { until }) => {
                        (Wait::BackendSaidFull { until }, None)
                    }
                    Some(NoRoom::Limit {
                        driver,
                        held,
                        limit,
                    }) => (
                        Wait::NodeFull {
                            driver,
                            held,
                            limit,
                        },
                        None,
                    ),
                    None => self.queued_or_next(Class::Attach, volume, node),
                }
            }
        }
    }

    /// Whether the store lists `volume` for `node`'s agent: a node object gone lists nothing
    /// and waits for nothing.
    fn listed(&self, volume: &D::Volume, node: &D::Node) -> bool {
        self.status.is_missing(node)
            || self
                .status
                .stored(node)
                .is_some_and(|stored| stored.contains(volume))
    }

    /// Queued under backend load since when, else due at the next pass.
    fn queued_or_next(
        &self,
        class: Class,
        volume: &D::Volume,
        node: &D::Node,
    ) -> (Wait<D>, Option<Duration>) {
        match self.calls.admission.queued_since(class, volume, node) {
            Some(since) => {
                let kind = match class {
                    Class::Attach => OpKind::Attach,
                    Class::Detach => OpKind::ReadStatus,
                };
                (Wait::BackendLoad { kind, since }, Some(since))
            }
            None => (Wait::NextPass, None),
        }
    }

    /// A pair no longer wanted: its detach's stage, else the gate and [`decide_detach`] as
    /// [`consider_detach`](Self::consider_detach) asks them. `since` is when the detach was
    /// first wanted.
    fn detach_wait(
        &self,
        now: Duration,
        volume: &D::Volume,
        node: &D::Node,
        key: &GateKeyRef<'_, D>,
    ) -> (Wait<D>, Option<Duration>) {
        let Some(record) = self.actual.get(volume, node) else {
            return (Wait::Settled, None);
        };
        let requested = self.actual.detach_requested_at(volume, node);
        let progress = record.detach;
        let wait = match progress.release {
            Release::Pending | Release::BehindVerify => Wait::ReleaseVerify,
            Release::None => match progress.stage {
                DetachStage::AwaitingAck => Wait::StoreAck,
                DetachStage::ReadWanted { .. } | DetachStage::Reading { .. } => Wait::FreshRead,
                // Cleared for the next pass; a call planned went to `call_on`.
                DetachStage::Cleared { .. } | DetachStage::Detaching => Wait::NextPass,
                DetachStage::Idle => return self.idle_detach_wait(now, volume, node, key),
            },
        };
        (wait, requested)
    }

    /// A detach not yet under way: its backoff, its place in the backend-load queue, or what
    /// [`decide_detach`] waits for.
    fn idle_detach_wait(
        &self,
        now: Duration,
        volume: &D::Volume,
        node: &D::Node,
        key: &GateKeyRef<'_, D>,
    ) -> (Wait<D>, Option<Duration>) {
        let requested = self.actual.detach_requested_at(volume, node);
        if let Err(Some(until)) = self.may_start(key, OpKind::Detach, now) {
            let wait = Wait::Backoff {
                kind: OpKind::Detach,
                until,
            };
            return (wait, requested);
        }
        if let (wait @ Wait::BackendLoad { .. }, since) =
            self.queued_or_next(Class::Detach, volume, node)
        {
            return (wait, since);
        }
        let Some(facts) = self.detach_facts_now(now, volume, node) else {
            return (Wait::Settled, None);
        };
        let wait = match decide_detach(&facts) {
            Detach::Wait { wake } if facts.held_back => Wait::HeldBackByRead { forced_at: wake },
            Detach::Wait { wake } => Wait::Unmount { forced_at: wake },
            Detach::Blocked { reason, .. } if reason == DELETED_NODE => Wait::NodeDeleted,
            Detach::Blocked { .. } => Wait::Fence {
                checking_machine: facts.machine_fencing,
            },
            Detach::Go { wake, .. } if facts.held_back => Wait::HeldBackByRead { forced_at: wake },
            Detach::Go {
                step: Step::AwaitStore,
                ..
            } => Wait::StoreAck,
            Detach::Go {
                step: Step::ReadNode,
                ..
            } => Wait::FreshRead,
            Detach::Go {
                step: Step::Detach, ..
            } => Wait::NextPass,
        };
        (wait, requested)
    }
}
