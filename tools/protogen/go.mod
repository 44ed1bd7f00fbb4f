module molt.dev/tools/protogen

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/bufbuild/protocompile v0.14.1
	google.golang.org/protobuf v1.36.12
)

require golang.org/x/sync v0.8.0 // indirect
