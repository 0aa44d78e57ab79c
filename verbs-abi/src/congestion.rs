//! Congestion control and fault injection for a verbs program, from its environment: what
//! `uroce perf --ecn --dcqcn ...` sets by flags, a program over the library sets by
//! variables (read once, when the device's engine starts):
//!
//! | variable | what | default |
//! |---|---|---|
//! | `UROCE_ECN=1` | send ECT(0) frames and answer CE-marked data with CNPs (the notification point) | off, as rxe |
//! | `UROCE_DCQCN=connectx\|paper` | DCQCN's reaction point with that profile; implies `UROCE_ECN` | off |
//! | `UROCE_DCQCN_SET=KNOB=V,...` | DCQCN knobs by ConnectX's names (`rpg_time_reset=55,rpg_ai_rate=10`) | the profile's |
//! | `UROCE_LINE_RATE=GBPS` | the rate DCQCN starts from and returns to | the interface's speed, else 100 |
//! | `UROCE_MIN_TIME_BETWEEN_CNPS=US` | at most one CNP per QP in this many µs | 2 |
//! | `UROCE_CNP_DSCP`, `UROCE_CNP_802P_PRIO` | the CNPs' DSCP and VLAN priority | 48, 6 |
//! | `UROCE_INJECT=ce=0.01,drop=0.001,seed=7` | faults on received frames (`uroce_io::inject`) | none |
//!
//! The settings are read by [`CongestionConfig::from_settings`], the rule `uroce perf` uses
//! too. A value that does not parse stops the engine from starting with a message naming the
//! variable (the verbs call that needed it fails with `EINVAL`), rather than running with a
//! setting the user did not ask for.

use core::time::Duration;
use uroce_io::inject::FaultConfig;
use uroce_transport::cc::{CongestionConfig, NpConfig};

/// The settings, or the first one that is wrong: `Err("VARIABLE: why")`. `get` reads a
/// variable (the process environment; a map in tests); `speed_mbps` is the interface's link
/// speed when the kernel knows it.
pub fn from_env(
    get: &dyn Fn(&str) -> Option<String>,
    speed_mbps: Option<u64>,
) -> Result<(CongestionConfig, Option<FaultConfig>), String> {
    fn num<T: core::str::FromStr + PartialOrd>(
        get: &dyn Fn(&str) -> Option<String>,
        var: &str,
        default: T,
        range: core::ops::RangeInclusive<T>,
    ) -> Result<T, String> {
        match get(var) {
            None => Ok(default),
            Some(v) => match v.trim().parse::<T>() {
                Ok(x) if range.contains(&x) => Ok(x),
                _ => Err(format!("{var}: `{v}` is not a number in range")),
            },
        }
    }
    let ecn = match get("UROCE_ECN").as_deref().map(str::trim) {
        None | Some("" | "0" | "off" | "no") => false,
        Some("1" | "on" | "yes") => true,
        Some(v) => return Err(format!("UROCE_ECN: `{v}` is not 1 or 0")),
    };
    let dcqcn = get("UROCE_DCQCN").map(|p| p.trim().to_string());
    let knobs: Vec<String> = get("UROCE_DCQCN_SET")
        .map(|s| s.split(',').map(str::trim).filter(|k| !k.is_empty()).map(String::from).collect())
        .unwrap_or_default();
    if dcqcn.is_none() && !knobs.is_empty() {
        return Err("UROCE_DCQCN_SET: set UROCE_DCQCN=connectx|paper too".into());
    }
    let default_gbps = speed_mbps.filter(|&s| s > 0).map_or(100.0, |s| s as f64 / 1000.0);
    let gbps = num(get, "UROCE_LINE_RATE", default_gbps, 0.001..=100_000.0)?;
    let np = NpConfig {
        min_time_between_cnps: Duration::from_micros(num(get, "UROCE_MIN_TIME_BETWEEN_CNPS", 2u64, 0..=1_000_000)?),
        cnp_dscp: num(get, "UROCE_CNP_DSCP", NpConfig::default().cnp_dscp, 0..=63)?,
        cnp_802p_prio: num(get, "UROCE_CNP_802P_PRIO", NpConfig::default().cnp_802p_prio, 0..=7)?,
    };
    let line = (gbps * 1e9).round() as u64;
    let cc = CongestionConfig::from_settings(ecn, dcqcn.as_deref(), line, &knobs, np).map_err(|e| {
        format!(
            "{}: {e}",
            if matches!(e, uroce_transport::cc::dcqcn::ParamError::UnknownProfile(_)) {
                "UROCE_DCQCN"
            } else {
                "UROCE_DCQCN_SET"
            }
        )
    })?;
    let inject = match get("UROCE_INJECT") {
        None => None,
        Some(v) => Some(v.parse::<FaultConfig>().map_err(|e| format!("UROCE_INJECT: {e}"))?),
    };
    Ok((cc, inject))
}

