//! An attach: the look that decides it, room on a node at its attach limit, and Multi-Attach
//! warnings.

use super::*;

/// Why a node has no room for one more volume.
pub(super) enum NoRoom {
    /// The backend said it is full; attaches to it back off until `until`.
    BackendSaidFull { until: Duration },
    /// It holds `held` volumes (of `driver`'s, if some) of its limit of `limit`.
    Limit {
        driver: Option<DriverId>,
        held: u32,
        limit: u32,
    },
}

impl<D: Domain> Reconciler<D> {
    /// Gathers what the core knows about an attach of (`volume`, `node`), decides it
    /// ([`decide_attach`]) and applies the decision.
    pub(super) fn consider_attach(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        owned: D::Node,
        spec: SpecFacts,
        ops: &mut Vec<Operation<D>>,
    ) {
        let node = &owned;
        let key = gate_key_ref::<D>(spec.access, volume, node);
        let single_node = spec.access == Access::SingleNode;
        let (here, elsewhere) = self.attach_view(volume, node, single_node);
        if let Some((.., progress)) = here {
            // Needed again: a later detach starts a new unmount wait, and a new episode.
            self.actual.cancel_detach_request(volume, node);
            if progress != DetachProgress::default() {
                self.forget_detach_checks(volume, node);
                self.set_release(volume, node, Release::None);
                self.forget_told(volume, node, Told::STUCK);
                self.forget_told(volume, node, Told::BLOCKED);
            }
        }
        let facts = self.attach_facts(now, &key, volume, here, elsewhere, single_node);
        if facts.running {
            // Whatever waits on it (a report again, an attach here) is decided at its end.
            self.calls.in_flight.relook_when_done(volume);
        }
        match decide_attach(&facts) {
            Attach::Attached { report_again } => {
                if report_again {
                    self.actual.set_withheld(volume, node, false);
                }
            }
            Attach::Running => {}
            Attach::RetryAt(retry) => self.schedule.wake_volume_at(retry, volume.clone()),
            Attach::HeldBy(holders) => self.report_multi_attach(volume, node, holders),
            Attach::Go if !spec.attach_required => {
                // Claimed, not attached: no backend call. The grant is what an attach's
                // success would be; the node lists the volume, and its agent may use it.
                debug!(volume = ?volume, node = ?node, "granting a claim-only volume");
                self.changed(volume, node);
                self.actual.set_attached(volume, node, None);
                self.events.push(Event::ClaimGranted {
                    volume: volume.clone(),
                    node: owned,
                });
            }
            Attach::Go => {
                // A volume with no record here takes room on the node; an Uncertain one
                // already holds it.
                let slot = here.is_none();
                debug_assert!(spec.attach_required);
                if slot {
                    if let Some(reason) = self.no_room(now, volume, node, spec.driver) {
                        return self.wait_for_room(volume, node, reason);
                    }
                }
                if !self.calls.admission.admit(Class::Attach, volume, node, now) {
                    // Queued: a pass offers it capacity when its turn comes.
                    return;
                }
                let Some(payload) = self.payload_for_call(volume, spec.at) else {
                    // Not reached (see `payload_for_call`); the attach slot is given back.
                    self.calls.admission.give_back(Class::Attach);
                    return;
                };
                if slot {
                    self.calls.capacity.attach_started(node, spec.driver);
                } else {
                    self.actual.attach_planned(volume, node);
                }
                self.take_key(&key);
                let id = self.next_op_id();
                self.calls.admission.started(Class::Attach, id, node, now);
                debug!(%id, volume = ?volume, node = ?node, "planning attach");
                self.calls.in_flight.insert(
                    id,
                    InFlight::Attach {
                        volume: volume.clone(),
                        node: node.clone(),
                        access: spec.access,
                        slot,
                        driver: spec.driver.filter(|_| slot),
                    },
                    now,
                );
                ops.push(Operation::Attach {
                    id,
                    volume: volume.clone(),
                    node: owned,
                    payload,
                });
            }
        }
    }

