//! Tunables of the core, with upstream's defaults except where upstream is unsafe.

use std::time::Duration;

/// How the core paces itself and how far it may go to free a volume.
///
/// Defaults follow Kubernetes (100 ms loop, 60 s sync, 6 min unmount wait, 500 ms .. 2 min 2 s
/// backoff) except `force_detach_on_timeout`, which is off: a volume is only detached from a node
/// that still mounts it when the node is fenced (see seed 004).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Minimum time between two reconcile passes; changes that arrive in between are batched.
    pub reconcile_period: Duration,
    /// How often attachments are verified with the backend.
    pub sync_period: Duration,
    /// How often every attachment the backend knows is listed, to find those the core does
    /// not know of; `None` never lists after recovery.
    ///
    /// A call that a previous controller started and lost in a restart can land after the new
    /// controller recovered: neither the store nor the backend listed it then, and nothing the
    /// core knows would ever look at it again, so a single-node volume would stay attached to
    /// a node that does not need it and block every other node. Upstream has no such sweep.
    /// Attachments found are taken in as Uncertain and reconciled like any other.
    pub resync_period: Option<Duration>,
    /// How long a detach waits for the node to unmount before a forced detach may be considered.
    pub max_wait_for_unmount: Duration,
    /// Allow detaching a still-mounted volume from an unhealthy, unfenced node after
    /// `max_wait_for_unmount`. Risky: the node may still be writing. Never applies to a healthy node.
    pub force_detach_on_timeout: bool,
    /// Treat a deleted node object as fenced: its volumes are detached (forced, reason
    /// `node-deleted`) once a fresh read confirms the store has no such node.
    ///
    /// Off by default: a node object can be deleted while its machine still runs and writes
    /// (an operator's `kubectl delete node`), so its volumes stay attached, and a single-node
    /// volume stays pinned there (with a [`DetachBlocked`](crate::Event::DetachBlocked)
    /// event), until the node comes back and reports, or is fenced. Turn it on when your
    /// orchestrator deletes a node object only once its machine is gone, as cloud node
    /// lifecycle controllers do (Kubernetes' deletes a Node whose instance the cloud reports
    /// terminated).
    pub deleted_node_is_fenced: bool,
    /// Retry pacing of failed operations.
    pub backoff: BackoffConfig,
    /// Re-enable upstream Kubernetes bugs. For regression tests and demonstrations only.
    pub upstream_bugs: UpstreamBugs,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            reconcile_period: Duration::from_millis(100),
            sync_period: Duration::from_secs(60),
            resync_period: Some(Duration::from_secs(5 * 60)),
            max_wait_for_unmount: Duration::from_secs(6 * 60),
            force_detach_on_timeout: false,
            deleted_node_is_fenced: false,
            backoff: BackoffConfig::default(),
            upstream_bugs: UpstreamBugs::default(),
        }
    }
}

/// Exponential backoff: the first retry waits `initial`, each further failure doubles the wait up
/// to `max`. Kept per operation kind, so a failed attach never delays a detach (upstream 75209).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffConfig {
    /// Wait after the first failure.
    pub initial: Duration,
    /// Longest wait.
    pub max: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: Duration::from_millis(500),
            max: Duration::from_millis(2 * 60_000 + 2_000),
        }
    }
}

/// Switches that put back the upstream behaviour each correction replaces.
///
/// They exist so that every regression test can be shown to fail against the bug it guards
/// against, and so the simulator can replay an incident as it happened. Never enable them in
/// production.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpstreamBugs {
    /// C1 (49053, 72181, 88565): a failed detach does not put the volume back in the node's
    /// reported list, and an "already attached" volume is never re-reported.
    pub c1_lose_report_on_failed_detach: bool,
    /// C2: an Uncertain attachment does not count as a holder for Multi-Attach.
    pub c2_ignore_uncertain_holder: bool,
    /// C3 (seed 004): a mounted volume is force-detached from an unhealthy node after the unmount
    /// wait even if the node is not fenced and `force_detach_on_timeout` is off.
    pub c3_force_detach_unfenced: bool,
    /// C4 (141385): an attachment first seen without a mount report stays "mounted" until the
    /// node's in-use report changes for that volume, instead of following the latest report.
    pub c4_sticky_assumed_mount: bool,
    /// C5: the detach starts as soon as the volume is dropped from the report, without waiting
    /// for the status write to be acknowledged.
    pub c5_detach_before_status_ack: bool,
    /// C6 (122413): the status writer diffs against a possibly stale read and skips the write
    /// when that read already matches. Used by the driver, not the core.
    pub c6_diff_against_stale_read: bool,
}
