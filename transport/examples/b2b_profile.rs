//! Drive two engines back to back for profiling (`valgrind --tool=callgrind`, `perf`):
//! `cargo run --release -p uroce-transport --example b2b_profile -- write1m|write64|send64 [N]`.
use uroce_transport::sim::b2b::BackToBack;
use uroce_transport::*;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let what = args.get(1).map_or("write1m", |s| s.as_str());
    let n: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100);
    let (mtu, size, op) = match what {
        "write1m" => (Mtu::Mtu4096, 1 << 20, WrOpcode::RdmaWrite),
        "write64" => (Mtu::Mtu1024, 64, WrOpcode::RdmaWrite),
        "send64" => (Mtu::Mtu1024, 64, WrOpcode::Send),
        other => panic!("unknown workload {other}"),
    };
    let mut b = BackToBack::new(mtu, size);
    b.run(op, size, n / 10 + 1, 64, 16);
    let mut best = f64::MAX;
    for _ in 0..7 {
        let (f0, t) = (b.frames, std::time::Instant::now());
        b.run(op, size, n, 64, 16);
        best = best.min(t.elapsed().as_nanos() as f64 / n as f64);
        let _ = f0;
    }
    println!(
        "{what}: {n} msgs x 7, best {best:.1} ns/msg ({:.1} ns/frame); ICRC kernels: {}",
        best * n as f64 / (b.frames as f64 / (7.0 + 1.1)),
        uroce_wire::icrc::kernels()
    );
}
