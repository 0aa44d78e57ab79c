//! The scapy oracle: frames built by an independent implementation (scapy 2.x,
//! `scapy.contrib.roce`, with the extension headers packed by `struct` in
//! `tests/oracle/gen_scapy_vectors.py`) replayed against the wire crate. No Python is needed
//! here; the generator only regenerates `tests/oracle/scapy_vectors.jsonl` (and `--check`s it
//! for drift in CI).
//!
//! For every vector:
//! (a) a [`FrameRepr`] built from the vector's field values, emitted with the vector's payload,
//!     equals scapy's frame bit for bit (IP checksum, lengths, UDP checksum or 0, pad, ICRC);
//! (b) [`parse_frame`] of scapy's frame succeeds, the ICRC verifies, and every parsed field
//!     equals the vector's field values;
//! and over the whole file (c) every opcode of [`OPCODES`] is covered many times over IPv4 and
//! over IPv6, with and without VLAN tag and UDP checksum.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use uroce_wire::opcode::OPCODES;
use uroce_wire::{
    parse_frame, AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, CreditCount, DethRepr, Ecn, EtherType,
    EthernetAddress, EthernetRepr, ExtHeaders, FethRepr, FrameRepr, IpRepr, Ipv4Repr, Ipv6Repr, Msn, NakCode, Opcode,
    Psn, Qpn, RethRepr, RnrTimer, RoceRepr, Syndrome, UdpChecksum, UdpPacket, UdpRepr, VlanTag,
};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/oracle/scapy_vectors.jsonl");
/// Minimum vectors per (opcode, IP version); the generator makes 13 of each.
const MIN_PER_OPCODE_AND_IP: usize = 10;

