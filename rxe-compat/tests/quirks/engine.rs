//! uroce's engine in the simulator, connected the way perftest connects rxe, with the wire
//! tapped: the `engine_*` tests of `quirks.rs` compare its frames with the quirk table.

use super::*;
use std::cell::RefCell;
use std::rc::Rc;
use uroce_transport::connect::{connect_rc, RcLocal, RcRemote};
use uroce_transport::sim::setup::{self, QpEnd, QpOptions, ALL_ACCESS};
use uroce_transport::sim::{LinkConfig, Network};
use uroce_transport::*;
use uroce_wire::UdpChecksum;

/// What the application puts in the address vector.
#[derive(Clone, Copy, Debug)]
pub struct Path {
    pub ipv6: bool,
    pub hop_limit: u8,
    pub flow_label: u32,
}

/// What `uroce perf` (like perftest) asks for: IPv4-mapped GID, hop limit 0xFF.
pub const PERFTEST: Path = Path { ipv6: false, hop_limit: 0xff, flow_label: 0 };
/// An AV that already has rxe's wire values, to compare everything else.
pub const PLAIN_V4: Path = Path { ipv6: false, hop_limit: 64, flow_label: 0 };
pub const PLAIN_V6: Path = Path { ipv6: true, hop_limit: 64, flow_label: 0 };

fn device(i: u8, quirks: Quirks) -> Device {
    let ips = [IpAddr::V4(setup::ipv4(i)), IpAddr::V6(setup::ipv6(i))];
    let mut cfg = DeviceConfig::new(setup::mac(i), &ips);
    cfg.seed = 0x5eed_0000 + u64::from(i);
    cfg.active_mtu = Mtu::Mtu1024;
    cfg.quirks = quirks;
    Device::new(cfg)
}

/// RESET → INIT → RTR → RTS like perftest's `ctx_modify_qp_to_rtr/rts`, with `path`'s AV.
fn connect_one(net: &mut Network, me: &QpEnd, peer: &QpEnd, psns: (u32, u32), o: &QpOptions, path: Path) {
    let sgid_index = if path.ipv6 { 2 } else { 1 };
    let peer_cfg = net.dev(peer.node).config().clone();
    // `path`'s AV, and no traffic class (perftest's default) whatever `o` says.
    let local = RcLocal {
        hop_limit: path.hop_limit,
        flow_label: path.flow_label,
        traffic_class: 0,
        ..o.rc_local(sgid_index, psns.0)
    };
    let remote = RcRemote { qpn: peer.qpn, psn: psns.1, gid: peer_cfg.gids[sgid_index as usize], mac: peer_cfg.mac };
    connect_rc(net.dev(me.node), me.qpn, &local, &remote).unwrap();
}

/// Two uroce devices with one RC QP pair (perftest's QP attributes), the wire tapped.
pub struct Lab {
    pub net: Network,
    pub a: QpEnd,
    pub b: QpEnd,
    pub src: MrInfo,
    pub dst: MrInfo,
    wire: Wire,
}

/// Frames on the simulated wire, with their time in ns.
type Wire = Rc<RefCell<Vec<(u64, Vec<u8>)>>>;

impl Lab {
    pub fn new(path: Path, quirks: Quirks) -> Lab {
        Lab::with_link(path, quirks, LinkConfig::default())
    }

    pub fn with_link(path: Path, quirks: Quirks, link: LinkConfig) -> Lab {
        let o = QpOptions::default();
        let mut net = Network::new(9, link);
        net.add(device(1, quirks));
        net.add(device(2, quirks));
        let a = setup::create(&mut net, 0, &o).unwrap();
        let b = setup::create(&mut net, 1, &o).unwrap();
        let psns = (net.dev(0).random_psn(), net.dev(1).random_psn());
        connect_one(&mut net, &a, &b, psns, &o, path);
        connect_one(&mut net, &b, &a, (psns.1, psns.0), &o, path);
        let src = setup::reg(&mut net, 0, a.pd, 256 << 10, ALL_ACCESS, |i| i as u8);
        let dst = setup::reg(&mut net, 1, b.pd, 256 << 10, ALL_ACCESS, |_| 0);
        let wire = Rc::new(RefCell::new(Vec::new()));
        let w = wire.clone();
        net.set_tap(move |t, f| w.borrow_mut().push((t.as_nanos(), f.to_vec())));
        Lab { net, a, b, src, dst, wire }
    }

