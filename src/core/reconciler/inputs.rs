//! What the orchestrator tells the core ([`Input`]): volumes, nodes, workloads, relists and an
//! operator's release, each applied to the desired and actual state and marking what must be
//! looked at again.

use super::*;

impl<D: Domain> Reconciler<D> {
    pub(super) fn apply(&mut self, input: Input<D>) -> Result<(), ReconcilerError<D>> {
        match input {
            Input::SetVolume { volume, spec } => {
                if let Some(seen) = &mut self.listings.relists.volumes {
                    seen.insert(volume.clone());
                }
                self.set_volume(volume, spec)
            }
            Input::VolumeRemoved { volume } => {
                self.remove_volume(&volume);
                Ok(())
            }
            Input::NodeUpdated { node, facts } => {
                if let Some(seen) = &mut self.listings.relists.nodes {
                    seen.insert(node.clone());
                }
                self.node_updated(node, facts);
                Ok(())
            }
            Input::NodeRemoved { node } => {
                self.node_removed(&node);
                Ok(())
            }
            Input::WorkloadScheduled {
                workload,
                node,
                volumes,
            } => {
                if let Some(seen) = &mut self.listings.relists.workloads {
                    seen.insert(workload.clone());
                }
                self.add_workload(workload, node, &volumes)
            }
            Input::WorkloadRemoved { workload } => {
                self.remove_workload(&workload);
                Ok(())
            }
            Input::RelistStarted { kind } => {
                self.listings.relists.start(kind);
                Ok(())
            }
            Input::RelistDone { kind } => self.relist_done(kind),
            Input::ReleaseVolume { volume, node } => self.release(volume, node),
        }
    }

    /// Removes every object of `kind` not seen since its relist started, in id order.
    pub(super) fn relist_done(&mut self, kind: Kind) -> Result<(), ReconcilerError<D>> {
        if !self.listings.relists.listing(kind) {
            return Err(ReconcilerError::NoRelist { kind });
        }
        match kind {
            Kind::Volume => {
                let seen = self.listings.relists.volumes.take().unwrap_or_default();
                let gone = unseen(self.desired.registered_volumes(), &seen);
                for volume in gone {
                    self.remove_volume(&volume);
                }
            }
            Kind::Node => {
                let seen = self.listings.relists.nodes.take().unwrap_or_default();
                let gone = unseen(self.desired.nodes(), &seen);
                for node in gone {
                    self.node_removed(&node);
                }
            }
            Kind::Workload => {
                let seen = self.listings.relists.workloads.take().unwrap_or_default();
                let gone = unseen(self.desired.workloads(), &seen);
                for workload in gone {
                    self.remove_workload(&workload);
                }
            }
        }
        Ok(())
    }

    /// An operator's release of `volume` from `node`; see [`Input::ReleaseVolume`].
    pub(super) fn release(
        &mut self,
        volume: D::Volume,
        node: D::Node,
    ) -> Result<(), ReconcilerError<D>> {
        let refusal = if self.actual.get(&volume, &node).is_none() {
            Some(ReleaseRefusal::NotAttached)
        } else if !self.actual.get(&volume, &node).is_some_and(|a| a.landed) {
            Some(ReleaseRefusal::AttachMayLand)
        } else if !self.actual.node(&node).is_some_and(|n| n.fenced) {
            Some(ReleaseRefusal::NotFenced)
        } else if let Some(w) = self
            .desired
            .wanted_on(&volume)
            .iter()
            .find(|w| w.node == node)
        {
            Some(ReleaseRefusal::StillWanted {
                workloads: w.workloads.to_vec(),
            })
        } else if self.busy(&volume, &node) {
            Some(ReleaseRefusal::OperationRunning)
        } else {
            None
        };
        if let Some(reason) = refusal {
            return Err(ReconcilerError::ReleaseRefused {
                volume,
                node,
                reason,
            });
        }
        info!(volume = ?volume, node = ?node, "an operator released the volume from its fenced node; a verify decides it");
        // A release of a pair whose release is pending already changes nothing: the verify
        // that decides the first decides it too.
        if self
            .actual
            .get(&volume, &node)
            .is_some_and(|a| a.detach.release == Release::None)
        {
            // A verify running now was planned before the operator's word: the next decides.
            let release = if self.calls.gate.is_running(&GateKeyRef::<D>::Verify(&node)) {
                Release::BehindVerify
            } else {
                Release::Pending
            };
            self.set_release(&volume, &node, release);
        }
        self.schedule.mark(volume);
        Ok(())
    }

