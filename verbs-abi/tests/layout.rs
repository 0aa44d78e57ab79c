//! uroce's `#[repr(C)]` libibverbs structs against Debian's C headers (`libibverbs-dev`): a C
//! program compiled here prints `sizeof` and `offsetof` for every struct and named field, and
//! each must equal what Rust computes. `ibv_port_attr` is the one that differs by version:
//! rdma-core 44's is 52 bytes, 56's (and uroce's) 56, with every common field in place.

use core::mem::{offset_of, size_of};
use std::collections::BTreeMap;
use std::process::Command;
use uroce_verbs::abi::*;

const C: &str = r#"
#include <stddef.h>
#include <stdio.h>
#include <infiniband/verbs.h>
#define S(t) printf("size %s %zu\n", #t, sizeof(struct t));
#define O(t, f) printf("offset %s.%s %zu\n", #t, #f, offsetof(struct t, f));
int main(void) {
    S(ibv_device) O(ibv_device, node_type) O(ibv_device, transport_type) O(ibv_device, name)
    O(ibv_device, dev_name) O(ibv_device, dev_path) O(ibv_device, ibdev_path)
    S(ibv_context_ops) O(ibv_context_ops, poll_cq) O(ibv_context_ops, req_notify_cq)
    O(ibv_context_ops, post_srq_recv) O(ibv_context_ops, post_send) O(ibv_context_ops, post_recv)
    S(ibv_context) O(ibv_context, ops) O(ibv_context, cmd_fd) O(ibv_context, async_fd)
    O(ibv_context, num_comp_vectors) O(ibv_context, mutex) O(ibv_context, abi_compat)
    S(verbs_context) O(verbs_context, query_port) O(verbs_context, create_cq_ex) O(verbs_context, priv)
    O(verbs_context, query_device_ex) O(verbs_context, create_qp_ex) O(verbs_context, sz)
    O(verbs_context, context)
    S(ibv_device_attr) O(ibv_device_attr, node_guid) O(ibv_device_attr, max_mr_size)
    O(ibv_device_attr, vendor_id) O(ibv_device_attr, max_qp) O(ibv_device_attr, device_cap_flags)
    O(ibv_device_attr, max_qp_rd_atom) O(ibv_device_attr, atomic_cap) O(ibv_device_attr, max_mcast_grp)
    O(ibv_device_attr, max_ah) O(ibv_device_attr, max_srq) O(ibv_device_attr, max_srq_sge)
    O(ibv_device_attr, max_pkeys) O(ibv_device_attr, local_ca_ack_delay) O(ibv_device_attr, phys_port_cnt)
    S(ibv_port_attr) O(ibv_port_attr, gid_tbl_len) O(ibv_port_attr, max_msg_sz) O(ibv_port_attr, pkey_tbl_len)
    O(ibv_port_attr, lid) O(ibv_port_attr, lmc) O(ibv_port_attr, active_width) O(ibv_port_attr, active_speed)
    O(ibv_port_attr, phys_state) O(ibv_port_attr, link_layer) O(ibv_port_attr, flags)
    O(ibv_port_attr, port_cap_flags2)
    S(ibv_gid_entry) O(ibv_gid_entry, gid_index) O(ibv_gid_entry, port_num) O(ibv_gid_entry, gid_type)
    O(ibv_gid_entry, ndev_ifindex)
    S(ibv_pd) O(ibv_pd, handle)
    S(ibv_mr) O(ibv_mr, addr) O(ibv_mr, length) O(ibv_mr, lkey) O(ibv_mr, rkey)
    S(ibv_comp_channel) O(ibv_comp_channel, fd)
    S(ibv_async_event) O(ibv_async_event, event_type)
    S(ibv_device_attr_ex) O(ibv_device_attr_ex, phys_port_cnt_ex)
    S(ibv_cq) O(ibv_cq, cq_context) O(ibv_cq, cqe) O(ibv_cq, mutex) O(ibv_cq, cond) O(ibv_cq, async_events_completed)
    S(ibv_qp) O(ibv_qp, srq) O(ibv_qp, qp_num) O(ibv_qp, state) O(ibv_qp, qp_type) O(ibv_qp, mutex)
    O(ibv_qp, events_completed)
    S(ibv_qp_init_attr) O(ibv_qp_init_attr, cap) O(ibv_qp_init_attr, qp_type) O(ibv_qp_init_attr, sq_sig_all)
    S(ibv_ah_attr) O(ibv_ah_attr, dlid) O(ibv_ah_attr, sl) O(ibv_ah_attr, is_global) O(ibv_ah_attr, port_num)
    S(ibv_global_route) O(ibv_global_route, flow_label) O(ibv_global_route, sgid_index)
    O(ibv_global_route, traffic_class)
    S(ibv_qp_attr) O(ibv_qp_attr, qkey) O(ibv_qp_attr, dest_qp_num) O(ibv_qp_attr, cap) O(ibv_qp_attr, ah_attr)
    O(ibv_qp_attr, alt_ah_attr) O(ibv_qp_attr, pkey_index) O(ibv_qp_attr, max_rd_atomic) O(ibv_qp_attr, timeout)
    O(ibv_qp_attr, rnr_retry) O(ibv_qp_attr, alt_timeout) O(ibv_qp_attr, rate_limit)
    S(ibv_sge) S(ibv_recv_wr) O(ibv_recv_wr, num_sge)
    S(ibv_send_wr) O(ibv_send_wr, num_sge) O(ibv_send_wr, opcode) O(ibv_send_wr, send_flags) O(ibv_send_wr, imm_data)
    O(ibv_send_wr, wr.rdma.remote_addr) O(ibv_send_wr, wr.rdma.rkey) O(ibv_send_wr, wr.atomic.compare_add)
    O(ibv_send_wr, wr.atomic.swap) O(ibv_send_wr, wr.atomic.rkey)
    S(ibv_wc) O(ibv_wc, status) O(ibv_wc, opcode) O(ibv_wc, byte_len) O(ibv_wc, imm_data) O(ibv_wc, qp_num)
    O(ibv_wc, src_qp) O(ibv_wc, wc_flags) O(ibv_wc, pkey_index) O(ibv_wc, sl)
    S(ibv_ah) O(ibv_ah, pd) O(ibv_ah, handle)
    S(ibv_srq) O(ibv_srq, srq_context) O(ibv_srq, pd) O(ibv_srq, handle) O(ibv_srq, mutex) O(ibv_srq, cond)
    O(ibv_srq, events_completed) S(ibv_srq_attr) S(ibv_srq_init_attr) O(ibv_srq_init_attr, attr)
    S(ibv_grh) O(ibv_grh, paylen) O(ibv_grh, next_hdr) O(ibv_grh, hop_limit) O(ibv_grh, sgid) O(ibv_grh, dgid)
    S(ibv_qp_ex) O(ibv_qp_ex, comp_mask) O(ibv_qp_ex, wr_id) O(ibv_qp_ex, wr_flags)
    O(ibv_qp_ex, wr_atomic_cmp_swp) O(ibv_qp_ex, wr_rdma_write) O(ibv_qp_ex, wr_send) O(ibv_qp_ex, wr_send_tso)
    O(ibv_qp_ex, wr_set_ud_addr) O(ibv_qp_ex, wr_set_inline_data_list) O(ibv_qp_ex, wr_set_sge_list)
    O(ibv_qp_ex, wr_start) O(ibv_qp_ex, wr_complete) O(ibv_qp_ex, wr_abort) O(ibv_qp_ex, wr_atomic_write)
    S(ibv_data_buf) O(ibv_data_buf, length)
    S(ibv_qp_init_attr_ex) O(ibv_qp_init_attr_ex, cap) O(ibv_qp_init_attr_ex, qp_type)
    O(ibv_qp_init_attr_ex, sq_sig_all) O(ibv_qp_init_attr_ex, comp_mask) O(ibv_qp_init_attr_ex, pd)
    O(ibv_qp_init_attr_ex, xrcd) O(ibv_qp_init_attr_ex, create_flags) O(ibv_qp_init_attr_ex, max_tso_header)
    O(ibv_qp_init_attr_ex, rwq_ind_tbl) O(ibv_qp_init_attr_ex, rx_hash_conf) O(ibv_qp_init_attr_ex, source_qpn)
    O(ibv_qp_init_attr_ex, send_ops_flags)
    S(ibv_cq_ex) O(ibv_cq_ex, comp_events_completed) O(ibv_cq_ex, comp_mask) O(ibv_cq_ex, status)
    O(ibv_cq_ex, wr_id) O(ibv_cq_ex, start_poll) O(ibv_cq_ex, end_poll) O(ibv_cq_ex, read_opcode)
    O(ibv_cq_ex, read_wc_flags) O(ibv_cq_ex, read_dlid_path_bits) O(ibv_cq_ex, read_tm_info)
    O(ibv_cq_ex, read_completion_wallclock_ns)
    S(ibv_cq_init_attr_ex) O(ibv_cq_init_attr_ex, cq_context) O(ibv_cq_init_attr_ex, comp_vector)
    O(ibv_cq_init_attr_ex, wc_flags) O(ibv_cq_init_attr_ex, comp_mask) O(ibv_cq_init_attr_ex, flags)
    O(ibv_cq_init_attr_ex, parent_domain)
    return 0;
}
"#;

