// The benchmark's floor relay: the least a user-space relay can do per round
// trip, for the "floor" column of go run ./bench (see ../README.md).
//
// One thread, level-triggered epoll, and per readiness event one recv and
// one send of what was received, the system calls PgBouncer makes. It parses
// nothing, authenticates nothing and has no limits: it is a measuring
// instrument, not a proxy. Sessions pass through from a TCP port on
// 127.0.0.1 to a PostgreSQL Unix socket, as the proxy and PgBouncer relay
// them in the harness.
//
// Usage: relay <tcp port> <unix socket path>
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sockets.h"

enum { maxFD = 65536, maxEvents = 128 };

static int peer[maxFD]; // the other socket of a session, by descriptor
static char buf[65536];

// Sessions ended during a batch of events are closed after it, so that no
// descriptor number is reused (by an accept) while events of the old
// socket are still to be handled. Regression: a stale event then read,
// blocking, from a new session's server socket before its client had sent
// anything, and the relay hung until the server timed the session out.
static int closing[2 * maxEvents];
static int nClosing;

static void endSession(int ep, int fd) {
	int p = peer[fd];
	peer[fd] = -1; // later events of this batch for either side are stale
	peer[p] = -1;
	epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
	epoll_ctl(ep, EPOLL_CTL_DEL, p, NULL);
	closing[nClosing++] = fd;
	closing[nClosing++] = p;
}

static void accepted(int ep, int c, const char *path) {
	int s = serverFor(c, path, "relay");
	if (s < 0) {
		return;
	}
	if (c >= maxFD || s >= maxFD) {
		fprintf(stderr, "relay: descriptor %d or %d over %d\n", c, s, maxFD);
		close(c);
		close(s);
		return;
	}
	peer[c] = s;
	peer[s] = c;
	struct epoll_event ev = {.events = EPOLLIN};
	ev.data.fd = c;
	epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
	ev.data.fd = s;
	epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
}

// relayOnce moves what one recv returns to the peer. The receive never
// waits; the sockets are blocking, so the send takes all of it (a slow
// peer stalls the relay, which a measurement with small messages never
// meets).
static void relayOnce(int ep, int fd) {
	ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
	if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
		return;
	}
	if (n <= 0) {
		endSession(ep, fd);
		return;
	}
	for (ssize_t off = 0; off < n;) {
		ssize_t w = send(peer[fd], buf + off, n - off, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR) {
			continue;
		}
		if (w <= 0) {
			endSession(ep, fd);
			return;
		}
		off += w;
	}
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: relay <tcp port> <unix socket path>\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	int port = atoi(argv[1]);
	const char *path = argv[2];
	int ls = listenLoopback(port, "relay");
	if (ls < 0) {
		return 1;
	}
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev) != 0) {
		perror("relay: epoll");
		return 1;
	}
	struct epoll_event evs[maxEvents];
	for (;;) {
		int n = epoll_wait(ep, evs, maxEvents, -1);
		if (n < 0 && errno != EINTR) {
			perror("relay: epoll_wait");
			return 1;
		}
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == ls) {
				int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
				if (c >= 0) {
					accepted(ep, c, path);
				}
				continue;
			}
			if (peer[fd] >= 0) {
				relayOnce(ep, fd);
			}
		}
		for (int i = 0; i < nClosing; i++) {
			close(closing[i]);
		}
		nClosing = 0;
	}
}
