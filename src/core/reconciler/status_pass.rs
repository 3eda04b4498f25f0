//! The node-status updater: a node's next store call (a compare-and-set write of its list, or
//! a fresh read when detaches wait for one), and what each call's end settles: the detaches
//! that waited for an acknowledgement, and the fresh reads that clear or hold back a detach.

use super::*;

impl<D: Domain> Reconciler<D> {
    /// The status write planned as `id` finished: `Ok` with the node's new revision.
    ///
    /// A [`StoreError::Conflict`] (someone else wrote since the revision the write expected)
    /// makes the next write start with a fresh read, at once; only repeated conflicts back off.
    /// An error that may have taken effect ([`StoreError::Uncertain`], a timeout) leaves what
    /// the store holds unknown, so no detach waiting for it goes ahead until a later write or
    /// read settles it (C5); one that certainly did nothing leaves it as it was. Both back off.
    ///
    /// When the store read the node's facts with the write
    /// ([`NodeStatusStore::write_reading_facts`](crate::traits::NodeStatusStore::write_reading_facts)),
    /// they judge the detaches that waited for it in the next pass, instead of a fresh read.
    /// Only that pass: facts are as fresh as the write, and a later pass reads.
    pub(super) fn status_written_with(
        &mut self,
        now: Duration,
        id: OpId,
        result: Result<WriteReceipt<D>, StoreError>,
    ) -> Result<(), ReconcilerError<D>> {
        let InFlight::WriteStatus { node, object } = self.take_op(id, OpKind::WriteStatus)? else {
            unreachable!("kind checked by take_op");
        };
        let key = GateKeyRef::<D>::Status(&node);
        if !self.status.is_object(&node, object) {
            // Written to a node object deleted since: this one's list is still unknown, and
            // the next look reads it and writes it afresh.
            debug!(node = ?node, "a status write answered for a node object deleted since");
            self.calls.gate.succeeded(&key, OpKind::WriteStatus);
            self.status.write_superseded(&node);
            self.status_settled(&node);
            return Ok(());
        }
        match result {
            Ok(WriteReceipt { revision, facts }) => {
                self.calls.gate.succeeded(&key, OpKind::WriteStatus);
                if let Some(facts) = facts {
                    // The detaches that waited for this write are judged on its facts, which
                    // serve only the next pass: their volumes are looked at there, even if
                    // it takes only a share of a round.
                    if let Some(waiting) = self.ack_ended(&node) {
                        self.schedule.mark_all_next(waiting);
                    }
                    self.detaches.keep_written_facts(
                        node.clone(),
                        WrittenFacts {
                            facts,
                            revision: revision.clone(),
                            object,
                            at: now,
                        },
                    );
                }
                // The list the store held before: given back for a later write to fill.
                if let Some(replaced) = self.status.write_acked(&node, revision) {
                    replaced.give_back(&mut self.scratch.list_spares);
                }
            }
            Err(StoreError::NotFound { .. }) => {
                self.calls.gate.succeeded(&key, OpKind::WriteStatus);
                self.status.not_found(&node);
            }
            Err(StoreError::Conflict { .. }) => {
                debug!(node = ?node, "status write conflicted; reading the node fresh");
                if self.status.write_conflicted(&node) >= CONFLICTS_BEFORE_BACKOFF {
                    let retry = self.calls.gate.failed(
                        key.to_owned(),
                        OpKind::WriteStatus,
                        now,
                        &"the write conflicted three times in a row",
                    );
                    self.schedule.wake_node_at(retry, node.clone());
                } else {
                    self.calls.gate.succeeded(&key, OpKind::WriteStatus);
                }
            }
            Err(error) => {
                warn!(node = ?node, %error, "writing node status failed");
                let retry =
                    self.calls
                        .gate
                        .failed(key.to_owned(), OpKind::WriteStatus, now, &error);
                self.schedule.wake_node_at(retry, node.clone());
                self.status
                    .write_failed(&node, error.may_have_taken_effect());
            }
        }
        self.status_settled(&node);
        Ok(())
    }

