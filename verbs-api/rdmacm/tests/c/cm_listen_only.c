/* A listener that never accepts: a server that takes a connect request
 * and dies before answering it (the test kills it). Built against the real
 * <rdma/rdma_cma.h>, run on uroce's libraries.
 * Usage: cm_listen_only ADDRESS PORT. Prints "listening", then the first
 * event's name ("RDMA_CM_EVENT_CONNECT_REQUEST"), then waits forever. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

int main(int argc, char **argv)
{
	struct rdma_event_channel *channel;
	struct rdma_cm_event *event;
	struct rdma_cm_id *id;
	struct sockaddr_in sin = { .sin_family = AF_INET };

	if (argc != 3 || inet_pton(AF_INET, argv[1], &sin.sin_addr) != 1) {
		fprintf(stderr, "usage: %s ADDRESS PORT\n", argv[0]);
		return 2;
	}
	sin.sin_port = htons((unsigned short)atoi(argv[2]));
	channel = rdma_create_event_channel();
	if (!channel || rdma_create_id(channel, &id, NULL, RDMA_PS_TCP)) {
		perror("rdma_create_id");
		return 1;
	}
	if (rdma_bind_addr(id, (struct sockaddr *)&sin) || rdma_listen(id, 1)) {
		perror("rdma_listen");
		return 1;
	}
	printf("listening\n");
	fflush(stdout);
	if (rdma_get_cm_event(channel, &event)) {
		perror("rdma_get_cm_event");
		return 1;
	}
	printf("%s\n", rdma_event_str(event->event));
	fflush(stdout);
	for (;;)
		pause();
}
