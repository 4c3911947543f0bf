package jobcore

import "testing"

// TestStatusBoundsAddresses: past the byte budget of lane addresses, a
// job's further ranks are counted, not listed.
func TestStatusBoundsAddresses(t *testing.T) {
	rg := newRig(t, 64)
	for r := range uint32(6) {
		if err := rg.c.admit(rg.waiter(), regReq("wide", r, 6, 1, 4, 50), "test", rg.now); err != nil {
			t.Fatal(err)
		}
	}
	jobs, next := rg.c.StatusJobs(rg.now, 0, 10, StatusView{RankBytes: 3 * 40})
	if len(jobs) != 1 || next != 0 {
		t.Fatalf("%d jobs, next %d", len(jobs), next)
	}
	j := jobs[0]
	if len(j.GetRanks()) == 6 || len(j.GetRanks())+int(j.GetRanksOmitted()) != 6 {
		t.Errorf("%d ranks listed, %d omitted; want a bounded list that counts the rest", len(j.GetRanks()), j.GetRanksOmitted())
	}
}
