//! `uroce tool xsk-blast`: a raw AF_XDP frame blaster and sink.
//!
//! The I/O ceiling of the AF_XDP datapath at a given frame size, measured with the code the
//! AF_XDP backend uses ([`XskSocket`], [`XdpSteering`]) and nothing else: the sender
//! repeats one prebuilt frame as fast as the TX ring, the `XDP_MAX_TX_SKB_BUDGET` and the
//! kernel take it; the sink attaches the XDP program, registers a socket per RX queue and
//! counts what arrives. No RoCE processing happens on either side, so `uroce perf write_bw`
//! over AF_XDP on the same link can be judged against this packet rate.
//!
//! The frame is a valid RoCEv2 RC RDMA WRITE MIDDLE packet (Ethernet/IPv4/UDP 4791/BTH,
//! payload, ICRC computed by `uroce_wire`), so a RoCE-aware sink accepts it (`--rx
//! --verify` checks the ICRC of every frame). Its PSN is fixed: a real responder would NAK
//! or drop the repeats as duplicates, which does not matter for an I/O measurement.

use anyhow::{anyhow, bail, Context, Result};
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::io::xsk::{BindMode, XskConfig, XskSocket, XskStatistics};
use uroce_wire::{
    bth, BthRepr, Ecn, EtherType, EthernetAddress, EthernetRepr, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr, Opcode, Psn,
    Qpn, RoceRepr, UdpChecksum, UdpRepr, ROCE_V2_PORT,
};
use uroce_xdp_prog::{AttachMode, AttachedMode, ProgramConfig, XdpSteering};

/// Bytes around the payload of an IPv4 RDMA WRITE MIDDLE frame: Ethernet 14 + IPv4 20 +
/// UDP 8 + BTH 12 + ICRC 4 (the FCS is not counted anywhere in this tool).
pub const FRAME_OVERHEAD: usize = 14 + 20 + 8 + 12 + 4;

/// Largest frame that fits one 4 KiB UMEM chunk on RX (chunk − XDP_PACKET_HEADROOM); larger
/// frames need multi-buffer AF_XDP (`XDP_USE_SG`).
const SINGLE_CHUNK_FRAME: usize = 4096 - 256;

pub(super) const LONG_ABOUT: &str = "\
Raw AF_XDP frame blaster (--tx) and sink (--rx): the I/O ceiling of the AF_XDP datapath at a
frame size, with the same AF_XDP socket layer and XDP program the AF_XDP backend uses.

  sink:    uroce tool xsk-blast --dev IF --rx [--secs S]
  blaster: uroce tool xsk-blast --dev IF --tx --dst-mac M --src-ip A --dst-ip B \\
               [--frame-size N] [--secs S]

The blaster sends one prebuilt, valid RoCEv2 frame (Ethernet/IPv4/UDP 4791, RC RDMA WRITE
MIDDLE, correct ICRC, UDP checksum 0) for S seconds in batches (one TX-ring publish and kick
per batch, XDP_MAX_TX_SKB_BUDGET raised to --budget), then drains and counts completions.
--frame-size is the Ethernet frame without FCS: payload = (N - 58) rounded down to a
multiple of 4; the 0..3 bytes left over are Ethernet padding after the IP packet. The
default 1082 is a full RDMA WRITE MIDDLE frame at path MTU 1024 (4154 for MTU 4096, which
needs an interface MTU >= 4140 and uses multi-buffer AF_XDP).

The sink attaches the XDP program (UDP/4791 -> AF_XDP), binds one socket per RX queue
(or --queue), prints a ready line, and counts frames and bytes. It stops --secs after the
first frame, --idle-ms after the last one, or after --wait-secs without any frame.

Output (stdout; one ready line for the sink, then exactly one result line each):
  xsk-blast rx ready dev=IF queues=N xdp_mode=native|generic zero_copy=0|1
  xsk-blast tx frames=N bytes=N payload_bytes=N frame_size=N secs=F pps=F gbps=F
      payload_gbps=F queued=N kicks=N kicks_again=N budget=N zero_copy=0|1 drained=0|1
  xsk-blast rx frames=N bytes=N secs=F pps=F gbps=F queues=N xdp_mode=M zero_copy=0|1
      rx_dropped=N rx_ring_full=N fill_ring_empty=N rx_invalid_descs=N
      [roce_ok=N roce_bad=N payload_bytes=N   with --verify]
(each result is one line; wrapped here). tx: frames = TX completions, secs = start to the
end of the drain. rx: secs = first to last frame. bytes/gbps count whole frames without
FCS; payload_* count RoCE payload only. Exit status 0 on success, 1 if nothing was received
(rx) or the drain timed out (tx), 2 on setup errors.";

