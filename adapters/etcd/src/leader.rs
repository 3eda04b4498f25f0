//! Leadership: a lease kept alive, a campaign on the layout's election, and the [`Fence`] the
//! elected replica writes with.
//!
//! A [`Candidate`] grants a lease, keeps it alive in a task of its own (a keep-alive every
//! third of the TTL) and campaigns under [`KeyLayout::election`] with its name as the value.
//! Elected, it holds a [`Leadership`]: the leader key, its create revision as a [`Fence`], and
//! the task that keeps the lease alive and checks the key. The leadership is lost, and the
//! fence deposed, when
//!
//! - no keep-alive succeeded for a whole TTL (counted from when the last successful one was
//!   sent, so the replica gives up no later than etcd expires the lease), or etcd answers a
//!   keep-alive with TTL 0 (the lease is gone);
//! - the leader key is gone or is another key (checked after every keep-alive);
//! - a fenced write is refused (the writer calls [`Fence::depose`]).
//!
//! Every wait has an end: each call to etcd has a deadline ([`CandidateConfig::call_timeout`],
//! and a keep-alive never waits past the lease's expiry), and a campaign is given up after
//! [`CandidateConfig::campaign_timeout`] (etcd then withdraws it) so that the caller can start
//! again with a fresh lease.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::client::{
    Client, Error as ClientError, LeaderKey, LeaseKeepAliveStream, LeaseKeeper, ResignOptions,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout, timeout_at};

use crate::error::EtcdError;
use crate::fence::Fence;
use crate::layout::KeyLayout;

/// How a [`Candidate`] campaigns and keeps its lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CandidateConfig {
    /// The lease's time to live, rounded up to whole seconds (etcd may grant more: its
    /// smallest TTL is about 2 s with default settings). A replica that stops answering is
    /// replaced within about this long.
    pub ttl: Duration,
    /// The deadline of each call to etcd (grant, keep-alive, the leader key's check, resign,
    /// revoke). A keep-alive is also never awaited past the lease's expiry.
    pub call_timeout: Duration,
    /// How long one campaign may wait to be elected before it is withdrawn, so that the
    /// candidate starts again with a new lease rather than wait on a session it cannot check.
    pub campaign_timeout: Duration,
}

impl Default for CandidateConfig {
    fn default() -> Self {
        CandidateConfig {
            ttl: Duration::from_secs(10),
            call_timeout: Duration::from_secs(5),
            campaign_timeout: Duration::from_secs(60),
        }
    }
}

/// Why a leadership (or a campaign's lease) was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Loss {
    /// No keep-alive succeeded for a whole TTL: etcd has expired the lease, or is about to.
    KeepAliveFailed,
    /// etcd answered a keep-alive with TTL 0: the lease is gone (expired or revoked).
    LeaseGone,
    /// The leader key is gone, or is no longer the one this replica was elected with.
    KeyGone,
    /// A write carrying the fence was refused, or someone called [`Fence::depose`].
    Deposed,
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Loss::KeepAliveFailed => "no keep-alive succeeded for a whole TTL",
            Loss::LeaseGone => "etcd says the lease is gone",
            Loss::KeyGone => "the leader key is gone",
            Loss::Deposed => "a fenced write was refused",
        })
    }
}

/// Why a campaign or a resignation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaderError {
    /// A call to etcd failed.
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    /// A call to etcd did not answer within its deadline.
    #[error("etcd did not answer within {after:?} while {what}")]
    Timeout {
        /// What the candidate was doing.
        what: &'static str,
        /// The deadline.
        after: Duration,
    },
    /// The campaign's lease was lost before the election was won.
    #[error("the campaign's lease was lost: {0}")]
    LeaseLost(Loss),
}

/// A replica that can campaign for the leadership of the controllers under one [`KeyLayout`].
#[derive(Clone)]
pub struct Candidate {
    client: Client,
    layout: KeyLayout,
    name: String,
    config: CandidateConfig,
    stall: watch::Receiver<bool>,
}

