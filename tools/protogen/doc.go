// Command protogen compiles .proto files without protoc and runs protoc
// plugins on them: github.com/bufbuild/protocompile parses and links the
// files, and each plugin (a protoc-gen-* binary) gets the usual
// CodeGeneratorRequest on stdin and answers with a CodeGeneratorResponse,
// whose files protogen writes under -out.
//
// The module pins the compiler and the plugins hack/update-proto.sh builds
// into bin/: protoc-gen-go (google.golang.org/protobuf) and
// protoc-gen-connect-go (connectrpc.com/connect). tools.go imports them
// behind the "tools" build tag so that go.mod keeps their versions.
//
// Usage:
//
//	protogen -I DIR -out DIR -plugin BIN[:PARAM] [-plugin ...] FILE.proto...
//
// FILE paths are relative to -I, as protoc's are to --proto_path.
package main
