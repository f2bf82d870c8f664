// Package proto holds firn's protobuf definitions (firn/v1/*.proto). Their
// generated Go code is committed in the client module, as
// github.com/firnid/firn/client/firnv1, so that a program using the client
// needs nothing of the server. Regenerate with
//
//	go generate ./proto/
//
// (needs protoc with the well-known types: Debian's protobuf-compiler and
// libprotobuf-dev; the Go plugins are pinned as tools in go.mod). The same
// command regenerates the other clients' code, each by its own gen.sh
// (clients/<lang>/gen.sh, whose install.sh brings the protoc plugin it
// needs). A test fails when any committed code is out of date.
package proto

//go:generate sh -c "protoc -I . -I /usr/include --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) --go_out=.. --go_opt=module=github.com/firnid/firn --go-grpc_out=.. --go-grpc_opt=module=github.com/firnid/firn firn/v1/firn.proto"
//go:generate bash ../clients/python/gen.sh
//go:generate bash ../clients/ts/gen.sh
//go:generate bash ../clients/java/gen.sh
