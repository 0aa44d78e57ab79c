//! `uroce tool xsk-blast`: a raw AF_XDP frame blaster and sink.
//!
//! The I/O ceiling of the AF_XDP datapath at a given frame size, measured with uroce's own
//! AF_XDP layer ([`XskSocket`]: the same UMEM, rings, need-wakeup handling, TX budget and
//! multi-buffer code) and XDP program ([`XdpSteering`]), and nothing else: no RoCE engine on
//! either side. `uroce perf write_bw` over AF_XDP on the same link is judged against this
//! packet rate, so the blaster does what the best AF_XDP code does and no per-frame work
//! beyond it:
//!
//! * TX: every TX chunk holds its frame from the start (written once; a multi-buffer packet
//!   puts each chunk back in the segment position it already holds), so a frame costs a
//!   descriptor, not a copy. Each round reclaims every completion, queues up to `--batch`
//!   descriptors, publishes them with one store and kicks once (`sendto`, which in copy mode
//!   transmits up to `XDP_MAX_TX_SKB_BUDGET` descriptors synchronously; EAGAIN is progress).
//!   The TX pool is small (64 chunks, one kick's worth), so the chunks the kernel copies
//!   from stay in cache, as uroce's freshly written frames are.
//! * RX: one socket per queue, its fill ring stocked at bind, twice the RX pool (a refill
//!   always fits), refilled after every batch. The pool is 512 chunks, so the kernel's copy
//!   into a chunk finds its lines still in the sending CPU's cache (the sink never reads the
//!   data). The sink busy-polls its rings (a sleeping AF_XDP reader makes the kernel wake it
//!   from the sender's CPU on every flush, which on this VM cost the sending CPU half its
//!   time) and sleeps in `poll` only after `--spin-us` of silence. It counts frames, bytes
//!   and lengths; `--verify` also parses every frame and checks its ICRC.
//! * Flow control (`--credit`, as the bench runs it): the blaster never has more frames in
//!   flight than the sink's fill ring has room for ([`Credit`]), as a transport's send
//!   window would ensure, so the fill ring never runs dry and the sender never spends its
//!   CPU on frames the kernel then drops. Open loop, a sink preempted for a few
//!   milliseconds lost up to a fifth of the frames, after the sender had paid for them.
//!
//! The frame is a valid RoCEv2 RC RDMA WRITE MIDDLE packet (Ethernet/IPv4/UDP 4791/BTH,
//! payload, ICRC computed by `uroce_wire`) of exactly the size uroce's write_bw puts on the
//! wire at that path MTU (1082 B at 1024, 4154 B at 4096), so packet rates compare. Its PSN
//! is fixed: a real responder would NAK or drop the repeats as duplicates, which does not
//! matter for an I/O measurement.

use anyhow::{anyhow, bail, Context, Result};
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use memmap2::{MmapOptions, MmapRaw};

use uroce_io::xsk::{BindMode, TxFrame, XskConfig, XskSocket, XskStatistics};
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
frame size, with uroce's own AF_XDP socket layer (UMEM, rings, need-wakeup, TX budget,
multi-buffer) and XDP program, without the RoCE engine.

  sink:    uroce tool xsk-blast --dev IF --rx [--secs S] [--credit FILE] [--verify] [--expect N]
  blaster: uroce tool xsk-blast --dev IF --tx --dst-mac M --src-ip A --dst-ip B \\
               [--frame-size N] [--secs S | --count N] [--credit FILE]

The blaster sends one prebuilt, valid RoCEv2 frame (Ethernet/IPv4/UDP 4791, RC RDMA WRITE
MIDDLE, correct ICRC, UDP checksum 0) for S seconds, or exactly N times, then drains and
counts completions. Every TX chunk is written once, before the clock starts; each round
reclaims all completions, queues up to --batch descriptors, publishes them at once and kicks
once (sendto; in copy mode the kernel transmits up to --budget = XDP_MAX_TX_SKB_BUDGET
descriptors per kick, synchronously). --frame-size is the Ethernet frame without FCS:
payload = (N - 58) rounded down to a multiple of 4; the 0..3 bytes left over are Ethernet
padding after the IP packet. The default 1082 is a full RDMA WRITE MIDDLE frame at path MTU
1024, what `uroce perf write_bw -m 1024` sends (4154 for MTU 4096, which needs an interface
MTU >= 4140 and uses multi-buffer AF_XDP, as uroce does on such a link).

