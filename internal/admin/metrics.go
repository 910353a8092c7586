package admin

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snowflake-proxy/snowflake-proxy/compat"
	"github.com/snowflake-proxy/snowflake-proxy/generator"
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

// collector reads wire.Stats, the lease counters, the node claims and the
// catalog watches once per scrape: the counters stay the atomics wire and
// the generator keep, with no metric updated per message.
type collector struct {
	stats     func() wire.Stats
	claims    func() map[string]compat.ClaimState
	leases    func() generator.LeaseStats
	watches   func() map[string]bool
	counters  []counter
	active    *prometheus.Desc
	errors    *prometheus.Desc
	claim     *prometheus.Desc
	ids       *prometheus.Desc
	fallbacks *prometheus.Desc
	ended     *prometheus.Desc
	renewals  *prometheus.Desc
	failures  *prometheus.Desc
	waits     *prometheus.Desc
	watch     *prometheus.Desc
	node      *prometheus.Desc
	nodeValue float64
	nodeFrom  string

	mu       sync.Mutex
	injected uint64 // the last injected IDs shown: never less (Collect)
}

func newCollector(cfg Config) *collector {
	return &collector{
		stats:   cfg.Stats,
		claims:  cfg.Claims,
		leases:  cfg.Leases,
		watches: cfg.CatalogWatches,
		node: prometheus.NewDesc(namespace+"_node", "This proxy's snowflake.node (0: none), labelled with where it came from: node (--node), hostname (--node-from-hostname) or auto (--node auto).",
			[]string{"source"}, nil),
		nodeValue: float64(cfg.Node),
		nodeFrom:  nodeSource(cfg),
		counters: []counter{
			newCounter("sessions_total", "Client sessions accepted.", func(s *wire.Stats) uint64 { return s.Sessions }),
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
		fallbacks: prometheus.NewDesc(namespace+"_fastpath_fallbacks_total", "Statement executions whose snowflake IDs the server's shim issued instead of the fast path, by reason. "+
			"An INSERT whose targets' defaults the proxy could not learn counts too, snowflake defaults or not.",
			[]string{"reason"}, nil),
		ended: prometheus.NewDesc(namespace+"_sessions_ended_total", "Client sessions that have ended, by outcome (client_closed, login_refused, shutdown_cut, upstream_lost, ...).",
			[]string{"reason"}, nil),
		renewals: prometheus.NewDesc(namespace+"_lease_renewals_total", "Leases of ID positions the fast path asked of the upstream.", nil, nil),
		failures: prometheus.NewDesc(namespace+"_lease_failures_total", "Lease requests that failed.", nil, nil),
		waits:    prometheus.NewDesc(namespace+"_lease_waits_total", "Fast-path calls that waited for a lease (a sequence's first, a lease used up, a fence after shim IDs).", nil, nil),
		watch: prometheus.NewDesc(namespace+"_catalog_watch", "Catalog watch per database: 1 when DDL made elsewhere is seen (event triggers and LISTEN), so INSERT defaults take the fast path; 0 when not.",
			[]string{"database"}, nil),
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
	ch <- c.fallbacks
	ch <- c.ended
	ch <- c.renewals
	ch <- c.failures
	ch <- c.waits
	ch <- c.watch
	ch <- c.node
}

func nodeSource(cfg Config) string {
	switch {
	case cfg.Node == 0:
		return "none"
	case cfg.NodeSource == "":
		return "node"
	}
	return cfg.NodeSource
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	for _, m := range c.counters {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.get(&st)))
	}
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(st.Active))
	ch <- prometheus.MustNewConstMetric(c.node, prometheus.GaugeValue, c.nodeValue, c.nodeFrom)
	ch <- prometheus.MustNewConstMetric(c.ids, prometheus.CounterValue, float64(st.LocalIDs), "local")
	ch <- prometheus.MustNewConstMetric(c.ids, prometheus.CounterValue, float64(c.injectedIDs(&st)), "injected")
	for _, kind := range wire.KindNames() {
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(st.Errors[kind]), kind)
	}
	for _, reason := range wire.FallbackNames() {
		ch <- prometheus.MustNewConstMetric(c.fallbacks, prometheus.CounterValue, float64(st.Fallbacks[reason]), reason)
	}
	for _, reason := range wire.OutcomeNames() {
		ch <- prometheus.MustNewConstMetric(c.ended, prometheus.CounterValue, float64(st.Ended[reason]), reason)
	}
	if c.leases != nil {
		ls := c.leases()
		ch <- prometheus.MustNewConstMetric(c.renewals, prometheus.CounterValue, float64(ls.Renewals))
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(ls.Failures))
		ch <- prometheus.MustNewConstMetric(c.waits, prometheus.CounterValue, float64(ls.Waits))
	}
	if c.watches != nil {
		watches := c.watches()
		for _, db := range sortedKeys(watches) {
			v := 0.0
			if watches[db] {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.watch, prometheus.GaugeValue, v, db)
		}
	}
	if c.claims != nil {
		claims := c.claims()
		for _, db := range sortedKeys(claims) {
			ch <- prometheus.MustNewConstMetric(c.claim, prometheus.GaugeValue, 1, db, claimStateName(claims[db]))
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
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

// Dials is the histogram of upstream connection attempts (wire's
// Config.ObserveDial): made before the wire server, which observes into
// it, and registered by Serve. Dials are per session, not per message.
type Dials struct{ h *prometheus.HistogramVec }

// NewDials returns an empty histogram, with both results shown from the
// start.
func NewDials() *Dials {
	d := &Dials{h: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "upstream_dial_seconds",
		Help: "Time to open a connection to the upstream (TCP, and TLS when used), for sessions and cancel requests, by result (ok or error).",
		// From a local socket to a TLS handshake across regions, up to
		// the default --dial-timeout.
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"result"})}
	d.h.WithLabelValues("ok")
	d.h.WithLabelValues("error")
	return d
}

// Observe records one attempt: wire.Config.ObserveDial.
func (d *Dials) Observe(took time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	d.h.WithLabelValues(result).Observe(took.Seconds())
}
