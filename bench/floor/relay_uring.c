// The benchmark's io_uring floor relay: relay.c's measuring instrument
// (one thread, sessions from a TCP port on 127.0.0.1 to a PostgreSQL Unix
// socket, nothing parsed, authenticated or limited) built on io_uring, for
// the "floor-uring" column of go run ./bench (see ../README.md).
//
// What it saves: relay.c makes three system calls per message (epoll_wait,
// recv, send). Here, when a receive completes, the relay queues a send of
// what came in to the peer, linked to the next receive on the same socket,
// and one io_uring_enter submits every such pair of the batch and waits for
// the next completion: one system call per batch of ready sockets, and no
// completion at all for a send that went through (IOSQE_CQE_SKIP_SUCCESS).
// Sends use MSG_WAITALL, so that a short send fails the link instead of
// letting the next receive overwrite bytes not yet sent; its completion
// says how much went, and the rest is sent again.
//
// Raw system calls and the kernel's own header, no liburing: nothing to
// install. Needs Linux 6.1 (IORING_SETUP_DEFER_TASKRUN: completions are
// processed only when the relay asks, on its own thread).
//
// Usage: relay_uring <tcp port> <unix socket path>
#define _GNU_SOURCE
#include <errno.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "sockets.h"

enum { maxFD = 65536, bufSize = 65536, ringEntries = 256 };

// What a completion is for: the top byte of user_data. The generation of
// the descriptor (bits 32..55) tells a stale completion of a closed
// session from one of a new session that reuses its descriptor number.
enum { opAccept = 1, opRecv = 2, opSend = 3 };

static int peer[maxFD];          // the other socket of a session, -1 when none
static char *buf[maxFD];         // what the last receive on fd brought
static unsigned gen[maxFD];      // bumped when fd is closed
static int recvs[maxFD];         // receives on fd in flight
static int ending[maxFD];        // the session is being taken down
static unsigned sendOff[maxFD];  // bytes of buf[fd] the peer already has
static unsigned sendLen[maxFD];  // bytes of buf[fd] to send to the peer

static struct {
	int fd;
	unsigned *sqHead, *sqTail, *sqMask, *sqArray;
	unsigned sqEntries, tail;
	struct io_uring_sqe *sqes;
	unsigned *cqHead, *cqTail, *cqMask;
	struct io_uring_cqe *cqes;
} ring;

static uint64_t tag(int op, int fd) {
	return (uint64_t)op << 56 | (uint64_t)(gen[fd] & 0xffffff) << 32 | (uint32_t)fd;
}

static int setupRing(void) {
	struct io_uring_params p;
	memset(&p, 0, sizeof p);
	p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	int fd = (int)syscall(__NR_io_uring_setup, ringEntries, &p);
	if (fd < 0) {
		perror("relay_uring: io_uring_setup");
		return -1;
	}
	size_t sqSize = p.sq_off.array + p.sq_entries * sizeof(unsigned);
	size_t cqSize = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	if (!(p.features & IORING_FEAT_SINGLE_MMAP)) {
		fprintf(stderr, "relay_uring: kernel without IORING_FEAT_SINGLE_MMAP\n");
		return -1;
	}
	size_t size = sqSize > cqSize ? sqSize : cqSize;
	char *rings = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING);
	struct io_uring_sqe *sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
	                                 MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQES);
	if (rings == MAP_FAILED || sqes == MAP_FAILED) {
		perror("relay_uring: mmap");
		return -1;
	}
	ring.fd = fd;
	ring.sqHead = (unsigned *)(rings + p.sq_off.head);
	ring.sqTail = (unsigned *)(rings + p.sq_off.tail);
	ring.sqMask = (unsigned *)(rings + p.sq_off.ring_mask);
	ring.sqArray = (unsigned *)(rings + p.sq_off.array);
	ring.sqEntries = p.sq_entries;
	ring.tail = *ring.sqTail;
	ring.sqes = sqes;
	ring.cqHead = (unsigned *)(rings + p.cq_off.head);
	ring.cqTail = (unsigned *)(rings + p.cq_off.tail);
	ring.cqMask = (unsigned *)(rings + p.cq_off.ring_mask);
	ring.cqes = (struct io_uring_cqe *)(rings + p.cq_off.cqes);
	return 0;
}

// enter submits what was queued and, with wait, waits for one completion.
static int enter(int wait) {
	__atomic_store_n(ring.sqTail, ring.tail, __ATOMIC_RELEASE);
	unsigned toSubmit = ring.tail - __atomic_load_n(ring.sqHead, __ATOMIC_ACQUIRE);
	int r = (int)syscall(__NR_io_uring_enter, ring.fd, toSubmit, wait ? 1 : 0, wait ? IORING_ENTER_GETEVENTS : 0, NULL, 0);
	if (r < 0 && errno != EINTR && errno != EAGAIN && errno != EBUSY) {
		perror("relay_uring: io_uring_enter");
		exit(1);
	}
	return r;
}

static struct io_uring_sqe *nextSQE(void) {
	if (ring.tail - __atomic_load_n(ring.sqHead, __ATOMIC_ACQUIRE) == ring.sqEntries) {
		enter(0); // full: submit what is queued first
	}
	unsigned i = ring.tail & *ring.sqMask;
	struct io_uring_sqe *sqe = &ring.sqes[i];
	memset(sqe, 0, sizeof *sqe);
	ring.sqArray[i] = i;
	ring.tail++;
	return sqe;
}