The sink attaches the XDP program (UDP/4791 -> AF_XDP), binds one socket per RX queue
(or --queue) with --rx-frames chunks (fill ring twice that), prints a ready line, and
busy-polls its rings, sleeping in poll() only after --spin-us without a frame. It stops
--secs after the first frame, --idle-ms after the last one, once --expect frames arrived,
or after --wait-secs without any frame.

--credit FILE (both sides, the sink first: it creates the file) is flow control: the sink
publishes, through the shared file, how many RX descriptors it has put back on its fill
ring; the blaster never has more in flight than the fill ring holds, so the ring never runs
dry and nothing is dropped (a transport's send window does the same). Without it the blaster
sends open loop and a sink that falls behind drops frames (fill_ring_empty).

Output (stdout; one ready line for the sink, then exactly one result line each):
  xsk-blast rx ready dev=IF queues=N xdp_mode=native|generic zero_copy=0|1
  xsk-blast tx frames=N bytes=N payload_bytes=N frame_size=N secs=F pps=F gbps=F
      payload_gbps=F queued=N kicks=N kicks_again=N budget=N batch=N zero_copy=0|1
      drained=0|1 credit=0|1 credit_waits=N credit_lost=N rewrites=N cpu_user=F cpu_sys=F
      cpu_util=F
  xsk-blast rx frames=N bytes=N secs=F pps=F gbps=F queues=N xdp_mode=M zero_copy=0|1
      rx_frames=N rx_dropped=N rx_ring_full=N fill_ring_empty=N rx_invalid_descs=N
      min_len=N max_len=N sleeps=N cpu_user=F cpu_sys=F cpu_util=F
      [roce_ok=N roce_bad=N payload_bytes=N   with --verify]
(each result is one line; wrapped here). tx: frames = TX completions, secs = start to the
end of the drain, credit_waits = rounds with no credit (the sink behind), credit_lost =
frames written off after the sink, idle, gave no credit back for 5 ms, rewrites = chunk
copies after the start (multi-buffer reshuffles, or every frame with --rewrite). rx: secs =
first to last frame; rx_frames = RX chunks per socket; sleeps = poll() calls after the
first frame. bytes/gbps count whole frames without FCS; payload_* count RoCE payload only.
cpu_*: this process's CPU seconds (getrusage) while it measured (tx: the send loop and
drain; rx: from the first frame to the end), cpu_util = (user + sys) / that wall time; in
copy mode the sender's sys time includes the receive path's softirq work (veth runs the
peer's XDP and the copy into the sink's UMEM in the sender's kick). Exit status 0 on
success, 1 if nothing was received (rx) or the drain timed out (tx), 2 on setup errors.";

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
    /// TX: send exactly this many frames (then drain) instead of blasting for --secs.
    #[arg(long)]
    pub count: Option<u64>,
    /// Queue to bind [default: TX 0, RX every RX queue of the interface].
    #[arg(long)]
    pub queue: Option<u32>,
    /// TX: most descriptors queued per round (one TX-ring publish and one kick per round).
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// TX: XDP_MAX_TX_SKB_BUDGET, copy-mode descriptors per kick (kernel default 32; the
    /// AF_XDP backend's 256; clamped to --tx-frames; ignored before Linux 6.17).
    #[arg(long, default_value_t = 256)]
    pub budget: u32,
    /// TX: copy the frame into its UMEM chunk on every send [default: each chunk is
    /// written once, since the frame never changes].
    #[arg(long)]
    pub rewrite: bool,
    /// RX: XDP attach mode.
    #[arg(long, value_enum, default_value_t = XdpMode::Auto)]
    pub xdp_mode: XdpMode,
    /// AF_XDP bind mode.
    #[arg(long, value_enum, default_value_t = ZcMode::Auto)]
    pub bind_mode: ZcMode,
    /// RX chunks per socket (4 KiB each; also the RX ring size, the fill ring has twice
    /// as many entries): how many frames may be in flight, i.e. how long the sink may stall
    /// before the blaster must wait for credit. The fill ring is a FIFO, so this is also how
    /// soon the kernel writes into a chunk again: with 512 the receive copy finds the
    /// chunk's lines in the sending CPU's cache, with 8192 it misses (~30 % fewer frames
    /// per second on this VM). Power of two; uroce's AF_XDP backend has 2048.
    #[arg(long, default_value_t = 512)]
    pub rx_frames: u32,
    /// TX chunks per socket (4 KiB each), also the TX and completion ring sizes (power of
    /// two; the budget is clamped to it). In copy mode a kick transmits synchronously, so a
    /// small pool suffices, and it keeps the chunks the kernel copies from in cache: with
    /// 256 the copy into the skb cost ~3x as much per frame as with 64 (uroce's frames are
    /// hot because it has just written them).
    #[arg(long, default_value_t = 64)]
    pub tx_frames: u32,
    /// RX: busy-poll this long without a frame before sleeping in poll() (0: sleep at once).
    #[arg(long, default_value_t = 2000)]
    pub spin_us: u64,
    /// RX: stop this many milliseconds after the last frame.
    #[arg(long, default_value_t = 500)]
    pub idle_ms: u64,
    /// RX: stop as soon as this many frames arrived.
    #[arg(long)]
    pub expect: Option<u64>,
    /// RX: give up if no frame arrives within this many seconds.
    #[arg(long, default_value_t = 30.0)]
    pub wait_secs: f64,
    /// RX: parse every frame as RoCEv2 and verify its ICRC (adds roce_ok, roce_bad, payload_bytes).
    #[arg(long)]
    pub verify: bool,
    /// Flow control through a shared credit file (give both sides the same path; the sink
    /// creates it): the blaster never has more frames in flight than the sink's fill ring
    /// holds, so it never runs dry. Without it the blaster sends open loop.
    #[arg(long)]
    pub credit: Option<PathBuf>,
}