    /// Registers or updates a volume's access mode and payload; see [`Input::SetVolume`].
    pub(crate) fn set_volume(
        &mut self,
        volume: D::Volume,
        spec: VolumeSpec<D::Payload>,
    ) -> Result<(), ReconcilerError<D>> {
        if self
            .desired
            .spec(&volume)
            .is_some_and(|old| old.attach_required != spec.attach_required)
        {
            let (nodes, _) = self.holders(&volume);
            if !nodes.is_empty() {
                return Err(ReconcilerError::AttachModeConflict { volume, nodes });
            }
        }
        if spec.access == Access::SingleNode && self.access(&volume) == Access::MultiNode {
            // Narrowing is refused while the volume is on several nodes, or while any attach
            // or detach of it runs (its gate key is per node, and would no longer keep a
            // second attach elsewhere from starting).
            let (nodes, running) = self.holders(&volume);
            if nodes.len() > 1 || running {
                return Err(ReconcilerError::AccessConflict { volume, nodes });
            }
        }
        self.retiring.remove(&volume);
        let changed = self.desired.set_volume(volume, spec);
        self.schedule.mark_all(changed);
        Ok(())
    }

    /// The nodes `volume` is attached to (or maybe attached, or claimed by) or has an attach or
    /// detach running on, sorted, and whether any such operation runs: what a change of its
    /// spec must not pull the rug from under.
    pub(super) fn holders(&self, volume: &D::Volume) -> (Vec<D::Node>, bool) {
        let mut nodes: Vec<D::Node> = self
            .actual
            .attachments(volume)
            .iter()
            .map(|a| a.node.clone())
            .collect();
        let mut running = false;
        for op in self.calls.in_flight.values() {
            if let InFlight::Attach {
                volume: v, node, ..
            }
            | InFlight::Detach {
                volume: v, node, ..
            } = op
            {
                if v == volume {
                    running = true;
                    nodes.push(node.clone());
                }
            }
        }
        nodes.sort();
        nodes.dedup();
        (nodes, running)
    }

    /// Unregisters a volume (its PV or claim was deleted), so that volume churn does not grow
    /// the core's state without bound; see [`Input::VolumeRemoved`].
    ///
    /// Workloads using it wait for it again. A volume still attached somewhere is detached
    /// first, as any volume no workload needs; its spec (the payload the detach needs) is
    /// forgotten once no attachment is left. A no-op unless registered.
    pub(crate) fn remove_volume(&mut self, volume: &D::Volume) {
        if !self.desired.is_registered(volume) {
            return;
        }
        self.retiring.insert(volume.clone());
        let changed = self.desired.unregister_volume(volume);
        self.schedule.mark_all(changed);
    }

    /// A node exists (new or updated) with these facts; it becomes managed, and workloads that
    /// waited for it are placed.
    pub(crate) fn node_updated(&mut self, node: D::Node, facts: NodeFacts<D::Volume>) {
        // A node the store said it lacks is shown again: write its status afresh (50721), even
        // if its workloads kept it in the core all along.
        let appeared = !self.actual.node_present(&node) || self.status.is_missing(&node);
        let old_limits = self.actual.node(&node).map_or((None, Vec::new()), |n| {
            (n.attach_limit, n.driver_limits.to_vec())
        });
        if !facts.fenced && self.detaches.has_releases() {
            // A release was accepted for a fenced node only: unfenced, it is void.
            for volume in self.detaches.releases_on(&node).to_vec() {
                self.set_release(&volume, &node, Release::None);
            }
        }
        let new_limits = (facts.attach_limit, facts.driver_limits.clone());
        if facts.healthy || facts.fenced {
            // A machine check's run of answers starts over (fencing without a human).
            self.calls.machine.reset(&node);
        }
        let placed = self.desired.add_node(node.clone());
        self.schedule.mark_all(placed);
        // Newly reported in use: an unchanged report was looked at when it came.
        let newly: Vec<D::Volume> = match (&facts.in_use, self.listings.recovery.is_none()) {
            (Some(list), true) => {
                let old = self.actual.node(&node).and_then(|n| n.in_use.as_deref());
                let old = old.unwrap_or(&[]);
                list.iter()
                    .filter(|v| old.binary_search(v).is_err())
                    .cloned()
                    .collect()
            }
            _ => Vec::new(),
        };
        let affected = self.actual.set_node(node.clone(), facts);
        self.schedule.mark_all(affected);
        // A claim its status may no longer list (see `adopt_claims_in_use`, which looks at
        // every node once recovery is done). Held nowhere, so its first asker takes it.
        if !newly.is_empty() {
            for volume in self.unheld_claims(newly.iter()) {
                self.adopt_claim(volume, node.clone());
            }
        }
        if old_limits != new_limits {
            // A raised (or lowered, or lifted) limit: the volumes waiting for room look again.
            self.room_freed(&node);
        }
        if appeared {
            if self.detaches.blocked() > 0 {
                // Whatever kept its detaches from a human's reach may have changed: told again.
                let volumes: Vec<D::Volume> = self.actual.volumes_on(&node).cloned().collect();
                for volume in volumes {
                    self.forget_told(&volume, &node, Told::BLOCKED);
                }
            }
            self.status.node_appeared(node);
        }
    }