#[derive(Deserialize)]
struct Header {
    meta: Meta,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Meta {
    generator: String,
    scapy: String,
    python: String,
    seed: u64,
    count: usize,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Vector {
    op: u8,
    name: String,
    eth: Eth,
    ip: Ip,
    udp: Udp,
    bth: Bth,
    deth: Option<Deth>,
    feth: Option<Feth>,
    reth: Option<Reth>,
    atomic: Option<Atomic>,
    aeth: Option<Aeth>,
    atomic_ack: Option<AtomicAck>,
    immdt: Option<u32>,
    ieth: Option<u32>,
    payload: String,
    frame: String,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Eth {
    src: String,
    dst: String,
    vlan: Option<Vlan>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Vlan {
    pcp: u8,
    dei: bool,
    vid: u16,
}

/// IPv4 has ttl/id/df, IPv6 fl/hlim.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Ip {
    v: u8,
    src: String,
    dst: String,
    dscp: u8,
    ecn: u8,
    ttl: Option<u8>,
    id: Option<u16>,
    df: Option<bool>,
    fl: Option<u32>,
    hlim: Option<u8>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Udp {
    sport: u16,
    dport: u16,
    csum: bool,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Bth {
    se: bool,
    mig: bool,
    pad: u8,
    pkey: u16,
    fecn: bool,
    becn: bool,
    dqpn: u32,
    ackreq: bool,
    psn: u32,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Deth {
    qkey: u32,
    srcqp: u32,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Feth {
    sel: u8,
    plt: u8,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Reth {
    va: u64,
    rkey: u32,
    dlen: u32,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Atomic {
    va: u64,
    rkey: u32,
    swap_add: u64,
    cmp: u64,
}

/// `kind`/`val` is the generator's own classification of the syndrome byte `syn`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Aeth {
    syn: u8,
    kind: String,
    val: u8,
    msn: u32,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct AtomicAck {
    orig: u64,
}

fn load() -> (Meta, Vec<Vector>) {
    let text = std::fs::read_to_string(DATA)
        .unwrap_or_else(|e| panic!("{DATA}: {e} (regenerate with wire/tests/oracle/gen_scapy_vectors.py --write)"));
    let mut lines = text.lines();
    let header: Header = serde_json::from_str(lines.next().expect("empty vector file")).expect("header line");
    let vectors: Vec<Vector> =
        lines.enumerate().map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("vector {i}: {e}"))).collect();
    assert_eq!(vectors.len(), header.meta.count, "header count vs vectors");
    (header.meta, vectors)
}

fn mac(s: &str) -> EthernetAddress {
    let b: Vec<u8> = s.split(':').map(|x| u8::from_str_radix(x, 16).unwrap()).collect();
    EthernetAddress(b.try_into().unwrap())
}

fn ecn(v: u8) -> Ecn {
    match v {
        0 => Ecn::NotEct,
        1 => Ecn::Ect1,
        2 => Ecn::Ect0,
        3 => Ecn::Ce,
        _ => panic!("ecn {v}"),
    }
}

fn syndrome(a: &Aeth) -> Syndrome {
    let s = match a.kind.as_str() {
        "ack" => Syndrome::Ack(CreditCount::new(a.val)),
        "rnr" => Syndrome::RnrNak(RnrTimer::new(a.val)),
        "nak" => Syndrome::Nak(match a.val {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            r => NakCode::Reserved(r),
        }),
        "resv" => Syndrome::Reserved(a.syn),
        k => panic!("syndrome kind {k}"),
    };
    assert_eq!(s.to_byte(), a.syn, "{s:?} encodes to {:#04x}, the generator wrote {:#04x}", s.to_byte(), a.syn);
    s
}

/// The frame the vector describes, with IP payload length from scapy's frame size.
fn repr_of(v: &Vector, frame_len: usize) -> FrameRepr {
    let l2 = if v.eth.vlan.is_some() { 18 } else { 14 };
    let (ip, ethertype) = match v.ip.v {
        4 => (
            IpRepr::V4(Ipv4Repr {
                src_addr: v.ip.src.parse::<Ipv4Addr>().unwrap(),
                dst_addr: v.ip.dst.parse::<Ipv4Addr>().unwrap(),
                dscp: v.ip.dscp,
                ecn: ecn(v.ip.ecn),
                ident: v.ip.id.unwrap(),
                dont_frag: v.ip.df.unwrap(),
                ttl: v.ip.ttl.unwrap(),
                protocol: 17,
                payload_len: frame_len - l2 - 20,
            }),
            EtherType::IPV4,
        ),
        6 => (
            IpRepr::V6(Ipv6Repr {
                src_addr: v.ip.src.parse::<Ipv6Addr>().unwrap(),
                dst_addr: v.ip.dst.parse::<Ipv6Addr>().unwrap(),
                dscp: v.ip.dscp,
                ecn: ecn(v.ip.ecn),
                flow_label: v.ip.fl.unwrap(),
                hop_limit: v.ip.hlim.unwrap(),
                next_header: 17,
                payload_len: frame_len - l2 - 40,
            }),
            EtherType::IPV6,
        ),
        x => panic!("ip version {x}"),
    };
    let b = &v.bth;
    FrameRepr {
        eth: EthernetRepr {
            src_addr: mac(&v.eth.src),
            dst_addr: mac(&v.eth.dst),
            vlan: v.eth.vlan.as_ref().map(|t| VlanTag { pcp: t.pcp, dei: t.dei, vid: t.vid }),
            ethertype,
        },
        ip,
        udp: UdpRepr { src_port: v.udp.sport, dst_port: v.udp.dport },
        roce: RoceRepr {
            bth: BthRepr {
                opcode: Opcode(v.op),
                solicited: b.se,
                mig_req: b.mig,
                pad_count: b.pad,
                pkey: b.pkey,
                fecn: b.fecn,
                becn: b.becn,
                dest_qp: Qpn::new(b.dqpn),
                ack_req: b.ackreq,
                psn: Psn::new(b.psn),
            },
            ext: ExtHeaders {
                deth: v.deth.as_ref().map(|d| DethRepr { qkey: d.qkey, src_qp: Qpn::new(d.srcqp) }),
                feth: v.feth.as_ref().map(|f| FethRepr { selectivity: f.sel, placement: f.plt }),
                reth: v.reth.as_ref().map(|r| RethRepr { va: r.va, rkey: r.rkey, dma_len: r.dlen }),
                atomic_eth: v.atomic.as_ref().map(|a| AtomicEthRepr {
                    va: a.va,
                    rkey: a.rkey,
                    swap_add: a.swap_add,
                    compare: a.cmp,
                }),
                aeth: v.aeth.as_ref().map(|a| AethRepr { syndrome: syndrome(a), msn: Msn::new(a.msn) }),
                atomic_ack_eth: v.atomic_ack.as_ref().map(|a| AtomicAckEthRepr { orig: a.orig }),
                immdt: v.immdt,
                ieth: v.ieth,
            },
            payload_len: v.payload.len() / 2,
        },
    }
}

/// The layer a frame offset falls in, from the vector's own description of the frame
/// (not from the wire crate's offsets).
fn layer_at(v: &Vector, off: usize) -> String {
    let mut spans: Vec<(&str, usize)> = vec![("Ethernet", if v.eth.vlan.is_some() { 18 } else { 14 })];
    spans.push(if v.ip.v == 4 { ("IPv4", 20) } else { ("IPv6", 40) });
    spans.push(("UDP", 8));
    spans.push(("BTH", 12));
    let ext: [(&str, bool, usize); 9] = [
        ("DETH", v.deth.is_some(), 8),
        ("FETH", v.feth.is_some(), 4),
        ("RETH", v.reth.is_some(), 16),
        ("AtomicETH", v.atomic.is_some(), 28),
        ("AETH", v.aeth.is_some(), 4),
        ("AtomicAckETH", v.atomic_ack.is_some(), 8),
        ("ImmDt", v.immdt.is_some(), 4),
        ("IETH", v.ieth.is_some(), 4),
        ("CNP reserved", v.op == 0x81, 16),
    ];
    spans.extend(ext.iter().filter(|e| e.1).map(|e| (e.0, e.2)));
    spans.push(("payload", v.payload.len() / 2));
    spans.push(("pad", v.bth.pad as usize));
    spans.push(("ICRC", 4));
    let mut at = 0;
    for (name, len) in spans {
        if off < at + len {
            return format!("{name} (byte {} of {len})", off - at);
        }
        at += len;
    }
    format!("past the end (frame is {at} bytes by the vector's description)")
}

fn hexdump(b: &[u8], other: &[u8]) -> String {
    let mut s = String::new();
    for (i, row) in b.chunks(16).enumerate() {
        s += &format!("  {:04x} ", i * 16);
        for (j, x) in row.iter().enumerate() {
            let mark = if other.get(i * 16 + j) != Some(x) { '*' } else { ' ' };
            s += &format!("{x:02x}{mark}");
        }
        s.push('\n');
    }
    s
}

fn describe_mismatch(i: usize, v: &Vector, ours: &[u8], scapy: &[u8]) -> String {
    let first = ours.iter().zip(scapy).position(|(a, b)| a != b).unwrap_or(ours.len().min(scapy.len()));
    format!(
        "vector {i} ({} over IPv{}, udp csum {}): emitted frame differs from scapy's at offset {first} = {}\n\
         lengths: wire {} scapy {}\nwire (* = differs):\n{}scapy:\n{}",
        v.name,
        v.ip.v,
        v.udp.csum,
        layer_at(v, first),
        ours.len(),
        scapy.len(),
        hexdump(ours, scapy),
        hexdump(scapy, ours),
    )
}

/// (a) emit equals scapy's bytes. Returns an error description instead of panicking so all
/// vectors are tried and the failures summarised.
fn check_emit(i: usize, v: &Vector, frame: &[u8], payload: &[u8]) -> Result<(), String> {
    let r = repr_of(v, frame.len());
    let csum = if v.udp.csum { UdpChecksum::Compute } else { UdpChecksum::Zero };
    if r.buffer_len() != frame.len() {
        return Err(format!("vector {i} ({}): buffer_len {} != scapy frame {}", v.name, r.buffer_len(), frame.len()));
    }
    // Two fill patterns so a byte emit forgets to write cannot match by luck.
    for fill in [0xa5u8, 0x5a] {
        let mut buf = vec![fill; r.buffer_len()];
        let n = r
            .emit(&mut buf, csum, |p| p.copy_from_slice(payload))
            .map_err(|e| format!("vector {i} ({}): emit failed: {e}", v.name))?;
        if buf[..n] != *frame {
            return Err(describe_mismatch(i, v, &buf[..n], frame));
        }
    }
    Ok(())
}

/// (b) parse scapy's frame; every field equals the vector's.
fn check_parse(i: usize, v: &Vector, frame: &[u8], payload: &[u8]) -> Result<(), String> {
    let ctx = format!("vector {i} ({} over IPv{})", v.name, v.ip.v);
    let p = parse_frame(frame).map_err(|e| format!("{ctx}: parse_frame: {e}"))?;
    p.check_icrc().map_err(|e| format!("{ctx}: check_icrc: {e}"))?;
    let want = repr_of(v, frame.len());
    let got = p.repr().ok_or(format!("{ctx}: no Ethernet repr"))?;
    macro_rules! same {
        ($what:expr, $a:expr, $b:expr) => {
            let (a, b) = ($a, $b);
            if a != b {
                return Err(format!("{ctx}: parsed {} = {:?}, vector says {:?}", $what, a, b));
            }
        };
    }
    same!("Ethernet", got.eth, want.eth);
    same!("IP", got.ip, want.ip);
    same!("UDP", got.udp, want.udp);
    same!("BTH", got.roce.bth, want.roce.bth);
    same!("extension headers", got.roce.ext, want.roce.ext);
    same!("payload length", got.roce.payload_len, want.roce.payload_len);
    same!("payload", p.payload(), payload);
    same!("opcode name", got.roce.bth.opcode.name(), Some(v.name.as_str()));
    same!("end offset", p.offsets.end, frame.len());
    let icrc_bytes = &frame[frame.len() - 4..];
    same!("ICRC", p.icrc(), u32::from_le_bytes(icrc_bytes.try_into().unwrap()));
    // The UDP checksum as scapy wrote it: 0, or one that verifies over the whole datagram
    // (ICRC included).
    let udp = UdpPacket::new_checked(&frame[p.offsets.udp..p.offsets.end]).map_err(|e| format!("{ctx}: {e}"))?;
    let (src, dst): (IpAddr, IpAddr) = (got.ip.src_addr(), got.ip.dst_addr());
    if v.udp.csum {
        same!("UDP checksum verifies", udp.verify_checksum(src, dst), true);
        same!("UDP checksum is non-zero", udp.checksum() != 0, true);
    } else {
        same!("UDP checksum", udp.checksum(), 0);
    }
    Ok(())
}

#[test]
fn scapy_vectors_emit_and_parse_bit_exact() {
    let (meta, vectors) = load();
    eprintln!("{} scapy {} vectors (seed {:#x}, {})", vectors.len(), meta.scapy, meta.seed, meta.generator);
    let mut failures: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (i, v) in vectors.iter().enumerate() {
        let frame = hex::decode(&v.frame).unwrap();
        let payload = hex::decode(&v.payload).unwrap();
        if let Err(e) = check_emit(i, v, &frame, &payload) {
            failures.entry(format!("emit {}", v.name)).or_default().push(e);
        }
        if let Err(e) = check_parse(i, v, &frame, &payload) {
            failures.entry(format!("parse {}", v.name)).or_default().push(e);
        }
    }
    if !failures.is_empty() {
        let total: usize = failures.values().map(Vec::len).sum();
        let mut msg = format!("{total} failures out of {} vectors × (emit, parse):\n", vectors.len());
        for (k, list) in &failures {
            msg += &format!("  {k}: {}\n", list.len());
        }
        for list in failures.values().take(4) {
            msg += &format!("\n{}\n", list[0]);
        }
        panic!("{msg}");
    }
}

#[test]
fn scapy_vectors_cover_every_opcode() {
    let (_, vectors) = load();
    assert!(vectors.len() >= 1000, "only {} vectors", vectors.len());
    let mut per: BTreeMap<(u8, u8), usize> = BTreeMap::new();
    for v in &vectors {
        *per.entry((v.op, v.ip.v)).or_default() += 1;
        let info = Opcode(v.op).info().unwrap_or_else(|| panic!("vector opcode {:#04x} unknown to wire", v.op));
        assert_eq!(info.name, v.name);
    }
    for info in OPCODES {
        for ipv in [4, 6] {
            let n = per.get(&(info.code, ipv)).copied().unwrap_or(0);
            assert!(n >= MIN_PER_OPCODE_AND_IP, "{} over IPv{ipv}: {n} vectors", info.name);
        }
    }
    // Every opcode in the file is in the table (no vector silently tests an unknown opcode).
    assert!(per.keys().all(|(op, _)| OPCODES.iter().any(|i| i.code == *op)));
    // The other axes, per IP version.
    for ipv in [4u8, 6] {
        let vs: Vec<&Vector> = vectors.iter().filter(|v| v.ip.v == ipv).collect();
        assert!(vs.len() * 3 >= vectors.len(), "IPv{ipv} under a third of the vectors");
        for (what, n) in [
            ("with VLAN tag", vs.iter().filter(|v| v.eth.vlan.is_some()).count()),
            ("untagged", vs.iter().filter(|v| v.eth.vlan.is_none()).count()),
            ("UDP checksum computed", vs.iter().filter(|v| v.udp.csum).count()),
            ("UDP checksum 0", vs.iter().filter(|v| !v.udp.csum).count()),
            (
                "computed UDP checksum 0 sent as 0xffff",
                vs.iter().filter(|v| v.udp.csum && v.frame.len() > 8 && udp_csum_field(v) == 0xffff).count(),
            ),
        ] {
            assert!(n > 0, "IPv{ipv}: no vector {what}");
        }
    }
    for pad in 0..4 {
        assert!(vectors.iter().filter(|v| v.bth.pad == pad).count() >= 20, "PadCnt {pad}");
    }
    for kind in ["ack", "rnr", "nak", "resv"] {
        let n = vectors.iter().filter(|v| v.aeth.as_ref().is_some_and(|a| a.kind == kind)).count();
        assert!(n >= 10, "AETH {kind}: {n}");
    }
    assert!(vectors.iter().any(|v| v.payload.len() / 2 >= 250), "no long payload");
}

fn udp_csum_field(v: &Vector) -> u16 {
    let f = hex::decode(&v.frame).unwrap();
    let at = if v.eth.vlan.is_some() { 18 } else { 14 } + if v.ip.v == 4 { 20 } else { 40 } + 6;
    u16::from_be_bytes([f[at], f[at + 1]])
}
