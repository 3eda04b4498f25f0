//! The etcd v3 client the adapter talks through: the key-value store, leases, elections and
//! watches, over gRPC.
//!
//! The gRPC code ([`pb`]) is generated from etcd's protos and committed, so that building this
//! crate needs no `protoc` (see the crate's README, "Generated code", for its source and how
//! it is checked). The types here wrap it in the calls the adapter makes; the generated
//! messages are the responses, with accessors.
//!
//! ```no_run
//! # async fn f() -> Result<(), attach_detach_etcd::client::Error> {
//! use std::time::Duration;
//! use attach_detach_etcd::client::{Client, ConnectOptions};
//!
//! let options = ConnectOptions::new()
//!     .with_connect_timeout(Duration::from_secs(2))
//!     .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3))
//!     .with_require_leader(true);
//! let client = Client::connect(["127.0.0.1:2379"], Some(options))?;
//! client.kv_client().put("/greeting", "hello", None).await?;
//! # Ok(()) }
//! ```

mod election;
mod kv;
mod lease;
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb;
mod watch;

use std::time::Duration;

use tonic::metadata::AsciiMetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

pub use election::{ElectionClient, ResignOptions};
pub use kv::{
    CompactionOptions, Compare, CompareOp, DeleteOptions, GetOptions, KvClient, PutOptions, Txn,
    TxnOp, TxnOpResponse,
};
pub use lease::{LeaseClient, LeaseGrantOptions, LeaseKeepAliveStream, LeaseKeeper};
pub use pb::etcdserverpb::{
    CompactionResponse, DeleteRangeResponse as DeleteResponse, LeaseGrantResponse,
    LeaseKeepAliveResponse, LeaseRevokeResponse, PutResponse, RangeResponse as GetResponse,
    ResponseHeader, TxnResponse, WatchResponse,
};
pub use pb::mvccpb::event::EventType;
pub use pb::mvccpb::{Event, KeyValue};
pub use pb::v3electionpb::{CampaignResponse, LeaderKey, LeaderResponse, ResignResponse};
pub use watch::{WatchClient, WatchOptions, WatchStream};

/// A failed etcd call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An endpoint is not a URI.
    #[error("{endpoint:?} is not an etcd endpoint")]
    InvalidEndpoint {
        /// The endpoint given.
        endpoint: String,
        /// Why it does not parse.
        #[source]
        source: tonic::transport::Error,
    },
    /// The call failed: etcd's answer, or the connection's failure as gRPC reports it
    /// (`Unavailable`, `DeadlineExceeded`, `Unknown` for a channel that could not connect).
    #[error("etcd answered {}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
    /// A lease keep-alive failed: the stream ended, or etcd no longer knows the lease.
    #[error("lease keep-alive: {0}")]
    KeepAlive(String),
    /// etcd's answer to an election call lacked what it must carry.
    #[error("election: {0}")]
    Election(String),
    /// A watch failed: etcd canceled it, or its request stream closed.
    #[error("watch: {0}")]
    Watch(String),
    /// etcd's answer lacked what it must carry.
    #[error("unexpected answer from etcd: {0}")]
    Internal(String),
    /// [`Client::connect`] was called outside a tokio runtime, which its connections run on.
    #[error("an etcd client must be created inside a tokio runtime")]
    NoRuntime,
}

/// How a [`Client`] connects. By default: no deadline on a call, no HTTP/2 keep-alive, and a
/// call goes to a member whether or not it has a leader.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    keep_alive: Option<(Duration, Duration)>,
    keep_alive_while_idle: bool,
    require_leader: bool,
}

impl ConnectOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// A deadline for every call: it also ends a watch, a campaign or a keep-alive stream
    /// that outlives it, so a long-lived client (a replica) should go without.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// A deadline for establishing each connection.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// HTTP/2 pings every `interval`, the connection dropped when one goes unanswered for
    /// `timeout`: a member that vanished without closing its connections (a machine off, a
    /// partition) fails the calls and streams on it instead of leaving them silent.
    pub fn with_keep_alive(mut self, interval: Duration, timeout: Duration) -> Self {
        self.keep_alive = Some((interval, timeout));
        self
    }

    /// Whether the pings of [`with_keep_alive`](Self::with_keep_alive) go on while no call
    /// is under way.
    pub fn with_keep_alive_while_idle(mut self, enabled: bool) -> Self {
        self.keep_alive_while_idle = enabled;
        self
    }

    /// Every call asks for a member with a leader (etcd's `hasleader` metadata): a member cut
    /// off from its cluster refuses the call, and ends the watches on it, instead of serving
    /// stale reads and a watch that goes quiet.
    pub fn with_require_leader(mut self, require: bool) -> Self {
        self.require_leader = require;
        self
    }
}

