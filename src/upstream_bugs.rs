//! The switches that put upstream's bugs back ([`UpstreamBugs`]), in a module of their own so
//! that the type is public (as `config::UpstreamBugs`) only with the `upstream-bugs` feature.

/// Switches that put back the upstream behaviour each correction replaces.
///
/// They exist so that every regression test can be shown to fail against the bug it guards
/// against, and so the simulator can replay an incident as it happened. Never enable them in
/// production. Public only with the `upstream-bugs` feature; without it the core reads
/// [`UpstreamBugs::NONE`], a constant, so every bug branch compiles away.
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
    /// C6 (122413): before a status write, the core reads the orchestrator's cached copy of the
    /// node (`Operation::ReadStatus { from_cache: true }`) and skips the write when that copy,
    /// which may be stale, already matches.
    pub c6_diff_against_stale_read: bool,
    /// L1: not upstream's, but this crate's own leak (issue 9, bug 1), put back so that the
    /// fuzzers and the model check can show they would find it again: the detach of an
    /// attachment the node's status never listed (an attach that landed after its workload
    /// left) waits for a status write, although the wanted list already equals the stored one
    /// and so no write is ever planned. The volume stays attached forever.
    pub l1_await_unplanned_ack: bool,
    /// L2: not upstream's reconciler (which limits nothing), but the shape of a single worker
    /// pool, as CSI's external-attacher has (`--worker-threads`): with `Config::backend_load`
    /// set, attaches and detaches share one queue and one limit (the sum of the two), first
    /// come first served, so a burst of attaches queues the detaches that free volumes behind
    /// it. Put back to show the burst scenario catches it.
    pub l2_shared_backend_queue: bool,
}

impl UpstreamBugs {
    /// Every correction in place.
    pub const NONE: UpstreamBugs = UpstreamBugs {
        c1_lose_report_on_failed_detach: false,
        c2_ignore_uncertain_holder: false,
        c3_force_detach_unfenced: false,
        c4_sticky_assumed_mount: false,
        c5_detach_before_status_ack: false,
        c6_diff_against_stale_read: false,
        l1_await_unplanned_ack: false,
        l2_shared_backend_queue: false,
    };
}
