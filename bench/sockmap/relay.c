// The user half of the sockmap relay measurement (see README.md). It is a
// floor, not a proxy: it relays the startup exchange itself (trust auth
// only; SSLRequest is answered 'N'), then puts both sockets in the sockmap
// and never touches the session again. Neither the descriptors nor the map
// entries are ever released, so it serves at most 2048 sessions per run.
//
//	relay LISTEN_PORT UPSTREAM_PORT    (both on 127.0.0.1, TCP)
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { sslRequestCode = 80877103, maxStartup = 65536 };

static int socksFD, peerFD, upstreamPort;
static pthread_mutex_t idxMu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t nextIdx;

static int readFull(int fd, void *b, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t r = read(fd, (char *)b + got, n - got);
		if (r <= 0)
			return -1;
		got += r;
	}
	return 0;
}

static int writeFull(int fd, const void *b, size_t n)
{
	for (size_t done = 0; done < n;) {
		ssize_t r = write(fd, (const char *)b + done, n - done);
		if (r <= 0)
			return -1;
		done += r;
	}
	return 0;
}

// readStartup reads one length-prefixed startup packet into buf.
static int readStartup(int fd, unsigned char *buf, uint32_t *len)
{
	if (readFull(fd, buf, 4))
		return -1;
	memcpy(len, buf, 4);
	*len = ntohl(*len);
	if (*len < 8 || *len > maxStartup)
		return -1;
	return readFull(fd, buf + 4, *len - 4);
}

static int dialUpstream(void)
{
	int one = 1, s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(upstreamPort),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(s, (struct sockaddr *)&a, sizeof a)) {
		close(s);
		return -1;
	}
	return s;
}

// pair puts both sockets in the map and makes each the other's peer. Called
// only when neither socket has unread data: the client waits for
// ReadyForQuery, the server has sent it.
static int pair(int c, int s)
{
	pthread_mutex_lock(&idxMu);
	uint32_t ic = nextIdx++, is = nextIdx++;
	pthread_mutex_unlock(&idxMu);
	uint64_t fc = c, fs = s, cookie;
	socklen_t l = sizeof cookie;
	if (bpf_map_update_elem(socksFD, &ic, &fc, BPF_ANY) || bpf_map_update_elem(socksFD, &is, &fs, BPF_ANY))
		return -1;
	if (getsockopt(c, SOL_SOCKET, SO_COOKIE, &cookie, &l) || bpf_map_update_elem(peerFD, &cookie, &is, BPF_ANY))
		return -1;
	if (getsockopt(s, SOL_SOCKET, SO_COOKIE, &cookie, &l) || bpf_map_update_elem(peerFD, &cookie, &ic, BPF_ANY))
		return -1;
	return 0;
}

static void *session(void *arg)
{
	int c = (int)(intptr_t)arg, s = -1, one = 1;
	static __thread unsigned char buf[maxStartup + 5];
	uint32_t len, code;
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (readStartup(c, buf, &len))
		goto out;
	memcpy(&code, buf + 4, 4);
	if (ntohl(code) == sslRequestCode && (writeFull(c, "N", 1) || readStartup(c, buf, &len)))
		goto out;
	if ((s = dialUpstream()) < 0 || writeFull(s, buf, len))
		goto out;
	for (;;) { // the server's answer up to ReadyForQuery
		if (readFull(s, buf, 5))
			goto out;
		memcpy(&len, buf + 1, 4);
		len = ntohl(len);
		if (len < 4 || len > maxStartup || readFull(s, buf + 5, len - 4) || writeFull(c, buf, len + 1))
			goto out;
		if (buf[0] == 'E')
			goto out;
		if (buf[0] == 'Z')
			break;
	}
	if (pair(c, s) == 0)
		return NULL; // the kernel relays from here; the descriptors stay open
	perror("relay: sockmap");
out:
	if (s >= 0)
		close(s);
	close(c);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: relay LISTEN_PORT UPSTREAM_PORT\n");
		return 2;
	}
	upstreamPort = atoi(argv[2]);
	struct bpf_object *obj = bpf_object__open_file("relay.bpf.o", NULL);
	if (!obj || bpf_object__load(obj)) {
		fprintf(stderr, "relay: cannot load relay.bpf.o (built? root?)\n");
		return 1;
	}
	socksFD = bpf_object__find_map_fd_by_name(obj, "socks");
	peerFD = bpf_object__find_map_fd_by_name(obj, "peer");
	int prog = bpf_program__fd(bpf_object__find_program_by_name(obj, "verdict"));
	if (bpf_prog_attach(prog, socksFD, BPF_SK_SKB_STREAM_VERDICT, 0)) {
		perror("relay: attach verdict");
		return 1;
	}
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1])),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 128)) {
		perror("relay: listen");
		return 1;
	}
	for (;;) {
		int c = accept(l, NULL, NULL);
		if (c < 0)
			continue;
		pthread_t t;
		if (pthread_create(&t, NULL, session, (void *)(intptr_t)c)) {
			close(c);
			continue;
		}
		pthread_detach(t);
	}
}
