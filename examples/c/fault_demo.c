/*
 * fault_demo: a small RC verbs program that handles errors the way a real
 * application should.  Copy it.
 *
 *   server:  fault_demo [flags]
 *   client:  fault_demo [flags] SERVER_ADDRESS
 *
 * The two sides swap QP number, PSN, GID, buffer address and R_Key over TCP
 * (as ibv_rc_pingpong does), connect an RC QP, and the client runs --iters
 * operations of one kind (--op send|write|read|atomic), keeping up to
 * --depth of them outstanding.  Then the client tells the server over TCP
 * how it went and the server answers with what it saw.
 *
 * On an error completion the program prints the status name and wr_id
 * ("error: wr_id 9 status IBV_WC_RNR_RETRY_EXC_ERR (13)"), posts nothing
 * more, and drains the CQ: every WR still outstanding must come back with
 * IBV_WC_WR_FLUSH_ERR (the QP is in the ERR state).  Each side then reads
 * the asynchronous event, if its QP went to ERR (IBV_EVENT_QP_ACCESS_ERR,
 * IBV_EVENT_QP_FATAL, ...), acknowledges it, and destroys every object.
 *
 * For --op atomic each FETCH_ADD adds 1 to a 64-bit counter in the server's
 * memory; the old values returned must be 0..iters-1, each exactly once
 * (a retransmitted atomic runs once), and the counter must end at iters.
 *
 * Exit status (see README.md):
 *   0  every operation completed successfully (and the atomics checked out)
 *   1  bad arguments
 *   2  setup failed (device, TCP exchange, resources)
 *   3  a work completion failed (the rest were flushed)
 *   4  atomic results wrong (a value twice or missing, or a bad counter)
 *   5  timed out waiting for a completion or for the peer
 *   6  (server) no error completion, but the QP went to ERR (async event)
 *
 * Build: cc -o fault_demo fault_demo.c -libverbs
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

enum { EXIT_OK = 0, EXIT_USAGE = 1, EXIT_SETUP = 2, EXIT_WC_ERROR = 3,
       EXIT_ATOMIC = 4, EXIT_TIMEOUT = 5, EXIT_QP_ERROR = 6 };

enum op { OP_SEND, OP_WRITE, OP_READ, OP_ATOMIC };
static const char *op_names[] = { "send", "write", "read", "atomic" };

static struct {
	enum op op;
	int iters, depth, size, rnr_retry, retry, min_rnr_timer, gid_idx, timeout_s, port;
	const char *server;
} cfg = { OP_SEND, 100, 8, 4096, 7, 7, 12, 1, 10, 18515, NULL };

struct ctx {
	struct ibv_context *dev;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;       /* --size bytes per slot, --depth slots (or the counter) */
	uint64_t *olds;  /* atomic: the old value each FETCH_ADD returned */
	int sock;
};

/* What each side sends the other before connecting. */
struct peer {
	uint32_t qpn, psn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s [flags] [SERVER]  (no SERVER: be the server)\n"
		"  --op send|write|read|atomic  the operation (default send)\n"
		"  --iters N        operations to run (default 100)\n"
		"  --depth N        operations outstanding at once (default 8)\n"
		"  --size BYTES     per SEND/WRITE/READ (default 4096)\n"
		"  --rnr-retry N    0..7, 7 = retry for ever (default 7)\n"
		"  --retry N        retry_cnt, 0..7: ACK timeouts before giving up (default 7)\n"
		"  --min-rnr-timer N  0..31, the RNR NAK's timer code (default 12 = 0.64 ms)\n"
		"  --timeout S      give up after S seconds without progress (default 10)\n"
		"  --gid-idx N      GID index (default 1: uroce's IPv4 GID)\n"
		"  --port N         TCP port of the exchange (default 18515)\n",
		argv0);
}

