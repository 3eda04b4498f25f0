//! A controller replica: campaigns, and while it leads runs a controller whose every write is
//! fenced, fed by a watcher of the cluster's keys.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::client::Client;
use attach_detach::config::{Config, ConfigError};
use attach_detach::controller::{Controller, ControllerHandle, MetricsSnapshot, World};
use attach_detach::traits::AttachBackend;
use tokio::sync::watch;
use tokio::time::timeout;

use crate::codec::EtcdDomain;
use crate::fence::Fence;
use crate::layout::KeyLayout;
use crate::leader::{Candidate, CandidateConfig, LeaderError, Leadership, Loss};
use crate::store::EtcdStatusStore;
use crate::watch::InputWatcher;

/// Builds a term's backend from its fence: a backend that keeps its own record in etcd puts
/// [`Fence::compare`] in its writes (see [`SimulatedCloud::fenced`](crate::SimulatedCloud::fenced)).
pub type BackendFactory<D> = Arc<dyn Fn(Fence) -> Arc<dyn AttachBackend<D>> + Send + Sync>;

/// How a [`Replica`] runs.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaConfig {
    /// The lease, the campaign and the deadlines of their calls.
    pub candidate: CandidateConfig,
    /// The controller each term runs.
    pub controller: Config,
    /// How long a controller whose leadership was lost may finish its running calls. Short:
    /// its writes are refused by etcd anyway, and the next leader recovers what it started.
    pub loss_grace: Duration,
    /// How long the controller may finish its running calls when the caller shuts the replica
    /// down, before the replica resigns.
    pub shutdown_grace: Duration,
    /// The pause after a failed campaign, and the watcher's pause after a failed watch.
    pub retry: Duration,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        ReplicaConfig {
            candidate: CandidateConfig::default(),
            controller: Config::default(),
            loss_grace: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
            retry: Duration::from_secs(1),
        }
    }
}

/// Why a [`Replica`] could not be built or stopped running.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicaError {
    /// The controller's configuration is refused ([`Config::validate`]).
    #[error("invalid controller configuration: {0}")]
    Config(#[from] ConfigError),
    /// A setting of the replica itself cannot work.
    #[error("invalid replica configuration: {field} must not be zero")]
    ZeroDuration {
        /// The setting, as spelt in Rust (`candidate.call_timeout`).
        field: &'static str,
    },
    /// The controller could not be built.
    #[error("cannot build the controller: {0}")]
    Controller(String),
}

impl ReplicaConfig {
    /// Checks that the replica can run with this configuration.
    pub fn validate(&self) -> Result<(), ReplicaError> {
        self.controller.validate()?;
        for (field, value) in [
            ("candidate.ttl", self.candidate.ttl),
            ("candidate.call_timeout", self.candidate.call_timeout),
            (
                "candidate.campaign_timeout",
                self.candidate.campaign_timeout,
            ),
            ("retry", self.retry),
        ] {
            if value.is_zero() {
                return Err(ReplicaError::ZeroDuration { field });
            }
        }
        Ok(())
    }
}

/// What a replica is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Campaigning: another replica leads, or nobody does yet.
    StandingBy,
    /// Elected: its controller runs. `term` counts this replica's terms from 1.
    Leading {
        /// Which of this replica's terms.
        term: u64,
    },
    /// [`Replica::run`] returned.
    Stopped,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::StandingBy => f.write_str("standing by"),
            Role::Leading { term } => write!(f, "leading (term {term})"),
            Role::Stopped => f.write_str("stopped"),
        }
    }
}

