// Package guc checks values of integer settings as PostgreSQL does, so that
// the proxy accepts and refuses snowflake.node values with the server's own
// rules and messages where a stock server knows the setting only as a
// placeholder that takes any text. Both rewrite (SET snowflake.node) and
// wire (snowflake.node in a startup packet) use it; it is pure Go.
//
//   - int.go: ParseInt, PostgreSQL's parse_int for a setting without unit
//     (C strtol and strtod semantics).
//   - check.go: CheckInt, the value checks and messages of
//     parse_and_validate_value.
package guc
