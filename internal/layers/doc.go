// Package layers checks the module's import graph against the layer rules
// written in docs/architecture.md ("Layer rules"). It holds no code of its
// own: its test reads the rules from the document and the graph from
// `go list -deps -json`, and fails on any import that crosses a line the
// document forbids, so the document's rules are checked, not just written.
package layers
