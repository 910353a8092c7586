package pgtest

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of a proxy's /metrics, parsed with the Prometheus
// text parser: what a Prometheus server would read.
type Metrics map[string]*dto.MetricFamily

var metricsClient = &http.Client{Timeout: 15 * time.Second}

// Scrape reads and parses /metrics of the admin listener at addr.
func Scrape(tb testing.TB, addr string) Metrics {
	tb.Helper()
	resp, err := metricsClient.Get("http://" + addr + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("/metrics: %d %s", resp.StatusCode, b)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		tb.Fatalf("/metrics does not parse: %v", err)
	}
	return mfs
}

// Value is the series of family name whose labels include labels (name,
// value, name, value...): a counter's or a gauge's value, a histogram's
// sample count. It fails the test when there is none.
func (m Metrics) Value(tb testing.TB, name string, labels ...string) float64 {
	tb.Helper()
	for _, s := range m.series(tb, name, labels) {
		switch {
		case s.Counter != nil:
			return s.Counter.GetValue()
		case s.Gauge != nil:
			return s.Gauge.GetValue()
		case s.Histogram != nil:
			return float64(s.Histogram.GetSampleCount())
		}
	}
	tb.Fatalf("no metric %s%v", name, labels)
	return 0
}

// Has reports whether family name has a series whose labels include
// labels.
func (m Metrics) Has(tb testing.TB, name string, labels ...string) bool {
	tb.Helper()
	return len(m.series(tb, name, labels)) > 0
}

// series are the series of family name whose labels include labels; the
// family must exist.
func (m Metrics) series(tb testing.TB, name string, labels []string) []*dto.Metric {
	tb.Helper()
	mf := m[name]
	if mf == nil {
		tb.Fatalf("no metric %s", name)
	}
	var out []*dto.Metric
next:
	for _, s := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range s.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}

// Sum adds the values of every series of family name.
func (m Metrics) Sum(tb testing.TB, name string) float64 {
	tb.Helper()
	sum := 0.0
	for _, s := range m.series(tb, name, nil) {
		sum += s.GetCounter().GetValue() + s.GetGauge().GetValue()
	}
	return sum
}
