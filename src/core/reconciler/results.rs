//! Results coming back ([`finish`](Reconciler::finish)): attaches, detaches and verifies.
//! (Store calls end in `status_pass.rs`, listings in `recovery.rs`, machine checks in
//! `machine.rs`.)

use super::*;

impl<D: Domain> Reconciler<D> {
    pub(super) fn take_op(
        &mut self,
        id: OpId,
        given: OpKind,
    ) -> Result<InFlight<D>, ReconcilerError<D>> {
        self.take_op_relook(id, given).map(|(op, _)| op)
    }

    /// [`take_op`](Self::take_op), with whether a look at the operation's volume waits for
    /// its end ([`InFlightTable::take`]).
    pub(super) fn take_op_relook(
        &mut self,
        id: OpId,
        given: OpKind,
    ) -> Result<(InFlight<D>, bool), ReconcilerError<D>> {
        self.calls
            .in_flight
            .take(id, given)
            .map_err(|actual| match actual {
                None => ReconcilerError::UnknownOperation { id },
                Some(actual) => ReconcilerError::WrongResult { id, actual, given },
            })
    }

    /// The call planned as `id` answered `outcome`: the one way results come back.
    ///
    /// `outcome`'s variant must be the operation's kind ([`Outcome::kind`]). Refused, with
    /// nothing changed (the operation keeps waiting for its answer): an id no running
    /// operation has ([`ReconcilerError::UnknownOperation`]: already finished, or planned by
    /// another instance), or an outcome of another kind ([`ReconcilerError::WrongResult`],
    /// which names both kinds).
    ///
    /// A call whose answer is lost (its task panicked) still ends here, with
    /// [`Outcome::panicked`].
    pub fn finish(
        &mut self,
        now: Duration,
        id: OpId,
        outcome: Outcome<D>,
    ) -> Result<(), ReconcilerError<D>> {
        match outcome {
            Outcome::Attach(r) => self.attach_finished(now, id, r),
            Outcome::Detach(r) => self.detach_finished(now, id, r),
            Outcome::Verify(r) => self.verify_finished(now, id, r),
            Outcome::List(r) => self.list_finished(now, id, r),
            Outcome::WriteStatus(r) => self.status_written_with(now, id, r),
            Outcome::ReadStatus(r) => self.status_read(now, id, r),
            Outcome::ListStatuses(r) => self.statuses_listed(now, id, r),
            Outcome::CheckMachine(r) => self.machine_checked(now, id, r),
        }
    }

    /// The attach planned as `id` finished.
    pub(super) fn attach_finished(
        &mut self,
        now: Duration,
        id: OpId,
        result: Result<AttachInfo, BackendError<D::Node>>,
    ) -> Result<(), ReconcilerError<D>> {
        let (
            InFlight::Attach {
                volume,
                node,
                access,
                slot,
                driver,
            },
            relook,
        ) = self.take_op_relook(id, OpKind::Attach)?
        else {
            unreachable!("kind checked by take_op");
        };
        let succeeded = result.is_ok();
        self.changed(&volume, &node);
        if slot {
            self.calls.capacity.attach_ended(&node, driver);
        }
        self.calls.admission.finished(Class::Attach, id, succeeded);
        // The key the attach holds, from the access mode it was planned under.
        let key = gate_key_ref::<D>(access, &volume, &node);
        match result {
            Ok(info) => {
                self.key_succeeded(&key, OpKind::Attach);
                // The node took a volume: whatever full answer it gave before is over.
                if self.calls.capacity.clear_full(&node) {
                    self.calls
                        .gate
                        .succeeded(&GateKeyRef::<D>::NodeCapacity(&node), OpKind::Attach);
                }
                self.calls.capacity.stop_waiting(&node, &volume);
                self.actual
                    .set_attached(&volume, &node, info.device.as_deref());
                self.events.push(Event::AttachSucceeded {
                    volume: volume.clone(),
                    node,
                });
            }
            Err(BackendError::NodeFull { message, .. }) => {
                // The node, not the volume, is at fault: the volume may go elsewhere at once,
                // and attaches to this node back off.
                self.key_succeeded(&key, OpKind::Attach);
                if slot {
                    self.room_freed(&node);
                }
                self.calls.capacity.set_full(&node);
                let retry = self.calls.gate.failed(
                    GateKey::NodeCapacity(node.clone()),
                    OpKind::Attach,
                    now,
                    &message,
                );
                self.schedule.wake_volume_at(retry, volume.clone());
                self.wait_for_room(
                    &volume,
                    &node,
                    format!(
                        "the backend says the node can hold no more volumes ({message}); attaches \
                         to it back off"
                    ),
                );
            }
            Err(error) => {
                let retry = self
                    .calls
                    .gate
                    .failed(key.to_owned(), OpKind::Attach, now, &error);
                self.schedule.wake_volume_at(retry, volume.clone());
                if slot && !error.may_have_taken_effect() {
                    // Nothing was attached: the room it held is free again.
                    self.room_freed(&node);
                }
                match &error {
                    BackendError::Transient { .. } | BackendError::NodeFull { .. } => {}
                    BackendError::Uncertain { .. } => {
                        self.actual.set_uncertain(&volume, &node);
                    }
                    BackendError::AttachedElsewhere { node: other, .. } => {
                        if self.actual.state(&volume, other) == AttachState::Detached {
                            self.changed(&volume, other);
                            self.actual.set_uncertain(&volume, other);
                        }
                    }
                }
                self.events.push(Event::AttachFailed {
                    volume: volume.clone(),
                    node,
                    message: error.to_string(),
                });
            }
        }
        // A success needs a look only when one was left to it (`relook_when_done`): the
        // look that planned the attach decided everything else, and any input since marked
        // the volume itself. A failure is looked at again (its retry, what it changed).
        if relook || !succeeded {
            self.schedule.mark(volume);
        }
        Ok(())
    }