/// One replica of the controller, for an orchestrator that runs two or more.
///
/// [`run`](Replica::run) loops: campaign (with a new lease) → elected: build an
/// [`EtcdStatusStore`] fenced with the term's [`Fence`], the backend from the caller's factory
/// (given the same fence), a [`Controller`] with an empty [`World`] (it recovers the actual
/// state from the store and the backend, and the desired state from the watcher's first
/// relist), and the watcher of `{prefix}/cluster/` feeding it → until the leadership is lost
/// (the controller is shut down with [`ReplicaConfig::loss_grace`], the watcher stopped, the
/// lease revoked, and the replica campaigns again) or the caller's shutdown future fires (the
/// controller is shut down with [`ReplicaConfig::shutdown_grace`], then the replica resigns so
/// that a standby takes over at once).
///
/// A replica that was paused past its lease may still run its controller for a moment: every
/// write it makes is refused by etcd (the fence), and the first refusal ends its term.
///
/// Give it a client without a request timeout
/// ([`ConnectOptions::with_timeout`](crate::client::ConnectOptions::with_timeout)), or one longer
/// than [`CandidateConfig::campaign_timeout`]: it would also end a standby's campaign early
/// (which then starts again, with a new lease). Every call the replica makes has its own
/// deadline. The watcher wants keep-alive and require-leader (see
/// [`InputWatcher`](crate::InputWatcher)).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use attach_detach::Ids;
/// use attach_detach::traits::AttachBackend;
/// use attach_detach_etcd::{CloudConfig, KeyLayout, Replica, ReplicaConfig, SimulatedCloud};
/// type D = Ids<String, String, String, ()>;
///
/// let client = attach_detach_etcd::client::Client::connect(["127.0.0.1:2379"], None)?;
/// let layout = KeyLayout::default();
/// let cloud = SimulatedCloud::<D>::new(client.clone(), layout.clone(), CloudConfig::default());
/// let replica = Replica::new(
///     client,
///     layout,
///     "replica-a",
///     ReplicaConfig::default(),
///     Arc::new(move |fence| Arc::new(cloud.clone().fenced(fence)) as Arc<dyn AttachBackend<D>>),
/// )?;
/// let handle = replica.handle();
/// let task = tokio::spawn(replica.run(async { let _ = tokio::signal::ctrl_c().await; }));
/// println!("{}", handle.role());
/// task.await??;
/// # Ok(()) }
/// ```
pub struct Replica<D: EtcdDomain> {
    client: Client,
    layout: KeyLayout,
    name: String,
    config: ReplicaConfig,
    factory: BackendFactory<D>,
    shared: Arc<Shared<D>>,
}

impl<D: EtcdDomain> fmt::Debug for Replica<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replica")
            .field("name", &self.name)
            .field("layout", &self.layout)
            .field("role", &*self.shared.role.borrow())
            .finish_non_exhaustive()
    }
}

/// What the running replica shares with its handles.
struct Shared<D: EtcdDomain> {
    role: watch::Sender<Role>,
    stall: watch::Sender<bool>,
    state: Mutex<State<D>>,
}

struct State<D: EtcdDomain> {
    terms: u64,
    controller: Option<ControllerHandle<D>>,
    store: Option<EtcdStatusStore<D>>,
    refused_before: u64,
    fence: Option<Fence>,
    last_loss: Option<Loss>,
}

impl<D: EtcdDomain> Shared<D> {
    fn state(&self) -> MutexGuard<'_, State<D>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A view of a running [`Replica`], for tests and operators: its role, its terms, its current
/// (or last) controller's metrics. Cloneable; works after the replica stopped.
pub struct ReplicaHandle<D: EtcdDomain> {
    shared: Arc<Shared<D>>,
}

impl<D: EtcdDomain> Clone for ReplicaHandle<D> {
    fn clone(&self) -> Self {
        ReplicaHandle {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<D: EtcdDomain> fmt::Debug for ReplicaHandle<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicaHandle")
            .field("role", &self.role())
            .field("terms", &self.terms())
            .finish_non_exhaustive()
    }
}

impl<D: EtcdDomain> ReplicaHandle<D> {
    /// What the replica does now.
    pub fn role(&self) -> Role {
        *self.shared.role.borrow()
    }

    /// The role, to wait for a change (`roles().wait_for(..)`).
    pub fn roles(&self) -> watch::Receiver<Role> {
        self.shared.role.subscribe()
    }

    /// Whether the replica leads now (as far as it knows: a replica paused past its lease
    /// believes it until its next keep-alive or its first refused write).
    pub fn is_leading(&self) -> bool {
        matches!(self.role(), Role::Leading { .. })
    }

    /// How many terms the replica has been elected for.
    pub fn terms(&self) -> u64 {
        self.shared.state().terms
    }