/* The IBV_WC_* name of a status (ibv_wc_status_str gives prose). */
static const char *wc_name(enum ibv_wc_status s)
{
	static const char *names[] = {
		[IBV_WC_SUCCESS] = "IBV_WC_SUCCESS",
		[IBV_WC_LOC_LEN_ERR] = "IBV_WC_LOC_LEN_ERR",
		[IBV_WC_LOC_QP_OP_ERR] = "IBV_WC_LOC_QP_OP_ERR",
		[IBV_WC_LOC_EEC_OP_ERR] = "IBV_WC_LOC_EEC_OP_ERR",
		[IBV_WC_LOC_PROT_ERR] = "IBV_WC_LOC_PROT_ERR",
		[IBV_WC_WR_FLUSH_ERR] = "IBV_WC_WR_FLUSH_ERR",
		[IBV_WC_MW_BIND_ERR] = "IBV_WC_MW_BIND_ERR",
		[IBV_WC_BAD_RESP_ERR] = "IBV_WC_BAD_RESP_ERR",
		[IBV_WC_LOC_ACCESS_ERR] = "IBV_WC_LOC_ACCESS_ERR",
		[IBV_WC_REM_INV_REQ_ERR] = "IBV_WC_REM_INV_REQ_ERR",
		[IBV_WC_REM_ACCESS_ERR] = "IBV_WC_REM_ACCESS_ERR",
		[IBV_WC_REM_OP_ERR] = "IBV_WC_REM_OP_ERR",
		[IBV_WC_RETRY_EXC_ERR] = "IBV_WC_RETRY_EXC_ERR",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "IBV_WC_RNR_RETRY_EXC_ERR",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "IBV_WC_LOC_RDD_VIOL_ERR",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "IBV_WC_REM_INV_RD_REQ_ERR",
		[IBV_WC_REM_ABORT_ERR] = "IBV_WC_REM_ABORT_ERR",
		[IBV_WC_INV_EECN_ERR] = "IBV_WC_INV_EECN_ERR",
		[IBV_WC_INV_EEC_STATE_ERR] = "IBV_WC_INV_EEC_STATE_ERR",
		[IBV_WC_FATAL_ERR] = "IBV_WC_FATAL_ERR",
		[IBV_WC_RESP_TIMEOUT_ERR] = "IBV_WC_RESP_TIMEOUT_ERR",
		[IBV_WC_GENERAL_ERR] = "IBV_WC_GENERAL_ERR",
	};
	if ((unsigned)s < sizeof names / sizeof names[0] && names[s])
		return names[s];
	return "IBV_WC_(unknown)";
}

/* The IBV_EVENT_* name of the QP events a program like this can see. */
static const char *event_name(enum ibv_event_type e)
{
	switch (e) {
	case IBV_EVENT_QP_FATAL: return "IBV_EVENT_QP_FATAL";
	case IBV_EVENT_QP_REQ_ERR: return "IBV_EVENT_QP_REQ_ERR";
	case IBV_EVENT_QP_ACCESS_ERR: return "IBV_EVENT_QP_ACCESS_ERR";
	case IBV_EVENT_COMM_EST: return "IBV_EVENT_COMM_EST";
	case IBV_EVENT_SQ_DRAINED: return "IBV_EVENT_SQ_DRAINED";
	case IBV_EVENT_PATH_MIG_ERR: return "IBV_EVENT_PATH_MIG_ERR";
	case IBV_EVENT_QP_LAST_WQE_REACHED: return "IBV_EVENT_QP_LAST_WQE_REACHED";
	case IBV_EVENT_CQ_ERR: return "IBV_EVENT_CQ_ERR";
	case IBV_EVENT_DEVICE_FATAL: return "IBV_EVENT_DEVICE_FATAL";
	case IBV_EVENT_PORT_ACTIVE: return "IBV_EVENT_PORT_ACTIVE";
	case IBV_EVENT_PORT_ERR: return "IBV_EVENT_PORT_ERR";
	default: return "IBV_EVENT_(other)";
	}
}

/* ---- out-of-band exchange over TCP ---------------------------------- */

static int tcp_connect(void)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res;
	char port[16];
	int fd = -1;

	snprintf(port, sizeof port, "%d", cfg.port);
	if (getaddrinfo(cfg.server, port, &hints, &res))
		return -1;
	for (int tries = 0; tries < 50 && fd < 0; tries++) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fd, res->ai_addr, res->ai_addrlen) == 0)
			break;
		close(fd);
		fd = -1;
		usleep(100000);
	}
	freeaddrinfo(res);
	return fd;
}

static int tcp_accept(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(cfg.port),
				  .sin_addr.s_addr = htonl(INADDR_ANY) };
	int one = 1, fd, lfd = socket(AF_INET, SOCK_STREAM, 0);

	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 1)) {
		perror("bind/listen");
		close(lfd);
		return -1;
	}
	printf("server: listening on TCP port %d\n", cfg.port);
	fflush(stdout);
	fd = accept(lfd, NULL, NULL);
	close(lfd);
	return fd;
}

