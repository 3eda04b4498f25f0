//! The planner check: every operation the reconciler plans, across a history of steps and
//! answers, is checked against the simulated truth, and the run must settle.

use std::collections::BTreeSet;
use std::time::Duration;

use arbitrary::Arbitrary;

use super::truth::{Truth, placements, spec_of, start};
use super::{T, node, volume};
use crate::config::Config;
use crate::core::calls::backend::MachineState;
use crate::core::calls::backend::{AttachInfo, BackendAttachment, BackendError};
use crate::core::calls::reported_volumes::ReportedVolumes;
use crate::core::calls::store::StoreError;
use crate::core::input::Input;
use crate::core::operation::OpKind;
use crate::core::operation::{OpId, Operation};
use crate::core::outcome::Outcome;
use crate::core::reconciler::Reconciler;
use crate::testkit::{Harness, Held};

/// How a planned operation ends in [`check_planner`].
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Answer {
    /// Success.
    Ok,
    /// Failed, did nothing.
    Transient,
    /// Failed, but took effect.
    Uncertain,
    /// Store: another writer won the race; nothing was written.
    Conflict,
}

/// One input to the planner harness.
#[derive(Arbitrary, Clone, Debug)]
pub enum PlanStep {
    /// Place workload `w` on a node with up to three volumes.
    Schedule(u8, u8, Vec<u8>),
    /// Remove workload `w`.
    Remove(u8),
    /// New node facts: healthy (a crashed agent freezes), fenced (powered off), and whether the
    /// agent reports its pods' volumes in use before mounting or only what it has mounted.
    Facts(u8, bool, bool, bool),
    /// Advance virtual time by this many 10 ms and poll.
    Advance(u8),
    /// Finish the n-th running operation with an outcome.
    Finish(u8, Answer),
    /// The controller restarts: running operations are lost, and a new core starts from the
    /// orchestrator's view (nodes not heard from yet) and recovers from the store and backend.
    Restart,
}

/// Drives a [`Reconciler`] with `steps`, runs what it plans against a simulated truth (real
/// attachments, the store's lists, mounts made by node agents that mount only what their
/// status lists), and checks every plan: no single-node volume attached to two nodes (I1), no
/// detach of a volume mounted on an unfenced node (I2), no detach while the store still lists
/// the volume for a live node (C5). Volumes 0..3 are single-node, 3..6 multi-node.
///
/// Then no more faults and no more inputs: every node recovers, every operation succeeds, and
/// within 15 virtual minutes nothing may be left attached that no workload needs, and every
/// workload must have its volumes (no wait without a certain end: a leaked attachment or a
/// stuck workload is a violation). A restart loses the running operations, whose calls still
/// land in the backend after the new core recovered.
pub fn check_planner(steps: &[PlanStep], config: Config) -> Result<(), String> {
    let mut h = Harness::with_world(start(&config, &[])?, Truth::default());
    // The operations under way, with the time each was planned, for `check_load`.
    let mut running: Held<T> = Held::default();
    let single = |v: u8| v < 3;
    for (i, step) in steps.iter().enumerate() {
        match step.clone() {
            PlanStep::Schedule(w, n, vs) => {
                let vs: Vec<u8> = vs.iter().take(3).map(|v| volume(*v)).collect();
                h.handle(Input::WorkloadScheduled {
                    workload: w % 8,
                    node: node(n),
                    volumes: vs,
                })
                .map_err(|e| format!("step {i}: {e}"))?;
            }
            PlanStep::Remove(w) => {
                h.handle(Input::WorkloadRemoved { workload: w % 8 })
                    .map_err(|e| format!("step {i}: {e}"))?;
            }
            PlanStep::Facts(n, healthy, fence, report) => {
                let n = node(n);
                let truth = &mut h.world;
                if fence {
                    truth.fenced.insert(n);
                    // A fenced node is powered off: nothing is mounted any more.
                    truth.mounted.retain(|(_, mn)| *mn != n);
                } else {
                    truth.fenced.remove(&n);
                }
                if healthy {
                    truth.down.remove(&n);
                } else {
                    truth.down.insert(n);
                }
                truth.in_use_on.insert(n, report);
            }
            PlanStep::Advance(ticks) => {
                let now = h.now + Duration::from_millis(10 * u64::from(ticks));
                for op in h.poll_at(now) {
                    check_plan(&op, &h.world, &h.core, single)
                        .map_err(|e| format!("step {i} at {now:?}: {e}"))?;
                    running.hold(now, op);
                }
                check_load(&running, now, &config)
                    .map_err(|e| format!("step {i} at {now:?}: {e}"))?;
            }
            PlanStep::Finish(k, outcome) => {
                if running.is_empty() {
                    continue;
                }
                let op = running.take(usize::from(k) % running.len());
                finish(&mut h, op, outcome).map_err(|e| format!("step {i}: {e}"))?;
            }
            PlanStep::Restart => {
                let lost = running.take_all();
                h.core = start(&config, &placements(&h.core))?;
                // The new core's first pass plans its recovery listings and nothing else.
                // The backend lists what is attached and what is still attaching (the contract
                // of `AttachBackend::list`): the calls the old controller lost are under way.
                let attaching = lost.iter().filter_map(|op| match op {
                    Operation::Attach { volume, node, .. } => Some((*volume, *node)),
                    _ => None,
                });
                let listed: BTreeSet<(u8, u8)> =
                    h.world.attached.iter().copied().chain(attaching).collect();
                let due = h
                    .core
                    .next_deadline()
                    .ok_or("a new core plans its recovery")?;
                // Polled at the deadline the new core asks for; the answers come at `now`.
                for op in h.core.poll(due.max(h.now)) {
                    let id = op.id();
                    let fed = match op {
                        Operation::ListStatuses { .. } => {
                            let truth = &h.world;
                            let statuses = truth
                                .stored
                                .keys()
                                .map(|n| (*n, truth.status(*n)))
                                .collect();
                            h.finish(id, Outcome::ListStatuses(Ok(statuses)))
                        }
                        Operation::ListAttachments { .. } => {
                            let list = listed
                                .iter()
                                .map(|(v, n)| BackendAttachment {
                                    volume: *v,
                                    node: *n,
                                    spec: spec_of(*v),
                                })
                                .collect();
                            h.finish(id, Outcome::List(Ok(list)))
                        }
                        other => {
                            return Err(format!("step {i}: {other:?} planned while recovering"));
                        }
                    };
                    fed.map_err(|e| format!("step {i}: {e}"))?;
                }
                if h.core.is_recovering() {
                    return Err(format!("step {i}: still recovering after both listings"));
                }
                // Then they land in the backend, after the new controller recovered.
                for op in lost {
                    match op {
                        Operation::Attach { volume, node, .. } => {
                            h.world.attached.insert((volume, node));
                        }
                        Operation::Detach { volume, node, .. } => {
                            h.world.attached.remove(&(volume, node));
                        }
                        _ => {}
                    }
                }
            }
        }
        h.world.agents(&mut h.core);
    }
    settle(&mut h, running)
}

