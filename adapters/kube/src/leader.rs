//! Leader election on a `coordination.k8s.io/v1` Lease: run the controller only while holding it.
//! See [`lead`] for why a Lease gives no fencing and what limits the damage.

use std::future::Future;
use std::time::Duration;

use attach_detach::controller::{ControllerHandle, ShutdownReport};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::{Api, Client};
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::domain::Kube;
use crate::status::LeaderStatus;

/// How a replica takes part in the election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderConfig {
    /// The Lease's name.
    pub lease: String,
    /// The Lease's namespace (the one the controller runs in).
    pub namespace: String,
    /// This replica's identity, unique among replicas and among the runs of each:
    /// [`LeaderConfig::unique_identity`] by default.
    pub identity: String,
    /// How long a lease lasts after its last renewal, in seconds (kube-controller-manager: 15).
    pub duration_seconds: u64,
    /// How long before expiry the holder renews, in seconds; it stops leading half of it before
    /// expiry if no renewal showed by then, so half of it is the clock skew tolerated between
    /// replicas, and the other half the time a renewal has to land. Less than
    /// `duration_seconds`.
    pub grace_seconds: u64,
    /// How long a controller whose lease was lost may finish running calls.
    pub loss_grace: Duration,
    /// How long the controller may finish running calls at shutdown, before the lease is
    /// released.
    pub shutdown_grace: Duration,
}

impl LeaderConfig {
    /// The machine's hostname (the pod name, in a pod), `_`, and a random UUID, as
    /// kube-controller-manager's leader election names itself.
    ///
    /// Unique per run: two replicas never share it, even where `HOSTNAME` is not exported (VMs,
    /// systemd units) or two run on one machine. kube-lease-manager takes any holder with its
    /// identity as itself, so a shared identity would make two leaders. The price: a restarted
    /// replica does not recognise the Lease it held before, and waits until it expires (up to
    /// `duration_seconds`) unless the old run released it at shutdown, as [`lead`] does.
    pub fn unique_identity() -> String {
        let host = hostname::get()
            .ok()
            .and_then(|h| h.into_string().ok())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "attach-detach".into());
        format!("{host}_{}", uuid::Uuid::new_v4())
    }
}

