//go:build tools

// Package deps pins modules that are used only by some build configurations.
package deps

import (
	_ "github.com/jackc/pgx/v5/pgproto3"
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"
	_ "github.com/pganalyze/pg_query_go/v6"
	_ "gorm.io/driver/postgres"
	_ "gorm.io/gorm"
)
