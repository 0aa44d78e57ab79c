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
