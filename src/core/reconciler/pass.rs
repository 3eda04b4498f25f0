//! A pass ([`poll`](Reconciler::poll)): the dirty volumes looked at, each volume's detaches then
//! attaches decided, the status writes and the periodic verify's slices planned.

use super::*;

impl<D: Domain> Reconciler<D> {
    /// When [`poll`](Self::poll) next has work, or `None` when nothing can happen until an input
    /// arrives. A driver sleeps until then.
    pub fn next_deadline(&self) -> Option<Duration> {
        if let Some(recovery) = &self.listings.recovery {
            // Only the recovery listings, and their retries, until both are in.
            return recovery.wake_at();
        }
        earliest([self.next_pass(), self.next_verify_slice()])
    }

    /// When the next reconcile pass is due: at least a reconcile period after the last, or at
    /// once while a round of marks is under way ([`Config::volumes_per_pass`]).
    pub(super) fn next_pass(&self) -> Option<Duration> {
        let has_work = self.status.has_dirty() || self.actual.has_report_changes();
        self.schedule.next_deadline(
            has_work,
            !self.actual.is_empty(),
            self.desired.node_count() > 0,
            || {
                earliest([
                    self.desired.next_pending_wake(),
                    self.calls.admission.wake(),
                    self.calls.machine.next_wake(),
                    self.waits.next_wake(),
                ])
            },
            self.config.reconcile_period,
        )
    }

    /// When the verify round under way takes its next slice. Not held to the reconcile
    /// period: between two passes a poll plans just the slice ([`MIN_VERIFY_SLICE_GAP`]).
    /// Nothing to verify once nothing is attached (as the round's start).
    pub(super) fn next_verify_slice(&self) -> Option<Duration> {
        self.listings
            .verify_round
            .filter(|_| !self.actual.is_empty())
            .map(|round| round.next_at())
    }

    /// Runs a reconcile pass if one is due at `now` and returns the operations to start.
    /// Between two passes (at least [`Config::reconcile_period`] apart) a poll may also plan
    /// just the periodic verify's next slice, which is paced on its own
    /// ([`Config::verify_batch`]). A pass looks at [`Config::volumes_per_pass`] marked
    /// volumes at most; the rest of a larger set makes the next passes, due at once (so
    /// [`next_deadline`](Self::next_deadline) is `now` again after such a pass).
    /// [`poll_into`](Self::poll_into) does the same into a buffer the caller keeps.
    pub fn poll(&mut self, now: Duration) -> Vec<Operation<D>> {
        let mut ops = Vec::new();
        self.poll_into(now, &mut ops);
        ops
    }

