package rewrite

import (
	"strconv"
	"testing"
)

var sinkBool bool

// BenchmarkPrefilter measures NeedsParse on typical statements that need no
// parse (the common case) and one that does.
func BenchmarkPrefilter(b *testing.B) {
	for _, c := range []struct{ name, sql string }{
		{"select", "SELECT id, name, created_at FROM orders WHERE customer_id = $1 AND status = $2 ORDER BY created_at DESC LIMIT 50"},
		{"insert", "INSERT INTO orders (customer_id, status, note) VALUES ($1, $2, $3) RETURNING id"},
		{"snowflake", "SELECT snowflake.nextval()"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				sinkBool = NeedsParse(c.sql)
			}
		})
	}
}

func BenchmarkPlanCacheHit(b *testing.B) {
	r := New(Config{})
	sql := "SELECT snowflake.nextval()"
	r.Plan(sql)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r.Plan(sql) == nil {
				b.Fatal("nil")
			}
		}
	})
}

func BenchmarkPlanCacheHitSerial(b *testing.B) {
	r := New(Config{})
	sql := "INSERT INTO orders (id, note) VALUES (snowflake.nextval('orders_id_seq'), $1) RETURNING id"
	r.Plan(sql)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if r.Plan(sql) == nil {
			b.Fatal("nil")
		}
	}
}

// BenchmarkPlanCacheMiss measures a full analysis: parse, scan, template.
func BenchmarkPlanCacheMiss(b *testing.B) {
	r := New(Config{})
	sqls := make([]string, 1024)
	for i := range sqls {
		sqls[i] = "SELECT snowflake.nextval() + " + strconv.Itoa(i) + " AS id"
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r.Plan(sqls[i%len(sqls)] + " ") // never cached before
		if i%len(sqls) == 0 {
			r = New(Config{})
		}
	}
}
