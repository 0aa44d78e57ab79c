//! A run's resources, laid out as perftest lays them out, and the connection.
//!
//! Buffers (`alloc_ctx`, `create_mr`, `set_up_connection`): with `B = BUFF_SIZE(size,
//! cycle_buffer)` rounded up to the cache line, one region of `2 * N * B` bytes serves all `N`
//! QPs (one rkey); QP `i` sends from `base + i * B` and advertises `base + (N + i) * B`, where the
//! peer writes and our receives land. With `--mr_per_qp` each QP has its own region of `2 * B`
//! (its own rkey), sends from its start and advertises `start + B`.
//!
//! `--use_hugepages`: perftest takes SysV shared memory with `SHM_HUGETLB` and fails without
//! reserved huge pages. uroce's regions own their memory (`reg_mr` takes a `Box<[u8]>`), so it
//! takes transparent huge pages instead: the buffers start at a 2 MiB boundary inside a larger
//! allocation, which is `madvise(MADV_HUGEPAGE)`d before it is touched; the header says how
//! much of it the kernel backed with huge pages. It fails, as perftest does, when transparent
//! huge pages are off.

use super::{Conn, PerfConfig, Run, Test};
use anyhow::{anyhow, bail, Context, Result};
use std::net::TcpStream;
use std::time::Duration;
use uroce_io::runtime::connect::{self, connect_rc, RcLocal, RcRemote};
use uroce_io::runtime::Port;
use uroce_rxe_compat::perftest::{IbMtu, PerftestDest, PerftestSession, SessionConfig};
use uroce_transport::*;

const HUGE_PAGE: usize = 2 << 20;

/// How long a peer may keep us waiting during the out-of-band set-up (TCG guests are slow).
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

fn ib_mtu(m: Mtu) -> IbMtu {
    IbMtu::from_enum(m as u8).unwrap_or(IbMtu::Mtu1024)
}

/// One registered buffer: the region's key and address, and where perftest's layout starts in it.
struct Buffer {
    mr: MrInfo,
    base: u64,
}

/// Allocate and register `len` bytes (zeroed for latency tests, a byte pattern for bandwidth
/// tests), in transparent huge pages if asked. Returns the buffer and, with huge pages, how
/// many of its bytes the kernel backed with huge pages.
fn alloc(dev: &mut Device, pd: PdHandle, len: usize, cfg: &PerfConfig) -> Result<(Buffer, Option<usize>)> {
    let access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let fill = |i: usize| if cfg.test.is_bw() { (i % 251) as u8 } else { 0 };
    if !cfg.use_hugepages {
        let mem: Box<[u8]> = (0..len).map(fill).collect();
        let mr = dev.reg_mr(pd, mem, access)?;
        return Ok((Buffer { mr, base: mr.addr }, None));
    }
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if !thp.contains("[always]") && !thp.contains("[madvise]") {
        bail!(
            "Failed to allocate hugepages. Please configure hugepages: transparent huge pages are off \
             (/sys/kernel/mm/transparent_hugepage/enabled: {})",
            thp.trim()
        );
    }
    let huge_len = len.div_ceil(HUGE_PAGE) * HUGE_PAGE;
    let mut mem = vec![0u8; huge_len + HUGE_PAGE].into_boxed_slice();
    let start = mem.as_ptr() as usize;
    let off = start.next_multiple_of(HUGE_PAGE) - start;
    // SAFETY: the range [start + off, start + off + huge_len) lies inside `mem`, which stays
    // allocated (it moves into the region below without reallocating); madvise only changes how
    // the kernel backs those pages, not their contents or validity.
    let rc = unsafe { libc::madvise((start + off) as *mut libc::c_void, huge_len, libc::MADV_HUGEPAGE) };
    if rc != 0 {
        bail!("Failed to allocate hugepages: madvise(MADV_HUGEPAGE): {}", std::io::Error::last_os_error());
    }
    for (i, b) in mem[off..off + len].iter_mut().enumerate() {
        *b = fill(i);
    }
    let backed = anon_huge_bytes(start + off, huge_len);
    let mr = dev.reg_mr(pd, mem, access)?;
    Ok((Buffer { mr, base: mr.addr + off as u64 }, Some(backed)))
}

