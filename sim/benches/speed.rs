//! The simulator's speed, the engine included: a 16:1 incast at 100 Gbit/s (one switch,
//! DCQCN with the paper's profile, PFC) for 10 ms of simulated time; prints the wall time
//! (target: under 10 s here) and the simulated events per wall second (target ≥ 5 M/s on one
//! core). Every event is a frame's arrival or departure, an engine timer, a PFC refresh or a
//! sample; a timer event that finds its deadline moved later is not counted (printed apart).
//!
//! `cargo bench -p uroce-sim --bench speed` (`-- MS RUNS`, default 10 ms, 3 runs)

use core::time::Duration;
use std::time::Instant as Wall;
use uroce_sim::fabric::{FlowSpec, LinkSpec};
use uroce_sim::scenario::hosts;
use uroce_sim::switch::SwitchConfig;
use uroce_sim::topology::incast;
use uroce_transport::Instant;

fn main() {
    let nums: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let ms = nums.first().copied().unwrap_or(10).max(1);
    let runs = nums.get(1).copied().unwrap_or(3).max(1);
    let bps = 100_000_000_000;
    println!("16:1 incast, 100 Gbit/s, DCQCN (paper), PFC, {ms} ms simulated");
    for run in 0..runs {
        let link = LinkSpec::new(bps, Duration::from_micros(1));
        let t = incast(run + 1, 16, hosts(Some("paper"), bps), SwitchConfig::default(), link);
        let mut f = t.fabric;
        for s in 0..16 {
            f.add_flow(FlowSpec { src: s, dst: 16, bytes: None, start: Duration::ZERO, msg: 64 << 10, window: 2 })
                .unwrap();
        }
        let w = Wall::now();
        let events = f.run_until(Instant::from_nanos(ms * 1_000_000));
        let secs = w.elapsed().as_secs_f64();
        let bytes: u64 = f.flows().iter().map(|x| x.bytes_done()).sum();
        let frames = f.switch(t.watch[0].0).stats().forwarded;
        println!(
            "  run {run}: {secs:.2} s wall, {events} events = {:.2} M events/s ({} stale timers), {frames} frames through the switch ({:.2} M/s), goodput {:.1} Gbit/s simulated",
            events as f64 / secs / 1e6,
            f.stale_timers,
            frames as f64 / secs / 1e6,
            bytes as f64 * 8.0 / (ms as f64 / 1e3) / 1e9
        );
    }
}