    pub fn post(&mut self, wr_id: u64, opcode: WrOpcode, off: u64, len: u32, compare_add: u64) {
        let sge = [Sge { addr: self.src.addr + off, length: len, lkey: self.src.lkey }];
        let wr = SendWr {
            wr_id,
            opcode,
            sg_list: &sge,
            send_flags: SendFlags::SIGNALED,
            remote_addr: self.dst.addr + off,
            rkey: self.dst.rkey,
            compare_add,
            ..Default::default()
        };
        self.net.dev(0).post_send(self.a.qpn, &wr).unwrap();
    }

    pub fn post_recv(&mut self, len: u32) {
        let sge = [Sge { addr: self.dst.addr, length: len, lkey: self.dst.lkey }];
        self.net.dev(1).post_recv(self.b.qpn, &RecvWr { wr_id: 77, sg_list: &sge }).unwrap();
    }

    /// Run until `n` send completions, all successful.
    pub fn complete(&mut self, n: usize) {
        let mut wcs = Vec::new();
        let (node, cq) = (self.a.node, self.a.cq);
        let ok = self.net.run_until(1_000_000, |net| {
            wcs.extend(setup::drain_cq(net, node, cq));
            wcs.len() >= n
        });
        assert!(ok && wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    }

    /// WRITE 3000 B, READ 3000 B, FETCH_ADD, SEND 1025 B (and a 200-packet WRITE).
    pub fn mix(&mut self, long_write: bool) {
        self.post_recv(4096);
        self.post(1, WrOpcode::RdmaWrite, 0, 3000, 0);
        self.post(2, WrOpcode::RdmaRead, 8192, 3000, 0);
        self.post(3, WrOpcode::AtomicFetchAndAdd, 16384, 8, 5);
        self.post(4, WrOpcode::Send, 20480, 1025, 0);
        if long_write {
            self.post(5, WrOpcode::RdmaWrite, 32768, 200 * 1024, 0);
        }
        self.complete(if long_write { 5 } else { 4 });
    }

    /// The tapped frames as a capture.
    pub fn capture(&self, name: &str) -> Capture {
        let wire = self.wire.borrow();
        let pkts = wire.iter().enumerate().map(|(i, (t, f))| decode(name, i + 1, *t as f64 / 1e9, f)).collect();
        Capture { name: name.to_string(), kernel: None, pkts, perftest_tcp: Vec::new() }
    }

    /// Every frame device `node` has to send now.
    pub fn drain(&mut self, node: usize, now: Instant) -> Vec<Vec<u8>> {
        let d = self.net.dev(node);
        let mut buf = vec![0; d.max_frame_len()];
        let mut out = Vec::new();
        while let Some(n) = d.poll_transmit(now, &mut buf) {
            out.push(buf[..n].to_vec());
        }
        out
    }
}

pub fn head(f: &[u8]) -> (u8, Psn, Option<u8>) {
    let p = uroce_wire::parse_frame(f).unwrap();
    (p.roce.bth.opcode.0, p.roce.bth.psn, p.roce.ext.aeth.map(|a| a.syndrome.to_byte()))
}

/// `frame` (an ACKNOWLEDGE) with another AETH syndrome, ICRC recomputed.
pub fn with_syndrome(frame: &[u8], syndrome: u8) -> Vec<u8> {
    let p = uroce_wire::parse_frame(frame).unwrap();
    let (l3, end, aeth) = (p.offsets.l3, p.offsets.end, p.offsets.bth + 12);
    let mut f = frame.to_vec();
    f[aeth] = syndrome;
    uroce_wire::seal_ip(&mut f[l3..end], UdpChecksum::Zero).unwrap();
    f
}