/// Bytes of `[addr, addr + len)` backed by transparent huge pages (`AnonHugePages` of the
/// mapping that holds it, from /proc/self/smaps; capped at `len`).
fn anon_huge_bytes(addr: usize, len: usize) -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((a, b)) = range.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                    inside = a <= addr && addr < b;
                    continue;
                }
            }
        }
        if inside {
            if let Some(kb) = line.strip_prefix("AnonHugePages:") {
                let kb: usize = kb.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                return (kb * 1024).min(len);
            }
        }
    }
    0
}

/// Create the QPs and buffers, exchange keys, connect.
pub(super) fn setup(cfg: PerfConfig, mut port: Port, stream: TcpStream, out: Box<dyn std::io::Write>) -> Result<Run> {
    let active = port.device_ref().config().active_mtu;
    let my_mtu = cfg.mtu.map_or(active, |m| m.min(active));
    let mut scfg = SessionConfig::new(cfg.test.kind());
    scfg.mtu = ib_mtu(my_mtu);
    scfg.num_qps = cfg.qps;
    scfg.exchange_versions = !cfg.dont_xchg_versions;
    // A peer that stops answering during the set-up (or speaks another exchange: one side with
    // --dont_xchg_versions, the other without) must not hang us; the measurement may take as
    // long as it takes, so the limit is lifted once connected.
    stream.set_read_timeout(Some(SETUP_TIMEOUT)).context("set the exchange's read timeout")?;
    let mut session = match cfg.host {
        Some(_) => PerftestSession::client(stream, scfg),
        None => PerftestSession::server(stream, scfg),
    }
    .map_err(|e| anyhow!(e))?;
    let agreed = session.agreed();
    let mtu = Mtu::from_enum(agreed.mtu as u8).unwrap_or(Mtu::Mtu1024).min(active);
    // BUFF_SIZE(size, cycle_buffer), rounded up to the cache line (INC).
    let line = agreed.cache_line_size.max(1) as usize;
    let buf_size = cfg.max_size().max(agreed.cycle_buffer as usize).next_multiple_of(line);
    let gid_index = port.gid_index();
    let gid = port.device_ref().config().gids[gid_index as usize];
    let max_rd = port.device_ref().config().max_qp_rd_atom as u16;
    let out_reads: u16 = if cfg.test.needs_reads() {
        match cfg.out_reads {
            Some(o) if o > max_rd => {
                eprintln!(" Number of outstanding reads is above max = {max_rd}\n Changing to that max value");
                max_rd
            }
            Some(o) => o,
            None => max_rd,
        }
    } else {
        1
    };
    let n = cfg.qps;
    let inline = cfg.inline();
    let dev = port.device();
    let pd = dev.alloc_pd();
    let mut huge = (0usize, 0usize);
    let mut shared = None;
    if !cfg.mr_per_qp {
        let (b, h) = alloc(dev, pd, 2 * n * buf_size, &cfg)?;
        huge = (h.unwrap_or(0), 2 * n * buf_size);
        shared = Some(b);
    }
    let mut conns = Vec::new();
    for i in 0..n {
        let cq = dev.create_cq(16384)?;
        let cap = QpCap {
            max_send_wr: cfg.tx_depth.max(1),
            max_recv_wr: cfg.rx_depth.max(1),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: inline,
        };
        let qpn = dev.create_qp(
            pd,
            &QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap, sq_sig_all: false, srq: None },
        )?;
        let (mr, send_addr, recv_addr) = match &shared {
            Some(b) => (b.mr, b.base + (i * buf_size) as u64, b.base + ((n + i) * buf_size) as u64),
            None => {
                let (b, h) = alloc(dev, pd, 2 * buf_size, &cfg)?;
                huge = (huge.0 + h.unwrap_or(0), huge.1 + 2 * buf_size);
                (b.mr, b.base, b.base + buf_size as u64)
            }
        };
        let me = PerftestDest {
            lid: 0,
            out_reads,
            qpn,
            psn: dev.random_psn(),
            rkey: mr.rkey,
            vaddr: recv_addr,
            gid: gid.0,
            ..Default::default()
        };
        conns.push(Conn { qpn, cq, lkey: mr.lkey, send_addr, recv_addr, me, peer: PerftestDest::default() });
    }
    let mine: Vec<PerftestDest> = conns.iter().map(|c| c.me).collect();
    let peers = session.exchange_keys(&mine).map_err(|e| anyhow!(e))?;
    for (c, p) in conns.iter_mut().zip(peers) {
        c.peer = p;
    }
    // Connect like perftest's ctx_modify_qp_to_rtr / _rts.
    let dmac = connect::peer_mac(cfg.ifname.as_deref(), Gid(conns[0].peer.gid).to_ip())?;
    for c in &conns {
        connect_qp(port.device(), c, &cfg, mtu, gid_index, dmac)?;
    }
    session.connected().map_err(|e| anyhow!(e))?;
    session.stream().set_read_timeout(None).context("clear the exchange's read timeout")?;
    let huge_pages = cfg
        .use_hugepages
        .then(|| format!("{} of {} KiB of the buffers in transparent huge pages", huge.0 / 1024, huge.1.max(1) / 1024));
    let mut run = Run { cfg, port, conns, session: Some(session), mtu, buf_size, out, huge_pages, cpu: None };
    super::report::header(&mut run)?;
    Ok(run)
}

