//! The key-value store: gets, puts, deletes, transactions, compaction.

use super::pb::etcdserverpb::{
    self as pb, CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse,
    PutRequest, PutResponse, RangeRequest, RangeResponse, RequestOp, ResponseHeader, ResponseOp,
    TxnRequest, TxnResponse, compare, kv_client, request_op, response_op,
};
use super::pb::mvccpb::KeyValue;
use super::{Error, Service, prefix_end};

/// Calls to etcd's key-value service.
#[derive(Clone, Debug)]
pub struct KvClient {
    inner: kv_client::KvClient<Service>,
}

impl KvClient {
    pub(super) fn new(service: Service) -> Self {
        KvClient {
            inner: kv_client::KvClient::new(service),
        }
    }

    /// The key `key` (or the range `options` make of it).
    pub async fn get(
        &mut self,
        key: impl Into<Vec<u8>>,
        options: Option<GetOptions>,
    ) -> Result<RangeResponse, Error> {
        let request = options.unwrap_or_default().request(key.into());
        Ok(self.inner.range(request).await?.into_inner())
    }

    /// Puts `value` at `key`.
    pub async fn put(
        &mut self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        options: Option<PutOptions>,
    ) -> Result<PutResponse, Error> {
        let request = options
            .unwrap_or_default()
            .request(key.into(), value.into());
        Ok(self.inner.put(request).await?.into_inner())
    }

    /// Deletes `key` (or the range `options` make of it).
    pub async fn delete(
        &mut self,
        key: impl Into<Vec<u8>>,
        options: Option<DeleteOptions>,
    ) -> Result<DeleteRangeResponse, Error> {
        let request = options.unwrap_or_default().request(key.into());
        Ok(self.inner.delete_range(request).await?.into_inner())
    }

    /// Runs `txn` atomically.
    pub async fn txn(&mut self, txn: Txn) -> Result<TxnResponse, Error> {
        Ok(self.inner.txn(txn.request).await?.into_inner())
    }

    /// Compacts the history up to `revision`.
    pub async fn compact(
        &mut self,
        revision: i64,
        options: Option<CompactionOptions>,
    ) -> Result<CompactionResponse, Error> {
        let request = CompactionRequest {
            revision,
            physical: options.is_some_and(|o| o.physical),
        };
        Ok(self.inner.compact(request).await?.into_inner())
    }
}

/// Which keys a get or a delete reaches, beyond the key itself.
#[derive(Clone, Debug, Default)]
enum Range {
    /// The key alone.
    #[default]
    Key,
    /// Every key starting with the key.
    Prefix,
    /// From the key up to (not including) this one.
    End(Vec<u8>),
}

impl Range {
    fn end(self, key: &[u8]) -> Vec<u8> {
        match self {
            Range::Key => Vec::new(),
            Range::Prefix => prefix_end(key),
            Range::End(end) => end,
        }
    }
}

/// What a get reads.
#[derive(Clone, Debug, Default)]
pub struct GetOptions {
    range: Range,
    limit: i64,
    revision: i64,
    keys_only: bool,
}

impl GetOptions {
    /// The key alone, at the current revision.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every key starting with the key.
    pub fn with_prefix(mut self) -> Self {
        self.range = Range::Prefix;
        self
    }

    /// Every key from the key up to (not including) `end`.
    pub fn with_range(mut self, end: impl Into<Vec<u8>>) -> Self {
        self.range = Range::End(end.into());
        self
    }

    /// At most `limit` keys (0: no limit); the response says whether there are
    /// [`more`](RangeResponse::more).
    pub fn with_limit(mut self, limit: i64) -> Self {
        self.limit = limit;
        self
    }

    /// At `revision` (0: the current one).
    pub fn with_revision(mut self, revision: i64) -> Self {
        self.revision = revision;
        self
    }

    /// Keys without their values.
    pub fn with_keys_only(mut self) -> Self {
        self.keys_only = true;
        self
    }

    fn request(self, key: Vec<u8>) -> RangeRequest {
        RangeRequest {
            range_end: self.range.end(&key),
            key,
            limit: self.limit,
            revision: self.revision,
            keys_only: self.keys_only,
            ..RangeRequest::default()
        }
    }
}

/// How a put writes.
#[derive(Clone, Debug, Default)]
pub struct PutOptions {
    lease: i64,
}

impl PutOptions {
    /// A put with no lease.
    pub fn new() -> Self {
        Self::default()
    }