/* A line of text, with a timeout (--timeout): 0, or -1. */
static int read_line(int fd, char *line, size_t len)
{
	size_t n = 0;
	struct pollfd p = { .fd = fd, .events = POLLIN };

	while (n + 1 < len) {
		if (poll(&p, 1, cfg.timeout_s * 1000) != 1 || read(fd, line + n, 1) != 1)
			return -1;
		if (line[n] == '\n')
			break;
		n++;
	}
	line[n] = 0;
	return 0;
}

static int write_line(int fd, const char *line)
{
	size_t len = strlen(line);
	return write(fd, line, len) == (ssize_t)len ? 0 : -1;
}

static int exchange(int fd, const struct peer *me, struct peer *them)
{
	char line[256], gid[33];
	const uint8_t *g = me->gid.raw;

	for (int i = 0; i < 16; i++)
		sprintf(gid + 2 * i, "%02x", g[i]);
	snprintf(line, sizeof line, "%06x %06x %08x %016" PRIx64 " %s\n",
		 me->qpn, me->psn, me->rkey, me->addr, gid);
	if (write_line(fd, line) || read_line(fd, line, sizeof line))
		return -1;
	if (sscanf(line, "%x %x %x %" SCNx64 " %32s", &them->qpn, &them->psn,
		   &them->rkey, &them->addr, gid) != 5)
		return -1;
	for (int i = 0; i < 16; i++)
		sscanf(gid + 2 * i, "%2hhx", &them->gid.raw[i]);
	return 0;
}

/* ---- the QP ---------------------------------------------------------- */

static int connect_qp(struct ctx *c, const struct peer *me, const struct peer *them)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC };
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		return -1;

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = them->qpn;
	a.rq_psn = them->psn;
	a.max_dest_rd_atomic = 16;
	a.min_rnr_timer = cfg.min_rnr_timer;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = them->gid;
	a.ah_attr.grh.sgid_index = cfg.gid_idx;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		return -1;

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = me->psn;
	a.timeout = 14;   /* 67 ms ACK timeout */
	a.retry_cnt = cfg.retry;
	a.rnr_retry = cfg.rnr_retry;
	a.max_rd_atomic = 16;
	return ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

/*
 * The server keeps RECV_AHEAD receives posted: twice the client's --depth.
 * The client posts its next SEND as soon as one is acknowledged, which can
 * be before the server has polled that receive's completion and posted a
 * new one; with only --depth receives that race would be a genuine RNR NAK
 * (harmless with rnr_retry 7, but mixed into the count under a finite
 * --rnr-retry).
 */
#define RECV_AHEAD (2 * cfg.depth)

/* Slots: RECV_AHEAD for receives (--depth of them for the other ops). */
static size_t buf_len(void)
{
	return (size_t)cfg.size * RECV_AHEAD;
}

static int post_recv(struct ctx *c, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)c->buf + (id % RECV_AHEAD) * cfg.size,
			       .length = cfg.size, .lkey = c->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	return ibv_post_recv(c->qp, &wr, &bad);
}

/* Operation number id (it is the wr_id) to the server at them. */
static int post_op(struct ctx *c, const struct peer *them, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)c->buf + (id % cfg.depth) * cfg.size,
			       .length = cfg.size, .lkey = c->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	uint64_t slot = (id % cfg.depth) * cfg.size;

	switch (cfg.op) {
	case OP_SEND:
		wr.opcode = IBV_WR_SEND;
		break;
	case OP_WRITE:
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.wr.rdma.remote_addr = them->addr + slot;
		wr.wr.rdma.rkey = them->rkey;
		break;
	case OP_READ:
		wr.opcode = IBV_WR_RDMA_READ;
		wr.wr.rdma.remote_addr = them->addr + slot;
		wr.wr.rdma.rkey = them->rkey;
		break;
	case OP_ATOMIC:
		/* The old value lands in olds[id] (registered with buf). */
		sge.addr = (uintptr_t)&c->olds[id];
		sge.length = 8;
		wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		wr.wr.atomic.remote_addr = them->addr; /* the counter */
		wr.wr.atomic.rkey = them->rkey;
		wr.wr.atomic.compare_add = 1;
		break;
	}
	return ibv_post_send(c->qp, &wr, &bad);
}

/*
 * Polls until `outstanding` completions are in or the timeout passes.
 * Counts successes and errors; the first error's status and wr_id are
 * printed; after it every completion must be IBV_WC_WR_FLUSH_ERR.
 */
struct tally {
	int ok, errors, flushed, unexpected;
	enum ibv_wc_status first;
};

