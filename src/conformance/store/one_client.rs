//! Checks through one client: a missing node, a new node's list, stable reads, writes at the
//! current revision read back exactly, and a stale write's conflict naming the current revision.

use super::StoreHarness;
use super::cx::{Cx, answer, list};
use crate::conformance::report::Outcome;
use crate::core::calls::reported_volumes::ReportedVolume;
use crate::domain::Domain;
use crate::traits::StoreError;
// Only the checks' docs name these (they cite the trait's promises).
#[cfg(doc)]
use crate::traits::{NodeStatusStore, Revision};

/// [`StoreError::NotFound`]: "The node does not exist (any more)"; docs/embedding.md, "Writing
/// a store": "no such node: `StoreError::not_found()`". Checked for a node never added and for
/// one added, read and removed.
pub async fn read_of_missing_node_is_not_found<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "read_of_missing_node_is_not_found");
    cx.scoped(async {
        let never = cx.missing_node();
        let read = cx.read(&never).await?;
        if !matches!(read, Err(StoreError::NotFound { .. })) {
            return Err(cx.fail(
                format_args!("a read of node {never:?}, never added, to fail with NotFound"),
                answer(&read),
            ));
        }
        let removed = cx.node().await?;
        cx.read_ok(&removed, "just added").await?;
        cx.remove(&removed).await?;
        let read = cx.read(&removed).await?;
        if !matches!(read, Err(StoreError::NotFound { .. })) {
            return Err(cx.fail(
                format_args!("a read of node {removed:?}, removed, to fail with NotFound"),
                answer(&read),
            ));
        }
        Ok(())
    })
    .await
}

/// The controller is the only writer of a node's attached list
/// ([`NodeStatusStore::write`] "replaces `node`'s attached volumes"; the agents write the
/// other facts), so a node it never wrote to lists nothing: a store that made up volumes would
/// have a new controller take them for attached.
pub async fn new_node_lists_nothing<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "new_node_lists_nothing");
    cx.scoped(async {
        let node = cx.node().await?;
        let first = cx.read_ok(&node, "just added").await?;
        if !first.attached.is_empty() {
            return Err(cx.fail(
                format_args!("the first read of node {node:?} to list no volume"),
                list(&first.attached),
            ));
        }
        Ok(())
    })
    .await
}

/// [`Revision`]: "an opaque token the store hands out with a read and takes back with a
/// write", compared for equality only; a writer learns it lost a race when the revision "is no
/// longer the node's current one". So with nothing written, the current revision stays what
/// it was: a store whose revision changed on every read would fail every write with Conflict.
/// Checked on a new node and after a write.
pub async fn reads_are_stable<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "reads_are_stable");
    cx.scoped(async {
        let node = cx.node().await?;
        let mut written = false;
        loop {
            let when = if written {
                "after a write"
            } else {
                "of a new node"
            };
            let first = cx.read_ok(&node, when).await?;
            let second = cx.read_ok(&node, when).await?;
            if first != second {
                return Err(cx.fail(
                    format_args!(
                        "two reads {when} with nothing in between to return the same status"
                    ),
                    format_args!("{first:?}, then {second:?}"),
                ));
            }
            if written {
                return Ok(());
            }
            cx.write_ok(
                &node,
                &[cx.volume(Some("/dev/a"))],
                &first.revision,
                "after two reads",
            )
            .await?;
            written = true;
        }
    })
    .await
}

/// [`NodeStatusStore::write`]: "Replaces `node`'s attached volumes if its revision is still
/// `expected`, returning the new revision". The new revision differs from the old one (a
/// writer still holding the old one must now lose its race, [`Revision`]), and it is the
/// node's current one: a read returns it.
pub async fn write_at_current_revision_succeeds<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "write_at_current_revision_succeeds");
    cx.scoped(async {
        let node = cx.node().await?;
        let before = cx.read_ok(&node, "just added").await?;
        let attached = [cx.volume(Some("/dev/a"))];
        let new = cx
            .write_ok(&node, &attached, &before.revision, "the revision just read")
            .await?;
        if new == before.revision {
            return Err(cx.fail(
                format_args!(
                    "the write's revision to differ from the one written against ({})",
                    before.revision
                ),
                format_args!("the same revision {new}"),
            ));
        }
        cx.expect_holds(&node, &attached, &new, "after the write")
            .await
    })
    .await
}