/// The attach and detach calls running stay within `Config::backend_load`, each class its own:
/// those planned less than `OverdueCalls::after` before `now` within the limit, all of them
/// within the limit plus `OverdueCalls::max`. Each is held with the time it was planned.
fn check_load(running: &Held<T>, now: Duration, config: &Config) -> Result<(), String> {
    let load = config.backend_load;
    let max = load.overdue.map_or(0, |o| o.max);
    let young = |at: &Duration| {
        let after = load.overdue.map_or(Duration::MAX, |o| o.after);
        now.saturating_sub(*at) < after
    };
    for (kind, limit) in [
        (OpKind::Attach, load.max_attaches),
        (OpKind::Detach, load.max_detaches),
    ] {
        let Some(limit) = limit else { continue };
        let calls = || running.iter().filter(|(_, op)| op.kind() == kind);
        let (count, young) = (calls().count(), calls().filter(|(at, _)| young(at)).count());
        if young > limit {
            return Err(format!(
                "{young} {kind:?} calls running that are not overdue, limit {limit}"
            ));
        }
        if count > limit + max {
            return Err(format!(
                "{count} {kind:?} calls running, limit {limit} and {max} overdue"
            ));
        }
    }
    Ok(())
}

/// No more faults or inputs: every node recovers and every operation succeeds. Fails if an
/// attachment no workload needs is still there after 15 virtual minutes.
fn settle(h: &mut Harness<T, Truth>, mut running: Held<T>) -> Result<(), String> {
    let truth = &mut h.world;
    truth.fenced.clear();
    truth.down.clear();
    truth.in_use_on.clear();
    let end = h.now + Duration::from_secs(15 * 60);
    loop {
        for op in running.take_all() {
            finish(h, op, Answer::Ok)?;
        }
        h.world.agents(&mut h.core);
        let now = match h.core.next_deadline() {
            Some(due) if due <= end => h.now.max(due),
            _ => break,
        };
        // Every operation is finished at once here: none is older than this pass.
        for op in h.poll_at(now) {
            check_plan(&op, &h.world, &h.core, |v| v < 3)
                .map_err(|e| format!("settling at {now:?}: {e}"))?;
            running.hold(now, op);
        }
        check_load(&running, now, h.core.config())
            .map_err(|e| format!("settling at {now:?}: {e}"))?;
    }
    let (core, truth) = (&h.core, &h.world);
    let leaked: Vec<&(u8, u8)> = truth
        .attached
        .iter()
        .filter(|(v, n)| !core.desired().is_desired(v, n))
        .collect();
    // Every workload gets its volumes attached and listed in its node's status, unless another
    // node's workload holds the same single-node volume (Multi-Attach: one of them waits).
    let placements = placements(core);
    for (w, n, vs) in &placements {
        for v in vs {
            let contended = *v < 3
                && placements
                    .iter()
                    .any(|(_, other, ovs)| other != n && ovs.contains(v));
            let listed = truth.stored.get(n).is_some_and(|l| l.contains(v));
            let served = truth.attached.contains(&(*v, *n)) && listed;
            if !(contended || served) {
                return Err(format!(
                    "stuck: workload {w} on {n} waits for volume {v} (attached: {}, listed: {listed}, core: {:?})",
                    truth.attached.contains(&(*v, *n)),
                    core.actual().state(v, n)
                ));
            }
        }
    }
    if leaked.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "leak: {leaked:?} (volume, node) still attached after settling, nothing needs them (core: {:?})",
            leaked
                .iter()
                .map(|(v, n)| core.actual().state(v, n))
                .collect::<Vec<_>>()
        ))
    }
}