    /// Why the last term ended, if one did.
    pub fn last_loss(&self) -> Option<Loss> {
        self.shared.state().last_loss
    }

    /// The counters of the current term's controller, or of the last one's; `None` before the
    /// first election.
    pub fn metrics(&self) -> Option<MetricsSnapshot> {
        self.shared
            .state()
            .controller
            .as_ref()
            .map(ControllerHandle::metrics)
    }

    /// Status writes etcd refused because the fence no longer held, over every term.
    pub fn refused_by_fence(&self) -> u64 {
        let state = self.shared.state();
        state.refused_before
            + state
                .store
                .as_ref()
                .map_or(0, |s| s.stats().refused_by_fence())
    }

    /// The current (or last) term's fence.
    pub fn fence(&self) -> Option<Fence> {
        self.shared.state().fence.clone()
    }

    /// Fault injection for tests and drills: `true` stalls the lease's keep-alive (no
    /// keep-alive is sent and the leader key is not checked, as if the process were stopped)
    /// while the controller goes on; the lease expires after its TTL and another replica is
    /// elected. `false` lets it go on: it then finds its lease gone.
    pub fn stall_keep_alive(&self, stalled: bool) {
        self.shared.stall.send_replace(stalled);
    }
}

/// How a term ended.
enum End {
    Shutdown,
    Lost,
}

impl<D: EtcdDomain> Replica<D> {
    /// A replica named `name` (its leader key's value) over `client`, under `layout`, whose
    /// terms get their backend from `factory`. Fails if `config` cannot run.
    pub fn new(
        client: Client,
        layout: KeyLayout,
        name: impl Into<String>,
        config: ReplicaConfig,
        factory: BackendFactory<D>,
    ) -> Result<Self, ReplicaError> {
        config.validate()?;
        Ok(Replica {
            client,
            layout,
            name: name.into(),
            config,
            factory,
            shared: Arc::new(Shared {
                role: watch::Sender::new(Role::StandingBy),
                stall: watch::Sender::new(false),
                state: Mutex::new(State {
                    terms: 0,
                    controller: None,
                    store: None,
                    refused_before: 0,
                    fence: None,
                    last_loss: None,
                }),
            }),
        })
    }

    /// Publishes `role` to the handles, if it changed.
    fn set_role(&self, role: Role) {
        self.shared.role.send_if_modified(|current| {
            let changed = *current != role;
            *current = role;
            changed
        });
    }

    /// A handle to watch the replica while it runs.
    pub fn handle(&self) -> ReplicaHandle<D> {
        ReplicaHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Runs the replica until `shutdown` resolves: then a leading replica shuts its
    /// controller down and resigns. Errors only if a controller cannot be built; etcd's
    /// failures are logged and retried.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), ReplicaError> {
        let candidate = Candidate::new(
            self.client.clone(),
            self.layout.clone(),
            self.name.clone(),
            self.config.candidate.clone(),
        )
        .with_stall(self.shared.stall.subscribe());
        let mut shutdown = std::pin::pin!(shutdown);
        let result = loop {
            self.set_role(Role::StandingBy);
            tracing::info!(name = %self.name, "standing by");
            let campaign = tokio::select! {
                biased;
                () = &mut shutdown => break Ok(()),
                campaign = candidate.campaign() => campaign,
            };
            let leadership = match campaign {
                Ok(leadership) => leadership,
                Err(LeaderError::Timeout {
                    what: "campaigning",
                    ..
                }) => continue,
                Err(e) => {
                    tracing::warn!(name = %self.name, error = %e, "campaign failed; retrying");
                    tokio::select! {
                        biased;
                        () = &mut shutdown => break Ok(()),
                        () = tokio::time::sleep(self.config.retry) => continue,
                    }
                }
            };
            match self.lead(leadership, shutdown.as_mut()).await {
                Ok(End::Shutdown) => break Ok(()),
                Ok(End::Lost) => {}
                Err(e) => break Err(e),
            }
        };
        self.set_role(Role::Stopped);
        result
    }

