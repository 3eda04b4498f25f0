//! What the picture shows, sorted out of a run's [`Record`]s: per node, the stretches of each
//! attachment and pod, the node's own states, and the marks of status writes, answers, events
//! and changes; plus the controller's restarts. [`draw`](super::draw) lays them out.

use std::collections::BTreeMap;
use std::time::Duration;

use super::labels::clip;
use super::{BarState, Happening, NodeChange, PodPhase, Record};
use crate::sim::scenario::Scenario;
use crate::sim::world::fmt_time;

pub(super) const ATTACHING: &str = "#f2c14e";
pub(super) const ATTACHED: &str = "#2f6fce";
pub(super) const UNCERTAIN: &str = "#9b59b6";
pub(super) const DETACHING: &str = "#f08a3c";
pub(super) const SCHEDULED: &str = "#cfe3d3";
pub(super) const RUNNING: &str = "#2e9e57";
pub(super) const TERMINATING: &str = "#9aa39c";
pub(super) const WRITE: &str = "#1f5fa8";
pub(super) const ACK: &str = "#2ca02c";
pub(super) const NACK: &str = "#c62828";
pub(super) const EVENT: &str = "#6d6d6d";
pub(super) const WARNING: &str = "#d98200";
pub(super) const RESTART: &str = "#1f3f8c";
pub(super) const VIOLATION: &str = "#e00000";

/// A state a node is in for a while, drawn as a tinted band behind its lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum NodeState {
    Crashed,
    Fenced,
    Deleted,
    Silent,
    Partitioned,
    UnmountHangs,
    PoweredOff,
}

impl NodeState {
    pub(super) const ALL: [NodeState; 7] = [
        NodeState::Crashed,
        NodeState::Fenced,
        NodeState::Deleted,
        NodeState::Silent,
        NodeState::Partitioned,
        NodeState::UnmountHangs,
        NodeState::PoweredOff,
    ];

    pub(super) fn name(self) -> &'static str {
        match self {
            NodeState::Crashed => "crashed",
            NodeState::Fenced => "fenced",
            NodeState::Deleted => "object deleted",
            NodeState::Silent => "agent cut off",
            NodeState::Partitioned => "backend partitioned",
            NodeState::UnmountHangs => "unmount hangs",
            NodeState::PoweredOff => "powered off",
        }
    }

    pub(super) fn class(self) -> &'static str {
        match self {
            NodeState::Crashed => "crashed",
            NodeState::Fenced => "fenced",
            NodeState::Deleted => "deleted",
            NodeState::Silent => "silent",
            NodeState::Partitioned => "partitioned",
            NodeState::UnmountHangs => "unmount-hangs",
            NodeState::PoweredOff => "powered-off",
        }
    }

    pub(super) fn color(self) -> &'static str {
        match self {
            NodeState::Crashed => "#e74c3c",
            NodeState::Fenced => "#7d3c98",
            NodeState::Deleted => "#7f8c8d",
            NodeState::Silent => "#e59866",
            NodeState::Partitioned => "#48c9b0",
            NodeState::UnmountHangs => "#a04000",
            NodeState::PoweredOff => "#34495e",
        }
    }
}

/// The shape of a mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shape {
    Square,
    Circle,
    Cross,
    Triangle,
    Diamond,
}

/// A mark at a moment, with a label if there is room and a tooltip always.
#[derive(Clone, Debug)]
pub(super) struct Mark {
    pub(super) at: Duration,
    pub(super) shape: Shape,
    pub(super) color: &'static str,
    pub(super) class: String,
    pub(super) label: String,
    pub(super) tip: String,
}

/// A stretch of a bar.
#[derive(Clone, Debug)]
pub(super) struct Segment {
    pub(super) from: Duration,
    pub(super) to: Duration,
    pub(super) color: &'static str,
    pub(super) class: String,
    pub(super) tip: String,
}

