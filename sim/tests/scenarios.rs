//! The scenarios at small sizes: their summary tables held as snapshots
//! (`sim/tests/snapshots/NAME.txt`; `UPDATE_SNAPSHOTS=1` rewrites them after a deliberate
//! change), the behaviour each exists to show asserted on the numbers, and determinism: the
//! same seed gives byte-identical CSV.

use std::path::PathBuf;
use uroce_sim::scenario::{run, Report, Settings, Table};

fn scenario(name: &str, set: &[&str]) -> Report {
    run(name, &Settings::parse(set).unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn snapshot(name: &str, r: &Report) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots").join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &r.summary).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_SNAPSHOTS=1 writes it)", path.display()));
    assert_eq!(r.summary, want, "{name}: the summary changed (UPDATE_SNAPSHOTS=1 if deliberate)");
}

/// Column `col` of row `row` as a number.
fn cell(t: &Table, row: usize, col: &str) -> f64 {
    let i = t.header.iter().position(|h| h == col).unwrap_or_else(|| panic!("no column {col}"));
    t.rows[row][i].parse().unwrap_or(f64::NAN)
}

#[test]
fn incast_dcqcn_keeps_the_queue_below_kmax_and_stops_pauses() {
    let r = scenario("incast", &["n=16,32", "until_us=4000"]);
    snapshot("incast", &r);
    let t = &r.tables[0];
    for row in 0..t.rows.len() {
        let dcqcn = t.rows[row][1] != "off";
        if dcqcn {
            assert!(cell(t, row, "max_queue_kb") < cell(t, row, "kmax_kb"), "{}", t.text());
            assert_eq!(cell(t, row, "pauses_after"), 0.0, "{}", t.text());
        } else {
            assert!(cell(t, row, "pauses_after") > 0.0, "without DCQCN PFC keeps pausing: {}", t.text());
            assert!(t.rows[row][7].contains("leaf"), "the pauses reach the senders' leaves: {}", t.text());
        }
        assert_eq!(cell(t, row, "drops"), 0.0);
    }
    assert_eq!(r.plots.len(), 2);
}

#[test]
fn fairness_converges_after_each_join() {
    let r = scenario("fairness", &["flows=3", "join_us=1500"]);
    snapshot("fairness", &r);
    let t = &r.tables[0];
    for row in 0..3 {
        assert!(cell(t, row, "jain") > 0.9, "{}", t.text());
        assert!(cell(t, row, "total_gbps") > 80.0, "{}", t.text());
        assert!(cell(t, row, "converge_us") < 1500.0, "converged within the phase: {}", t.text());
    }
}

#[test]
fn deadlock_freezes_and_the_watchdog_breaks_it() {
    let r = scenario("deadlock", &["until_us=2000"]);
    snapshot("deadlock", &r);
    let t = &r.tables[0];
    assert!(cell(t, 0, "deadlocked_at_us") >= 0.0 && t.rows[0][2] == "-", "frozen for good without: {}", t.text());
    assert_eq!(cell(t, 0, "goodput_gbps_last_quarter"), 0.0);
    assert!(cell(t, 1, "recovered_at_us") > 0.0 && cell(t, 1, "goodput_gbps_last_quarter") > 10.0, "{}", t.text());
    assert!(cell(t, 1, "frames_dropped") > 0.0);
}

#[test]
fn storm_spreads_and_the_watchdog_contains_it() {
    let r = scenario("storm", &[]);
    snapshot("storm", &r);
    let t = &r.tables[0];
    assert!(cell(t, 0, "victim_before_gbps") > 20.0);
    assert_eq!(cell(t, 0, "victim_after_gbps"), 0.0, "the victim stops: {}", t.text());
    assert!(cell(t, 0, "pauses_to_senders") > 0.0);
    assert!(cell(t, 1, "victim_after_gbps") > 20.0, "contained: {}", t.text());
}

#[test]
fn loss_follows_the_model_and_the_cliff_is_the_timeouts() {
    let r = scenario(
        "loss",
        &["rates_gbps=100", "rtts_us=8", "losses=0,0.001,0.01", "until_us=3000", "cliff_timeouts=8,14"],
    );
    snapshot("loss", &r);
    let t = &r.tables[0];
    for row in 0..3 {
        let m = cell(t, row, "measured/model");
        assert!((0.9..=1.02).contains(&m), "{}", t.text());
    }
    assert!(cell(t, 2, "goodput_gbps") < cell(t, 1, "goodput_gbps"));
    // The cliff: with a 1 ms timeout the lost NAKs and tails are recovered (timeouts fire);
    // perftest's 67 ms outlasts the run, which stalls at its first one.
    let c = &r.tables[1];
    assert!(cell(c, 0, "timeouts") > 0.0, "{}", c.text());
    assert_eq!(cell(c, 1, "timeouts"), 0.0, "{}", c.text());
    assert!(cell(c, 1, "longest_stall_us") > 1000.0, "{}", c.text());
    assert!(cell(c, 0, "goodput_gbps") > 2.0 * cell(c, 1, "goodput_gbps"), "{}", c.text());
    let names: Vec<&str> = r.plots.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(names, ["loss.svg", "loss_cliff.svg"]);
    assert!(r.plots.iter().all(|p| p.1.contains("<polyline")));
}

#[test]
fn fabric_permutation_with_and_without_dcqcn() {
    let r = scenario("fabric", &["leaves=2", "per_leaf=4", "spines=2", "until_us=1000"]);
    snapshot("fabric", &r);
    assert_eq!(r.tables[0].rows.len(), 2);
    assert!(cell(&r.tables[0], 0, "mean_gbps") > 10.0);
    assert_eq!(r.plots.len(), 1);
    assert!(r.plots[0].1.contains("DCQCN off") && r.plots[0].1.contains("DCQCN paper"));
}

/// The default fabric: 128 hosts on 8 leaves and 4 spines, every one of them moving data.
#[test]
fn a_leaf_spine_of_128_hosts_moves_every_flow() {
    let r = scenario("fabric", &["until_us=400"]);
    let t = &r.tables[0];
    assert!(t.title.starts_with("fabric: 8 leaves × 16 hosts, 4 spines, permutation (128 flows)"), "{}", t.title);
    for row in 0..2 {
        assert!(cell(t, row, "min_gbps") > 0.0, "every flow moved: {}", t.text());
        assert_eq!(cell(t, row, "drops"), 0.0, "{}", t.text());
    }
}

#[test]
fn the_same_seed_gives_the_same_bytes() {
    let a = scenario("incast", &["n=4", "until_us=600", "seed=9"]);
    let b = scenario("incast", &["n=4", "until_us=600", "seed=9"]);
    assert_eq!(a.csv, b.csv);
    assert_eq!(a.plots, b.plots);
    let c = scenario("incast", &["n=4", "until_us=600", "seed=10"]);
    assert_ne!(a.csv, c.csv, "the seed matters");
}

#[test]
fn bad_settings_are_typed_errors() {
    let e = run("incast", &Settings::parse(&["nn=3"]).unwrap()).unwrap_err().to_string();
    assert!(e.starts_with("unknown setting `nn` (known: n, rate_gbps"), "{e}");
    let e = run("incast", &Settings::parse(&["n=1"]).unwrap()).unwrap_err().to_string();
    assert_eq!(e, "bad value `1` for `n`: numbers in range, comma-separated");
    assert!(run("mesh", &Settings::default()).is_err());
    assert!(Settings::parse(&["n"]).is_err());
}
