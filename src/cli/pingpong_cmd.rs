//! `uroce pingpong [host]`: an `ibv_rc_pingpong`-compatible RC ping-pong (its flags, its
//! out-of-band exchange from [`uroce_rxe_compat::pingpong`], its output), so the stock tool can
//! be the peer. The run itself is [`crate::pingpong`].
//!
//! Flags are rc_pingpong's letters and long names (`getopt_long("p:d:i:s:m:r:n:l:eg:oOPtcjNU")`),
//! numbers parsed like its `strtoul(optarg, NULL, 0)` (decimal, `0x` hex, leading-0 octal),
//! plus uroce's own long options (`--backend`, `--local-ip`, `--pcap`, ... as `uroce perf`).
//! Exit status: 0 on success; 1 when the run fails (a completion error, invalid data under
//! `-c`, a refused option), as rc_pingpong returns 1.

use super::limits::{self, Limit};
use super::perf_cmd::BackendArgs;
use crate::pingpong::{self, PingpongConfig};
use anyhow::{bail, Result};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use uroce_transport::Mtu;

/// `strtoul(s, NULL, 0)`'s accepted forms (without its silent acceptance of trailing junk).
fn c_number(s: &str) -> Result<u64, String> {
    let t = s.trim_start();
    let t = t.strip_prefix('+').unwrap_or(t);
    let r = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        u64::from_str_radix(&t[1..], 8)
    } else {
        t.parse()
    };
    r.map_err(|e| format!("{s:?} is not a number: {e}"))
}

/// `v` of flag `flag` within `l`, or the one-line error `-s 99999999999: the message size must
/// be between ...`.
fn limit(flag: &str, l: &Limit, v: u64) -> Result<u64> {
    l.check(v).map_err(|e| anyhow::anyhow!("{flag} {v}: {e}"))
}

/// rc_pingpong's flags (same letters and long names) plus uroce's own.
#[derive(clap::Args, Debug)]
pub struct PingpongArgs {
    /// The server to connect to; without it, this side is the server and waits.
    host: Option<String>,
    /// Listen on / connect to this TCP port.
    #[arg(short = 'p', long, default_value = "18515", value_parser = c_number)]
    port: u64,
    /// Network interface (rc_pingpong: the IB device; uroce runs on a plain netdev).
    #[arg(short = 'd', long = "ib-dev")]
    pub(crate) dev: Option<String>,
    /// Port of the device (uroce has one: 1).
    #[arg(short = 'i', long = "ib-port", default_value = "1", allow_negative_numbers = true)]
    ib_port: i64,
    /// Size of the message to exchange (1 .. 2^31).
    #[arg(short = 's', long, default_value = "4096", value_parser = c_number)]
    size: u64,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (not exchanged: give both sides the same).
    #[arg(short = 'm', long, default_value = "1024", value_parser = c_number)]
    mtu: u64,
    /// Number of receives to post at a time (1 .. 16384).
    #[arg(short = 'r', long = "rx-depth", default_value = "500", value_parser = c_number)]
    rx_depth: u64,
    /// Number of exchanges (1 .. 2^32-1).
    #[arg(short = 'n', long, default_value = "1000", value_parser = c_number)]
    iters: u64,
    /// Service level (the 802.1p priority of VLAN-tagged frames), 0 .. 7.
    #[arg(short = 'l', long, default_value = "0", value_parser = c_number)]
    sl: u64,
    /// Sleep when idle (on the backend's descriptor) instead of busy-polling.
    #[arg(short = 'e', long)]
    events: bool,
    /// Local GID index (default: the interface's IPv4 address).
    #[arg(short = 'g', long = "gid-idx", allow_negative_numbers = true)]
    gid_idx: Option<i64>,
    /// On-demand paging (not supported: uroce's memory is always resident).
    #[arg(short = 'o', long)]
    odp: bool,
    /// Implicit on-demand paging (not supported).
    #[arg(short = 'O', long)]
    iodp: bool,
    /// Prefetch an ODP MR (not supported).
    #[arg(short = 'P', long)]
    prefetch: bool,
    /// Completion timestamps (not supported).
    #[arg(short = 't', long)]
    ts: bool,
    /// Validate the received buffer (rc_pingpong's check, plus uroce's byte-for-byte one).
    #[arg(short = 'c', long)]
    chk: bool,
    /// Device memory (not supported).
    #[arg(short = 'j', long)]
    dm: bool,
    /// Use the new post send WR API (accepted: the same SEND on the wire).
    #[arg(short = 'N', long = "new_send")]
    new_send: bool,
    /// Allow unprotected memory on CoCo guests (accepted; nothing to do).
    #[arg(short = 'U', long = "allow-cc-unprotected")]
    allow_cc_unprotected: bool,
    #[command(flatten)]
    io: BackendArgs,
    /// Local IP address (instead of -d/-g); with the udp backend no interface is needed.
    #[arg(long)]
    local_ip: Option<IpAddr>,
    /// Capture every frame sent and received into this pcap file.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Inject faults on received frames, e.g. `drop=0.01,seed=7` (see `io::inject`).
    #[arg(long)]
    inject: Option<uroce_io::inject::FaultConfig>,
    /// Seed of the QPN, keys and PSN, for a reproducible run (default: a seed from the
    /// operating system's random source, different on every run).
    #[arg(long)]
    seed: Option<u64>,
    /// Seconds the client keeps retrying its TCP connection (0 .. 86400).
    #[arg(long, default_value_t = 30)]
    connect_timeout: u64,
    /// Give up after this many seconds without a completion (rc_pingpong waits forever), 1 ..
    /// 86400.
    #[arg(long, default_value_t = 30)]
    stall_timeout: u64,
    /// At exit, print the engine's non-zero counters, the port's stats and the fault
    /// injector's counters to stderr (`uroce-counters <group>: name=value ...`).
    #[arg(long)]
    counters: bool,
    /// Treat retry_cnt 7 as "retry forever", as Linux rxe does (default: 7 retries, as the
    /// IBTA spec and ConnectX; 0.54 s of silence at rc_pingpong's timeout 14 fails the run).
    #[arg(long)]
    retry_forever: bool,
    /// Test hook: flip bit 0 of byte OFF of outgoing message K (1-based), `K` or `K@OFF`.
    #[arg(long, hide = true, value_parser = parse_corrupt)]
    debug_corrupt_send: Option<(u32, usize)>,
}