/// A MAC address `aa:bb:cc:dd:ee:ff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mac(pub [u8; 6]);

impl FromStr for Mac {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut m = [0u8; 6];
        let mut parts = s.trim().split(':');
        for b in m.iter_mut() {
            let p = parts.next().ok_or_else(|| format!("{s:?}: a MAC has 6 bytes"))?;
            if p.is_empty() || p.len() > 2 {
                return Err(format!("{s:?}: bad MAC byte {p:?}"));
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| format!("{s:?}: bad MAC byte {p:?}"))?;
        }
        if parts.next().is_some() {
            return Err(format!("{s:?}: a MAC has 6 bytes"));
        }
        Ok(Mac(m))
    }
}

/// XDP attach mode.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpMode {
    /// Native first, generic if the driver refuses (what the AF_XDP backend does).
    Auto,
    /// Native (driver) XDP only.
    Native,
    /// Generic (skb) XDP only.
    Generic,
}

/// AF_XDP bind mode.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZcMode {
    /// Zero-copy, copy mode if the driver refuses (what the AF_XDP backend does).
    Auto,
    /// Copy mode only.
    Copy,
    /// Zero-copy only.
    ZeroCopy,
}

/// Arguments of `uroce tool xsk-blast`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("role").required(true).args(["tx", "rx"])))]
pub struct XskBlastArgs {
    /// Interface (in the current network namespace).
    #[arg(long)]
    pub dev: String,
    /// Blast frames.
    #[arg(long)]
    pub tx: bool,
    /// Sink: attach the XDP program, receive and count.
    #[arg(long)]
    pub rx: bool,
    /// TX: destination MAC (the peer interface's).
    #[arg(long)]
    pub dst_mac: Option<Mac>,
    /// TX: source MAC [default: the interface's, from /sys/class/net/DEV/address].
    #[arg(long)]
    pub src_mac: Option<Mac>,
    /// TX: source IPv4 address.
    #[arg(long)]
    pub src_ip: Option<Ipv4Addr>,
    /// TX: destination IPv4 address.
    #[arg(long)]
    pub dst_ip: Option<Ipv4Addr>,
    /// TX: Ethernet frame size in bytes without FCS (1082 = RDMA WRITE MIDDLE at path MTU 1024).
    #[arg(long, default_value_t = 1082)]
    pub frame_size: usize,
    /// TX: seconds to blast. RX: longest measuring window after the first frame.
    #[arg(long, default_value_t = 5.0)]
    pub secs: f64,
    /// Queue to bind [default: TX 0, RX every RX queue of the interface].
    #[arg(long)]
    pub queue: Option<u32>,
    /// TX: frames per batch (one TX-ring publish + kick per batch).
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// TX: XDP_MAX_TX_SKB_BUDGET, copy-mode frames per kick (kernel default 32; ignored
    /// before Linux 6.17).
    #[arg(long, default_value_t = 256)]
    pub budget: u32,
    /// TX: copy the frame into its UMEM chunk on every send [default: each chunk is
    /// written once, on first use, since the frame never changes].
    #[arg(long)]
    pub rewrite: bool,
    /// RX: XDP attach mode.
    #[arg(long, value_enum, default_value_t = XdpMode::Auto)]
    pub xdp_mode: XdpMode,
    /// AF_XDP bind mode.
    #[arg(long, value_enum, default_value_t = ZcMode::Auto)]
    pub bind_mode: ZcMode,
    /// UMEM chunks (4 KiB each; half RX, half TX).
    #[arg(long, default_value_t = 4096)]
    pub umem_frames: u32,
    /// RX: stop this many milliseconds after the last frame.
    #[arg(long, default_value_t = 500)]
    pub idle_ms: u64,
    /// RX: give up if no frame arrives within this many seconds.
    #[arg(long, default_value_t = 30.0)]
    pub wait_secs: f64,
    /// RX: parse every frame as RoCEv2 and verify its ICRC (adds roce_ok, roce_bad, payload_bytes).
    #[arg(long)]
    pub verify: bool,
}

/// Run `uroce tool xsk-blast`.
pub fn run(a: &XskBlastArgs) -> Result<ExitCode> {
    if !(a.secs > 0.0 && a.secs.is_finite()) {
        bail!("--secs must be a positive number");
    }
    if a.umem_frames < 4 || !a.umem_frames.is_power_of_two() {
        bail!("--umem-frames must be a power of two >= 4");
    }
    if a.tx {
        tx(a)
    } else {
        rx(a)
    }
}

