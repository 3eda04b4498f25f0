//! One attachment's detach: each change of its state ([`DetachProgress`]) made in one place,
//! the look that decides its next step, and what a human is told of it (blocked, stuck).

use super::*;
use crate::core::state::actual::ActualNode;

impl<D: Domain> Reconciler<D> {
    /// The record of (`volume`, `node`) is gone: nothing is attached there any more.
    pub(super) fn detached(&mut self, volume: &D::Volume, node: &D::Node) {
        self.changed(volume, node);
        // A volume wanted elsewhere (a move) keeps its entry for the attach that comes next.
        // One wanted nowhere loses it, so that idle volumes hold none: the next look at a
        // volume that stops being wanted drops it (`reconcile_volume_with`).
        let keep_record = !self.desired.wanted_on(volume).is_empty();
        if let Some(gone) = self.actual.set_detached(volume, node, keep_record) {
            // The record's states leave the indexes with it.
            self.detaches
                .moved(volume, node, gone.stage, DetachStage::Idle);
            self.detaches
                .release_changed(volume, node, gone.release, Release::None);
            self.detaches.told_changed(gone.told, Told::default());
        }
        // A volume left the node: whatever full answer it gave is over, and the volumes
        // waiting for room there look again.
        if self.calls.capacity.clear_full(node) {
            self.calls
                .gate
                .succeeded(&GateKeyRef::<D>::NodeCapacity(node), OpKind::Attach);
        }
        self.room_freed(node);
    }

    /// Moves the detach of (`volume`, `node`) to `to`, and its entry in the indexes with it.
    /// No record, no detach: nothing changes.
    pub(super) fn move_detach(&mut self, volume: &D::Volume, node: &D::Node, to: DetachStage) {
        if let Some(a) = self.actual.get_mut(volume, node) {
            let from = std::mem::replace(&mut a.detach.stage, to);
            self.detaches.moved(volume, node, from, to);
        }
    }

    /// The detach's stage, `Idle` without a record.
    pub(super) fn detach_stage(&self, volume: &D::Volume, node: &D::Node) -> DetachStage {
        self.actual
            .get(volume, node)
            .map_or(DetachStage::Idle, |a| a.detach.stage)
    }

    /// Sets an operator's release of (`volume`, `node`).
    pub(super) fn set_release(&mut self, volume: &D::Volume, node: &D::Node, to: Release) {
        if let Some(a) = self.actual.get_mut(volume, node) {
            let from = std::mem::replace(&mut a.detach.release, to);
            self.detaches.release_changed(volume, node, from, to);
        }
    }

    /// Notes that a human was told `what` of this detach; returns whether it is news in this
    /// episode (and an event should go out). Without a record it is always news.
    pub(super) fn tell(&mut self, volume: &D::Volume, node: &D::Node, what: Told) -> bool {
        let Some(a) = self.actual.get_mut(volume, node) else {
            return true;
        };
        let from = a.detach.told;
        let news = a.detach.told.tell(what);
        self.detaches.told_changed(from, a.detach.told);
        news
    }

    /// Forgets that a human was told `what`: the next episode tells it again.
    pub(super) fn forget_told(&mut self, volume: &D::Volume, node: &D::Node, what: Told) {
        if let Some(a) = self.actual.get_mut(volume, node) {
            let from = a.detach.told;
            a.detach.told.forget(what);
            self.detaches.told_changed(from, a.detach.told);
        }
    }

    /// Whether the indexes of detaches are exactly what the records' states derive; `Err`
    /// names the first disagreement. Scans every record: for tests, the model check and the
    /// fuzzers (debug builds of small worlds also check it after every pass).
    #[cfg(any(test, feature = "internals", feature = "testkit"))]
    pub fn check_detach_indexes(&self) -> Result<(), String> {
        self.detaches.check(&self.actual)
    }

