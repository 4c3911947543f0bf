package onnx

import (
	"google.golang.org/protobuf/proto"

	pb "github.com/switchml/switchml-go/trainers/onnx/onnxpb"
)

func protoMarshal(m *pb.ModelProto) ([]byte, error) { return proto.Marshal(m) }