static int poll_some(struct ctx *c, struct tally *t, int *outstanding, int want_one,
		     const char *who)
{
	double deadline = now_s() + cfg.timeout_s;
	struct ibv_wc wc[16];

	while (*outstanding > 0) {
		int n = ibv_poll_cq(c->cq, 16, wc);
		if (n < 0) {
			fprintf(stderr, "%s: ibv_poll_cq failed\n", who);
			return EXIT_SETUP;
		}
		for (int i = 0; i < n; i++) {
			(*outstanding)--;
			if (wc[i].status == IBV_WC_SUCCESS) {
				t->ok++;
				continue;
			}
			if (t->errors + t->flushed == 0) {
				t->first = wc[i].status;
				printf("%s: error: wr_id %" PRIu64 " status %s (%d)\n", who,
				       wc[i].wr_id, wc_name(wc[i].status), wc[i].status);
			} else if (wc[i].status != IBV_WC_WR_FLUSH_ERR) {
				printf("%s: unexpected after the error: wr_id %" PRIu64 " %s\n",
				       who, wc[i].wr_id, wc_name(wc[i].status));
				t->unexpected++;
			}
			if (wc[i].status == IBV_WC_WR_FLUSH_ERR && t->errors + t->flushed)
				t->flushed++;
			else
				t->errors++;
		}
		if (n > 0) {
			deadline = now_s() + cfg.timeout_s;
			if (want_one && t->errors == 0)
				return 0;
		} else if (now_s() > deadline) {
			printf("%s: timeout: %d completions missing after %d s\n", who,
			       *outstanding, cfg.timeout_s);
			return EXIT_TIMEOUT;
		}
	}
	return 0;
}

/*
 * If the QP is in ERR, waits (a poll() on the async descriptor, up to
 * wait_ms) for the asynchronous event that says why, prints and
 * acknowledges it.  Returns 1 when the QP is in ERR.
 */
static int qp_in_error(struct ctx *c, const char *who, int wait_ms)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	struct pollfd p = { .fd = c->dev->async_fd, .events = POLLIN };

	if (ibv_query_qp(c->qp, &a, IBV_QP_STATE, &ia) || a.qp_state != IBV_QPS_ERR)
		return 0;
	while (poll(&p, 1, wait_ms) == 1) {
		struct ibv_async_event ev;
		if (ibv_get_async_event(c->dev, &ev))
			break;
		if (ev.event_type == IBV_EVENT_PORT_ACTIVE) {
			ibv_ack_async_event(&ev);
			continue;
		}
		printf("%s: async event %s%s\n", who, event_name(ev.event_type),
		       ev.element.qp == c->qp ? " on our QP" : "");
		ibv_ack_async_event(&ev);
		break;
	}
	return 1;
}

static void cleanup(struct ctx *c)
{
	/* Children before parents: QP, CQ, MR, PD, then the device. */
	if (c->qp)
		ibv_destroy_qp(c->qp);
	if (c->cq)
		ibv_destroy_cq(c->cq);
	if (c->mr)
		ibv_dereg_mr(c->mr);
	if (c->pd)
		ibv_dealloc_pd(c->pd);
	if (c->dev)
		ibv_close_device(c->dev);
	free(c->buf);
	if (c->sock >= 0)
		close(c->sock);
}

static int setup(struct ctx *c)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	size_t len = buf_len() + 8 * (size_t)cfg.iters;

	if (!list || !list[0]) {
		fprintf(stderr, "no RDMA device\n");
		return -1;
	}
	c->dev = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!c->dev)
		return -1;
	c->buf = calloc(1, len);
	c->olds = (uint64_t *)(c->buf + buf_len());
	c->pd = ibv_alloc_pd(c->dev);
	if (!c->buf || !c->pd)
		return -1;
	c->mr = ibv_reg_mr(c->pd, c->buf, len, IBV_ACCESS_LOCAL_WRITE |
			   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			   IBV_ACCESS_REMOTE_ATOMIC);
	c->cq = ibv_create_cq(c->dev, cfg.depth + RECV_AHEAD + 16, NULL, NULL, 0);
	if (!c->mr || !c->cq)
		return -1;
	struct ibv_qp_init_attr qa = {
		.send_cq = c->cq, .recv_cq = c->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = cfg.depth, .max_recv_wr = RECV_AHEAD,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	c->qp = ibv_create_qp(c->pd, &qa);
	return c->qp ? 0 : -1;
}

/* ---- the two roles ---------------------------------------------------- */

