/*
 * uroce-verbs-ops: makes rxe send the RC opcodes perftest cannot produce:
 *   -o send_imm   SEND with immediate  (SEND_ONLY_WITH_IMMEDIATE, SEND_FIRST/MIDDLE/LAST_WITH_IMMEDIATE)
 *   -o send_inv   SEND with invalidate (SEND_ONLY_WITH_INVALIDATE, SEND_LAST_WITH_INVALIDATE); the server
 *                 binds one type-2 memory window per message and the client invalidates each by its rkey
 *   -o write_imm  RDMA WRITE with immediate (WRITE_ONLY_WITH_IMMEDIATE, WRITE_FIRST/MIDDLE/LAST_WITH_IMMEDIATE)
 *                 into the server's buffer, for peers whose perftest lacks --write_with_imm (4.5)
 *
 *   server: uroce-verbs-ops -o OP [-s SIZE] [-n ITERS] [-g GID_INDEX] [-p PORT]
 *   client: uroce-verbs-ops -o OP [-s SIZE] [-n ITERS] [-g GID_INDEX] [-p PORT] SERVER_IPV4
 *
 * Out-of-band exchange on TCP PORT (default 18516, deliberately not perftest's 18515): each side
 * writes a fixed 64-byte struct xinfo (host byte order, both sides are x86-64) and reads the peer's;
 * a second exchange carries the server's memory-window rkeys once its QP is RTS, a third one ends
 * the run. Exit status 0 when every work completion succeeded (and, on the server, carried the
 * expected immediate value / invalidated rkey).
 * Built by build-verbs-tool.sh against Debian's libibverbs-dev; part of uroce's interop harness.
 */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_ITERS 16
#define IMM_BASE 0x75726f00u /* "uro\0" + index */

