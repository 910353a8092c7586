package generator

import (
	"fmt"
	"time"
)

// The pgEdge snowflake layout (extension 2.x; the pre-2.0 order put the node
// in the low bits and must not be produced):
//
//	bit 63      sign, always 0
//	bits 22-62  ms since 2023-01-01 00:00:00 UTC (41 bits)
//	bits 12-21  node, 1..1023 (10 bits)
//	bits 0-11   count inside one millisecond (12 bits)
const (
	// EpochUnixMs is the snowflake epoch, 2023-01-01 00:00:00 UTC, in Unix ms.
	EpochUnixMs int64 = 1672531200000

	CountBits = 12
	NodeBits  = 10
	MsBits    = 41

	NodeShift = CountBits            // 12
	MsShift   = CountBits + NodeBits // 22

	MaxCount = 1<<CountBits - 1 // 4095
	MaxNode  = 1<<NodeBits - 1  // 1023
	MaxMs    = 1<<MsBits - 1    // about year 2092

	// MaxPosition is the largest position (ms<<12 | count) whose ID still
	// fits in a positive int8.
	MaxPosition int64 = MaxMs<<CountBits | MaxCount
)

// Compose builds an ID. It does not check ranges: callers pass ms in
// 0..MaxMs, node in 0..MaxNode and count in 0..MaxCount.
func Compose(ms int64, node, count int) int64 {
	return ms<<MsShift | int64(node)<<NodeShift | int64(count)
}

// Decompose splits an ID into its fields. The sign bit is ignored, so any
// int8 decodes the way the extension's get_* functions decode it.
func Decompose(id int64) (ms int64, node, count int) {
	return (id >> MsShift) & MaxMs, int(id>>NodeShift) & MaxNode, int(id) & MaxCount
}

// Position is the node-independent part of an ID that the generation rule
// orders: ms<<12 | count. Positions of one key increase with its IDs.
func Position(ms int64, count int) int64 { return ms<<CountBits | int64(count) }

// PositionOf returns the position of id.
func PositionOf(id int64) int64 {
	ms, _, count := Decompose(id)
	return Position(ms, count)
}

// IDAt places node between the ms and count bits of pos.
func IDAt(pos int64, node int) int64 {
	return (pos>>CountBits)<<MsShift | int64(node)<<NodeShift | pos&MaxCount
}

// Time returns the instant of the ms field of id, in UTC.
func Time(id int64) time.Time {
	ms, _, _ := Decompose(id)
	return time.UnixMilli(ms + EpochUnixMs).UTC()
}

// Decoded is an ID split into the fields a person wants to see; the CLI's
// decode subcommand prints it.
type Decoded struct {
	ID     int64     `json:"id"`
	Ms     int64     `json:"ms"`      // ms since the snowflake epoch
	UnixMs int64     `json:"unix_ms"` // ms since the Unix epoch
	Epoch  string    `json:"epoch"`   // snowflake.get_epoch(id), e.g. "1704996539.845"
	Time   time.Time `json:"time"`    // UTC
	Node   int       `json:"node"`
	Count  int       `json:"count"`
}

// Decode splits id into a Decoded.
func Decode(id int64) Decoded {
	ms, node, count := Decompose(id)
	unix := ms + EpochUnixMs
	return Decoded{
		ID:     id,
		Ms:     ms,
		UnixMs: unix,
		Epoch:  fmt.Sprintf("%d.%03d", unix/1000, unix%1000),
		Time:   time.UnixMilli(unix).UTC(),
		Node:   node,
		Count:  count,
	}
}