static int client(struct ctx *c, const struct peer *them)
{
	struct tally t = { 0 };
	int posted = 0, outstanding = 0, rc = 0;
	char line[128];

	while (posted < cfg.iters && t.errors == 0 && rc == 0) {
		while (outstanding < cfg.depth && posted < cfg.iters) {
			if (post_op(c, them, posted)) {
				fprintf(stderr, "client: ibv_post_send failed\n");
				return EXIT_SETUP;
			}
			posted++;
			outstanding++;
		}
		rc = poll_some(c, &t, &outstanding, 1, "client");
	}
	/* No more posts after an error: collect the rest (flushed). */
	if (rc == 0)
		rc = poll_some(c, &t, &outstanding, 0, "client");
	printf("client: %s: %d ok, %d error, %d flushed, %d not posted\n",
	       op_names[cfg.op], t.ok, t.errors, t.flushed, cfg.iters - posted);

	/* Tell the server we are done; it answers with the counter. */
	snprintf(line, sizeof line, "done %d\n", t.ok);
	uint64_t counter = 0;
	if (write_line(c->sock, line) || read_line(c->sock, line, sizeof line) ||
	    sscanf(line, "counter %" SCNu64, &counter) != 1) {
		printf("client: timeout: no answer from the server\n");
		if (!rc)
			rc = EXIT_TIMEOUT;
	}
	/* A requester's error is reported by its completion, with no async
	 * event (IBA 11.6.2): only look, do not wait, when we had one. */
	int err = qp_in_error(c, "client", t.errors ? 0 : 2000);
	if (rc)
		return rc;
	if (t.errors) {
		printf("client: outcome: %s%s\n", wc_name(t.first),
		       t.unexpected ? " (and completions other than flushes after it)" : "");
		return EXIT_WC_ERROR;
	}
	if (err)
		return EXIT_QP_ERROR;
	if (cfg.op == OP_ATOMIC) {
		/* Each old value 0..iters-1 exactly once. */
		char *seen = calloc(cfg.iters, 1);
		int bad = 0;
		for (int i = 0; i < cfg.iters; i++) {
			uint64_t v = c->olds[i];
			if (v >= (uint64_t)cfg.iters || seen[v]++) {
				printf("client: atomic wr_id %d returned %" PRIu64 " (%s)\n", i, v,
				       v >= (uint64_t)cfg.iters ? "out of range" : "twice");
				bad++;
			}
		}
		free(seen);
		printf("client: atomics: %d old values, %s; counter %" PRIu64 "\n", cfg.iters,
		       bad ? "NOT unique" : "all unique", counter);
		if (bad || counter != (uint64_t)cfg.iters) {
			printf("client: outcome: atomics wrong\n");
			return EXIT_ATOMIC;
		}
	}
	printf("client: outcome: success\n");
	return EXIT_OK;
}

/*
 * The server's first receives for --op send: posted before it tells the
 * client it is ready, so no SEND can find the queue empty (an RNR NAK).
 * Returns how many were posted, or -1.
 */
static int post_first_recvs(struct ctx *c)
{
	int n = 0;

	if (cfg.op == OP_SEND)
		for (; n < RECV_AHEAD; n++)
			if (post_recv(c, (uint64_t)n))
				return -1;
	return n;
}

