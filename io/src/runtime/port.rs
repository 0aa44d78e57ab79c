//! One port: an engine, a backend, a clock, and optional capture and fault injection.

use crate::capture::CaptureFile;
use crate::{inject, netif, tap::Tap, udp, xdp, Backend};
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant as StdInstant, SystemTime};
use uroce_transport::{Device, DeviceConfig, Instant, Mtu, QpnShard, RxDrop};
use uroce_wire::EthernetAddress;

/// Which backend a port uses.
#[derive(Clone, Debug)]
pub enum BackendKind {
    /// AF_XDP on the interface.
    Xdp(xdp::XdpOptions),
    /// A kernel UDP socket bound to the local address and this port (normally 4791).
    Udp {
        /// UDP port to bind.
        port: u16,
        /// Batch equal-size runs with `UDP_SEGMENT` (GSO). Safe toward kernel sockets, real
        /// NICs and native-XDP peers on veth; not toward a generic-mode XDP peer on veth,
        /// which would see the unsegmented batch (see `crate::udp`).
        gso: bool,
        /// Accept coalesced datagrams (`UDP_GRO`).
        gro: bool,
        /// Share the port with other uroce processes on this address
        /// ([`udp::UdpOptions::shared`]).
        shared: bool,
    },
}

impl BackendKind {
    /// The same backend, joining the other uroce processes on the interface (each owns a block
    /// of QP numbers) instead of taking it alone.
    pub fn shared(mut self) -> Self {
        match &mut self {
            BackendKind::Xdp(o) => o.shared = true,
            BackendKind::Udp { shared, .. } => *shared = true,
        }
        self
    }
}

/// How to open a port.
#[derive(Clone, Debug)]
pub struct PortConfig {
    /// Interface name (required for AF_XDP; for UDP it supplies the MAC, MTU and addresses).
    pub ifname: Option<String>,
    /// The local IP address frames are sent from (must be one of the interface's).
    pub local_ip: IpAddr,
    /// The backend.
    pub backend: BackendKind,
    /// Seed of the engine's random choices (QPNs, initial PSNs, rkeys/lkeys, the IPv4
    /// identification start): everything a peer must not predict derives from it. `None` (what
    /// every run without `--seed` passes) draws it from the operating system when the port
    /// opens ([`crate::random::key_seed`]), never from the clock or the pid; a fixed value is
    /// for tests and `--seed` runs only.
    pub seed: Option<u64>,
    /// Capture every frame sent and received to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Fault injection on received frames.
    pub inject: Option<inject::FaultConfig>,
    /// Engine configuration changes applied last (e.g. window size, quirks).
    pub tweak: Option<fn(&mut DeviceConfig)>,
    /// Congestion control (ECN, CNPs, DCQCN; default off, as rxe).
    pub cc: uroce_transport::cc::CongestionConfig,
}

/// Port counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames received from the backend.
    pub rx_frames: u64,
    /// Frames sent to the backend.
    pub tx_frames: u64,
    /// Frames the engine rejected (see the engine's counters for why).
    pub rx_dropped: u64,
    /// Times the backend had no transmit buffer.
    pub tx_full: u64,
    /// Polls that found nothing to do.
    pub idle_polls: u64,
    /// Transmit attempts that found the link down.
    pub link_down: u64,
    /// Frames received whose destination QP belongs to another shard (a sharded port only):
    /// the engine's `dropped_wrong_shard`, each handed to the port's relay ([`Port::set_relay`])
    /// or, without one, dropped. Zero when every frame arrives on a receive queue of its QP's
    /// shard (veth, QPs connected within their class); a NIC's RSS does not see to that.
    pub wrong_shard: u64,
    /// Of those, frames the relay took (to the owning shard).
    pub relayed: u64,
    /// Of those, frames the relay could not take (the owner's inbox full): lost, as on a wire.
    pub relay_full: u64,
    /// Frames another shard's port relayed to this one ([`Port::receive_relayed`]).
    pub relayed_in: u64,
    /// 802.1Qbb PFC frames received (the port honours them: [`super::pause`]).
    pub pause_rx: u64,
    /// Frames held back while their priority was paused.
    pub tx_held: u64,
}

