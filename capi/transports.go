package main

// libswitchml.so offers every transport switchml.h names: the optional ones
// register themselves when imported (transport.Register).
import _ "github.com/switchml/switchml-go/transport/afxdp" // switchml_config.transport "afxdp"
