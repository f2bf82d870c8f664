#!/usr/bin/env bash
# Installs the Debian packages the Python client needs, once: grpcio and
# protobuf for Debian's /usr/bin/python3, and protoc with the gRPC Python
# plugin for gen.sh. Idempotent: packages already installed are skipped.
set -euo pipefail
want=(python3 python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc)
missing=()
for p in "${want[@]}"; do
  if ! dpkg -s "$p" >/dev/null 2>&1; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install.sh: all installed (${want[*]})"
  exit 0
fi
echo "install.sh: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
