package controller

import (
	"context"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/switchjob"
)

// controlState is why the controller cannot program its switch: another
// controller took primaryship there. The zero value: it can.
type controlState struct {
	mu   sync.Mutex
	lost string
}

// SetControlLost records why the controller is not primary on the switch
// (who took primaryship, and when), or clears it with "". Status reports it
// as control_lost.
func (s *JobService) SetControlLost(why string) {
	s.control.mu.Lock()
	s.control.lost = why
	s.control.mu.Unlock()
}

// ControlLost is what SetControlLost last recorded.
func (s *JobService) ControlLost() string {
	s.control.mu.Lock()
	defer s.control.mu.Unlock()
	return s.control.lost
}

// controlled is a switch connection that programs only while its client
// is primary: while the client takes primaryship back it waits for that
// (within the call's context), and otherwise it fails with the reason (who
// took primaryship, and when) rather than letting the switch refuse each
// write with PERMISSION_DENIED. Removals wait too, so that a job ending
// during a takeover does not leave its entries behind.
type controlled struct{ *p4rt.Client }

func (c controlled) InstallJob(ctx context.Context, j switchjob.Placement) error {
	if err := c.AwaitControl(ctx); err != nil {
		return err
	}
	return c.Client.InstallJob(ctx, j)
}

func (c controlled) RemoveJob(ctx context.Context, j switchjob.Placement) error {
	if err := c.AwaitControl(ctx); err != nil {
		return err
	}
	return c.Client.RemoveJob(ctx, j)
}

func (c controlled) ResetPool(ctx context.Context, base, size, slots int) error {
	if err := c.AwaitControl(ctx); err != nil {
		return err
	}
	return c.Client.ResetPool(ctx, base, size, slots)
}

// control follows whether the controller is primary on each switch it
// programs, for the job service's Status and for Prometheus: the
// switchml_controller_primary gauge and the count of primaryship losses.
type control struct {
	mu   sync.Mutex
	lost map[string]string // by P4Runtime target: why the controller is not primary there
	svc  *JobService

	primary prometheus.Gauge
	losses  prometheus.Counter
}

func newControl() *control {
	return &control{
		lost: map[string]string{},
		primary: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchml_controller_primary",
			Help: "1 while the controller is the primary P4Runtime controller of every switch it programs, else 0.",
		}),
		losses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchml_controller_primary_lost_total",
			Help: "Times another controller took primaryship of a switch from this one.",
		}),
	}
}

// watch returns the OnControl callback of the client of the switch at
// target.
func (c *control) watch(target string) func(cause string, taken bool) {
	return func(cause string, taken bool) {
		if taken {
			c.losses.Inc()
		}
		c.mu.Lock()
		if cause == "" {
			delete(c.lost, target)
		} else {
			c.lost[target] = cause
		}
		c.publish()
		c.mu.Unlock()
	}
}

// attach makes svc report the control state from now on.
func (c *control) attach(svc *JobService) {
	c.mu.Lock()
	c.svc = svc
	c.publish()
	c.mu.Unlock()
}

// publish hands the state to the gauge and the job service. Callers hold
// c.mu.
func (c *control) publish() {
	if len(c.lost) == 0 {
		c.primary.Set(1)
	} else {
		c.primary.Set(0)
	}
	if c.svc == nil {
		return
	}
	causes := make([]string, 0, len(c.lost))
	for _, why := range c.lost {
		causes = append(causes, why)
	}
	sort.Strings(causes)
	c.svc.SetControlLost(strings.Join(causes, "; "))
}

func (c *control) Describe(ch chan<- *prometheus.Desc) {
	c.primary.Describe(ch)
	c.losses.Describe(ch)
}

func (c *control) Collect(ch chan<- prometheus.Metric) {
	c.primary.Collect(ch)
	c.losses.Collect(ch)
}
