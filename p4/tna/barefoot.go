package tna

import (
	"fmt"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The Tofino compiler describes TNA externs (Counter, Register, the port
// metadata and the snapshot of the pipeline) in P4Info externs whose info is
// a google.protobuf.Any holding a message of its package "barefoot". A
// P4Info text with such an Any parses only when the message type is known,
// and a P4Runtime server on the switch reads the same messages from the
// binary form. This file declares the messages this program's P4Info
// uses, with the field names and numbers of the compiler's definitions, and
// registers them globally: importing this package is enough for
// prototext.Unmarshal of switchml.p4info.txtpb to work.

// BarefootPackage is the protobuf package of the Tofino P4Info extensions.
const BarefootPackage = "barefoot"

func init() {
	if err := registerBarefoot(protoregistry.GlobalFiles, protoregistry.GlobalTypes); err != nil {
		panic(err)
	}
}

// barefootFile builds the descriptor of the extension messages.
func barefootFile() *descriptorpb.FileDescriptorProto {
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	scalar := func(name string, num int32, t descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(num), Label: opt, Type: t.Enum(), JsonName: proto.String(name)}
	}
	typed := func(name string, num int32, t descriptorpb.FieldDescriptorProto_Type, typeName string, label *descriptorpb.FieldDescriptorProto_Label) *descriptorpb.FieldDescriptorProto {
		f := scalar(name, num, t)
		f.TypeName = proto.String(typeName)
		f.Label = label
		return f
	}
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	enum := descriptorpb.FieldDescriptorProto_TYPE_ENUM
	i64 := descriptorpb.FieldDescriptorProto_TYPE_INT64
	i32 := descriptorpb.FieldDescriptorProto_TYPE_INT32
	u32 := descriptorpb.FieldDescriptorProto_TYPE_UINT32
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING
	boolean := descriptorpb.FieldDescriptorProto_TYPE_BOOL
	val := func(name string, num int32) *descriptorpb.EnumValueDescriptorProto {
		return &descriptorpb.EnumValueDescriptorProto{Name: proto.String(name), Number: proto.Int32(num)}
	}
	dataType := ".p4.config.v1.P4DataTypeSpec"
	return &descriptorpb.FileDescriptorProto{
		Name:       proto.String("barefoot/p4info.proto"),
		Package:    proto.String(BarefootPackage),
		Syntax:     proto.String("proto3"),
		Dependency: []string{p4configv1.File_p4_config_v1_p4types_proto.Path()},
		EnumType: []*descriptorpb.EnumDescriptorProto{{
			Name:  proto.String("Direction"),
			Value: []*descriptorpb.EnumValueDescriptorProto{val("DIRECTION_INGRESS", 0), val("DIRECTION_EGRESS", 1)},
		}},
		MessageType: []*descriptorpb.DescriptorProto{
			{
				Name:  proto.String("CounterSpec"),
				Field: []*descriptorpb.FieldDescriptorProto{typed("unit", 1, enum, ".barefoot.CounterSpec.Unit", opt)},
				EnumType: []*descriptorpb.EnumDescriptorProto{{
					Name:  proto.String("Unit"),
					Value: []*descriptorpb.EnumValueDescriptorProto{val("UNSPECIFIED", 0), val("BYTES", 1), val("PACKETS", 2), val("PACKETS_AND_BYTES", 3)},
				}},
			},
			{
				Name:  proto.String("Counter"),
				Field: []*descriptorpb.FieldDescriptorProto{typed("spec", 1, msg, ".barefoot.CounterSpec", opt), scalar("size", 2, i64)},
			},
			{
				Name: proto.String("Register"),
				Field: []*descriptorpb.FieldDescriptorProto{
					typed("type_spec", 1, msg, dataType, opt), scalar("size", 2, i64), scalar("data_field_name", 3, str),
				},
			},
			{
				Name: proto.String("DynHash"),
				Field: []*descriptorpb.FieldDescriptorProto{
					typed("type_spec", 1, msg, dataType, opt),
					typed("field_infos", 2, msg, ".barefoot.DynHash.field_info", rep),
					scalar("hash_width", 3, i32),
				},
				NestedType: []*descriptorpb.DescriptorProto{{
					Name:  proto.String("field_info"),
					Field: []*descriptorpb.FieldDescriptorProto{scalar("field_name", 1, str), scalar("is_constant", 2, boolean)},
				}},
			},
			{
				Name:  proto.String("PortMetadata"),
				Field: []*descriptorpb.FieldDescriptorProto{scalar("key_name", 1, str), typed("type_spec", 2, msg, dataType, opt)},
			},
			{
				Name: proto.String("Snapshot"),
				Field: []*descriptorpb.FieldDescriptorProto{
					scalar("pipe", 1, str), typed("direction", 2, enum, ".barefoot.Direction", opt),
					typed("fields", 3, msg, ".barefoot.Snapshot.Field", rep),
				},
				NestedType: []*descriptorpb.DescriptorProto{{
					Name:  proto.String("Field"),
					Field: []*descriptorpb.FieldDescriptorProto{scalar("id", 1, u32), scalar("name", 2, str), scalar("bitwidth", 3, i32)},
				}},
			},
		},
	}
}

// registerBarefoot adds the extension messages to files and types, unless
// another package registered the package already (then its definitions
// serve).
func registerBarefoot(files *protoregistry.Files, types *protoregistry.Types) error {
	if _, err := files.FindFileByPath("barefoot/p4info.proto"); err == nil {
		return nil
	}
	fd, err := protodesc.NewFile(barefootFile(), files)
	if err != nil {
		return fmt.Errorf("tna: barefoot P4Info descriptors: %w", err)
	}
	if err := files.RegisterFile(fd); err != nil {
		return fmt.Errorf("tna: register barefoot P4Info descriptors: %w", err)
	}
	msgs := fd.Messages()
	for i := 0; i < msgs.Len(); i++ {
		if err := registerMessage(types, msgs.Get(i)); err != nil {
			return err
		}
	}
	enums := fd.Enums()
	for i := 0; i < enums.Len(); i++ {
		if err := types.RegisterEnum(dynamicpb.NewEnumType(enums.Get(i))); err != nil {
			return fmt.Errorf("tna: %w", err)
		}
	}
	return nil
}

func registerMessage(types *protoregistry.Types, md protoreflect.MessageDescriptor) error {
	if err := types.RegisterMessage(dynamicpb.NewMessageType(md)); err != nil {
		return fmt.Errorf("tna: %w", err)
	}
	nested := md.Messages()
	for i := 0; i < nested.Len(); i++ {
		if err := registerMessage(types, nested.Get(i)); err != nil {
			return err
		}
	}
	ens := md.Enums()
	for i := 0; i < ens.Len(); i++ {
		if err := types.RegisterEnum(dynamicpb.NewEnumType(ens.Get(i))); err != nil {
			return fmt.Errorf("tna: %w", err)
		}
	}
	return nil
}

func protoTypes() *protoregistry.Types { return protoregistry.GlobalTypes }
