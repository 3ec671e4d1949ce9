/* librdmacm on uroce without a connection: channels, ids, addresses,
 * routes, QPs, errors. Built against the real <rdma/rdma_cma.h>, run with
 * uroce's libibverbs.so.1 and librdmacm.so.1 first in LD_LIBRARY_PATH.
 * Usage: cm_basic DEVICE-ADDRESS PORT. Prints "ok: ..." per step; exits 1
 * at the first step that fails. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#define CHECK(cond, ...)                                                      \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "FAIL %s:%d: %s (errno %d %s): ",     \
				__FILE__, __LINE__, #cond, errno,             \
				strerror(errno));                             \
			fprintf(stderr, __VA_ARGS__);                         \
			fprintf(stderr, "\n");                                \
			exit(1);                                              \
		}                                                             \
	} while (0)

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, ms);
}

/* Open descriptors other than sockets (the device's own: uroce binds a
 * UDP source port for a QP that reached RTS, and keeps it as it likes). */
static int open_fds(void)
{
	int n = 0;
	char path[300], link[300];
	struct dirent *de;
	DIR *d = opendir("/proc/self/fd");
	while ((de = readdir(d))) {
		ssize_t len;
		snprintf(path, sizeof path, "/proc/self/fd/%s", de->d_name);
		len = readlink(path, link, sizeof link - 1);
		if (len > 0 && strncmp(link, "socket:", 7))
			n++;
	}
	closedir(d);
	return n;
}

/* The next event, through poll() on the channel's fd. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int want)
{
	struct rdma_cm_event *e;
	CHECK(readable(ch->fd, 2000) == 1, "the channel's fd is readable");
	CHECK(rdma_get_cm_event(ch, &e) == 0, "rdma_get_cm_event");
	CHECK(e->event == want, "event %s, want %s", rdma_event_str(e->event),
	      rdma_event_str(want));
	CHECK(readable(ch->fd, 0) == 0, "no second event waits");
	return e;
}

/* The next event of `ch` (waiting up to 5 s), whatever it is. */
static struct rdma_cm_event *any_event(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *e;
	CHECK(readable(ch->fd, 5000) == 1, "an event comes");
	CHECK(rdma_get_cm_event(ch, &e) == 0, "rdma_get_cm_event");
	return e;
}

/* Waits for `want` on both `a` and `b` (in either order). */
static void both(struct rdma_event_channel *ch, int want, struct rdma_cm_id *a,
		 struct rdma_cm_id *b, const char *data_for_a)
{
	int got_a = 0, got_b = 0;
	while (!got_a || !got_b) {
		struct rdma_cm_event *e = any_event(ch);
		CHECK(e->event == want && e->status == 0, "event %s (status %d), want %s",
		      rdma_event_str(e->event), e->status, rdma_event_str(want));
		if (e->id == a) {
			CHECK(!got_a, "one %s for a", rdma_event_str(want));
			if (data_for_a)
				CHECK(e->param.conn.private_data &&
				      !strcmp(e->param.conn.private_data, data_for_a),
				      "the peer's private data");
			got_a = 1;
		} else {
			CHECK(e->id == b && !got_b, "one %s for b", rdma_event_str(want));
			got_b = 1;
		}
		CHECK(rdma_ack_cm_event(e) == 0, "ack");
	}
}

/* A new id on `ch` with its route to `to` resolved. */
static struct rdma_cm_id *resolved(struct rdma_event_channel *ch, struct sockaddr_in *to)
{
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "a client id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)to, 2000) == 0, "resolve");
	CHECK(rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED)) == 0, "ack");
	CHECK(rdma_resolve_route(id, 2000) == 0, "route");
	CHECK(rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)) == 0, "ack");
	return id;
}