/// A connection to an etcd cluster: cheap to clone, every clone sharing the same connections.
#[derive(Clone, Debug)]
pub struct Client {
    channel: Channel,
    require_leader: RequireLeader,
}

/// The service every generated client calls through.
type Service = InterceptedService<Channel, RequireLeader>;

impl Client {
    /// A client of the members at `endpoints` (`host:port`, or a `http://` URI), calls
    /// balanced across them. Connections are made when first needed and made again after
    /// they break (an etcd restart), so this fails only on an endpoint that does not parse,
    /// or outside a tokio runtime (the connections' task runs on it); a member that cannot be
    /// reached fails the calls sent to it.
    pub fn connect<E: AsRef<str>>(
        endpoints: impl IntoIterator<Item = E>,
        options: Option<ConnectOptions>,
    ) -> Result<Client, Error> {
        // The balanced channel spawns its task at once: outside a runtime that would panic.
        tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let options = options.unwrap_or_default();
        let endpoints = endpoints
            .into_iter()
            .map(|endpoint| endpoint_of(endpoint.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Client {
            channel: Channel::balance_list(endpoints.into_iter()),
            require_leader: RequireLeader(options.require_leader),
        })
    }

    fn service(&self) -> Service {
        InterceptedService::new(self.channel.clone(), self.require_leader.clone())
    }

    /// The key-value store.
    pub fn kv_client(&self) -> KvClient {
        KvClient::new(self.service())
    }

    /// Leases.
    pub fn lease_client(&self) -> LeaseClient {
        LeaseClient::new(self.service())
    }

    /// Elections (etcd's `v3election` service).
    pub fn election_client(&self) -> ElectionClient {
        ElectionClient::new(self.service())
    }

    /// Watches.
    pub fn watch_client(&self) -> WatchClient {
        WatchClient::new(self.service())
    }
}

/// One member's endpoint with the options' settings.
fn endpoint_of(endpoint: &str, options: &ConnectOptions) -> Result<Endpoint, Error> {
    let uri = if endpoint.contains("://") {
        endpoint.to_owned()
    } else {
        format!("http://{endpoint}")
    };
    let mut built = Endpoint::from_shared(uri).map_err(|source| Error::InvalidEndpoint {
        endpoint: endpoint.to_owned(),
        source,
    })?;
    if let Some(timeout) = options.timeout {
        built = built.timeout(timeout);
    }
    if let Some(timeout) = options.connect_timeout {
        built = built.connect_timeout(timeout);
    }
    if let Some((interval, timeout)) = options.keep_alive {
        built = built
            .http2_keep_alive_interval(interval)
            .keep_alive_timeout(timeout)
            .keep_alive_while_idle(options.keep_alive_while_idle);
    }
    Ok(built)
}

/// Adds etcd's `hasleader` metadata to every call when asked to.
#[derive(Clone, Debug)]
struct RequireLeader(bool);

impl Interceptor for RequireLeader {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if self.0 {
            request
                .metadata_mut()
                .insert("hasleader", AsciiMetadataValue::from_static("true"));
        }
        Ok(request)
    }
}

/// The end of the range of keys starting with `prefix`: `prefix` with its last byte below
/// 0xff raised by one, and the bytes after it dropped; `[0]` (every key) when there is none.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_first_key_after_the_prefix() {
        assert_eq!(prefix_end(b"/p/a/"), b"/p/a0");
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b");
        assert_eq!(prefix_end(&[0xff]), [0]);
        assert_eq!(prefix_end(b""), [0]);
    }

    #[test]
    fn an_endpoint_without_a_scheme_is_http() {
        let options = ConnectOptions::new();
        let endpoint = endpoint_of("127.0.0.1:2379", &options).unwrap();
        assert_eq!(endpoint.uri().to_string(), "http://127.0.0.1:2379/");
    }

    #[tokio::test]
    async fn a_bad_endpoint_is_an_error() {
        assert!(matches!(
            Client::connect(["http://bad host"], None),
            Err(Error::InvalidEndpoint { .. })
        ));
        assert!(Client::connect(["127.0.0.1:2379"], None).is_ok());
    }

    #[test]
    fn a_client_made_outside_a_runtime_is_an_error_not_a_panic() {
        assert!(matches!(
            Client::connect(["127.0.0.1:2379"], None),
            Err(Error::NoRuntime)
        ));
    }
}
