/* Non-blocking event descriptors, as event loops use them, on uroce's
 * libibverbs.so.1: each case prints `case <name> <result>`. A completion
 * channel and the async descriptor made O_NONBLOCK answer EAGAIN while
 * nothing waits; after a completion, poll() sees the channel readable and
 * ibv_get_cq_event returns the event. The async descriptor is readable
 * exactly while an asynchronous event waits: poll() times out on it with
 * none, sees it readable once an SRQ limit event is raised (by the
 * device's own thread, while this one sleeps in poll()), and times out
 * again once ibv_get_async_event took the event. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include "verbs_helpers.h"

#define CASE(name, fmt, ...) printf("case %s " fmt "\n", name, __VA_ARGS__)

static int set_nonblocking(int fd)
{
	int flags = fcntl(fd, F_GETFL);
	return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}


int main(void)
{
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num < 1) { printf("no device\n"); return 1; }
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx) { printf("open failed %d\n", errno); return 1; }
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ch ? ibv_create_cq(ctx, 16, (void *)0x1234, ch, 0) : NULL;
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE |
					    IBV_ACCESS_REMOTE_WRITE) : NULL;
	if (!pd || !cq || !mr) { printf("setup failed %d\n", errno); return 1; }
	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	if (!qp || connect_to_itself(ctx, qp)) { printf("qp setup failed %d\n", errno); return 1; }

	/* A fresh channel blocks, as rdma-core's does. */
	CASE("channel_starts_blocking", "%d", !!(fcntl(ch->fd, F_GETFL) & O_NONBLOCK));

	int rc = set_nonblocking(ch->fd);
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	errno = 0;
	int got = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	CASE("cq_event_eagain", "%d %d %d", rc, got, errno);

	rc = ibv_req_notify_cq(cq, 0);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
	wr.wr.rdma.remote_addr = (uintptr_t)buf + 2048;
	wr.wr.rdma.rkey = mr->rkey;
	struct ibv_send_wr *bad = NULL;
	rc |= ibv_post_send(qp, &wr, &bad);
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	int ready = poll(&pfd, 1, 10000);
	errno = 0;
	got = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	CASE("cq_event_after_poll", "%d %d %d %s %s", rc, ready, got,
	     ev_cq == cq ? "cq" : "other", ev_ctx == (void *)0x1234 ? "ctx" : "other");
	ibv_ack_cq_events(cq, 1);
	struct ibv_wc wc;
	int polled = 0;
	for (int spin = 0; spin < 2000000 && polled < 1; spin++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0) break;
		polled += n;
	}
	CASE("completion", "%d %d %d", polled, polled ? wc.status : -1,
	     polled ? (int)wc.wr_id : -1);

	/* Drained: EAGAIN again. */
	errno = 0;
	got = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	CASE("cq_event_eagain_again", "%d %d", got, errno);

	/* The async descriptor, still blocking: readable while the events
	 * raised so far wait (the port's PORT_ACTIVE), then not readable while
	 * none does, even with an SRQ limit armed. */
	struct pollfd apfd = { .fd = ctx->async_fd, .events = POLLIN };
	int early = 0, port_active = 0;
	while (early < 100 && poll(&apfd, 1, 0) == 1) {
		struct ibv_async_event ev;
		if (ibv_get_async_event(ctx, &ev))
			break;
		port_active |= ev.event_type == IBV_EVENT_PORT_ACTIVE;
		ibv_ack_async_event(&ev);
		early++;
	}
	int idle = poll(&apfd, 1, 200);
	CASE("async_fd_idle", "%d %d", port_active, idle);
	struct ibv_srq_init_attr sinit = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sinit);
	struct ibv_qp_init_attr qinit = {
		.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_send_sge = 1 },
	};
	struct ibv_qp *sqp = srq ? ibv_create_qp(pd, &qinit) : NULL;
	if (!sqp || connect_to_itself(ctx, sqp)) { printf("srq setup failed %d\n", errno); return 1; }
	rc = 0;
	struct ibv_sge rsge[2];
	for (int i = 0; i < 2; i++) {
		rsge[i] = (struct ibv_sge){ .addr = (uintptr_t)buf + 1024 + 64 * i, .length = 64,
					    .lkey = mr->lkey };
		struct ibv_recv_wr rwr = { .wr_id = 100 + i, .sg_list = &rsge[i], .num_sge = 1 };
		struct ibv_recv_wr *rbad = NULL;
		rc |= ibv_post_srq_recv(srq, &rwr, &rbad);
	}
	/* Two receives posted, limit 2: the first SEND leaves one, below it. */
	struct ibv_srq_attr limit = { .srq_limit = 2 };
	rc |= ibv_modify_srq(srq, &limit, IBV_SRQ_LIMIT);
	idle = poll(&apfd, 1, 100);
	CASE("async_fd_armed_idle", "%d %d", rc, idle);

	/* A SEND to itself takes one: the device raises the event while this
	 * thread sleeps in poll(), which returns with the descriptor
	 * readable; the event is the SRQ's limit. */
	struct ibv_send_wr swr = { .wr_id = 8, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	rc = ibv_post_send(sqp, &swr, &bad);
	apfd.revents = 0;
	ready = poll(&apfd, 1, 10000);
	int readable = !!(apfd.revents & POLLIN);
	struct ibv_async_event aev;
	memset(&aev, 0, sizeof aev);
	got = ibv_get_async_event(ctx, &aev);
	CASE("async_fd_srq_limit", "%d %d %d %d %s %s", rc, ready, readable, got,
	     aev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED ? "srq_limit" : "other",
	     aev.element.srq == srq ? "srq" : "other");
	ibv_ack_async_event(&aev);

	/* Taken: not readable any more. */
	apfd.revents = 0;
	int after = poll(&apfd, 1, 200);
	CASE("async_fd_drained", "%d %d", after, apfd.revents);

	/* The async descriptor made non-blocking: the events raised so far,
	 * then EAGAIN while no event waits. */
	rc = set_nonblocking(ctx->async_fd);
	int drained = 0;
	errno = 0;
	while ((got = ibv_get_async_event(ctx, &aev)) == 0 && drained < 100) {
		printf("async event %s\n", ibv_event_type_str(aev.event_type));
		ibv_ack_async_event(&aev);
		drained++;
		errno = 0;
	}
	CASE("async_event_eagain", "%d %d %d", rc, got, errno);

	rc = ibv_destroy_qp(qp);
	rc |= ibv_destroy_qp(sqp);
	rc |= ibv_destroy_srq(srq);
	rc |= ibv_dereg_mr(mr);
	rc |= ibv_destroy_cq(cq);
	rc |= ibv_destroy_comp_channel(ch);
	rc |= ibv_dealloc_pd(pd);
	rc |= ibv_close_device(ctx);
	ibv_free_device_list(list);
	CASE("teardown", "%d", rc);
	return 0;
}
