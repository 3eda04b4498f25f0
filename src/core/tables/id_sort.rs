//! Sorting a long list of names by their first bytes, kept side by side.
//!
//! A restart's inputs mark a million volumes, and the marks sort them so that every run plans
//! in the same order. Ids named by text (`Name`, `String`) compare by reading their text, which
//! at that size lies all over the heap: each of a sort's twenty million compares missed the
//! cache twice. Sorted here, each name's
//! first 16 bytes are read once into a list of keys beside its position, the keys sorted where
//! they sit together, and the text read again only where two keys tie.
//!
//! The core's ids are any `Id`, a blanket impl, so the key cannot be asked of them through a
//! trait without changing that public bound; the two text types the crate knows are picked out
//! by their type instead, and every other id sorts as before.

use std::any::Any;

use crate::domain::name::{Name, head};

/// Lists shorter than this are sorted as they are: a pass's few dozen marks fit in the cache,
/// and the list of keys would cost an allocation.
const KEYED_FROM: usize = 4096;

/// Sorts `items` as `sort_unstable` would, by keys kept side by side when they are many names.
pub(crate) fn sort_unstable<T: Ord + 'static>(items: &mut Vec<T>) {
    sort_keyed_from(items, KEYED_FROM);
}

#[expect(
    clippy::ptr_arg,
    reason = "a slice is unsized and cannot be downcast; the Vec is what is picked out"
)]
fn sort_keyed_from<T: Ord + 'static>(items: &mut Vec<T>, keyed_from: usize) {
    if items.len() >= keyed_from && u32::try_from(items.len()).is_ok() {
        let any: &mut dyn Any = items;
        if let Some(names) = any.downcast_mut::<Vec<Name>>() {
            return by_head(names, Name::head);
        }
        if let Some(texts) = any.downcast_mut::<Vec<String>>() {
            return by_head(texts, |text| head(text));
        }
    }
    items.sort_unstable();
}

/// `a` and `b` merged, each sorted and without repeats: sorted, and each item there once.
///
/// When they are many names, each is ordered by its head first, read once in a pass along
/// each list: a restart's inputs leave their marks in two such lists (the part sorted when
/// the list last doubled, and what came after), and merging them by the names themselves
/// read two blocks from all over the heap per step.
pub(crate) fn merge<T: Ord + 'static>(a: Vec<T>, b: Vec<T>) -> Vec<T> {
    merge_keyed_from(a, b, KEYED_FROM)
}

fn merge_keyed_from<T: Ord + 'static>(a: Vec<T>, b: Vec<T>, keyed_from: usize) -> Vec<T> {
    let keyed = a.len() + b.len() >= keyed_from;
    let heads = |list: &[T]| -> Option<Vec<(u64, u64)>> {
        keyed.then(|| list.iter().map(head_of).collect()).flatten()
    };
    let (heads_a, heads_b) = (heads(&a), heads(&b));
    let order = |(i, x): (usize, &T), (j, y): (usize, &T)| match (&heads_a, &heads_b) {
        (Some(ha), Some(hb)) => ha[i].cmp(&hb[j]).then_with(|| x.cmp(y)),
        _ => x.cmp(y),
    };
    let mut merged = Vec::with_capacity(a.len() + b.len());
    let mut a = a.into_iter().enumerate().peekable();
    let mut b = b.into_iter().enumerate().peekable();
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some((i, x)), Some((j, y))) => match order((*i, x), (*j, y)) {
                std::cmp::Ordering::Less => a.next(),
                std::cmp::Ordering::Greater => b.next(),
                std::cmp::Ordering::Equal => {
                    b.next();
                    a.next()
                }
            },
            (Some(_), None) => a.next(),
            (None, Some(_)) => b.next(),
            (None, None) => return merged,
        };
        merged.extend(next.map(|(_, item)| item));
    }
}

/// The head of a `Name` or a `String`; `None` for any other id.
pub(crate) fn head_of<T: 'static>(item: &T) -> Option<(u64, u64)> {
    let any: &dyn Any = item;
    if let Some(name) = any.downcast_ref::<Name>() {
        return Some(name.head());
    }
    any.downcast_ref::<String>().map(|text| head(text))
}