    /// The key is bound to `lease`: deleted when it expires.
    pub fn with_lease(mut self, lease: i64) -> Self {
        self.lease = lease;
        self
    }

    fn request(self, key: Vec<u8>, value: Vec<u8>) -> PutRequest {
        PutRequest {
            key,
            value,
            lease: self.lease,
            ..PutRequest::default()
        }
    }
}

/// What a delete removes.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    range: Range,
}

impl DeleteOptions {
    /// The key alone.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every key starting with the key.
    pub fn with_prefix(mut self) -> Self {
        self.range = Range::Prefix;
        self
    }

    fn request(self, key: Vec<u8>) -> DeleteRangeRequest {
        DeleteRangeRequest {
            range_end: self.range.end(&key),
            key,
            prev_kv: false,
        }
    }
}

/// How a compaction works.
#[derive(Clone, Copy, Debug, Default)]
pub struct CompactionOptions {
    physical: bool,
}

impl CompactionOptions {
    /// A logical compaction: the call returns before the old revisions are removed.
    pub fn new() -> Self {
        Self::default()
    }

    /// The call returns once the old revisions are removed from the backend.
    pub fn with_physical(mut self) -> Self {
        self.physical = true;
        self
    }
}

/// A transaction: if every comparison holds, the `and_then` operations, else the `or_else`
/// ones, all at one revision.
#[derive(Clone, Debug, Default)]
pub struct Txn {
    request: TxnRequest,
}

impl Txn {
    /// An empty transaction.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds comparisons.
    pub fn when(mut self, compares: impl IntoIterator<Item = Compare>) -> Self {
        self.request
            .compare
            .extend(compares.into_iter().map(|c| c.0));
        self
    }

    /// Adds operations run when every comparison holds.
    pub fn and_then(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Self {
        self.request.success.extend(ops.into_iter().map(|op| op.0));
        self
    }

    /// Adds operations run when a comparison fails.
    pub fn or_else(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Self {
        self.request.failure.extend(ops.into_iter().map(|op| op.0));
        self
    }
}

/// An operation in a transaction.
#[derive(Clone, Debug)]
pub struct TxnOp(RequestOp);

impl TxnOp {
    /// A get.
    pub fn get(key: impl Into<Vec<u8>>, options: Option<GetOptions>) -> Self {
        let request = options.unwrap_or_default().request(key.into());
        TxnOp::of(request_op::Request::RequestRange(request))
    }

    /// A put.
    pub fn put(
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        options: Option<PutOptions>,
    ) -> Self {
        let request = options
            .unwrap_or_default()
            .request(key.into(), value.into());
        TxnOp::of(request_op::Request::RequestPut(request))
    }

    /// A delete.
    pub fn delete(key: impl Into<Vec<u8>>, options: Option<DeleteOptions>) -> Self {
        let request = options.unwrap_or_default().request(key.into());
        TxnOp::of(request_op::Request::RequestDeleteRange(request))
    }

    fn of(request: request_op::Request) -> Self {
        TxnOp(RequestOp {
            request: Some(request),
        })
    }
}

/// A comparison in a transaction.
#[derive(Clone, Debug)]
pub struct Compare(pb::Compare);

/// How a [`Compare`] compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareOp {
    /// Equal.
    Equal,
    /// Greater than the operand.
    Greater,
    /// Less than the operand.
    Less,
    /// Not equal.
    NotEqual,
}

impl Compare {
    /// The key's version (0: it does not exist) against `version`.
    pub fn version(key: impl Into<Vec<u8>>, op: CompareOp, version: i64) -> Self {
        Compare::of(key, op, compare::TargetUnion::Version(version))
    }

    /// The key's create revision (0: it does not exist) against `revision`.
    pub fn create_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: i64) -> Self {
        Compare::of(key, op, compare::TargetUnion::CreateRevision(revision))
    }

