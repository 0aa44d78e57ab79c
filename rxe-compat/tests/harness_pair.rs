//! Two rxe guests of the same flavour on the lab bridge run `ib_write_bw` (RC, RoCEv2 over
//! IPv4-mapped GIDs, a few iterations) against each other: both sides exit 0 and the client
//! reports the requested size and iteration count. Also prints boot and run times.
//! Needs root + QEMU + built images; skips otherwise (fails under CI).

use std::time::{Duration, Instant};
use uroce_rxe_compat::harness::{perftest_pair, require_or_skip, Flavour, GuestImage, GuestSpec, Lab};

fn write_bw_pair(flavour: Flavour) {
    let test = format!("harness_pair::{flavour}");
    if !require_or_skip(&test, &[flavour], false) {
        return;
    }
    let image = GuestImage::locate(flavour).expect("checked above");
    let lab = Lab::new(&test).expect("lab");
    let t0 = Instant::now();
    let spec = |name: &str, ip: &str| {
        GuestSpec::new(flavour).name(name).addr(&format!("{ip}/24")).hold().timeout(Duration::from_secs(240))
    };
    let srv = lab.boot(spec("srv", "10.77.0.11")).expect("boot server");
    let cli = lab.boot(spec("cli", "10.77.0.12")).expect("boot client");
    let bs = srv.wait_ready(Duration::from_secs(150)).unwrap_or_else(|e| panic!("{e}"));
    let bc = cli.wait_ready(Duration::from_secs(150)).unwrap_or_else(|e| panic!("{e}"));
    let booted = t0.elapsed();
    let (n, size) = (20, 3000);
    let gid = srv.gid_index("10.77.0.11".parse().unwrap()).expect("IPv4 GID");
    let cmd = format!("ib_write_bw -d rxe0 -x {gid} -F --report_gbits -n {n} -s {size}");
    let run = perftest_pair(&srv, &cli, "10.77.0.11", &cmd, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    assert!(run.ok(), "perftest failed: {run:#?}");
    let res = run.client_results().unwrap_or_else(|| panic!("no result row:\n{}", run.client_out));
    assert_eq!(res[0], f64::from(size), "{}", run.client_out);
    assert_eq!(res[1], f64::from(n), "{}", run.client_out);
    eprintln!(
        "{}: boot to ROCE-READY server {:.2} s / client {:.2} s (in parallel, {:.2} s wall); \
         ib_write_bw -n {n} -s {size}: {:.2} s, BW avg {} Gbit/s",
        image.describe(),
        bs.as_secs_f64(),
        bc.as_secs_f64(),
        booted.as_secs_f64(),
        run.elapsed.as_secs_f64(),
        res.get(3).map_or("?".into(), |v| v.to_string())
    );
}

#[test]
fn bookworm_pair_ib_write_bw() {
    write_bw_pair(Flavour::Bookworm);
}

#[test]
fn trixie_pair_ib_write_bw() {
    write_bw_pair(Flavour::Trixie);
}
