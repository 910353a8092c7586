// The socket set-up both floor relays share (relay.c, relay_uring.c): the
// listening socket on 127.0.0.1 and, per session, the client socket's
// options and the connection to the server's Unix socket. Each relay
// includes it once, after its own system headers.

// listenLoopback listens on 127.0.0.1:port; -1 (after saying why, as who)
// when it cannot.
static int listenLoopback(int port, const char *who) {
	int one = 1;
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 128) != 0) {
		fprintf(stderr, "%s: listen: %s\n", who, strerror(errno));
		return -1;
	}
	return ls;
}

static int dialServer(const char *path) {
	struct sockaddr_un u = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof u.sun_path) {
		return -1;
	}
	strcpy(u.sun_path, path);
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&u, sizeof u) != 0) {
		if (s >= 0) {
			close(s);
		}
		return -1;
	}
	return s;
}

// serverFor sets the options of c, a client socket just accepted, and
// connects to the server for its session: the server socket, or -1 with
// c closed (after saying why, as who).
static int serverFor(int c, const char *path, const char *who) {
	int one = 1;
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	int s = dialServer(path);
	if (s < 0) {
		fprintf(stderr, "%s: connect to server: %s\n", who, strerror(errno));
		close(c);
	}
	return s;
}