    /// Gathers what the core knows about a detach of (`volume`, `node`), decides it
    /// ([`decide_detach`]) and moves the detach on by one step.
    pub(super) fn consider_detach(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        node: D::Node,
        spec: SpecFacts,
        ops: &mut Vec<Operation<D>>,
    ) {
        let released = self.detaches.has_releases()
            && (self.actual.get(volume, &node)).is_some_and(|a| a.detach.release != Release::None);
        if released && spec.attach_required {
            // Forgetting an attachment is irreversible: a verify of the node started after
            // the release decides it, not this look.
            return self.await_release_verify(now, volume, &node, ops);
        }
        let key = gate_key_ref::<D>(spec.access, volume, &node);
        let gate = if self.runs_as_single_node(&key, volume) {
            Err(None)
        } else {
            self.may_start(&key, OpKind::Detach, now)
        };
        match gate {
            Ok(()) => {}
            // Its end has the volume looked at again: a detach's always, and an attach's
            // because this look, begun while it ran, asked for it (`reconcile_volume_with`).
            // (Attaches are planned after detaches, so none was planned by this look.)
            Err(None) => return,
            // A released attachment makes no call: the failing detach's backoff is moot.
            Err(Some(_)) if released => {}
            Err(Some(retry)) => return self.schedule.wake_volume_at(retry, volume.clone()),
        }
        let Some((facts, reported)) = self.detach_facts(now, volume, &node) else {
            return;
        };
        let decision = decide_detach(&facts);
        let (Detach::Wait { wake } | Detach::Blocked { wake, .. } | Detach::Go { wake, .. }) =
            decision;
        if let Some(at) = wake {
            self.schedule.wake_volume_at(at, volume.clone());
        }
        let (force, step) = match decision {
            Detach::Wait { .. } => return,
            Detach::Blocked { reason, .. } => return self.report_blocked(volume, &node, reason),
            Detach::Go { force, step, .. } => (force, step),
        };
        if reported {
            // C5: first make the node stop listing it, so its agent does not start mounting it.
            self.actual.set_withheld(volume, &node, true);
        }
        match step {
            // Something certain ends the wait: marking the node makes the next status pass
            // write it (the list now differs from what the store holds or is unknown), or a
            // write already in flight is acknowledged, or a failed write's retry timer fires.
            // An attach that landed after its workload left is never listed in the store, so
            // it needs no write at all and is settled at once (issue 9, bug 1).
            Step::AwaitStore => {
                self.status.mark(node.clone());
                self.move_detach(volume, &node, DetachStage::AwaitingAck);
            }
            Step::ReadNode => self.read_node_for(now, volume, node, spec, force, released, ops),
            Step::Detach => self.plan_detach(now, volume, node, spec, force, released, ops),
        }
    }

    /// What [`decide_detach`] needs of (`volume`, `node`), and whether the node reports the
    /// volume now; `None` without a record. Takes the record's clearance, which serves this
    /// look only, starts the unmount wait's clock and wants a machine check where one helps.
    pub(super) fn detach_facts(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        node: &D::Node,
    ) -> Option<(DetachFacts, bool)> {
        let bugs = self.bugs();
        let record = RecordFacts::of(self.actual.get(volume, node)?, bugs);
        let clearance = match record.stage {
            DetachStage::Cleared { force } => {
                let at = self.detaches.cleared_at(node).unwrap_or(now);
                self.move_detach(volume, node, DetachStage::Idle);
                Some((force, self.fresh_until(at)))
            }
            _ => None,
        };
        let unmount_deadline = self
            .actual
            .request_detach(volume, node, now)
            .saturating_add(self.config.max_wait_for_unmount);
        let node_facts = self.actual.node(node);
        let machine_off = machine::held_detach(
            &mut self.calls.machine,
            self.config.machine_fencing.as_ref(),
            now,
            (volume, node),
            node_facts,
            record.held_back,
        );
        let looked = Looked {
            now,
            record,
            node_facts,
            clearance,
            unmount_deadline,
            machine_off,
        };
        Some((
            looked.facts(&self.config, &self.status, bugs, (volume, node)),
            record.reported,
        ))
    }