/// Where a port hands a received frame whose destination QP is another shard's: the QPN and
/// the frame; `false` if it could not be taken.
pub type Relay = Box<dyn FnMut(u32, &[u8]) -> bool + Send>;

/// Hand a received frame to the engine (or, another shard's, to the relay) and count it.
fn deliver(dev: &mut Device, stats: &mut PortStats, relay: &mut Option<Relay>, now: Instant, f: &[u8]) {
    match dev.handle_frame(now, f) {
        Ok(()) => {}
        Err(RxDrop::OtherShard(qpn)) => match relay.as_mut().map(|r| r(qpn, f)) {
            Some(true) => stats.relayed += 1,
            Some(false) => {
                stats.relay_full += 1;
                stats.rx_dropped += 1;
            }
            None => stats.rx_dropped += 1,
        },
        Err(_) => stats.rx_dropped += 1,
    }
}

/// An engine joined to a backend.
pub struct Port {
    backend: Box<dyn Backend>,
    dev: Device,
    epoch: StdInstant,
    /// When the last round began ([`Port::polled_at`]).
    polled_at: StdInstant,
    wall_epoch: SystemTime,
    pcap: Option<CaptureFile>,
    injector: Option<inject::FaultInjector>,
    stats: PortStats,
    gid_index: u8,
    idle_streak: u32,
    tx_budget: u32,
    tx_blocked: bool,
    pause: super::pause::Pause,
    /// The tap between engine and backend, the frames it let out that wait for the backend,
    /// and the engine's transmit buffer while a tap is in place.
    tap: Option<Box<dyn Tap>>,
    tap_out: VecDeque<Vec<u8>>,
    tap_scratch: Vec<u8>,
    relay: Option<Relay>,
}

/// A link that is down loses frames, as a wire would: the engine's timers and retries decide
/// what happens to the QPs (RETRY_EXC_ERR), the port keeps running and counts it.
fn link_down_ok(r: std::io::Result<()>, stats: &mut PortStats) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == ErrorKind::NetworkDown => {
            if stats.link_down == 0 {
                tracing::warn!("link is down: {e}; frames are lost until it comes back");
            }
            stats.link_down += 1;
            Ok(())
        }
        r => r,
    }
}

/// The link speed of `ifname` in bits per second (sysfs `speed`, Mb/s; veth reports 10000),
/// for PFC quanta; 100 Gbit/s when unknown.
fn link_speed(ifname: Option<&str>) -> u64 {
    ifname
        .and_then(|n| std::fs::read_to_string(format!("/sys/class/net/{n}/speed")).ok())
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|&m| m > 0)
        .map_or(100_000_000_000, |m| m as u64 * 1_000_000)
}

/// Sends a copy of `f` (captured when it goes); `Ok(false)` when it does not fit the
/// backend's buffer.
fn send_copy(
    backend: &mut dyn Backend,
    pcap: &mut Option<CaptureFile>,
    ts: Duration,
    f: &[u8],
) -> std::io::Result<bool> {
    backend.send_with(&mut |buf: &mut [u8]| {
        let b = buf.get_mut(..f.len())?;
        b.copy_from_slice(f);
        if let Some(p) = pcap.as_mut() {
            let _ = p.write(ts, f);
        }
        Some(f.len())
    })
}

/// Frames sent per [`Port::poll`] round by default.
pub const DEFAULT_TX_BUDGET: u32 = 128;

impl Port {
    /// Open the backend and build the engine for it.
    pub fn open(cfg: PortConfig) -> anyhow::Result<Port> {
        use anyhow::Context;
        let backend: Box<dyn Backend> = match &cfg.backend {
            BackendKind::Xdp(o) => {
                let name = cfg.ifname.as_deref().context("the AF_XDP backend needs an interface (-d)")?;
                Box::new(xdp::XdpBackend::open(name, o)?)
            }
            BackendKind::Udp { .. } => return Port::open_with(cfg, None, None),
        };
        Port::open_with(cfg, Some(backend), None)
    }

