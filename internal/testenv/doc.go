// Package testenv is the one way a test says that it cannot run on this
// machine (a program, a kernel feature or a permission it needs is
// missing): CannotRun fails it, saying why, unless
// SNOWFLAKE_PROXY_TEST_ALLOW_SKIP=1 asks for a skip. No test skips
// silently. It imports nothing of the project, so that every package's
// tests may use it.
//
// Files:
//
//   - testenv.go: EnvAllowSkip, CannotRun.
package testenv
