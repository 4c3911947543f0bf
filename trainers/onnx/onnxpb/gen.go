// Package onnxpb holds Go types for the ONNX protobuf messages the exporter
// writes. Regenerate with `go generate` (needs protoc and protoc-gen-go).
package onnxpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative onnx.proto
