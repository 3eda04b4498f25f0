//! [`Name`]: an interned name to use as a node, volume or workload id.
//!
//! The core keeps ids in a dozen tables and lists: it clones, hashes and compares them on every
//! move. With `String` ids each clone is an allocation and each hash reads the name's bytes,
//! which at a million attachments lie all over the heap (a move costs 8 to 15 times one with
//! `u32` ids). A `Name` is one pointer to the only copy of its text: a clone is
//! a reference count, a hash and an equality test look at the pointer alone, and a table entry
//! holds 8 bytes instead of 24 plus the text.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use internment::ArcIntern;

/// A node, volume or workload name, interned: every `Name` with the same text shares one
/// allocation, freed when the last of them is dropped.
///
/// Use it as all three ids where an orchestrator names things (PV names, CSI handles, node
/// names, `namespace/pod`), with [`Ids`](crate::Ids): the core then runs at close to the speed
/// of integer ids, without a numbering of your own to keep.
///
/// - **Equality and hashing are by identity**: two `Name`s are equal when they point at the same
///   interned text, which interning makes the same thing as equal text. Neither reads the text.
///   This is why `Name` does not implement `Borrow<str>`: a `str` hashes its bytes, so a map
///   keyed by `Name` cannot be searched with a `&str`; make a `Name` of it.
/// - **Order is by text**, so that sorted lists (a node's reported volumes, events, listings)
///   come out the same in every run.
/// - **Hash order differs from run to run** (it follows addresses). The core's decisions and
///   the order of what it plans never depend on it: a test drives the same history with names
///   hashed in different orders and requires the same operations, in the same order.
/// - Making a `Name` looks its text up in a process-wide table (a sharded lock); do it once per
///   object an informer hands you, not per comparison.
///
/// ```
/// use attach_detach::{Ids, Name};
/// use attach_detach::config::Config;
/// use attach_detach::core::{Input, Reconciler, VolumeSpec};
///
/// type K8s = Ids<Name, Name, Name, String>;
/// let mut core: Reconciler<K8s> = Reconciler::new(Config::default());
/// core.handle(Input::SetVolume {
///     volume: Name::from("pvc-0a1b2c3d"),
///     spec: VolumeSpec::single_node("csi-handle-0a1b2c3d".to_string()),
/// })
/// .unwrap();
///
/// let a = Name::from("node-a");
/// let b = Name::from(String::from("node-a"));
/// assert_eq!(a, b, "the same text is the same name");
/// assert_eq!(a.as_str(), "node-a");
/// assert!(Name::from("node-a") < Name::from("node-b"), "ordered by text");
/// assert_eq!(format!("{a} {a:?}"), "node-a \"node-a\"");
/// ```
#[derive(PartialEq, Eq)]
pub struct Name(ArcIntern<Text>);

/// A name's one copy: its text, and its first bytes as two numbers beside the count, so that
/// most comparisons read only this block. Comparing the texts themselves read one more
/// allocation per side: sorting a restart's million volume names was half of recovering them.
///
/// Equality and hashing are the text's, as the interner needs to find a text's one copy.
struct Text {
    /// The text's first 16 bytes, zero-padded, as two big-endian numbers: where two heads
    /// differ, they order as the texts do (see [`head`]).
    head: (u64, u64),
    text: Box<str>,
}

/// The first 16 bytes of `text`, zero-padded, as two big-endian numbers. They order as the
/// texts: where two heads first differ, at a byte both texts have, that byte orders them; where
/// one head has padding, that text ended there and the other is longer with all the same
/// bytes before, so it is the lesser. Equal heads say nothing (`"a"` and `"a\0"`).
pub(crate) fn head(text: &str) -> (u64, u64) {
    let mut bytes = [0u8; 16];
    let n = text.len().min(16);
    bytes[..n].copy_from_slice(&text.as_bytes()[..n]);
    let (hi, lo) = bytes.split_at(8);
    (
        u64::from_be_bytes(hi.try_into().expect("8 bytes")),
        u64::from_be_bytes(lo.try_into().expect("8 bytes")),
    )
}