    /// The fresh read of a node's status planned as `id` finished.
    ///
    /// What it shows becomes what the store is known to hold (list and revision), and it
    /// decides each detach that waited for it: a justified one is planned
    /// by the next pass; one held back (say, the node's agent still reports the volume in use)
    /// is no failure: it costs no backoff, no failure event and no status write, and is looked
    /// at again on the node's next report or after [`Config::unmount_recheck`], with one
    /// [`Event::WaitingForUnmount`] per episode. A read that failed decides nothing: the node
    /// is read again after a backoff.
    pub(super) fn status_read(
        &mut self,
        now: Duration,
        id: OpId,
        result: Result<NodeStatus<D>, StoreError>,
    ) -> Result<(), ReconcilerError<D>> {
        let InFlight::ReadStatus {
            node,
            object,
            checks,
            from_cache,
        } = self.take_op(id, OpKind::ReadStatus)?
        else {
            unreachable!("kind checked by take_op");
        };
        let key = GateKeyRef::<D>::Status(&node);
        if from_cache {
            self.calls.gate.succeeded(&key, OpKind::ReadStatus);
            if let Ok(cached) = result {
                // `report` is in volume order already.
                let report = self.actual.report(&node);
                let seen = ReportedVolumes::from(cached.attached);
                if seen == report {
                    // The copy matches: upstream clears its "update needed" flag and writes
                    // nothing, whatever the store really holds (122413).
                    debug!(node = ?node, "C6: status write skipped on a cached copy");
                    self.status_turns.cache_consulted.remove(&node);
                    self.status
                        .read_owned(node.clone(), report.to_vec(), &cached.revision);
                }
            }
            self.status_settled(&node);
            return Ok(());
        }
        if !self.status.is_object(&node, object) {
            // Read across the deletion of the node object it was planned for: what it found
            // may be the old object's. It decides nothing.
            debug!(node = ?node, "a status read answered across its node object's deletion");
            self.calls.gate.succeeded(&key, OpKind::ReadStatus);
            // As at the deletion: their volumes are looked at again, and their detaches ask
            // for a read of their own.
            for (volume, _) in checks {
                if let DetachStage::Reading { .. } = self.detach_stage(&volume, &node) {
                    self.move_detach(&volume, &node, DetachStage::Idle);
                }
                self.schedule.mark(volume);
            }
            self.status_settled(&node);
            return Ok(());
        }
        let status = match result {
            Ok(status) => {
                self.calls.gate.succeeded(&key, OpKind::ReadStatus);
                self.status
                    .read(node.clone(), &status.attached, &status.revision);
                Some(status)
            }
            Err(StoreError::NotFound { .. }) => {
                self.calls.gate.succeeded(&key, OpKind::ReadStatus);
                self.status.not_found(&node);
                None
            }
            Err(error) => {
                warn!(node = ?node, %error, "reading node status failed");
                let retry = self
                    .calls
                    .gate
                    .failed(key.to_owned(), OpKind::ReadStatus, now, &error);
                self.schedule.wake_node_at(retry, node.clone());
                // The detaches keep waiting for the next read, planned when the retry is due.
                for (volume, force) in checks {
                    if let DetachStage::Reading { .. } = self.detach_stage(&volume, &node) {
                        self.move_detach(&volume, &node, DetachStage::ReadWanted { force });
                    }
                }
                self.status_settled(&node);
                return Ok(());
            }
        };
        // Upstream's C5 detaches whatever the store lists.
        let rewritable =
            self.actual.node_present(&node) && !self.bugs().c5_detach_before_status_ack;
        self.detaches.read_answered(&node, now);
        for (volume, force) in checks {
            // It answers the detaches still waiting for a read: not one wanted again since,
            // or gone back to wait for the store.
            match self.detach_stage(&volume, &node) {
                DetachStage::Reading { .. } | DetachStage::ReadWanted { .. } => {
                    self.move_detach(&volume, &node, DetachStage::Idle);
                }
                _ => continue,
            }
            if rewritable
                && status
                    .as_ref()
                    .is_some_and(|s| s.attached.iter().any(|r| r.volume == volume))
            {
                // The store lists the volume for the node again (another writer): its agent
                // may start mounting it, so the read justifies nothing. The volume goes back
                // to waiting for the store to acknowledge a list without it, then a new read.
                // (A deleted node's status is never rewritten: the read's other facts decide.)
                self.schedule.mark(volume);
                continue;
            }
            match judge_detach(status.as_ref().map(Fresh::from), &volume, force) {
                Ok(()) => {
                    self.move_detach(&volume, &node, DetachStage::Cleared { force });
                    // The clearance serves only the next pass.
                    self.schedule.mark_next(volume);
                }
                Err(reason) => self.hold_back(now, &volume, &node, reason),
            }
        }
        self.detaches.read_judged(&node);
        self.status_settled(&node);
        Ok(())
    }

