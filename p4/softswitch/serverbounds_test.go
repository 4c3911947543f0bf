package softswitch

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/switchml/switchml-go/p4/pipeline"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// TestP4RuntimeHeadersBounded: the switch's P4Runtime service answers a
// call with the headers a controller sends and some kilobytes more, and
// refuses one whose headers decode into more than p4rtHeaderBytes before
// it is asked who calls.
func TestP4RuntimeHeadersBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv, err := NewServer(ServerConfig{DeviceID: testDevice, Pipeline: pipeline.Config{Slots: 8, MaxElements: 64, MaxWorkers: 2},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeP4Runtime(ctx, lis) }()
	defer func() {
		cancel()
		<-served
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := p4v1.NewP4RuntimeClient(conn)
	pad := func(n int) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "x-pad", strings.Repeat("p", n))
	}
	if _, err := client.Capabilities(pad(4<<10), &p4v1.CapabilitiesRequest{}); err != nil {
		t.Fatalf("Capabilities with 4 KiB of extra headers: %v", err)
	}
	if _, err := client.Capabilities(pad(p4rtHeaderBytes), &p4v1.CapabilitiesRequest{}); err == nil {
		t.Fatalf("Capabilities with %d bytes of headers answered, want it refused", p4rtHeaderBytes)
	}
}
