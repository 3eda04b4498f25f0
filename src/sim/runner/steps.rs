//! The run's loop: actions and expectations at their times, agent passes on the grid while a
//! node is dirty, the clock jumping over idle stretches, and the report at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::clock::{instant, is_tick, next_tick};
use super::{Report, SETTLE, Sim};
use crate::sim::scenario::{CallOp, Scenario};

impl Sim {
    /// Sleeps until `at`, or until a node turns dirty if `or_dirty`, or until the controller's
    /// task ends. True when `at` came.
    async fn wait(&mut self, at: Duration, or_dirty: bool) -> bool {
        let deadline = instant(self.epoch, at);
        let task = &mut self.controller;
        let controller = async {
            match task.as_mut() {
                Some(task) => task.await,
                None => std::future::pending().await,
            }
        };
        let ended = tokio::select! {
            biased;
            () = tokio::time::sleep_until(deadline) => return true,
            () = self.wake.notified(), if or_dirty => return false,
            ended = controller => ended,
        };
        self.controller_ended(ended);
        false
    }

    pub(super) async fn run(mut self, scenario: &Scenario) -> Report {
        self.spawn_forwarder();
        self.start_controller();
        let last_step = scenario.steps.last().map_or(Duration::ZERO, |s| s.at);
        let end = scenario
            .run
            .unwrap_or_else(|| last_step.saturating_add(SETTLE));
        let mut steps = scenario.steps.iter().peekable();
        let mut last_tick: Option<Duration> = None;
        loop {
            self.reap();
            let now = self.now();
            // Agents pass only when a node is dirty; otherwise the clock jumps to the next step
            // (or the end), unless something turns a node dirty on the way.
            let dirty = !self.world.lock().dirty.is_empty();
            let tick = dirty.then(|| next_tick(now, last_tick));
            let step = steps.peek().map(|s| s.at);
            // And when a breach of I7 seen on the way would have lasted its slack.
            let recheck = self.load.recheck_at();
            let next = (tick.into_iter().chain(step).chain(recheck))
                .min()
                .filter(|at| *at <= end);
            let Some(next) = next else {
                if self.wait(end, true).await {
                    break;
                }
                continue;
            };
            if !self.wait(next, tick.is_none()).await {
                continue;
            }
            self.refresh_listed();
            // I7 as the step finds the world, before the step changes it (a restart starts a
            // new count).
            self.check_slots();
            while let Some(step) = steps.next_if(|s| s.at <= next) {
                self.world.lock().now = next;
                self.apply(step.line, &step.action).await;
            }
            // A step on the grid turns nodes dirty that the agents see in this same pass.
            let due = is_tick(next) && last_tick.is_none_or(|last| next > last);
            if due && !self.world.lock().dirty.is_empty() {
                // A step may have let a write land (a restart awaits the old controller), so
                // the lists agents read are refreshed again right before they look.
                self.refresh_listed();
                // A step may have ended a mount (a fence, a power-off): its excuse goes
                // before an agent could mount the volume again.
                self.world.lock().forget_ended_invisible_claims();
                self.agents();
                last_tick = Some(next);
            }
            self.world.lock().forget_ended_invisible_claims();
            self.check_slots();
        }
        self.refresh_listed();
        self.check_slots();
        let multi = self.multi_attach.lock().clone();
        let full = self.node_full.lock().clone();
        let nodes: Vec<String> = self.world.lock().nodes.keys().cloned().collect();
        let in_use: BTreeMap<String, BTreeSet<String>> = nodes
            .into_iter()
            .map(|node| {
                let reported = self.store.with_status(&node, |status| {
                    status
                        .and_then(|s| s.in_use.as_ref())
                        .map(|list| list.iter().cloned().collect())
                        .unwrap_or_default()
                });
                (node, reported)
            })
            .collect();
        {
            let mut w = self.world.lock();
            w.now = end;
            w.check_final(&multi, &full, &in_use);
        }
        // A crash not seen yet is seen now; a controller still running stops here.
        if let Some(task) = self.controller.take() {
            if task.is_finished() {
                let ended = task.await;
                self.controller_ended(ended);
            } else {
                task.abort();
            }
        }
        self.reap();
        self.tasks.abort_all();
        let writes = {
            let w = self.world.lock();
            w.nodes.keys().map(|n| self.store.writes(n)).sum()
        };
        let mut w = self.world.lock();
        Report {
            violations: std::mem::take(&mut w.violations),
            converged: w.last_change,
            end,
            attach_calls: w.total_calls(CallOp::Attach),
            detach_calls: w.total_calls(CallOp::Detach),
            status_writes: writes,
            agent_work: w.agent_work,
            trace: std::mem::take(&mut w.trace),
            timeline: std::mem::take(&mut w.timeline),
        }
    }

    /// I7 on this step: no call past its overdue time holds a slot that calls wait for.
    fn check_slots(&self) {
        if self.load.is_unlimited() {
            return;
        }
        let handle = self.slot.lock().clone();
        let Some(handle) = handle else { return };
        let breaches = self.load.stuck_slots(&handle.metrics().backend_queue);
        if breaches.is_empty() {
            return;
        }
        let mut w = self.world.lock();
        w.now = self.now();
        for breach in breaches {
            w.violation(breach);
        }
    }
}
