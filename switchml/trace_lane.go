package switchml

import (
	"time"

	"github.com/switchml/switchml-go/switchml/engine"
)

// laneMark follows one op of a traced lane: when it started, when its
// first result came, and the retransmission burst in progress.
type laneMark struct {
	start, first time.Time
	base         engine.LaneStats
	// waitAfter: a first result later than this after the start is a
	// wait for the slowest peer (every worker's packet must reach the
	// switch before any result comes back).
	waitAfter time.Duration
	seen      engine.LaneStats // as of the last note

	// The burst: timeouts no more than two retransmission timeouts
	// apart, until the first result after the last of them.
	burst                 bool
	burstStart, burstLast time.Time
	burstEnd              time.Time // zero until a result follows the last timeout
	burstTimeouts         uint64
}

func (l *laneDriver) beginMark() laneMark {
	rtt, rto := l.eng.RTT()
	wait := 4 * rtt
	if rtt == 0 {
		wait = rto // nothing measured yet: the first timeout
	}
	st := l.eng.Stats()
	return laneMark{start: time.Now(), base: st, seen: st, waitAfter: max(wait, time.Millisecond)}
}

// noteMark looks at the engine's counters after a round of the drive loop.
func (l *laneDriver) noteMark(m *laneMark) {
	st := l.eng.Stats()
	if st.Results == m.seen.Results && st.Timeouts == m.seen.Timeouts {
		return
	}
	now := time.Now()
	if st.Results > m.seen.Results {
		if m.first.IsZero() {
			m.first = now
			if now.Sub(m.start) > m.waitAfter {
				l.trace.span(l.tid, "wait", "wait for peers", "", m.start, now)
			}
		}
		if m.burst && m.burstEnd.IsZero() {
			m.burstEnd = now
		}
	}
	if st.Timeouts > m.seen.Timeouts {
		_, rto := l.eng.RTT()
		if m.burst && now.Sub(m.burstLast) > 2*rto {
			l.flushBurst(m, now)
		}
		if !m.burst {
			m.burst, m.burstStart = true, now
		}
		m.burstLast, m.burstEnd = now, time.Time{}
		m.burstTimeouts += st.Timeouts - m.seen.Timeouts
	}
	m.seen = st
}

// flushBurst records the burst in progress, which ends at its recovery or
// else at now.
func (l *laneDriver) flushBurst(m *laneMark, now time.Time) {
	end := m.burstEnd
	if end.IsZero() {
		end = now
	}
	l.trace.span(l.tid, "loss", "retransmit burst", "", m.burstStart, end, traceArg{"timeouts", int64(m.burstTimeouts)})
	m.burst, m.burstTimeouts = false, 0
}

// endMark records the lane's span of the op, and a burst still open.
func (l *laneDriver) endMark(m *laneMark, elements int, err error) {
	l.noteMark(m)
	now := time.Now()
	if m.burst {
		l.flushBurst(m, now)
	}
	st := l.eng.Stats()
	detail := ""
	if err != nil {
		detail = err.Error()
	}
	l.trace.span(l.tid, "lane", "lane", detail, m.start, now,
		traceArg{"elements", int64(elements)},
		traceArg{"packets", int64(st.Sent + st.Retransmits - m.base.Sent - m.base.Retransmits)},
		traceArg{"retransmits", int64(st.Retransmits - m.base.Retransmits)},
		traceArg{"timeouts", int64(st.Timeouts - m.base.Timeouts)})
}
