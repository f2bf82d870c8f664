# Sourced by build.sh, runner and bench: the class paths of Debian's jars.
_j=/usr/share/java
_main=(grpc-api grpc-core grpc-context grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub
  protobuf proto-google-common-protos guava failureaccess netty-buffer netty-codec netty-codec-http
  netty-codec-http2 netty-common netty-handler netty-handler-proxy netty-resolver netty-transport
  netty-codec-socks perfmark-api error_prone_annotations jsr305 geronimo-annotation-1.3-spec)
FIRN_MAIN_CP=""
for _n in "${_main[@]}"; do
  if [[ -f "$_j/$_n.jar" ]]; then FIRN_MAIN_CP="$FIRN_MAIN_CP${FIRN_MAIN_CP:+:}$_j/$_n.jar"; fi
done
FIRN_TEST_CP="$FIRN_MAIN_CP:$_j/gson.jar:$_j/junit4.jar:$_j/hamcrest-core.jar"
export FIRN_MAIN_CP FIRN_TEST_CP
