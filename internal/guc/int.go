package guc

import (
	"math"
	"strconv"
	"strings"
)

// ParseInt mirrors PostgreSQL's parse_int (src/backend/utils/misc/guc.c)
// for an integer setting without unit, so that snowflake.node accepts and
// rejects exactly the values the real extension does: C strtol with
// base 0 (so 0x1F and 017), falling back to strtod when the number stops at
// '.', 'e' or 'E' or overflows, trailing blanks allowed, rounded half to
// even (rint). hint is PostgreSQL's hint when it gives one.
func ParseInt(s string) (v int32, hint string, ok bool) {
	val, end, rangeErr := cStrtol(s)
	if end < len(s) && (s[end] == '.' || s[end] == 'e' || s[end] == 'E') || rangeErr {
		val, end, rangeErr = cStrtod(s)
	}
	if end == 0 || rangeErr || math.IsNaN(val) {
		return 0, "", false
	}
	for end < len(s) && isCSpace(s[end]) {
		end++
	}
	if end != len(s) {
		return 0, "", false
	}
	val = math.RoundToEven(val)
	if val > math.MaxInt32 || val < math.MinInt32 {
		return 0, "Value exceeds integer range.", false
	}
	return int32(val), "", true
}

func isCSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// cStrtol is C's strtol(s, &end, 0) on a 64-bit long: the value (as a
// float64, as parse_int keeps it), the index where parsing stopped (0 when
// nothing was parsed) and whether it overflowed.
func cStrtol(s string) (float64, int, bool) {
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	base := 10
	if i+1 < len(s) && s[i] == '0' && (s[i+1] == 'x' || s[i+1] == 'X') && i+2 < len(s) && digitVal(s[i+2]) < 16 {
		base = 16
		i += 2
	} else if i < len(s) && s[i] == '0' {
		base = 8
	}
	start := i
	var n uint64
	over := false
	limit := uint64(math.MaxInt64)
	if neg {
		limit++
	}
	for i < len(s) {
		d := digitVal(s[i])
		if d >= base {
			break
		}
		if n > (limit-uint64(d))/uint64(base) {
			over = true
		} else {
			n = n*uint64(base) + uint64(d)
		}
		i++
	}
	if i == start {
		return 0, 0, false
	}
	if over {
		return 0, i, true
	}
	v := float64(n)
	if neg {
		v = -v
	}
	return v, i, false
}

func digitVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'z':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'Z':
		return int(c-'A') + 10
	}
	return 99
}

// cStrtod is C's strtod(s, &end) as glibc implements it: decimal and
// hexadecimal floats, inf, infinity and nan. rangeErr reports ERANGE
// (overflow, or underflow to zero or a subnormal).
func cStrtod(s string) (v float64, end int, rangeErr bool) {
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	start := i
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	rest := strings.ToLower(s[i:min(len(s), i+8)])
	switch {
	case strings.HasPrefix(rest, "infinity"):
		return parseSpecial(s[start : i+8]), i + 8, false
	case strings.HasPrefix(rest, "inf"):
		return parseSpecial(s[start : i+3]), i + 3, false
	case strings.HasPrefix(rest, "nan"):
		return math.NaN(), i + 3, false
	}
	hex := i+1 < len(s) && s[i] == '0' && (s[i+1] == 'x' || s[i+1] == 'X')
	digits := func(j int) (int, bool) {
		any := false
		for j < len(s) && (hex && digitVal(s[j]) < 16 || !hex && s[j] >= '0' && s[j] <= '9') {
			j++
			any = true
		}
		return j, any
	}
	j := i
	if hex {
		j += 2
	}
	j, intDigits := digits(j)
	fracDigits := false
	if j < len(s) && s[j] == '.' {
		j, fracDigits = digits(j + 1)
	}
	if !intDigits && !fracDigits {
		if hex { // "0x" with no digit: strtod parses the "0"
			return 0, i + 1, false
		}
		return 0, 0, false
	}
	mant := s[start:j]
	if mant[len(mant)-1] == '.' {
		mant = mant[:len(mant)-1]
	}
	exp := "p0"
	if j < len(s) && (hex && (s[j] == 'p' || s[j] == 'P') || !hex && (s[j] == 'e' || s[j] == 'E')) {
		k := j + 1
		if k < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		e := k
		for e < len(s) && s[e] >= '0' && s[e] <= '9' {
			e++
		}
		if e > k {
			exp = s[j:e]
			j = e
		}
	}
	text := mant
	if hex {
		text += exp
	} else if exp != "p0" {
		text += exp
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return v, j, true
		}
		return 0, 0, false
	}
	if v != 0 && math.Abs(v) < 0x1p-1022 || v == 0 && hasNonZeroDigit(mant) {
		return v, j, true // underflow: glibc sets ERANGE
	}
	return v, j, false
}

func parseSpecial(s string) float64 {
	if strings.HasPrefix(s, "-") {
		return math.Inf(-1)
	}
	return math.Inf(1)
}

func hasNonZeroDigit(s string) bool {
	if i := strings.IndexAny(s, "xX"); i >= 0 {
		s = s[i+1:]
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= '1' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f' || s[i] >= 'A' && s[i] <= 'F' {
			return true
		}
	}
	return false
}