fn connect_qp(
    dev: &mut Device,
    c: &Conn,
    cfg: &PerfConfig,
    mtu: Mtu,
    sgid_index: u8,
    dmac: uroce_wire::EthernetAddress,
) -> Result<()> {
    let local = RcLocal {
        access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        sgid_index,
        path_mtu: mtu,
        sq_psn: c.me.psn,
        // perftest: max_dest_rd_atomic = my out_reads, max_rd_atomic = the peer's (crosswise).
        max_dest_rd_atomic: c.me.out_reads.min(255) as u8,
        max_rd_atomic: c.peer.out_reads.clamp(1, 128) as u8,
        min_rnr_timer: 12,
        timeout: cfg.qp_timeout,
        retry_cnt: 7,
        rnr_retry: 7,
        hop_limit: 0xff,
        traffic_class: cfg.tclass,
        ..RcLocal::default()
    };
    let remote = RcRemote { qpn: c.peer.qpn, psn: c.peer.psn, gid: Gid(c.peer.gid), mac: dmac };
    connect_rc(dev, c.qpn, &local, &remote)?;
    Ok(())
}

impl Run {
    /// Byte `addr` of our registered memory.
    pub(crate) fn byte(&self, lkey: u32, addr: u64) -> u8 {
        let dev = self.port.device_ref();
        dev.mr(lkey).and_then(|m| m.offset_of(addr, 1).map(|o| m.as_slice()[o])).unwrap_or(0)
    }

    /// Set byte `addr` of our registered memory.
    pub(crate) fn set_byte(&mut self, lkey: u32, addr: u64, v: u8) {
        if let Some(m) = self.port.device().mr_mut(lkey) {
            if let Some(o) = m.offset_of(addr, 1) {
                m.as_mut_slice()[o] = v;
            }
        }
    }
}

/// perftest's inline default for a test on a recognised device (`ctx_set_max_inline`):
/// `DEF_INLINE_WRITE` 220 for write_lat, `DEF_INLINE_SEND_RC_UC` 236 for send_lat, else 0.
pub(super) fn default_inline(t: Test) -> u32 {
    match t {
        Test::WriteLat => 220,
        Test::SendLat => 236,
        _ => 0,
    }
}