fn parse_corrupt(s: &str) -> Result<(u32, usize), String> {
    let (k, off) = s.split_once('@').unwrap_or((s, "0"));
    let k: u32 = k.parse().map_err(|e| format!("message number {k:?}: {e}"))?;
    let off: usize = off.parse().map_err(|e| format!("offset {off:?}: {e}"))?;
    if k == 0 {
        return Err("messages are numbered from 1".into());
    }
    Ok((k, off))
}

/// Build the run's configuration from the flags; refused options are errors.
pub fn config(a: &PingpongArgs) -> Result<PingpongConfig> {
    if a.odp || a.iodp || a.prefetch {
        bail!("-o/-O/-P (on-demand paging) are not supported: uroce's memory regions are always resident");
    }
    if a.ts {
        bail!("-t (completion timestamps) is not supported");
    }
    if a.dm {
        bail!("-j (device memory) is not supported: uroce has no device memory");
    }
    limit("-p", &limits::TCP_PORT, a.port)?;
    if a.ib_port < 1 {
        bail!("-i must be at least 1");
    }
    if a.ib_port != 1 {
        bail!("uroce has one port: -i 1");
    }
    let mtu = usize::try_from(a.mtu)
        .ok()
        .and_then(Mtu::from_bytes)
        .ok_or_else(|| anyhow::anyhow!("-m must be 256, 512, 1024, 2048 or 4096"))?;
    let size = limit("-s", &limits::PINGPONG_SIZE, a.size)? as u32;
    let iters = limit("-n", &limits::PINGPONG_ITERS, a.iters)? as u32;
    let rx_depth = limit("-r", &limits::PINGPONG_RX_DEPTH, a.rx_depth)? as u32;
    if a.sl > 7 {
        bail!("-l must be between 0 and 7 (RoCE carries the SL as the 802.1p priority)");
    }
    limit("--connect-timeout", &limits::CONNECT_TIMEOUT, a.connect_timeout)?;
    limit("--stall-timeout", &limits::STALL_TIMEOUT, a.stall_timeout)?;
    if let Some((k, off)) = a.debug_corrupt_send {
        if k > iters || off >= size as usize {
            bail!("--debug-corrupt-send {k}@{off}: there are {iters} messages of {size} bytes");
        }
    }
    // The buffer, and with -c the expected contents of the peer's messages and of ours.
    let copies = if a.chk { 3 } else { 1 };
    limits::fits_in_memory(&format!("-s {size} ({copies} buffer(s) of the message size)"), copies * a.size)
        .map_err(|e| anyhow::anyhow!("{e}: use a smaller -s"))?;
    let c = PingpongConfig {
        host: a.host.clone(),
        port: a.port as u16,
        ifname: a.dev.clone(),
        local_ip: a.local_ip,
        // rc_pingpong: a negative -g means "no GID" (gidx = -1).
        gid_index: match a.gid_idx {
            Some(g) if g >= 0 => Some(u8::try_from(g).map_err(|_| anyhow::anyhow!("-g {g} is out of range"))?),
            _ => None,
        },
        size,
        mtu,
        rx_depth,
        iters,
        sl: a.sl as u8,
        validate: a.chk,
        events: a.events,
        backend: a.io.kind(),
        pcap: a.pcap.clone(),
        inject: a.inject.clone(),
        connect_timeout: Duration::from_secs(a.connect_timeout),
        stall_timeout: Duration::from_secs(a.stall_timeout),
        counters: a.counters,
        retry_forever: a.retry_forever,
        corrupt_send: a.debug_corrupt_send,
        seed: a.seed,
    };
    let _ = (a.new_send, a.allow_cc_unprotected);
    Ok(c)
}