    /// [`Port::open`] over an already opened `backend` (`None`: the one `cfg` names), with an
    /// engine that hands out only QPNs of `shard`'s class and counts frames for other classes
    /// ([`PortStats::wrong_shard`]).
    pub fn open_with(
        cfg: PortConfig,
        backend: Option<Box<dyn Backend>>,
        shard: Option<QpnShard>,
    ) -> anyhow::Result<Port> {
        use anyhow::Context;
        let (mac, link_mtu, ips) = match &cfg.ifname {
            Some(name) => {
                let i = netif::Interface::by_name(name).with_context(|| format!("interface {name}"))?;
                (i.mac, i.mtu as usize, i.addresses())
            }
            None => (EthernetAddress([0x02, 0, 0, 0, 0, 0x01]), 65536, vec![cfg.local_ip]),
        };
        if !ips.contains(&cfg.local_ip) {
            anyhow::bail!("{} is not an address of {}", cfg.local_ip, cfg.ifname.as_deref().unwrap_or("this host"));
        }
        let backend: Box<dyn Backend> = match (backend, &cfg.backend) {
            (Some(b), _) => b,
            (None, BackendKind::Xdp(o)) => {
                let name = cfg.ifname.as_deref().context("the AF_XDP backend needs an interface (-d)")?;
                Box::new(xdp::XdpBackend::open(name, o)?)
            }
            (None, BackendKind::Udp { port, gso, gro, shared }) => Box::new(
                udp::UdpBackend::new(
                    cfg.local_ip,
                    *port,
                    udp::UdpOptions { gso: *gso, gro: *gro, shared: *shared, ..udp::UdpOptions::from(mac) },
                )
                .with_context(|| format!("UDP socket on {}:{port}", cfg.local_ip))?,
            ),
        };
        tracing::info!(backend = %backend.describe(), "port open");
        // The GID table holds the interface's addresses in rxe's order (DeviceConfig::new would
        // put the MAC-derived link-local first whatever the interface has).
        let mut dc = DeviceConfig::new(mac, &[]);
        dc.gids = super::connect::gid_table(mac, &ips);
        dc.active_mtu = Mtu::for_link_mtu(link_mtu);
        dc.seed = crate::random::key_seed(cfg.seed)?;
        dc.udp_sport = backend.fixed_udp_src_port();
        dc.qpn_block = backend.qpn_block();
        dc.own_address_via_wire = backend.reaches_own_address();
        if dc.udp_sport.is_some() {
            // A kernel UDP socket (DF set) sends IPv4 identification 0, and the ICRC covers it.
            dc.ipv4_ident = uroce_transport::Ipv4Ident::Zero;
        }
        // The backend's check happens before the injector; an injector that corrupts frames
        // needs the engine's own check behind it.
        let corrupts = cfg.inject.as_ref().is_some_and(|f| f.corrupt > 0.0);
        dc.check_icrc = !backend.verifies_icrc() || corrupts;
        dc.guards.src_mac = backend.delivers_link_headers();
        dc.cc = cfg.cc;
        if let Some(t) = cfg.tweak {
            t(&mut dc);
        }
        if let Some(sh) = shard {
            dc.qpn_shard = sh;
        }
        let gid_index = dc.gids.iter().position(|g| g.to_ip() == cfg.local_ip).context("local GID")? as u8;
        let pcap = match &cfg.pcap {
            Some(p) => Some(CaptureFile::create(p)?),
            None => None,
        };
        Ok(Port {
            backend,
            dev: Device::new(dc),
            epoch: StdInstant::now(),
            polled_at: StdInstant::now(),
            wall_epoch: SystemTime::now(),
            pcap,
            injector: cfg.inject.map(inject::FaultInjector::new),
            stats: PortStats::default(),
            gid_index,
            idle_streak: 0,
            tx_budget: DEFAULT_TX_BUDGET,
            tx_blocked: false,
            pause: super::pause::Pause::new(link_speed(cfg.ifname.as_deref())),
            tap: None,
            tap_out: VecDeque::new(),
            tap_scratch: Vec::new(),
            relay: None,
        })
    }

    /// The engine.
    pub fn device(&mut self) -> &mut Device {
        &mut self.dev
    }

    /// At most `n` frames are sent per [`Port::poll`] round (default [`DEFAULT_TX_BUDGET`]).
    pub fn set_tx_budget(&mut self, n: u32) {
        self.tx_budget = n.max(1);
    }