    /// [`detach_facts`](Self::detach_facts) without what that look takes or starts: no
    /// clearance taken, the unmount wait's end as far as it is known, the machine's last
    /// answer. An explanation reads these without changing anything.
    pub(super) fn detach_facts_now(
        &self,
        now: Duration,
        volume: &D::Volume,
        node: &D::Node,
    ) -> Option<DetachFacts> {
        let bugs = self.bugs();
        let record = RecordFacts::of(self.actual.get(volume, node)?, bugs);
        let node_facts = self.actual.node(node);
        let unmount_deadline = (self.actual.detach_requested_at(volume, node))
            .unwrap_or(now)
            .saturating_add(self.config.max_wait_for_unmount);
        let machine_off = machine::counts_off(
            &self.calls.machine,
            self.config.machine_fencing.as_ref(),
            now,
            node,
            node_facts,
        );
        let looked = Looked {
            now,
            record,
            node_facts,
            clearance: None,
            unmount_deadline,
            machine_off,
        };
        Some(looked.facts(&self.config, &self.status, bugs, (volume, node)))
    }

    /// The store settled and the detach needs fresh facts: the facts the node's last status
    /// write read, if they are current, else a fresh read of the node, planned by its next
    /// status pass.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn read_node_for(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        node: D::Node,
        spec: SpecFacts,
        force: Option<ForceReason>,
        released: bool,
        ops: &mut Vec<Operation<D>>,
    ) {
        // No longer waiting for the store's acknowledgement.
        if self.detach_stage(volume, &node) == DetachStage::AwaitingAck {
            self.move_detach(volume, &node, DetachStage::Idle);
        }
        // A claim makes no backend call: backend load does not hold it back.
        if spec.attach_required
            && !self
                .calls
                .admission
                .admit(Class::Detach, volume, &node, now)
        {
            // Queued: a pass admits it to its read when its turn comes.
            return;
        }
        match self.judge_on_written_facts(now, volume, &node, force) {
            // The write that took the volume off the node's list read the facts: they justify
            // the detach as a read after it would, and it goes in this pass.
            Some(Ok(())) => self.plan_detach(now, volume, node, spec, force, released, ops),
            Some(Err(reason)) => self.hold_back(now, volume, &node, reason),
            None => {
                // Nothing irreversible on a view of unknown age: the node's next status pass
                // plans the read (this pass, if nothing runs for the node).
                self.status.mark(node.clone());
                self.move_detach(volume, &node, DetachStage::ReadWanted { force });
            }
        }
    }

    /// Fresh facts justified the detach (forced for `force`): plans its call, or releases a
    /// claim, or forgets a released claim.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn plan_detach(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        owned: D::Node,
        spec: SpecFacts,
        force: Option<ForceReason>,
        released: bool,
        ops: &mut Vec<Operation<D>>,
    ) {
        let node = &owned;
        if self.detach_stage(volume, node) == DetachStage::AwaitingAck {
            self.move_detach(volume, node, DetachStage::Idle);
        }
        if spec.attach_required && !self.calls.admission.call_detach(volume, node, now) {
            // Its read began before an earlier episode of it ended: queued, it reads again.
            return;
        }
        self.forget_told(volume, node, Told::BLOCKED);
        self.forget_told(volume, node, Told::WAITING_FOR_UNMOUNT);
        if released {
            // A claim's (an attachment's release is decided by a verify, above).
            self.set_release(volume, node, Release::None);
            if force == Some(ForceReason::OutOfService) {
                // The operator vouched the node no longer uses it, and a fresh read just
                // showed the node still fenced: the backend knows nothing of a claim, so
                // forget it, with no call.
                info!(volume = ?volume, node = ?node, "forgetting a released claim");
                self.detached(volume, node);
                self.events.push(Event::VolumeReleased {
                    volume: volume.clone(),
                    node: node.clone(),
                });
                self.schedule.mark(volume.clone());
                return;
            }
            // The node is no longer fenced: the release is void, and the detach goes as any.
        }
        if !spec.attach_required {
            // A claim is released, not detached: the same proofs (the node's list acknowledged
            // without it, a fresh read justifying it), and no backend call.
            debug!(volume = ?volume, node = ?node, ?force, "releasing a claim-only volume");
            self.detached(volume, node);
            self.events.push(Event::ClaimReleased {
                volume: volume.clone(),
                node: node.clone(),
                force,
            });
            self.schedule.mark(volume.clone());
            return;
        }
        let Some(payload) = self.payload_for_call(volume, spec.at) else {
            // Not reached (see `payload_for_call`); handled as `reconcile_volume` handles a
            // volume with no spec, with the detach slot given back.
            self.calls.admission.give_back(Class::Detach);
            return self.report_blocked(volume, node, UNREGISTERED);
        };
        let key = gate_key_ref::<D>(spec.access, volume, node);
        self.take_key(&key);
        let id = self.next_op_id();
        self.calls.admission.started(Class::Detach, id, node, now);
        debug!(%id, volume = ?volume, node = ?node, ?force, "planning detach");
        self.move_detach(volume, node, DetachStage::Detaching);
        self.calls.in_flight.insert(
            id,
            InFlight::Detach {
                volume: volume.clone(),
                node: node.clone(),
                access: spec.access,
                force,
            },
            now,
        );
        ops.push(Operation::Detach {
            id,
            volume: volume.clone(),
            node: owned,
            payload,
            force,
        });
    }

    /// An operator's release of (`volume`, `node`) is pending: a verify of the node planned
    /// after it decides it ([`verify_finished`](Self::verify_finished)): gone, the attachment
    /// is forgotten; still there, the release is dropped and the detach goes as any. This
    /// plans that verify unless one runs (its end looks at the volume again) or a failed one
    /// backs off (the volume wakes when it ends). No detach is planned meanwhile. The wait is
    /// listed by [`stuck_detaches`](Self::stuck_detaches); on a node the backend cannot reach
    /// it lasts as long as that.
    pub(super) fn await_release_verify(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        node: &D::Node,
        ops: &mut Vec<Operation<D>>,
    ) {
        // The detach is wanted, whatever decides it: its wait counts from now at the latest.
        self.actual.request_detach(volume, node, now);
        match self
            .calls
            .gate
            .may_start(&GateKeyRef::<D>::Verify(node), OpKind::Verify, now)
        {
            Ok(()) => self.plan_verify(now, node.clone(), ops),
            Err(None) => {}
            Err(Some(retry)) => self.schedule.wake_volume_at(retry, volume.clone()),
        }
    }

    /// A copy of `volume`'s payload, for a call about to be planned. `reconcile_volume` found
    /// the volume's spec at the start of the same look, at position `at`, and only its own end
    /// forgets a spec, so this finds it (there, unless an entry moved).
    pub(super) fn payload_for_call(&self, volume: &D::Volume, at: usize) -> Option<D::Payload> {
        let payload = (self.desired.spec_at(at, volume)).map(|spec| spec.payload.clone());
        debug_assert!(payload.is_some(), "a volume decided on has a spec");
        payload
    }

    /// Drops what a detach of (`volume`, `node`) waited on: a pending fresh read, a
    /// clearance, a reported hold-back. A read already running for it decides nothing for it
    /// any more (it answers only detaches still reading or wanting a read).
    pub(super) fn forget_detach_checks(&mut self, volume: &D::Volume, node: &D::Node) {
        if let DetachStage::ReadWanted { .. } | DetachStage::Cleared { .. } =
            self.detach_stage(volume, node)
        {
            self.move_detach(volume, node, DetachStage::Idle);
        }
        self.forget_told(volume, node, Told::WAITING_FOR_UNMOUNT);
    }

    /// Tells a human, once per episode, that a detach waits for something only they can do.
    pub(super) fn report_blocked(&mut self, volume: &D::Volume, node: &D::Node, reason: &str) {
        if self.tell(volume, node, Told::BLOCKED) {
            self.events.push(Event::DetachBlocked {
                volume: volume.clone(),
                node: node.clone(),
                reason: reason.to_string(),
            });
        }
    }

    /// Names, once per episode, every detach wanted for [`Config::stuck_after`] or longer and
    /// not done; looked at on each periodic sync.
    pub(super) fn report_stuck(&mut self, now: Duration) {
        let stuck_after = self.config.stuck_after;
        let stuck = self.stuck_detaches(now);
        for s in stuck.into_iter().filter(|s| s.waited >= stuck_after) {
            if self.tell(&s.volume, &s.node, Told::STUCK) {
                warn!(volume = ?s.volume, node = ?s.node, waited = ?s.waited, "a detach is stuck");
                self.events.push(Event::DetachStuck {
                    volume: s.volume,
                    node: s.node,
                    waited: s.waited,
                });
            }
        }
    }

    /// Every attachment whose detach was wanted [`Config::stuck_after`] or more before `now`
    /// and has not happened (the backend keeps failing it, the node still mounts it, it waits
    /// for a fence), oldest first. Such a volume stays attached where no workload needs it,
    /// and a single-node one keeps every other node waiting: an operator looks at these (and
    /// may [release](Input::ReleaseVolume) one from a fenced node). An attachment whose
    /// release is pending is listed however long it has waited, with
    /// [`release_pending`](StuckDetach::release_pending) set: no verify of its node has
    /// answered since the release.
    pub fn stuck_detaches(&self, now: Duration) -> Vec<StuckDetach<D>> {
        let mut stuck: Vec<StuckDetach<D>> = self
            .actual
            .detach_requests()
            .filter_map(|(volume, node, since)| {
                let waited = now.saturating_sub(since);
                let release_pending = self.detaches.has_releases()
                    && (self.actual.get(volume, node))
                        .is_some_and(|a| a.detach.release != Release::None)
                    && self.desired.spec(volume).is_none_or(|s| s.attach_required);
                (waited >= self.config.stuck_after || release_pending).then(|| StuckDetach {
                    volume: volume.clone(),
                    node: node.clone(),
                    waited,
                    release_pending,
                })
            })
            .collect();
        stuck.sort_by(|a, b| {
            b.waited
                .cmp(&a.waited)
                .then_with(|| (&a.node, &a.volume).cmp(&(&b.node, &b.volume)))
        });
        stuck
    }
}

