package guc

import "strconv"

// Error is PostgreSQL's complaint about a value for a setting; the server
// sends it with SQLSTATE 22023 (invalid_parameter_value).
type Error struct {
	Message string
	Hint    string // "" when PostgreSQL gives none
}

func (e *Error) Error() string { return e.Message }

// CheckInt validates value for an integer setting without unit whose
// bounds are min and max, as parse_and_validate_value does. name is the
// setting's name as the statement spelled it: PostgreSQL's messages quote
// it so.
func CheckInt(name, value string, min, max int32) (int32, *Error) {
	n, hint, ok := ParseInt(value)
	if !ok {
		return 0, &Error{Message: `invalid value for parameter "` + name + `": "` + value + `"`, Hint: hint}
	}
	if n < min || n > max {
		return 0, &Error{Message: strconv.Itoa(int(n)) + ` is outside the valid range for parameter "` + name +
			`" (` + strconv.Itoa(int(min)) + ` .. ` + strconv.Itoa(int(max)) + `)`}
	}
	return n, nil
}
