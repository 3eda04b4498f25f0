//! Elections: etcd's `v3election` service (campaign, leader, resign).

use super::pb::mvccpb::KeyValue;
use super::pb::v3electionpb::{
    CampaignRequest, CampaignResponse, LeaderKey, LeaderRequest, LeaderResponse, ResignRequest,
    ResignResponse, election_client,
};
use super::{Error, Service};

/// Calls to etcd's election service.
#[derive(Clone, Debug)]
pub struct ElectionClient {
    inner: election_client::ElectionClient<Service>,
}

/// Which leadership a resign gives up.
#[derive(Clone, Debug, Default)]
pub struct ResignOptions {
    leader: Option<LeaderKey>,
}

impl ResignOptions {
    /// No leader key yet: give one with [`with_leader`](Self::with_leader).
    pub fn new() -> Self {
        Self::default()
    }

    /// The leader key a campaign returned.
    pub fn with_leader(mut self, leader: LeaderKey) -> Self {
        self.leader = Some(leader);
        self
    }
}

impl ElectionClient {
    pub(super) fn new(service: Service) -> Self {
        ElectionClient {
            inner: election_client::ElectionClient::new(service),
        }
    }

    /// Campaigns in election `name` with `value`, under `lease`: answers once elected, which
    /// may be never (bound the call with a deadline). etcd withdraws the campaign when the
    /// call is dropped.
    pub async fn campaign(
        &mut self,
        name: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        lease: i64,
    ) -> Result<CampaignResponse, Error> {
        let request = CampaignRequest {
            name: name.into(),
            lease,
            value: value.into(),
        };
        Ok(self.inner.campaign(request).await?.into_inner())
    }

    /// The current leader of election `name`; etcd answers an error ("election: no leader")
    /// when there is none.
    pub async fn leader(&mut self, name: impl Into<Vec<u8>>) -> Result<LeaderResponse, Error> {
        let request = LeaderRequest { name: name.into() };
        Ok(self.inner.leader(request).await?.into_inner())
    }

    /// Gives up the leadership of `options`' leader key: the key is deleted.
    pub async fn resign(
        &mut self,
        options: Option<ResignOptions>,
    ) -> Result<ResignResponse, Error> {
        let request = ResignRequest {
            leader: options.and_then(|o| o.leader),
        };
        Ok(self.inner.resign(request).await?.into_inner())
    }
}

impl CampaignResponse {
    /// The leader key of the won election, taken out of the response.
    pub fn take_leader(&mut self) -> Option<LeaderKey> {
        self.leader.take()
    }
}

impl LeaderKey {
    /// The election's name.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The leader's key: the election's name, a slash and the lease.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The leader key's create revision.
    pub fn rev(&self) -> i64 {
        self.rev
    }

    /// The lease the leader key is bound to.
    pub fn lease(&self) -> i64 {
        self.lease
    }
}

impl LeaderResponse {
    /// The leader's key and value (the value it campaigned with).
    pub fn kv(&self) -> Option<&KeyValue> {
        self.kv.as_ref()
    }
}