    /// The node object is gone. Workloads placed on it wait for it again, and their volumes
    /// are no longer desired there.
    pub(crate) fn node_removed(&mut self, node: &D::Node) {
        self.listings.removed_nodes.push(node.clone());
        if let Some(recovery) = &mut self.listings.recovery {
            recovery.removed.insert(node.clone());
        }
        let changed = self.desired.remove_node(node);
        self.schedule.mark_all(changed);
        let affected = self.actual.remove_node(node);
        self.schedule.mark_all(affected);
        self.status.node_gone(node);
        // Its volumes are looked at again anyway; no write will be acknowledged for it, and
        // their detaches ask for a read of their own.
        for volume in self.detaches.node_gone(node) {
            if let Some(a) = self.actual.get_mut(&volume, node) {
                a.detach.stage = DetachStage::Idle;
            }
        }
        self.status_turns.read_last.remove(node);
        self.status_turns.cache_consulted.remove(node);
        self.calls.capacity.forget_node(node);
        self.calls.machine.forget(node);
        self.calls.admission.forget_node(node);
        // Nor is any retry of its status write or verify due: a node of the same name later
        // is a new object.
        self.calls.gate.forget_where(|key| match key {
            GateKey::Status(n) | GateKey::Verify(n) | GateKey::NodeCapacity(n) => n == node,
            GateKey::Volume(_) | GateKey::Attachment(..) | GateKey::List | GateKey::StoreList => {
                false
            }
        });
    }

    /// Places `workload` on `node` using `volumes` (replacing an earlier placement), or makes
    /// it wait for what of them is not known.
    pub(crate) fn add_workload(
        &mut self,
        workload: D::Workload,
        node: D::Node,
        volumes: &[D::Volume],
    ) -> Result<(), ReconcilerError<D>> {
        let mut changed = std::mem::take(&mut self.scratch.changed_volumes);
        // A new placement (not a relist's repeat of one) is watched for a long wait.
        let watched = self.waits.is_on().then(|| {
            let before = self.desired.placement(&workload).map(|(n, _)| n.clone());
            (workload.clone(), before)
        });
        let added = self
            .desired
            .add_workload_into(workload, node, volumes, &mut changed);
        self.schedule.mark_all(changed.drain(..));
        self.scratch.changed_volumes = changed;
        if let (Ok(()), Some((workload, before))) = (&added, watched) {
            if let Some((node, _)) = self.desired.placement(&workload) {
                if before.as_ref() != Some(node) {
                    let node = node.clone();
                    self.waits.placed(workload, node);
                }
            }
        }
        Ok(added?)
    }

    /// The workload is gone (a no-op if unknown): its volumes are no longer needed on its node
    /// by it.
    pub(crate) fn remove_workload(&mut self, workload: &D::Workload) {
        let mut changed = std::mem::take(&mut self.scratch.changed_volumes);
        self.desired.remove_workload_into(workload, &mut changed);
        self.schedule.mark_all(changed.drain(..));
        self.scratch.changed_volumes = changed;
    }

    /// Stamps the waits of workloads that began since the last pass, and names in an event
    /// each that has waited [`Config::pending_workload_warning`].
    pub(super) fn warn_pending(&mut self, now: Duration) {
        for p in self.desired.poll_pending(now) {
            let waited = now.saturating_sub(p.since.unwrap_or(now));
            warn!(workload = ?p.workload, node = ?p.node, missing = ?p.missing, ?waited, "a workload waits for a node or volumes the controller was not told of");
            self.events.push(Event::WorkloadWaiting {
                workload: p.workload,
                node: p.node,
                missing: p.missing,
                waited,
            });
        }
    }
}
