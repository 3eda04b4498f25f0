//! A backend that does whatever it is asked, after a latency, and lets the world's invariants
//! judge it. Effects run in their own task, so a controller that restarts mid-call loses the
//! answer but not the effect, as with a real cloud API.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::SimIds;
use super::panics::{Tasks, guarded};
use super::scenario::CallOp;
use super::timeline::{BarState, Happening};
use super::world::{Power, World};
use crate::config::OverdueCalls;
use crate::core::calls::backend::MachineState;
use crate::core::rules::admission::QueueStats;
use crate::traits::{AttachBackend, AttachInfo, BackendAttachment, BackendError};

/// How long the simulated provider takes to say what state a machine is in.
const MACHINE_STATE_LATENCY: Duration = Duration::from_millis(50);
use crate::core::calls::volume::{Access, VolumeSpec};
use crate::memory::MemoryStore;

#[derive(Clone)]
pub(crate) struct SimBackend {
    pub(crate) world: Arc<Mutex<World>>,
    pub(crate) store: MemoryStore<SimIds>,
    pub(crate) epoch: Instant,
    pub(crate) attach_latency: Duration,
    pub(crate) detach_latency: Duration,
    /// Where the effects run, so the runner sees their panics.
    pub(crate) tasks: Tasks,
    /// For the runner's own tests: every effect panics, to show the run fails.
    pub(crate) sabotaged: bool,
    /// The calls the controller awaits, per class, against its `Config::backend_load`.
    pub(crate) load: CallLoad,
}

/// I6 and I7: the attach and detach calls one controller awaits at once, per class, against
/// its `Config::backend_load` (with upstream-bug `l2`, both classes in one).
///
/// I6, at each call's start: the calls of a class younger than `OverdueCalls::after` never
/// exceed its limit, and all its calls never exceed its limit plus `OverdueCalls::max`.
/// I7, on every step of the run: no call awaited past its overdue time holds a slot while
/// calls of its class wait for one and the class has room for another overdue call, for
/// longer than a second (the core notices an overdue call, or room freed among the overdue,
/// at its next pass): a call that hangs holds back no other for much longer than `after`.
#[derive(Clone, Debug)]
pub(crate) struct CallLoad {
    /// `max_attaches`, `max_detaches`.
    limits: [Option<usize>; 2],
    shared: bool,
    overdue: Option<OverdueCalls>,
    epoch: Instant,
    /// The calls awaited now, per class: when each began, by a number of its own.
    awaited: Arc<Mutex<Awaiting>>,
    /// Per lane, I7's episode under way (see [`stuck_slots`](Self::stuck_slots)).
    breaches: Arc<Mutex<[Option<Episode>; 2]>>,
}

/// A call past its overdue time seen holding a slot others wait for (I7): since when, and
/// whether it was reported (once per episode).
#[derive(Clone, Copy, Debug)]
struct Episode {
    since: Duration,
    /// The awaited call it follows (the youngest past its time when first seen).
    call: u64,
    reported: bool,
}

/// The calls a controller awaits, per class.
#[derive(Debug, Default)]
struct Awaiting {
    next: u64,
    calls: [BTreeMap<u64, Duration>; 2],
}

/// How long I7's breach may last before it is one: the core notices an overdue call, or room
/// freed among the overdue ones, at its next pass (a reconcile period later at most), and
/// publishes its queue after it.
const OVERDUE_SLACK: Duration = Duration::from_secs(1);

impl CallLoad {
    pub(crate) fn new(config: &crate::config::Config, epoch: Instant) -> Self {
        let load = config.backend_load;
        let limited = load.max_attaches.is_some() || load.max_detaches.is_some();
        CallLoad {
            limits: [load.max_attaches, load.max_detaches],
            shared: config.upstream_bugs.l2_shared_backend_queue && limited,
            overdue: load.overdue,
            epoch,
            awaited: Arc::default(),
            breaches: Arc::default(),
        }
    }

    /// The classes as the controller counts them: each with its limit and its room for
    /// overdue calls, and the classes of call it covers (both in one with `l2`).
    fn lanes(&self) -> Vec<(usize, Option<usize>, usize, &'static [usize])> {
        let max = self.overdue.map_or(0, |o| o.max);
        if self.shared {
            let limit = self.limits.iter().flatten().sum::<usize>();
            return vec![(0, Some(limit), max.saturating_mul(2), &[0, 1])];
        }
        vec![
            (0, self.limits[0], max, &[0]),
            (1, self.limits[1], max, &[1]),
        ]
    }

