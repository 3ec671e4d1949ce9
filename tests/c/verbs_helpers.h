/* Helpers the C test programs share (compiled beside each of them by
 * tests/tests/libibverbs_misuse.rs). */
#ifndef UROCE_TEST_VERBS_HELPERS_H
#define UROCE_TEST_VERBS_HELPERS_H

#include <string.h>
#include <infiniband/verbs.h>

/* Connects `qp` to itself (same device, GID index 1). */
static inline int connect_to_itself(struct ibv_context *ctx, struct ibv_qp *qp)
{
	union ibv_gid gid;
	struct ibv_qp_attr attr;
	int rc = ibv_query_gid(ctx, 1, 1, &gid);
	memset(&attr, 0, sizeof attr);
	attr.qp_state = IBV_QPS_INIT; attr.port_num = 1;
	attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	rc |= ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS);
	memset(&attr, 0, sizeof attr);
	attr.qp_state = IBV_QPS_RTR; attr.path_mtu = IBV_MTU_1024; attr.dest_qp_num = qp->qp_num;
	attr.max_dest_rd_atomic = 1; attr.min_rnr_timer = 12;
	attr.ah_attr.is_global = 1; attr.ah_attr.grh.dgid = gid; attr.ah_attr.grh.sgid_index = 1;
	attr.ah_attr.grh.hop_limit = 64; attr.ah_attr.port_num = 1;
	rc |= ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	memset(&attr, 0, sizeof attr);
	attr.qp_state = IBV_QPS_RTS; attr.timeout = 14; attr.retry_cnt = 7; attr.rnr_retry = 7;
	attr.max_rd_atomic = 1;
	rc |= ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	return rc;
}

/* Polls `cq` until `want` completions are in `wc` (bounded): how many came. */
static inline int poll_for(struct ibv_cq *cq, int want, struct ibv_wc *wc)
{
	int got = 0;
	for (int spin = 0; spin < 2000000 && got < want; spin++) {
		int n = ibv_poll_cq(cq, want - got, wc + got);
		if (n < 0)
			break;
		got += n;
	}
	return got;
}

#endif