    /// A fresh read, or the facts a write read, did not justify the detach of `volume` from
    /// `node`: no failure (no backoff, no failure event, no status write). It is looked at
    /// again on the node's next report or after [`Config::unmount_recheck`], with one
    /// [`Event::WaitingForUnmount`] per episode.
    pub(super) fn hold_back(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        node: &D::Node,
        reason: String,
    ) {
        debug!(volume = ?volume, node = ?node, %reason, "detach held back by fresh facts");
        if self.tell(volume, node, Told::WAITING_FOR_UNMOUNT) {
            self.events.push(Event::WaitingForUnmount {
                volume: volume.clone(),
                node: node.clone(),
                reason,
            });
        }
        self.schedule.wake_volume_at(
            now.saturating_add(self.config.unmount_recheck),
            volume.clone(),
        );
    }

    /// Until when facts read at `at` (a fresh read's clearance, the facts a write read) may
    /// justify a detach: the next pass, due a reconcile period later, with
    /// [`CLEARANCE_SLACK`].
    pub(super) fn fresh_until(&self, at: Duration) -> Duration {
        at.saturating_add(self.config.reconcile_period)
            .saturating_add(CLEARANCE_SLACK)
    }

    /// The judgement of the facts `node`'s last status write read, if that write was
    /// acknowledged since the last pass, not longer ago than a read's clearance lasts, and is
    /// still what the core knows the store holds (the same node object, the same revision, a
    /// list without `volume`): `None` when there are no such facts, and the detach needs a
    /// read.
    pub(super) fn judge_on_written_facts(
        &self,
        now: Duration,
        volume: &D::Volume,
        node: &D::Node,
        force: Option<ForceReason>,
    ) -> Option<Result<(), String>> {
        let written = self.detaches.written_facts(node)?;
        let current = now <= self.fresh_until(written.at)
            && self.status.is_object(node, written.object)
            && self.status.revision(node) == Some(&written.revision)
            && self.status.confirmed_absent(node, volume);
        if !current {
            return None;
        }
        Some(judge_detach(
            Some(Fresh::from(&written.facts)),
            volume,
            force,
        ))
    }

    /// The node's status call ended: the detaches that waited for the store's acknowledgement
    /// stop waiting, and are returned to be looked at again (the store may or may not have
    /// settled: the look decides).
    pub(super) fn ack_ended(&mut self, node: &D::Node) -> Option<SmallVec<[D::Volume; 2]>> {
        let waiting = self.detaches.take_awaiting_ack(node)?;
        for volume in &waiting {
            if let Some(a) = self.actual.get_mut(volume, node) {
                a.detach.stage = DetachStage::Idle;
            }
        }
        Some(waiting)
    }

    /// A status write or read of `node` ended: detaches waiting for the store to settle may
    /// go now, the node may need another write, and a node removed meanwhile is forgotten.
    pub(super) fn status_settled(&mut self, node: &D::Node) {
        if !self.actual.node_present(node) {
            // Removed while the call ran: nothing more is written for it.
            self.status.forget_idle(node);
        }
        if let Some(waiting) = self.ack_ended(node) {
            self.schedule.mark_all(waiting);
        }
        // A pass drops the marks of a node whose call is running, so the node is looked at
        // again now, unless nothing can have been dropped: the store holds the report at its
        // current generation (our write, just acknowledged) and no detach waits for a read.
        // That look was an empty pass at the end of every move; it also gave back the room a
        // burst's operations left, so a quiet end trims here, and at once: a pass trims only
        // once in `TRIM_EVERY_PASSES`, and none may follow.
        let quiet = !self.detaches.wants_read(node)
            && self
                .status
                .holds_report_at(node, self.actual.report_generation(node));
        if quiet {
            // Only when a burst of operations left room to give back (the trim's own rule,
            // applied to the table of running operations): a move one at a time leaves none.
            if self.calls.in_flight.has_room_to_give_back() {
                self.trim();
            }
        } else {
            self.status.mark(node.clone());
        }
    }