    /// Runs a reconcile pass if one is due at `now` and appends the operations to start to
    /// `ops`. A driver that drains `ops` and hands it back each time allocates no list per
    /// pass. (It should drop the list once a burst has grown it past a few hundred
    /// operations, as [`drain_events_into`](Self::drain_events_into) does with its own: a
    /// start-up's million attaches would otherwise stay allocated for good.)
    ///
    /// ```
    /// use std::time::Duration;
    /// use attach_detach::Ids;
    /// use attach_detach::config::Config;
    /// use attach_detach::core::{Operation, Reconciler};
    /// let mut core = Reconciler::<Ids<&str, &str, &str>>::new(Config::default());
    /// let mut ops = Vec::new();
    /// core.poll_into(Duration::ZERO, &mut ops);
    /// // A new core first lists the store and the backend.
    /// assert_eq!(ops.len(), 2);
    /// assert!(matches!(ops[0], Operation::ListStatuses { .. } | Operation::ListAttachments { .. }));
    /// ```
    pub fn poll_into(&mut self, now: Duration, ops: &mut Vec<Operation<D>>) {
        let due = |at: Option<Duration>| at.is_some_and(|at| at <= now);
        if let Some(recovery) = &self.listings.recovery {
            if due(recovery.wake_at()) {
                self.plan_recovery(now, ops);
            }
            return;
        }
        if !due(self.next_pass()) {
            // Between two passes a verify slice may be due: it is planned alone, and the next
            // pass still comes a reconcile period after the last.
            if due(self.next_verify_slice()) {
                self.plan_verify_slice(now, ops);
            }
            return;
        }
        self.scratch.passes_since_trim += 1;
        if self.scratch.passes_since_trim >= TRIM_EVERY_PASSES {
            self.trim();
        }
        let managing = self.desired.node_count() > 0;
        let (nodes, due) = self.schedule.start_pass(
            now,
            self.config.sync_period,
            self.config.resync_period,
            managing,
        );
        for node in nodes {
            self.status.mark(node);
        }
        self.warn_pending(now);
        self.explain_waits(now);
        if due.sync {
            self.calls.gate.forget_stale(now);
            self.start_verify_round(now);
            self.report_stuck(now);
        }
        if self
            .listings
            .verify_round
            .is_some_and(|round| round.next_at() <= now)
        {
            self.plan_verify_slice(now, ops);
        }
        if due.resync {
            self.plan_list(now, ops);
        }
        let mut dirty = self.schedule.take_dirty(self.config.volumes_per_pass);
        // Queued attaches and detaches first, in their order, while capacity lasts.
        self.admit_queued(now, &mut dirty, ops);
        self.reconcile_volumes(now, &mut dirty, ops);
        self.schedule.recycle_dirty(dirty);
        let mut changed = self.actual.take_report_changed();
        if !changed.is_empty() {
            // (A drain is dropped with a call when ids own something, empty or not.)
            self.status.mark_all(changed.drain(..));
        }
        self.actual.recycle_report_changed(changed);
        // The status writes wait for the round's last pass: a node's volumes are spread over
        // the round, and a write after each pass would write the node once per pass that
        // reached one of them.
        if !self.schedule.in_round() {
            self.plan_status(now, ops);
        }
        self.plan_machine_checks(now, ops);
        // A clearance is for the pass right after its read: one this pass did not use (the
        // detach was no longer wanted, or had to wait) is stale by the next. So are the facts
        // a write read.
        if self.detaches.has_fresh_facts() {
            for (volume, node) in self.detaches.lapse() {
                if let Some(a) = self.actual.get_mut(&volume, &node) {
                    a.detach.stage = DetachStage::Idle;
                }
            }
        }
        #[cfg(debug_assertions)]
        if self.actual.len() <= DEBUG_CHECK_UP_TO {
            if let Err(disagreement) = self.detaches.check(&self.actual) {
                panic!("detach indexes disagree with the records: {disagreement}");
            }
        }
        self.release_idle_slots();
    }

    /// Gives back what a past burst left allocated: the tables of running operations and the
    /// timer heaps keep their peak capacity otherwise (at 150,000 attachments, a start-up burst
    /// of attaches left about 95 bytes per attachment behind).
    pub(super) fn trim(&mut self) {
        self.scratch.passes_since_trim = 0;
        self.schedule.trim();
        self.desired.trim();
        self.detaches.trim();
        self.calls.in_flight.trim();
        trim_set(&mut self.status_turns.read_last);
        self.calls.gate.trim();
        self.calls.capacity.trim();
        self.calls.admission.trim();
    }

    pub(super) fn next_op_id(&mut self) -> OpId {
        self.calls.next_id += 1;
        OpId(self.calls.next_id)
    }

    /// Reconciles each of `volumes`, and empties the list. A long list (a restart's first pass,
    /// a resync, a dead node's volumes) is taken in batches whose desired and actual records
    /// are first looked up together ([`DenseTable::warm`](crate::core::tables::dense_table::DenseTable::warm)):
    /// at a million volumes the first pass after a restart spent most of its time waiting on
    /// those lookups' cache misses one at a time. A short list (a move's) is not worth the
    /// second lookup. A batch's ids are dropped once it is done, their names' blocks read with
    /// the lookups ([`id_warm`](crate::core::tables::id_warm)): dropped at the end of the pass, each was a
    /// cache miss of its own again.
    pub(super) fn reconcile_volumes(
        &mut self,
        now: Duration,
        volumes: &mut Vec<D::Volume>,
        ops: &mut Vec<Operation<D>>,
    ) {
        if volumes.is_empty() {
            // A pass with nothing marked: no drain to drop.
            return;
        }
        // A long pass reads its volumes' records ahead in batches. In a state larger than the
        // caches a short one does too, and its volumes' nodes' records, which it would reach
        // one miss after another. (A long pass's volumes share their nodes: read ahead for
        // each volume, a controller's batches of moves at 150,000 attachments ran about 5 %
        // slower.)
        let short = volumes.len() < WARM_FROM;
        let nodes_too = short && self.actual.len() >= WARM_STATE_FROM;
        let warm = nodes_too || !short;
        // Unwarmed, the whole list is one batch.
        let batch = if warm { WARM_BATCH } else { usize::MAX };
        let mut rest = volumes.drain(..);
        while rest.len() > 0 {
            if warm {
                let next = || rest.as_slice().iter().take(batch);
                self.desired.warm(next());
                self.actual.warm(next());
                id_warm::warm(next());
                if nodes_too {
                    self.warm_nodes_of(next());
                }
            }
            for volume in rest.by_ref().take(batch) {
                self.reconcile_volume(now, &volume, ops);
            }
        }
    }