/// What one node's lane shows.
#[derive(Default)]
pub(super) struct Lane {
    pub(super) volumes: BTreeMap<String, Vec<Segment>>,
    pub(super) pods: BTreeMap<String, Vec<Segment>>,
    pub(super) states: Vec<(NodeState, Duration, Duration)>,
    pub(super) changes: Vec<Mark>,
    pub(super) status: Vec<Mark>,
    /// (write time, answer time, failed) for the lines joining a write to its answer.
    pub(super) writes: Vec<(Duration, Duration, bool)>,
    pub(super) events: Vec<Mark>,
}

fn bar_style(state: BarState) -> (&'static str, &'static str) {
    match state {
        BarState::Attaching => (ATTACHING, "attaching"),
        BarState::Attached => (ATTACHED, "attached"),
        BarState::Uncertain => (UNCERTAIN, "uncertain"),
        BarState::Detaching => (DETACHING, "detaching"),
    }
}

fn pod_style(phase: PodPhase) -> Option<(&'static str, &'static str)> {
    match phase {
        PodPhase::Scheduled => Some((SCHEDULED, "scheduled")),
        PodPhase::Running => Some((RUNNING, "running")),
        PodPhase::Terminating => Some((TERMINATING, "terminating")),
        PodPhase::Gone => None,
    }
}

fn change_mark(at: Duration, change: &NodeChange) -> Mark {
    let (label, shape, color, class) = match change {
        NodeChange::Crash => ("crash".to_string(), Shape::Cross, "#c0392b", "crash"),
        NodeChange::Recover => ("recover".to_string(), Shape::Circle, RUNNING, "recover"),
        NodeChange::Fence => ("fence".to_string(), Shape::Diamond, "#7d3c98", "fence"),
        NodeChange::Unfence => ("unfence".to_string(), Shape::Circle, "#7d3c98", "unfence"),
        NodeChange::Delete => ("object deleted".to_string(), Shape::Cross, "#555", "delete"),
        NodeChange::Create => (
            "object created".to_string(),
            Shape::Circle,
            "#555",
            "create",
        ),
        NodeChange::StopReporting => (
            "agent loses the API".to_string(),
            Shape::Cross,
            "#ca6f1e",
            "stop-reporting",
        ),
        NodeChange::ResumeReporting => (
            "agent reaches the API".to_string(),
            Shape::Circle,
            "#ca6f1e",
            "resume-reporting",
        ),
        NodeChange::HangUnmount(v) => (
            format!("unmount of {v} hangs"),
            Shape::Cross,
            "#a04000",
            "hang-unmount",
        ),
        NodeChange::ReleaseUnmount(v) => (
            format!("unmount of {v} released"),
            Shape::Circle,
            "#a04000",
            "release-unmount",
        ),
        NodeChange::Partition => (
            "backend partitioned".to_string(),
            Shape::Cross,
            "#17a589",
            "partition",
        ),
        NodeChange::Heal => (
            "partition heals".to_string(),
            Shape::Circle,
            "#17a589",
            "heal",
        ),
        NodeChange::PowerOff => (
            "machine powered off".to_string(),
            Shape::Diamond,
            "#34495e",
            "power-off",
        ),
        NodeChange::PowerOn => (
            "machine powered on".to_string(),
            Shape::Circle,
            "#34495e",
            "power-on",
        ),
    };
    Mark {
        at,
        shape,
        color,
        class: format!("mark {class}"),
        tip: format!("{} {label}", fmt_time(at)),
        label,
    }
}

