//! Leases: granted, kept alive over a stream, revoked.

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use super::pb::etcdserverpb::{
    LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse,
    LeaseRevokeRequest, LeaseRevokeResponse, lease_client,
};
use super::{Error, Service};

/// Calls to etcd's lease service.
#[derive(Clone, Debug)]
pub struct LeaseClient {
    inner: lease_client::LeaseClient<Service>,
}

/// How a lease is granted.
#[derive(Clone, Copy, Debug, Default)]
pub struct LeaseGrantOptions {
    id: i64,
}

impl LeaseGrantOptions {
    /// etcd picks the lease's id.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lease's id is `id`.
    pub fn with_id(mut self, id: i64) -> Self {
        self.id = id;
        self
    }
}

impl LeaseClient {
    pub(super) fn new(service: Service) -> Self {
        LeaseClient {
            inner: lease_client::LeaseClient::new(service),
        }
    }

    /// A lease of `ttl` seconds (etcd may grant more).
    pub async fn grant(
        &mut self,
        ttl: i64,
        options: Option<LeaseGrantOptions>,
    ) -> Result<LeaseGrantResponse, Error> {
        let request = LeaseGrantRequest {
            ttl,
            id: options.unwrap_or_default().id,
        };
        Ok(self.inner.lease_grant(request).await?.into_inner())
    }

    /// Revokes `lease`: the keys bound to it are deleted.
    pub async fn revoke(&mut self, lease: i64) -> Result<LeaseRevokeResponse, Error> {
        let request = LeaseRevokeRequest { id: lease };
        Ok(self.inner.lease_revoke(request).await?.into_inner())
    }

    /// Opens a keep-alive stream for `lease`, sending a first keep-alive and reading its
    /// answer: [`Error::KeepAlive`] if etcd no longer knows the lease (it answers TTL 0).
    /// Then each [`LeaseKeeper::keep_alive`] is answered on the [`LeaseKeepAliveStream`].
    pub async fn keep_alive(
        &mut self,
        lease: i64,
    ) -> Result<(LeaseKeeper, LeaseKeepAliveStream), Error> {
        // Room for a few requests: the keeper sends one per interval and waits for its
        // answer, so more never queue.
        let (sender, requests) = mpsc::channel(4);
        let mut keeper = LeaseKeeper { lease, sender };
        keeper.keep_alive().await?;
        let mut responses = LeaseKeepAliveStream {
            inner: self
                .inner
                .lease_keep_alive(ReceiverStream::new(requests))
                .await?
                .into_inner(),
        };
        match responses.message().await? {
            Some(first) if first.ttl > 0 => Ok((keeper, responses)),
            Some(_) => Err(Error::KeepAlive(format!("lease {lease} not found"))),
            None => Err(Error::KeepAlive("the keep-alive stream ended".into())),
        }
    }
}

/// Sends the keep-alives of one lease's stream.
#[derive(Clone, Debug)]
pub struct LeaseKeeper {
    lease: i64,
    sender: mpsc::Sender<LeaseKeepAliveRequest>,
}

impl LeaseKeeper {
    /// The lease kept alive.
    pub fn id(&self) -> i64 {
        self.lease
    }

    /// Sends one keep-alive; its answer comes on the stream.
    pub async fn keep_alive(&mut self) -> Result<(), Error> {
        self.sender
            .send(LeaseKeepAliveRequest { id: self.lease })
            .await
            .map_err(|_| Error::KeepAlive("the keep-alive stream is closed".into()))
    }
}

/// The answers to one lease's keep-alives.
#[derive(Debug)]
pub struct LeaseKeepAliveStream {
    inner: Streaming<LeaseKeepAliveResponse>,
}

impl LeaseKeepAliveStream {
    /// The next answer; `None` once etcd ended the stream.
    pub async fn message(&mut self) -> Result<Option<LeaseKeepAliveResponse>, Error> {
        Ok(self.inner.message().await?)
    }
}

impl LeaseGrantResponse {
    /// The lease's id.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The TTL granted, in seconds.
    pub fn ttl(&self) -> i64 {
        self.ttl
    }
}

impl LeaseKeepAliveResponse {
    /// The lease's id.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The TTL the lease has again, in seconds; 0 when etcd no longer knows it.
    pub fn ttl(&self) -> i64 {
        self.ttl
    }
}