/// The kernel's link speed of `iface` in Mbit/s (`/sys/class/net/IF/speed`), when it knows one.
pub fn link_speed_mbps(iface: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{iface}/speed")).ok()?;
    s.trim().parse::<i64>().ok().filter(|&x| x > 0).map(|x| x as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use uroce_transport::cc::dcqcn::Params;
    use uroce_transport::cc::Algorithm;

    fn read(vars: &[(&str, &str)], speed: Option<u64>) -> Result<(CongestionConfig, Option<FaultConfig>), String> {
        let m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        from_env(&|k| m.get(k).cloned(), speed)
    }

    #[test]
    fn nothing_set_is_rxe_off() {
        let (cc, inject) = read(&[], Some(25_000)).unwrap();
        assert_eq!(cc, CongestionConfig::default());
        assert!(inject.is_none());
    }

    #[test]
    fn ecn_alone_is_the_notification_point() {
        let (cc, _) = read(&[("UROCE_ECN", "1"), ("UROCE_MIN_TIME_BETWEEN_CNPS", "50")], None).unwrap();
        let np = NpConfig { min_time_between_cnps: Duration::from_micros(50), ..NpConfig::default() };
        assert_eq!(cc, CongestionConfig { ecn: true, np: Some(np), rp: None });
    }

    #[test]
    fn dcqcn_takes_the_links_speed_its_knobs_and_implies_ecn() {
        let vars = [
            ("UROCE_DCQCN", "paper"),
            ("UROCE_DCQCN_SET", "rpg_time_reset=300, rpg_ai_rate=10"),
            ("UROCE_CNP_DSCP", "26"),
            ("UROCE_CNP_802P_PRIO", "3"),
        ];
        let (cc, _) = read(&vars, Some(25_000)).unwrap();
        let mut p = Params::profile("paper", 25_000_000_000).unwrap();
        p.set_assignment("rpg_time_reset=300").unwrap();
        p.set_assignment("rpg_ai_rate=10").unwrap();
        let np = NpConfig { cnp_dscp: 26, cnp_802p_prio: 3, ..NpConfig::default() };
        assert_eq!(cc, CongestionConfig { ecn: true, np: Some(np), rp: Some(Algorithm::Dcqcn(p)) });
        // no known speed (veth): 100 Gbit/s, or what UROCE_LINE_RATE says
        let (cc, _) = read(&[("UROCE_DCQCN", "connectx")], None).unwrap();
        assert_eq!(cc.rp, Some(Algorithm::Dcqcn(Params::connectx(100_000_000_000))));
        let (cc, _) = read(&[("UROCE_DCQCN", "connectx"), ("UROCE_LINE_RATE", "40")], Some(25_000)).unwrap();
        assert_eq!(cc.rp, Some(Algorithm::Dcqcn(Params::connectx(40_000_000_000))));
    }

    #[test]
    fn faults_parse_as_uroce_perfs_inject() {
        let (_, inject) = read(&[("UROCE_INJECT", "ce=0.25,seed=7")], None).unwrap();
        assert_eq!(inject, Some("ce=0.25,seed=7".parse().unwrap()));
    }

    #[test]
    fn a_wrong_value_names_its_variable() {
        let cases: [(&[(&str, &str)], &str); 7] = [
            (&[("UROCE_ECN", "maybe")], "UROCE_ECN: `maybe` is not 1 or 0"),
            (&[("UROCE_DCQCN", "hpcc")], "UROCE_DCQCN: unknown DCQCN profile `hpcc`"),
            (&[("UROCE_DCQCN", "paper"), ("UROCE_DCQCN_SET", "rpg_nope=1")], "UROCE_DCQCN_SET: unknown DCQCN knob"),
            (&[("UROCE_DCQCN_SET", "rpg_ai_rate=1")], "UROCE_DCQCN_SET: set UROCE_DCQCN"),
            (&[("UROCE_CNP_DSCP", "64")], "UROCE_CNP_DSCP: `64` is not a number in range"),
            (&[("UROCE_LINE_RATE", "-1")], "UROCE_LINE_RATE: `-1`"),
            (&[("UROCE_INJECT", "ce=2")], "UROCE_INJECT: "),
        ];
        for (vars, want) in cases {
            let e = read(vars, None).unwrap_err();
            assert!(e.starts_with(want), "{vars:?}: {e}");
        }
    }
}