    /// Reads the records of the nodes `volumes` are attached to or wanted on, which their
    /// reconcile reaches next (the node's attachments, searched for each detach and attach,
    /// and the list the store holds, compared before the node's status write): at a million
    /// attachments each is a cache miss, and a pass of a few volumes reached them one after
    /// another. A simulated cache (callgrind, `u32` ids) counted 47 misses of the
    /// second-level cache a move at a million, a third of them in these.
    pub(super) fn warm_nodes_of<'a>(&self, volumes: impl Iterator<Item = &'a D::Volume>)
    where
        D: 'a,
    {
        for volume in volumes {
            let attached = self.actual.attachments(volume).iter().map(|a| &a.node);
            let wanted = self.desired.wanted_on(volume).iter().map(|w| &w.node);
            for node in attached.chain(wanted) {
                self.actual.warm_node(node);
                self.status.warm_node(node);
            }
        }
    }

    pub(super) fn reconcile_volume(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        ops: &mut Vec<Operation<D>>,
    ) {
        // The two lists of nodes are the core's own, kept between calls: collected afresh on
        // each of the five calls a move makes, they cost about a twentieth of the move.
        let mut lists = std::mem::take(&mut self.scratch.node_lists);
        self.reconcile_volume_with(now, volume, &mut lists, ops);
        lists.clear();
        // What took the lists' place during the look never had room.
        let NodeLists { wanted, attached } = std::mem::replace(&mut self.scratch.node_lists, lists);
        crate::core::tables::marks::drop_list(wanted);
        crate::core::tables::marks::drop_list(attached);
    }

    pub(super) fn reconcile_volume_with(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        NodeLists { wanted, attached }: &mut NodeLists<D>,
        ops: &mut Vec<Operation<D>>,
    ) {
        // What an operation already running on the volume changes is decided at its end.
        self.calls.in_flight.relook_when_done(volume);
        // Both lists are filled last node first and taken from the end (below), so that each
        // node's copy can be handed on in order, to be kept where the decision keeps one (the
        // operation it plans, the wait it starts): a clone fewer for each.
        attached.extend(
            self.actual
                .attachments(volume)
                .iter()
                .rev()
                .map(|a| a.node.clone()),
        );
        // The spec and the nodes it is wanted on, in one lookup: nothing below changes them.
        let Some(spec) = self
            .desired
            .spec_and_wanted(volume)
            .map(|(at, (spec, on))| {
                wanted.extend(on.iter().rev().map(|w| w.node.clone()));
                SpecFacts {
                    access: spec.access,
                    attach_required: spec.attach_required,
                    driver: spec.driver,
                    at,
                }
            })
        else {
            // Only the store reported it (at recovery), and neither the orchestrator nor the
            // backend knows it: without its payload the core cannot detach it.
            for node in attached.iter().rev() {
                warn!(volume = ?volume, node = ?node, "attached volume has no spec; register it with set_volume");
                self.report_blocked(volume, node, UNREGISTERED);
            }
            return;
        };
        // Detach pass first, so that a freed single-node volume can move in the same pass.
        while let Some(node) = attached.pop() {
            if !wanted.contains(&node) {
                self.consider_detach(now, volume, node, spec, ops);
            }
        }
        self.calls
            .capacity
            .forget_unwanted(volume, |node| wanted.contains(node));
        if wanted.is_empty() {
            // Wanted nowhere: an entry its last detach kept for an attach that no longer
            // comes is dropped (`detached`).
            self.actual.forget_volume(volume);
        }
        while let Some(node) = wanted.pop() {
            self.consider_attach(now, volume, node, spec, ops);
        }
        if self.retiring.contains(volume)
            && self.actual.attachments(volume).is_empty()
            && !self.calls.in_flight.runs_on(volume)
        {
            // Removed and no longer attached anywhere: forget it, backoff included.
            self.retiring.remove(volume);
            self.desired.forget_volume(volume);
            self.calls.gate.forget_where(|key| match key {
                GateKey::Volume(v) | GateKey::Attachment(v, _) => v == volume,
                GateKey::Status(_)
                | GateKey::Verify(_)
                | GateKey::List
                | GateKey::StoreList
                | GateKey::NodeCapacity(_) => false,
            });
        }
    }

    /// Starts a round of the periodic verify at `now`: every node with attachments once, in
    /// slices of about `verify_batch` attachments spread evenly over the sync period, counted
    /// from the round's start (a late pass does not push the later slices back). The slices
    /// are at least [`MIN_VERIFY_SLICE_GAP`] apart, not a reconcile period: held to the
    /// period, a million attachments at the default periods got 600 slices of about 1,700,
    /// and each pass was 1.7 times the pause `verify_batch` asks for. Only when the sync period
    /// is too short for even that gap do the slices take more.
    ///
    /// A round still under way (its passes came late, or nodes were added during it) is not
    /// started over but goes on from where it is, paced anew: started over, the nodes at its
    /// end could be skipped round after round for ever.
    pub(super) fn start_verify_round(&mut self, now: Duration) {
        if self.listings.verify_round.is_none() || self.actual.verify_round_done() {
            self.actual.restart_verify_round();
        }
        self.listings.verify_round = Some(VerifyRound::paced(now, self.actual.len(), &self.config));
    }

    /// Plans the verifies of the round's next slice: the next nodes it has not reached, whole,
    /// until they hold the slice's attachments, in node order (a round of one slice plans every
    /// node in order, as a round in one pass did).
    pub(super) fn plan_verify_slice(&mut self, now: Duration, ops: &mut Vec<Operation<D>>) {
        let Some(round) = self.listings.verify_round else {
            return;
        };
        let mut nodes = Vec::new();
        let mut taken = 0;
        while taken < round.per_slice {
            let Some((node, attached)) = self.actual.next_to_verify() else {
                break;
            };
            taken += attached;
            nodes.push(node);
        }
        self.listings.verify_round = (!self.actual.verify_round_done()).then(|| VerifyRound {
            slices_done: round.slices_done.saturating_add(1),
            ..round
        });
        nodes.sort();
        for node in nodes {
            self.plan_verify(now, node, ops);
        }
    }

    /// Plans a verify of every attachment of `node` the backend knows of, unless one runs.
    pub(super) fn plan_verify(
        &mut self,
        now: Duration,
        node: D::Node,
        ops: &mut Vec<Operation<D>>,
    ) {
        let key = GateKeyRef::<D>::Verify(&node);
        if self.calls.gate.is_running(&key) {
            return;
        }
        // The node's own list holds each attachment's generation: no lookup of the attachment
        // in the volume table, only of the spec. The specs are looked up in warmed batches, as a
        // long pass's volumes are: a verify is planned in slices of about `verify_batch`
        // attachments, and a slice waited on each spec's cache misses one after the other.
        let standings = self.actual.standings_on(&node);
        let mut checked = Vec::with_capacity(standings.len());
        let mut volumes = Vec::with_capacity(standings.len());
        for batch in standings.chunks(WARM_BATCH) {
            self.desired.warm(batch.iter().map(|(volume, _)| volume));
            for (volume, standing) in batch {
                let Some(spec) = self.desired.spec(volume) else {
                    continue;
                };
                if !spec.attach_required {
                    // The backend knows nothing of a claim.
                    continue;
                }
                checked.push(standing.generation());
                volumes.push((volume.clone(), spec.payload.clone()));
            }
        }
        if volumes.is_empty() {
            return;
        }
        checked.sort_unstable();
        self.calls.gate.start(key.to_owned());
        let id = self.next_op_id();
        self.calls.in_flight.insert(
            id,
            InFlight::Verify {
                node: node.clone(),
                epoch: self.actual.epoch_of(&node),
                checked,
            },
            now,
        );
        ops.push(Operation::Verify { id, node, volumes });
    }
}
