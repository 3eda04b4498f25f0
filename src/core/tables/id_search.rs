//! Finding a name in a node's short sorted list without reading the names it passes.
//!
//! A node's lists (its attachments, the volumes the store holds for it) are sorted by volume,
//! and a binary search compares by order. For `Name` ids an order compare reads both names'
//! blocks: at a million attachments the list's names are cold, and each of a search's five
//! steps waited for a cache miss. With `Name` ids those compares were a sixth of the core's
//! time for a move at a million (measured with perf). Two `Name`s are equal exactly when they
//! are the same pointer, so a walk along a short list that tests equality alone reads no block
//! at all, and its thirty pointer compares cost less than the five order compares.
//!
//! Every other id is searched by order as before: a `String`'s equality reads its text as its
//! order does, and an integer's order compare costs what its equality does. As in
//! [`id_sort`](crate::core::tables::id_sort), `Name` is picked out by its type, since `Id` is a blanket impl.

use std::any::TypeId;

use crate::domain::name::Name;

/// Lists longer than this are searched by order whatever the ids: a node's list is rarely
/// longer (Kubernetes' own limits are 16 to 128 volumes a node).
const WALK_UP_TO: usize = 64;

/// Whether two ids of type `V` are told equal without reading what they point to (`Name`).
pub(crate) fn equal_by_identity<V: 'static>() -> bool {
    TypeId::of::<V>() == TypeId::of::<Name>()
}

/// Whether `list` is walked by equality for ids of type `V`.
fn walked<V: 'static>(len: usize) -> bool {
    equal_by_identity::<V>() && len <= WALK_UP_TO
}

/// Finds `target` in `list`, sorted by `key`, as `binary_search_by` does: where it is, or where
/// it would go. A list of `Name`s is walked by equality first; only an absent name is then
/// placed by order, so a caller that mostly adds ids should search by order itself.
pub(crate) fn find_by<T, V: Ord + 'static>(
    list: &[T],
    key: impl Fn(&T) -> &V,
    target: &V,
) -> Result<usize, usize> {
    if walked::<V>(list.len())
        && let Some(at) = list.iter().position(|item| key(item) == target)
    {
        return Ok(at);
    }
    list.binary_search_by(|item| key(item).cmp(target))
}

/// Whether `target` is in `list`, sorted. A list of `Name`s is walked by equality alone.
pub(crate) fn contains<V: Ord + 'static>(list: &[V], target: &V) -> bool {
    if walked::<V>(list.len()) {
        return list.contains(target);
    }
    list.binary_search(target).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(texts: &[String]) -> Vec<Name> {
        let mut list: Vec<Name> = texts.iter().map(Name::from).collect();
        list.sort();
        list.dedup();
        list
    }

    proptest! {
        /// Walked or searched, every id is found where a binary search finds it, and an
        /// absent one is placed where it would go.
        #[test]
        fn a_walk_finds_what_a_search_by_order_finds(
            texts in proptest::collection::vec("[a-d]{1,3}", 0..80),
            target in "[a-d]{1,3}",
        ) {
            let list = names(&texts);
            let target = Name::from(target.as_str());
            let by_order = list.binary_search(&target);
            prop_assert_eq!(find_by(&list, |n| n, &target), by_order);
            prop_assert_eq!(contains(&list, &target), by_order.is_ok());
            let strings: Vec<String> = list.iter().map(|n| n.to_string()).collect();
            let text = target.to_string();
            prop_assert_eq!(find_by(&strings, |s| s, &text), by_order);
            prop_assert_eq!(contains(&strings, &text), by_order.is_ok());
        }
    }

    #[test]
    fn only_short_lists_of_names_are_walked() {
        assert!(walked::<Name>(WALK_UP_TO));
        assert!(!walked::<Name>(WALK_UP_TO + 1));
        assert!(!walked::<String>(3));
        assert!(!walked::<u32>(3));
    }
}