    /// The detach planned as `id` finished.
    pub(super) fn detach_finished(
        &mut self,
        now: Duration,
        id: OpId,
        result: Result<(), BackendError<D::Node>>,
    ) -> Result<(), ReconcilerError<D>> {
        let InFlight::Detach {
            volume,
            node,
            access,
            force,
        } = self.take_op(id, OpKind::Detach)?
        else {
            unreachable!("kind checked by take_op");
        };
        // Every detach's end has its volume looked at (below), asked or not: its relook flag
        // was taken with it and is not needed.
        self.changed(&volume, &node);
        self.calls
            .admission
            .finished(Class::Detach, id, result.is_ok());
        let key = gate_key_ref::<D>(access, &volume, &node);
        match result {
            Ok(()) => {
                self.key_succeeded(&key, OpKind::Detach);
                self.detached(&volume, &node);
                self.events.push(Event::DetachSucceeded {
                    volume: volume.clone(),
                    node,
                    force,
                });
            }
            Err(error) => {
                self.move_detach(&volume, &node, DetachStage::Idle);
                let retry = self
                    .calls
                    .gate
                    .failed(key.to_owned(), OpKind::Detach, now, &error);
                self.schedule.wake_volume_at(retry, volume.clone());
                if error.may_have_taken_effect() {
                    self.actual.set_uncertain(&volume, &node);
                }
                if !self.bugs().c1_lose_report_on_failed_detach {
                    // C1: the volume is still attached as far as anyone knows: report it again.
                    self.actual.set_withheld(&volume, &node, false);
                }
                self.events.push(Event::DetachFailed {
                    volume: volume.clone(),
                    node,
                    message: error.to_string(),
                });
            }
        }
        self.schedule.mark(volume);
        Ok(())
    }