/// Which state a change starts (`Some(true)`) or ends (`Some(false)`).
fn state_change(change: &NodeChange) -> Vec<(NodeState, bool)> {
    match change {
        NodeChange::Crash => vec![(NodeState::Crashed, true)],
        NodeChange::Recover => vec![(NodeState::Crashed, false)],
        NodeChange::Fence => vec![
            (NodeState::Crashed, false),
            (NodeState::Fenced, true),
            (NodeState::UnmountHangs, false),
        ],
        NodeChange::Unfence => vec![(NodeState::Fenced, false)],
        NodeChange::Delete => vec![(NodeState::Deleted, true)],
        NodeChange::Create => vec![(NodeState::Deleted, false)],
        NodeChange::StopReporting => vec![(NodeState::Silent, true)],
        NodeChange::ResumeReporting => vec![(NodeState::Silent, false)],
        NodeChange::HangUnmount(_) => vec![(NodeState::UnmountHangs, true)],
        NodeChange::ReleaseUnmount(_) => vec![(NodeState::UnmountHangs, false)],
        NodeChange::Partition => vec![(NodeState::Partitioned, true)],
        NodeChange::Heal => vec![(NodeState::Partitioned, false)],
        NodeChange::PowerOff => vec![
            (NodeState::Crashed, false),
            (NodeState::PoweredOff, true),
            (NodeState::UnmountHangs, false),
        ],
        NodeChange::PowerOn => vec![(NodeState::PoweredOff, false)],
    }
}

/// Everything the picture shows, sorted out of the records.
pub(super) struct Picture {
    pub(super) nodes: Vec<String>,
    pub(super) lanes: BTreeMap<String, Lane>,
    /// Restarts and events about no node.
    pub(super) controller: Vec<Mark>,
    pub(super) restarts: Vec<Duration>,
}

