package generator

// Next applies the pgEdge nextval rule to positions (ms<<12 | count) and
// returns the position that follows lastPos when the clock reads nowMs (ms
// since the snowflake epoch):
//
//   - if nowMs > ms(last): (nowMs, 0);
//   - else count = count(last) + increment; past 4095 the count wraps to 0
//     and ms becomes ms(last)+1 ("bump into the future").
//
// So INCREMENT 4096 or more gives count 0 and ms+1 on every call, and a clock
// that goes backwards never makes positions go backwards: the result is
// always greater than lastPos.
//
// PostgreSQL sequences may have a negative INCREMENT BY (never zero). The
// extension adds it to the 12-bit count, which wraps below 0 to a value
// past 4095: the next millisecond, count 0, as for an increment of 4096.
// Where it would not wrap (a count above 0 that another path left) the
// extension would go back; this rule bumps then too, so that IDs stay
// unique and increasing whatever the sequence says (docs/compatibility.md).
func Next(lastPos, nowMs, increment int64) int64 {
	return nextBelow(lastPos, nowMs, increment, MaxCount)
}

// FastPathCounts is how many counts of each millisecond the generator
// issues: 0 .. FastPathCounts-1. The server's shim keeps the counts above
// for itself while a lease of its node may be in use, so that the two
// paths can issue in the same millisecond without a shared counter and the
// shim's IDs need not be dated after the lease (docs/state-model.md).
const FastPathCounts = 3072

// NextFast is Next for the generator: the same rule with the count capped
// at FastPathCounts-1, so a count that would pass it moves to the next
// millisecond, as one past 4095 does in Next.
func NextFast(lastPos, nowMs, increment int64) int64 {
	return nextBelow(lastPos, nowMs, increment, FastPathCounts-1)
}

// nextBelow is the rule with counts up to maxCount. A lastPos whose count
// is already above maxCount (another path issued it) moves to the next
// millisecond.
func nextBelow(lastPos, nowMs, increment, maxCount int64) int64 {
	ms := lastPos >> CountBits
	if nowMs > ms {
		return nowMs << CountBits
	}
	if increment < 1 {
		return (ms + 1) << CountBits
	}
	// Compare before adding so a huge increment cannot overflow.
	count := lastPos & MaxCount
	if count > maxCount || increment > maxCount-count {
		return (ms + 1) << CountBits
	}
	return lastPos + increment
}