    /// A call of `op` begins: its number, and the breach it makes, if any.
    fn begin(&self, op: CallOp) -> (u64, Option<String>) {
        let now = self.epoch.elapsed();
        let class = Self::class(op);
        let mut awaited = self.awaited.lock();
        let id = awaited.next;
        awaited.next += 1;
        awaited.calls[class].insert(id, now);
        let after = self.overdue.map(|o| o.after);
        for (lane, limit, max, classes) in self.lanes() {
            let Some(limit) = limit.filter(|_| classes.contains(&class)) else {
                continue;
            };
            let starts = || classes.iter().flat_map(|c| awaited.calls[*c].values());
            let total = starts().count();
            let young = starts()
                .filter(|t| after.is_none_or(|after| now.saturating_sub(**t) < after))
                .count();
            let what = if self.shared {
                "attach and detach".to_string()
            } else {
                [CallOp::Attach, CallOp::Detach][lane].to_string()
            };
            let breach = if young > limit {
                Some(format!(
                    "I6: {young} {what} calls under way that are not overdue, limit {limit}"
                ))
            } else if total > limit + max {
                Some(format!(
                    "I6: {total} {what} calls under way, limit {limit} and {max} overdue"
                ))
            } else {
                None
            };
            return (id, breach);
        }
        (id, None)
    }

    /// Whether neither class has a limit: nothing to check.
    pub(crate) fn is_unlimited(&self) -> bool {
        self.limits.iter().all(Option::is_none)
    }

    /// I7 against the controller's last published queue: the breaches, if any.
    ///
    /// The core makes calls overdue oldest first, so the calls past their time it has not
    /// made overdue are the youngest of them. An episode follows one such call: it lasts while
    /// that call is still among them, and is a breach once it has lasted [`OVERDUE_SLACK`]
    /// (the runner looks again then: [`recheck_at`](Self::recheck_at)). Steps may be far
    /// apart; following a call, not only the condition, keeps two short breaches with no step
    /// between them from counting as one long one.
    pub(crate) fn stuck_slots(&self, queue: &QueueStats) -> Vec<String> {
        let Some(overdue) = self.overdue else {
            return Vec::new();
        };
        let now = self.epoch.elapsed();
        let awaited = self.awaited.lock();
        let mut episodes = self.breaches.lock();
        let mut breaches = Vec::new();
        for (lane, limit, max, classes) in self.lanes() {
            let stats = if lane == 0 {
                queue.attach
            } else {
                queue.detach
            };
            // The calls past their overdue time, oldest first.
            let mut past: Vec<(Duration, u64)> = classes
                .iter()
                .flat_map(|c| awaited.calls[*c].iter())
                .filter(|(_, t)| now.saturating_sub(**t) >= overdue.after)
                .map(|(id, t)| (*t, *id))
                .collect();
            past.sort_unstable();
            // Calls wait for a slot (not for a token), another call may be overdue, and a call
            // past its time still holds a slot.
            let breach = limit.is_some()
                && stats.queued > 0
                && queue.tokens != Some(0)
                && stats.overdue < max
                && past.len() > stats.overdue;
            let episode = &mut episodes[lane];
            if !breach {
                *episode = None;
                continue;
            }
            let unmarked = &past[stats.overdue..];
            let followed = episode.filter(|e| unmarked.iter().any(|(_, id)| *id == e.call));
            let e = followed.unwrap_or(Episode {
                since: now,
                call: unmarked.last().map_or(0, |(_, id)| *id),
                reported: false,
            });
            let lasted = now.saturating_sub(e.since);
            let reported = e.reported || lasted >= OVERDUE_SLACK;
            *episode = Some(Episode { reported, ..e });
            if e.reported || !reported {
                continue;
            }
            let what = if self.shared {
                "attach and detach".to_string()
            } else {
                [CallOp::Attach, CallOp::Detach][lane].to_string()
            };
            breaches.push(format!(
                "I7: {} {what} calls past their overdue time ({:?}) have held slots for {lasted:?} \
                 while {} wait (the oldest for {:?}); {} of {max} overdue calls hold none",
                unmarked.len(),
                overdue.after,
                stats.queued,
                stats.oldest_wait,
                stats.overdue
            ));
        }
        breaches
    }

    /// When an I7 episode not reported yet becomes a breach if it lasts: the runner looks again
    /// then, whatever else happens.
    pub(crate) fn recheck_at(&self) -> Option<Duration> {
        self.breaches
            .lock()
            .iter()
            .flatten()
            .filter(|e| !e.reported)
            .map(|e| e.since + OVERDUE_SLACK)
            .min()
    }