fn rust_layout() -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    let mut s = |k: &str, v: usize| {
        m.insert(k.to_string(), v);
    };
    s("size ibv_device", size_of::<IbvDevice>());
    s("offset ibv_device.node_type", offset_of!(IbvDevice, node_type));
    s("offset ibv_device.transport_type", offset_of!(IbvDevice, transport_type));
    s("offset ibv_device.name", offset_of!(IbvDevice, name));
    s("offset ibv_device.dev_name", offset_of!(IbvDevice, dev_name));
    s("offset ibv_device.dev_path", offset_of!(IbvDevice, dev_path));
    s("offset ibv_device.ibdev_path", offset_of!(IbvDevice, ibdev_path));
    s("size ibv_context_ops", size_of::<IbvContextOps>());
    s("offset ibv_context_ops.poll_cq", offset_of!(IbvContextOps, poll_cq));
    s("offset ibv_context_ops.req_notify_cq", offset_of!(IbvContextOps, req_notify_cq));
    s("offset ibv_context_ops.post_srq_recv", offset_of!(IbvContextOps, post_srq_recv));
    s("offset ibv_context_ops.post_send", offset_of!(IbvContextOps, post_send));
    s("offset ibv_context_ops.post_recv", offset_of!(IbvContextOps, post_recv));
    s("size ibv_context", size_of::<IbvContext>());
    s("offset ibv_context.ops", offset_of!(IbvContext, ops));
    s("offset ibv_context.cmd_fd", offset_of!(IbvContext, cmd_fd));
    s("offset ibv_context.async_fd", offset_of!(IbvContext, async_fd));
    s("offset ibv_context.num_comp_vectors", offset_of!(IbvContext, num_comp_vectors));
    s("offset ibv_context.mutex", offset_of!(IbvContext, mutex));
    s("offset ibv_context.abi_compat", offset_of!(IbvContext, abi_compat));
    s("size verbs_context", size_of::<VerbsContext>());
    s("offset verbs_context.query_port", offset_of!(VerbsContext, query_port));
    s("offset verbs_context.create_cq_ex", offset_of!(VerbsContext, create_cq_ex));
    s("offset verbs_context.priv", offset_of!(VerbsContext, priv_));
    s("offset verbs_context.query_device_ex", offset_of!(VerbsContext, query_device_ex));
    s("offset verbs_context.create_qp_ex", offset_of!(VerbsContext, create_qp_ex));
    s("offset verbs_context.sz", offset_of!(VerbsContext, sz));
    s("offset verbs_context.context", offset_of!(VerbsContext, context));
    s("size ibv_device_attr", size_of::<DeviceAttr>());
    s("offset ibv_device_attr.node_guid", offset_of!(DeviceAttr, node_guid));
    s("offset ibv_device_attr.max_mr_size", offset_of!(DeviceAttr, max_mr_size));
    s("offset ibv_device_attr.vendor_id", offset_of!(DeviceAttr, vendor_id));
    s("offset ibv_device_attr.max_qp", offset_of!(DeviceAttr, max_qp));
    s("offset ibv_device_attr.device_cap_flags", offset_of!(DeviceAttr, device_cap_flags));
    s("offset ibv_device_attr.max_qp_rd_atom", offset_of!(DeviceAttr, max_qp_rd_atom));
    s("offset ibv_device_attr.atomic_cap", offset_of!(DeviceAttr, atomic_cap));
    s("offset ibv_device_attr.max_mcast_grp", offset_of!(DeviceAttr, max_mcast_grp));
    s("offset ibv_device_attr.max_ah", offset_of!(DeviceAttr, max_ah));
    s("offset ibv_device_attr.max_srq", offset_of!(DeviceAttr, max_srq));
    s("offset ibv_device_attr.max_srq_sge", offset_of!(DeviceAttr, max_srq_sge));
    s("offset ibv_device_attr.max_pkeys", offset_of!(DeviceAttr, max_pkeys));
    s("offset ibv_device_attr.local_ca_ack_delay", offset_of!(DeviceAttr, local_ca_ack_delay));
    s("offset ibv_device_attr.phys_port_cnt", offset_of!(DeviceAttr, phys_port_cnt));
    s("offset ibv_port_attr.gid_tbl_len", offset_of!(PortAttr, gid_tbl_len));
    s("offset ibv_port_attr.max_msg_sz", offset_of!(PortAttr, max_msg_sz));
    s("offset ibv_port_attr.pkey_tbl_len", offset_of!(PortAttr, pkey_tbl_len));
    s("offset ibv_port_attr.lid", offset_of!(PortAttr, lid));
    s("offset ibv_port_attr.lmc", offset_of!(PortAttr, lmc));
    s("offset ibv_port_attr.active_width", offset_of!(PortAttr, active_width));
    s("offset ibv_port_attr.active_speed", offset_of!(PortAttr, active_speed));
    s("offset ibv_port_attr.phys_state", offset_of!(PortAttr, phys_state));
    s("offset ibv_port_attr.link_layer", offset_of!(PortAttr, link_layer));
    s("offset ibv_port_attr.flags", offset_of!(PortAttr, flags));
    s("offset ibv_port_attr.port_cap_flags2", offset_of!(PortAttr, port_cap_flags2));
    s("size ibv_gid_entry", size_of::<GidEntry>());
    s("offset ibv_gid_entry.gid_index", offset_of!(GidEntry, gid_index));
    s("offset ibv_gid_entry.port_num", offset_of!(GidEntry, port_num));
    s("offset ibv_gid_entry.gid_type", offset_of!(GidEntry, gid_type));
    s("offset ibv_gid_entry.ndev_ifindex", offset_of!(GidEntry, ndev_ifindex));
    s("size ibv_pd", size_of::<IbvPd>());
    s("offset ibv_pd.handle", offset_of!(IbvPd, handle));
    s("size ibv_mr", size_of::<IbvMr>());
    s("offset ibv_mr.addr", offset_of!(IbvMr, addr));
    s("offset ibv_mr.length", offset_of!(IbvMr, length));
    s("offset ibv_mr.lkey", offset_of!(IbvMr, lkey));
    s("offset ibv_mr.rkey", offset_of!(IbvMr, rkey));
    s("size ibv_comp_channel", size_of::<IbvCompChannel>());
    s("offset ibv_comp_channel.fd", offset_of!(IbvCompChannel, fd));
    s("size ibv_async_event", size_of::<IbvAsyncEvent>());
    s("size ibv_device_attr_ex", DEVICE_ATTR_EX_LEN);
    s("offset ibv_device_attr_ex.phys_port_cnt_ex", PHYS_PORT_CNT_EX_OFFSET);
    s("offset ibv_async_event.event_type", offset_of!(IbvAsyncEvent, event_type));
    s("size ibv_cq", size_of::<IbvCq>());
    s("offset ibv_cq.cq_context", offset_of!(IbvCq, cq_context));
    s("offset ibv_cq.cqe", offset_of!(IbvCq, cqe));
    s("offset ibv_cq.mutex", offset_of!(IbvCq, mutex));
    s("offset ibv_cq.cond", offset_of!(IbvCq, cond));
    s("offset ibv_cq.async_events_completed", offset_of!(IbvCq, async_events_completed));
    s("size ibv_qp", size_of::<IbvQp>());
    s("offset ibv_qp.srq", offset_of!(IbvQp, srq));
    s("offset ibv_qp.qp_num", offset_of!(IbvQp, qp_num));
    s("offset ibv_qp.state", offset_of!(IbvQp, state));
    s("offset ibv_qp.qp_type", offset_of!(IbvQp, qp_type));
    s("offset ibv_qp.mutex", offset_of!(IbvQp, mutex));
    s("offset ibv_qp.events_completed", offset_of!(IbvQp, events_completed));
    s("size ibv_qp_init_attr", size_of::<QpInitAttrC>());
    s("offset ibv_qp_init_attr.cap", offset_of!(QpInitAttrC, cap));
    s("offset ibv_qp_init_attr.qp_type", offset_of!(QpInitAttrC, qp_type));
    s("offset ibv_qp_init_attr.sq_sig_all", offset_of!(QpInitAttrC, sq_sig_all));
    s("size ibv_ah_attr", size_of::<AhAttrC>());
    s("offset ibv_ah_attr.dlid", offset_of!(AhAttrC, dlid));
    s("offset ibv_ah_attr.sl", offset_of!(AhAttrC, sl));
    s("offset ibv_ah_attr.is_global", offset_of!(AhAttrC, is_global));
    s("offset ibv_ah_attr.port_num", offset_of!(AhAttrC, port_num));
    s("size ibv_global_route", size_of::<GlobalRoute>());
    s("offset ibv_global_route.flow_label", offset_of!(GlobalRoute, flow_label));
    s("offset ibv_global_route.sgid_index", offset_of!(GlobalRoute, sgid_index));
    s("offset ibv_global_route.traffic_class", offset_of!(GlobalRoute, traffic_class));
    s("size ibv_qp_attr", size_of::<QpAttrC>());
    s("offset ibv_qp_attr.qkey", offset_of!(QpAttrC, qkey));
    s("offset ibv_qp_attr.dest_qp_num", offset_of!(QpAttrC, dest_qp_num));
    s("offset ibv_qp_attr.cap", offset_of!(QpAttrC, cap));
    s("offset ibv_qp_attr.ah_attr", offset_of!(QpAttrC, ah_attr));
    s("offset ibv_qp_attr.alt_ah_attr", offset_of!(QpAttrC, alt_ah_attr));
    s("offset ibv_qp_attr.pkey_index", offset_of!(QpAttrC, pkey_index));
    s("offset ibv_qp_attr.max_rd_atomic", offset_of!(QpAttrC, max_rd_atomic));
    s("offset ibv_qp_attr.timeout", offset_of!(QpAttrC, timeout));
    s("offset ibv_qp_attr.rnr_retry", offset_of!(QpAttrC, rnr_retry));
    s("offset ibv_qp_attr.alt_timeout", offset_of!(QpAttrC, alt_timeout));
    s("offset ibv_qp_attr.rate_limit", offset_of!(QpAttrC, rate_limit));
    s("size ibv_sge", size_of::<SgeC>());
    s("size ibv_recv_wr", size_of::<RecvWrC>());
    s("offset ibv_recv_wr.num_sge", offset_of!(RecvWrC, num_sge));
    s("size ibv_send_wr", size_of::<SendWrC>());
    s("offset ibv_send_wr.num_sge", offset_of!(SendWrC, num_sge));
    s("offset ibv_send_wr.opcode", offset_of!(SendWrC, opcode));
    s("offset ibv_send_wr.send_flags", offset_of!(SendWrC, send_flags));
    s("offset ibv_send_wr.imm_data", offset_of!(SendWrC, imm_data));
    s("offset ibv_send_wr.wr.rdma.remote_addr", offset_of!(SendWrC, remote_addr));
    s("offset ibv_send_wr.wr.rdma.rkey", offset_of!(SendWrC, rkey_or_compare_add));
    s("offset ibv_send_wr.wr.atomic.compare_add", offset_of!(SendWrC, rkey_or_compare_add));
    s("offset ibv_send_wr.wr.atomic.swap", offset_of!(SendWrC, swap));
    s("offset ibv_send_wr.wr.atomic.rkey", offset_of!(SendWrC, atomic_rkey));
    s("size ibv_wc", size_of::<WcC>());
    s("offset ibv_wc.status", offset_of!(WcC, status));
    s("offset ibv_wc.opcode", offset_of!(WcC, opcode));
    s("offset ibv_wc.byte_len", offset_of!(WcC, byte_len));
    s("offset ibv_wc.imm_data", offset_of!(WcC, imm_data));
    s("offset ibv_wc.qp_num", offset_of!(WcC, qp_num));
    s("offset ibv_wc.src_qp", offset_of!(WcC, src_qp));
    s("offset ibv_wc.wc_flags", offset_of!(WcC, wc_flags));
    s("offset ibv_wc.pkey_index", offset_of!(WcC, pkey_index));
    s("offset ibv_wc.sl", offset_of!(WcC, sl));
    s("size ibv_ah", size_of::<IbvAh>());
    s("offset ibv_ah.pd", offset_of!(IbvAh, pd));
    s("offset ibv_ah.handle", offset_of!(IbvAh, handle));
    s("size ibv_srq", size_of::<IbvSrq>());
    s("offset ibv_srq.srq_context", offset_of!(IbvSrq, srq_context));
    s("offset ibv_srq.pd", offset_of!(IbvSrq, pd));
    s("offset ibv_srq.handle", offset_of!(IbvSrq, handle));
    s("offset ibv_srq.mutex", offset_of!(IbvSrq, mutex));
    s("offset ibv_srq.cond", offset_of!(IbvSrq, cond));
    s("offset ibv_srq.events_completed", offset_of!(IbvSrq, events_completed));
    s("size ibv_srq_attr", size_of::<SrqAttrC>());
    s("size ibv_srq_init_attr", size_of::<SrqInitAttrC>());
    s("offset ibv_srq_init_attr.attr", offset_of!(SrqInitAttrC, attr));
    s("size ibv_grh", size_of::<Grh>());
    s("offset ibv_grh.paylen", offset_of!(Grh, paylen));
    s("offset ibv_grh.next_hdr", offset_of!(Grh, next_hdr));
    s("offset ibv_grh.hop_limit", offset_of!(Grh, hop_limit));
    s("offset ibv_grh.sgid", offset_of!(Grh, sgid));
    s("offset ibv_grh.dgid", offset_of!(Grh, dgid));
    // struct ibv_qp_ex = struct ibv_qp (qp_base), then uroce's QpExTail.
    let qx = |f: usize| size_of::<IbvQp>() + f;
    s("offset ibv_qp_ex.comp_mask", qx(offset_of!(QpExTail, comp_mask)));
    s("offset ibv_qp_ex.wr_id", qx(offset_of!(QpExTail, wr_id)));
    s("offset ibv_qp_ex.wr_flags", qx(offset_of!(QpExTail, wr_flags)));
    s("offset ibv_qp_ex.wr_atomic_cmp_swp", qx(offset_of!(QpExTail, wr_atomic_cmp_swp)));
    s("offset ibv_qp_ex.wr_rdma_write", qx(offset_of!(QpExTail, wr_rdma_write)));
    s("offset ibv_qp_ex.wr_send", qx(offset_of!(QpExTail, wr_send)));
    s("offset ibv_qp_ex.wr_send_tso", qx(offset_of!(QpExTail, wr_send_tso)));
    s("offset ibv_qp_ex.wr_set_ud_addr", qx(offset_of!(QpExTail, wr_set_ud_addr)));
    s("offset ibv_qp_ex.wr_set_inline_data_list", qx(offset_of!(QpExTail, wr_set_inline_data_list)));
    s("offset ibv_qp_ex.wr_set_sge_list", qx(offset_of!(QpExTail, wr_set_sge_list)));
    s("offset ibv_qp_ex.wr_start", qx(offset_of!(QpExTail, wr_start)));
    s("offset ibv_qp_ex.wr_complete", qx(offset_of!(QpExTail, wr_complete)));
    s("offset ibv_qp_ex.wr_abort", qx(offset_of!(QpExTail, wr_abort)));
    s("offset ibv_qp_ex.wr_atomic_write", qx(offset_of!(QpExTail, wr_atomic_write)));
    s("size ibv_data_buf", size_of::<DataBufC>());
    s("offset ibv_data_buf.length", offset_of!(DataBufC, length));
    s("size ibv_qp_init_attr_ex", size_of::<QpInitAttrExC>());
    s("offset ibv_qp_init_attr_ex.cap", offset_of!(QpInitAttrExC, cap));
    s("offset ibv_qp_init_attr_ex.qp_type", offset_of!(QpInitAttrExC, qp_type));
    s("offset ibv_qp_init_attr_ex.sq_sig_all", offset_of!(QpInitAttrExC, sq_sig_all));
    s("offset ibv_qp_init_attr_ex.comp_mask", offset_of!(QpInitAttrExC, comp_mask));
    s("offset ibv_qp_init_attr_ex.pd", offset_of!(QpInitAttrExC, pd));
    s("offset ibv_qp_init_attr_ex.xrcd", offset_of!(QpInitAttrExC, xrcd));
    s("offset ibv_qp_init_attr_ex.create_flags", offset_of!(QpInitAttrExC, create_flags));
    s("offset ibv_qp_init_attr_ex.max_tso_header", offset_of!(QpInitAttrExC, max_tso_header));
    s("offset ibv_qp_init_attr_ex.rwq_ind_tbl", offset_of!(QpInitAttrExC, rwq_ind_tbl));
    s("offset ibv_qp_init_attr_ex.rx_hash_conf", offset_of!(QpInitAttrExC, rx_hash_conf));
    s("offset ibv_qp_init_attr_ex.source_qpn", offset_of!(QpInitAttrExC, source_qpn));
    s("offset ibv_qp_init_attr_ex.send_ops_flags", offset_of!(QpInitAttrExC, send_ops_flags));
    // struct ibv_cq_ex = struct ibv_cq's members, then uroce's CqExTail.
    let cx = |f: usize| size_of::<IbvCq>() + f;
    s("size ibv_cq_ex", cx(size_of::<CqExTail>()));
    s("offset ibv_cq_ex.comp_events_completed", offset_of!(IbvCq, comp_events_completed));
    s("offset ibv_cq_ex.comp_mask", cx(offset_of!(CqExTail, comp_mask)));
    s("offset ibv_cq_ex.status", cx(offset_of!(CqExTail, status)));
    s("offset ibv_cq_ex.wr_id", cx(offset_of!(CqExTail, wr_id)));
    s("offset ibv_cq_ex.start_poll", cx(offset_of!(CqExTail, start_poll)));
    s("offset ibv_cq_ex.end_poll", cx(offset_of!(CqExTail, end_poll)));
    s("offset ibv_cq_ex.read_opcode", cx(offset_of!(CqExTail, read_opcode)));
    s("offset ibv_cq_ex.read_wc_flags", cx(offset_of!(CqExTail, read_wc_flags)));
    s("offset ibv_cq_ex.read_dlid_path_bits", cx(offset_of!(CqExTail, read_dlid_path_bits)));
    s("offset ibv_cq_ex.read_tm_info", cx(offset_of!(CqExTail, read_tm_info)));
    s("offset ibv_cq_ex.read_completion_wallclock_ns", cx(offset_of!(CqExTail, read_completion_wallclock_ns)));
    s("size ibv_cq_init_attr_ex", size_of::<CqInitAttrExC>());
    s("offset ibv_cq_init_attr_ex.cq_context", offset_of!(CqInitAttrExC, cq_context));
    s("offset ibv_cq_init_attr_ex.comp_vector", offset_of!(CqInitAttrExC, comp_vector));
    s("offset ibv_cq_init_attr_ex.wc_flags", offset_of!(CqInitAttrExC, wc_flags));
    s("offset ibv_cq_init_attr_ex.comp_mask", offset_of!(CqInitAttrExC, comp_mask));
    s("offset ibv_cq_init_attr_ex.flags", offset_of!(CqInitAttrExC, flags));
    s("offset ibv_cq_init_attr_ex.parent_domain", offset_of!(CqInitAttrExC, parent_domain));
    m
}