static void queueAccept(int ls) {
	struct io_uring_sqe *sqe = nextSQE();
	sqe->opcode = IORING_OP_ACCEPT;
	sqe->fd = ls;
	sqe->accept_flags = SOCK_CLOEXEC;
	sqe->user_data = (uint64_t)opAccept << 56;
}

static void queueRecv(int fd, unsigned flags) {
	struct io_uring_sqe *sqe = nextSQE();
	sqe->opcode = IORING_OP_RECV;
	sqe->fd = fd;
	sqe->addr = (uint64_t)(uintptr_t)buf[fd];
	sqe->len = bufSize;
	sqe->flags = flags;
	sqe->user_data = tag(opRecv, fd);
	recvs[fd]++;
}

// queueRelay sends what is left of buf[from] to its peer, and then, linked,
// receives on from again.
static void queueRelay(int from) {
	struct io_uring_sqe *sqe = nextSQE();
	sqe->opcode = IORING_OP_SEND;
	sqe->fd = peer[from];
	sqe->addr = (uint64_t)(uintptr_t)(buf[from] + sendOff[from]);
	sqe->len = sendLen[from] - sendOff[from];
	sqe->msg_flags = MSG_WAITALL | MSG_NOSIGNAL;
	sqe->flags = IOSQE_IO_LINK | IOSQE_CQE_SKIP_SUCCESS;
	sqe->user_data = tag(opSend, from);
	queueRecv(from, 0);
}

static int ready(int fd) {
	if (buf[fd] == NULL) {
		buf[fd] = malloc(bufSize);
	}
	return buf[fd] != NULL;
}

static void accepted(int c, const char *path) {
	int s = serverFor(c, path, "relay_uring");
	if (s < 0) {
		return;
	}
	if (c >= maxFD || s >= maxFD || !ready(c) || !ready(s)) {
		fprintf(stderr, "relay_uring: descriptor %d or %d over %d, or out of memory\n", c, s, maxFD);
		close(c);
		close(s);
		return;
	}
	peer[c] = s;
	peer[s] = c;
	ending[c] = ending[s] = 0;
	queueRecv(c, 0);
	queueRecv(s, 0);
}

// endSession shuts both sockets down so that what is in flight on them
// completes; they are closed when the last of it has (closeIfDone).
static void endSession(int fd) {
	int p = peer[fd];
	if (ending[fd]) {
		return;
	}
	ending[fd] = ending[p] = 1;
	shutdown(fd, SHUT_RDWR);
	shutdown(p, SHUT_RDWR);
}

static void closeIfDone(int fd) {
	int p = peer[fd];
	if (!ending[fd] || recvs[fd] > 0 || recvs[p] > 0) {
		return;
	}
	for (int i = 0; i < 2; i++) {
		int x = i == 0 ? fd : p;
		gen[x]++;
		peer[x] = -1;
		ending[x] = 0;
		close(x);
	}
}

static void completed(struct io_uring_cqe *cqe, int ls, const char *path) {
	int op = (int)(cqe->user_data >> 56);
	if (op == opAccept) {
		if (cqe->res >= 0) {
			accepted(cqe->res, path);
		} else if (cqe->res != -EINTR && cqe->res != -ECONNABORTED && cqe->res != -EAGAIN) {
			fprintf(stderr, "relay_uring: accept: %s\n", strerror(-cqe->res));
		}
		queueAccept(ls);
		return;
	}
	int fd = (int)(uint32_t)cqe->user_data;
	if (fd < 0 || fd >= maxFD || ((cqe->user_data >> 32) & 0xffffff) != (gen[fd] & 0xffffff) || peer[fd] < 0) {
		return; // a closed session's
	}
	if (op == opRecv) {
		recvs[fd]--;
		if (cqe->res == -ECANCELED) {
			// The linked send before it failed: its own completion says
			// what to do.
		} else if (cqe->res <= 0 || ending[fd]) {
			endSession(fd);
		} else {
			sendOff[fd] = 0;
			sendLen[fd] = (unsigned)cqe->res;
			queueRelay(fd);
		}
		closeIfDone(fd);
		return;
	}
	// A send posts a completion only when it did not send everything.
	if (cqe->res > 0 && !ending[fd] && sendOff[fd] + (unsigned)cqe->res < sendLen[fd]) {
		sendOff[fd] += (unsigned)cqe->res;
		queueRelay(fd);
		return;
	}
	endSession(fd);
	closeIfDone(fd);
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: relay_uring <tcp port> <unix socket path>\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	for (int i = 0; i < maxFD; i++) {
		peer[i] = -1;
	}
	int port = atoi(argv[1]);
	const char *path = argv[2];
	int ls = listenLoopback(port, "relay_uring");
	if (ls < 0) {
		return 1;
	}
	if (setupRing() != 0) {
		return 1;
	}
	queueAccept(ls);
	for (;;) {
		enter(1);
		unsigned head = *ring.cqHead;
		unsigned tail = __atomic_load_n(ring.cqTail, __ATOMIC_ACQUIRE);
		for (; head != tail; head++) {
			struct io_uring_cqe cqe = ring.cqes[head & *ring.cqMask];
			__atomic_store_n(ring.cqHead, head + 1, __ATOMIC_RELEASE);
			completed(&cqe, ls, path);
		}
	}
}