    /// The verify planned as `id` finished; `attached` lists the volumes still attached.
    ///
    /// It also decides each operator's release of an attachment on the node that came before
    /// it was planned ([`Input::ReleaseVolume`]): the volume gone, the attachment is forgotten
    /// ([`Event::VolumeReleased`]); still attached, the release is dropped
    /// ([`Event::ReleaseRefused`], [`ReleaseRefusal::BackendStillAttached`]) and the detach
    /// goes ahead as any. A verify that failed (or gave no answer about the volume) decides
    /// nothing: the release stays pending, and the node is verified again after a backoff.
    pub(super) fn verify_finished(
        &mut self,
        now: Duration,
        id: OpId,
        result: Result<Vec<D::Volume>, BackendError<D::Node>>,
    ) -> Result<(), ReconcilerError<D>> {
        let InFlight::Verify {
            node,
            epoch,
            checked,
        } = self.take_op(id, OpKind::Verify)?
        else {
            unreachable!("kind checked by take_op");
        };
        // The releases on the node that this verify may decide: those that came before it was
        // planned. One that came while it ran waits for the next. (Most verifies meet none: no
        // list is made then.)
        let mut releases: Vec<D::Volume> = Vec::new();
        for volume in self.detaches.releases_on(&node).to_vec() {
            match self.actual.get(&volume, &node).map(|a| a.detach.release) {
                Some(Release::Pending) => releases.push(volume),
                Some(Release::BehindVerify) => {
                    // Its wait for this verify's end is over: looked at again, it plans the
                    // verify that decides it.
                    self.set_release(&volume, &node, Release::Pending);
                    self.schedule.mark(volume);
                }
                Some(Release::None) | None => {}
            }
        }
        let mut attached = match result {
            Ok(attached) => attached,
            Err(error) if !releases.is_empty() => {
                warn!(node = ?node, %error, "verifying attachments failed; a release waits for a verify, trying again after a backoff");
                let retry = self.calls.gate.failed(
                    GateKey::Verify(node.clone()),
                    OpKind::Verify,
                    now,
                    &error,
                );
                for volume in releases {
                    self.schedule.wake_volume_at(retry, volume);
                }
                return Ok(());
            }
            Err(error) => {
                self.calls
                    .gate
                    .succeeded(&GateKeyRef::<D>::Verify(&node), OpKind::Verify);
                warn!(node = ?node, %error, "verifying attachments failed; trying again next sync");
                return Ok(());
            }
        };
        self.calls
            .gate
            .succeeded(&GateKeyRef::<D>::Verify(&node), OpKind::Verify);
        // Each release this verify leaves undecided is looked at again, and plans another.
        self.schedule.mark_all(releases.iter().cloned());
        if self.actual.epoch_of(&node) != epoch {
            // The node's record was made again, or its generations renumbered, since the
            // verify listed them: its numbers may now be other records'.
            return Ok(());
        }
        // Sorted as the node's list is, then walked beside it: one compare per attachment,
        // where a search of the answer for each cost about five (each a `memcmp` of two
        // names, with text ids). An answer in the order asked (the node's) only has its order
        // confirmed by the sort.
        attached.sort();
        let mut answer = attached.iter().peekable();
        // The node's records the verify listed, unchanged since (their generation is one it
        // listed); answers about attachments that changed, are new, or are being changed are
        // ignored.
        let mut answered = Vec::new();
        let mut decided = Vec::new();
        for (volume, standing) in self.actual.standings_on(&node) {
            let still = loop {
                match answer.peek().map(|listed| (*listed).cmp(volume)) {
                    Some(Ordering::Less) => {
                        answer.next();
                    }
                    Some(Ordering::Equal) => break true,
                    Some(Ordering::Greater) | None => break false,
                }
            };
            if checked.binary_search(&standing.generation()).is_err() {
                continue;
            }
            if !releases.is_empty() && releases.contains(volume) {
                if !self.busy(volume, &node) {
                    decided.push((volume.clone(), still));
                }
                continue;
            }
            if still && standing.reported() {
                // Attached, and the backend agrees: the usual answer, decided from the node's
                // list without a lookup in the volume table.
                continue;
            }
            if !self.busy(volume, &node) {
                answered.push((volume.clone(), still));
            }
        }
        for (volume, still) in answered {
            let Some(a) = self.actual.get(&volume, &node) else {
                continue;
            };
            match (a.state, still) {
                (AttachState::Attached, false) => {
                    debug!(volume = ?volume, node = ?node, "backend says detached");
                    self.detached(&volume, &node);
                    self.schedule.mark(volume);
                }
                // "Gone" settles an Uncertain attachment: an attach or detach that errored
                // after (or without) doing its work is decided by what the backend now says
                // (issue 9, bug 3); a verify counts an attach still under way as attached.
                (AttachState::Uncertain, false) => {
                    debug!(volume = ?volume, node = ?node, "backend says an uncertain attachment is gone");
                    self.detached(&volume, &node);
                    self.schedule.mark(volume);
                }
                // "Attached" does not: a detach that timed out may still be under way and land
                // after this answer, under a mount that a settled attachment would let begin.
                // It stays Uncertain, holding the volume; an attach confirms it where a workload
                // wants it (the backend refuses that attach while the old detach is under way,
                // and runs it after), and a detach ends it where none does.
                (AttachState::Uncertain, true) => {
                    debug!(volume = ?volume, node = ?node, "backend says an uncertain attachment is there; an attach or a detach settles it");
                    self.schedule.mark(volume);
                }
                _ => {}
            }
        }
        for (volume, still) in decided {
            self.set_release(&volume, &node, Release::None);
            if still {
                // The operator's word is older than the backend's: an attach may have landed
                // since they looked. The detach goes ahead as any (forced while the node is
                // fenced), and frees the volume once the backend confirms it.
                warn!(volume = ?volume, node = ?node, "a release was dropped: the backend still lists the attachment");
                self.events.push(Event::ReleaseRefused {
                    volume: volume.clone(),
                    node: node.clone(),
                    reason: ReleaseRefusal::BackendStillAttached,
                });
            } else {
                info!(volume = ?volume, node = ?node, "forgetting a released attachment the backend no longer lists");
                self.detached(&volume, &node);
                self.events.push(Event::VolumeReleased {
                    volume: volume.clone(),
                    node: node.clone(),
                });
            }
            self.schedule.mark(volume);
        }
        Ok(())
    }
}
