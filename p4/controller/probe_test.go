package controller

import "testing"

// The CLI's controller probes its data plane (Run refuses registrations
// while no switch answers there); only a software switch answers probes.
func TestPrepareProbesTheSoftswitchDataplane(t *testing.T) {
	cfg, err := flagDefaults("").Prepare()
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.ProbeDataplane || !cfg.Switch.capabilities().AnswersProbe {
		t.Errorf("ProbeDataplane %v, the software switch answers probes %v; want both", cfg.ProbeDataplane, cfg.Switch.capabilities().AnswersProbe)
	}
	tofino, err := TargetFor(KindTofino, 0)
	if err != nil {
		t.Fatal(err)
	}
	if tofino.capabilities().AnswersProbe {
		t.Error("a Tofino's program answers no probe, but its kind says it does")
	}
	// An unprobed target refuses nothing for it.
	if why := cfg.Switch.dataplane.refusal(); why != "" {
		t.Errorf("before any probe: %q", why)
	}
}