int main(int argc, char **argv)
{
	const char *ip = argv[1], *port = argv[2];
	struct rdma_addrinfo hints, *res, *pres;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id, *id2, *id3, *id4, *sid, *ep;
	struct rdma_cm_event *e;
	struct sockaddr_in sin;
	struct ibv_qp_init_attr qpa;
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	struct ibv_port_attr pattr;
	struct ibv_context **devs;
	int n, mask, fds0;

	CHECK(argc == 3, "usage: cm_basic ADDRESS PORT");
	setvbuf(stdout, NULL, _IONBF, 0);

	/* The device is opened once for the process (kept, as librdmacm
	 * keeps it): count fds after it. */
	devs = rdma_get_devices(&n);
	CHECK(devs && n == 1 && devs[0], "rdma_get_devices: one device");
	CHECK(!strcmp(ibv_get_device_name(devs[0]->device), "uroce0"), "uroce0: %s",
	      ibv_get_device_name(devs[0]->device));
	rdma_free_devices(devs);
	fds0 = open_fds();
	printf("ok: rdma_get_devices gives uroce0\n");

	ch = rdma_create_event_channel();
	CHECK(ch && ch->fd >= 0, "rdma_create_event_channel");
	CHECK(readable(ch->fd, 0) == 0, "a new channel has no event");
	CHECK(rdma_create_id(ch, &id, (void *)0x1234, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(id->channel == ch && id->context == (void *)0x1234 && id->verbs == NULL &&
	      id->ps == RDMA_PS_TCP && id->qp_type == IBV_QPT_RC, "a fresh id");
	printf("ok: channel and id\n");

	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(rdma_getaddrinfo(ip, port, &hints, &res) == 0, "rdma_getaddrinfo");
	CHECK(res->ai_family == AF_INET && res->ai_dst_addr && res->ai_dst_len == sizeof sin &&
	      !res->ai_src_addr && res->ai_qp_type == IBV_QPT_RC &&
	      res->ai_port_space == RDMA_PS_TCP && !(res->ai_flags & RAI_PASSIVE) && !res->ai_next,
	      "an active rdma_addrinfo");
	hints.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
	CHECK(rdma_getaddrinfo(ip, port, &hints, &pres) == 0, "passive rdma_getaddrinfo");
	CHECK(pres->ai_flags == RAI_PASSIVE && pres->ai_src_addr && !pres->ai_dst_addr,
	      "a passive rdma_addrinfo");
	hints.ai_flags = RAI_NUMERICHOST;
	{
		struct rdma_addrinfo *bad;
		CHECK(rdma_getaddrinfo("not-a-number", port, &hints, &bad) == -1,
		      "RAI_NUMERICHOST refuses a name");
		CHECK(rdma_getaddrinfo(NULL, NULL, NULL, &bad) == -1 && errno == EINVAL,
		      "nothing to look up");
	}
	printf("ok: rdma_getaddrinfo\n");

	CHECK(rdma_resolve_addr(id, NULL, res->ai_dst_addr, 2000) == 0, "rdma_resolve_addr");
	e = next_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(e->id == id && e->status == 0 && e->listen_id == NULL, "the event's id");
	CHECK(rdma_ack_cm_event(e) == 0, "ack");
	CHECK(id->verbs && id->port_num == 1 && id->pd, "bound to the device");
	CHECK(!strcmp(ibv_get_device_name(id->verbs->device), "uroce0"), "id->verbs is uroce0");
	CHECK(rdma_get_local_addr(id)->sa_family == AF_INET &&
	      ((struct sockaddr_in *)rdma_get_local_addr(id))->sin_addr.s_addr ==
		      ((struct sockaddr_in *)res->ai_dst_addr)->sin_addr.s_addr,
	      "the source is the device's address");
	CHECK(rdma_get_src_port(id) != 0, "an ephemeral source port");
	CHECK(rdma_get_dst_port(id) == htons(atoi(port)), "the destination port");
	CHECK(id->route.addr.addr.ibaddr.pkey == htobe16(0xffff), "the RoCE P_Key");
	printf("ok: ADDR_RESOLVED through poll, id->verbs is uroce0, src port %u\n",
	       ntohs(rdma_get_src_port(id)));

	CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route");
	e = next_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK(rdma_ack_cm_event(e) == 0, "ack");
	CHECK(id->route.num_paths == 1 && id->route.path_rec, "one path");
	CHECK(ibv_query_port(id->verbs, 1, &pattr) == 0, "ibv_query_port");
	{
		struct ibv_sa_path_rec *p = id->route.path_rec;
		union ibv_gid gid;
		CHECK(ibv_query_gid(id->verbs, 1, 1, &gid) == 0, "ibv_query_gid");
		CHECK(!memcmp(&p->sgid, &gid, 16) && !memcmp(&p->dgid, &gid, 16),
		      "the path's GIDs are the IPv4-mapped address (GID 1)");
		CHECK(p->pkey == htobe16(0xffff) && p->mtu == pattr.active_mtu &&
		      p->numb_path == 1 && p->reversible == 1 && p->hop_limit == 64 &&
		      p->mtu_selector == 2 && p->dlid == 0 && p->packet_life_time == 16,
		      "the path's fields");
	}
	printf("ok: ROUTE_RESOLVED, path MTU %d\n", pattr.active_mtu);

	memset(&qpa, 0, sizeof qpa);
	qpa.cap.max_send_wr = qpa.cap.max_recv_wr = 8;
	qpa.cap.max_send_sge = qpa.cap.max_recv_sge = 1;
	qpa.qp_type = IBV_QPT_RC;
	CHECK(rdma_create_qp(id, NULL, &qpa) == 0, "rdma_create_qp");
	CHECK(id->qp && id->send_cq && id->recv_cq && id->send_cq_channel &&
	      id->recv_cq_channel && qpa.send_cq == id->send_cq, "QP and CQs");
	CHECK(id->qp->pd == id->pd && id->qp->context == id->verbs, "the QP's PD is the id's");
	CHECK(ibv_query_qp(id->qp, &qattr, IBV_QP_STATE | IBV_QP_PORT, &qinit) == 0 &&
	      qattr.qp_state == IBV_QPS_INIT && qattr.port_num == 1, "the QP is in INIT");
	{
		static char buf[64];
		struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof buf };
		struct ibv_recv_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(mr, "ibv_reg_mr on id->pd");
		sge.lkey = mr->lkey;
		CHECK(ibv_post_recv(id->qp, &wr, &bad) == 0, "ibv_post_recv on the id's QP");
		CHECK(rdma_create_qp(id, NULL, &qpa) == -1 && errno == EINVAL, "a second QP");
		rdma_destroy_qp(id);
		CHECK(!id->qp && !id->send_cq && !id->recv_cq, "rdma_destroy_qp");
		CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	}
	qattr.qp_state = IBV_QPS_RTR;
	CHECK(rdma_init_qp_attr(id, &qattr, &mask) == 0 && qattr.qp_state == IBV_QPS_RTR &&
	      mask == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "rdma_init_qp_attr without a connection");
	printf("ok: rdma_create_qp: QP in INIT on the id's PD, ibv_post_recv works\n");

	/* Ports: the id's source port is taken. */
	CHECK(rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP) == 0, "id2");
	memcpy(&sin, rdma_get_local_addr(id), sizeof sin);
	CHECK(rdma_bind_addr(id2, (struct sockaddr *)&sin) == -1 && errno == EADDRINUSE,
	      "a used port is EADDRINUSE");
	sin.sin_port = 0;
	CHECK(rdma_bind_addr(id2, (struct sockaddr *)&sin) == 0 && rdma_get_src_port(id2) != 0 &&
	      id2->verbs == id->verbs, "port 0 takes a free port");
	CHECK(rdma_bind_addr(id2, (struct sockaddr *)&sin) == -1 && errno == EINVAL,
	      "binding twice is EINVAL");
	CHECK(rdma_create_id(ch, &id3, NULL, RDMA_PS_TCP) == 0, "id3");
	inet_pton(AF_INET, "192.0.2.1", &sin.sin_addr);
	CHECK(rdma_bind_addr(id3, (struct sockaddr *)&sin) == -1 && errno == EADDRNOTAVAIL,
	      "an address no device has");
	printf("ok: EADDRINUSE, port 0, EADDRNOTAVAIL\n");

	/* The calls that go to the device's CM. */
	CHECK(rdma_listen(id2, 4) == 0, "rdma_listen");
	{
		struct rdma_cm_id *again;
		CHECK(rdma_create_id(ch, &again, NULL, RDMA_PS_TCP) == 0, "another id");
		memcpy(&sin, rdma_get_local_addr(id2), sizeof sin);
		sin.sin_addr.s_addr = htonl(INADDR_ANY);
		CHECK(rdma_bind_addr(again, (struct sockaddr *)&sin) == -1 &&
		      errno == EADDRNOTAVAIL, "the unspecified address at a listened port");
		CHECK(rdma_destroy_id(again) == 0, "destroy it");
	}
	CHECK(rdma_listen(id, 4) == -1 && errno == EINVAL, "a resolved id does not listen");
	CHECK(rdma_connect(id, NULL) == -1 && errno == EINVAL, "no QP and no parameters");
	{
		struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
		CHECK(rdma_connect(id3, &cp) == -1 && errno == EINVAL, "an unbound id");
		CHECK(rdma_accept(id, &cp) == -1 && errno == EINVAL, "no request to accept");
		CHECK(rdma_establish(id) == -1 && errno == EINVAL, "not connecting");
		/* A REQ to this very device, at a port nothing listens to: REJ
		 * reason 8 (invalid service ID), as Linux's CM answers. */
		CHECK(rdma_connect(id, &cp) == 0, "rdma_connect (a QP number given)");
		CHECK(rdma_connect(id, &cp) == -1 && errno == EINVAL, "connecting twice");
		CHECK(readable(ch->fd, 5000) == 1, "an answer comes");
		e = next_event(ch, RDMA_CM_EVENT_REJECTED);
		CHECK(e->id == id && e->status == 8, "REJECTED, status %d (invalid service ID)",
		      e->status);
		CHECK(rdma_ack_cm_event(e) == 0, "ack");
	}
	CHECK(rdma_reject(id, NULL, 0) == -1 && errno == EINVAL, "no request to reject");
	CHECK(rdma_disconnect(id3) == -1 && errno == EINVAL, "no connection");
	CHECK(rdma_establish(id) == -1 && errno == EINVAL, "rejected");
	CHECK(rdma_notify(id, IBV_EVENT_COMM_EST) == -1 && errno == EINVAL, "no connection");
	CHECK(rdma_leave_multicast(id, res->ai_dst_addr) == -1 && errno == EADDRNOTAVAIL,
	      "no group joined");
	CHECK(rsocket(AF_INET, SOCK_STREAM, 0) == -1 && errno == ENOSYS, "rsocket waits");
	CHECK(rsocket(AF_UNIX, SOCK_STREAM, 0) == -1 && errno == ENOTSUP, "rsocket AF_UNIX");
	CHECK(rclose(3) == -1 && errno == EBADF, "no rsocket");
	printf("ok: the CM calls: listen, REJECTED (8) from the device's own CM, the state checks\n");

	/* A connection through the device's CM within this process: REQ, REP,
	 * RTU (ESTABLISHED on both ids), then DREQ/DREP (DISCONNECTED on both);
	 * a listener destroyed with a request not taken refuses it. */
	{
		struct rdma_event_channel *ch2 = rdma_create_event_channel();
		struct rdma_cm_id *lis, *cli, *srv, *cli2;
		struct rdma_conn_param cp = { .private_data = "hello", .private_data_len = 6,
					      .responder_resources = 1, .initiator_depth = 2,
					      .retry_count = 5, .rnr_retry_count = 6 };
		struct rdma_conn_param ap = { .private_data = "world", .private_data_len = 6,
					      .responder_resources = 1, .initiator_depth = 1 };
		struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_recv_wr = 4,
							.max_send_sge = 1, .max_recv_sge = 1 },
					       .qp_type = IBV_QPT_RC };
		struct sockaddr_in la;

		CHECK(ch2, "a second channel");
		CHECK(rdma_create_id(ch2, &lis, (void *)0x5678, RDMA_PS_TCP) == 0, "listener");
		memcpy(&la, res->ai_dst_addr, sizeof la);
		la.sin_port = 0;
		CHECK(rdma_bind_addr(lis, (struct sockaddr *)&la) == 0 && rdma_listen(lis, 1) == 0,
		      "bind and listen");
		la.sin_port = rdma_get_src_port(lis);
		CHECK(rdma_create_id(ch2, &cli, NULL, RDMA_PS_TCP) == 0, "client id");
		CHECK(rdma_resolve_addr(cli, NULL, (struct sockaddr *)&la, 2000) == 0, "resolve");
		CHECK(rdma_ack_cm_event(next_event(ch2, RDMA_CM_EVENT_ADDR_RESOLVED)) == 0, "ack");
		CHECK(rdma_resolve_route(cli, 2000) == 0, "route");
		CHECK(rdma_ack_cm_event(next_event(ch2, RDMA_CM_EVENT_ROUTE_RESOLVED)) == 0, "ack");
		CHECK(rdma_create_qp(cli, NULL, &qa) == 0, "the client's QP");
		CHECK(rdma_connect(cli, &cp) == 0, "rdma_connect");
		e = any_event(ch2);
		CHECK(e->event == RDMA_CM_EVENT_CONNECT_REQUEST, "CONNECT_REQUEST: %s",
		      rdma_event_str(e->event));
		srv = e->id;
		CHECK(e->listen_id == lis && srv != lis && srv->channel == ch2 &&
		      srv->context == (void *)0x5678 && srv->verbs == lis->verbs &&
		      srv->ps == RDMA_PS_TCP && srv->qp_type == IBV_QPT_RC, "a new id, the listener's child");
		CHECK(e->param.conn.private_data_len == 56 &&
		      !strcmp(e->param.conn.private_data, "hello"), "the REQ's private data (56 bytes)");
		CHECK(e->param.conn.responder_resources == 2 && e->param.conn.initiator_depth == 1 &&
		      e->param.conn.retry_count == 5 && e->param.conn.rnr_retry_count == 6 &&
		      e->param.conn.qp_num == cli->qp->qp_num, "the REQ's parameters, depths swapped");
		CHECK(rdma_get_dst_port(srv) == rdma_get_src_port(cli) &&
		      rdma_get_src_port(srv) == la.sin_port &&
		      ((struct sockaddr_in *)rdma_get_peer_addr(srv))->sin_addr.s_addr ==
			      la.sin_addr.s_addr, "the child's addresses, from the rdma_cm header");
		CHECK(rdma_ack_cm_event(e) == 0, "ack");
		qa.send_cq = qa.recv_cq = NULL; /* rdma_create_qp wrote the client's */
		CHECK(rdma_create_qp(srv, NULL, &qa) == 0, "the child's QP");
		CHECK(rdma_accept(srv, &ap) == 0, "rdma_accept");
		both(ch2, RDMA_CM_EVENT_ESTABLISHED, cli, srv, "world");
		CHECK(rdma_notify(srv, IBV_EVENT_COMM_EST) == -1 && errno == EISCONN,
		      "COMM_EST on the established passive side: EISCONN (as cm_establish)");
		CHECK(rdma_notify(cli, IBV_EVENT_COMM_EST) == -1 && errno == EINVAL,
		      "COMM_EST on the active side: EINVAL");
		{
			struct ibv_qp_attr qx;
			struct ibv_qp_init_attr qi;
			CHECK(ibv_query_qp(cli->qp, &qx, IBV_QP_STATE | IBV_QP_DEST_QPN, &qi) == 0 &&
			      qx.qp_state == IBV_QPS_RTS && qx.dest_qp_num == srv->qp->qp_num,
			      "the client's QP in RTS, to the child's");
			CHECK(ibv_query_qp(srv->qp, &qx, IBV_QP_STATE | IBV_QP_DEST_QPN, &qi) == 0 &&
			      qx.qp_state == IBV_QPS_RTS && qx.dest_qp_num == cli->qp->qp_num,
			      "the child's QP in RTS, to the client's");
			/* Linux's flow label, (sport * 31 + dport) & 0xfffff, on both
			 * (the child's from the REQ's path): the RC QPs' UDP source
			 * port is rxe's. */
			unsigned fl = (ntohs(rdma_get_src_port(cli)) * 31u +
				       ntohs(rdma_get_dst_port(cli))) & 0xfffff;
			CHECK(ibv_query_qp(cli->qp, &qx, IBV_QP_AV, &qi) == 0 &&
			      qx.ah_attr.grh.flow_label == fl && qx.ah_attr.is_global,
			      "the client's flow label %x, want %x", qx.ah_attr.grh.flow_label, fl);
			CHECK(ibv_query_qp(srv->qp, &qx, IBV_QP_AV, &qi) == 0 &&
			      qx.ah_attr.grh.flow_label == fl,
			      "the child's flow label %x, want %x", qx.ah_attr.grh.flow_label, fl);
		}
		CHECK(rdma_disconnect(cli) == 0, "rdma_disconnect");
		both(ch2, RDMA_CM_EVENT_DISCONNECTED, cli, srv, NULL);
		CHECK(rdma_disconnect(srv) == 0, "rdma_disconnect after the peer's");
		both(ch2, RDMA_CM_EVENT_TIMEWAIT_EXIT, cli, srv, NULL);
		rdma_destroy_qp(cli);
		rdma_destroy_qp(srv);
		CHECK(rdma_destroy_id(cli) == 0 && rdma_destroy_id(srv) == 0, "destroy them");

		/* A request the program refuses: REJ reason 28 (consumer defined)
		 * with its private data. */
		CHECK(rdma_create_id(ch2, &cli, NULL, RDMA_PS_TCP) == 0, "a third client");
		CHECK(rdma_resolve_addr(cli, NULL, (struct sockaddr *)&la, 2000) == 0, "resolve");
		CHECK(rdma_ack_cm_event(next_event(ch2, RDMA_CM_EVENT_ADDR_RESOLVED)) == 0, "ack");
		CHECK(rdma_resolve_route(cli, 2000) == 0, "route");
		CHECK(rdma_ack_cm_event(next_event(ch2, RDMA_CM_EVENT_ROUTE_RESOLVED)) == 0, "ack");
		cp.qp_num = 0x98;
		CHECK(rdma_connect(cli, &cp) == 0, "rdma_connect (no QP)");
		e = any_event(ch2);
		CHECK(e->event == RDMA_CM_EVENT_CONNECT_REQUEST && e->param.conn.qp_num == 0x98,
		      "CONNECT_REQUEST: %s", rdma_event_str(e->event));
		srv = e->id;
		CHECK(rdma_ack_cm_event(e) == 0, "ack");
		CHECK(rdma_reject(srv, "busy", 5) == 0, "rdma_reject");
		e = any_event(ch2);
		CHECK(e->id == cli && e->event == RDMA_CM_EVENT_REJECTED && e->status == 28 &&
		      e->param.conn.private_data && !strcmp(e->param.conn.private_data, "busy"),
		      "REJECTED, status %d (28), the private data", e->status);
		CHECK(rdma_ack_cm_event(e) == 0, "ack");
		CHECK(rdma_destroy_id(cli) == 0 && rdma_destroy_id(srv) == 0, "destroy them");

		/* rdma_reject_ece: reason 35 (vendor option not supported). */
		cli = resolved(ch2, &la);
		CHECK(rdma_connect(cli, &cp) == 0, "rdma_connect (no QP)");
		e = any_event(ch2);
		CHECK(e->event == RDMA_CM_EVENT_CONNECT_REQUEST, "CONNECT_REQUEST: %s",
		      rdma_event_str(e->event));
		srv = e->id;
		CHECK(rdma_ack_cm_event(e) == 0, "ack");
		CHECK(rdma_reject_ece(srv, NULL, 0) == 0, "rdma_reject_ece");
		e = any_event(ch2);
		CHECK(e->id == cli && e->event == RDMA_CM_EVENT_REJECTED && e->status == 35,
		      "REJECTED, status %d (35)", e->status);
		CHECK(rdma_ack_cm_event(e) == 0, "ack");
		CHECK(rdma_destroy_id(cli) == 0 && rdma_destroy_id(srv) == 0, "destroy them");

		/* The backlog (1): a request while the listener has one not taken
		 * is refused. And a request's id destroyed before the request is
		 * acknowledged: the event is counted for the listener, as
		 * librdmacm counts it, so the destroy does not wait for it (nor
		 * hang), and the peer is refused. */
		{
			struct rdma_event_channel *ch3 = rdma_create_event_channel();
			struct rdma_cm_id *c1, *c2;
			CHECK(ch3, "a channel for the clients");
			c1 = resolved(ch3, &la);
			c2 = resolved(ch3, &la);
			cp.qp_num = 0x9a;
			CHECK(rdma_connect(c1, &cp) == 0, "connect the first");
			CHECK(readable(ch2->fd, 5000) == 1, "its request waits, not taken");
			cp.qp_num = 0x9b;
			CHECK(rdma_connect(c2, &cp) == 0, "connect the second");
			e = any_event(ch3);
			CHECK(e->id == c2 && e->event == RDMA_CM_EVENT_REJECTED,
			      "the second, beyond the backlog, is refused: %s",
			      rdma_event_str(e->event));
			CHECK(rdma_ack_cm_event(e) == 0, "ack");
			e = any_event(ch2);
			CHECK(e->event == RDMA_CM_EVENT_CONNECT_REQUEST && e->listen_id == lis &&
			      e->param.conn.qp_num == 0x9a, "the first's request: %s",
			      rdma_event_str(e->event));
			CHECK(readable(ch2->fd, 0) == 0, "no other request");
			CHECK(rdma_destroy_id(e->id) == 0, "its id destroyed before the ack");
			CHECK(rdma_ack_cm_event(e) == 0, "then acknowledged");
			e = any_event(ch3);
			CHECK(e->id == c1 && e->event == RDMA_CM_EVENT_REJECTED,
			      "the first is refused: %s", rdma_event_str(e->event));
			CHECK(rdma_ack_cm_event(e) == 0, "ack");
			CHECK(rdma_destroy_id(c1) == 0 && rdma_destroy_id(c2) == 0, "destroy them");
			rdma_destroy_event_channel(ch3);
		}
		printf("ok: the listen backlog; a request's id destroyed before its ack\n");

		CHECK(rdma_create_id(ch2, &cli2, NULL, RDMA_PS_TCP) == 0, "another client");
		CHECK(rdma_resolve_addr(cli2, NULL, (struct sockaddr *)&la, 2000) == 0, "resolve");
		CHECK(rdma_ack_cm_event(next_event(ch2, RDMA_CM_EVENT_ADDR_RESOLVED)) == 0, "ack");
		CHECK(rdma_resolve_route(cli2, 2000) == 0, "route");
		CHECK(rdma_ack_cm_event(next_event(ch2, RDMA_CM_EVENT_ROUTE_RESOLVED)) == 0, "ack");
		cp.qp_num = 0x99;
		CHECK(rdma_connect(cli2, &cp) == 0, "rdma_connect (no QP)");
		CHECK(readable(ch2->fd, 5000) == 1, "the request waits");
		CHECK(rdma_destroy_id(lis) == 0, "destroy the listener, the request not taken");
		e = any_event(ch2);
		CHECK(e->id == cli2 && e->event == RDMA_CM_EVENT_REJECTED, "the client is refused: %s",
		      rdma_event_str(e->event));
		CHECK(rdma_ack_cm_event(e) == 0 && rdma_destroy_id(cli2) == 0, "destroy it");
		CHECK(readable(ch2->fd, 0) == 0, "nothing else");
		rdma_destroy_event_channel(ch2);
	}
	printf("ok: a connection through the device's CM: CONNECT_REQUEST, ESTABLISHED, DISCONNECTED, TIMEWAIT_EXIT; REJECTED\n");

	/* An address no device reaches: ADDR_ERROR. */
	CHECK(rdma_create_id(ch, &id4, NULL, RDMA_PS_TCP) == 0, "id4");
	{
		struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons(1) };
		inet_pton(AF_INET6, "2001:db8::1", &s6.sin6_addr);
		CHECK(rdma_resolve_addr(id4, NULL, (struct sockaddr *)&s6, 2000) == 0, "resolve");
		e = next_event(ch, RDMA_CM_EVENT_ADDR_ERROR);
		CHECK(e->id == id4 && e->status == -ENETUNREACH, "status %d", e->status);
		CHECK(rdma_ack_cm_event(e) == 0, "ack");
		CHECK(rdma_resolve_route(id4, 2000) == -1 && errno == EINVAL, "no route to resolve");
	}
	printf("ok: ADDR_ERROR for an address no device reaches\n");

	/* rdma_migrate_id: the id's events follow it to another channel. */
	{
		struct rdma_event_channel *ch2 = rdma_create_event_channel();
		struct sockaddr_in6 s6 = { .sin6_family = AF_INET6 };
		CHECK(ch2, "a second channel");
		CHECK(rdma_migrate_id(id4, ch2) == 0 && id4->channel == ch2, "rdma_migrate_id");
		inet_pton(AF_INET6, "::1", &s6.sin6_addr);
		CHECK(rdma_resolve_addr(id4, NULL, (struct sockaddr *)&s6, 2000) == 0,
		      "resolve again");
		CHECK(readable(ch->fd, 0) == 0, "nothing on the old channel");
		e = next_event(ch2, RDMA_CM_EVENT_ADDR_ERROR);
		CHECK(e->id == id4, "the event on the new channel");
		CHECK(rdma_ack_cm_event(e) == 0, "ack");
		CHECK(rdma_migrate_id(id4, ch) == 0 && id4->channel == ch, "and back");
		rdma_destroy_event_channel(ch2);
	}
	printf("ok: rdma_migrate_id moves the id's events\n");

	/* O_NONBLOCK: EAGAIN. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	CHECK(rdma_get_cm_event(ch, &e) == -1 && errno == EAGAIN, "EAGAIN");
	printf("ok: EAGAIN on an O_NONBLOCK channel\n");

	/* Synchronous mode, UD. */
	CHECK(rdma_create_id(NULL, &sid, NULL, RDMA_PS_UDP) == 0 && sid->qp_type == IBV_QPT_UD,
	      "a synchronous id");
	CHECK(rdma_resolve_addr(sid, NULL, res->ai_dst_addr, 2000) == 0 && sid->event &&
	      sid->event->event == RDMA_CM_EVENT_ADDR_RESOLVED, "synchronous resolve");
	CHECK(rdma_resolve_route(sid, 2000) == 0 &&
	      sid->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED, "synchronous route");
	qpa.qp_type = IBV_QPT_UD;
	qpa.send_cq = qpa.recv_cq = NULL; /* rdma_create_qp wrote the first QP's */
	CHECK(rdma_create_qp(sid, NULL, &qpa) == 0, "a UD QP");
	CHECK(ibv_query_qp(sid->qp, &qattr, IBV_QP_STATE | IBV_QP_QKEY, &qinit) == 0 &&
	      qattr.qp_state == IBV_QPS_RTS && qattr.qkey == RDMA_UDP_QKEY, "UD QP in RTS");
	rdma_destroy_qp(sid);
	CHECK(rdma_migrate_id(sid, NULL) == -1 && errno == EINVAL, "a synchronous id stays");
	CHECK(rdma_destroy_id(sid) == 0, "destroy the synchronous id");
	printf("ok: synchronous mode, UD QP in RTS\n");

	/* Options. */
	{
		int one = 1;
		uint8_t tos = 32;
		CHECK(rdma_set_option(id3, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one) == 0,
		      "REUSEADDR");
		CHECK(rdma_set_option(id3, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0, "TOS");
		CHECK(rdma_set_option(id3, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &one, sizeof one) == -1 &&
		      errno == EINVAL, "TOS is a byte");
		CHECK(rdma_set_option(id3, RDMA_OPTION_ID, 99, &one, sizeof one) == -1 && errno == ENOSYS,
		      "an unknown option");
		CHECK(rdma_set_option(id3, 7, 0, &one, sizeof one) == -1 && errno == ENOSYS,
		      "an unknown level");
	}
	printf("ok: rdma_set_option\n");

	/* An endpoint (passive) and the request it cannot get yet. */
	qpa.send_cq = qpa.recv_cq = NULL;
	CHECK(rdma_create_ep(&ep, pres, NULL, &qpa) == 0 && ep->verbs && ep->channel,
	      "rdma_create_ep, passive");
	CHECK(rdma_get_request(ep, &id2) == -1 && errno == EINVAL, "not listening");
	rdma_destroy_ep(ep);
	printf("ok: rdma_create_ep\n");

	CHECK(rdma_destroy_id(id) == 0 && rdma_destroy_id(id2) == 0 && rdma_destroy_id(id3) == 0 &&
	      rdma_destroy_id(id4) == 0, "rdma_destroy_id");
	rdma_freeaddrinfo(res);
	rdma_freeaddrinfo(pres);
	rdma_destroy_event_channel(ch);
	CHECK(open_fds() == fds0, "every fd closed: %d, were %d", open_fds(), fds0);
	printf("ok: everything destroyed, no fd left open\n");
	return 0;
}
