#!/usr/bin/env bash
# gen.sh [OUTDIR]: writes the client's generated files into OUTDIR
# (default: proto/firn/v1 beside this script, the committed copy): a copy
# of the repository's proto/firn/v1/firn.proto, which the client loads at
# run time with @grpc/proto-loader. Running it twice writes the same bytes.
# (proto/own/ holds the client's own hand-written protos: not generated.)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$here/proto/firn/v1}"
mkdir -p "$out"
cp "$root/proto/firn/v1/firn.proto" "$out/firn.proto.tmp"
chmod 0644 "$out/firn.proto.tmp"
mv "$out/firn.proto.tmp" "$out/firn.proto"