/// Sorts `items` (at most `u32::MAX` of them) by `key`, a prefix of their order: where two keys
/// differ they order the items, where they tie the items' own order decides.
fn by_head<T: Ord>(items: &mut [T], key: impl Fn(&T) -> (u64, u64)) {
    let mut keyed: Vec<((u64, u64), u32)> = items
        .iter()
        .zip(0u32..)
        .map(|(item, at)| (key(item), at))
        .collect();
    keyed.sort_unstable();
    for tied in keyed.chunk_by_mut(|a, b| a.0 == b.0) {
        if tied.len() > 1 {
            tied.sort_unstable_by(|a, b| items[a.1 as usize].cmp(&items[b.1 as usize]));
        }
    }
    // Each position takes the item the sorted keys name, following the swaps already made: an
    // index below the position was swapped away, to where that position's entry says.
    for at in 0..keyed.len() {
        let mut from = keyed[at].1;
        while (from as usize) < at {
            from = keyed[from as usize].1;
        }
        keyed[at].1 = from;
        items.swap(at, from as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Texts with long shared prefixes (heads that tie), repeats, zero bytes and multi-byte
    /// characters around the 16 bytes kept.
    fn texts() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec(
            ("[ab]{0,18}", "[ab\\x00é]{0,6}").prop_map(|(common, tail)| format!("{common}{tail}")),
            0..200,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 500,
            rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha,
            rng_seed: proptest::test_runner::RngSeed::Fixed(16),
            ..ProptestConfig::default()
        })]

        /// Keyed or not, names and strings come out in their text's order, each kept.
        #[test]
        fn names_and_strings_sort_as_their_texts(texts in texts()) {
            let mut expected = texts.clone();
            expected.sort_unstable();

            let mut strings = texts.clone();
            sort_keyed_from(&mut strings, 0);
            prop_assert_eq!(&strings, &expected);

            let mut names: Vec<Name> = texts.iter().map(Name::from).collect();
            sort_keyed_from(&mut names, 0);
            let names: Vec<&str> = names.iter().map(Name::as_str).collect();
            prop_assert_eq!(names, expected.iter().map(String::as_str).collect::<Vec<_>>());
        }

        /// Keyed or not, two sorted lists without repeats merge into their union, sorted.
        #[test]
        fn names_and_strings_merge_as_their_texts(a in texts(), b in texts()) {
            let set = |texts: &[String]| {
                let mut texts = texts.to_vec();
                texts.sort_unstable();
                texts.dedup();
                texts
            };
            let (a, b) = (set(&a), set(&b));
            let mut expected: Vec<String> = a.iter().chain(&b).cloned().collect();
            expected.sort_unstable();
            expected.dedup();
            for keyed_from in [0, usize::MAX] {
                prop_assert_eq!(&merge_keyed_from(a.clone(), b.clone(), keyed_from), &expected);
                let names = |texts: &[String]| texts.iter().map(Name::from).collect::<Vec<_>>();
                let merged = merge_keyed_from(names(&a), names(&b), keyed_from);
                let merged: Vec<&str> = merged.iter().map(Name::as_str).collect();
                prop_assert_eq!(merged, expected.iter().map(String::as_str).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn other_ids_and_short_lists_sort_as_they_are() {
        let mut numbers: Vec<u32> = (0..10_000).rev().collect();
        sort_unstable(&mut numbers);
        assert!(numbers.iter().copied().eq(0..10_000));
        let mut few = vec![String::from("b"), String::from("a")];
        sort_unstable(&mut few);
        assert_eq!(few, ["a", "b"]);
        // A long list of names goes by its keys, here with every head tied.
        let mut long: Vec<Name> = (0..KEYED_FROM as u32 + 10)
            .rev()
            .map(|i| Name::from(format!("a-shared-prefix-{i:08}")))
            .collect();
        sort_unstable(&mut long);
        assert!(long.windows(2).all(|w| w[0].as_str() < w[1].as_str()));
    }
}
