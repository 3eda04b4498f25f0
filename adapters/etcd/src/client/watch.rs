//! Watches: a stream of the changes to a key or a range from a revision on.

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use super::pb::etcdserverpb::{
    ResponseHeader, WatchCreateRequest, WatchRequest, WatchResponse, watch_client, watch_request,
};
use super::pb::mvccpb::event::EventType;
use super::pb::mvccpb::{Event, KeyValue};
use super::{Error, Service, prefix_end};

/// Calls to etcd's watch service.
#[derive(Clone, Debug)]
pub struct WatchClient {
    inner: watch_client::WatchClient<Service>,
}

/// What a watch sees.
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    prefix: bool,
    prev_kv: bool,
    start_revision: i64,
}

impl WatchOptions {
    /// The key alone, from the next revision, without previous values.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every key starting with the key.
    pub fn with_prefix(mut self) -> Self {
        self.prefix = true;
        self
    }

    /// Each event carries the key's value before it.
    pub fn with_prev_key(mut self) -> Self {
        self.prev_kv = true;
        self
    }

    /// From `revision` on (0: the next one); a compacted revision cancels the watch with the
    /// [`compact_revision`](WatchResponse::compact_revision).
    pub fn with_start_revision(mut self, revision: i64) -> Self {
        self.start_revision = revision;
        self
    }
}

impl WatchClient {
    pub(super) fn new(service: Service) -> Self {
        WatchClient {
            inner: watch_client::WatchClient::new(service),
        }
    }

    /// Watches `key` (or the range `options` make of it). etcd's first answer says the
    /// watch was [`created`](WatchResponse::created); the changes follow.
    pub async fn watch(
        &mut self,
        key: impl Into<Vec<u8>>,
        options: Option<WatchOptions>,
    ) -> Result<WatchStream, Error> {
        let options = options.unwrap_or_default();
        let key = key.into();
        let create = WatchCreateRequest {
            range_end: if options.prefix {
                prefix_end(&key)
            } else {
                Vec::new()
            },
            key,
            start_revision: options.start_revision,
            prev_kv: options.prev_kv,
            ..WatchCreateRequest::default()
        };
        // The request stream stays open as long as the watch: etcd ends a watch stream whose
        // requests end. One request is ever sent on it.
        let (sender, requests) = mpsc::channel(1);
        sender
            .send(WatchRequest {
                request_union: Some(watch_request::RequestUnion::CreateRequest(create)),
            })
            .await
            .map_err(|_| Error::Watch("the request stream closed".into()))?;
        let responses = self
            .inner
            .watch(ReceiverStream::new(requests))
            .await?
            .into_inner();
        Ok(WatchStream {
            _requests: sender,
            responses,
        })
    }
}

/// One watch's answers.
#[derive(Debug)]
pub struct WatchStream {
    _requests: mpsc::Sender<WatchRequest>,
    responses: Streaming<WatchResponse>,
}

impl WatchStream {
    /// The next answer; `None` once etcd ended the stream.
    pub async fn message(&mut self) -> Result<Option<WatchResponse>, Error> {
        Ok(self.responses.message().await?)
    }
}

impl WatchResponse {
    /// The header: the revision etcd had when it sent the answer.
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }

    /// Whether this answer says the watch was created.
    pub fn created(&self) -> bool {
        self.created
    }

    /// Whether etcd canceled the watch (see [`cancel_reason`](Self::cancel_reason)).
    pub fn canceled(&self) -> bool {
        self.canceled
    }

    /// Why etcd canceled the watch.
    pub fn cancel_reason(&self) -> &str {
        &self.cancel_reason
    }

    /// The revision etcd compacted up to, when the watch asked for an older one (it is then
    /// canceled); 0 otherwise.
    pub fn compact_revision(&self) -> i64 {
        self.compact_revision
    }

    /// The changes, in revision order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }
}

impl Event {
    /// A put or a delete.
    pub fn event_type(&self) -> EventType {
        self.r#type()
    }

    /// The key after the change (a delete's has only the key and the revision).
    pub fn kv(&self) -> Option<&KeyValue> {
        self.kv.as_ref()
    }

    /// The key before the change, when the watch asked for it.
    pub fn prev_kv(&self) -> Option<&KeyValue> {
        self.prev_kv.as_ref()
    }
}
