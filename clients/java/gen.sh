#!/usr/bin/env bash
# Generates the Java classes of firn.proto (and of the grpc.health.v1
# protocol the client watches) with Debian's protoc and grpc_java_plugin.
# Usage: gen.sh [OUTDIR]   (default: src/main/generated beside this script)
# The output depends only on the .proto files and the two tools' versions:
# running it twice gives byte-identical files.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$here/src/main/generated}"
plugin="$(command -v grpc_java_plugin || true)"
if [[ -z "$plugin" ]]; then
  echo "gen.sh: grpc_java_plugin not found (apt-get install protobuf-compiler-grpc-java-plugin, or run install.sh)" >&2
  exit 1
fi
command -v protoc >/dev/null || { echo "gen.sh: protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
# Start clean, so that a message removed from a .proto leaves no stale file.
rm -rf "$out/io/github/firnid/firn/v1" "$out/io/github/firnid/firn/client/internal/health"
# Relative paths, run from fixed directories: nothing of the caller's
# working directory or of absolute paths reaches the output.
(cd "$root/proto" && protoc -I . -I /usr/include \
  --plugin=protoc-gen-grpc-java="$plugin" \
  --java_out="$out" --grpc-java_out="$out" firn/v1/firn.proto)
(cd "$here/proto" && protoc -I . \
  --plugin=protoc-gen-grpc-java="$plugin" \
  --java_out="$out" --grpc-java_out="$out" grpc/health/v1/health.proto)
