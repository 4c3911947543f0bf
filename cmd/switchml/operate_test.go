package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/switchml"
)

// TestStatusShowsLiveJobs: switchml status against a controller with two
// live jobs lists both, with their ranks, lane addresses and slots, as a
// table and as JSON.
func TestStatusShowsLiveJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fab, err := local.Start(ctx, local.Options{Slots: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer fab.Close()
	type job struct {
		name           string
		workers, lanes int
		window         int
	}
	jobs := []job{{"alpha", 2, 2, 16}, {"beta", 3, 1, 64}}
	var all []*switchml.Session
	defer func() {
		for _, s := range all {
			s.Close()
		}
	}()
	for _, j := range jobs {
		sessions := make([]*switchml.Session, j.workers)
		errs := make([]error, j.workers)
		var wg sync.WaitGroup
		for r := range sessions {
			wg.Go(func() {
				sessions[r], errs[r] = switchml.Join(ctx, switchml.Config{Controller: fab.ControllerAddr(), Job: j.name, Rank: r, Workers: j.workers, Lanes: j.lanes, Window: j.window})
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		all = append(all, sessions...)
	}

	var out bytes.Buffer
	if err := statusCommand(ctx, []string{"--controller", fab.ControllerAddr()}, &out); err != nil {
		t.Fatal(err)
	}
	table := out.String()
	t.Logf("switchml status:\n%s", table)
	base := 0
	for _, j := range jobs {
		size := j.lanes * j.window
		// Jobs take partitions in the order they were placed.
		row := fmt.Sprintf(`(?m)^%s\s+active\s+%d/%d\s+%d x %d\s+256\s+%d-%d \(%d\)\s`, j.name, j.workers, j.workers, j.lanes, j.window, base, base+size-1, size)
		if !regexp.MustCompile(row).MatchString(table) {
			t.Errorf("no row %q in the table", row)
		}
		for r := range j.workers {
			if !regexp.MustCompile(fmt.Sprintf(`(?m)^%s\s+%d\s+held\s+127\.0\.0\.1:\d+`, j.name, r)).MatchString(table) {
				t.Errorf("job %s rank %d is not listed with its lease and addresses", j.name, r)
			}
		}
		base += size
	}
	if !strings.Contains(table, fmt.Sprintf("%d of 512 slots per set in use", base)) || !strings.Contains(table, "received") {
		t.Errorf("the pool's use or the switch's counters are missing")
	}

	out.Reset()
	if err := statusCommand(ctx, []string{"--controller", fab.ControllerAddr(), "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var st struct {
		SlotsInUse int `json:"slots_in_use"`
		Jobs       []struct {
			Name     string `json:"name"`
			PoolSize int    `json:"pool_size"`
			Ranks    []struct {
				LaneAddresses []string `json:"lane_addresses"`
			} `json:"ranks"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("--json: %v\n%s", err, out.String())
	}
	if st.SlotsInUse != base || len(st.Jobs) != 2 || st.Jobs[1].Name != "beta" || st.Jobs[1].PoolSize != 64 || len(st.Jobs[0].Ranks) != 2 || len(st.Jobs[0].Ranks[0].LaneAddresses) != 2 {
		t.Errorf("--json: %+v", st)
	}
}

// scrape reads a Prometheus text page: value by series as written
// ("name" or `name{label="value"}`).
// series is the value of the one series of family in scraped, labelled by
// a switch job id; -1 if there is not exactly one.
func series(scraped map[string]float64, family string) float64 {
	v, n := -1.0, 0
	for k, x := range scraped {
		if strings.HasPrefix(k, family+`{job_id="`) {
			v, n = x, n+1
		}
	}
	if n != 1 {
		return -1
	}
	return v
}

func scrape(addr string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	p, err := harness.FreePort("tcp")
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(p)
}

// TestMetricsAndTraceOfAJob runs the switch, the controller and two
// workers as processes with --metrics, the workers losing packets
// (--drop) and writing --trace; it scrapes all four while the job runs
// and the switch after, and reads the timelines.
func TestMetricsAndTraceOfAJob(t *testing.T) {
	swM, ctlM := freeAddr(t), freeAddr(t)
	f := startFabricWith(t, nil, "", []string{"--metrics", swM}, []string{"--metrics", ctlM})
	const workers, elements, iters, warmup, pe = 2, 300_000, 30, 1, 256
	dir := t.TempDir()
	wm := make([]string, workers)
	ps := make([]*proc, workers)
	for r := range ps {
		wm[r] = freeAddr(t)
		ps[r] = spawn(t, nil, "allreduce", "--controller", f.controller, "--job", "watched", "--rank", strconv.Itoa(r), "--workers", strconv.Itoa(workers),
			"--elements", strconv.Itoa(elements), "--iters", strconv.Itoa(iters), "--warmup", strconv.Itoa(warmup), "--packet-elements", strconv.Itoa(pe),
			"--lanes", "2", "--window", "16", "--drop", "0.01", "--metrics", wm[r], "--trace", filepath.Join(dir, fmt.Sprintf("rank%d.json", r)))
	}

	// During the job: the controller shows it live, every worker has
	// reduced something and the switch has aggregated it.
	deadline := time.Now().Add(2 * time.Minute)
	var during map[string]float64
	for {
		ctl, err1 := scrape(ctlM)
		w0, err2 := scrape(wm[0])
		sw, err3 := scrape(swM)
		if err1 == nil && err2 == nil && err3 == nil && ctl[`switchml_controller_jobs{state="active"}`] == 1 && w0[`switchml_worker_reduced_elements_total{job="watched",rank="0"}`] > 0 {
			during = sw
			if series(ctl, "switchml_controller_job_slots") != 32 || series(ctl, "switchml_controller_job_workers") != workers {
				t.Errorf("controller during the job: %v", ctl)
			}
			for k := range ctl {
				if strings.Contains(k, "watched") {
					t.Errorf("the controller's metrics name the job: %s", k)
				}
			}
			if sw["switchml_switch_contributions_aggregated_total"] == 0 {
				t.Errorf("a worker has a result, and the switch aggregated nothing: %v", sw)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scrape showed the job running (errors %v, %v, %v)", err1, err2, err3)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for r, p := range ps {
		if err := p.wait(t, 3*time.Minute); err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, p.Logs())
		}
	}
	after, err := scrape(swM)
	if err != nil {
		t.Fatal(err)
	}
	packets := float64((iters + warmup) * workers * ((elements + pe - 1) / pe))
	if got := after["switchml_switch_received_packets_total"]; got < packets || got < during["switchml_switch_received_packets_total"] {
		t.Errorf("switch received %v packets, want at least %v (elements / packet size x workers x calls) and no fewer than during the job (%v)", got, packets, during["switchml_switch_received_packets_total"])
	}
	if got := after["switchml_switch_received_bytes_total"]; got < packets*pe*4 {
		t.Errorf("switch received %v bytes, want at least %v", got, packets*pe*4)
	}
	// Workers dropped 1% of their packets: they retransmitted, and the
	// switch's incomplete-retransmission drops or answers show it.
	if after[`switchml_switch_drops_total{reason="incomplete_retransmit"}`]+after["switchml_switch_retransmissions_answered_total"] == 0 {
		t.Errorf("workers lost packets, and the switch saw no retransmission: %v", after)
	}

	for r := range workers {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank%d.json", r)))
		if err != nil {
			t.Fatal(err)
		}
		var tr struct {
			TraceEvents []struct {
				Ph, Name string
				Tid      int
				Args     map[string]any
			} `json:"traceEvents"`
		}
		if err := json.Unmarshal(b, &tr); err != nil {
			t.Fatalf("rank %d trace: %v", r, err)
		}
		count := map[string]int{}
		retx := 0.0
		for _, e := range tr.TraceEvents {
			if e.Ph == "X" {
				count[e.Name]++
				if e.Name == "lane" {
					retx += e.Args["retransmits"].(float64)
				}
			}
		}
		calls := iters + warmup
		if count["allreduce"] != calls || count["lane"] != 2*calls || count["barrier"] != 2*calls {
			t.Errorf("rank %d timeline: %v, want %d allreduce, %d lane and %d barrier spans", r, count, calls, 2*calls, 2*calls)
		}
		if retx == 0 || count["retransmit burst"] == 0 {
			t.Errorf("rank %d dropped 1%% of its packets; its timeline shows %v retransmissions and %d bursts", r, retx, count["retransmit burst"])
		}
	}
}
