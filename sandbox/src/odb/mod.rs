//! The checkpoint object store: a bare git repository only the hub writes ([`store`]), its
//! batches of new objects, written loose or as one pack ([`pack`]), and tree edits.

#![forbid(unsafe_code)]

pub mod pack;
pub mod store;
pub(crate) mod tree_edit;