    /// One term: runs the controller until the leadership is lost or `shutdown` fires.
    async fn lead(
        &self,
        leadership: Leadership,
        mut shutdown: Pin<&mut (impl Future<Output = ()> + Send)>,
    ) -> Result<End, ReplicaError> {
        let fence = leadership.fence().clone();
        let store = EtcdStatusStore::<D>::new(self.client.clone(), self.layout.clone())
            .fenced(fence.clone());
        let backend = (self.factory)(fence.clone());
        let controller = Controller::new(
            self.config.controller.clone(),
            backend,
            Arc::new(store.clone()),
            World::new(),
        )
        .map_err(|e| ReplicaError::Controller(e.to_string()));
        let controller = match controller {
            Ok(controller) => controller,
            Err(e) => {
                let _ = leadership.resign().await;
                return Err(e);
            }
        };
        let (handle, mut task) = controller.spawn();
        let mut watcher = tokio::spawn(
            InputWatcher::<D>::new(self.client.clone(), self.layout.clone())
                .run(handle.clone(), self.config.retry),
        );
        let term = {
            let mut state = self.shared.state();
            state.terms += 1;
            state.controller = Some(handle.clone());
            state.store = Some(store.clone());
            state.fence = Some(fence.clone());
            state.terms
        };
        self.set_role(Role::Leading { term });
        tracing::info!(name = %self.name, term, revision = fence.revision(), "leading");

        enum Why {
            Shutdown,
            Lost(Loss),
            Watcher(String),
            Controller,
        }
        let why = tokio::select! {
            biased;
            () = &mut shutdown => Why::Shutdown,
            loss = leadership.lost() => Why::Lost(loss),
            ended = &mut watcher => Why::Watcher(match ended {
                Ok(Ok(())) => "the watcher stopped".to_owned(),
                Ok(Err(e)) => format!("the watcher failed: {e}"),
                Err(e) => format!("the watcher's task ended: {e}"),
            }),
            _ = &mut task => Why::Controller,
        };
        let grace = match why {
            Why::Shutdown => self.config.shutdown_grace,
            _ => self.config.loss_grace,
        };
        match &why {
            Why::Shutdown => tracing::info!(name = %self.name, term, "shutting down"),
            Why::Lost(loss) => {
                tracing::warn!(name = %self.name, term, reason = %loss, "lost leadership")
            }
            Why::Watcher(why) => {
                tracing::warn!(name = %self.name, term, reason = %why, "stepping down")
            }
            Why::Controller => {
                tracing::warn!(name = %self.name, term, "the controller stopped; stepping down")
            }
        }
        // The controller first (its running calls end within the grace, or by their
        // deadlines), then its feed, then the leadership.
        if !task.is_finished() {
            match timeout(grace + Duration::from_secs(5), handle.shutdown(grace)).await {
                Ok(Ok(report)) if !report.abandoned.is_empty() => {
                    tracing::info!(name = %self.name, term, abandoned = report.abandoned.len(), "calls abandoned at the end of the term");
                }
                Ok(_) => {}
                Err(_) => {
                    tracing::warn!(name = %self.name, term, "the controller did not stop in time")
                }
            }
            task.abort();
        }
        watcher.abort();
        let _ = watcher.await;
        let _ = task.await;
        {
            let mut state = self.shared.state();
            state.refused_before += store.stats().refused_by_fence();
            state.store = None;
            state.last_loss = match why {
                Why::Lost(loss) => Some(loss),
                _ => None,
            };
        }
        match why {
            Why::Shutdown => {
                if let Err(e) = leadership.resign().await {
                    tracing::warn!(name = %self.name, error = %e, "resigning failed; the lease will expire");
                }
                Ok(End::Shutdown)
            }
            Why::Lost(_) => {
                leadership.release().await;
                Ok(End::Lost)
            }
            Why::Watcher(_) | Why::Controller => {
                if let Err(e) = leadership.resign().await {
                    tracing::warn!(name = %self.name, error = %e, "resigning failed; the lease will expire");
                }
                tokio::select! {
                    biased;
                    () = &mut shutdown => Ok(End::Shutdown),
                    () = tokio::time::sleep(self.config.retry) => Ok(End::Lost),
                }
            }
        }
    }
}