    fn class(op: CallOp) -> usize {
        match op {
            CallOp::Attach => 0,
            CallOp::Detach => 1,
        }
    }
}

/// Counts a call as awaited until it is answered or its caller gives up on it (a deadline, a
/// restart): dropped with the caller's future.
struct Awaited {
    load: CallLoad,
    class: usize,
    id: u64,
}

impl Drop for Awaited {
    fn drop(&mut self) {
        self.load.awaited.lock().calls[self.class].remove(&self.id);
    }
}

impl SimBackend {
    /// This backend for a controller that starts: the calls it awaits are counted afresh.
    pub(crate) fn for_new_controller(&self) -> Self {
        let mut this = self.clone();
        this.load.awaited = Arc::default();
        this.load.breaches = Arc::default();
        this
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, World> {
        let mut w = self.world.lock();
        w.now = self.epoch.elapsed();
        w
    }

    /// Whether the store lists `volume` in `node`'s status now, read in place: a node's list
    /// can be long, and this runs for every detach.
    fn listed(&self, volume: &str, node: &String) -> bool {
        self.store.with_listed(node, |listed| {
            let mut listed = listed.map(String::as_str);
            listed.any(|v| v == volume)
        })
    }

    /// Returns once the backend can reach `node`: at once, or when its partition heals.
    async fn reachable(&self, node: &str) {
        loop {
            let healed = Arc::clone(&self.world.lock().healed);
            let notified = healed.notified();
            tokio::pin!(notified);
            // Registered before the check, so a heal between the two is not missed.
            notified.as_mut().enable();
            if !self.world.lock().partitioned.contains(node) {
                return;
            }
            notified.await;
        }
    }

    async fn call(&self, op: CallOp, volume: &str, node: &str) -> Result<(), BackendError<String>> {
        let base = match op {
            CallOp::Attach => self.attach_latency,
            CallOp::Detach => self.detach_latency,
        };
        let (id, breach) = self.load.begin(op);
        let _awaited = Awaited {
            load: self.load.clone(),
            class: CallLoad::class(op),
            id,
        };
        let (fault, latency, crashed_at_call) = {
            let mut w = self.lock();
            if let Some(breach) = breach {
                w.violation(breach);
            }
            w.count_call(op, volume, node);
            // As a cloud or CSI driver answers a call that races the opposite call still under
            // way on the same pair (say, one a restarted controller lost): refused, do it again
            // later. Otherwise the older call lands after the newer one "succeeded".
            let other = match op {
                CallOp::Detach if w.attaching(volume, node) => Some("attach"),
                CallOp::Attach if w.detaching(volume, node) => Some("detach"),
                _ => None,
            };
            if let Some(other) = other {
                w.log(format!(
                    "call: {op} {volume} {node} (refused: {other} under way)"
                ));
                return Err(BackendError::transient(format!(
                    "a {other} of {volume} on {node} is under way"
                )));
            }
            if w.claim_only.contains(volume) {
                w.violation(format!(
                    "the controller called the backend to {op} claim-only volume {volume} on {node}"
                ));
            }
            if op == CallOp::Attach {
                if let Some(limit) = w.over_limit(volume, node) {
                    w.log(format!(
                        "call: {op} {volume} {node} (refused: the node holds its limit of {limit})"
                    ));
                    return Err(BackendError::node_full(format!(
                        "{node} holds {limit} volumes, its most"
                    )));
                }
            }
            let fault = w.take_fault(op, volume, node);
            let cut_off = if w.partitioned.contains(node) {
                " (hangs: the backend cannot reach the node)"
            } else {
                ""
            };
            w.log(format!(
                "call: {op} {volume} {node}{}{cut_off}",
                match fault {
                    Some(true) => " (will error, uncertain)",
                    Some(false) => " (will fail)",
                    None => "",
                }
            ));
            w.under_way(op, volume, node, true);
            // The opt-in force on timeout is judged by the node's state when the controller
            // made the call: a detach it forced while the node was down may land after the node
            // came back, the very risk the option takes (I2 excuses it, as it does the rest).
            let crashed_at_call = w
                .nodes
                .get(node)
                .is_some_and(|n| n.power == super::world::Power::Crashed);
            w.record(Happening::Attachment {
                volume: volume.to_string(),
                node: node.to_string(),
                state: Some(match op {
                    CallOp::Attach => BarState::Attaching,
                    CallOp::Detach => BarState::Detaching,
                }),
            });
            (fault, w.jitter(base), crashed_at_call)
        };
        let (tx, rx) = oneshot::channel();
        let this = self.clone();
        let (v, n) = (volume.to_string(), node.to_string());
        self.tasks.spawn(async move {
            this.reachable(&n).await;
            tokio::time::sleep(latency).await;
            assert!(!this.sabotaged, "sabotaged {op} effect of {v} on {n}");
            this.lock().under_way(op, &v, &n, false);
            if fault != Some(false) {
                match op {
                    CallOp::Attach => this.lock().attach_effect(&v, &n),
                    CallOp::Detach => {
                        let listed = this.listed(&v, &n);
                        this.lock().detach_effect(&v, &n, listed, crashed_at_call);
                    }
                }
            }
            let mut w = this.lock();
            let state = w.is_attached(&v, &n).then_some(match (op, fault) {
                (CallOp::Attach, Some(true)) => BarState::Uncertain,
                _ => BarState::Attached,
            });
            w.record(Happening::Attachment {
                volume: v,
                node: n,
                state,
            });
            drop(w);
            let _ = tx.send(());
        });
        // A dropped caller (controller restart) does not cancel the effect. An effect that
        // panicked answers nothing: the runner fails the run with its message, and the call
        // stays unanswered, like one to a backend that hung.
        if rx.await.is_err() {
            std::future::pending::<()>().await;
        }
        match fault {
            None => Ok(()),
            Some(true) => Err(BackendError::uncertain(format!(
                "{op} of {volume} on {node} timed out"
            ))),
            Some(false) => Err(BackendError::transient(format!(
                "{op} of {volume} on {node} refused"
            ))),
        }
    }
}

#[async_trait]
impl AttachBackend<SimIds> for SimBackend {
    async fn attach(
        &self,
        volume: &String,
        node: &String,
        _payload: &(),
    ) -> Result<AttachInfo, BackendError<String>> {
        guarded(&self.world, self.epoch, "backend attach", async {
            self.call(CallOp::Attach, volume, node).await?;
            Ok(AttachInfo {
                device: Some(format!("/dev/disk/by-id/{volume}")),
            })
        })
        .await
    }