    /// The records of `volume` an attach to `node` looks at, looked up once: this node's
    /// (state, withheld, detach), and for a single-node volume not attached here yet, the
    /// other nodes' with their states.
    #[allow(clippy::type_complexity)]
    #[inline(always)]
    pub(super) fn attach_view(
        &self,
        volume: &D::Volume,
        node: &D::Node,
        single_node: bool,
    ) -> (
        Option<(AttachState, bool, DetachProgress)>,
        SmallVec<[(D::Node, AttachState); 1]>,
    ) {
        let list = self.actual.attachments(volume);
        let here = list
            .iter()
            .find(|a| a.node == *node)
            .map(|a| (a.state, a.withheld, a.detach));
        let attached_here = here.is_some_and(|(state, ..)| state == AttachState::Attached);
        let elsewhere = if single_node && !attached_here {
            list.iter()
                .filter(|a| a.node != *node)
                .map(|a| (a.node.clone(), a.state))
                .collect()
        } else {
            SmallVec::new()
        };
        (here, elsewhere)
    }

    /// What [`decide_attach`] needs, from the records ([`attach_view`](Self::attach_view))
    /// and the gate.
    #[inline(always)]
    pub(super) fn attach_facts(
        &self,
        now: Duration,
        key: &GateKeyRef<'_, D>,
        volume: &D::Volume,
        here: Option<(AttachState, bool, DetachProgress)>,
        elsewhere: SmallVec<[(D::Node, AttachState); 1]>,
        single_node: bool,
    ) -> AttachFacts<D::Node> {
        let bugs = self.bugs();
        let gate = if self.runs_as_single_node(key, volume) {
            Err(None)
        } else {
            self.may_start(key, OpKind::Attach, now)
        };
        AttachFacts {
            here: here.map(|(state, ..)| state),
            withheld: here.is_some_and(|(_, withheld, _)| withheld),
            // The gate answers "wait" (no retry time) exactly when an operation on the key runs.
            running: gate == Err(None),
            gate,
            single_node,
            elsewhere,
            lose_report: bugs.c1_lose_report_on_failed_detach,
            ignore_uncertain: bugs.c2_ignore_uncertain_holder,
        }
    }

    /// How many attachments `node` holds or is being given that count against its limit:
    /// attached, maybe attached (Uncertain, a detach under way included) and attaching.
    pub(super) fn occupied(&self, node: &D::Node) -> u32 {
        let held = self
            .actual
            .volumes_on(node)
            .filter(|v| self.desired.spec(v).is_none_or(|s| s.attach_required))
            .count();
        u32::try_from(held)
            .unwrap_or(u32::MAX)
            .saturating_add(self.calls.capacity.attaching(node))
    }

    /// How many of `driver`'s volumes `node` holds or is being given, counted as
    /// [`occupied`](Self::occupied) counts.
    pub(super) fn occupied_by(&self, node: &D::Node, driver: DriverId) -> u32 {
        let held = self
            .actual
            .volumes_on(node)
            .filter(|v| {
                self.desired
                    .spec(v)
                    .is_some_and(|s| s.attach_required && s.driver == Some(driver))
            })
            .count();
        u32::try_from(held)
            .unwrap_or(u32::MAX)
            .saturating_add(self.calls.capacity.attaching_of(node, driver))
    }

    /// Why an attach of a volume (of `driver`'s) not yet on `node` must wait for room there,
    /// if it must (see [`room`](Self::room)); a node the backend said is full has the volume
    /// woken when its backoff ends.
    pub(super) fn no_room(
        &mut self,
        now: Duration,
        volume: &D::Volume,
        node: &D::Node,
        driver: Option<DriverId>,
    ) -> Option<String> {
        Some(match self.room(now, node, driver)? {
            NoRoom::BackendSaidFull { until } => {
                self.schedule.wake_volume_at(until, volume.clone());
                "the backend said the node can hold no more volumes; attaches to it back off"
                    .to_string()
            }
            NoRoom::Limit {
                driver: None,
                held,
                limit,
            } => format!(
                "the node holds {held} volumes (attached, maybe attached or being attached) \
                 of its limit of {limit}; the attach waits until one leaves"
            ),
            NoRoom::Limit {
                driver: Some(driver),
                held,
                limit,
            } => format!(
                "the node holds {held} volumes of driver {} (attached, maybe attached or being \
                 attached) of its limit of {limit} for that driver; the attach waits until one \
                 leaves",
                driver.get()
            ),
        })
    }

