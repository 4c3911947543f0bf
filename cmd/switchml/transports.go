package main

// The optional transports register themselves when imported, as
// database/sql drivers do: the CLI offers them all, while a program that
// embeds the library or the switch links AF_XDP (and its eBPF dependencies)
// only if it imports transport/afxdp itself.
import (
	_ "github.com/switchml/switchml-go/transport/afxdp" // --transport afxdp
	_ "github.com/switchml/switchml-go/transport/shm"   // --transport shm
)