impl Text {
    fn new(text: Box<str>) -> Self {
        Text {
            head: head(&text),
            text,
        }
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Text {}

impl Hash for Text {
    /// The text's hash, the same as a `str`'s: the interner looks a `&str` up by it.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl std::borrow::Borrow<str> for Text {
    fn borrow(&self) -> &str {
        &self.text
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Self {
        Text::new(text.into())
    }
}

impl PartialOrd for Text {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Text {
    /// The text's order: the heads decide where they differ, the texts otherwise.
    fn cmp(&self, other: &Self) -> Ordering {
        self.head
            .cmp(&other.head)
            .then_with(|| self.text.cmp(&other.text))
    }
}

impl Name {
    /// Interns `text`: the existing `Name` for it if one is alive, a new one otherwise.
    pub fn new(text: &str) -> Self {
        Name(ArcIntern::from_ref(text))
    }

    /// The name's text.
    pub fn as_str(&self) -> &str {
        &self.0.text
    }

    /// The text's first 16 bytes as [`head`] gives them, kept beside the count: a sort key
    /// read without the text.
    pub(crate) fn head(&self) -> (u64, u64) {
        self.0.head
    }
}

impl Clone for Name {
    fn clone(&self) -> Self {
        Name(self.0.clone())
    }

    /// Leaves an equal name as it is. The derived one cloned and dropped: two atomic updates
    /// of the count (the drop's a full barrier) on the name's block. The core writes lists
    /// over old ones in place (a status write's list over a spare), and an entry that is the
    /// same in both then costs a compare of two pointers.
    fn clone_from(&mut self, source: &Self) {
        if self.0 != source.0 {
            self.0 = source.0.clone();
        }
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    /// By text: the same name is equal without a read, and most others differ in their first
    /// 16 bytes, kept beside the count.
    fn cmp(&self, other: &Self) -> Ordering {
        if self.0 == other.0 {
            return Ordering::Equal;
        }
        (*self.0).cmp(&*other.0)
    }
}

impl Hash for Name {
    /// Hashes the pointer, not the text: the text is not read, and it is the same thing since
    /// equal texts share one allocation.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl From<&str> for Name {
    fn from(text: &str) -> Self {
        Name::new(text)
    }
}

impl From<String> for Name {
    /// Interns `text`, keeping its allocation (shrunk to fit) when the name is new.
    fn from(text: String) -> Self {
        Name(ArcIntern::new(Text::new(text.into_boxed_str())))
    }
}

impl From<&String> for Name {
    fn from(text: &String) -> Self {
        Name::new(text)
    }
}

impl From<Name> for String {
    fn from(name: Name) -> Self {
        name.as_str().to_owned()
    }
}

impl std::ops::Deref for Name {
    type Target = str;

    /// The text, so that a `Name` reads as a `&str` (`name.starts_with(..)`, `&name` where a
    /// `&str` is wanted).
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Name {
    /// As the text's own `Debug`, quoted: logs and events read as with `String` ids.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rustc_hash::FxHashSet;

    #[test]
    fn the_same_text_is_one_allocation_and_equal_text_is_equal() {
        let a = Name::from("pvc-1");
        let b = Name::from(String::from("pvc-1"));
        let c = Name::new("pvc-2");
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(std::ptr::eq(a.as_str().as_ptr(), b.as_str().as_ptr()));
        let set: FxHashSet<Name> = [a.clone(), b, c].into_iter().collect();
        assert_eq!(set.len(), 2);
        assert!(set.contains(&Name::from("pvc-1")));
        assert!(!set.contains(&Name::from("pvc-3")));
    }

    #[test]
    fn a_name_cloned_over_another_takes_its_text_and_lets_the_old_one_go() {
        let a = Name::from("clone-from-a");
        let b = Name::from("clone-from-b");
        let mut slot = a.clone();
        assert_eq!(a.0.refcount(), 2);
        slot.clone_from(&b);
        assert_eq!(slot, b);
        assert_eq!(slot.as_str(), "clone-from-b");
        assert_eq!(a.0.refcount(), 1, "the old name released");
        assert_eq!(b.0.refcount(), 2, "the new one counted");
        // Cloned over an equal name, the slot still holds one count. (That it skipped the two
        // atomic updates is not visible in the count: callgrind shows it.)
        slot.clone_from(&b);
        assert_eq!(b.0.refcount(), 2, "the slot still counted once");
        drop(slot);
        assert_eq!(b.0.refcount(), 1);
    }

    #[test]
    fn order_is_by_text_whatever_the_addresses() {
        // Interned in reverse order, so the allocations are not in text order either.
        let mut names: Vec<Name> = (0..50)
            .rev()
            .map(|i| Name::from(format!("n-{i:03}")))
            .collect();
        names.sort();
        let texts: Vec<&str> = names.iter().map(Name::as_str).collect();
        let mut expected = texts.clone();
        expected.sort_unstable();
        assert_eq!(texts, expected);
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 2_000,
            rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha,
            rng_seed: proptest::test_runner::RngSeed::Fixed(16),
            ..ProptestConfig::default()
        })]

        /// The heads kept beside the count order names as their texts, whatever the lengths
        /// (around the 16 bytes kept), shared prefixes, zero bytes or multi-byte characters.
        #[test]
        fn order_is_the_texts_order(a in "[ab\\x00é]{0,20}", b in "[ab\\x00é]{0,20}", common in "[ab]{0,18}") {
            let (a, b) = (format!("{common}{a}"), format!("{common}{b}"));
            let (x, y) = (Name::from(a.as_str()), Name::from(b.as_str()));
            prop_assert_eq!(x.cmp(&y), a.cmp(&b), "{:?} against {:?}", a, b);
            prop_assert_eq!(x.partial_cmp(&y), Some(a.cmp(&b)));
            prop_assert_eq!(x == y, a == b);
        }
    }

    #[test]
    fn a_clone_is_a_count_and_a_name_outlives_its_dropped_clones() {
        let text = "name-counted-by-its-holders";
        let a = Name::from(text);
        let b = a.clone();
        assert_eq!(a.0.refcount(), 2, "a clone is a count, not a copy");
        drop(a);
        assert_eq!(b.0.refcount(), 1);
        assert_eq!(b, Name::from(text), "still the same name");
        drop(b);
        // Made again once every holder is gone: the same text, a name like any other.
        let again = Name::from(text);
        assert_eq!(again.as_str(), text);
        assert_eq!(again.0.refcount(), 1);
    }

    #[test]
    fn reads_as_its_text() {
        let n = Name::from("ip-10-0-0-1.ec2.internal");
        assert_eq!(n.to_string(), "ip-10-0-0-1.ec2.internal");
        assert_eq!(format!("{n:?}"), "\"ip-10-0-0-1.ec2.internal\"");
        assert_eq!(n, "ip-10-0-0-1.ec2.internal");
        assert!(n.ends_with(".ec2.internal"), "reads as a &str");
        assert_eq!(String::from(n), "ip-10-0-0-1.ec2.internal");
    }
}
