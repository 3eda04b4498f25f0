//! Restart recovery (correction C7): the store's and the backend's listings taken in before
//! anything is planned, claims adopted from the agents' reports, and the periodic listing of
//! every attachment.

use super::*;

impl<D: Domain> Reconciler<D> {
    /// Restart recovery: the store, read fresh, lists `attached` for `node` at `revision`.
    /// Those volumes are Attached, and the list is what the store is known to hold. (Recovery
    /// takes a whole listing in at once, [`take_in_status`](Self::take_in_status); tests take
    /// in one node's.)
    #[cfg(test)]
    pub(super) fn recover_status(
        &mut self,
        node: D::Node,
        attached: Vec<ReportedVolume<D>>,
        revision: Revision,
    ) {
        self.schedule
            .mark_all(attached.iter().map(|r| r.volume.clone()));
        self.take_in_status(node, attached, &revision);
    }

    /// What `recover_status` does but for marking the listed volumes: at recovery, the
    /// registered ones are marked already and the caller marks the others.
    pub(super) fn take_in_status(
        &mut self,
        node: D::Node,
        attached: Vec<ReportedVolume<D>>,
        revision: &Revision,
    ) {
        self.actual.recover_reported(&node, &attached);
        self.status.read_owned(node.clone(), attached, revision);
        self.status.mark(node);
    }

    /// Restart recovery: the backend knows of this attachment. Unless the store already reported
    /// it, it becomes Uncertain (upstream 96617), so it is neither lost nor trusted.
    ///
    /// The backend's listing names a volume the store listed: noted in `store_listed`
    /// ([`StoreListed`]). One without a spec gets the backend's, and with it a place past the
    /// positions `settled` covers, so the end of recovery marks it with the unsettled ones;
    /// whether the entry leaves a volume with a spec settled is noted in `settled`
    /// ([`SettledVolumes`]).
    pub(crate) fn recover_attachment(
        &mut self,
        attachment: BackendAttachment<D>,
        store_listed: &mut StoreListed,
        settled: &mut SettledVolumes,
    ) {
        let BackendAttachment { volume, node, spec } = attachment;
        // One lookup in each table, whose entries the caller warmed in batches, answers all
        // of this entry's questions: the volume's spec and where it is wanted, its records.
        let desired = self.desired.registered_with_position(&volume);
        let entry = self.actual.volume_entry(&volume);
        let records = entry.map_or(&[][..], |(_, list)| list);
        let recorded = records.iter().any(|a| a.node == node);
        if let Some((at, _)) = entry {
            store_listed.name(at);
        }
        if let Some((at, registered)) = desired {
            // An entry the store did not list adds an Uncertain record below: not settled.
            let settled_here = recorded
                && registered.is_some_and(|(spec, wanted)| {
                    spec.attach_required && self.attached_as_wanted(&volume, records, wanted)
                });
            settled.note(at, settled_here);
        }
        if desired.is_none() {
            self.adopt_spec(&volume, spec);
        }
        if !recorded {
            // Not marked here: the record makes the volume unsettled (noted above, or
            // adopted after `settled` was sized), and the end of recovery marks every volume
            // not noted settled, in one list. A mark per entry was a million more marks to
            // sort when the store reported nothing.
            self.actual.set_uncertain(&volume, &node);
        }
    }

    /// Whether `volume`, whose records are `attached`, is attached exactly on the nodes it is
    /// `wanted` on, each attachment Attached and reported, and it is not being retired: a look
    /// at it would plan and change nothing once no call, backoff or wait is under way for it,
    /// as at a restart.
    pub(super) fn attached_as_wanted(
        &self,
        volume: &D::Volume,
        attached: &[Attachment<D>],
        wanted: &[WantedOn<D>],
    ) -> bool {
        // Neither list names a node twice: as long as each other and one within the other,
        // they name the same nodes. (At a restart an Uncertain record comes only from an entry
        // the store did not list, whose volume is then not settled: this check is what keeps
        // it out, and the end of recovery marks it.)
        !attached.is_empty()
            && attached.len() == wanted.len()
            && attached.iter().all(|a| {
                a.state == AttachState::Attached
                    && !a.withheld
                    && wanted.iter().any(|w| w.node == a.node)
            })
            && (self.retiring.is_empty() || !self.retiring.contains(volume))
    }

    /// The single-node claim-only volumes `node` reports in use that no node holds on record.
    pub(super) fn unrecorded_claims(&self, node: &D::Node) -> Vec<D::Volume> {
        match self.actual.node(node) {
            Some(n) => self.unheld_claims(n.in_use_unrecorded()),
            None => Vec::new(),
        }
    }

