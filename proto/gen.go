// Package proto holds firn's protobuf definitions (firn/v1/*.proto) and
// their generated Go code, which is committed. Regenerate with
//
//	go generate ./proto/
//
// (needs protoc with the well-known types: Debian's protobuf-compiler and
// libprotobuf-dev; the Go plugins are pinned as tools in go.mod). A test
// fails when the committed code is out of date.
package proto

//go:generate sh -c "protoc -I . -I /usr/include --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative firn/v1/firn.proto"
