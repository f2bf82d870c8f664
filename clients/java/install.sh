#!/usr/bin/env bash
# Installs the Debian 12 packages the Java client's build (build.sh), its
# tests, the conformance runner and gen.sh need; packages already
# installed are skipped. Run as root (or with sudo available).
#   install.sh            what build.sh needs (javac against Debian's jars)
#   install.sh --maven    also Maven and the Debian-packaged plugins for the
#                         offline Maven build (mvn -o -Pdebian, README)
set -euo pipefail
pkgs=(
  openjdk-17-jdk-headless        # javac, java
  libgrpc-java                   # grpc-api, -core, -context, -netty, -protobuf, -stub (1.41)
  libprotobuf-java               # protobuf-java 3.21
  libnetty-java                  # netty 4.1
  libguava-java
  libperfmark-java
  libgoogle-gson-java            # grpc-core's dependency; the runner's JSON
  libgoogle-common-protos-java   # google.rpc.Status, RetryInfo
  liberror-prone-java            # error_prone_annotations (grpc-api)
  libjsr305-java
  libgeronimo-annotation-1.3-spec-java  # javax.annotation.Generated of the generated stubs
  junit4                         # the unit tests
  libhamcrest-java
  protobuf-compiler              # protoc (gen.sh)
  libprotobuf-dev                # google/protobuf/*.proto that firn.proto imports (gen.sh)
  protobuf-compiler-grpc-java-plugin    # grpc_java_plugin (gen.sh)
)
if [[ "${1:-}" == "--maven" ]]; then
  pkgs+=(
    maven
    libmaven-compiler-plugin-java
    libmaven-resources-plugin-java
    libsurefire-java
    libbuild-helper-maven-plugin-java
    libanimal-sniffer-java           # named by Debian's gRPC poms
  )
fi
missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install.sh: every package is installed"
  exit 0
fi
echo "install.sh: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