    /// Whether RDMA-CM may run here while the interface is shared ([`Backend::steers_qp1`]).
    pub fn steers_qp1(&self) -> bool {
        self.backend.steers_qp1()
    }

    /// REQs for `service_id` to this process ([`Backend::listen_service`]).
    pub fn listen_service(&mut self, service_id: u64) -> std::io::Result<()> {
        self.backend.listen_service(service_id)
    }

    /// No more REQs for `service_id` here ([`Backend::unlisten_service`]).
    pub fn unlisten_service(&mut self, service_id: u64) {
        self.backend.unlisten_service(service_id)
    }

    /// The engine, read-only.
    pub fn device_ref(&self) -> &Device {
        &self.dev
    }

    /// GID index of the local address.
    pub fn gid_index(&self) -> u8 {
        self.gid_index
    }

    /// What the backend is.
    pub fn describe(&self) -> String {
        self.backend.describe()
    }

    /// Counters.
    pub fn stats(&self) -> PortStats {
        // The engine's routing counts another shard's frames as it looks their QP up.
        PortStats {
            wrong_shard: self.dev.counters().dropped_wrong_shard,
            pause_rx: self.pause.frames,
            tx_held: self.pause.held_total,
            ..self.stats
        }
    }

    /// Put `tap` between the engine and the backend (see [`crate::tap`]); `None` removes it.
    /// A tapped port sends what the tap lets out in order and does not hold frames for PFC.
    pub fn set_tap(&mut self, tap: Option<Box<dyn Tap>>) {
        self.tap = tap;
        self.tap_scratch.resize(if self.tap.is_some() { 1 << 16 } else { 0 }, 0);
    }

    /// The tap, to look at what it recorded.
    pub fn tap_mut(&mut self) -> Option<&mut (dyn Tap + 'static)> {
        self.tap.as_deref_mut()
    }

    /// The fault injector's counters, when one is configured.
    pub fn injector(&self) -> Option<&inject::FaultInjector> {
        self.injector.as_ref()
    }

    /// Hand received frames whose destination QP is another shard's to `relay` (a sharded
    /// runtime's; see [`super::sharded`]) instead of dropping them.
    pub fn set_relay(&mut self, relay: Option<Relay>) {
        self.relay = relay;
    }

    /// Feed a frame another shard's port received for one of this port's QPs (see
    /// [`Port::set_relay`]); what the engine answers goes out with the next [`Port::poll`].
    pub fn receive_relayed(&mut self, f: &[u8]) {
        let now = self.now();
        self.stats.relayed_in += 1;
        // No relay onward: a frame relayed here is this shard's or nobody's.
        deliver(&mut self.dev, &mut self.stats, &mut None, now, f);
    }