fn bind_mode(m: ZcMode) -> BindMode {
    match m {
        ZcMode::Auto => BindMode::Auto,
        ZcMode::Copy => BindMode::Copy,
        ZcMode::ZeroCopy => BindMode::ZeroCopy,
    }
}

/// Ring and UMEM geometry: half the chunks for RX, half for TX, rings as large as their pools.
fn xsk_config(a: &XskBlastArgs, multi_buffer: bool) -> XskConfig {
    let half = a.umem_frames / 2;
    XskConfig {
        frame_count: a.umem_frames,
        rx_frames: half,
        rx_size: half,
        fill_size: half,
        tx_size: half,
        comp_size: half,
        mode: bind_mode(a.bind_mode),
        multi_buffer,
        tx_budget: Some(a.budget),
        ..XskConfig::default()
    }
}

fn interface_mac(dev: &str) -> Result<Mac> {
    let path = format!("/sys/class/net/{dev}/address");
    let s = std::fs::read_to_string(&path).with_context(|| format!("read {path} (pass --src-mac)"))?;
    Mac::from_str(&s).map_err(|e| anyhow!("{path}: {e}"))
}

/// The blaster's frame: `size` bytes, a valid IPv4 RoCEv2 RC RDMA WRITE MIDDLE packet plus
/// 0..3 bytes of Ethernet padding. Returns the frame and its RoCE payload length.
pub fn build_frame(src: Mac, dst: Mac, src_ip: Ipv4Addr, dst_ip: Ipv4Addr, size: usize) -> Result<(Vec<u8>, usize)> {
    if !(FRAME_OVERHEAD + 4..=9216).contains(&size) {
        bail!("--frame-size must be in {}..=9216", FRAME_OVERHEAD + 4);
    }
    // A MIDDLE packet carries a multiple of 4 bytes (IBTA 9.7.5.1.3 C9-94: MIDDLE payloads
    // are exactly the path MTU), so PadCnt is 0.
    let payload_len = (size - FRAME_OVERHEAD) & !3;
    let repr = FrameRepr {
        eth: EthernetRepr {
            src_addr: EthernetAddress(src.0),
            dst_addr: EthernetAddress(dst.0),
            vlan: None,
            ethertype: EtherType::IPV4,
        },
        ip: IpRepr::V4(Ipv4Repr {
            src_addr: src_ip,
            dst_addr: dst_ip,
            dscp: 0,
            ecn: Ecn::NotEct,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 0,
        }),
        udp: UdpRepr { src_port: 0xc000, dst_port: ROCE_V2_PORT },
        roce: RoceRepr {
            bth: BthRepr {
                opcode: Opcode::RC_RDMA_WRITE_MIDDLE,
                solicited: false,
                mig_req: false,
                pad_count: 0,
                pkey: bth::DEFAULT_PKEY,
                fecn: false,
                becn: false,
                dest_qp: Qpn::new(0x11),
                ack_req: false,
                psn: Psn::new(0),
            },
            ext: ExtHeaders::default(),
            payload_len,
        },
    };
    let mut frame = vec![0u8; size];
    let n = repr
        .emit(&mut frame, UdpChecksum::Zero, |p| {
            for (i, b) in p.iter_mut().enumerate() {
                *b = (i as u8).wrapping_mul(31);
            }
        })
        .map_err(|e| anyhow!("build the frame: {e}"))?;
    debug_assert_eq!(n, FRAME_OVERHEAD + payload_len);
    Ok((frame, payload_len))
}

fn rate(count: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        count as f64 / secs
    } else {
        0.0
    }
}