/// Run `uroce tool xsk-blast`.
pub fn run(a: &XskBlastArgs) -> Result<ExitCode> {
    if !(a.secs > 0.0 && a.secs.is_finite()) {
        bail!("--secs must be a positive number");
    }
    for (v, what) in [(a.rx_frames, "--rx-frames"), (a.tx_frames, "--tx-frames")] {
        if !(2..=1 << 16).contains(&v) || !v.is_power_of_two() {
            bail!("{what} must be a power of two in 2..=65536");
        }
    }
    if !(1..=1 << 16).contains(&a.batch) {
        bail!("--batch must be in 1..=65536");
    }
    if a.count == Some(0) {
        bail!("--count must be at least 1");
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

/// The AF_XDP backend's socket configuration (`XskConfig::default()`: need-wakeup, TX budget,
/// 4 KiB chunks) with `--rx-frames` RX chunks (= fill and RX ring entries; the sink doubles
/// its fill ring) and `--tx-frames` TX chunks (= TX and completion ring entries).
fn xsk_config(a: &XskBlastArgs, multi_buffer: bool) -> XskConfig {
    XskConfig {
        frame_count: a.rx_frames + a.tx_frames,
        rx_frames: a.rx_frames,
        rx_size: a.rx_frames,
        fill_size: a.rx_frames,
        tx_size: a.tx_frames,
        comp_size: a.tx_frames,
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

/// Credit-based flow control between the sink and the blaster, through a 64-byte file both
/// map (two processes in two network namespaces share the file system): the sink publishes
/// how many RX descriptors it has handed back to its fill ring, its fill ring's size and
/// what the kernel dropped; the blaster queues a frame only while the descriptors it has
/// sent, minus those handed back or dropped, fit the fill ring. A transport with flow
/// control works the same way (uroce's RC requester keeps at most 128 PSNs unacknowledged);
/// here the credits cost neither frames nor syscalls, so the ceiling holds no protocol cost,
/// and a sink that stalls (preempted by another process on its CPU) stalls the blaster
/// instead of making it spend its CPU on frames the kernel then drops. A frame lost where no
/// counter sees it (before the sink's socket: the veth ring, an allocation failure) would
/// keep its credit forever; when the blaster has waited [`CREDIT_LOST_AFTER`] with no credit
/// back while the sink kept finding its rings empty, it writes what is in flight off as lost
/// (`credit_lost`).
struct Credit {
    map: MmapRaw,
}

/// Words of the credit file.
const CREDIT_MAGIC: usize = 0;
const CREDIT_RECYCLED: usize = 1;
const CREDIT_CAPACITY: usize = 2;
const CREDIT_CHUNK: usize = 3;
const CREDIT_DROPPED: usize = 4;
/// Rounds in which the sink found its RX rings empty (its own cache line: it changes while
/// the sink spins, and the blaster reads it only when it waits for credit).
const CREDIT_EMPTY_POLLS: usize = 8;
const CREDIT_WORDS: usize = 16;
const CREDIT_MAGIC_VALUE: u64 = u64::from_le_bytes(*b"xskcred2");
/// How long the blaster waits, with everything kicked and the sink idle, before it writes the
/// frames in flight off as lost.
const CREDIT_LOST_AFTER: Duration = Duration::from_millis(5);

impl Credit {
    fn map(path: &Path, create: bool) -> Result<Credit> {
        let mut o = std::fs::OpenOptions::new();
        o.read(true).write(true);
        if create {
            // A new file, never a truncated old one: a process still mapping the old one
            // would fault on its vanished pages (SIGBUS) or read counts of another run.
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("remove the old credit file {}", path.display()))
                }
                _ => {}
            }
            o.create_new(true);
        }
        let f = o.open(path).with_context(|| format!("credit file {}", path.display()))?;
        let len = (CREDIT_WORDS * 8) as u64;
        if create {
            f.set_len(len)?;
        } else if f.metadata()?.len() < len {
            bail!("credit file {}: too short (start the sink first)", path.display());
        }
        let map = MmapOptions::new().len(len as usize).map_raw(&f)?;
        Ok(Credit { map })
    }

    /// The sink: a fresh file, announcing `capacity` fill-ring descriptors of `chunk` bytes.
    fn create(path: &Path, capacity: u64, chunk: u64) -> Result<Credit> {
        let c = Credit::map(path, true)?;
        c.word(CREDIT_CAPACITY).store(capacity, Ordering::Relaxed);
        c.word(CREDIT_CHUNK).store(chunk, Ordering::Relaxed);
        c.word(CREDIT_MAGIC).store(CREDIT_MAGIC_VALUE, Ordering::Release);
        Ok(c)
    }

    /// The blaster: the sink's file.
    fn open(path: &Path) -> Result<Credit> {
        let c = Credit::map(path, false)?;
        if c.word(CREDIT_MAGIC).load(Ordering::Acquire) != CREDIT_MAGIC_VALUE {
            bail!("credit file {}: not written by a sink (start the sink first)", path.display());
        }
        Ok(c)
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < CREDIT_WORDS);
        // SAFETY: the mapping is CREDIT_WORDS * 8 bytes long (checked when mapped), page
        // aligned, and lives as long as `self`; word `i` is in bounds and 8-byte aligned, and
        // AtomicU64 has u64's layout. Every access, in this process and the peer's, is atomic.
        unsafe { &*self.map.as_mut_ptr().add(i * 8).cast::<AtomicU64>() }
    }
}

