/* One UDP sender at full speed with sendmmsg: the method of the bare kernel-forwarding
 * figure (bench/bench_routed_cost.py, row e).
 *
 *   udp_blast DST_IP PORT PAYLOAD_BYTES SECONDS
 *
 * Sends PAYLOAD_BYTES-byte datagrams to DST_IP:PORT in batches of 32 for SECONDS and
 * prints "sent N seconds S" (N datagrams the socket accepted). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 32

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s DST_IP PORT PAYLOAD_BYTES SECONDS\n", argv[0]);
		return 2;
	}
	size_t len = (size_t)atoi(argv[3]);
	double seconds = atof(argv[4]);
	struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
	if (inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1 || len == 0 || len > 65000) {
		fprintf(stderr, "bad address or size\n");
		return 2;
	}
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&dst, sizeof(dst)) < 0) {
		perror("socket");
		return 1;
	}
	char *buf = calloc(1, len);
	struct iovec iov[BATCH];
	struct mmsghdr msgs[BATCH];
	memset(msgs, 0, sizeof(msgs));
	for (int i = 0; i < BATCH; i++) {
		iov[i].iov_base = buf;
		iov[i].iov_len = len;
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	unsigned long long sent = 0;
	double t0 = now(), t = t0;
	while (t - t0 < seconds) {
		int n = sendmmsg(fd, msgs, BATCH, 0);
		if (n > 0)
			sent += (unsigned long long)n;
		else if (n < 0 && errno != ENOBUFS && errno != EAGAIN && errno != ECONNREFUSED) {
			perror("sendmmsg");
			return 1;
		}
		t = now();
	}
	printf("sent %llu seconds %.6f\n", sent, t - t0);
	return 0;
}