impl fmt::Debug for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Candidate")
            .field("name", &self.name)
            .field("layout", &self.layout)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Candidate {
    /// A candidate named `name` (the value of its leader key: what
    /// [`current_leader`] returns while it leads).
    pub fn new(
        client: Client,
        layout: KeyLayout,
        name: impl Into<String>,
        config: CandidateConfig,
    ) -> Self {
        Candidate {
            client,
            layout,
            name: name.into(),
            config,
            stall: watch::channel(false).1,
        }
    }

    /// Fault injection for tests and drills: while the receiver holds `true`, the lease's
    /// keep-alive task sends nothing and checks nothing, as if the process were stopped
    /// (everything else of the replica goes on). The lease then expires after its TTL.
    pub fn with_stall(mut self, stall: watch::Receiver<bool>) -> Self {
        self.stall = stall;
        self
    }

    /// The candidate's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Grants a lease, keeps it alive and campaigns until elected, the lease is lost, a call
    /// fails or [`CandidateConfig::campaign_timeout`] passes. On failure the lease is revoked
    /// (best effort): start again with a new one.
    pub async fn campaign(&self) -> Result<Leadership, LeaderError> {
        let call = self.config.call_timeout;
        let ttl = self.config.ttl.as_secs_f64().ceil().max(1.0) as i64;
        let sent = Instant::now();
        let granted = timeout(call, self.client.lease_client().grant(ttl, None))
            .await
            .map_err(|_| LeaderError::Timeout {
                what: "granting a lease",
                after: call,
            })?
            .map_err(EtcdError::client("granting a lease"))?;
        let lease = granted.id();
        let ttl = Duration::from_secs(granted.ttl().max(1) as u64);
        let session = Arc::new(Session::default());
        let keeper = Keeper(tokio::spawn(keep_alive(
            self.client.clone(),
            lease,
            ttl,
            sent + ttl,
            call,
            Arc::clone(&session),
            self.stall.clone(),
        )));
        let mut lost = session.lost.subscribe();
        let campaign = async {
            let mut election = self.client.election_client();
            timeout(
                self.config.campaign_timeout,
                election.campaign(self.layout.election(), self.name.as_bytes(), lease),
            )
            .await
        };
        let outcome = tokio::select! {
            biased;
            reason = lost.wait_for(Option::is_some) => {
                Err(LeaderError::LeaseLost(reason.ok().and_then(|r| *r).unwrap_or(Loss::LeaseGone)))
            }
            answer = campaign => match answer {
                Err(_) => Err(LeaderError::Timeout { what: "campaigning", after: self.config.campaign_timeout }),
                Ok(Err(e)) => Err(EtcdError::client("campaigning")(e).into()),
                Ok(Ok(mut response)) => response.take_leader().ok_or_else(|| {
                    LeaderError::Etcd(EtcdError::client("campaigning")(ClientError::Election(
                        "etcd answered a campaign without a leader key".into(),
                    )))
                }),
            },
        };
        let leader = match outcome {
            Ok(leader) => leader,
            Err(e) => {
                drop(keeper);
                revoke(&self.client, lease, call).await;
                return Err(e);
            }
        };
        let fence = Fence::new(leader.key(), leader.rev());
        let _ = session.fence.set(fence.clone());
        // The lease may have been lost between the election and now.
        if session.lost.borrow().is_some() {
            fence.depose();
        }
        tracing::info!(name = %self.name, key = %String::from_utf8_lossy(leader.key()), revision = leader.rev(), "elected");
        Ok(Leadership {
            client: self.client.clone(),
            leader,
            fence,
            lease,
            session,
            keeper,
            call_timeout: call,
        })
    }
}

