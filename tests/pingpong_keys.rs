//! Key material of `uroce pingpong` processes (issue 12, point 2), through the built binary, over
//! the kernel-UDP backend on loopback (no root needed).
//!
//! Without `--seed`, each process draws its seed from the operating system: processes started
//! at the same moment (same second, same pid namespace) print unrelated QPNs and PSNs. With the
//! same `--seed` they print the same ones, which shows the test looks at values that come from
//! the seed (and can fail).
//!
//! A server prints rc_pingpong's `  local address:  LID 0x0000, QPN 0x......, PSN 0x......, GID
//! ...` once it listens; the test reads that line and kills the server (no client needed).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_uroce");

/// A server process, killed on drop.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A TCP port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("[::]:0").or_else(|_| TcpListener::bind("127.0.0.1:0")).unwrap().local_addr().unwrap().port()
}

/// Starts a server on 127.0.0.`host` and returns it with a receiver of its `local address` line.
fn start(host: u8, seed: Option<u64>) -> (Server, mpsc::Receiver<String>) {
    let (ip, port) = (format!("127.0.0.{host}"), free_port().to_string());
    let mut args = vec!["pingpong", "--backend", "udp", "--local-ip", &ip, "-p", &port];
    let seed = seed.map(|s| s.to_string());
    if let Some(s) = &seed {
        args.extend(["--seed", s.as_str()]);
    }
    let mut child = Command::new(BIN)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn uroce pingpong");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.starts_with("  local address:") {
                let _ = tx.send(line);
                return;
            }
        }
    });
    (Server(child), rx)
}

/// (QPN, PSN) of a `local address` line.
fn qpn_psn(line: &str) -> (u32, u32) {
    let hex = |key: &str| {
        let i = line.find(key).unwrap_or_else(|| panic!("no {key} in {line:?}")) + key.len();
        let h: String = line[i..].chars().take_while(|c| c.is_ascii_hexdigit()).collect();
        u32::from_str_radix(&h, 16).unwrap_or_else(|e| panic!("{key} in {line:?}: {e}"))
    };
    (hex("QPN 0x"), hex("PSN 0x"))
}

/// Starts one server per entry of `seeds` at once and returns their (QPN, PSN) and how far
/// apart the starts were.
fn run_at_once(seeds: &[Option<u64>]) -> (Vec<(u32, u32)>, Duration) {
    let t0 = Instant::now();
    let servers: Vec<_> = seeds.iter().enumerate().map(|(i, s)| start(10 + i as u8, *s)).collect();
    let spread = t0.elapsed();
    let got = servers
        .iter()
        .map(|(_, rx)| qpn_psn(&rx.recv_timeout(Duration::from_secs(30)).expect("a server's local address line")))
        .collect();
    (got, spread)
}

#[test]
fn processes_started_together_get_unrelated_keys_unless_seeded_alike() {
    // Four processes in the same instant, no --seed: four different QPNs and four different PSNs
    // (24 bits each from 64 bits of OS entropy: a collision has odds of about 2^-21).
    let (got, spread) = run_at_once(&[None; 4]);
    assert!(spread < Duration::from_secs(1), "the processes started {spread:?} apart");
    for i in 0..got.len() {
        for j in i + 1..got.len() {
            assert_ne!(got[i].0, got[j].0, "QPNs of two unseeded processes: {got:x?}");
            assert_ne!(got[i].1, got[j].1, "PSNs of two unseeded processes: {got:x?}");
        }
    }
    // The same --seed: the same QPN and PSN (the values printed do come from the seed).
    let (same, _) = run_at_once(&[Some(0x5eed), Some(0x5eed)]);
    assert_eq!(same[0], same[1], "two processes with --seed 0x5eed");
    // And another seed, other values.
    let (other, _) = run_at_once(&[Some(0x5eee)]);
    assert_ne!(other[0].0, same[0].0);
}
