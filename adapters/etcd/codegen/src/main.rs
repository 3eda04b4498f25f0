//! Regenerates the etcd adapter's gRPC code (`adapters/etcd/src/client/pb/`) from etcd's protos.
//!
//! ```text
//! cargo run -p attach-detach-etcd-codegen -- PROTO_ROOT OUT_DIR
//! ```
//!
//! `PROTO_ROOT` holds etcd's protos in their repository's layout (`etcd/api/...`) with the
//! files they import (`google/api/...`, `protoc-gen-openapiv2/...`); `regenerate.sh` beside
//! this crate finds them in the etcd-client crate the README names, runs this program and, with
//! `--check`, fails if the committed code differs.
//!
//! The protos are compiled by protox, in Rust: neither this program nor the adapter's build
//! needs `protoc`. Only the four packages the adapter uses are generated, with clients for the
//! four services it calls (the key-value store, watches, leases and elections).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The protos compiled, relative to the proto root: each gives one Rust file named after its
/// package.
const PROTOS: [&str; 4] = [
    "etcd/api/authpb/auth.proto",
    "etcd/api/mvccpb/kv.proto",
    "etcd/api/etcdserverpb/rpc.proto",
    "etcd/server/etcdserver/api/v3election/v3electionpb/v3election.proto",
];

/// The services whose clients are generated.
const SERVICES: [&str; 4] = ["KV", "Watch", "Lease", "Election"];

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [root, out] = args.as_slice() else {
        eprintln!("usage: attach-detach-etcd-codegen PROTO_ROOT OUT_DIR");
        return ExitCode::from(2);
    };
    match generate(root, out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("attach-detach-etcd-codegen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn generate(root: &Path, out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let mut compiler = protox::Compiler::new([root])?;
    // Only the four files asked for: their imports (google.api's HTTP annotations, the
    // OpenAPI options, etcd's version options) carry options for other tools, not types the
    // adapter sends.
    compiler.include_imports(false).include_source_info(false);
    for proto in PROTOS {
        compiler.open_file(proto)?;
    }
    let mut descriptors = compiler.file_descriptor_set();
    // Clients only for the services the adapter calls: etcd's cluster, maintenance and auth
    // services would be a thousand lines of code nobody runs.
    for file in &mut descriptors.file {
        file.service
            .retain(|service| SERVICES.contains(&service.name()));
    }
    std::fs::create_dir_all(out)?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        // The adapter builds its own channel (endpoints, keep-alive, timeouts).
        .build_transport(false)
        .out_dir(out)
        .compile_fds(descriptors)?;
    Ok(())
}