    /// The key's last modification revision (0: it does not exist) against `revision`.
    pub fn mod_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: i64) -> Self {
        Compare::of(key, op, compare::TargetUnion::ModRevision(revision))
    }

    /// The key's value against `value`.
    pub fn value(key: impl Into<Vec<u8>>, op: CompareOp, value: impl Into<Vec<u8>>) -> Self {
        Compare::of(key, op, compare::TargetUnion::Value(value.into()))
    }

    fn of(key: impl Into<Vec<u8>>, op: CompareOp, target: compare::TargetUnion) -> Self {
        let result = match op {
            CompareOp::Equal => compare::CompareResult::Equal,
            CompareOp::Greater => compare::CompareResult::Greater,
            CompareOp::Less => compare::CompareResult::Less,
            CompareOp::NotEqual => compare::CompareResult::NotEqual,
        };
        let kind = match target {
            compare::TargetUnion::Version(_) => compare::CompareTarget::Version,
            compare::TargetUnion::CreateRevision(_) => compare::CompareTarget::Create,
            compare::TargetUnion::ModRevision(_) => compare::CompareTarget::Mod,
            compare::TargetUnion::Value(_) => compare::CompareTarget::Value,
            compare::TargetUnion::Lease(_) => compare::CompareTarget::Lease,
        };
        Compare(pb::Compare {
            result: result as i32,
            target: kind as i32,
            key: key.into(),
            range_end: Vec::new(),
            target_union: Some(target),
        })
    }
}

/// The answer to one operation of a transaction.
#[derive(Clone, Debug)]
pub enum TxnOpResponse {
    /// A get's.
    Get(RangeResponse),
    /// A put's.
    Put(PutResponse),
    /// A delete's.
    Delete(DeleteRangeResponse),
    /// A nested transaction's.
    Txn(TxnResponse),
}

impl TxnResponse {
    /// Whether every comparison held (the `and_then` branch ran).
    pub fn succeeded(&self) -> bool {
        self.succeeded
    }

    /// The header: the revision the transaction ran at.
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }

    /// The answers of the branch that ran, in order (an answer etcd left empty is skipped).
    pub fn op_responses(&self) -> Vec<TxnOpResponse> {
        self.responses
            .iter()
            .filter_map(|ResponseOp { response }| {
                Some(match response.clone()? {
                    response_op::Response::ResponseRange(r) => TxnOpResponse::Get(r),
                    response_op::Response::ResponsePut(r) => TxnOpResponse::Put(r),
                    response_op::Response::ResponseDeleteRange(r) => TxnOpResponse::Delete(r),
                    response_op::Response::ResponseTxn(r) => TxnOpResponse::Txn(r),
                })
            })
            .collect()
    }
}

impl RangeResponse {
    /// The header: the revision read at.
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }

    /// The keys read, in key order.
    pub fn kvs(&self) -> &[KeyValue] {
        &self.kvs
    }

    /// The keys read, taken out of the response.
    pub fn take_kvs(&mut self) -> Vec<KeyValue> {
        std::mem::take(&mut self.kvs)
    }

    /// Whether a limit left keys of the range out.
    pub fn more(&self) -> bool {
        self.more
    }

    /// How many keys the range holds.
    pub fn count(&self) -> i64 {
        self.count
    }
}

impl PutResponse {
    /// The header: the revision of the put.
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }
}

impl DeleteRangeResponse {
    /// The header: the revision of the delete.
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }

    /// How many keys were deleted.
    pub fn deleted(&self) -> i64 {
        self.deleted
    }
}

impl ResponseHeader {
    /// The store's revision when the call was answered.
    pub fn revision(&self) -> i64 {
        self.revision
    }
}

impl KeyValue {
    /// The key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The value.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The revision that created the key (since it last did not exist).
    pub fn create_revision(&self) -> i64 {
        self.create_revision
    }

    /// The revision of the key's last modification.
    pub fn mod_revision(&self) -> i64 {
        self.mod_revision
    }

    /// How many times the key was written since it was created.
    pub fn version(&self) -> i64 {
        self.version
    }

    /// The lease the key is bound to (0: none).
    pub fn lease(&self) -> i64 {
        self.lease
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_get_ranges_to_the_prefix_end() {
        let request = GetOptions::new()
            .with_prefix()
            .with_limit(3)
            .request(b"/p/".to_vec());
        assert_eq!(request.key, b"/p/");
        assert_eq!(request.range_end, b"/p0");
        assert_eq!(request.limit, 3);
        assert!(
            GetOptions::new()
                .request(b"k".to_vec())
                .range_end
                .is_empty()
        );
    }

    #[test]
    fn a_compare_names_its_target() {
        let c = Compare::create_revision("k", CompareOp::Equal, 7).0;
        assert_eq!(c.target, compare::CompareTarget::Create as i32);
        assert_eq!(c.result, compare::CompareResult::Equal as i32);
        assert_eq!(
            c.target_union,
            Some(compare::TargetUnion::CreateRevision(7))
        );
    }
}
