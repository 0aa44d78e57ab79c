//! The `uroce` command-line tool.

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

mod attack_cmd;
mod demo_cmd;
mod fuzz_cmd;
pub mod limits;
mod pcap_cmd;
mod perf_cmd;
mod pingpong_cmd;
mod probe_cmd;
mod sim_cmd;
mod sim_dcqcn;
mod sim_scenario;
mod switch_cmd;
mod tools;
mod verbs_cmd;

/// uroce: a userspace RoCEv2 stack.
#[derive(Parser, Debug)]
#[command(name = "uroce", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Decode the RoCEv2 frames of pcap/pcapng files and verify every ICRC.
    ///
    /// Prints one line per RoCEv2 frame and a final summary line
    /// `packets: N roce: N icrc_ok: N icrc_bad: N undecodable: N`; exits non-zero when any
    /// ICRC is bad or any UDP/4791 frame cannot be decoded.
    Pcap {
        /// Capture files (pcap or pcapng).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print only the summary line.
        #[arg(short, long)]
        quiet: bool,
        /// Instead of a line per frame, a block per flow (one direction to one QP): packets and
        /// messages per opcode, PSN range, retransmissions and gaps, ACKs and NAKs by kind,
        /// ECN marks and CNPs, goodput.
        #[arg(long)]
        flows: bool,
        /// With --flows: write a PSN-over-time graph (SVG) per flow into this directory.
        #[arg(long, requires = "flows")]
        plot: Option<PathBuf>,
        /// Also write every RoCEv2 frame of an Ethernet capture into this directory, one file
        /// each (`<capture>-<n>.bin`): seed corpora for the fuzzers, inputs for replays.
        #[arg(long, value_name = "DIR")]
        extract: Option<PathBuf>,
    },
    /// Write a pcap with one sample frame of every RoCEv2 opcode (IPv4 and IPv6).
    GenPcap {
        /// Output file.
        file: PathBuf,
    },
    /// perftest's tests (ib_write_bw, ib_read_lat, ...) over uroce, with perftest's flags,
    /// exchange and output: the peer may be another `uroce perf` or stock perftest on rxe or a
    /// ConnectX. Without HOST this side is the server.
    Perf(perf_cmd::PerfArgs),
    /// ibv_rc_pingpong over uroce: same flags, exchange and output, so the stock tool can be
    /// the peer. Without HOST this side is the server.
    Pingpong(pingpong_cmd::PingpongArgs),
    /// Lumina-style conformance of a peer: a perftest run (write_lat or read_lat) to the peer's
    /// server with targeted faults on it — drop the k-th packet of the m-th message or a
    /// message's ACK, corrupt an ICRC, mark CE, duplicate, reorder — and a table of the peer's
    /// reactions (NAK and retransmission latency and extent, READ re-execution, CNPs, payload
    /// integrity) beside what IBTA requires.
    Probe(probe_cmd::ProbeArgs),
    /// Protocol fuzzing of a peer: a perftest run to the target's server with hostile frames
    /// mixed into one QP's live flow (opcode-sequence violations, PSN jumps, pad and length
    /// mismatches, wild RETHs, misaligned atomics, truncated and over-long frames, corrupt
    /// headers with good and bad ICRCs, other QPNs), aimed at the PSN the peer expects.
    Fuzz(Box<fuzz_cmd::FuzzArgs>),
    /// Run a `uroce fuzz --out DIR` record again (`--only` some of its hostile frames), or
    /// minimise it (`--minimise --check CMD`): delta debugging down to the frames that still
    /// reproduce the finding.
    Replay(fuzz_cmd::ReplayArgs),
    /// ReDMArk's attacks on an RC connection seen on the segment (a mirror port): invalid
    /// requests that kill the responder QP from a spoofed source, blind and on-path error NAKs
    /// at the requester; everything learned from the connection's own frames.
    Attack(attack_cmd::AttackArgs),
    /// Two uroce instances and a perftest run between them: as root over AF_XDP between two
    /// fresh network namespaces joined by veth; otherwise over kernel UDP on loopback.
    Demo(demo_cmd::DemoArgs),
    /// Simulations: the RC engine over a lossy network (soak), DCQCN's reaction point (dcqcn).
    #[command(subcommand)]
    Sim(SimCommand),
    /// Forward real frames between interfaces on AF_XDP through the simulator's switch model:
    /// an egress rate limit, a shared buffer, WRED/ECN marking, PFC PAUSE toward senders.
    Switch(switch_cmd::SwitchArgs),
    /// Measurement tools for the datapath benchmark (raw AF_XDP blaster, TCP ping-pong).
    #[command(subcommand)]
    Tool(tools::ToolCommand),
    /// Where uroce's drop-in libibverbs.so.1 is: prints `LD_LIBRARY_PATH=<dir>` for running
    /// unmodified verbs programs over uroce, e.g. `env $(uroce verbs) ibv_devinfo`.
    Verbs(verbs_cmd::VerbsArgs),
}