    async fn detach(
        &self,
        volume: &String,
        node: &String,
        _payload: &(),
    ) -> Result<(), BackendError<String>> {
        guarded(
            &self.world,
            self.epoch,
            "backend detach",
            self.call(CallOp::Detach, volume, node),
        )
        .await
    }

    async fn verify(
        &self,
        node: &String,
        volumes: &[(String, ())],
    ) -> Result<Vec<String>, BackendError<String>> {
        guarded(&self.world, self.epoch, "backend verify", async {
            self.reachable(node).await;
            let w = self.lock();
            Ok(volumes
                .iter()
                .filter(|(v, _)| w.may_be_attached(v, node))
                .map(|(v, _)| v.clone())
                .collect())
        })
        .await
    }

    /// The provider's view of the machine: `Off` exactly while the scenario has it powered
    /// off (`power-off`, or `fence`, which the simulator models as powered off), `Running`
    /// otherwise (crashed, cut off from the API or from the
    /// backend, its object deleted: the machine runs on). The provider's API answers whatever
    /// the node's network does.
    async fn machine_state(&self, node: &String) -> Result<MachineState, BackendError<String>> {
        guarded(&self.world, self.epoch, "backend machine state", async {
            let latency = self.lock().jitter(MACHINE_STATE_LATENCY);
            tokio::time::sleep(latency).await;
            let mut w = self.lock();
            let state = match w.nodes.get(node).map(|n| n.power) {
                // Fenced (out-of-service) means powered off in the simulator too.
                Some(Power::Off | Power::Fenced) => MachineState::Off,
                Some(Power::Up | Power::Crashed) => MachineState::Running,
                None => MachineState::Unknown,
            };
            w.log(format!("call: machine state {node} = {state:?}"));
            Ok(state)
        })
        .await
    }

    async fn list(&self) -> Result<Vec<BackendAttachment<SimIds>>, BackendError<String>> {
        guarded(&self.world, self.epoch, "backend list", async {
            let w = self.lock();
            let mut pairs: BTreeSet<(&String, &String)> = w
                .attached
                .iter()
                .flat_map(|(v, nodes)| nodes.iter().map(move |n| (v, n)))
                .collect();
            pairs.extend(w.attaching.keys().map(|(v, n)| (v, n)));
            Ok(pairs
                .into_iter()
                .map(|(v, n)| BackendAttachment {
                    volume: v.clone(),
                    node: n.clone(),
                    spec: VolumeSpec {
                        access: w.volumes.get(v).copied().unwrap_or(Access::SingleNode),
                        payload: (),
                        attach_required: true,
                        driver: None,
                    },
                })
                .collect())
        })
        .await
    }
}