fn check_plan(
    op: &Operation<T>,
    truth: &Truth,
    core: &Reconciler<T>,
    single: impl Fn(u8) -> bool,
) -> Result<(), String> {
    match op {
        Operation::Attach { volume, node, .. } => {
            let elsewhere: Vec<_> = truth
                .attached
                .iter()
                .filter(|(v, n)| v == volume && n != node)
                .collect();
            if single(*volume) && !elsewhere.is_empty() {
                return Err(format!(
                    "I1: attach of single-node {volume} to {node} while attached to {elsewhere:?} (core: {:?})",
                    core.actual().attachments(volume)
                ));
            }
        }
        Operation::Detach {
            volume,
            node,
            force,
            ..
        } => {
            if truth.mounted.contains(&(*volume, *node)) && !truth.fenced.contains(node) {
                return Err(format!(
                    "I2: detach of {volume} mounted on unfenced {node} ({force:?})"
                ));
            }
            if truth.stored.get(node).is_some_and(|s| s.contains(volume)) {
                return Err(format!(
                    "C5: detach of {volume} still listed in {node}'s status"
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

fn finish(h: &mut Harness<T, Truth>, op: Operation<T>, outcome: Answer) -> Result<(), String> {
    let truth = &mut h.world;
    let backend_error = |o: Answer| match o {
        Answer::Uncertain => BackendError::uncertain("model"),
        _ => BackendError::transient("model"),
    };
    let id: OpId = op.id();
    let answer = match op {
        Operation::ListAttachments { .. } => {
            let result = match outcome {
                Answer::Ok => Ok(truth
                    .attached
                    .iter()
                    .map(|(v, n)| BackendAttachment {
                        volume: *v,
                        node: *n,
                        spec: spec_of(*v),
                    })
                    .collect()),
                o => Err(backend_error(o)),
            };
            Outcome::List(result)
        }
        Operation::Attach { volume, node, .. } => {
            if matches!(outcome, Answer::Ok | Answer::Uncertain) {
                truth.attached.insert((volume, node));
            }
            let result = match outcome {
                Answer::Ok => Ok(AttachInfo::default()),
                o => Err(backend_error(o)),
            };
            Outcome::Attach(result)
        }
        Operation::Detach { volume, node, .. } => {
            if matches!(outcome, Answer::Ok | Answer::Uncertain) {
                truth.attached.remove(&(volume, node));
            }
            let result = match outcome {
                Answer::Ok => Ok(()),
                o => Err(backend_error(o)),
            };
            Outcome::Detach(result)
        }
        Operation::CheckMachine { node, .. } => {
            // The model's machines are off exactly while fenced (powered off).
            let state = if truth.fenced.contains(&node) {
                MachineState::Off
            } else {
                MachineState::Running
            };
            let result = match outcome {
                Answer::Ok => Ok(state),
                o => Err(backend_error(o)),
            };
            Outcome::CheckMachine(result)
        }
        Operation::Verify { node, volumes, .. } => {
            let still = volumes
                .into_iter()
                .map(|(v, _)| v)
                .filter(|v| truth.attached.contains(&(*v, node)))
                .collect();
            Outcome::Verify(Ok(still))
        }
        Operation::WriteStatus {
            node,
            attached: list,
            expected,
            ..
        } => {
            let current = truth.status(node).revision;
            let result = match outcome {
                // Compare-and-set, as a store does: a stale revision is a conflict.
                _ if expected != current => Err(StoreError::conflict(current)),
                Answer::Ok => Ok(truth.store(node, &list)),
                Answer::Uncertain => {
                    // The write landed but the answer was lost.
                    truth.store(node, &list);
                    Err(StoreError::uncertain("timeout"))
                }
                Answer::Transient => Err(StoreError::transient("model")),
                // Another writer won the race: the node's revision moved on.
                Answer::Conflict => {
                    let stored = ReportedVolumes::from(truth.status(node).attached);
                    Err(StoreError::conflict(truth.store(node, &stored)))
                }
            };
            Outcome::WriteStatus(result.map(Into::into))
        }
        Operation::ReadStatus { node, .. } => {
            let result = match outcome {
                Answer::Ok | Answer::Conflict => Ok(truth.status(node)),
                _ => Err(StoreError::transient("model")),
            };
            Outcome::ReadStatus(result)
        }
        Operation::ListStatuses { .. } => {
            let result = match outcome {
                Answer::Ok | Answer::Conflict => Ok(truth
                    .stored
                    .keys()
                    .map(|n| (*n, truth.status(*n)))
                    .collect()),
                _ => Err(StoreError::transient("model")),
            };
            Outcome::ListStatuses(result)
        }
    };
    h.finish(id, answer).map_err(|e| e.to_string())
}
