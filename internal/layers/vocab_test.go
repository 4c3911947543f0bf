package layers

import "testing"

// controlPlane are the packages that describe and program jobs on any
// switch: they speak p4/switchjob's vocabulary, never the software
// switch's pipeline.
var controlPlane = []string{"p4/p4info", "p4/controller", "p4/controller/jobcore"}

const softwarePipeline = "p4/pipeline"

// reaches reports whether from imports to, directly or through other
// packages of graph.
func reaches(graph map[string][]string, from, to string) bool {
	return importChain(graph, from, func(q string) bool { return q == to }) != nil
}

// TestTheControlPlaneImportsNoPipeline: the P4Info contract, the
// controller and its core reach the software switch's pipeline through no
// import (go list -deps).
func TestTheControlPlaneImportsNoPipeline(t *testing.T) {
	graph := moduleGraph(t, moduleRoot(t))
	for _, p := range controlPlane {
		if _, ok := graph[p]; !ok {
			t.Fatalf("no package %s in the graph", p)
		}
		if reaches(graph, p, softwarePipeline) {
			t.Errorf("%s imports %s (go list -deps %s): it should name jobs on a switch through p4/switchjob", p, softwarePipeline, p)
		}
	}
}

// TestTheVocabularyCheckCatchesAnImport adds an import of the pipeline
// below each control-plane package, directly and through a package it
// imports, and wants it found.
func TestTheVocabularyCheckCatchesAnImport(t *testing.T) {
	graph := moduleGraph(t, moduleRoot(t))
	for _, from := range []string{"p4/p4info", "p4/controller/jobcore", "p4/targets", "jobpb"} {
		g := withImport(t, graph, from, softwarePipeline)
		found := false
		for _, p := range controlPlane {
			found = found || reaches(g, p, softwarePipeline)
		}
		if !found {
			t.Errorf("an import %s -> %s went unnoticed", from, softwarePipeline)
		}
	}
}
