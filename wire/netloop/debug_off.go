//go:build !netloopdebug

package netloop

const debugTag = false
