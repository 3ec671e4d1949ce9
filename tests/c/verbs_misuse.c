/* Misuse of the verbs from C, on uroce's libibverbs.so.1: each case prints
 * `case <name> <result>`; the test compares the results with what
 * libibverbs documents. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include "verbs_helpers.h"

#define CASE(name, fmt, ...) printf("case %s " fmt "\n", name, __VA_ARGS__)


int main(void)
{
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num < 1) { printf("no device\n"); return 1; }
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx) { printf("open failed %d\n", errno); return 1; }
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				       IBV_ACCESS_MW_BIND);
	if (!pd || !cq || !mr) { printf("setup failed %d\n", errno); return 1; }
	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	if (!qp) { printf("create_qp failed %d\n", errno); return 1; }

	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(qp, &wr, &bad);
	CASE("post_send_reset", "%d %s", rc, bad == NULL ? "null" : bad == &wr ? "wr" : "other");

	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *rbad = NULL;
	rc = ibv_post_recv(qp, &rwr, &rbad);
	CASE("post_recv_reset", "%d", rc);

	rc = ibv_destroy_cq(cq);
	CASE("destroy_cq_in_use", "%d", rc);

	rc = ibv_dealloc_pd(pd);
	CASE("dealloc_pd_in_use", "%d", rc);

	/* A bad state number and a bad MTU. */
	struct ibv_qp_attr attr = { .qp_state = 42 };
	rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE);
	CASE("modify_bad_state", "%d", rc);

	/* RESET -> RTS directly is not a legal transition. */
	memset(&attr, 0, sizeof attr);
	attr.qp_state = IBV_QPS_RTS;
	rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE);
	CASE("modify_reset_to_rts", "%d", rc);

	/* Connect the QP to itself (same device), then overfill its send queue
	 * (max_send_wr 2) and post a bad lkey. */
	rc = connect_to_itself(ctx, qp);
	CASE("connect_to_itself", "%d", rc);

	struct ibv_send_wr chain[3];
	for (int i = 0; i < 3; i++) {
		chain[i] = wr;
		chain[i].wr_id = 10 + i;
		chain[i].opcode = IBV_WR_RDMA_WRITE;
		chain[i].wr.rdma.remote_addr = (uintptr_t)buf + 2048;
		chain[i].wr.rdma.rkey = mr->rkey;
		chain[i].next = i < 2 ? &chain[i + 1] : NULL;
	}
	bad = NULL;
	rc = ibv_post_send(qp, chain, &bad);
	CASE("post_send_overflow", "%d %ld", rc, bad ? (long)(bad - chain) : -1L);

	struct ibv_wc wc[4];
	int got = 0;
	for (int spin = 0; spin < 2000000 && got < 2; spin++) {
		int n = ibv_poll_cq(cq, 4 - got, wc + got);
		if (n < 0) break;
		got += n;
	}
	CASE("write_to_itself", "%d %d %d", got, got > 0 ? wc[0].status : -1, got > 1 ? wc[1].status : -1);

	/* A type-1 window bound through the QP, then written through. */
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	uint32_t old_rkey = mw ? mw->rkey : 0;
	struct ibv_mw_bind mb = { .wr_id = 50, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = mr, .addr = (uintptr_t)buf + 1024, .length = 1024,
			       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
	rc = mw ? ibv_bind_mw(qp, mw, &mb) : -1;
	got = poll_for(cq, 1, wc);
	CASE("bind_mw", "%d %d %d %s", rc, got, got ? wc[0].status : -1,
	     mw && mw->rkey != old_rkey ? "new_rkey" : "same_rkey");
	struct ibv_send_wr mwr = chain[0];
	mwr.next = NULL; mwr.wr_id = 51;
	mwr.wr.rdma.remote_addr = (uintptr_t)buf + 1024;
	mwr.wr.rdma.rkey = mw ? mw->rkey : 0;
	buf[0] = 'x';
	bad = NULL;
	rc = ibv_post_send(qp, &mwr, &bad);
	got = poll_for(cq, 1, wc);
	CASE("write_through_mw", "%d %d %d %c", rc, got, got ? wc[0].status : -1, buf[1024]);
	rc = mw ? ibv_dealloc_mw(mw) : -1;
	CASE("dealloc_mw", "%d", rc);

	/* The same buffer registered a second time, with other rights (as rxe
	 * and mlx5 allow): a SEND to itself gathers through one region and
	 * scatters through the other. Once the second is deregistered, the
	 * first still covers the buffer. */
	struct ibv_mr *mr2 = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	CASE("reg_mr_twice", "%s %s", mr2 ? "mr" : "null",
	     mr2 && mr2->lkey != mr->lkey ? "new_lkey" : "same_lkey");
	memcpy(buf + 3072, "twice", 6);
	struct ibv_sge rsge = { .addr = (uintptr_t)buf + 3584, .length = 64,
				.lkey = mr2 ? mr2->lkey : 0 };
	struct ibv_recv_wr trwr = { .wr_id = 60, .sg_list = &rsge, .num_sge = 1 };
	struct ibv_sge ssge = { .addr = (uintptr_t)buf + 3072, .length = 6, .lkey = mr->lkey };
	struct ibv_send_wr swr = { .wr_id = 61, .sg_list = &ssge, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	rbad = NULL;
	rc = ibv_post_recv(qp, &trwr, &rbad);
	bad = NULL;
	rc |= ibv_post_send(qp, &swr, &bad);
	got = poll_for(cq, 2, wc);
	CASE("send_through_both", "%d %d %d %s", rc, got,
	     got == 2 ? wc[0].status | wc[1].status : -1, buf + 3584);
	rc = mr2 ? ibv_dereg_mr(mr2) : -1;
	memcpy(buf + 3072, "again", 6);
	rsge.lkey = mr->lkey;
	rsge.addr = (uintptr_t)buf + 3712;
	rbad = NULL;
	rc |= ibv_post_recv(qp, &trwr, &rbad);
	bad = NULL;
	rc |= ibv_post_send(qp, &swr, &bad);
	got = poll_for(cq, 2, wc);
	CASE("dereg_one_of_two", "%d %d %d %s", rc, got,
	     got == 2 ? wc[0].status | wc[1].status : -1, buf + 3712);

	/* A chain whose second WR cannot be posted (an opcode that does not
	 * exist): EINVAL, *bad_wr the second, the first posted and completed
	 * (a SEND to itself). Then a receive chain whose second WR has a
	 * negative SGE count: EINVAL, *bad_wr the second. */
	struct ibv_send_wr c2[2] = { swr, swr };
	c2[0].wr_id = 70;
	c2[0].next = &c2[1];
	c2[1].wr_id = 71;
	c2[1].opcode = 0x7f;
	c2[1].next = NULL;
	trwr.wr_id = 72;
	rsge.addr = (uintptr_t)buf + 3840;
	rbad = NULL;
	rc = ibv_post_recv(qp, &trwr, &rbad);
	bad = NULL;
	int rc2 = ibv_post_send(qp, c2, &bad);
	got = poll_for(cq, 2, wc);
	CASE("post_send_bad_opcode", "%d %d %ld %d %d %s", rc, rc2, bad ? (long)(bad - c2) : -1L,
	     got, got == 2 ? wc[0].status | wc[1].status : -1, buf + 3840);
	struct ibv_recv_wr r2[2] = { trwr, trwr };
	r2[0].next = &r2[1];
	r2[1].num_sge = -1;
	r2[1].next = NULL;
	rbad = NULL;
	rc = ibv_post_recv(qp, r2, &rbad);
	CASE("post_recv_bad_sge_count", "%d %ld", rc, rbad ? (long)(rbad - r2) : -1L);

	/* A bad lkey: an error completion (local protection error). */
	struct ibv_sge bad_sge = sge;
	bad_sge.lkey = mr->lkey ^ 0x5500;
	struct ibv_send_wr bwr = chain[0];
	bwr.next = NULL; bwr.sg_list = &bad_sge; bwr.wr_id = 99;
	bad = NULL;
	rc = ibv_post_send(qp, &bwr, &bad);
	got = poll_for(cq, 1, wc);
	CASE("bad_lkey", "%d %d %s", rc, got, got ? ibv_wc_status_str(wc[0].status) : "none");

	/* An SRQ through the extended verb; an XRC SRQ is not offered. */
	struct ibv_srq_init_attr_ex sx = {
		.attr = { .max_wr = 4, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD,
		.srq_type = IBV_SRQT_BASIC, .pd = pd,
	};
	struct ibv_srq *srq = ibv_create_srq_ex(ctx, &sx);
	rc = srq ? ibv_destroy_srq(srq) : -1;
	CASE("create_srq_ex", "%s %d", srq ? "srq" : "null", rc);
	sx.srq_type = IBV_SRQT_XRC;
	errno = 0;
	srq = ibv_create_srq_ex(ctx, &sx);
	CASE("create_srq_ex_xrc", "%s %d", srq ? "srq" : "null", errno);

	/* ibv_resize_cq: the new depth in cq->cqe; 0 is EINVAL. */
	rc = ibv_resize_cq(cq, 32);
	CASE("resize_cq", "%d %d", rc, cq->cqe);
	rc = ibv_resize_cq(cq, 0);
	CASE("resize_cq_zero", "%d %d", rc, cq->cqe);

	/* Multicast: only a UD QP attaches, only to a multicast GID
	 * (::ffff:224.0.0.0/100 or ff00::/8); twice is harmless; detaching a
	 * QP not attached is EINVAL (rxe). */
	struct ibv_device_attr dattr;
	rc = ibv_query_device(ctx, &dattr);
	CASE("mcast_limits", "%d %d %d %d", rc, dattr.max_mcast_grp, dattr.max_mcast_qp_attach,
	     dattr.max_total_mcast_qp_attach);
	union ibv_gid group = { .raw = { [10] = 0xff, [11] = 0xff, [12] = 230, [13] = 88,
					 [14] = 1, [15] = 1 } };
	CASE("attach_mcast_rc", "%d", ibv_attach_mcast(qp, &group, 0));
	init.qp_type = IBV_QPT_UD;
	struct ibv_qp *ud = ibv_create_qp(pd, &init);
	if (!ud) { printf("create_qp UD failed %d\n", errno); return 1; }
	rc = ibv_attach_mcast(ud, &group, 0);
	CASE("attach_mcast_ud", "%d %d", rc, ibv_attach_mcast(ud, &group, 0));
	union ibv_gid unicast = group;
	unicast.raw[12] = 127;
	CASE("attach_mcast_unicast", "%d", ibv_attach_mcast(ud, &unicast, 0));
	rc = ibv_detach_mcast(ud, &group, 0);
	CASE("detach_mcast", "%d %d", rc, ibv_detach_mcast(ud, &group, 0));
	rc = ibv_attach_mcast(ud, &group, 0);
	CASE("destroy_attached", "%d %d", rc, ibv_destroy_qp(ud));

	rc = ibv_destroy_qp(qp);
	rc |= ibv_dereg_mr(mr);
	rc |= ibv_destroy_cq(cq);
	rc |= ibv_dealloc_pd(pd);
	rc |= ibv_close_device(ctx);
	ibv_free_device_list(list);
	CASE("teardown", "%d", rc);
	return 0;
}