fn rate(count: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        count as f64 / secs
    } else {
        0.0
    }
}

/// This process's (user, system) CPU seconds so far.
fn cpu_times() -> (f64, f64) {
    // SAFETY: rusage is plain integers, so all-zero is a valid value for getrusage to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; RUSAGE_SELF has no other precondition.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(ru.ru_utime), s(ru.ru_stime))
}

/// CPU used since `start` (from [`cpu_times`]) over `secs` of wall time, as output fields.
fn cpu_fields(start: (f64, f64), secs: f64) -> String {
    let (u, s) = cpu_times();
    let (u, s) = ((u - start.0).max(0.0), (s - start.1).max(0.0));
    format!("cpu_user={u:.3} cpu_sys={s:.3} cpu_util={:.3}", if secs > 0.0 { (u + s) / secs } else { 0.0 })
}

/// The blaster's TX side: which segment of the frame each TX chunk holds, so that a chunk is
/// written once and rewritten only when a multi-buffer packet puts it in another position.
struct Blaster<'a> {
    frame: &'a [u8],
    /// Frame bytes per TX chunk (the chunk's capacity).
    seg: usize,
    /// Segment index + 1 held by each chunk (0: unwritten), by chunk number.
    holds: Vec<u8>,
    chunk: u64,
    rewrite: bool,
    chain: Vec<TxFrame>,
    /// Chunk writes (one per chunk at the start; more only for multi-buffer reshuffles).
    writes: u64,
}