/// What a detach's look reads of the attachment's record, read once.
#[derive(Clone, Copy)]
struct RecordFacts {
    stage: DetachStage,
    reported: bool,
    /// Upstream's C4: an assumed mount stays until the report changes.
    sticky_mount: bool,
    /// A fresh read held the detach back ([`Told::WAITING_FOR_UNMOUNT`]).
    held_back: bool,
}

impl RecordFacts {
    #[inline(always)]
    fn of<D: Domain>(a: &Attachment<D>, bugs: UpstreamBugs) -> Self {
        #[cfg(feature = "upstream-bugs")]
        let sticky_mount = bugs.c4_sticky_assumed_mount && a.assumed_mounted;
        #[cfg(not(feature = "upstream-bugs"))]
        let sticky_mount = {
            let _ = bugs;
            false
        };
        RecordFacts {
            stage: a.detach.stage,
            reported: a.is_reported(),
            sticky_mount,
            held_back: a.detach.told.has(Told::WAITING_FOR_UNMOUNT),
        }
    }
}

/// Everything a look gathered for [`decide_detach`], with the node's facts looked up once.
struct Looked<'a, D: Domain> {
    now: Duration,
    record: RecordFacts,
    node_facts: Option<&'a ActualNode<D>>,
    clearance: Option<(Option<ForceReason>, Duration)>,
    unmount_deadline: Duration,
    machine_off: bool,
}