    /// Plans, for each node whose report may differ from the store or whose detaches wait for
    /// a fresh read, the node's next store call: a read when detaches wait for one or the
    /// revision to write against is unknown, else a compare-and-set write. One call per node at
    /// a time: a running one marks the node when it ends, a backoff timer when it expires.
    pub(super) fn plan_status(&mut self, now: Duration, ops: &mut Vec<Operation<D>>) {
        if !self.status.has_dirty() {
            // Most passes of a move: no list taken, no drain dropped.
            return;
        }
        let mut nodes = self.status.take_dirty();
        for node in nodes.drain(..) {
            let checks = self.detaches.wants_read(&node);
            let present = self.actual.node_present(&node);
            if !checks && !present {
                // Nothing to write to; it is rewritten when it appears (50721).
                continue;
            }
            let key = GateKeyRef::<D>::Status(&node);
            if self.calls.gate.is_running(&key) {
                continue;
            }
            // Compared borrowed: a node whose store already holds its report costs no copy.
            let generation = self.actual.report_generation(&node);
            let wants_write = present
                && self
                    .calls
                    .gate
                    .may_start(&key, OpKind::WriteStatus, now)
                    .is_ok()
                && self.status.needs_write(&node, generation, |stored| {
                    self.actual.report_matches(&node, stored)
                });
            // When detaches wait for a read and the report for a write, the two take turns,
            // so that neither starves the other on a busy node.
            let read_turn =
                checks && (!wants_write || !self.status_turns.read_last.contains(&node));
            let unknown_revision = wants_write && self.status.revision(&node).is_none();
            if read_turn || unknown_revision {
                if let Err(Some(retry)) = self.calls.gate.may_start(&key, OpKind::ReadStatus, now) {
                    self.schedule.wake_node_at(retry, node);
                    continue;
                }
                // A read also gives the revision to write against: one read serves both.
                let checks = self.start_reading(&node);
                self.status_turns.read_last.insert(node.clone());
                self.plan_read(now, node, checks, false, ops);
                continue;
            }
            self.status_turns.read_last.remove(&node);
            if !wants_write {
                continue;
            }
            if self.bugs().c6_diff_against_stale_read
                && self.status_turns.cache_consulted.insert(node.clone())
            {
                // C6, upstream's bug: diff against a cached copy of unknown age first.
                self.plan_read(now, node, Vec::new(), true, ops);
                continue;
            }
            self.status_turns.cache_consulted.remove(&node);
            let Some(expected) = self.status.revision(&node).cloned() else {
                continue;
            };
            let warm = self.actual.len() >= WARM_STATE_FROM;
            let own = self.status.take_spare(&node);
            let report = self
                .actual
                .report_with(&node, &mut self.scratch.list_spares, own, warm);
            self.calls.gate.start(key.to_owned());
            let id = self.next_op_id();
            let object = self.status.object(&node);
            self.calls.in_flight.insert(
                id,
                InFlight::WriteStatus {
                    node: node.clone(),
                    object,
                },
                now,
            );
            self.status.start_write(&node, generation, report.clone());
            let read_facts = self.detaches.awaits_ack(&node);
            ops.push(Operation::WriteStatus {
                id,
                node,
                attached: report,
                expected,
                read_facts,
            });
        }
        self.status.recycle_dirty(nodes);
    }

    /// The detaches on `node` that wanted a fresh read are now reading: the read's checks,
    /// each with the force reason it is checked for.
    pub(super) fn start_reading(
        &mut self,
        node: &D::Node,
    ) -> Vec<(D::Volume, Option<ForceReason>)> {
        let mut checks = Vec::new();
        for volume in self.detaches.take_reads_wanted(node) {
            if let Some(a) = self.actual.get_mut(&volume, node) {
                if let DetachStage::ReadWanted { force } = a.detach.stage {
                    a.detach.stage = DetachStage::Reading { force };
                    checks.push((volume, force));
                }
            }
        }
        checks
    }

    pub(super) fn plan_read(
        &mut self,
        now: Duration,
        node: D::Node,
        checks: Vec<(D::Volume, Option<ForceReason>)>,
        from_cache: bool,
        ops: &mut Vec<Operation<D>>,
    ) {
        self.calls.gate.start(GateKey::Status(node.clone()));
        let id = self.next_op_id();
        self.calls
            .admission
            .reading(&node, checks.iter().map(|(v, _)| v), id);
        let object = self.status.object(&node);
        self.calls.in_flight.insert(
            id,
            InFlight::ReadStatus {
                node: node.clone(),
                object,
                checks,
                from_cache,
            },
            now,
        );
        ops.push(Operation::ReadStatus {
            id,
            node,
            #[cfg(feature = "upstream-bugs")]
            from_cache,
        });
    }
}
