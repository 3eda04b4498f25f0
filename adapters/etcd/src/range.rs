//! Reading every key under a prefix at one revision, page by page: the listings of the store
//! and of the watcher.

pub(crate) use crate::client::prefix_end;
use crate::client::{Client, Error as ClientError, GetOptions, KeyValue};

/// How many keys one page asks for: bounded pages keep each response well under gRPC's 4 MiB
/// message limit however large the cluster.
pub(crate) const PAGE: i64 = 1_000;

/// Every key under `prefix` at `revision` (0: the current one), in key order, and the
/// revision read at. Every page after the first is pinned at the first's revision, so the
/// whole listing is one snapshot (or fails, if etcd compacted that revision meanwhile).
pub(crate) async fn read_prefix(
    client: &Client,
    prefix: &[u8],
    mut revision: i64,
) -> Result<(Vec<KeyValue>, i64), ClientError> {
    let end = prefix_end(prefix);
    let mut kv = client.kv_client();
    let mut start = prefix.to_vec();
    let mut kvs = Vec::new();
    loop {
        let options = GetOptions::new()
            .with_range(end.clone())
            .with_limit(PAGE)
            .with_revision(revision);
        let mut response = kv.get(start.clone(), Some(options)).await?;
        if revision == 0 {
            revision = response.header().map_or(0, |h| h.revision());
            if revision == 0 {
                return Err(ClientError::Internal(
                    "etcd's answer had no header revision".into(),
                ));
            }
        }
        let more = response.more();
        let page = response.take_kvs();
        let Some(last) = page.last() else { break };
        start = last.key().to_vec();
        start.push(0);
        kvs.extend(page);
        if !more {
            break;
        }
    }
    Ok((kvs, revision))
}