impl<D: Domain> Looked<'_, D> {
    #[inline(always)]
    fn facts(
        &self,
        config: &Config,
        status: &StatusBook<D>,
        bugs: UpstreamBugs,
        (volume, node): (&D::Volume, &D::Node),
    ) -> DetachFacts {
        let n = self.node_facts;
        let present = n.is_some_and(|n| n.present);
        DetachFacts {
            now: self.now,
            unmount_deadline: self.unmount_deadline,
            present,
            healthy: n.is_some_and(|n| n.healthy),
            fenced: n.is_some_and(|n| n.fenced),
            in_use: n.and_then(|n| n.reports_in_use(volume)),
            force_allowed: config.force_detach_on_timeout || bugs.c3_force_detach_unfenced,
            deleted_node_is_fenced: config.deleted_node_is_fenced,
            machine_off: self.machine_off,
            machine_fencing: config.machine_fencing.is_some(),
            held_back: self.record.held_back,
            sticky_mount: self.record.sticky_mount,
            store_settled: bugs.c5_detach_before_status_ack || !present || {
                let (missing, absent) = status.missing_and_absent(node, volume);
                // L1, our own leak put back: a volume never listed waits for a write anyway.
                missing || ((self.record.reported || !bugs.l1_await_unplanned_ack) && absent)
            },
            clearance: self.clearance,
        }
    }
}