#[derive(Subcommand, Debug)]
enum SimCommand {
    /// Random work requests of every operation and size over Q QP pairs, every byte and every
    /// completion checked; prints `ops: N ok: N failed: N data_mismatch: N retransmits: N naks:
    /// N sim_time_ms: X` and exits non-zero on any failure or mismatch.
    Soak(sim_cmd::SoakArgs),
    /// One saturated flow's DCQCN reaction point with CNPs at given times: prints CSV
    /// `t_us,event,rc_gbps,rt_gbps,alpha`, one row per RP event (cnp, alpha_timer, rate_timer,
    /// byte_counter, decrease).
    Dcqcn(sim_dcqcn::DcqcnArgs),
    /// Flows joining a bottleneck at staggered times: Jain's index after each join, time to
    /// converge (datacenter simulator, the real engine on every host).
    Fairness(sim_scenario::ScenarioArgs),
    /// N:1 incast through leaf-spine, DCQCN off and on: queue, PFC pauses and where they go.
    Incast(sim_scenario::ScenarioArgs),
    /// Go-Back-N goodput against random loss, beside the model 1/(1 + p·W).
    Loss(sim_scenario::ScenarioArgs),
    /// A ring's cyclic buffer dependency under PFC: the deadlock, and the watchdog breaking it.
    Deadlock(sim_scenario::ScenarioArgs),
    /// A receiver stops draining: the pause storm, and the watchdog containing it.
    Storm(sim_scenario::ScenarioArgs),
    /// Leaf-spine with permutation or all-to-all traffic, DCQCN off and on.
    Fabric(sim_scenario::ScenarioArgs),
}

/// Parse arguments and run.
pub fn run() -> Result<std::process::ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Pcap { files, quiet, flows, plot, extract } => {
            if let Some(dir) = &extract {
                pcap_cmd::extract(&files, dir)?;
            }
            pcap_cmd::check(&files, quiet, flows, plot.as_deref())
        }
        Command::GenPcap { file } => pcap_cmd::generate(&file),
        Command::Sim(SimCommand::Soak(a)) => sim_cmd::soak(&a),
        Command::Sim(SimCommand::Dcqcn(a)) => sim_dcqcn::run(&a),
        Command::Sim(SimCommand::Fairness(a)) => sim_scenario::run("fairness", &a),
        Command::Sim(SimCommand::Incast(a)) => sim_scenario::run("incast", &a),
        Command::Sim(SimCommand::Loss(a)) => sim_scenario::run("loss", &a),
        Command::Sim(SimCommand::Deadlock(a)) => sim_scenario::run("deadlock", &a),
        Command::Sim(SimCommand::Storm(a)) => sim_scenario::run("storm", &a),
        Command::Sim(SimCommand::Fabric(a)) => sim_scenario::run("fabric", &a),
        Command::Tool(t) => tools::run(t),
        Command::Switch(a) => switch_cmd::run(&a),
        Command::Perf(a) => perf_cmd::run(&a),
        Command::Demo(a) => demo_cmd::run(&a),
        Command::Pingpong(a) => pingpong_cmd::run(&a),
        Command::Probe(a) => probe_cmd::run(&a),
        Command::Fuzz(a) => fuzz_cmd::run(&a),
        Command::Replay(a) => fuzz_cmd::replay(&a),
        Command::Attack(a) => attack_cmd::run(&a),
        Command::Verbs(a) => verbs_cmd::run(&a),
    }
}

/// Did `e` happen because a write found its pipe closed (`EPIPE`)?
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

/// Is standard output a pipe (or socket) whose reading end is closed, as after `uroce pcap x |
/// head`? `poll` reports `POLLERR` on a pipe without readers.
pub fn stdout_closed() -> bool {
    let mut p = libc::pollfd { fd: libc::STDOUT_FILENO, events: 0, revents: 0 };
    // SAFETY: one valid pollfd, timeout 0; poll only writes `revents`.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// What the command line does with a failed run: `None` when it should end quietly with
/// success (its standard output was closed by the reader, like `head`: other Unix tools end
/// silently there too), else the lines to print on stderr (the error, and a hint when one
/// helps, e.g. the kernel-UDP backend for a user without the privileges AF_XDP needs).
pub fn failure_lines(e: &anyhow::Error) -> Option<Vec<String>> {
    if is_broken_pipe(e) && stdout_closed() {
        return None;
    }
    let mut lines = vec![format!("{e:#}")];
    if e.chain().any(|c| uroce_io::xdp::NotPermitted::find(c).is_some()) {
        lines.push(
            "without those privileges use --backend udp: a kernel UDP socket on port 4791, same wire format".into(),
        );
    }
    Some(lines)
}