/// [`NodeStatusStore::write`] replaces the attached list with `attached`, and
/// [`ReportedVolume::device`] is "where it shows up on the node, as the backend reported":
/// a read gives back the same volumes in the same order with the same device paths, a missing
/// one included; a second write with other paths replaces them. (The core sorts what it reads,
/// so a store that only reordered would not mislead it, but the docs promise the list as
/// written, and node agents read it too.)
pub async fn written_list_reads_back_exactly<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "written_list_reads_back_exactly");
    cx.scoped(async {
        let node = cx.node().await?;
        let before = cx.read_ok(&node, "just added").await?;
        let mut volumes = [cx.volume(None), cx.volume(None), cx.volume(None)];
        volumes.sort_by(|a, b| a.volume.cmp(&b.volume));
        // A write hands the store a list in volume order (`ReportedVolumes`): a store that
        // reorders it, or loses a path, shows here.
        let [low, mid, high] = volumes;
        let first = vec![
            ReportedVolume {
                device: None,
                ..low.clone()
            },
            ReportedVolume {
                device: Some("/dev/disk/b".into()),
                ..mid.clone()
            },
            ReportedVolume {
                device: Some("/dev/disk/c".into()),
                ..high.clone()
            },
        ];
        let rev = cx
            .write_ok(&node, &first, &before.revision, "the revision just read")
            .await?;
        cx.expect_holds(&node, &first, &rev, "after the write")
            .await?;
        let second = vec![
            ReportedVolume {
                device: Some("/dev/disk/a2".into()),
                ..low
            },
            ReportedVolume {
                device: None,
                ..mid
            },
            ReportedVolume {
                device: Some("/dev/disk/c2".into()),
                ..high
            },
        ];
        let rev = cx
            .write_ok(&node, &second, &rev, "the revision of the previous write")
            .await?;
        cx.expect_holds(&node, &second, &rev, "after a second write")
            .await
    })
    .await
}

/// [`NodeStatusStore::write`]: if the revision is no longer `expected`, it "fails with
/// [`StoreError::Conflict`] and changes nothing"; [`StoreError::Conflict`]: "Nothing was
/// written". The store's whole point ([`NodeStatusStore`]): a writer with a stale view must
/// never erase another's volumes.
pub async fn stale_write_conflicts_and_changes_nothing<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "stale_write_conflicts_and_changes_nothing");
    cx.scoped(async {
        let node = cx.node().await?;
        let stale = cx.read_ok(&node, "just added").await?.revision;
        let first = [cx.volume(Some("/dev/a"))];
        let current = cx
            .write_ok(&node, &first, &stale, "the revision just read")
            .await?;
        let second = [cx.volume(Some("/dev/b"))];
        let lost = cx.write(&node, &second, &stale).await?;
        if !matches!(lost, Err(StoreError::Conflict { .. })) {
            return Err(cx.fail(
                format_args!(
                    "a write at revision {stale}, replaced since by {current}, to fail with Conflict"
                ),
                answer(&lost),
            ));
        }
        cx.expect_holds(&node, &first, &current, "after the conflicting write")
            .await
    })
    .await
}

/// [`StoreError::Conflict`]'s `current`: "The revision the store holds now, when the store
/// says". A store may leave it `None` (Kubernetes does); one that names a revision names the
/// one a read returns, since the core may write against it.
pub async fn conflict_names_the_current_revision<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "conflict_names_the_current_revision");
    cx.scoped(async {
        let node = cx.node().await?;
        let stale = cx.read_ok(&node, "just added").await?.revision;
        cx.write_ok(
            &node,
            &[cx.volume(Some("/dev/a"))],
            &stale,
            "the revision just read",
        )
        .await?;
        let lost = cx.write(&node, &[], &stale).await?;
        let current = match lost {
            Err(StoreError::Conflict { current, .. }) => current,
            other => {
                return Err(cx.fail(
                    format_args!("a write at the replaced revision {stale} to fail with Conflict"),
                    answer(&other),
                ));
            }
        };
        let Some(current) = current else {
            return Ok(());
        };
        let read = cx.read_ok(&node, "after the conflict").await?;
        if read.revision != current {
            return Err(cx.fail(
                format_args!(
                    "the Conflict's current revision to be what a read returns ({})",
                    read.revision
                ),
                format_args!("Conflict with current revision {current}"),
            ));
        }
        Ok(())
    })
    .await
}

/// [`NodeStatusStore::write`] is a compare-and-set: of two writes at the same revision, run
/// concurrently (`tokio::join!`), one lands and the other fails with
/// [`StoreError::Conflict`]; a read then shows the winner's list at the winner's revision.
/// This is the race the store exists for ([`NodeStatusStore`]: two writers "can never silently
/// erase each other's volumes").
pub async fn concurrent_writers_one_wins<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "concurrent_writers_one_wins");
    cx.scoped(async {
        let node = cx.node().await?;
        let base = cx.read_ok(&node, "just added").await?.revision;
        let a = [cx.volume(Some("/dev/a"))];
        let b = [cx.volume(Some("/dev/b"))];
        let (wrote_a, wrote_b) = tokio::join!(cx.write(&node, &a, &base), cx.write(&node, &b, &base));
        let (wrote_a, wrote_b) = (wrote_a?, wrote_b?);
        let (winner, revision) = match (&wrote_a, &wrote_b) {
            (Ok(rev), Err(StoreError::Conflict { .. })) => (&a, rev),
            (Err(StoreError::Conflict { .. }), Ok(rev)) => (&b, rev),
            _ => {
                return Err(cx.fail(
                    format_args!(
                        "of two concurrent writes at revision {base}, one to succeed and the other to fail with Conflict"
                    ),
                    format_args!(
                        "writing {}: {}; writing {}: {}",
                        list(&a),
                        answer(&wrote_a),
                        list(&b),
                        answer(&wrote_b)
                    ),
                ));
            }
        };
        cx.expect_holds(&node, winner, revision, "after the race").await
    })
    .await
}
