#!/usr/bin/env bash
# Builds firn's release binaries: static (no cgo), Linux amd64 and arm64,
# with the version stamped in (`firn version`, the firn_build_info metric),
# each with its SHA-256 sum.
#
#   deploy/release.sh v1.2.3            # into dist/
#   deploy/release.sh v1.2.3 /tmp/out   # elsewhere
#   ARCHS=amd64 deploy/release.sh v1.2.3
#
# Run it from a clean checkout of the tag: the VCS revision is recorded too,
# and `firn version` says "modified" when the tree was not clean.
set -euo pipefail
cd "$(dirname "$0")/.."
ver=${1:?usage: deploy/release.sh VERSION [OUT_DIR]}
case "$ver" in
v[0-9]*) ;;
*) echo "deploy/release.sh: version $ver must look like v1.2.3" >&2; exit 2 ;;
esac
out=${2:-dist}
mkdir -p "$out"
for arch in ${ARCHS:-amd64 arm64}; do
	bin="firn-$ver-linux-$arch"
	CGO_ENABLED=0 GOOS=linux GOARCH="$arch" go build -trimpath -buildvcs=true \
		-ldflags "-s -w -X main.version=$ver" -o "$out/$bin" ./cmd/firn
	(cd "$out" && sha256sum "$bin" >"$bin.sha256")
	echo "$out/$bin"
done
