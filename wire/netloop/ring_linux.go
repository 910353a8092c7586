//go:build linux

package netloop

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// An io_uring instance driven with raw system calls, as the epoll loop is:
// the kernel's ABI (linux/io_uring.h) transcribed for the few operations
// the loop uses. One thread submits (IORING_SETUP_SINGLE_ISSUER), and
// completions are processed only when that thread enters the kernel
// (IORING_SETUP_DEFER_TASKRUN, Linux 6.1): no interrupt of the loop
// thread, and one io_uring_enter both submits a batch and waits.

const (
	sysIOURingSetup    = 425
	sysIOURingEnter    = 426
	sysIOURingRegister = 427

	setupCQSize       = 1 << 3
	setupSubmitAll    = 1 << 7
	setupSingleIssuer = 1 << 12
	setupDeferTaskrun = 1 << 13

	featSingleMmap = 1 << 0
	featNoDrop     = 1 << 1

	enterGetEvents = 1 << 0

	offSQRing = 0
	offSQEs   = 0x10000000

	opRead        = 22
	opSend        = 26
	opRecv        = 27
	opAsyncCancel = 14

	sqeBufferSelect = 1 << 5
	sqeSkipSuccess  = 1 << 6

	cancelAll = 1 << 0
	cancelFD  = 1 << 1

	cqeFBuffer     = 1 << 0
	cqeBufferShift = 16

	registerPbufRing = 22
)

// ringParams is struct io_uring_params.
type ringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

// sqe is struct io_uring_sqe (64 bytes), with the fields the loop sets.
type sqe struct {
	opcode   uint8
	flags    uint8
	ioprio   uint16
	fd       int32
	off      uint64
	addr     uint64
	len      uint32
	opFlags  uint32 // msg_flags, cancel_flags
	userData uint64
	bufGroup uint16
	_        uint16
	_        int32
	_        [2]uint64
}

// cqe is struct io_uring_cqe.
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// ring is one io_uring: its mapped submission and completion queues.
type ring struct {
	fd      int
	mem     []byte // the mapped rings (one mapping: IORING_FEAT_SINGLE_MMAP)
	sqeMem  []byte
	sqHead  *uint32
	sqTail  *uint32
	sqMask  uint32
	sqArray unsafe.Pointer
	sqes    unsafe.Pointer
	entries uint32
	tail    uint32 // the next submission's index, published by enter
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    unsafe.Pointer
}

// newRing sets up a ring of entries submissions and 4x as many
// completions. It fails where the kernel refuses io_uring (older than 6.1,
// io_uring_disabled, a seccomp profile).
func newRing(entries uint32) (*ring, error) {
	p := ringParams{flags: setupSingleIssuer | setupDeferTaskrun | setupCQSize | setupSubmitAll, cqEntries: 4 * entries}
	fd, _, e := syscall.Syscall(sysIOURingSetup, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, os.NewSyscallError("io_uring_setup", e)
	}
	rg := &ring{fd: int(fd)}
	if p.features&featSingleMmap == 0 || p.features&featNoDrop == 0 {
		_ = syscall.Close(rg.fd)
		return nil, fmt.Errorf("io_uring: kernel lacks single mmap or no-drop completions")
	}
	size := max(p.sqOff.array+p.sqEntries*4, p.cqOff.cqes+p.cqEntries*uint32(unsafe.Sizeof(cqe{})))
	mem, err := syscall.Mmap(rg.fd, offSQRing, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		_ = syscall.Close(rg.fd)
		return nil, fmt.Errorf("io_uring: mmap: %w", err)
	}
	sqeMem, err := syscall.Mmap(rg.fd, offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(sqe{})), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		_ = syscall.Munmap(mem)
		_ = syscall.Close(rg.fd)
		return nil, fmt.Errorf("io_uring: mmap: %w", err)
	}
	base := unsafe.Pointer(&mem[0])
	rg.mem, rg.sqeMem = mem, sqeMem
	rg.sqHead = (*uint32)(unsafe.Add(base, p.sqOff.head))
	rg.sqTail = (*uint32)(unsafe.Add(base, p.sqOff.tail))
	rg.sqMask = *(*uint32)(unsafe.Add(base, p.sqOff.ringMask))
	rg.sqArray = unsafe.Add(base, p.sqOff.array)
	rg.entries = p.sqEntries
	rg.tail = atomic.LoadUint32(rg.sqTail)
	rg.sqes = unsafe.Pointer(&sqeMem[0])
	rg.cqHead = (*uint32)(unsafe.Add(base, p.cqOff.head))
	rg.cqTail = (*uint32)(unsafe.Add(base, p.cqOff.tail))
	rg.cqMask = *(*uint32)(unsafe.Add(base, p.cqOff.ringMask))
	rg.cqes = unsafe.Add(base, p.cqOff.cqes)
	return rg, nil
}

func (rg *ring) close() {
	_ = syscall.Munmap(rg.sqeMem)
	_ = syscall.Munmap(rg.mem)
	_ = syscall.Close(rg.fd)
}

