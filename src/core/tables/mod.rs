//! Cache-tuned tables: the structures that keep a move at a few thousand instructions and a
//! million attachments within memory. A reader after the protocol may skip this folder.
//!
//! Each file opens with why it exists and what it saves. They know nothing of the protocol:
//! they may import only `crate::domain` (the ids they hold) and each other.

pub(crate) mod dense_table;
pub(crate) mod device_paths;
pub(crate) mod id_search;
pub(crate) mod id_sort;
pub(crate) mod id_warm;
pub(crate) mod line_warm;
pub(crate) mod marks;
pub(crate) mod op_id_map;
pub(crate) mod position_index;
pub(crate) mod refill;
pub(crate) mod slot_table;
pub(crate) mod spares;
pub(crate) mod trim;
pub(crate) mod verify_ring;

#[cfg(test)]
pub(crate) mod counted;
