package admin

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snowflake-proxy/snowflake-proxy/compat"
	"github.com/snowflake-proxy/snowflake-proxy/wire"
)

const namespace = "snowflake_proxy"

// counter is one Stats field exposed as a Prometheus counter.
type counter struct {
	desc *prometheus.Desc
	get  func(*wire.Stats) uint64
}

func newCounter(name, help string, get func(*wire.Stats) uint64) counter {
	return counter{prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, nil, nil), get}
}

// collector reads wire.Stats once per scrape and the node claims: the
// counters stay the atomics wire keeps, with no metric updated per message.
type collector struct {
	stats    func() wire.Stats
	claims   func() map[string]compat.ClaimState
	counters []counter
	active   *prometheus.Desc
	errors   *prometheus.Desc
	claim    *prometheus.Desc
	ids      *prometheus.Desc

	mu       sync.Mutex
	injected uint64 // the last injected IDs shown: never less (Collect)
}

func newCollector(stats func() wire.Stats, claims func() map[string]compat.ClaimState) *collector {
	return &collector{
		stats:  stats,
		claims: claims,
		counters: []counter{
			newCounter("sessions_total", "Client sessions accepted.", func(s *wire.Stats) uint64 { return s.Sessions }),
			newCounter("sessions_ended_total", "Client sessions that have ended.", func(s *wire.Stats) uint64 {
				if s.Active < 0 || uint64(s.Active) > s.Sessions {
					return 0
				}
				return s.Sessions - uint64(s.Active)
			}),
			newCounter("cancels_total", "Cancel requests forwarded to the upstream.", func(s *wire.Stats) uint64 { return s.Cancels }),
			newCounter("end_cancels_total", "Cancel requests the proxy sent for a statement still running when its session ended.",
				func(s *wire.Stats) uint64 { return s.EndCancels }),
			newCounter("local_answers_total", "Statements answered by the proxy without the upstream.", func(s *wire.Stats) uint64 { return s.LocalAnswers }),
			newCounter("hidden_queries_total", "Queries the proxy ran on session connections to refresh what it knows of the session.",
				func(s *wire.Stats) uint64 { return s.HiddenQueries }),
			newCounter("prepared_inserts_total", "Simple-protocol INSERTs run as a statement the proxy prepared.", func(s *wire.Stats) uint64 { return s.PreparedInserts }),
			newCounter("accept_errors_total", "Failed accepts of client connections that were retried.", func(s *wire.Stats) uint64 { return s.AcceptErrors }),
			newCounter("event_loop_entries_total", "Times a session went into an event loop.", func(s *wire.Stats) uint64 { return s.LoopEntries }),
			newCounter("event_loop_handovers_total", "Times an event loop handed a session back to its own goroutines.", func(s *wire.Stats) uint64 { return s.Handovers }),
		},
		active: prometheus.NewDesc(namespace+"_client_sessions", "Client sessions running now.", nil, nil),
		errors: prometheus.NewDesc(namespace+"_session_errors_total", "Sessions ended by an error, by kind.", []string{"kind"}, nil),
		ids: prometheus.NewDesc(namespace+"_ids_issued_total", "Snowflake IDs issued by the proxy's fast path: path local in answers the proxy sent, injected in statements sent to the upstream. IDs the upstream's shim made are not counted.",
			[]string{"path"}, nil),
		claim: prometheus.NewDesc(namespace+"_node_claim", "State of this proxy's node claim per database: 1 for the current state (held, pending, conflict or error).",
			[]string{"database", "state"}, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.counters {
		ch <- m.desc
	}
	ch <- c.active
	ch <- c.errors
	ch <- c.claim
	ch <- c.ids
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	for _, m := range c.counters {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.get(&st)))
	}
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(st.Active))
	ch <- prometheus.MustNewConstMetric(c.ids, prometheus.CounterValue, float64(st.LocalIDs), "local")
	ch <- prometheus.MustNewConstMetric(c.ids, prometheus.CounterValue, float64(c.injectedIDs(&st)), "injected")
	for _, kind := range wire.KindNames() {
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(st.Errors[kind]), kind)
	}
	if c.claims == nil {
		return
	}
	claims := c.claims()
	dbs := make([]string, 0, len(claims))
	for db := range claims {
		dbs = append(dbs, db)
	}
	sort.Strings(dbs)
	for _, db := range dbs {
		ch <- prometheus.MustNewConstMetric(c.claim, prometheus.GaugeValue, 1, db, claimStateName(claims[db]))
	}
}

func claimStateName(st compat.ClaimState) string {
	switch {
	case st.Held:
		return "held"
	case st.Pending:
		return "pending"
	case st.Conflict:
		return "conflict"
	default:
		return "error"
	}
}

// injectedIDs is FastIDs - LocalIDs, kept from going down: a scrape
// between a statement's FastIDs and its LocalIDs counts its IDs as
// injected until then, and a counter must not decrease (Prometheus would
// take it for a restart).
func (c *collector) injectedIDs(st *wire.Stats) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.FastIDs >= st.LocalIDs {
		c.injected = max(c.injected, st.FastIDs-st.LocalIDs)
	}
	return c.injected
}
