// Package jobpb holds the generated code of the controller's job
// service (job.proto). Regenerate with `go generate` after editing the
// proto; protoc comes from Debian's protobuf-compiler and the plugins from
// `go install google.golang.org/protobuf/cmd/protoc-gen-go@latest
// google.golang.org/grpc/cmd/protoc-gen-go-grpc@latest`.
package jobpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative job.proto
