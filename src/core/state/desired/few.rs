//! [`Few`]: the short lists the desired state's records hold (a volume's nodes, a node's
//! workloads, a workload's volumes), nearly always of one item.

use std::ops::{Deref, DerefMut};

/// One item, or a boxed slice of several, read as a slice.
///
/// The desired state holds a few of these per volume and per workload, and nearly always with a
/// single item (a volume wanted on one node by one workload). Unlike a `SmallVec` it carries no
/// capacity word, and the enum tag hides in the box's non-null pointer, so with `u32` ids it is
/// 16 bytes. Adding or removing an item reallocates the box: fine for lists this short.
#[derive(Clone, Debug)]
pub(crate) enum Few<T> {
    One(T),
    Many(Box<[T]>),
}

impl<T> Deref for Few<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Few::One(item) => std::slice::from_ref(item),
            Few::Many(items) => items,
        }
    }
}

impl<T> DerefMut for Few<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Few::One(item) => std::slice::from_mut(item),
            Few::Many(items) => items,
        }
    }
}

impl<T: Ord + Clone> Few<T> {
    /// `items` sorted and each once, copied: a single item (a workload's usual one volume)
    /// without a list in between.
    pub(super) fn sorted_from(items: &[T]) -> Self {
        match items {
            [item] => Few::One(item.clone()),
            _ => {
                let mut items = items.to_vec();
                items.sort();
                items.dedup();
                Few::from_vec(items)
            }
        }
    }
}

impl<T> Few<T> {
    pub(super) fn from_vec(mut items: Vec<T>) -> Self {
        match items.len() {
            1 => Few::One(items.pop().expect("one item")),
            _ => Few::Many(items.into_boxed_slice()),
        }
    }

    fn into_vec(self) -> Vec<T> {
        match self {
            Few::One(item) => vec![item],
            Few::Many(items) => items.into_vec(),
        }
    }

    pub(super) fn insert(&mut self, at: usize, item: T) {
        let mut items = std::mem::replace(self, Few::Many(Box::default())).into_vec();
        items.insert(at, item);
        *self = Few::from_vec(items);
    }

    pub(super) fn remove(&mut self, at: usize) -> T {
        let mut items = std::mem::replace(self, Few::Many(Box::default())).into_vec();
        let item = items.remove(at);
        *self = Few::from_vec(items);
        item
    }
}
