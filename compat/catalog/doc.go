// Package catalog is what a proxy session needs to know of the PostgreSQL
// catalog and its server session, as SQL and as typed results: the query
// a session runs on its own server connection at a safe point, and the
// decoding of its one row (sessionstate.go). It does no I/O: package wire
// sends the query as a hidden query and hands the row back. It is apart
// from package compat, whose Service implements wire's interfaces, so that
// wire can use it without an import cycle.
//
// Files: doc.go, sessionstate.go; testdata/state holds rows recorded from
// a real server (go test -run TestStateQueryOnTheServer ./compat/catalog
// -args -update), testdata/fuzz the seeds of FuzzStateDecode.
package catalog
