#!/usr/bin/env bash
# Cuts a firn release in one command:
#   - static binaries (no cgo) for Linux amd64 and arm64, the version
#     stamped in (`firn version`, the firn_build_info metric), each with its
#     SHA-256 sum;
#   - the container image firn:VERSION, built without Docker and without
#     pulling anything: an empty base holding the static binaries, made with
#     `podman import`, saved beside the binaries as an OCI archive with its
#     SHA-256 sum (load it with `podman load -i` or push it with skopeo);
#   - CHANGELOG.md's `## Unreleased` section renamed `## VERSION — DATE`.
#
#   deploy/release.sh v1.2.3            # into dist/
#   deploy/release.sh v1.2.3 /tmp/out   # elsewhere
#   ARCHS=amd64 deploy/release.sh v1.2.3
#   IMAGE=0 deploy/release.sh v1.2.3            # binaries only, no podman
#   CUT_CHANGELOG=0 deploy/release.sh v1.2.3    # leave CHANGELOG.md alone
#   CHANGELOG_FILE=/tmp/CHANGELOG.md deploy/release.sh v1.2.3  # cut that file
#
# The image: /usr/local/bin/firn and /usr/local/bin/firn-healthz (a probe
# for runtimes that take a health command: `firn-healthz
# http://127.0.0.1:7301/healthz`; an OCI image has no HEALTHCHECK field),
# the CA bundle, and /var/lib/firn owned by 65532, run as USER
# 65532:65532, ENTRYPOINT `firn serve`, listening on 7300 (gRPC) and 7301
# (HTTP). It is built for IMAGE_ARCH (default amd64). deploy/image_test.go
# builds it with this script and runs it under podman.
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
image=${IMAGE:-1}
image_arch=${IMAGE_ARCH:-amd64}
changelog=${CHANGELOG_FILE:-CHANGELOG.md}
cut=${CUT_CHANGELOG:-1}

# Refuse before building anything.
if [ "$image" = 1 ] && ! command -v podman >/dev/null 2>&1; then
	echo "deploy/release.sh: the image needs podman (apt-get install podman runc), which is not installed; IMAGE=0 builds the binaries only" >&2
	exit 2
fi
if [ "$cut" = 1 ]; then
	if ! grep -q '^## Unreleased$' "$changelog"; then
		echo "deploy/release.sh: $changelog has no '## Unreleased' section to cut for $ver" >&2
		exit 2
	fi
	if grep -q "^## $ver " "$changelog"; then
		echo "deploy/release.sh: $changelog already has a section for $ver" >&2
		exit 2
	fi
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
for arch in ${ARCHS:-amd64 arm64}; do
	bin="firn-$ver-linux-$arch"
	CGO_ENABLED=0 GOOS=linux GOARCH="$arch" go build -trimpath -buildvcs=true \
		-ldflags "-s -w -X main.version=$ver" -o "$out/$bin" ./cmd/firn
	(cd "$out" && sha256sum "$bin" >"$bin.sha256")
	echo "$out/$bin"
done

if [ "$image" = 1 ]; then
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	root="$work/root"
	mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/var/lib/firn"
	bin="$out/firn-$ver-linux-$image_arch"
	if [ ! -f "$bin" ]; then # IMAGE_ARCH not among ARCHS
		bin="$work/firn"
		CGO_ENABLED=0 GOOS=linux GOARCH="$image_arch" go build -trimpath -buildvcs=true \
			-ldflags "-s -w -X main.version=$ver" -o "$bin" ./cmd/firn
	fi
	cp "$bin" "$root/usr/local/bin/firn"
	(cd deploy && CGO_ENABLED=0 GOOS=linux GOARCH="$image_arch" go build -trimpath \
		-ldflags "-s -w" -o "$root/usr/local/bin/firn-healthz" ./cmd/firn-healthz)
	# TLS to a coordinator or NTP-less peers signed by a public CA needs the
	# system roots: an empty base has none.
	cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
	# Everything root's and read-only to the node, but its data dir.
	tar=(tar --sort=name --mtime=@0 --numeric-owner -C "$root")
	"${tar[@]}" --owner=0 --group=0 -cf "$work/rootfs.tar" etc usr
	"${tar[@]}" --owner=0 --group=0 --no-recursion -rf "$work/rootfs.tar" var var/lib
	"${tar[@]}" --owner=65532 --group=65532 -rf "$work/rootfs.tar" var/lib/firn
	ref="localhost/firn:$ver"
	podman rmi -f "$ref" >/dev/null 2>&1 || true
	podman import -q --arch "$image_arch" \
		--change 'USER 65532:65532' \
		--change 'WORKDIR /var/lib/firn' \
		--change 'ENV FIRN_DATA_DIR=/var/lib/firn' \
		--change 'ENV FIRN_GRPC_ADDR=0.0.0.0:7300' \
		--change 'ENV FIRN_HTTP_ADDR=0.0.0.0:7301' \
		--change 'EXPOSE 7300/tcp' \
		--change 'EXPOSE 7301/tcp' \
		--change 'VOLUME /var/lib/firn' \
		--change 'STOPSIGNAL SIGTERM' \
		--change 'ENTRYPOINT ["/usr/local/bin/firn", "serve"]' \
		--change "LABEL org.opencontainers.image.version=$ver" \
		--change 'LABEL org.opencontainers.image.title=firn' \
		--change 'LABEL org.opencontainers.image.licenses=Apache-2.0' \
		"$work/rootfs.tar" "$ref" >/dev/null
	archive="firn-$ver-image-linux-$image_arch.oci.tar"
	rm -f "$out/$archive"
	podman save -q --format oci-archive -o "$out/$archive" "$ref"
	(cd "$out" && sha256sum "$archive" >"$archive.sha256")
	echo "$out/$archive ($ref)"
fi

if [ "$cut" = 1 ]; then
	sed -i "s/^## Unreleased\$/## $ver — $(date -u +%F)/" "$changelog"
	echo "$changelog: ## $ver — $(date -u +%F)"
fi
