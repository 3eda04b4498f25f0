#!/usr/bin/env bash
# Regenerates the etcd adapter's committed gRPC code (adapters/etcd/src/client/pb/) from etcd's
# protos; with --check, writes nothing and fails if the committed code differs from what the
# protos give. Needs cargo and the network to crates.io (or its cache); no protoc.
#
# The protos are the ones etcd-client ETCD_CLIENT_VERSION ships (etcd's API protos, in etcd's
# repository layout, with the google.api and OpenAPI files they import): cargo downloads that
# crate's source to read them and builds nothing of it. The generator's own versions
# (tonic-prost-build, prost-build, protox) are pinned by the workspace's Cargo.lock.
set -euo pipefail
cd "$(dirname "$0")/../../.."

ETCD_CLIENT_VERSION=0.21.1
committed=adapters/etcd/src/client/pb
check=false
case "${1:-}" in
  --check) check=true ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A throwaway package depending on etcd-client: `cargo metadata` resolves and downloads it, and
# names the directory its source was unpacked to.
mkdir -p "$work/probe/src"
: >"$work/probe/src/lib.rs"
cat >"$work/probe/Cargo.toml" <<TOML
[package]
name = "etcd-protos-probe"
version = "0.0.0"
edition = "2021"

[dependencies]
etcd-client = "=$ETCD_CLIENT_VERSION"

[workspace]
TOML
manifest=$(cargo metadata --quiet --format-version 1 --manifest-path "$work/probe/Cargo.toml" \
  | grep -o "\"manifest_path\":\"[^\"]*etcd-client-$ETCD_CLIENT_VERSION/Cargo.toml\"" \
  | sed -n 1p | cut -d'"' -f4)
if [ -z "$manifest" ]; then
  echo "$0: cargo did not give etcd-client $ETCD_CLIENT_VERSION's source" >&2
  exit 1
fi
protos="$(dirname "$manifest")/proto"

cargo run --quiet -p attach-detach-etcd-codegen -- "$protos" "$work/pb"

if $check; then
  if ! diff -ru "$committed" "$work/pb"; then
    echo "$0: $committed differs from what etcd-client $ETCD_CLIENT_VERSION's protos give:" >&2
    echo "run adapters/etcd/codegen/regenerate.sh and commit the result" >&2
    exit 1
  fi
  echo "$committed matches etcd-client $ETCD_CLIENT_VERSION's protos"
else
  rm -rf "$committed"
  cp -r "$work/pb" "$committed"
  echo "regenerated $committed from etcd-client $ETCD_CLIENT_VERSION's protos"
fi