fn tx(a: &XskBlastArgs) -> Result<ExitCode> {
    let (Some(dst_mac), Some(src_ip), Some(dst_ip)) = (a.dst_mac, a.src_ip, a.dst_ip) else {
        bail!("--tx needs --dst-mac, --src-ip and --dst-ip");
    };
    if a.batch == 0 {
        bail!("--batch must be at least 1");
    }
    let src_mac = match a.src_mac {
        Some(m) => m,
        None => interface_mac(&a.dev)?,
    };
    let (frame, payload_len) = build_frame(src_mac, dst_mac, src_ip, dst_ip, a.frame_size)?;
    // Frames above one chunk go out as multi-buffer packets (copied per send).
    let multi_buffer = frame.len() > 4096;
    let cfg = xsk_config(a, multi_buffer);
    let queue = a.queue.unwrap_or(0);
    let mut sock = XskSocket::bind_ifname(&a.dev, queue, &cfg)
        .with_context(|| format!("AF_XDP socket on {} queue {queue}", a.dev))?;
    let chunk = u64::from(sock.umem().chunk_size());
    let mut written = vec![false; cfg.frame_count as usize];
    let len = frame.len();

    let start = Instant::now();
    let end = start + Duration::from_secs_f64(a.secs);
    while Instant::now() < end {
        if multi_buffer {
            for _ in 0..a.batch {
                if !sock.send(&frame)? {
                    break;
                }
            }
        } else {
            for _ in 0..a.batch {
                let Some(mut f) = sock.tx_alloc() else { break };
                let idx = (f.addr() / chunk) as usize;
                if a.rewrite || !written[idx] {
                    sock.tx_buf(&f)[..len].copy_from_slice(&frame);
                    written[idx] = true;
                }
                f.set_len(len);
                if let Err(f) = sock.tx_enqueue(f) {
                    sock.tx_free(f);
                    break;
                }
            }
        }
        // Publishes and kicks; EAGAIN (more queued than the budget) is progress, not an error.
        sock.tx_flush()?;
    }
    let drained = sock.tx_drain(Duration::from_secs(5))?;
    let secs = start.elapsed().as_secs_f64();
    let c = sock.counters();
    // Completions count descriptors; a multi-buffer packet is several.
    let descs_per_frame = len.div_ceil(sock.umem().tx_capacity() as usize) as u64;
    let frames = c.tx_completed / descs_per_frame;
    let bytes = frames * len as u64;
    let payload = frames * payload_len as u64;
    println!(
        "xsk-blast tx frames={frames} bytes={bytes} payload_bytes={payload} frame_size={len} secs={secs:.6} \
         pps={:.0} gbps={:.4} payload_gbps={:.4} queued={} kicks={} kicks_again={} budget={} zero_copy={} drained={}",
        rate(frames, secs),
        rate(bytes * 8, secs) / 1e9,
        rate(payload * 8, secs) / 1e9,
        c.tx_packets,
        c.tx_kicks,
        c.tx_kicks_again,
        sock.tx_budget().unwrap_or(32),
        u8::from(sock.is_zero_copy()),
        u8::from(drained),
    );
    if !drained {
        eprintln!("uroce: xsk-blast tx: {} frames not completed within 5 s after the run", sock.tx_outstanding());
    }
    Ok(if drained && frames > 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn rx(a: &XskBlastArgs) -> Result<ExitCode> {
    let link_mtu = uroce_xdp_prog::mtu(&a.dev).with_context(|| format!("MTU of {}", a.dev))? as usize;
    // As the AF_XDP backend: a frame is the link MTU plus Ethernet header and a VLAN tag.
    let multi_buffer = link_mtu + 18 > SINGLE_CHUNK_FRAME;
    let attach = match a.xdp_mode {
        XdpMode::Auto => AttachMode::Auto,
        XdpMode::Native => AttachMode::Native,
        XdpMode::Generic => AttachMode::Generic,
    };
    let steering = XdpSteering::install(&a.dev, &ProgramConfig { frags: multi_buffer, ..Default::default() }, attach)
        .with_context(|| format!("attach the XDP program to {}", a.dev))?;
    let queues: Vec<u32> = match a.queue {
        Some(q) => vec![q],
        None => (0..uroce_xdp_prog::channels(&a.dev).map(|c| c.rx_queues()).unwrap_or(1).max(1)).collect(),
    };
    let cfg = xsk_config(a, multi_buffer);
    let mut socks = Vec::with_capacity(queues.len());
    for &q in &queues {
        let s =
            XskSocket::bind_ifname(&a.dev, q, &cfg).with_context(|| format!("AF_XDP socket on {} queue {q}", a.dev))?;
        steering.register(q, s.as_fd()).with_context(|| format!("register queue {q} in the XSKMAP"))?;
        socks.push(s);
    }
    let mode = match steering.attachment().mode() {
        AttachedMode::Native => "native",
        AttachedMode::Generic => "generic",
    };
    let zero_copy = u8::from(socks.iter().all(|s| s.is_zero_copy()));
    println!("xsk-blast rx ready dev={} queues={} xdp_mode={mode} zero_copy={zero_copy}", a.dev, socks.len());
    std::io::stdout().flush()?;

    let window = Duration::from_secs_f64(a.secs);
    let idle = Duration::from_millis(a.idle_ms);
    let give_up = Instant::now() + Duration::from_secs_f64(a.wait_secs.max(0.0));
    let (mut frames, mut bytes) = (0u64, 0u64);
    let (mut roce_ok, mut roce_bad, mut payload) = (0u64, 0u64, 0u64);
    let mut scratch = Vec::new();
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    loop {
        let mut got = 0usize;
        for s in socks.iter_mut() {
            let batch = s.recv(256);
            got += batch.len();
            for p in batch.iter() {
                bytes += p.len() as u64;
                if a.verify {
                    let data = match p.data() {
                        Some(d) => d,
                        None => {
                            scratch.clear();
                            p.copy_into(&mut scratch);
                            &scratch[..]
                        }
                    };
                    match uroce_wire::parse_frame_verified(data) {
                        Ok(f) => {
                            roce_ok += 1;
                            payload += f.roce.payload_len as u64;
                        }
                        Err(_) => roce_bad += 1,
                    }
                }
            }
        }
        let now = Instant::now();
        if got > 0 {
            frames += got as u64;
            let f = *first.get_or_insert(now);
            last = now;
            if now.duration_since(f) >= window {
                break;
            }
            continue;
        }
        match first {
            None if now >= give_up => break,
            Some(_) if now.duration_since(last) >= idle => break,
            Some(f) if now.duration_since(f) >= window => break,
            _ => {}
        }
        if let [s] = socks.as_slice() {
            s.wait_rx(Some(Duration::from_millis(10)))?;
        } else {
            for s in &socks {
                if s.wait_rx(Some(Duration::from_millis(1)))? {
                    break;
                }
            }
        }
    }
    let secs = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    let mut st = XskStatistics::default();
    for s in &socks {
        let x = s.statistics()?;
        st.rx_dropped += x.rx_dropped;
        st.rx_ring_full += x.rx_ring_full;
        st.rx_fill_ring_empty_descs += x.rx_fill_ring_empty_descs;
        st.rx_invalid_descs += x.rx_invalid_descs;
    }
    let mut line = format!(
        "xsk-blast rx frames={frames} bytes={bytes} secs={secs:.6} pps={:.0} gbps={:.4} queues={} xdp_mode={mode} \
         zero_copy={zero_copy} rx_dropped={} rx_ring_full={} fill_ring_empty={} rx_invalid_descs={}",
        rate(frames, secs),
        rate(bytes * 8, secs) / 1e9,
        socks.len(),
        st.rx_dropped,
        st.rx_ring_full,
        st.rx_fill_ring_empty_descs,
        st.rx_invalid_descs,
    );
    if a.verify {
        line.push_str(&format!(" roce_ok={roce_ok} roce_bad={roce_bad} payload_bytes={payload}"));
    }
    println!("{line}");
    if frames == 0 {
        eprintln!("uroce: xsk-blast rx: no frame within {} s", a.wait_secs);
    }
    Ok(if frames > 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_parsing() {
        assert_eq!("02:00:00:99:0a:01".parse::<Mac>(), Ok(Mac([2, 0, 0, 0x99, 0x0a, 1])));
        assert_eq!("2:0:0:0:a:FF\n".parse::<Mac>(), Ok(Mac([2, 0, 0, 0, 0x0a, 0xff])));
        for bad in ["", "02:00:00:00:0a", "02:00:00:00:0a:01:02", "02:00:00:00:0a:1g", "020:00:00:00:0a:01"] {
            assert!(bad.parse::<Mac>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn frames_are_valid_roce_of_the_requested_size() {
        let (s, d) = (Mac([2, 0, 0, 0, 0, 1]), Mac([2, 0, 0, 0, 0, 2]));
        let (sip, dip) = (Ipv4Addr::new(10, 99, 1, 1), Ipv4Addr::new(10, 99, 1, 2));
        for (size, payload) in [(1082, 1024), (4154, 4096), (2106, 2048), (1085, 1024), (64, 4), (62, 4)] {
            let (f, p) = build_frame(s, d, sip, dip, size).unwrap();
            assert_eq!((f.len(), p), (size, payload));
            let parsed = uroce_wire::parse_frame_verified(&f).expect("valid RoCEv2 with a correct ICRC");
            assert_eq!(parsed.roce.bth.opcode, Opcode::RC_RDMA_WRITE_MIDDLE);
            assert_eq!(parsed.roce.payload_len, payload);
            assert_eq!(parsed.udp.dst_port, 4791);
            assert_eq!(parsed.offsets.end, FRAME_OVERHEAD + payload);
            assert_eq!(&f[0..6], &d.0);
            assert_eq!(&f[6..12], &s.0);
        }
        assert!(build_frame(s, d, sip, dip, 61).is_err());
        assert!(build_frame(s, d, sip, dip, 9217).is_err());
    }
}
