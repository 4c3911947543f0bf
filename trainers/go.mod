module github.com/switchml/switchml-go/trainers

go 1.26.8

replace github.com/switchml/switchml-go => ../

require (
	github.com/wamuir/graft v0.10.0 // indirect
	github.com/yalue/onnxruntime_go v1.27.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