/* 64 bytes on the wire */
struct xinfo {
	uint32_t qpn, psn;
	uint8_t gid[16];
	uint32_t nkeys;
	uint32_t rkey[7];
	uint64_t addr;
} __attribute__((packed));
_Static_assert(sizeof(struct xinfo) == 64, "xinfo is 64 bytes");

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static void xchg(int fd, int server, const void *out, void *in, size_t len)
{
	/* lock-step like perftest: the client writes first, the server reads first */
	if (server) {
		if (read(fd, in, len) != (ssize_t)len) die("oob read");
		if (write(fd, out, len) != (ssize_t)len) die("oob write");
	} else {
		if (write(fd, out, len) != (ssize_t)len) die("oob write");
		if (read(fd, in, len) != (ssize_t)len) die("oob read");
	}
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	int n;
	do n = ibv_poll_cq(cq, 1, wc);
	while (n == 0);
	if (n < 0) die("ibv_poll_cq");
	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "completion wr_id %llu: %s (%d)\n", (unsigned long long)wc->wr_id,
			ibv_wc_status_str(wc->status), wc->status);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *op = "send_imm", *peer = NULL;
	int size = 3, iters = 5, gidx = 1, port = 18516, c, rc = 0;
	while ((c = getopt(argc, argv, "o:s:n:g:p:")) != -1) {
		switch (c) {
		case 'o': op = optarg; break;
		case 's': size = atoi(optarg); break;
		case 'n': iters = atoi(optarg); break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		default: fprintf(stderr, "usage: see source\n"); return 2;
		}
	}
	if (optind < argc) peer = argv[optind];
	int server = peer == NULL, inv = !strcmp(op, "send_inv"), wimm = !strcmp(op, "write_imm");
	if ((!inv && !wimm && strcmp(op, "send_imm")) || size < 1 || iters < 1 || iters > (inv ? 7 : MAX_ITERS)) {
		fprintf(stderr, "bad -o/-s/-n\n");
		return 2;
	}

	int ndev;
	struct ibv_device **devs = ibv_get_device_list(&ndev);
	if (!devs || ndev < 1) die("no RDMA device");
	struct ibv_context *ctx = ibv_open_device(devs[0]);
	if (!ctx) die("ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	char *buf = calloc(1, (size_t)size * MAX_ITERS);
	if (!pd || !scq || !rcq || !buf) die("pd/cq/buf");
	for (int i = 0; i < size * MAX_ITERS; i++) buf[i] = (char)(i * 7 + 1);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, (size_t)size * MAX_ITERS,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
	if (!mr) die("ibv_reg_mr");
	struct ibv_qp_init_attr qia = {
		.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &qia);
	if (!qp) die("ibv_create_qp");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("INIT");

	struct xinfo me = { .qpn = qp->qp_num, .psn = (uint32_t)(getpid() * 2654435761u) & 0xffffff }, them;
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, gidx, &gid)) die("ibv_query_gid");
	memcpy(me.gid, gid.raw, 16);

	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (server) {
		int ls = fd;
		setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 1)) die("listen");
		printf("uroce-verbs-ops: %s server waiting on tcp %d\n", op, port);
		fflush(stdout);
		fd = accept(ls, NULL, NULL);
		if (fd < 0) die("accept");
		close(ls);
	} else {
		inet_pton(AF_INET, peer, &sa.sin_addr);
		if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) die("connect");
	}
	xchg(fd, server, &me, &them, sizeof me);

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = them.qpn;
	a.rq_psn = them.psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, them.gid, 16);
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = me.psn;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");

	struct ibv_wc wc;
	struct ibv_mw *mw[MAX_ITERS] = { 0 };
	if (server) {
		for (int i = 0; i < iters; i++) {
			struct ibv_sge sge = { .addr = (uintptr_t)buf + (size_t)i * size, .length = size, .lkey = mr->lkey };
			struct ibv_recv_wr rw = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
			if (ibv_post_recv(qp, &rw, &bad)) die("ibv_post_recv");
		}
		if (inv) {
			/* one type-2 window per message, bound through the send queue (IBTA 10.6.7.2) */
			for (int i = 0; i < iters; i++) {
				mw[i] = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
				if (!mw[i]) die("ibv_alloc_mw");
				struct ibv_send_wr bw = { .wr_id = 100 + i, .opcode = IBV_WR_BIND_MW,
							  .send_flags = IBV_SEND_SIGNALED }, *bad;
				bw.bind_mw.mw = mw[i];
				bw.bind_mw.rkey = ibv_inc_rkey(mw[i]->rkey);
				bw.bind_mw.bind_info.mr = mr;
				bw.bind_mw.bind_info.addr = (uintptr_t)buf + (size_t)i * size;
				bw.bind_mw.bind_info.length = size;
				bw.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
				if (ibv_post_send(qp, &bw, &bad)) die("bind mw");
				if (poll_one(scq, &wc)) return 1;
				me.rkey[i] = bw.bind_mw.rkey;
			}
			me.nkeys = iters;
		} else if (wimm) {
			me.nkeys = 1;
			me.rkey[0] = mr->rkey;
			me.addr = (uintptr_t)buf;
		}
	}
	xchg(fd, server, &me, &them, sizeof me);

	if (server) {
		for (int i = 0; i < iters; i++) {
			if (poll_one(rcq, &wc)) return 1;
			/* rxe quirk: its provider copies the kernel's IB_WC_WITH_INVALIDATE (1 << 2) into
			 * wc_flags, where libibverbs has IBV_WC_IP_CSUM_OK; IBV_WC_WITH_INV is 1 << 3 */
			int imm = !!(wc.wc_flags & IBV_WC_WITH_IMM),
			    winv = !!(wc.wc_flags & (IBV_WC_WITH_INV | IBV_WC_IP_CSUM_OK));
			uint32_t v = imm ? ntohl(wc.imm_data) : wc.invalidated_rkey;
			/* a WRITE with immediate consumes a receive WQE in posting order, whatever it wrote */
			int ok = wc.opcode == (wimm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV) && (int)wc.byte_len == size &&
				 (inv ? winv && v == me.rkey[wc.wr_id] : imm && v == IMM_BASE + (uint32_t)wc.wr_id);
			printf("recv %llu: %u bytes %s 0x%08x wc_flags 0x%x %s\n", (unsigned long long)wc.wr_id,
			       wc.byte_len, imm ? "imm" : winv ? "invalidated rkey" : "plain", v, wc.wc_flags,
			       ok ? "ok" : "UNEXPECTED");
			rc |= !ok;
		}
	} else {
		for (int i = 0; i < iters; i++) {
			struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = size, .lkey = mr->lkey };
			struct ibv_send_wr sw = { .wr_id = i, .sg_list = &sge, .num_sge = 1,
						  .send_flags = IBV_SEND_SIGNALED }, *bad;
			if (wimm) {
				if (them.nkeys != 1) die("server sent no buffer");
				sw.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
				sw.imm_data = htonl(IMM_BASE + (uint32_t)i);
				sw.wr.rdma.remote_addr = them.addr + (uint64_t)i * size;
				sw.wr.rdma.rkey = them.rkey[0];
			} else if (inv) {
				if ((uint32_t)i >= them.nkeys) die("server sent too few rkeys");
				sw.opcode = IBV_WR_SEND_WITH_INV;
				sw.invalidate_rkey = them.rkey[i];
			} else {
				sw.opcode = IBV_WR_SEND_WITH_IMM;
				sw.imm_data = htonl(IMM_BASE + (uint32_t)i);
			}
			if (ibv_post_send(qp, &sw, &bad)) die("ibv_post_send");
			if (poll_one(scq, &wc)) return 1;
		}
		printf("sent %d x %s of %d bytes\n", iters, op, size);
	}
	char done[8] = "done", peerdone[8];
	xchg(fd, server, done, peerdone, sizeof done);
	close(fd);
	ibv_destroy_qp(qp);
	for (int i = 0; i < iters; i++)
		if (mw[i]) ibv_dealloc_mw(mw[i]);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(devs);
	return rc;
}
