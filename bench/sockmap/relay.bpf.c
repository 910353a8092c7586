// SPDX-License-Identifier: GPL-2.0
// The kernel half of the sockmap relay measurement (see README.md): every
// skb that arrives on a socket in the map is redirected to its peer's send
// queue, so neither direction wakes the relay process.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// socks holds both sockets of every relayed session; peer maps a socket's
// cookie to the index of the other socket of its session in socks.
struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u32);
} peer SEC(".maps");

SEC("sk_skb/stream_verdict")
int verdict(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);
	__u32 *idx = bpf_map_lookup_elem(&peer, &cookie);

	if (!idx)
		return SK_PASS; // not paired yet: leave it to the process
	return bpf_sk_redirect_map(skb, &socks, *idx, 0);
}

char LICENSE[] SEC("license") = "GPL";
