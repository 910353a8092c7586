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
// PostgreSQL sequences may have a negative or zero INCREMENT BY. The pgEdge
// rule with such an increment would repeat or decrease positions, so an
// increment below 1 is clamped to 1: IDs must stay unique and increasing
// whatever the sequence says.
func Next(lastPos, nowMs, increment int64) int64 {
	ms := lastPos >> CountBits
	if nowMs > ms {
		return nowMs << CountBits
	}
	if increment < 1 {
		increment = 1
	}
	// Compare before adding so a huge increment cannot overflow.
	count := lastPos & MaxCount
	if increment > MaxCount-count {
		return (ms + 1) << CountBits
	}
	return lastPos + increment
}