/// The name of the current leader under `layout` (the value it campaigned with), or `None`
/// when nobody leads. One call, within `deadline`.
pub async fn current_leader(
    client: &Client,
    layout: &KeyLayout,
    deadline: Duration,
) -> Result<Option<String>, LeaderError> {
    let answer = timeout(deadline, client.election_client().leader(layout.election()))
        .await
        .map_err(|_| LeaderError::Timeout {
            what: "asking for the leader",
            after: deadline,
        })?;
    match answer {
        Ok(response) => Ok(response
            .kv()
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())),
        // etcd answers "election: no leader" as an error.
        Err(ClientError::Status(status)) if status.message().contains("no leader") => Ok(None),
        Err(e) => Err(EtcdError::client("asking for the leader")(e).into()),
    }
}

/// What the keep-alive task shares with the leadership.
#[derive(Debug, Default)]
struct Session {
    /// Set once, when the lease or the key is lost.
    lost: watch::Sender<Option<Loss>>,
    /// Set once elected: deposed on loss.
    fence: OnceLock<Fence>,
}

impl Session {
    fn lose(&self, reason: Loss) {
        self.lost.send_if_modified(|lost| {
            if lost.is_none() {
                *lost = Some(reason);
                true
            } else {
                false
            }
        });
        if let Some(fence) = self.fence.get() {
            fence.depose();
        }
    }
}

/// An elected replica's leadership. Dropping it stops the keep-alive (the lease then expires
/// after its TTL); [`resign`](Leadership::resign) hands the leadership over at once.
pub struct Leadership {
    client: Client,
    leader: LeaderKey,
    fence: Fence,
    lease: i64,
    session: Arc<Session>,
    keeper: Keeper,
    call_timeout: Duration,
}

/// The keep-alive task, stopped when dropped (a campaign given up, a leadership dropped).
struct Keeper(JoinHandle<()>);

impl Drop for Keeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("fence", &self.fence)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// The fence every write of this term carries.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// The lease the leader key is bound to.
    pub fn lease(&self) -> i64 {
        self.lease
    }

    /// Resolves once the leadership is lost, with why.
    pub async fn lost(&self) -> Loss {
        let mut lost = self.session.lost.subscribe();
        tokio::select! {
            biased;
            reason = lost.wait_for(Option::is_some) => {
                reason.ok().and_then(|r| *r).unwrap_or(Loss::Deposed)
            }
            () = self.fence.deposed() => {
                // The lease's own reason, if the keep-alive task saw it first.
                let reason = *self.session.lost.borrow();
                reason.unwrap_or(Loss::Deposed)
            }
        }
    }

    /// Whether the leadership is lost.
    pub fn is_lost(&self) -> bool {
        self.fence.is_deposed() || self.session.lost.borrow().is_some()
    }

    /// Gives the leadership up: the leader key is deleted (resign) and the lease revoked, so
    /// another candidate is elected at once. The fence is deposed first, so nothing written
    /// with it after this call starts can land. Each call has its deadline.
    pub async fn resign(self) -> Result<(), LeaderError> {
        self.fence.depose();
        self.keeper.0.abort();
        let call = self.call_timeout;
        let mut election = self.client.election_client();
        let resigned = timeout(
            call,
            election.resign(Some(ResignOptions::new().with_leader(self.leader.clone()))),
        )
        .await;
        revoke(&self.client, self.lease, call).await;
        match resigned {
            Err(_) => Err(LeaderError::Timeout {
                what: "resigning",
                after: call,
            }),
            Ok(Err(e)) => Err(EtcdError::client("resigning")(e).into()),
            Ok(Ok(_)) => Ok(()),
        }
    }

    /// Gives a lost leadership back: stops the keep-alive and revokes the lease (best effort),
    /// in case etcd still holds the key (a keep-alive failing because of the network).
    pub async fn release(self) {
        self.fence.depose();
        self.keeper.0.abort();
        revoke(&self.client, self.lease, self.call_timeout).await;
    }
}