pub(super) fn sort_out(scenario: &Scenario, records: &[Record], end: Duration) -> Picture {
    let mut nodes: Vec<String> = scenario.nodes.clone();
    for record in records {
        if let Some(node) = record.what.node() {
            if !nodes.iter().any(|n| n == node) {
                nodes.push(node.to_string());
            }
        }
    }
    let mut lanes: BTreeMap<String, Lane> =
        nodes.iter().map(|n| (n.clone(), Lane::default())).collect();
    let mut controller = Vec::new();
    let mut restarts = Vec::new();
    // Open stretches: (node, volume) -> (state, since); pod -> (node, phase, since);
    // (node, state) -> (since, how many starts are open: hung unmounts of several volumes).
    let mut bars: BTreeMap<(String, String), (BarState, Duration)> = BTreeMap::new();
    let mut pods: BTreeMap<String, (String, PodPhase, Duration)> = BTreeMap::new();
    let mut states: BTreeMap<(String, NodeState), (Duration, u32)> = BTreeMap::new();
    // Writes in flight per node, answered in order.
    let mut in_flight: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
    let close_bar = |lanes: &mut BTreeMap<String, Lane>,
                     node: &str,
                     volume: &str,
                     (state, since): (BarState, Duration),
                     to: Duration| {
        let (color, class) = bar_style(state);
        lanes
            .entry(node.to_string())
            .or_default()
            .volumes
            .entry(volume.to_string())
            .or_default()
            .push(Segment {
                from: since,
                to,
                color,
                class: format!("bar {class}"),
                tip: format!(
                    "{volume} on {node}: {class} {} – {}",
                    fmt_time(since),
                    fmt_time(to)
                ),
            });
    };
    let close_pod = |lanes: &mut BTreeMap<String, Lane>,
                     pod: &str,
                     (node, phase, since): (String, PodPhase, Duration),
                     to: Duration| {
        if let Some((color, class)) = pod_style(phase) {
            lanes
                .entry(node.clone())
                .or_default()
                .pods
                .entry(pod.to_string())
                .or_default()
                .push(Segment {
                    from: since,
                    to,
                    color,
                    class: format!("pod {class}"),
                    tip: format!(
                        "pod {pod} on {node}: {class} {} – {}",
                        fmt_time(since),
                        fmt_time(to)
                    ),
                });
        }
    };
    for Record { at, what } in records {
        let at = *at;
        match what {
            Happening::Attachment {
                volume,
                node,
                state,
            } => {
                let key = (node.clone(), volume.clone());
                if let Some(open) = bars.remove(&key) {
                    close_bar(&mut lanes, node, volume, open, at);
                }
                if let Some(state) = state {
                    bars.insert(key, (*state, at));
                }
            }
            Happening::Pod { pod, node, phase } => {
                if let Some(open) = pods.remove(pod) {
                    close_pod(&mut lanes, pod, open, at);
                }
                pods.insert(pod.clone(), (node.clone(), *phase, at));
            }
            Happening::StatusWrite { node, volumes } => {
                in_flight.entry(node.clone()).or_default().push(at);
                let list = if volumes.is_empty() {
                    "none".to_string()
                } else {
                    volumes.join(",")
                };
                lanes.entry(node.clone()).or_default().status.push(Mark {
                    at,
                    shape: Shape::Square,
                    color: WRITE,
                    class: "mark write".to_string(),
                    label: format!("[{}]", clip(&list, 24)),
                    tip: format!("{} status write of {node}: [{list}]", fmt_time(at)),
                });
            }
            Happening::StatusAck { node, error } => {
                let lane = lanes.entry(node.clone()).or_default();
                let sent = in_flight.get_mut(node).and_then(|w| {
                    if w.is_empty() {
                        None
                    } else {
                        Some(w.remove(0))
                    }
                });
                if let Some(sent) = sent {
                    lane.writes.push((sent, at, error.is_some()));
                }
                let (shape, color, class, label, tip) = match error {
                    None => (
                        Shape::Circle,
                        ACK,
                        "ack",
                        String::new(),
                        "acknowledged".to_string(),
                    ),
                    Some(e) => (
                        Shape::Cross,
                        NACK,
                        "nack",
                        "write failed".to_string(),
                        format!("failed: {e}"),
                    ),
                };
                lane.status.push(Mark {
                    at,
                    shape,
                    color,
                    class: format!("mark {class}"),
                    label,
                    tip: format!("{} status of {node} {tip}", fmt_time(at)),
                });
            }
            Happening::Event {
                node,
                reason,
                message,
                warning,
            } => {
                let mark = Mark {
                    at,
                    shape: Shape::Triangle,
                    color: if *warning { WARNING } else { EVENT },
                    class: format!("mark event {}", if *warning { "warning" } else { "normal" }),
                    label: reason.clone(),
                    tip: format!("{} {reason}: {message}", fmt_time(at)),
                };
                match node {
                    Some(node) => lanes.entry(node.clone()).or_default().events.push(mark),
                    None => controller.push(mark),
                }
            }
            Happening::Node { node, change } => {
                let lane = lanes.entry(node.clone()).or_default();
                lane.changes.push(change_mark(at, change));
                for (state, starts) in state_change(change) {
                    let key = (node.clone(), state);
                    if starts {
                        states.entry(key).or_insert((at, 0)).1 += 1;
                    } else if let Some((since, open)) = states.get_mut(&key) {
                        // A release ends one hung unmount; the band ends with the last one.
                        let all = !matches!(change, NodeChange::ReleaseUnmount(_));
                        *open = if all { 0 } else { open.saturating_sub(1) };
                        if *open == 0 {
                            lane.states.push((state, *since, at));
                            states.remove(&key);
                        }
                    }
                }
            }
            Happening::ControllerStarted { generation } => {
                if *generation > 1 {
                    restarts.push(at);
                    controller.push(Mark {
                        at,
                        shape: Shape::Diamond,
                        color: RESTART,
                        class: "mark restart".to_string(),
                        label: format!("controller restarts (#{generation})"),
                        tip: format!("{} controller generation {generation} starts", fmt_time(at)),
                    });
                }
            }
        }
    }
    for ((node, volume), open) in std::mem::take(&mut bars) {
        close_bar(&mut lanes, &node, &volume, open, end);
    }
    for (pod, open) in std::mem::take(&mut pods) {
        close_pod(&mut lanes, &pod, open, end);
    }
    for ((node, state), (since, _)) in states {
        lanes
            .entry(node)
            .or_default()
            .states
            .push((state, since, end));
    }
    Picture {
        nodes,
        lanes,
        controller,
        restarts,
    }
}