/* Serves; `posted` receives are already posted (wr_ids 0..posted-1). */
static int server(struct ctx *c, int posted)
{
	struct tally t = { 0 };
	struct pollfd p = { .fd = c->sock, .events = POLLIN };
	int outstanding = posted, rc = 0;
	uint64_t next = (uint64_t)posted;
	char line[128];
	volatile uint64_t *counter = (uint64_t *)c->buf;

	/* Receives are re-posted as they are used. */
	/* Serve until the client says it is done. */
	for (;;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(c->cq, 1, &wc);
		if (n > 0) {
			outstanding--;
			if (wc.status == IBV_WC_SUCCESS) {
				t.ok++;
				if (post_recv(c, next++) == 0)
					outstanding++;
			} else {
				if (t.errors + t.flushed == 0) {
					printf("server: error: wr_id %" PRIu64 " status %s (%d)\n",
					       wc.wr_id, wc_name(wc.status), wc.status);
					t.first = wc.status;
				}
				if (wc.status == IBV_WC_WR_FLUSH_ERR)
					t.flushed++;
				else
					t.errors++;
			}
			continue;
		}
		int r = poll(&p, 1, 1);
		if (r == 1)
			break;
		if (r < 0)
			return EXIT_SETUP;
	}
	if (read_line(c->sock, line, sizeof line))
		rc = EXIT_TIMEOUT;
	/* A responder's QP in ERR has an async event that says why. */
	int err = qp_in_error(c, "server", 2000);
	if (err) {
		/* Its receives come back flushed. */
		poll_some(c, &t, &outstanding, 0, "server");
	}
	snprintf(line, sizeof line, "counter %" PRIu64 "\n", *counter);
	write_line(c->sock, line);
	printf("server: %d received, %d error, %d flushed; counter %" PRIu64 "\n",
	       t.ok, t.errors, t.flushed, *counter);
	if (rc)
		return rc;
	if (t.errors) {
		printf("server: outcome: %s\n", wc_name(t.first));
		return EXIT_WC_ERROR;
	}
	if (err) {
		printf("server: outcome: QP in error\n");
		return EXIT_QP_ERROR;
	}
	printf("server: outcome: success\n");
	return EXIT_OK;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "op", 1, NULL, 'o' },        { "iters", 1, NULL, 'n' },
		{ "depth", 1, NULL, 'd' },     { "size", 1, NULL, 's' },
		{ "rnr-retry", 1, NULL, 'r' }, { "timeout", 1, NULL, 't' },
		{ "gid-idx", 1, NULL, 'g' },   { "port", 1, NULL, 'p' },
		{ "retry", 1, NULL, 'R' },     { "min-rnr-timer", 1, NULL, 'm' },
		{ "help", 0, NULL, 'h' },      { 0 } };
	struct ctx c = { .sock = -1 };
	struct peer me = { 0 }, them = { 0 };
	int ch, rc;

	while ((ch = getopt_long(argc, argv, "o:n:d:s:r:R:m:t:g:p:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'o':
			for (cfg.op = 0; cfg.op < 4 && strcmp(optarg, op_names[cfg.op]); cfg.op++)
				;
			if (cfg.op == 4) {
				usage(argv[0]);
				return EXIT_USAGE;
			}
			break;
		case 'n': cfg.iters = atoi(optarg); break;
		case 'd': cfg.depth = atoi(optarg); break;
		case 's': cfg.size = atoi(optarg); break;
		case 'r': cfg.rnr_retry = atoi(optarg); break;
		case 'R': cfg.retry = atoi(optarg); break;
		case 'm': cfg.min_rnr_timer = atoi(optarg); break;
		case 't': cfg.timeout_s = atoi(optarg); break;
		case 'g': cfg.gid_idx = atoi(optarg); break;
		case 'p': cfg.port = atoi(optarg); break;
		default:
			usage(argv[0]);
			return ch == 'h' ? EXIT_OK : EXIT_USAGE;
		}
	}
	if (optind < argc)
		cfg.server = argv[optind];
	if (cfg.iters < 1 || cfg.depth < 1 || cfg.size < 8 || cfg.rnr_retry < 0 ||
	    cfg.rnr_retry > 7 || cfg.retry < 0 || cfg.retry > 7 ||
	    cfg.min_rnr_timer < 0 || cfg.min_rnr_timer > 31 || cfg.timeout_s < 1) {
		usage(argv[0]);
		return EXIT_USAGE;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (setup(&c)) {
		fprintf(stderr, "setup failed: %s\n", strerror(errno));
		cleanup(&c);
		return EXIT_SETUP;
	}
	me.qpn = c.qp->qp_num;
	me.psn = lrand48() & 0xffffff;
	me.rkey = c.mr->rkey;
	me.addr = (uintptr_t)c.buf;
	c.sock = cfg.server ? tcp_connect() : tcp_accept();
	if (c.sock < 0 || ibv_query_gid(c.dev, 1, cfg.gid_idx, &me.gid) ||
	    exchange(c.sock, &me, &them) || connect_qp(&c, &me, &them)) {
		fprintf(stderr, "connecting failed\n");
		cleanup(&c);
		return EXIT_SETUP;
	}
	/* Both QPs are ready, and the server's receives posted, before the
	 * client posts anything. */
	int posted = cfg.server ? 0 : post_first_recvs(&c);
	if (posted < 0 || write_line(c.sock, "ready\n") ||
	    read_line(c.sock, (char[16]){0}, 16)) {
		cleanup(&c);
		return EXIT_SETUP;
	}
	rc = cfg.server ? client(&c, &them) : server(&c, posted);
	cleanup(&c);
	printf("%s: exit %d\n", cfg.server ? "client" : "server", rc);
	return rc;
}