impl Blaster<'_> {
    /// Fill `f` with segment `i` of the frame, copying only if its chunk does not hold it.
    fn fill(&mut self, sock: &mut XskSocket, f: &mut TxFrame, i: usize) {
        let part = &self.frame[i * self.seg..((i + 1) * self.seg).min(self.frame.len())];
        let idx = (f.addr() / self.chunk) as usize;
        if self.rewrite || self.holds[idx] != i as u8 + 1 {
            sock.tx_buf(f)[..part.len()].copy_from_slice(part);
            self.holds[idx] = i as u8 + 1;
            self.writes += 1;
        }
        f.set_len(part.len());
    }

    /// Queue one packet; false if the TX ring or the free frames are exhausted.
    fn queue(&mut self, sock: &mut XskSocket) -> bool {
        let segs = self.frame.len().div_ceil(self.seg);
        if segs == 1 {
            let Some(mut f) = sock.tx_alloc() else { return false };
            self.fill(sock, &mut f, 0);
            return match sock.tx_enqueue(f) {
                Ok(()) => true,
                Err(f) => {
                    sock.tx_free(f);
                    false
                }
            };
        }
        while self.chain.len() < segs {
            let Some(f) = sock.tx_alloc() else { break };
            self.chain.push(f);
        }
        if self.chain.len() == segs {
            // Completions come back in order and the free list is a stack, so a packet's
            // chunks return reversed: put each chunk back at the position it already holds.
            for i in 0..segs {
                if let Some(j) =
                    (i..segs).find(|&j| self.holds[(self.chain[j].addr() / self.chunk) as usize] == i as u8 + 1)
                {
                    self.chain.swap(i, j);
                }
            }
            let mut chain = std::mem::take(&mut self.chain);
            for (i, f) in chain.iter_mut().enumerate() {
                self.fill(sock, f, i);
            }
            self.chain = chain;
            if sock.tx_enqueue_chain(&mut self.chain) {
                return true;
            }
        }
        for f in self.chain.drain(..) {
            sock.tx_free(f);
        }
        false
    }
}

