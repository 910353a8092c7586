package pgmsg

// CommandComplete is a CommandComplete ('C', from the server) body: the
// command tag.
type CommandComplete struct {
	Tag []byte // without its NUL
}

// ReadCommandComplete reads a CommandComplete body; ok is false unless it
// is exactly one NUL-terminated string.
func ReadCommandComplete(body []byte) (m CommandComplete, ok bool) {
	tag, ok := onlyCString(body)
	return CommandComplete{Tag: tag}, ok
}

// Append appends the whole message.
func (m CommandComplete) Append(dst []byte) []byte { return AppendCommandComplete(dst, m.Tag) }

// AppendCommandComplete appends a CommandComplete with tag.
func AppendCommandComplete[S ~string | ~[]byte](dst []byte, tag S) []byte {
	dst, start := Begin(dst, TypeCommandComplete)
	return Finish(AppendCString(dst, tag), start)
}
