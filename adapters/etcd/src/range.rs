//! Reading every key under a prefix at one revision, page by page: the listings of the store
//! and of the watcher.

use etcd_client::{Client, Error as ClientError, GetOptions, KeyValue};

/// How many keys one page asks for: bounded pages keep each response well under gRPC's 4 MiB
/// message limit however large the cluster.
pub(crate) const PAGE: i64 = 1_000;

/// The end of the range of keys starting with `prefix`.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_first_key_after_the_prefix() {
        assert_eq!(prefix_end(b"/p/a/"), b"/p/a0");
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b");
        assert_eq!(prefix_end(&[0xff]), [0]);
    }
}
