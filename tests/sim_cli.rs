//! `uroce sim soak` end to end: the summary line, the exit status, the pcap option.

use std::process::Command;

fn uroce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_uroce"))
}

#[test]
fn soak_prints_one_summary_line_and_succeeds() {
    let out = uroce()
        .args(["sim", "soak", "--ops", "500", "--seed", "3", "--loss", "0.05", "--reorder", "0.02", "--dup", "0.02"])
        .args(["--corrupt", "0.01", "--mtu", "2048", "--qps", "3"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let f: Vec<&str> = lines[0].split_whitespace().collect();
    let keys: Vec<&str> = f.iter().step_by(2).copied().collect();
    assert_eq!(keys, ["ops:", "ok:", "failed:", "data_mismatch:", "retransmits:", "naks:", "sim_time_ms:"]);
    assert_eq!((f[1], f[3], f[5], f[7]), ("500", "500", "0", "0"));
    assert!(f[9].parse::<u64>().unwrap() > 0, "5 % loss must cause retransmissions");
    assert!(f[13].parse::<f64>().unwrap() > 0.0);
}

#[test]
fn soak_writes_a_clean_pcap() {
    let p = std::env::temp_dir().join(format!("uroce-soak-{}.pcap", std::process::id()));
    let out = uroce().args(["sim", "soak", "--ops", "50", "--ipv6", "--pcap", p.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success());
    let check = uroce().args(["pcap", "-q", p.to_str().unwrap()]).output().unwrap();
    assert!(check.status.success());
    let s = String::from_utf8(check.stdout).unwrap();
    let n: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(n > 50 && s.contains(&format!("roce: {n} icrc_ok: {n} icrc_bad: 0 undecodable: 0")), "{s}");
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn bad_arguments_are_errors() {
    let out = uroce().args(["sim", "soak", "--mtu", "1000"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--mtu must be"));
    let out = uroce().args(["sim", "soak", "--loss", "1.5"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// `uroce sim dcqcn`: the CSV the issue names, worked by hand for the paper's profile (α = 1 at
/// the first CNP, g = 1/256, T = K = 55 µs, RT = RC on each later CNP).
#[test]
fn dcqcn_prints_the_rp_events_as_csv() {
    let out = uroce()
        .args(["sim", "dcqcn", "--profile", "paper", "--line-rate", "40", "--mtu", "1000"])
        .args(["--cnp-at", "10,100", "--until", "160"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let want = "\
t_us,event,rc_gbps,rt_gbps,alpha
10.000,cnp,40.000000000,40.000000000,1.000000
10.000,decrease,20.000000000,40.000000000,1.000000
65.000,rate_timer,30.000000000,40.000000000,0.996094
65.000,alpha_timer,30.000000000,40.000000000,0.996094
100.000,cnp,30.000000000,40.000000000,0.996109
100.000,decrease,15.058593750,30.000000000,0.996109
155.000,rate_timer,22.529296875,30.000000000,0.992218
155.000,alpha_timer,22.529296875,30.000000000,0.992218
";
    assert_eq!(text, want);
    // ConnectX's knobs by name; a bad one is an error naming it.
    let out = uroce()
        .args(["sim", "dcqcn", "--set", "rpg_time_reset=10", "--set", "rpg_byte_reset=0", "--cnp-at", "0"])
        .args(["--until", "25"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let timers: Vec<&str> =
        text.lines().filter(|l| l.contains(",rate_timer,")).map(|l| l.split(',').next().unwrap()).collect();
    assert_eq!(timers, ["10.000", "20.000"]);
    assert!(!text.contains("byte_counter"));
    let out = uroce().args(["sim", "dcqcn", "--set", "rpg_fast=1", "--until", "1"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown DCQCN knob `rpg_fast`"));
}

/// `uroce sim SCENARIO --out DIR`: the summary on stdout and in DIR, with the CSV series and
/// the SVG plots; a bad setting is an error naming the known ones.
#[test]
fn a_scenario_writes_its_summary_series_and_plots() {
    let dir = std::env::temp_dir().join(format!("uroce-sim-incast-{}", std::process::id()));
    let out = uroce()
        .args(["sim", "incast", "--set", "n=4", "--set", "until_us=400", "--out", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("incast: N:1 at 100 Gbit/s"), "{text}");
    assert_eq!(std::fs::read_to_string(dir.join("summary.txt")).unwrap(), text);
    for f in ["incast.csv", "incast_n4_off.csv", "incast_n4_paper.csv", "incast_queue.svg", "incast_rates.svg"] {
        let body = std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(body.len() > 100, "{f}");
    }
    let csv = std::fs::read_to_string(dir.join("incast_n4_paper.csv")).unwrap();
    assert!(csv.starts_with("t_us,q0_kb,paused0,cnps,pauses,rate0_gbps,goodput0_gbps"), "{}", &csv[..80]);
    std::fs::remove_dir_all(&dir).unwrap();
    let out = uroce().args(["sim", "deadlock", "--set", "ring=3"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown setting `ring` (known: k, qps"));
}

/// The same seed gives the same files, byte for byte, through the command line; another seed
/// does not.
#[test]
fn a_scenario_run_twice_writes_identical_files() {
    let run = |tag: &str, seed: &str| {
        let dir = std::env::temp_dir().join(format!("uroce-sim-det-{tag}-{}", std::process::id()));
        let out = uroce()
            .args(["sim", "incast", "--set", "n=4", "--set", "until_us=400", "--set", seed])
            .args(["--out", dir.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
            .collect();
        files.sort();
        std::fs::remove_dir_all(&dir).unwrap();
        files
    };
    let (a, b, c) = (run("a", "seed=5"), run("b", "seed=5"), run("c", "seed=6"));
    assert!(a.len() >= 5, "{:?}", a.iter().map(|f| &f.0).collect::<Vec<_>>());
    assert_eq!(a, b, "the same seed, the same bytes");
    let csv = |v: &[(String, Vec<u8>)]| v.iter().find(|f| f.0 == "incast_n4_paper.csv").unwrap().1.clone();
    assert_ne!(csv(&a), csv(&c), "the seed matters");
}