#[test]
fn structs_match_the_c_headers() {
    let header = std::path::Path::new("/usr/include/infiniband/verbs.h");
    if !header.exists() {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
        assert!(!ci, "CI: libibverbs-dev's headers are missing (scripts/setup installs them)");
        eprintln!("SKIP structs_match_the_c_headers: no {} (apt-get install libibverbs-dev)", header.display());
        return;
    }
    let dir = std::env::temp_dir().join(format!("uroce-verbs-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, bin) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&src, C).unwrap();
    let cc = Command::new("cc").arg("-o").arg(&bin).arg(&src).output().expect("cc");
    assert!(cc.status.success(), "cc: {}", String::from_utf8_lossy(&cc.stderr));
    let out = Command::new(&bin).output().expect("run the layout program");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    let rust = rust_layout();
    let mut checked = 0;
    for line in text.lines() {
        let (k, v) = line.rsplit_once(' ').expect("`key value`");
        let v: usize = v.parse().expect("a number");
        if k == "size ibv_qp_ex" {
            // rdma-core 44: 352 (no wr_flush); 360 from 56 (uroce's: qp_base and the tail)
            assert!(v == 352 || v == size_of::<IbvQp>() + size_of::<QpExTail>(), "ibv_qp_ex is {v} bytes");
            continue;
        }
        if k == "size ibv_port_attr" {
            // rdma-core 44: 52 (no active_speed_ex); 56 from the version that added it
            assert!(v == 52 || v == size_of::<PortAttr>(), "ibv_port_attr is {v} bytes");
            continue;
        }
        assert_eq!(rust.get(k), Some(&v), "{k}: C says {v}");
        checked += 1;
    }
    assert_eq!(checked, rust.len(), "every Rust entry has its C counterpart:\n{text}");
}

const CMA: &str = r#"
#include <stddef.h>
#include <stdio.h>
#include <rdma/rdma_cma.h>
#define S(t) printf("size %s %zu\n", #t, sizeof(struct t));
#define O(t, f) printf("offset %s.%s %zu\n", #t, #f, offsetof(struct t, f));
int main(void) {
    S(rdma_event_channel) O(rdma_event_channel, fd)
    S(rdma_ib_addr) O(rdma_ib_addr, dgid) O(rdma_ib_addr, pkey)
    S(rdma_addr) O(rdma_addr, src_storage) O(rdma_addr, dst_storage) O(rdma_addr, addr.ibaddr)
    S(rdma_route) O(rdma_route, path_rec) O(rdma_route, num_paths)
    S(rdma_cm_id) O(rdma_cm_id, channel) O(rdma_cm_id, context) O(rdma_cm_id, qp) O(rdma_cm_id, route)
    O(rdma_cm_id, ps) O(rdma_cm_id, port_num) O(rdma_cm_id, event) O(rdma_cm_id, send_cq_channel)
    O(rdma_cm_id, send_cq) O(rdma_cm_id, recv_cq_channel) O(rdma_cm_id, recv_cq) O(rdma_cm_id, srq)
    O(rdma_cm_id, pd) O(rdma_cm_id, qp_type)
    S(rdma_conn_param) O(rdma_conn_param, private_data_len) O(rdma_conn_param, responder_resources)
    O(rdma_conn_param, initiator_depth) O(rdma_conn_param, flow_control) O(rdma_conn_param, retry_count)
    O(rdma_conn_param, rnr_retry_count) O(rdma_conn_param, srq) O(rdma_conn_param, qp_num)
    S(rdma_ud_param) O(rdma_ud_param, private_data_len) O(rdma_ud_param, ah_attr) O(rdma_ud_param, qp_num)
    O(rdma_ud_param, qkey)
    S(rdma_cm_event) O(rdma_cm_event, listen_id) O(rdma_cm_event, event) O(rdma_cm_event, status)
    O(rdma_cm_event, param)
    return 0;
}
"#;

/// librdmacm's structs (`rdma_cm_id`, `rdma_cm_event`, ...) against `<rdma/rdma_cma.h>`.
#[test]
fn rdma_cm_structs_match_the_c_header() {
    use uroce_verbs::rdmacm::abi::*;
    let header = std::path::Path::new("/usr/include/rdma/rdma_cma.h");
    if !header.exists() {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
        assert!(!ci, "CI: librdmacm-dev's headers are missing (scripts/setup installs them)");
        eprintln!("SKIP rdma_cm_structs_match_the_c_header: no {} (apt-get install librdmacm-dev)", header.display());
        return;
    }
    let mut m = BTreeMap::new();
    let mut s = |k: &str, v: usize| {
        m.insert(k.to_string(), v);
    };
    s("size rdma_event_channel", size_of::<RdmaEventChannelC>());
    s("offset rdma_event_channel.fd", offset_of!(RdmaEventChannelC, fd));
    s("size rdma_ib_addr", size_of::<RdmaIbAddrC>());
    s("offset rdma_ib_addr.dgid", offset_of!(RdmaIbAddrC, dgid));
    s("offset rdma_ib_addr.pkey", offset_of!(RdmaIbAddrC, pkey));
    s("size rdma_addr", size_of::<RdmaAddrC>());
    s("offset rdma_addr.src_storage", offset_of!(RdmaAddrC, src));
    s("offset rdma_addr.dst_storage", offset_of!(RdmaAddrC, dst));
    s("offset rdma_addr.addr.ibaddr", offset_of!(RdmaAddrC, ibaddr));
    s("size rdma_route", size_of::<RdmaRouteC>());
    s("offset rdma_route.path_rec", offset_of!(RdmaRouteC, path_rec));
    s("offset rdma_route.num_paths", offset_of!(RdmaRouteC, num_paths));
    s("size rdma_cm_id", size_of::<RdmaCmIdC>());
    s("offset rdma_cm_id.channel", offset_of!(RdmaCmIdC, channel));
    s("offset rdma_cm_id.context", offset_of!(RdmaCmIdC, context));
    s("offset rdma_cm_id.qp", offset_of!(RdmaCmIdC, qp));
    s("offset rdma_cm_id.route", offset_of!(RdmaCmIdC, route));
    s("offset rdma_cm_id.ps", offset_of!(RdmaCmIdC, ps));
    s("offset rdma_cm_id.port_num", offset_of!(RdmaCmIdC, port_num));
    s("offset rdma_cm_id.event", offset_of!(RdmaCmIdC, event));
    s("offset rdma_cm_id.send_cq_channel", offset_of!(RdmaCmIdC, send_cq_channel));
    s("offset rdma_cm_id.send_cq", offset_of!(RdmaCmIdC, send_cq));
    s("offset rdma_cm_id.recv_cq_channel", offset_of!(RdmaCmIdC, recv_cq_channel));
    s("offset rdma_cm_id.recv_cq", offset_of!(RdmaCmIdC, recv_cq));
    s("offset rdma_cm_id.srq", offset_of!(RdmaCmIdC, srq));
    s("offset rdma_cm_id.pd", offset_of!(RdmaCmIdC, pd));
    s("offset rdma_cm_id.qp_type", offset_of!(RdmaCmIdC, qp_type));
    s("size rdma_conn_param", size_of::<RdmaConnParamC>());
    s("offset rdma_conn_param.private_data_len", offset_of!(RdmaConnParamC, private_data_len));
    s("offset rdma_conn_param.responder_resources", offset_of!(RdmaConnParamC, responder_resources));
    s("offset rdma_conn_param.initiator_depth", offset_of!(RdmaConnParamC, initiator_depth));
    s("offset rdma_conn_param.flow_control", offset_of!(RdmaConnParamC, flow_control));
    s("offset rdma_conn_param.retry_count", offset_of!(RdmaConnParamC, retry_count));
    s("offset rdma_conn_param.rnr_retry_count", offset_of!(RdmaConnParamC, rnr_retry_count));
    s("offset rdma_conn_param.srq", offset_of!(RdmaConnParamC, srq));
    s("offset rdma_conn_param.qp_num", offset_of!(RdmaConnParamC, qp_num));
    s("size rdma_ud_param", size_of::<RdmaUdParamC>());
    s("offset rdma_ud_param.private_data_len", offset_of!(RdmaUdParamC, private_data_len));
    s("offset rdma_ud_param.ah_attr", offset_of!(RdmaUdParamC, ah_attr));
    s("offset rdma_ud_param.qp_num", offset_of!(RdmaUdParamC, qp_num));
    s("offset rdma_ud_param.qkey", offset_of!(RdmaUdParamC, qkey));
    s("size rdma_cm_event", size_of::<RdmaCmEventC>());
    s("offset rdma_cm_event.listen_id", offset_of!(RdmaCmEventC, listen_id));
    s("offset rdma_cm_event.event", offset_of!(RdmaCmEventC, event));
    s("offset rdma_cm_event.status", offset_of!(RdmaCmEventC, status));
    s("offset rdma_cm_event.param", offset_of!(RdmaCmEventC, param));
    let dir = std::env::temp_dir().join(format!("uroce-rdmacm-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, bin) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&src, CMA).unwrap();
    let cc = Command::new("cc").arg("-o").arg(&bin).arg(&src).output().expect("cc");
    assert!(cc.status.success(), "cc: {}", String::from_utf8_lossy(&cc.stderr));
    let out = Command::new(&bin).output().expect("run the layout program");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut checked = 0;
    for line in text.lines() {
        let (k, v) = line.rsplit_once(' ').expect("`key value`");
        assert_eq!(m.get(k), Some(&v.parse().expect("a number")), "{k}: C says {v}");
        checked += 1;
    }
    assert_eq!(checked, m.len(), "every Rust entry has its C counterpart:\n{text}");
}