fn tx(a: &XskBlastArgs) -> Result<ExitCode> {
    let (Some(dst_mac), Some(src_ip), Some(dst_ip)) = (a.dst_mac, a.src_ip, a.dst_ip) else {
        bail!("--tx needs --dst-mac, --src-ip and --dst-ip");
    };
    let src_mac = match a.src_mac {
        Some(m) => m,
        None => interface_mac(&a.dev)?,
    };
    let (frame, payload_len) = build_frame(src_mac, dst_mac, src_ip, dst_ip, a.frame_size)?;
    // Frames above one chunk go out as multi-buffer packets, as the AF_XDP backend sends them.
    let multi_buffer = frame.len() > 4096;
    // The TX socket never receives (no XDP program steers to it): a token RX pool.
    let cfg = XskConfig {
        rx_frames: 2,
        rx_size: 2,
        fill_size: 2,
        frame_count: a.tx_frames + 2,
        ..xsk_config(a, multi_buffer)
    };
    let queue = a.queue.unwrap_or(0);
    let mut sock = XskSocket::bind_ifname(&a.dev, queue, &cfg)
        .with_context(|| format!("AF_XDP socket on {} queue {queue}", a.dev))?;
    let chunk = u64::from(sock.umem().chunk_size());
    let seg = sock.umem().tx_capacity() as usize;
    let len = frame.len();
    let descs_per_frame = len.div_ceil(seg) as u64;
    if u64::from(a.tx_frames) < descs_per_frame {
        bail!("a {len}-byte frame takes {descs_per_frame} TX chunks: --tx-frames must be at least that");
    }
    let mut b = Blaster {
        frame: &frame,
        seg,
        holds: vec![0; cfg.frame_count as usize],
        chunk,
        rewrite: a.rewrite,
        chain: Vec::with_capacity(descs_per_frame as usize),
        writes: 0,
    };
    // Write every TX chunk before the clock starts (single-segment frames: once for good).
    let mut all = Vec::with_capacity(a.tx_frames as usize);
    while let Some(mut f) = sock.tx_alloc() {
        let i = all.len() % descs_per_frame as usize;
        b.fill(&mut sock, &mut f, i);
        all.push(f);
    }
    for f in all.into_iter().rev() {
        sock.tx_free(f);
    }
    b.writes = 0;

    let credit = a.credit.as_deref().map(Credit::open).transpose()?;
    // RX descriptors one frame takes at the sink (its chunk's room after the XDP headroom).
    let rx_segs = credit.as_ref().map_or(1, |c| {
        let chunk = c.word(CREDIT_CHUNK).load(Ordering::Relaxed).max(64);
        (len as u64).div_ceil(chunk)
    });
    let limit = a.count.unwrap_or(u64::MAX);
    let cpu0 = cpu_times();
    let start = Instant::now();
    let end = a.count.is_none().then(|| start + Duration::from_secs_f64(a.secs));
    let (mut queued, mut credit_waits) = (0u64, 0u64);
    // Descriptors written off as lost, and the wait that may write more off: (since, credit
    // back then, the sink's empty polls then).
    let (mut lost, mut lost_frames, mut waiting) = (0u64, 0u64, None::<(Instant, u64, u64)>);
    while queued < limit && end.is_none_or(|e| Instant::now() < e) {
        sock.reclaim();
        // Frames the sink's fill ring has room for: its capacity minus the descriptors in
        // flight (sent, neither handed back, dropped nor written off).
        let room = credit.as_ref().map_or(u64::MAX, |c| {
            // Order matters for the loss check below: the time first, then the sink's empty
            // polls, then its credit (the sink stores them the other way round), so a credit
            // read here is at least as new as the empty poll read before it.
            let now = Instant::now();
            let polls = c.word(CREDIT_EMPTY_POLLS).load(Ordering::Acquire);
            let back = c.word(CREDIT_RECYCLED).load(Ordering::Acquire)
                + c.word(CREDIT_DROPPED).load(Ordering::Acquire) * rx_segs
                + lost;
            let cap = c.word(CREDIT_CAPACITY).load(Ordering::Relaxed);
            let in_flight = (queued * rx_segs).saturating_sub(back);
            if cap.saturating_sub(in_flight) >= rx_segs || sock.tx_pending() > 0 {
                waiting = None;
            } else {
                match waiting {
                    // Everything is kicked, and since the wait began the sink has found its
                    // rings empty (twice) without giving credit back: what is in flight is lost.
                    Some((t, b0, p0)) if b0 == back => {
                        if now.duration_since(t) >= CREDIT_LOST_AFTER && polls >= p0 + 2 {
                            lost += in_flight;
                            lost_frames += in_flight.div_ceil(rx_segs);
                            waiting = None;
                            tracing::debug!(
                                frames = in_flight.div_ceil(rx_segs),
                                back,
                                queued,
                                polls = polls - p0,
                                waited_us = now.duration_since(t).as_micros() as u64,
                                "credit: frames in flight lost"
                            );
                            return cap / rx_segs;
                        }
                    }
                    _ => waiting = Some((now, back, polls)),
                }
            }
            cap.saturating_sub(in_flight) / rx_segs
        });
        let want = (a.batch as u64).min(limit - queued).min(room);
        let mut n = 0;
        while n < want && b.queue(&mut sock) {
            n += 1;
        }
        queued += n;
        if room == 0 {
            credit_waits += 1;
        }
        // One publish and (copy mode, or when the kernel asks) one kick; EAGAIN (more queued
        // than the budget) is progress, not an error.
        sock.tx_flush()?;
    }
    let drained = sock.tx_drain(Duration::from_secs(5))?;
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_fields(cpu0, secs);
    let c = sock.counters();
    // Completions count descriptors; a multi-buffer packet is several.
    let frames = c.tx_completed / descs_per_frame;
    let bytes = frames * len as u64;
    let payload = frames * payload_len as u64;
    println!(
        "xsk-blast tx frames={frames} bytes={bytes} payload_bytes={payload} frame_size={len} secs={secs:.6} \
         pps={:.0} gbps={:.4} payload_gbps={:.4} queued={} kicks={} kicks_again={} budget={} batch={} zero_copy={} \
         drained={} credit={} credit_waits={credit_waits} credit_lost={lost_frames} rewrites={} {cpu}",
        rate(frames, secs),
        rate(bytes * 8, secs) / 1e9,
        rate(payload * 8, secs) / 1e9,
        c.tx_packets,
        c.tx_kicks,
        c.tx_kicks_again,
        sock.tx_budget().unwrap_or(32),
        a.batch,
        u8::from(sock.is_zero_copy()),
        u8::from(drained),
        u8::from(credit.is_some()),
        b.writes,
    );
    if !drained {
        eprintln!("uroce: xsk-blast tx: {} frames not completed within 5 s after the run", sock.tx_outstanding());
    }
    Ok(if drained && frames > 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// What the sink counted.
#[derive(Default)]
struct RxCount {
    frames: u64,
    bytes: u64,
    min_len: usize,
    max_len: usize,
    roce_ok: u64,
    roce_bad: u64,
    payload: u64,
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
    // The sink never transmits: a token TX pool. Its fill ring has room for twice its RX
    // chunks, so a refill always fits whatever the kernel has published of its consumer
    // index (it publishes lazily; with a ring of exactly the pool's size, returned chunks can
    // wait off the ring while the kernel runs dry).
    let cfg = XskConfig {
        tx_size: 2,
        comp_size: 2,
        fill_size: 2 * a.rx_frames,
        frame_count: a.rx_frames + 2,
        ..xsk_config(a, multi_buffer)
    };
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
    // All traffic may land on one queue: one socket's fill ring is the capacity.
    let rx_chunk = socks.first().map_or(0, |s| s.umem().rx_capacity());
    let credit =
        a.credit.as_deref().map(|p| Credit::create(p, u64::from(a.rx_frames), u64::from(rx_chunk))).transpose()?;
    println!("xsk-blast rx ready dev={} queues={} xdp_mode={mode} zero_copy={zero_copy}", a.dev, socks.len());
    std::io::stdout().flush()?;

    let window = Duration::from_secs_f64(a.secs);
    let idle = Duration::from_millis(a.idle_ms);
    let spin = Duration::from_micros(a.spin_us);
    let expect = a.expect.unwrap_or(u64::MAX);
    let give_up = Instant::now() + Duration::from_secs_f64(a.wait_secs.max(0.0));
    let mut n = RxCount { min_len: usize::MAX, ..RxCount::default() };
    let mut scratch = Vec::new();
    let mut first: Option<(Instant, (f64, f64))> = None;
    let mut last = Instant::now();
    let mut sleeps = 0u64;
    let mut last_stats = Instant::now();
    let (mut published, mut empty_polls) = (0u64, 0u64);
    loop {
        let mut got = 0u64;
        for s in socks.iter_mut() {
            let batch = s.recv(256);
            got += batch.len() as u64;
            for p in batch.iter() {
                let len = p.len();
                n.bytes += len as u64;
                n.min_len = n.min_len.min(len);
                n.max_len = n.max_len.max(len);
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
                            n.roce_ok += 1;
                            n.payload += f.roce.payload_len as u64;
                        }
                        Err(_) => n.roce_bad += 1,
                    }
                }
            }
        }
        let now = Instant::now();
        if let Some(c) = &credit {
            // Descriptors taken so far whose chunks are back on a fill ring (the batches
            // dropped; a chunk the ring had no room for yet does not count). Stored only when
            // it changes: a store takes the cache line from the blaster's CPU.
            let back: u64 = socks.iter().map(|s| s.counters().rx_descs - s.fill_pending() as u64).sum();
            if back != published {
                c.word(CREDIT_RECYCLED).store(back, Ordering::Release);
                published = back;
            }
            if got == 0 {
                empty_polls += 1;
                // After the credit (the blaster reads them the other way round).
                c.word(CREDIT_EMPTY_POLLS).store(empty_polls, Ordering::Release);
                if now.duration_since(last_stats) >= Duration::from_micros(200) {
                    // Frames the kernel dropped took no fill-ring entry: hand their credit back.
                    last_stats = now;
                    let dropped: u64 = socks.iter().filter_map(|s| s.statistics().ok()).map(|x| x.rx_dropped).sum();
                    c.word(CREDIT_DROPPED).store(dropped, Ordering::Release);
                }
            }
        }
        if got > 0 {
            n.frames += got;
            let f = first.get_or_insert_with(|| (now, cpu_times())).0;
            last = now;
            if now.duration_since(f) >= window || n.frames >= expect {
                break;
            }
            continue;
        }
        match first {
            None if now >= give_up => break,
            Some(_) if now.duration_since(last) >= idle => break,
            Some((f, _)) if now.duration_since(f) >= window => break,
            _ => {}
        }
        // Busy-poll while frames flow; sleep (and let the kernel wake us) only when quiet.
        if first.is_some() && now.duration_since(last) < spin {
            std::hint::spin_loop();
            continue;
        }
        if first.is_some() {
            sleeps += 1;
        }
        if let [s] = socks.as_slice() {
            s.wait_rx(Some(Duration::from_millis(1)))?;
        } else {
            for s in &socks {
                if s.wait_rx(Some(Duration::from_millis(1)))? {
                    break;
                }
            }
        }
    }
    let secs = first.map_or(0.0, |(f, _)| last.duration_since(f).as_secs_f64());
    let cpu = first.map_or_else(
        || "cpu_user=0 cpu_sys=0 cpu_util=0".to_string(),
        |(f, c)| cpu_fields(c, Instant::now().duration_since(f).as_secs_f64()),
    );
    let mut st = XskStatistics::default();
    for s in &socks {
        let x = s.statistics()?;
        st.rx_dropped += x.rx_dropped;
        st.rx_ring_full += x.rx_ring_full;
        st.rx_fill_ring_empty_descs += x.rx_fill_ring_empty_descs;
        st.rx_invalid_descs += x.rx_invalid_descs;
    }
    let mut line = format!(
        "xsk-blast rx frames={} bytes={} secs={secs:.6} pps={:.0} gbps={:.4} queues={} xdp_mode={mode} \
         zero_copy={zero_copy} rx_frames={} rx_dropped={} rx_ring_full={} fill_ring_empty={} rx_invalid_descs={} \
         min_len={} max_len={} sleeps={sleeps} {cpu}",
        n.frames,
        n.bytes,
        rate(n.frames, secs),
        rate(n.bytes * 8, secs) / 1e9,
        socks.len(),
        a.rx_frames,
        st.rx_dropped,
        st.rx_ring_full,
        st.rx_fill_ring_empty_descs,
        st.rx_invalid_descs,
        if n.frames > 0 { n.min_len } else { 0 },
        n.max_len,
    );
    if a.verify {
        line.push_str(&format!(" roce_ok={} roce_bad={} payload_bytes={}", n.roce_ok, n.roce_bad, n.payload));
    }
    println!("{line}");
    if n.frames == 0 {
        eprintln!("uroce: xsk-blast rx: no frame within {} s", a.wait_secs);
    }
    Ok(if n.frames > 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
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