    /// Whether `node` has room for one more volume (of `driver`'s): not when the backend
    /// said it is full and attaches to it back off, nor at the node's limit or the driver's.
    #[inline]
    pub(super) fn room(
        &self,
        now: Duration,
        node: &D::Node,
        driver: Option<DriverId>,
    ) -> Option<NoRoom> {
        // Only a node the backend said is full has a backoff to look at (no key built else).
        if self.calls.capacity.said_full(node) {
            let backoff = self.calls.gate.may_start(
                &GateKeyRef::<D>::NodeCapacity(node),
                OpKind::Attach,
                now,
            );
            if let Err(Some(until)) = backoff {
                return Some(NoRoom::BackendSaidFull { until });
            }
        }
        let facts = self.actual.node(node)?;
        if let Some(limit) = facts.attach_limit {
            let held = self.occupied(node);
            if held >= limit {
                return Some(NoRoom::Limit {
                    driver: None,
                    held,
                    limit,
                });
            }
        }
        let driver = driver?;
        let limit = (facts.driver_limits.iter())
            .find(|(d, _)| *d == driver)
            .map(|(_, limit)| *limit)?;
        let held = self.occupied_by(node, driver);
        (held >= limit).then_some(NoRoom::Limit {
            driver: Some(driver),
            held,
            limit,
        })
    }

    /// `volume` waits for room on `node`: named in a [`Event::NodeFull`] once per wait (again when a workload joins it), and
    /// looked at again when an attachment there ends, an attach to it fails, the node's limit
    /// changes, or the node's backoff ends.
    pub(super) fn wait_for_room(&mut self, volume: &D::Volume, node: &D::Node, reason: String) {
        let workloads = self
            .desired
            .wanted_on(volume)
            .iter()
            .find(|w| w.node == *node)
            .map(|w| w.workloads.to_vec())
            .unwrap_or_default();
        if !self.calls.capacity.wait(node, volume, &workloads) {
            return;
        }
        debug!(volume = ?volume, node = ?node, %reason, "attach waits for room on the node");
        self.events.push(Event::NodeFull {
            node: node.clone(),
            volume: volume.clone(),
            workloads,
            reason,
        });
    }

    /// An attachment on `node` ended, or an attach to it failed, or its limit changed: the
    /// volumes waiting for room there (and still wanted there) look again.
    pub(super) fn room_freed(&mut self, node: &D::Node) {
        let (desired, actual) = (&self.desired, &self.actual);
        self.calls.capacity.retain(node, |v| {
            desired.is_desired(v, node) && actual.get(v, node).is_none()
        });
        let waiting = self.calls.capacity.waiting(node);
        self.schedule.mark_all(waiting);
    }

    pub(super) fn report_multi_attach(
        &mut self,
        volume: &D::Volume,
        node: &D::Node,
        holders: SmallVec<[D::Node; 1]>,
    ) {
        let wanted = self.desired.wanted_on(volume);
        let Some(waiting) = wanted.iter().find(|w| w.node == *node) else {
            return;
        };
        if waiting.multi_attach_reported {
            return;
        }
        let holders = holders
            .into_iter()
            .map(|h| Holder {
                workloads: wanted
                    .iter()
                    .find(|w| w.node == h)
                    .map(|w| w.workloads.to_vec())
                    .unwrap_or_default(),
                node: h,
            })
            .collect();
        self.events.push(Event::MultiAttach {
            volume: volume.clone(),
            node: node.clone(),
            workloads: waiting.workloads.to_vec(),
            holders,
        });
        self.desired.set_multi_attach_reported(volume, node, true);
    }
}
