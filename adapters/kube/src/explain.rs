//! `/explain` for Kubernetes: the running term's controller asked why a volume or a pod waits.

use std::time::Duration;

use async_trait::async_trait;
use attach_detach::controller::{ControllerError, ControllerHandle};
use attach_detach::core::{
    PairExplanation, Placement, VolumeExplanation, Wait, WorkloadExplanation,
};
use attach_detach_endpoints::{ExplainError, Explained, Explainer};
use serde_json::{Value, json};

use crate::domain::{Kube, pod_key};
use crate::status::LeaderStatus;

/// The [`Explainer`] of a replica run by [`lead_with_status`](crate::lead_with_status): asks
/// whichever term's controller runs. A standby has no answer (503: ask the replica whose
/// `attach_detach_leader` is 1).
///
/// Volumes are named as the core and kubelet name them, `kubernetes.io/csi/{driver}^{handle}`
/// (`Node.status.volumesAttached`); pods as `namespace/name`. The lines are the core's own
/// explanation; the JSON carries the same facts, times in seconds before now (`*_ago`) or from
/// now (`*_in`).
#[derive(Clone, Debug)]
pub struct KubeExplainer {
    status: LeaderStatus,
}

impl KubeExplainer {
    /// Answers from the controller of the term `status` tells of.
    pub fn new(status: LeaderStatus) -> Self {
        KubeExplainer { status }
    }

    fn controller(&self) -> Result<ControllerHandle<Kube>, ExplainError> {
        self.status.controller().ok_or_else(|| {
            ExplainError::Unavailable(if self.status.is_leading() {
                "leading; the term is starting (informers syncing)".into()
            } else {
                "this replica does not lead: ask the one whose attach_detach_leader is 1".into()
            })
        })
    }
}

fn gone(error: ControllerError<Kube>) -> ExplainError {
    match error {
        ControllerError::Stopped | ControllerError::Died { .. } => {
            ExplainError::Unavailable(error.to_string())
        }
        other => ExplainError::Internal(other.to_string()),
    }
}

#[async_trait]
impl Explainer for KubeExplainer {
    async fn explain_volume(&self, volume: &str) -> Result<Explained, ExplainError> {
        let explained = self
            .controller()?
            .explain_volume(volume.to_owned())
            .await
            .map_err(gone)?;
        if !explained.known {
            return Err(ExplainError::NotFound(format!(
                "the controller does not know volume {volume:?} (name it as kubelet does: \
                 kubernetes.io/csi/DRIVER^HANDLE)"
            )));
        }
        Ok(Explained {
            lines: lines(&explained),
            json: volume_json(&explained),
        })
    }

    async fn explain_pod(&self, namespace: &str, name: &str) -> Result<Explained, ExplainError> {
        let explained = self
            .controller()?
            .explain_workload(pod_key(namespace, name))
            .await
            .map_err(gone)?;
        if matches!(explained.placement, Placement::Unknown) {
            return Err(ExplainError::NotFound(format!(
                "the controller does not know pod {namespace}/{name} (not scheduled, finished, \
                 without volumes to attach, or on a node whose kubelet attaches)"
            )));
        }
        Ok(Explained {
            lines: lines(&explained),
            json: workload_json(&explained),
        })
    }
}

fn lines(explained: &impl std::fmt::Display) -> Vec<String> {
    explained.to_string().lines().map(str::to_owned).collect()
}

/// Seconds from `since` to `at`.
fn ago(since: Duration, at: Duration) -> f64 {
    at.saturating_sub(since).as_secs_f64()
}

fn pair_json(pair: &PairExplanation<Kube>) -> Value {
    let at = pair.at;
    let detail = match &pair.wait {
        Wait::Call { kind, node, since } => {
            json!({"call": format!("{kind:?}"), "node": node, "running_ago": ago(*since, at)})
        }
        Wait::Backoff { kind, until } => {
            json!({"call": format!("{kind:?}"), "retry_in": ago(at, *until)})
        }
        Wait::BackendLoad { kind, since } => {
            json!({"call": format!("{kind:?}"), "queued_ago": ago(*since, at)})
        }
        Wait::NodeFull {
            driver,
            held,
            limit,
        } => json!({"driver": driver.map(|d| d.get()), "held": held, "limit": limit}),
        Wait::BackendSaidFull { until } => json!({"retry_in": ago(at, *until)}),
        Wait::HeldElsewhere { holders } => json!({"holders": holders}),
        Wait::Unmount { forced_at } | Wait::HeldBackByRead { forced_at } => {
            json!({"forced_detach_in": forced_at.map(|t| ago(at, t))})
        }
        Wait::Fence { checking_machine } => json!({"checking_machine": checking_machine}),
        // No wildcard: a wait the core adds must be given its details here.
        Wait::Settled
        | Wait::Recovery
        | Wait::StoreAck
        | Wait::StatusWrite
        | Wait::NodeDeleted
        | Wait::FreshRead
        | Wait::ReleaseVerify
        | Wait::NextPass
        | Wait::Unknown => json!({}),
    };
    json!({
        "volume": pair.volume,
        "node": pair.node,
        "wanted": pair.wanted,
        "attached": pair.attached.map(|state| format!("{state:?}")),
        "wait": pair.wait.kind().name(),
        "detail": detail,
        "ends": pair.wait.ends(),
        "since_ago": pair.since.map(|since| ago(since, at)),
        "last_failure": pair.last_failure.as_ref().map(|failure| json!({
            "call": format!("{:?}", failure.kind),
            "ago": ago(failure.at, at),
            "in_a_row": failure.failures,
            "retry_in": ago(at, failure.retry_at),
            "error": failure.error,
        })),
        "line": pair.to_string(),
    })
}

fn volume_json(volume: &VolumeExplanation<Kube>) -> Value {
    json!({
        "volume": volume.volume,
        "known": volume.known,
        "recovering": volume.recovering,
        "pairs": volume.pairs.iter().map(pair_json).collect::<Vec<_>>(),
    })
}

fn workload_json(workload: &WorkloadExplanation<Kube>) -> Value {
    let placement = match &workload.placement {
        Placement::Placed { node } => json!({"state": "placed", "node": node}),
        Placement::Pending {
            node,
            missing,
            since,
        } => json!({
            "state": "pending",
            "node": node,
            "missing": missing.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "since_ago": since.map(|since| ago(since, workload.at)),
        }),
        Placement::Unknown => json!({"state": "unknown"}),
    };
    json!({
        "pod": workload.workload,
        "placement": placement,
        "settled": workload.is_settled(),
        "waits": workload.waits().map(pair_json).collect::<Vec<_>>(),
        "volumes": workload.volumes.iter().map(volume_json).collect::<Vec<_>>(),
    })
}