/// Revokes `lease`, within `deadline`, logging a failure (the lease expires anyway).
async fn revoke(client: &Client, lease: i64, deadline: Duration) {
    match timeout(deadline, client.lease_client().revoke(lease)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::debug!(lease, error = %e, "revoking the lease failed"),
        Err(_) => tracing::debug!(lease, "revoking the lease timed out"),
    }
}

/// Keeps `lease` alive every third of `ttl` until it is lost; once elected, checks after each
/// keep-alive that the leader key is still the fence's.
async fn keep_alive(
    client: Client,
    lease: i64,
    ttl: Duration,
    mut expires: Instant,
    call: Duration,
    session: Arc<Session>,
    mut stall: watch::Receiver<bool>,
) {
    let interval = ttl / 3;
    let mut stream: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
    loop {
        if *stall.borrow() {
            tracing::warn!(lease, "keep-alive stalled (fault injection)");
            // A sender dropped while stalled leaves the task stalled: the lease expires, as
            // for a process stopped for good.
            if stall.wait_for(|stalled| !*stalled).await.is_err() {
                std::future::pending::<()>().await;
            }
            tracing::warn!(lease, "keep-alive resumed");
        }
        let sent = Instant::now();
        if sent >= expires {
            tracing::warn!(lease, "no keep-alive succeeded for a whole TTL");
            session.lose(Loss::KeepAliveFailed);
            return;
        }
        let answer = timeout_at(expires.min(sent + call), async {
            match &mut stream {
                Some((keeper, responses)) => {
                    keeper.keep_alive().await?;
                    match responses.message().await? {
                        Some(response) => Ok(response.ttl()),
                        None => Err(ClientError::KeepAlive("the keep-alive stream ended".into())),
                    }
                }
                None => {
                    // Opening the stream sends one keep-alive and reads its answer; it fails
                    // with "lease not found" for a lease with TTL 0.
                    let opened = client.lease_client().keep_alive(lease).await?;
                    stream = Some(opened);
                    Ok(ttl.as_secs() as i64)
                }
            }
        })
        .await;
        match answer {
            Ok(Ok(granted)) if granted > 0 => {
                expires = sent + Duration::from_secs(granted as u64);
            }
            Ok(Ok(_)) => {
                tracing::warn!(lease, "etcd answered a keep-alive with TTL 0");
                session.lose(Loss::LeaseGone);
                return;
            }
            Ok(Err(ClientError::KeepAlive(message))) if message.contains("not found") => {
                tracing::warn!(lease, "etcd no longer knows the lease");
                session.lose(Loss::LeaseGone);
                return;
            }
            Ok(Err(e)) => {
                tracing::debug!(lease, error = %e, "keep-alive failed; retrying");
                stream = None;
            }
            Err(_) => {
                tracing::debug!(lease, "keep-alive timed out; retrying");
                stream = None;
            }
        }
        if let Some(fence) = session.fence.get() {
            let now = Instant::now();
            if now < expires {
                let read = timeout_at(
                    expires.min(now + call),
                    client.kv_client().get(fence.key(), None),
                )
                .await;
                if let Ok(Ok(response)) = read {
                    let holds = response
                        .kvs()
                        .first()
                        .is_some_and(|kv| kv.create_revision() == fence.revision());
                    if !holds {
                        tracing::warn!(lease, "the leader key is gone");
                        session.lose(Loss::KeyGone);
                        return;
                    }
                }
            }
        }
        // A failed keep-alive is retried sooner, still within the lease.
        let next = if stream.is_some() {
            sent + interval
        } else {
            Instant::now() + (interval / 4).max(Duration::from_millis(50))
        };
        tokio::select! {
            biased;
            () = stalled(&mut stall) => {}
            () = sleep_until(next.min(expires)) => {}
        }
    }
}

/// Resolves once `stall` holds `true`; never, once its sender is gone while it holds `false`.
async fn stalled(stall: &mut watch::Receiver<bool>) {
    if stall.wait_for(|stalled| *stalled).await.is_err() {
        std::future::pending::<()>().await;
    }
}