    /// The engine's clock: time since the port opened.
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// The backend's descriptor, for waiting on it together with other events.
    pub fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        self.backend.raw_fd()
    }

    /// Receive queues the backend serves.
    pub fn queues(&self) -> usize {
        self.backend.queues()
    }

    /// The descriptor of receive queue `q`.
    pub fn queue_fd(&self, q: usize) -> Option<std::os::fd::RawFd> {
        self.backend.queue_fd(q)
    }

    /// Frames received on each queue (empty when the backend does not count per queue).
    pub fn queue_rx_frames(&self) -> Vec<u64> {
        self.backend.queue_rx_frames()
    }

    /// [`Port::poll`] with the backend's I/O restricted to receive queue `q` (its socket's
    /// rings); the engine's work is the whole port's. A per-queue progress thread calls this.
    pub fn poll_queue(&mut self, q: usize) -> std::io::Result<bool> {
        self.backend.focus_queue(Some(q));
        let r = self.poll();
        self.backend.focus_queue(None);
        r
    }

    /// When the last round ([`Port::poll`]) began: the clock it read, for a caller that needs
    /// the time too and would otherwise read it again.
    pub fn polled_at(&self) -> StdInstant {
        self.polled_at
    }

    /// One round: receive a batch, fire due timers, transmit everything the engine has.
    /// Returns whether anything happened.
    pub fn poll(&mut self) -> std::io::Result<bool> {
        // One clock read per round: the engine's time, the injector's and the capture's.
        let std_now = StdInstant::now();
        self.polled_at = std_now;
        let since = std_now.saturating_duration_since(self.epoch);
        let now = Instant::from_nanos(since.as_nanos() as u64);
        // The capture's timestamp (wall clock), only when capturing: two timespec sums a round.
        let ts = if self.pcap.is_some() {
            (self.wall_epoch + since).duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default()
        } else {
            Duration::ZERO
        };
        let Port {
            backend,
            dev,
            pcap,
            injector,
            stats,
            tx_budget,
            tx_blocked,
            pause,
            tap,
            tap_out,
            tap_scratch,
            relay,
            ..
        } = self;
        *tx_blocked = false;
        let mut work = false;
        let to_engine = |dev: &mut Device,
                         stats: &mut PortStats,
                         tap: &mut Option<Box<dyn Tap>>,
                         relay: &mut Option<Relay>,
                         f: &[u8]| match tap.as_mut() {
            Some(t) => t.on_rx(now, f, &mut |g: &[u8]| deliver(dev, stats, relay, now, g)),
            None => deliver(dev, stats, relay, now, f),
        };
        let n = backend.recv(64, &mut |f: &[u8]| {
            if let Some(p) = pcap.as_mut() {
                let _ = p.write(ts, f);
            }
            if uroce_wire::pfc::is_mac_control(f) {
                pause.on_frame(now, f);
                return;
            }
            match injector.as_mut() {
                Some(inj) => inj.process(std_now, f, &mut |g: &[u8]| to_engine(dev, stats, tap, relay, g)),
                None => to_engine(dev, stats, tap, relay, f),
            }
        })?;
        stats.rx_frames += n as u64;
        work |= n > 0;
        if let Some(inj) = injector.as_mut() {
            inj.poll(std_now, &mut |g: &[u8]| {
                work = true;
                to_engine(dev, stats, tap, relay, g);
            });
        }
        if dev.poll_timeout().is_some_and(|t| t <= now) {
            dev.handle_timeout(now);
            work = true;
        }
        if let Some(t) = tap.as_mut() {
            return Self::poll_tapped(
                backend.as_mut(),
                dev,
                t.as_mut(),
                tap_out,
                tap_scratch,
                pcap,
                stats,
                now,
                ts,
                (*tx_budget, tx_blocked),
                work,
            );
        }
        let mut sent = 0u32;
        // Frames held for a paused priority that may go now, oldest first.
        while sent < *tx_budget {
            let Some(i) = pause.next_sendable(now) else { break };
            let Some(f) = pause.take(i) else { break };
            let r = send_copy(backend.as_mut(), pcap, ts, &f);
            match r {
                Ok(true) => sent += 1,
                Ok(false) => {
                    pause.put_back(i, f);
                    break;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    pause.put_back(i, f);
                    stats.tx_full += 1;
                    *tx_blocked = true;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        // A bounded burst per round: receiving gets its turn, and a receiver behind a bridge
        // (no backpressure, a 256-entry veth ring) is not flooded by one 1 MiB READ response.
        while sent < *tx_budget && !*tx_blocked && pause.has_room() {
            let r = backend.send_with(&mut |buf: &mut [u8]| loop {
                let n = dev.poll_transmit(now, buf)?;
                if pause.holds(now, &buf[..n]) {
                    pause.hold(&buf[..n]);
                    if !pause.has_room() {
                        return None;
                    }
                    continue;
                }
                if let Some(p) = pcap.as_mut() {
                    let _ = p.write(ts, &buf[..n]);
                }
                return Some(n);
            });
            match r {
                Ok(true) => {
                    sent += 1;
                    if sent.is_multiple_of(64) {
                        link_down_ok(backend.flush(), stats)?;
                    }
                }
                Ok(false) => break,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    stats.tx_full += 1;
                    *tx_blocked = true;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        stats.tx_frames += sent as u64;
        link_down_ok(backend.flush(), stats)?;
        work |= sent > 0;
        if !work {
            stats.idle_polls += 1;
        }
        Ok(work)
    }

    /// The transmit half of [`Port::poll`] with a tap: due frames from the tap, then the
    /// engine's frames through it, all sent in the order the tap let them out.
    #[allow(clippy::too_many_arguments)]
    fn poll_tapped(
        backend: &mut dyn Backend,
        dev: &mut Device,
        tap: &mut dyn Tap,
        out: &mut VecDeque<Vec<u8>>,
        scratch: &mut [u8],
        pcap: &mut Option<CaptureFile>,
        stats: &mut PortStats,
        now: Instant,
        ts: Duration,
        (budget, blocked): (u32, &mut bool),
        mut work: bool,
    ) -> std::io::Result<bool> {
        tap.poll(now, &mut |g: &[u8]| out.push_back(g.to_vec()), &mut |g: &[u8]| {
            work = true;
            deliver(dev, stats, &mut None, now, g);
        });
        while out.len() < budget as usize {
            let Some(n) = dev.poll_transmit(now, scratch) else { break };
            tap.on_tx(now, &scratch[..n], &mut |g: &[u8]| out.push_back(g.to_vec()));
            work = true;
        }
        let mut sent = 0u32;
        while sent < budget {
            let Some(f) = out.pop_front() else { break };
            let r = send_copy(backend, pcap, ts, &f);
            match r {
                Ok(true) => sent += 1,
                // longer than the backend's buffers: the tap made it, the wire cannot carry it
                Ok(false) => tracing::warn!(len = f.len(), "tap frame longer than the backend's buffers: not sent"),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    out.push_front(f);
                    stats.tx_full += 1;
                    *blocked = true;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        stats.tx_frames += sent as u64;
        link_down_ok(backend.flush(), stats)?;
        work |= sent > 0;
        if !work {
            stats.idle_polls += 1;
        }
        Ok(work)
    }

    /// The last [`Port::poll`] found the backend's transmit queue full (frames are waiting in
    /// the engine): do not sleep long.
    pub fn tx_blocked(&self) -> bool {
        self.tx_blocked
    }

    /// How long the port may sleep: until the next engine timer or injector release, capped;
    /// 50 µs when transmission is blocked on the backend.
    pub fn idle_timeout(&mut self, cap: Duration) -> Duration {
        let now = self.now();
        let mut t = if self.tx_blocked { cap.min(Duration::from_micros(50)) } else { cap };
        if let Some(d) = self.dev.poll_timeout() {
            t = t.min(Duration::from_nanos(d.as_nanos().saturating_sub(now.as_nanos())));
        }
        if let Some(d) = self.pause.next_resume(now) {
            t = t.min(Duration::from_nanos(d.as_nanos().saturating_sub(now.as_nanos())));
        }
        if let Some(r) = self.injector.as_ref().and_then(|i| i.next_release()) {
            t = t.min(r.saturating_duration_since(StdInstant::now()));
        }
        if let Some(d) = self.tap.as_ref().and_then(|tap| tap.next_wake()) {
            t = t.min(Duration::from_nanos(d.as_nanos().saturating_sub(now.as_nanos())));
        }
        if !self.tap_out.is_empty() {
            t = Duration::ZERO;
        }
        t
    }

    /// Poll until `done` holds or `timeout` passes, backing off when idle (spin ~50 rounds,
    /// then block on the backend, never past the next timer). Returns whether `done` held.
    pub fn drive(&mut self, timeout: Duration, mut done: impl FnMut(&mut Port) -> bool) -> std::io::Result<bool> {
        let deadline = StdInstant::now() + timeout;
        loop {
            if done(self) {
                return Ok(true);
            }
            let now = StdInstant::now();
            if now >= deadline {
                return Ok(false);
            }
            if self.poll()? {
                self.idle_streak = 0;
                continue;
            }
            self.idle_streak += 1;
            if self.idle_streak < 50 {
                std::hint::spin_loop();
                continue;
            }
            let t = self.idle_timeout(Duration::from_millis(1)).min(deadline - now);
            if !t.is_zero() {
                self.backend.wait(t)?;
            }
        }
    }

    /// Flush the capture file.
    pub fn flush_capture(&mut self) {
        if let Some(p) = self.pcap.as_mut() {
            let _ = p.flush();
        }
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        self.flush_capture();
    }
}