impl Default for LeaderConfig {
    /// Lease `attach-detach-controller` in `kube-system`, identity
    /// [`unique_identity`](Self::unique_identity), 15 s with 5 s of grace, 1 s to finish on loss
    /// and 10 s at shutdown.
    fn default() -> Self {
        LeaderConfig {
            lease: "attach-detach-controller".into(),
            namespace: "kube-system".into(),
            identity: Self::unique_identity(),
            duration_seconds: 15,
            grace_seconds: 5,
            loss_grace: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// What one term of leadership runs: a spawned controller and the tasks that feed it.
#[derive(Debug)]
pub struct Term {
    /// The controller's handle: shut down when the term ends.
    pub handle: ControllerHandle<Kube>,
    /// The controller's task.
    pub task: JoinHandle<ShutdownReport<Kube>>,
    /// Tasks that live as long as the term (informers, event publisher): aborted when it ends.
    pub helpers: Vec<JoinHandle<()>>,
}

/// Why [`lead`] stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaderError {
    /// The configuration cannot work (`grace_seconds` must be positive and below
    /// `duration_seconds`).
    #[error("invalid leader configuration: {0}")]
    Config(&'static str),
    /// The lease manager failed (the Lease could not be read or created).
    #[error("lease: {0}")]
    Lease(#[from] LeaseManagerError),
}

/// Why a term ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// The caller asked to stop.
    Shutdown,
    /// The lease went to another replica, or could not be confirmed in time.
    Lost,
    /// The controller stopped by itself.
    ControllerStopped,
}

/// When the lease held by `identity` must be given up: `renewTime + duration - grace / 2`, or
/// `None` if the Lease says another holder (or none).
async fn held_until(api: &Api<Lease>, config: &LeaderConfig) -> kube::Result<Option<Timestamp>> {
    let lease = api.get(&config.lease).await?;
    let Some(spec) = lease.spec else {
        return Ok(None);
    };
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return Ok(None);
    }
    // kube-lease-manager renews at `duration - grace`: stepping down then would race every
    // renewal, so the renewal gets half the grace to land.
    let margin_ms =
        config.duration_seconds.saturating_mul(1000) - config.grace_seconds.saturating_mul(500);
    Ok(spec.renew_time.and_then(|renewed| {
        renewed
            .0
            .checked_add(SignedDuration::from_millis(margin_ms as i64))
            .ok()
    }))
}

fn remaining(deadline: Timestamp) -> Duration {
    Timestamp::now()
        .duration_until(deadline)
        .try_into()
        .unwrap_or(Duration::ZERO)
}

/// Returns once the lease can no longer be counted on: another holder, or `deadline` passed
/// without a read that pushed it further. Each read that does is told to `status`.
async fn until_lost(
    api: &Api<Lease>,
    config: &LeaderConfig,
    mut deadline: Timestamp,
    status: &LeaderStatus,
) {
    let period = Duration::from_secs(config.grace_seconds.max(2) / 2);
    loop {
        let left = remaining(deadline);
        if left.is_zero() {
            warn!("the lease could not be confirmed before it may expire: stepping down");
            return;
        }
        tokio::time::sleep(period.min(left)).await;
        match held_until(api, config).await {
            Ok(Some(until)) => {
                deadline = deadline.max(until);
                status.confirmed(remaining(deadline));
            }
            Ok(None) => {
                info!("the lease has another holder");
                return;
            }
            Err(error) => warn!(%error, "cannot read the lease; holding it until it may expire"),
        }
    }
}

/// Runs a controller only while this replica holds the Lease, until `shutdown` completes.
///
/// Campaigns with `kube-lease-manager` (creating the Lease if needed); once elected and the
/// Lease confirmed by a fresh read, calls `start_term` and watches: the lease lost (another
/// holder, or not confirmed in time, see below) shuts the controller down
/// with [`LeaderConfig::loss_grace`] and campaigns again; `shutdown` shuts it down with
/// [`LeaderConfig::shutdown_grace`] and releases the Lease so a standby takes over at once.
/// A controller that stops by itself ends its term, and a new one starts while the lease is
/// held. A `start_term` that fails is retried after the grace period.
///
/// Every term starts afresh: the controller recovers the actual state from the store and the
/// backend, and the informers list the cluster again.
///
/// # No fencing: what a Lease does not give
///
/// A Kubernetes Lease is advisory. The API server does not know that a write comes from a
/// leader, and refuses nothing a deposed leader sends: a replica paused (GC, a stalled node, a
/// partition) past its lease keeps believing it leads until it looks again, and a write it had
/// in flight lands after the next leader started. etcd's election can fence (every write
/// carries a compare on the leader key, see the etcd adapter); a Lease cannot.
///
/// What limits the damage here:
/// - the holder steps down on its own before the lease can pass to another replica: it
///   re-reads the Lease and stops its controller once `renewTime + duration - grace / 2` (its own
///   clock wrote `renewTime`) is past without a renewal it could see, even when it cannot
///   reach the API server at all. Half the grace is the clock skew tolerated between replicas
///   (kube-lease-manager renews `grace` before expiry; the other half is for that renewal to
///   land);
/// - the status store writes `Node.status.volumesAttached` with a field-level compare-and-set
///   (a JSON patch whose `test` op carries the list the writer last read): a deposed leader's
///   late write of a node's status is refused (422) if the new leader changed that list
///   meanwhile, instead of overwriting it as upstream's unconditional patch would;
/// - VolumeAttachments are idempotent by name (upstream's `csi-<sha256>`): a late create by the
///   old leader is an `AlreadyExists` or creates what the new leader would, a late delete
///   removes an attachment the new leader no longer wants or will create again; the new
///   leader's recovery lists them, and every detach is preceded by a fresh read of the node.
///
/// What remains: a late write that does not conflict (the old leader detaches a volume the new
/// leader has not looked at yet) can land once. The window is one in-flight call, bounded by
/// the controller's call deadlines and `loss_grace`.
pub async fn lead<F, Fut, E>(
    client: Client,
    config: LeaderConfig,
    start_term: F,
    shutdown: impl Future<Output = ()>,
) -> Result<(), LeaderError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Term, E>>,
    E: std::fmt::Display,
{
    lead_with_status(client, config, LeaderStatus::new(), start_term, shutdown).await
}

/// [`lead`], telling `status` where leadership stands: when the lease is confirmed and until
/// when, each term's controller, a term that failed, a step down. The endpoints read it
/// (`/healthz`, `/readyz`, `attach_detach_leader`, the term's metrics): see [`LeaderStatus`].
///
/// `start_term` should return once the term's informers have synced, so that a leader is
/// ready only with a controller that started from the whole cluster.
pub async fn lead_with_status<F, Fut, E>(
    client: Client,
    config: LeaderConfig,
    status: LeaderStatus,
    mut start_term: F,
    shutdown: impl Future<Output = ()>,
) -> Result<(), LeaderError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Term, E>>,
    E: std::fmt::Display,
{
    /// However `lead` ends (returned, or dropped mid-term), the replica no longer leads.
    struct Resign(LeaderStatus);
    impl Drop for Resign {
        fn drop(&mut self) {
            self.0.resign();
        }
    }
    let _resign = Resign(status.clone());
    if config.grace_seconds == 0 || config.grace_seconds >= config.duration_seconds {
        return Err(LeaderError::Config(
            "grace_seconds must be positive and below duration_seconds",
        ));
    }
    let api: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    let manager = LeaseManagerBuilder::new(client, &config.lease)
        .with_namespace(&config.namespace)
        .with_identity(&config.identity)
        .with_duration(config.duration_seconds)
        .with_grace(config.grace_seconds)
        .build()
        .await?;
    let (mut leading, lease_task) = manager.watch().await;
    let retry = Duration::from_secs(config.grace_seconds);
    tokio::pin!(shutdown);
    let mut terms = 0u64;
    'campaign: loop {
        // Stand by until elected, and until a fresh read shows the lease ours and valid.
        let deadline = loop {
            status.stand_by(*leading.borrow());
            tokio::select! {
                biased;
                () = &mut shutdown => break 'campaign,
                elected = leading.wait_for(|l| *l) => if elected.is_err() { break 'campaign },
            }
            match held_until(&api, &config).await {
                Ok(Some(until)) if !remaining(until).is_zero() => break until,
                // Another holder: no failure of ours counts any more.
                Ok(None) => status.stand_by(false),
                Ok(Some(_)) => {}
                Err(error) => warn!(%error, "cannot confirm the lease"),
            }
            tokio::time::sleep(retry).await;
        };
        status.confirmed(remaining(deadline));
        let mut term = tokio::select! {
            biased;
            () = &mut shutdown => break 'campaign,
            term = start_term() => match term {
                Ok(term) => term,
                Err(error) => {
                    warn!(%error, "cannot start a term; retrying");
                    status.failed(format!("the term could not start: {error}"));
                    tokio::time::sleep(retry).await;
                    continue;
                }
            },
        };
        terms += 1;
        status.term_started(term.handle.clone());
        info!(term = terms, identity = %config.identity, "leading");
        let end = tokio::select! {
            biased;
            () = &mut shutdown => End::Shutdown,
            _ = lost(&mut leading) => End::Lost,
            () = until_lost(&api, &config, deadline, &status) => End::Lost,
            _ = &mut term.task => End::ControllerStopped,
        };
        info!(term = terms, ?end, "term over");
        let grace = match end {
            End::Shutdown => config.shutdown_grace,
            _ => config.loss_grace,
        };
        if end == End::ControllerStopped {
            status.failed(match term.handle.died() {
                Some(message) => format!("the controller died: {message}"),
                None => "the controller stopped by itself".into(),
            });
        } else {
            status.term_stopping();
            match term.handle.shutdown(grace).await {
                Ok(report) if !report.abandoned.is_empty() => {
                    warn!(
                        abandoned = report.abandoned.len(),
                        "calls abandoned at the end of the term; the next leader recovers them"
                    )
                }
                Ok(_) => {}
                Err(error) => warn!(%error, "the controller did not shut down cleanly"),
            }
            let _ = (&mut term.task).await;
        }
        for helper in &term.helpers {
            helper.abort();
        }
        if end == End::Shutdown {
            break;
        }
    }
    status.resign();
    // Dropping the receiver makes the manager's task release the Lease and end.
    drop(leading);
    match tokio::time::timeout(Duration::from_secs(5), lease_task).await {
        Ok(Ok(Ok(_))) => info!("lease released"),
        Ok(Ok(Err(error))) => warn!(%error, "lease not released; it expires by itself"),
        Ok(Err(error)) => warn!(%error, "lease task failed"),
        Err(_) => warn!("lease release timed out; it expires by itself"),
    }
    Ok(())
}

/// Returns once the lease manager says the lease is no longer ours (or it stopped).
async fn lost(leading: &mut watch::Receiver<bool>) {
    let _ = leading.wait_for(|l| !*l).await;
}

#[cfg(test)]
mod tests {
    use http::{Request, Response};
    use kube::client::Body;

    use super::*;

    fn config() -> LeaderConfig {
        LeaderConfig {
            identity: "me".into(),
            ..LeaderConfig::default()
        }
    }

    /// A client whose one request is answered with `lease` (as JSON), and the request's URI.
    fn answering(lease: serde_json::Value) -> (Client, JoinHandle<String>) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let task = tokio::spawn(async move {
            let (request, send) = handle.next_request().await.expect("one request");
            let body = serde_json::to_vec(&lease).unwrap();
            send.send_response(Response::builder().body(Body::from(body)).unwrap());
            request.uri().to_string()
        });
        (Client::new(service, "default"), task)
    }

    fn lease(holder: &str, renewed: Timestamp) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "attach-detach-controller", "namespace": "kube-system"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                     "renewTime": renewed.to_string()}
        })
    }

    #[tokio::test]
    async fn the_lease_is_held_until_renewal_plus_duration_minus_half_the_grace() {
        let renewed = Timestamp::now();
        let (client, uri) = answering(lease("me", renewed));
        let api = Api::namespaced(client, "kube-system");
        let until = held_until(&api, &config()).await.unwrap().unwrap();
        assert_eq!(
            until.duration_since(renewed),
            SignedDuration::from_millis(12_500)
        );
        assert_eq!(
            uri.await.unwrap(),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/attach-detach-controller"
        );
    }

    #[tokio::test]
    async fn a_lease_held_by_another_replica_is_not_ours() {
        let (client, _uri) = answering(lease("other", Timestamp::now()));
        let api = Api::namespaced(client, "kube-system");
        assert_eq!(held_until(&api, &config()).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_grace_not_below_the_duration_is_refused_before_any_call() {
        let (service, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let config = LeaderConfig {
            grace_seconds: 15,
            ..config()
        };
        let result = lead(
            client,
            config,
            || async { Err::<Term, _>("unreachable") },
            std::future::pending(),
        )
        .await;
        assert!(matches!(result, Err(LeaderError::Config(_))));
    }
}
