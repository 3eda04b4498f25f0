//! etcd's gRPC messages and clients, generated from its protos by
//! `adapters/etcd/codegen` (tonic-prost-build on protox's descriptors) and committed:
//! regenerate them with `adapters/etcd/codegen/regenerate.sh`, never edit them. Each module is
//! one proto package; the generated code refers to its siblings as `super::`.

#[rustfmt::skip]
pub mod authpb;
#[rustfmt::skip]
pub mod etcdserverpb;
#[rustfmt::skip]
pub mod mvccpb;
#[rustfmt::skip]
pub mod v3electionpb;