/// `uroce pingpong`.
pub fn run(a: &PingpongArgs) -> Result<ExitCode> {
    let cfg = match config(a) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e:#}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let mut out = std::io::stdout();
    match pingpong::run(&cfg, &mut out) {
        Ok(s) if s.data_ok() => Ok(ExitCode::SUCCESS),
        Ok(_) => {
            eprintln!("uroce pingpong: invalid data (-c)");
            Ok(ExitCode::FAILURE)
        }
        Err(e) => match super::failure_lines(&e) {
            None => Ok(ExitCode::SUCCESS),
            Some(lines) => {
                for l in lines {
                    eprintln!("{l}");
                }
                Ok(ExitCode::FAILURE)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct T {
        #[command(flatten)]
        a: PingpongArgs,
    }

    fn parse(args: &[&str]) -> Result<PingpongConfig> {
        let t = T::try_parse_from(std::iter::once("pingpong").chain(args.iter().copied()))?;
        config(&t.a)
    }

    #[test]
    fn defaults_are_rc_pingpongs() {
        let c = parse(&[]).unwrap();
        assert_eq!((c.port, c.size, c.mtu, c.rx_depth, c.iters, c.sl), (18515, 4096, Mtu::Mtu1024, 500, 1000, 0));
        assert!(c.host.is_none() && !c.validate && c.gid_index.is_none());
        assert_eq!(c.seed, None, "no --seed: the seed comes from the OS when the run starts");
        assert_eq!(parse(&["--seed", "42"]).unwrap().seed, Some(42));
    }

    #[test]
    fn flags_like_getopt() {
        let c = parse(&[
            "-p", "0x4000", "-d", "eth0", "-i", "1", "-s", "010", "-m", "2048", "-r", "64", "-n", "5", "-l", "3", "-e",
            "-g", "1", "-c", "-N", "-U", "10.0.0.1",
        ])
        .unwrap();
        assert_eq!(c.port, 0x4000);
        assert_eq!(c.size, 8, "leading 0 is octal, as strtoul(.., 0)");
        assert_eq!((c.mtu, c.rx_depth, c.iters, c.sl, c.gid_index), (Mtu::Mtu2048, 64, 5, 3, Some(1)));
        assert!(c.validate);
        assert_eq!(c.host.as_deref(), Some("10.0.0.1"));
        let c = parse(&["--size=9001", "--iters=7", "--gid-idx=-1", "--chk", "--new_send"]).unwrap();
        assert_eq!((c.size, c.iters, c.gid_index), (9001, 7, None));
    }

    #[test]
    fn unsupported_and_invalid_options_are_refused() {
        for (args, msg) in [
            (&["-o"][..], "on-demand paging"),
            (&["-O"], "on-demand paging"),
            (&["-P"], "on-demand paging"),
            (&["-t"], "timestamps"),
            (&["-j"], "device memory"),
            (&["-m", "1500"], "-m must be"),
            (&["-i", "2"], "one port"),
            (&["-i", "0"], "at least 1"),
            (&["-p", "70000"], "65535"),
            (&["-n", "0"], "-n 0: the number of exchanges must be between 1 and 4294967295"),
            (&["-n", "4294967296"], "-n 4294967296: the number of exchanges must be between 1"),
            (&["-s", "0"], "-s 0: the message size must be between 1 and 2147483648 bytes"),
            (&["-s", "99999999999"], "-s 99999999999: the message size must be between 1 and 2147483648 bytes"),
            (&["-r", "0"], "-r 0: the receive depth must be between 1 and 16384 (rxe's max_qp_wr)"),
            (&["-r", "16385"], "-r 16385: the receive depth must be between 1 and 16384"),
            (&["-m", "99999999999"], "-m must be 256, 512, 1024, 2048 or 4096"),
            (&["-l", "8"], "-l must be between 0 and 7"),
            (&["-p", "0"], "-p 0: the TCP port must be between 1 and 65535"),
            (&["--stall-timeout", "0"], "--stall-timeout 0: the stall timeout must be between 1 and 86400"),
            (&["--connect-timeout", "18446744073709551615"], "the connect timeout must be between 0 and 86400"),
            (&["-n", "5", "--debug-corrupt-send", "6"], "there are 5 messages of 4096 bytes"),
            (&["--debug-corrupt-send", "1@4096"], "there are 1000 messages of 4096 bytes"),
        ] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(msg), "{args:?}: {e}");
        }
        assert!(parse(&["-s", "12x"]).is_err());
    }

    #[test]
    fn corrupt_hook_parses() {
        let c = parse(&["--debug-corrupt-send", "7@100"]).unwrap();
        assert_eq!(c.corrupt_send, Some((7, 100)));
        assert_eq!(parse(&["--debug-corrupt-send", "3"]).unwrap().corrupt_send, Some((3, 0)));
        assert!(parse(&["--debug-corrupt-send", "0"]).is_err());
    }
}
