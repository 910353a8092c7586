// Package netloop is the session I/O machinery of package wire, apart
// from the protocol: the event loops (io_uring or epoll, Linux), the non-blocking
// socket calls the pumps use, the readers and writers a loop puts under a
// session's buffers, the parking of the pumps, and the hand-off of a
// session between a loop thread and its goroutines. It knows of a message
// only its framing (a type byte and a length word that counts itself and
// the body); wire's handlers do the rest, through Steps.
//
// # Files
//
//   - input.go: Input, one side's buffered input whose source changes
//     with who relays the session, and the framing checks.
//   - sock.go (unix), sock_other.go: the pumps' socket calls: Input.Poll
//     reads inside one RawConn.Read with raw non-blocking reads, and
//     UseSockWriter writes with raw system calls, so that a write that
//     wakes the peer does not hand the thread's P to another (sysmon);
//     elsewhere the pumps use net.Conn only.
//   - relay.go: Side, Stepper, Steps, Exit and Relay, a session's part of the
//     machinery; relay_linux.go: Relay.Enter, Wait and Leave, and the
//     loop thread's turn on one readiness event.
//   - loop_linux.go: Loop, the epoll thread, and the raw loop reader and
//     writer; loop_other.go: no loops elsewhere (Available is false).
//   - io.go: IO, the loop's backend (auto, epoll, io_uring).
//   - uring_linux.go: the io_uring backend of Loop: a receive armed on
//     each side of every session, into buffers the kernel picks from the
//     loop's provided ones, sends queued per side, one io_uring_enter per
//     batch of completions, and the cancelling handover;
//     ring_linux.go: the ring itself (io_uring_setup, the mapped queues,
//     the provided-buffer ring) with raw system calls.
//   - tls.go: TLSConn, a crypto/tls.Conn over a Transport whose source
//     and sink change with who relays the session (the socket, the pumps'
//     raw reads and writes, a loop's reader and writer), so that a loop
//     relays TLS records as it relays plaintext (docs/tls-loop.md);
//     tlsswitch.go: the traffic secrets a handshake logs, and the move of
//     a TLS 1.3 connection to its own records after it; record13.go:
//     records13, that record layer (AES-GCM, KeyUpdate, alerts).
//   - yield.go: schedPass, which makes a busy loop thread's goroutine
//     pass through the Go scheduler every few milliseconds, so that the
//     runtime's monitor thread does not take to preempting it.
//   - park.go: ErrHandover, ErrWantLoop, and the parking that brings a
//     session back to its loop.
//   - debug.go, debug_on.go, debug_off.go: the loop-thread check
//     (MayWait); testing.go, testing_linux.go, testing_other.go:
//     ForceInLoop and CallOnLoopThread, for tests of steps and of the
//     check.
//
// # A session's states
//
//	        startup over, both connections sockets or TLSConns
//	                          │ Relay.Enter
//	                          ▼
//	┌─────────────────────► ENTERED
//	│      the loop thread runs Steps.Step for every whole message
//	│      of a side that is ready (epoll: one read per event;
//	│      io_uring: what one receive brought), then Steps.EndTurn
//	│      (one write per batch; io_uring: queued, submitted with the
//	│      batch)
//	│                         │ a step returns ErrHandover (before it
//	│                         │ changed anything), EOF, a read or
//	│                         │ write error, a message larger than
//	│                         │ the buffer, a peer slow to read
//	│                         ▼
//	│                    HANDED OVER
//	│      the descriptors leave epoll (io_uring: what is in flight is
//	│      cancelled, and the session leaves once the last completion
//	│      is in); Relay.Wait returns the Exit
//	│      and Relay.Leave gives net.Conns on the same sockets, the
//	│      buffers as they are and what the loop could not write
//	│                         ▼
//	│                       PUMPS
//	│      two goroutines, each in Input.Poll on its side; the
//	│      message handed over is taken again from its start
//	│                         │ both wait for input
//	│                         ▼
//	│                      PARKED
//	│      the second to park, when Parking.MayReenter, sets
//	│      stopping and wakes the other; both return ErrWantLoop
//	│                         │
//	└────── RE-ENTERED ───────┘
//
// From PUMPS, a pump that ends (EOF, error, Terminate) ends the session:
// it does not go back to the loop.
//
// # The loop-thread rule
//
// Nothing on a loop thread may wait: every session of that loop would
// stall behind it. A step therefore decides first whether its message
// needs a goroutine and returns ErrHandover before it changes anything.
// What can wait calls MayWait, which panics on a loop thread in a debug
// build (test binaries, or the netloopdebug build tag).
//
// # Ownership
//
// While a session is in a loop (Relay.InLoop), the loop thread owns its
// inputs, writers and loop readers and writers; after Wait the session's
// goroutine does, and from there each pump its own side. The descriptors
// a loop polls are guarded by Relay's lock, for Shutdown, which another
// goroutine calls to end the session; a caller's own connection lock
// comes before it.
package netloop
