//! Checks of missing nodes and lists: a write to a missing node, the listing agreeing with
//! reads, rewriting the same list, and an empty list clearing.

use super::StoreHarness;
use super::cx::{Cx, answer};
use crate::conformance::report::Outcome;
use crate::domain::Domain;
use crate::traits::{NodeStatus, StoreError};
// Only the checks' docs name the trait (they cite its promises).
#[cfg(doc)]
use crate::traits::NodeStatusStore;

/// [`StoreError::NotFound`]: "The node does not exist (any more). Nothing was written." A
/// write does not create a node (the harness's agents do): checked for a node never added, and
/// for one removed after its revision was read; neither then reads or lists.
pub async fn write_to_missing_node_is_not_found<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "write_to_missing_node_is_not_found");
    cx.scoped(async {
        // A revision this store hands out, to write a node that has none.
        let other = cx.node().await?;
        let revision = cx.read_ok(&other, "just added").await?.revision;
        let never = cx.missing_node();
        let removed = cx.node().await?;
        let removed_rev = cx.read_ok(&removed, "just added").await?.revision;
        cx.remove(&removed).await?;
        for (node, revision, what) in [
            (&never, &revision, "never added"),
            (&removed, &removed_rev, "removed"),
        ] {
            let wrote = cx
                .write(node, &[cx.volume(Some("/dev/a"))], revision)
                .await?;
            if !matches!(wrote, Err(StoreError::NotFound { .. })) {
                return Err(cx.fail(
                    format_args!("a write to node {node:?}, {what}, to fail with NotFound"),
                    answer(&wrote),
                ));
            }
            let read = cx.read(node).await?;
            if !matches!(read, Err(StoreError::NotFound { .. })) {
                return Err(cx.fail(
                    format_args!("node {node:?}, {what}, to read as NotFound after a write to it"),
                    answer(&read),
                ));
            }
        }
        let listed = cx.list().await?;
        if let Some((node, _)) = listed.iter().find(|(n, _)| *n == never || *n == removed) {
            return Err(cx.fail(
                format_args!("node {node:?}, written to while missing, not to be listed"),
                "it listed",
            ));
        }
        Ok(())
    })
    .await
}

/// [`NodeStatusStore::list`]: "Every node's status, for recovery after a controller restart":
/// a recovering core takes each listed status and revision as what the store holds, so the
/// listing shows each node once, with the status and revision a read returns. Foreign nodes
/// (a shared store) are ignored.
pub async fn list_agrees_with_read<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "list_agrees_with_read");
    cx.scoped(async {
        let written = cx.node().await?;
        let fresh = cx.node().await?;
        let rev = cx.read_ok(&written, "just added").await?.revision;
        cx.write_ok(
            &written,
            &[cx.volume(Some("/dev/a")), cx.volume(None)],
            &rev,
            "the revision just read",
        )
        .await?;
        let listed = cx.list().await?;
        for node in [&written, &fresh] {
            let mine: Vec<&NodeStatus<D>> = listed
                .iter()
                .filter(|(n, _)| n == node)
                .map(|(_, status)| status)
                .collect();
            let read = cx.read_ok(node, "after the listing").await?;
            match mine[..] {
                [status] if *status == read => {}
                [status] => {
                    return Err(cx.fail(
                        format_args!("list to show node {node:?} as a read does: {read:?}"),
                        format_args!("{status:?}"),
                    ));
                }
                _ => {
                    return Err(cx.fail(
                        format_args!("list to show node {node:?} once"),
                        format_args!("it {} times", mine.len()),
                    ));
                }
            }
        }
        Ok(())
    })
    .await
}

/// [`NodeStatusStore::write`] returns "the new revision" whatever the list: writing the list
/// the store already holds succeeds, and what it returns is the node's current revision (a
/// read agrees, and a write at it succeeds). Whether the revision moves is up to the store:
/// Kubernetes does not bump `resourceVersion` for an update that changes nothing.
pub async fn rewriting_same_list_returns_current_revision<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "rewriting_same_list_returns_current_revision");
    cx.scoped(async {
        let node = cx.node().await?;
        let rev = cx.read_ok(&node, "just added").await?.revision;
        let attached = [cx.volume(Some("/dev/a"))];
        let rev = cx
            .write_ok(&node, &attached, &rev, "the revision just read")
            .await?;
        let again = cx
            .write_ok(
                &node,
                &attached,
                &rev,
                "the same list again, at the revision it returned",
            )
            .await?;
        cx.expect_holds(
            &node,
            &attached,
            &again,
            "after writing the same list again",
        )
        .await?;
        let last = cx
            .write_ok(
                &node,
                &[],
                &again,
                "the revision the repeated write returned",
            )
            .await?;
        cx.expect_holds(&node, &[], &last, "after a write at that revision")
            .await
    })
    .await
}

/// [`NodeStatusStore::write`] replaces the attached list with the one given, the empty one
/// included: the core's last write for a node whose volumes all left (before it detaches them,
/// C5) is an empty list.
pub async fn empty_list_write_clears<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "empty_list_write_clears");
    cx.scoped(async {
        let node = cx.node().await?;
        let rev = cx.read_ok(&node, "just added").await?.revision;
        let rev = cx
            .write_ok(
                &node,
                &[cx.volume(Some("/dev/a")), cx.volume(Some("/dev/b"))],
                &rev,
                "the revision just read",
            )
            .await?;
        let rev = cx
            .write_ok(&node, &[], &rev, "the revision of the previous write")
            .await?;
        cx.expect_holds(&node, &[], &rev, "after writing an empty list")
            .await
    })
    .await
}