// next returns a zeroed submission entry, submitting what is queued first
// when the queue is full.
func (rg *ring) next() *sqe {
	if rg.tail-atomic.LoadUint32(rg.sqHead) == rg.entries {
		_ = rg.enter(false)
	}
	i := rg.tail & rg.sqMask
	s := (*sqe)(unsafe.Add(rg.sqes, uintptr(i)*unsafe.Sizeof(sqe{})))
	*s = sqe{}
	*(*uint32)(unsafe.Add(rg.sqArray, uintptr(i)*4)) = i
	rg.tail++
	return s
}

// enter submits what is queued and, with wait, waits for a completion.
func (rg *ring) enter(wait bool) error {
	atomic.StoreUint32(rg.sqTail, rg.tail)
	n := rg.tail - atomic.LoadUint32(rg.sqHead)
	var minComplete, flags uintptr
	if wait {
		minComplete, flags = 1, enterGetEvents
	}
	for {
		_, _, e := syscall.Syscall6(sysIOURingEnter, uintptr(rg.fd), uintptr(n), minComplete, flags, 0, 0)
		switch e {
		case 0, syscall.EBUSY, syscall.EAGAIN:
			// EBUSY, EAGAIN: completions to reap first, or no memory for
			// more now; the loop reaps and enters again.
			return nil
		case syscall.EINTR:
			if !wait {
				return nil
			}
			n = rg.tail - atomic.LoadUint32(rg.sqHead)
			continue
		}
		return os.NewSyscallError("io_uring_enter", e)
	}
}

// reap calls f for every completion posted, in order.
func (rg *ring) reap(f func(c cqe)) {
	head := atomic.LoadUint32(rg.cqHead)
	for {
		tail := atomic.LoadUint32(rg.cqTail)
		if head == tail {
			return
		}
		for ; head != tail; head++ {
			c := *(*cqe)(unsafe.Add(rg.cqes, uintptr(head&rg.cqMask)*unsafe.Sizeof(cqe{})))
			atomic.StoreUint32(rg.cqHead, head+1)
			f(c)
		}
	}
}

// bufRing is a provided-buffer ring (IORING_REGISTER_PBUF_RING, Linux
// 5.19): receives take a buffer from it when data arrives, so that an idle
// session holds none.
type bufRing struct {
	mem       []byte // n struct io_uring_buf entries; tail overlays entry 0
	bufs      []byte // n buffers of size bytes
	size      int
	mask      uint16
	tail      uint16
	published uint16 // the tail the kernel has
}

// newBufRing registers n buffers of size bytes (n a power of two) as
// group on rg.
func newBufRing(rg *ring, n, size int, group uint16) (*bufRing, error) {
	mem, err := syscall.Mmap(-1, 0, n*16, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANONYMOUS|syscall.MAP_PRIVATE|syscall.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("io_uring: buffer ring: %w", err)
	}
	reg := struct {
		ringAddr    uint64
		ringEntries uint32
		bgid        uint16
		flags       uint16
		resv        [3]uint64
	}{ringAddr: uint64(uintptr(unsafe.Pointer(&mem[0]))), ringEntries: uint32(n), bgid: group}
	if _, _, e := syscall.Syscall6(sysIOURingRegister, uintptr(rg.fd), registerPbufRing, uintptr(unsafe.Pointer(&reg)), 1, 0, 0); e != 0 {
		_ = syscall.Munmap(mem)
		return nil, os.NewSyscallError("io_uring_register", e)
	}
	br := &bufRing{mem: mem, bufs: make([]byte, n*size), size: size, mask: uint16(n - 1)}
	for i := range n {
		br.put(uint16(i))
	}
	br.publish()
	return br, nil
}

// close unmaps the ring; the io_uring it was registered with must be
// closed or no longer use it.
func (br *bufRing) close() { _ = syscall.Munmap(br.mem) }

// buf returns buffer id's first n bytes.
func (br *bufRing) buf(id uint16, n int) []byte {
	off := int(id) * br.size
	return br.bufs[off : off+n : off+br.size]
}

// put gives buffer id back (visible to the kernel after publish).
func (br *bufRing) put(id uint16) {
	e := unsafe.Pointer(&br.mem[int(br.tail&br.mask)*16])
	*(*uint64)(e) = uint64(uintptr(unsafe.Pointer(&br.bufs[int(id)*br.size])))
	*(*uint32)(unsafe.Add(e, 8)) = uint32(br.size)
	*(*uint16)(unsafe.Add(e, 12)) = id
	br.tail++
}

// publish makes the buffers put so far available to the kernel.
func (br *bufRing) publish() {
	if br.published == br.tail {
		return
	}
	br.published = br.tail
	p := (*uint32)(unsafe.Pointer(&br.mem[12])) // the tail is the u16 at 14
	// A 32-bit store of entry 0's bid (bytes 12-13) and the tail (14-15):
	// sync/atomic has no 16-bit store.
	v := atomic.LoadUint32(p)
	atomic.StoreUint32(p, v&0xffff|uint32(br.tail)<<16)
}