    /// Those of `volumes` that are single-node claim-only volumes no node holds on record: the
    /// only ones any evidence of a claim (a report, a placed workload) can adopt; a claim held
    /// on record outranks it (see [`adopt_claims_in_use`](Self::adopt_claims_in_use)).
    pub(super) fn unheld_claims<'a>(
        &self,
        volumes: impl Iterator<Item = &'a D::Volume>,
    ) -> Vec<D::Volume>
    where
        D::Volume: 'a,
    {
        volumes
            .filter(|v| {
                self.actual.attachments(v).is_empty()
                    && self
                        .desired
                        .spec(v)
                        .is_some_and(|s| !s.attach_required && s.access == Access::SingleNode)
            })
            .cloned()
            .collect()
    }

    /// Holds `volume` as maybe claimed (Uncertain) on `node`, which may have it mounted: no
    /// other node is granted it, and it is released only as any claim is (the agent stops using
    /// it, the store settles, a fresh read agrees).
    pub(super) fn adopt_claim(&mut self, volume: D::Volume, node: D::Node) {
        warn!(volume = ?volume, node = ?node, "a node may use a claim-only volume no status lists: holding it as maybe claimed there");
        self.actual.set_uncertain(&volume, &node);
        self.schedule.mark(volume);
    }

    /// Restart recovery, after both listings. A claim is recorded only in its node's status,
    /// and that status goes with a deleted node object (a node registered again starts with an
    /// empty one). So a single-node claim-only volume that no listing holds is adopted as maybe
    /// claimed on every node that may have it mounted:
    /// - each node that reports it in use;
    /// - each node with no in-use report on which a workload using it is placed;
    /// - each node the orchestrator does not list (its object is gone) on which a workload using
    ///   it is placed: the old controller kept such a claim until the node returned or was
    ///   fenced, and so does this one.
    ///
    /// One such node holds it (and is granted it if it wants it). Several wait for one another,
    /// named in a [`ClaimInDoubt`](Event::ClaimInDoubt) event, until all but one stop using it:
    /// an agent also reports what it is about to mount, so the core cannot tell which of them
    /// has it mounted.
    ///
    /// A claim that a node's status lists is a grant on record, and outranks a workload placed
    /// on a node whose object is gone: that workload is no evidence of a claim the core weighs
    /// against it, at recovery or once the grant ends (issue 66). A node without an object
    /// mounts nothing new (its agent cannot confirm its status, and no new workload reaches
    /// it), so a workload placed there since the grant stands for no mount; and a mount it
    /// might stand for predates the grant, which a controller made seeing no holder: the gap
    /// docs/design.md names under "Claims" ("What is not covered"), which this evidence cannot
    /// close.
    /// Counting it would unmount nothing: it would only keep the volume from every later
    /// holder, since a claim on a gone node is released only when the node returns or is
    /// fenced, for a workload that cannot run there. (The simulator excuses the mount such a
    /// gap leaves for as long as it lasts, across restarts.)
    pub(super) fn adopt_claims_in_use(&mut self) {
        let mut holders: BTreeMap<D::Volume, Vec<D::Node>> = BTreeMap::new();
        let present: Vec<D::Node> = self
            .actual
            .nodes()
            .filter(|n| self.actual.node_present(n))
            .cloned()
            .collect();
        for node in present {
            let reports = self.actual.node(&node).is_some_and(|n| n.in_use.is_some());
            let claims = if reports {
                self.unrecorded_claims(&node)
            } else {
                // Nothing heard from its agent: what its workloads use is all there is to go by.
                self.unheld_claims(self.desired.volumes_placed_on(&node))
            };
            for volume in claims {
                holders.entry(volume).or_default().push(node.clone());
            }
        }
        let absent: Vec<(D::Node, Vec<D::Volume>)> = self
            .desired
            .placed_on_absent_nodes()
            .map(|(node, volumes)| (node.clone(), self.unheld_claims(volumes.iter())))
            .collect();
        for (node, volumes) in absent {
            for volume in volumes {
                holders.entry(volume).or_default().push(node.clone());
            }
        }
        for (volume, mut nodes) in holders {
            nodes.sort();
            nodes.dedup();
            for node in &nodes {
                self.adopt_claim(volume.clone(), node.clone());
            }
            if nodes.len() > 1 {
                self.events.push(Event::ClaimInDoubt { volume, nodes });
            }
        }
    }

    /// Takes the backend's spec for a volume the orchestrator has not registered, so that the
    /// core can detach it; as a removed volume, it is forgotten once detached, unless the
    /// orchestrator registers it meanwhile.
    ///
    /// Returns whether the volume was registered already (its spec then stays).
    pub(super) fn adopt_spec(&mut self, volume: &D::Volume, spec: VolumeSpec<D::Payload>) -> bool {
        if self.desired.spec(volume).is_some() {
            return true;
        }
        self.desired.keep_spec(volume.clone(), spec);
        self.retiring.insert(volume.clone());
        false
    }

    /// The listing planned as `id` finished: `listed` is every attachment the backend knows.
    ///
    /// While the core recovers, this is its recovery listing: retried with backoff when it
    /// failed, taken in once the store's listing is in too.
    ///
    /// An attachment the core does not know of (and that no operation touched while the listing
    /// ran) is taken in as Uncertain, as at recovery: it is detached if nothing needs it, or
    /// confirmed by an attach if a workload there does. Attachments the core knows and the
    /// listing lacks are left to the per-node verify.
    pub(super) fn list_finished(
        &mut self,
        now: Duration,
        id: OpId,
        listed: Result<Vec<BackendAttachment<D>>, BackendError<D::Node>>,
    ) -> Result<(), ReconcilerError<D>> {
        let InFlight::List = self.take_op(id, OpKind::List)? else {
            unreachable!("kind checked by take_op");
        };
        if let Some(recovery) = &mut self.listings.recovery {
            recovery.attachments = match listed {
                Ok(list) => {
                    self.calls
                        .gate
                        .succeeded(&GateKeyRef::<D>::List, OpKind::List);
                    Load::Loaded(list)
                }
                Err(error) => {
                    warn!(%error, "listing the backend's attachments for recovery failed; retrying");
                    Load::Due(
                        self.calls
                            .gate
                            .failed(GateKey::List, OpKind::List, now, &error),
                    )
                }
            };
            self.finish_recovery();
            return Ok(());
        }
        self.calls
            .gate
            .succeeded(&GateKeyRef::<D>::List, OpKind::List);
        let changed = self
            .listings
            .changed_while_listing
            .take()
            .unwrap_or_default();
        let listed = match listed {
            Ok(listed) => listed,
            Err(error) => {
                warn!(%error, "listing the backend's attachments failed; trying again next resync");
                return Ok(());
            }
        };
        for BackendAttachment { volume, node, spec } in listed {
            if changed.contains(&(volume.clone(), node.clone()))
                || self.actual.state(&volume, &node) != AttachState::Detached
            {
                continue;
            }
            if self.busy(&volume, &node) {
                continue;
            }
            warn!(volume = ?volume, node = ?node, "the backend lists an attachment the controller did not know of");
            self.adopt_spec(&volume, spec);
            self.actual.set_uncertain(&volume, &node);
            self.schedule.mark(volume);
        }
        Ok(())
    }

    /// The recovery listing of every node's status planned as `id` finished. Retried with
    /// backoff when it failed; once the backend's listing is in too, the core recovers.
    pub(super) fn statuses_listed(
        &mut self,
        now: Duration,
        id: OpId,
        result: Result<Statuses<D>, StoreError>,
    ) -> Result<(), ReconcilerError<D>> {
        let InFlight::ListStatuses = self.take_op(id, OpKind::ListStatuses)? else {
            unreachable!("kind checked by take_op");
        };
        let load = match result {
            Ok(list) => {
                self.calls
                    .gate
                    .succeeded(&GateKeyRef::<D>::StoreList, OpKind::ListStatuses);
                Load::Loaded(list)
            }
            Err(error) => {
                warn!(%error, "listing node statuses for recovery failed; retrying");
                Load::Due(self.calls.gate.failed(
                    GateKey::StoreList,
                    OpKind::ListStatuses,
                    now,
                    &error,
                ))
            }
        };
        if let Some(recovery) = &mut self.listings.recovery {
            recovery.statuses = load;
        }
        self.finish_recovery();
        Ok(())
    }

    /// Takes in both recovery listings once both are loaded: the store's first, so that what
    /// a node was told it has counts as Attached, then the backend's.
    pub(super) fn finish_recovery(&mut self) {
        let Some((statuses, attachments)) = self
            .listings
            .recovery
            .as_mut()
            .and_then(|r| r.take_loaded())
        else {
            return;
        };
        let removed = self
            .listings
            .recovery
            .take()
            .map(|r| r.removed)
            .unwrap_or_default();
        info!(
            nodes = statuses.len(),
            attachments = attachments.len(),
            "recovered the actual state"
        );
        // Room for every listed attachment at once: a million, taken in one by one, rehashed
        // the volume table a dozen times on the way.
        let listed = statuses.iter().map(|(_, s)| s.attached.len()).sum();
        self.actual.reserve(listed);
        for (node, status) in statuses {
            if !removed.is_empty() && removed.contains(&node) {
                // Listed before its object was deleted: the volumes it lists were attached
                // there, but what the node's status holds now is unknown, and read fresh.
                self.actual.recover_reported(&node, &status.attached);
                self.status.mark(node);
            } else {
                self.take_in_status(node, status.attached, &status.revision);
            }
        }
        // Volume marks are kept again: only what this recovery marks is looked at in the first
        // pass. Every volume the orchestrator registered (whose inputs marked nothing while
        // the core recovered) is marked below unless the backend's listing showed it settled
        // ([`SettledVolumes`]); so is every volume no one registered that a listing holds:
        // the backend's listing gives each it names a spec, and the store-listed ones it never
        // names are asked of the desired state. Which store-listed volumes it names is noted
        // as it looks each up anyway ([`StoreListed`]).
        self.schedule.keep_marks();
        let mut store_listed = StoreListed::new(self.actual.volumes_with_records());
        let mut settled = SettledVolumes::new(self.desired.volume_positions());
        // Each listed attachment looks its volume's spec and records up: batches warmed, as a
        // long pass's.
        let mut listed = attachments.into_iter();
        while listed.len() > 0 {
            let batch = || listed.as_slice().iter().take(WARM_BATCH).map(|a| &a.volume);
            self.desired.warm(batch());
            self.actual.warm(batch());
            // Most listed volumes are known, and dropped: their names' blocks are read first.
            id_warm::warm(batch());
            for a in listed.by_ref().take(WARM_BATCH) {
                self.recover_attachment(a, &mut store_listed, &mut settled);
            }
        }
        // Every volume with a spec the listing did not show settled: registered ones, those
        // whose spec is kept only to detach them, and those no one registered whose spec the
        // backend's listing gave (past the positions `settled` covers). In the volume table's
        // order, not sorted whole before the first pass of the round they make
        // ([`Schedule::mark_distinct`]).
        let mut unsettled: Vec<D::Volume> = (self.desired.volumes_by_position().enumerate())
            .filter(|(at, _)| !settled.is_settled(*at))
            .map(|(_, volume)| volume.clone())
            .collect();
        // And the store-listed volumes the backend never named, if any: asked of the desired
        // state now, and marked if no one registered them (they have no spec, so they are not
        // among the above).
        if !store_listed.all_named() {
            let unnamed = (self.actual.volumes_by_position().enumerate())
                .filter(|(at, _)| store_listed.unnamed(*at))
                .map(|(_, volume)| volume)
                .filter(|volume| self.desired.spec(volume).is_none());
            unsettled.extend(unnamed.cloned());
        }
        self.schedule.mark_distinct(unsettled);
        self.adopt_claims_in_use();
        // What inputs taken while recovering changed is among what was marked above: a volume
        // they left wanted elsewhere, or wanted nowhere, is not settled.
    }

    /// Plans the recovery listings that are due.
    pub(super) fn plan_recovery(&mut self, now: Duration, ops: &mut Vec<Operation<D>>) {
        let Some(recovery) = &mut self.listings.recovery else {
            return;
        };
        let statuses = recovery.statuses.is_due(now);
        let attachments = recovery.attachments.is_due(now);
        if statuses {
            recovery.statuses = Load::Listing;
        }
        if attachments {
            recovery.attachments = Load::Listing;
        }
        if statuses {
            self.calls.gate.start(GateKey::StoreList);
            let id = self.next_op_id();
            self.calls.in_flight.insert(id, InFlight::ListStatuses, now);
            ops.push(Operation::ListStatuses { id });
        }
        if attachments {
            self.calls.gate.start(GateKey::List);
            let id = self.next_op_id();
            self.calls.in_flight.insert(id, InFlight::List, now);
            ops.push(Operation::ListAttachments { id });
        }
    }

    pub(super) fn plan_list(&mut self, now: Duration, ops: &mut Vec<Operation<D>>) {
        if self.calls.gate.is_running(&GateKey::List) {
            return;
        }
        self.calls.gate.start(GateKey::List);
        let id = self.next_op_id();
        self.calls.in_flight.insert(id, InFlight::List, now);
        self.listings.changed_while_listing = Some(BTreeSet::new());
        ops.push(Operation::ListAttachments { id });
    }

    /// An operation's result changed what is attached at (`volume`, `node`): a listing running
    /// now may have seen it before the change.
    pub(super) fn changed(&mut self, volume: &D::Volume, node: &D::Node) {
        if let Some(changed) = &mut self.listings.changed_while_listing {
            changed.insert((volume.clone(), node.clone()));
        }
    }
}
