//! Fencing without a human, in the reconciler: which nodes' machines to check, planning the
//! checks ([`Operation::CheckMachine`]) and taking their answers. The rule itself ("twice,
//! fresh") lives in [`MachineWatch`]; the detach it allows follows the usual safe path.

use std::time::Duration;

use tracing::{debug, warn};

use super::{Reconciler, ReconcilerError};
use crate::config::MachineFencing;
use crate::core::calls::backend::BackendError;
use crate::core::calls::backend::MachineState;
use crate::core::event::Event;
use crate::core::operation::OpKind;
use crate::core::operation::{InFlight, OpId, Operation};
use crate::core::rules::machine::{Answered, MachineWatch};
use crate::core::state::actual::ActualNode;
use crate::domain::Domain;

/// A detach of `volume` from `node` is being decided: if machine fencing is on and the node
/// is present, unhealthy and not fenced, and the detach is held by a mount (or a node never
/// heard from), or a fresh read held it back (`held_back`: the store says the volume is in use
/// while the core's view says not), the node's machine is wanted checked. Returns whether the
/// machine counts as off now (confirmed twice, fresh).
pub(super) fn held_detach<D: Domain>(
    machine: &mut MachineWatch<D>,
    config: Option<&MachineFencing>,
    now: Duration,
    (volume, node): (&D::Volume, &D::Node),
    facts: Option<&ActualNode<D>>,
    held_back: bool,
) -> bool {
    let (Some(config), Some(facts)) = (config, facts) else {
        return false;
    };
    if !facts.present || facts.healthy || facts.fenced {
        return false;
    }
    if held_back || facts.reports_in_use(volume) != Some(false) {
        machine.want(node, now);
    }
    machine.is_off(node, now, config.max_age)
}

/// [`held_detach`]'s answer without wanting a check: whether `node`'s machine counts as off
/// now for a detach (machine fencing on, the node present, unhealthy and not fenced).
pub(super) fn counts_off<D: Domain>(
    machine: &MachineWatch<D>,
    config: Option<&MachineFencing>,
    now: Duration,
    node: &D::Node,
    facts: Option<&ActualNode<D>>,
) -> bool {
    match (config, facts) {
        (Some(config), Some(f)) if f.present && !f.healthy && !f.fenced => {
            machine.is_off(node, now, config.max_age)
        }
        _ => false,
    }
}

impl<D: Domain> Reconciler<D> {
    /// Plans the machine checks that are wanted and due, one at a time per node. A node that
    /// became healthy or fenced, or lost the attachments that wanted it, since it was wanted
    /// is not checked.
    pub(super) fn plan_machine_checks(&mut self, now: Duration, ops: &mut Vec<Operation<D>>) {
        let Some(config) = self.config.machine_fencing else {
            return;
        };
        for node in self.calls.machine.due(now, config.max_age) {
            let still_held = self
                .actual
                .node(&node)
                .is_some_and(|n| n.present && !n.healthy && !n.fenced)
                && self
                    .actual
                    .volumes_on(&node)
                    .any(|v| !self.desired.is_desired(v, &node));
            if !still_held {
                self.calls.machine.reset(&node);
                continue;
            }
            let id = self.next_op_id();
            debug!(%id, node = ?node, "planning a machine check");
            self.calls.machine.started(&node, id);
            self.calls.in_flight.insert(
                id,
                InFlight::CheckMachine {
                    node: node.clone(),
                    asked: now,
                },
                now,
            );
            ops.push(Operation::CheckMachine { id, node });
        }
    }

    /// The machine check planned as `id` finished: what the backend says about the node's
    /// machine ([`AttachBackend::machine_state`](crate::traits::AttachBackend::machine_state)).
    ///
    /// Two [`MachineState::Off`] answers in a row, the second asked at least
    /// `MachineFencing::interval` after the first came back, make the unhealthy node count as
    /// fenced ([`Event::NodePoweredOff`]) while the last one is younger than
    /// `MachineFencing::max_age`: its held detaches go ahead, forced for
    /// [`ForceReason::PoweredOff`](crate::core::ForceReason::PoweredOff), each after the usual
    /// fresh read of the node. `Running`, `Unknown` or an error ([`Event::MachineCheckFailed`],
    /// once per run of failures) start over. Either way the node's volumes are looked at again,
    /// and the next check, if detaches still wait, comes an interval later.
    ///
    /// Refused, with nothing changed: an id no running operation has
    /// ([`ReconcilerError::UnknownOperation`]), or one of another kind
    /// ([`ReconcilerError::WrongResult`]).
    pub(super) fn machine_checked(
        &mut self,
        now: Duration,
        id: OpId,
        result: Result<MachineState, BackendError<D::Node>>,
    ) -> Result<(), ReconcilerError<D>> {
        let InFlight::CheckMachine { node, asked } = self.take_op(id, OpKind::CheckMachine)? else {
            unreachable!("kind checked by take_op");
        };
        let Some(config) = self.config.machine_fencing else {
            return Ok(());
        };
        let off = match &result {
            Ok(MachineState::Off) => Some(true),
            Ok(MachineState::Running | MachineState::Unknown) => Some(false),
            Err(_) => None,
        };
        match self
            .calls
            .machine
            .answered(&node, id, asked, now, off, &config)
        {
            Answered::Quiet => {}
            Answered::Fenced => {
                warn!(node = ?node, "the node's machine is powered off (twice, fresh): it counts as fenced");
                self.events
                    .push(Event::NodePoweredOff { node: node.clone() });
            }
            Answered::Failed => {
                let message = match &result {
                    Err(error) => error.to_string(),
                    Ok(_) => String::new(),
                };
                warn!(node = ?node, %message, "checking the node's machine failed");
                self.events.push(Event::MachineCheckFailed {
                    node: node.clone(),
                    message,
                });
            }
        }
        // Whatever it said, the node's held detaches look again: to go, or to want the next
        // check (which keeps the confirmation fresh while they wait).
        let volumes: Vec<D::Volume> = self.actual.volumes_on(&node).cloned().collect();
        self.schedule.mark_all(volumes);
        Ok(())
    }
}
