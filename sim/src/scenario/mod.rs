//! Scenarios: what `uroce sim SCENARIO [--set key=value ...] --out DIR` runs. Each builds a
//! topology, runs the real engine on it, and returns a [`Report`]: a one-screen summary (its
//! tables are what the snapshot tests hold), CSV time series and SVG plots.
//!
//! | scenario | what it shows |
//! |---|---|
//! | [`fairness`] | flows joining a bottleneck at staggered times: Jain's index after each join, time to converge |
//! | [`incast`] | N:1 through two tiers: with DCQCN the queue stays below Kmax and pauses stop; without, pauses spread upstream |
//! | [`loss`] | Go-Back-N goodput against random loss, beside `1/(1 + p·W)`, and the timeout cliff |
//! | [`deadlock`] | a ring's cyclic buffer dependency freezes under PFC; the watchdog breaks it |
//! | [`storm`] | a receiver stops draining, pauses spread, the watchdog contains them |
//! | [`fabric`] | leaf-spine, permutation or all-to-all traffic, DCQCN on and off |

pub mod deadlock;
pub mod fabric;
pub mod fairness;
pub mod incast;
pub mod loss;
pub mod storm;

use crate::fabric::{Fabric, HostConfig};
use core::fmt::Write as _;
use core::time::Duration;
use std::collections::BTreeMap;
use uroce_transport::cc::dcqcn::Params;
use uroce_transport::cc::{Algorithm, CongestionConfig, NpConfig};

/// Every scenario's name.
pub const NAMES: [&str; 6] = ["fairness", "incast", "loss", "deadlock", "storm", "fabric"];

/// What a scenario produced.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The one-screen summary.
    pub summary: String,
    /// Its tables.
    pub tables: Vec<Table>,
    /// CSV files: (name, contents).
    pub csv: Vec<(String, String)>,
    /// SVG plots: (name, contents).
    pub plots: Vec<(String, String)>,
}

/// A table: a title, a header and rows, printed aligned and written as CSV.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    /// Title.
    pub title: String,
    /// Column names.
    pub header: Vec<String>,
    /// Rows.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with columns `header`.
    pub fn new(title: &str, header: &[&str]) -> Table {
        Table { title: title.into(), header: header.iter().map(|s| s.to_string()).collect(), rows: Vec::new() }
    }

    /// Add a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Aligned text.
    pub fn text(&self) -> String {
        let n = self.header.len();
        let mut w: Vec<usize> = self.header.iter().map(|h| h.len()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate().take(n) {
                let pad = w[i] - c.chars().count();
                if i > 0 {
                    s.push_str("  ");
                }
                s.push_str(c);
                s.extend(core::iter::repeat_n(' ', pad));
            }
            s.trim_end().to_string()
        };
        let mut out = format!("{}\n{}\n", self.title, line(&self.header));
        for r in &self.rows {
            out += &line(r);
            out.push('\n');
        }
        out
    }

    /// CSV.
    pub fn csv(&self) -> String {
        let mut out = self.header.join(",");
        out.push('\n');
        for r in &self.rows {
            out += &r.join(",");
            out.push('\n');
        }
        out
    }
}

impl Report {
    /// Add a table to the summary (and as `NAME.csv`).
    pub fn table(&mut self, name: &str, t: Table) {
        self.summary += &t.text();
        self.summary.push('\n');
        self.csv.push((format!("{name}.csv"), t.csv()));
        self.tables.push(t);
    }
}

/// A scenario's settings (`--set key=value`), checked against the keys it knows.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    given: BTreeMap<String, String>,
}

/// A setting that could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SettingError {
    /// Not `key=value`.
    NotAnAssignment(String),
    /// A key the scenario does not know.
    UnknownKey {
        /// The key.
        key: String,
        /// The keys it knows.
        known: Vec<&'static str>,
    },
    /// A value that does not parse or is out of range.
    BadValue {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// What it must be.
        want: &'static str,
    },
    /// No such scenario.
    UnknownScenario(String),
}

impl core::fmt::Display for SettingError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SettingError::NotAnAssignment(s) => write!(f, "`{s}` is not key=value"),
            SettingError::UnknownKey { key, known } => {
                write!(f, "unknown setting `{key}` (known: {})", known.join(", "))
            }
            SettingError::BadValue { key, value, want } => write!(f, "bad value `{value}` for `{key}`: {want}"),
            SettingError::UnknownScenario(s) => write!(f, "unknown scenario `{s}` (known: {})", NAMES.join(", ")),
        }
    }
}

impl std::error::Error for SettingError {}

impl Settings {
    /// From `key=value` strings.
    pub fn parse<S: AsRef<str>>(kvs: &[S]) -> Result<Settings, SettingError> {
        let mut given = BTreeMap::new();
        for kv in kvs {
            let kv = kv.as_ref();
            let (k, v) = kv.split_once('=').ok_or_else(|| SettingError::NotAnAssignment(kv.into()))?;
            given.insert(k.trim().to_string(), v.trim().to_string());
        }
        Ok(Settings { given })
    }

    /// Fail on keys not in `known`.
    pub fn only(&self, known: &[&'static str]) -> Result<(), SettingError> {
        match self.given.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(SettingError::UnknownKey { key: k.clone(), known: known.to_vec() }),
            None => Ok(()),
        }
    }

    fn raw(&self, key: &str) -> Option<&str> {
        self.given.get(key).map(String::as_str)
    }

    fn bad(key: &str, v: &str, want: &'static str) -> SettingError {
        SettingError::BadValue { key: key.into(), value: v.into(), want }
    }

    /// An integer in `lo..=hi`.
    pub fn int(&self, key: &str, default: u64, lo: u64, hi: u64) -> Result<u64, SettingError> {
        match self.raw(key) {
            None => Ok(default),
            Some(v) => {
                v.parse().ok().filter(|x| (lo..=hi).contains(x)).ok_or_else(|| Self::bad(key, v, "an integer in range"))
            }
        }
    }

    /// A number in `lo..=hi`.
    pub fn num(&self, key: &str, default: f64, lo: f64, hi: f64) -> Result<f64, SettingError> {
        match self.raw(key) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .ok()
                .filter(|x: &f64| (lo..=hi).contains(x))
                .ok_or_else(|| Self::bad(key, v, "a number in range")),
        }
    }

    /// A comma-separated list of numbers in `lo..=hi`.
    pub fn nums(&self, key: &str, default: &[f64], lo: f64, hi: f64) -> Result<Vec<f64>, SettingError> {
        match self.raw(key) {
            None => Ok(default.to_vec()),
            Some(v) => v
                .split(',')
                .map(|x| x.trim().parse().ok().filter(|x: &f64| (lo..=hi).contains(x)))
                .collect::<Option<Vec<f64>>>()
                .filter(|l| !l.is_empty())
                .ok_or_else(|| Self::bad(key, v, "numbers in range, comma-separated")),
        }
    }

    /// One of `choices`.
    pub fn choice(
        &self,
        key: &str,
        default: &'static str,
        choices: &[&'static str],
    ) -> Result<&'static str, SettingError> {
        match self.raw(key) {
            None => Ok(default),
            Some(v) => {
                choices.iter().find(|c| **c == v).copied().ok_or_else(|| Self::bad(key, v, "one of the choices"))
            }
        }
    }
}

/// Run scenario `name`.
pub fn run(name: &str, s: &Settings) -> Result<Report, SettingError> {
    match name {
        "fairness" => fairness::run(s),
        "incast" => incast::run(s),
        "loss" => loss::run(s),
        "deadlock" => deadlock::run(s),
        "storm" => storm::run(s),
        "fabric" => fabric::run(s),
        _ => Err(SettingError::UnknownScenario(name.into())),
    }
}

/// The host configuration: RoCE in priority 3 (DSCP 26), DCQCN with `profile` or none.
pub fn hosts(dcqcn: Option<&str>, line_bps: u64) -> HostConfig {
    let cc = match dcqcn {
        None => CongestionConfig::default(),
        Some(p) => {
            let params = Params::profile(p, line_bps).expect("a known profile");
            // The NP's spacing: the paper's N = 50 µs with its profile, ConnectX's default
            // otherwise.
            let gap = if p == "paper" { 50 } else { 2 };
            CongestionConfig {
                ecn: true,
                np: Some(NpConfig { min_time_between_cnps: Duration::from_micros(gap), ..NpConfig::default() }),
                rp: Some(Algorithm::Dcqcn(params)),
            }
        }
    };
    HostConfig { cc, ..HostConfig::default() }
}

/// Jain's fairness index of `x`: `(Σx)² / (n·Σx²)` (1 when equal; 1/n when one has all).
pub fn jain(x: &[f64]) -> f64 {
    let (s, s2) = x.iter().fold((0.0, 0.0), |(a, b), v| (a + v, b + v * v));
    if x.is_empty() || s2 == 0.0 {
        return 1.0;
    }
    s * s / (x.len() as f64 * s2)
}

/// The `q`-quantile of `v` (nearest rank; `v` sorted in place).
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1]
}

/// Per-sample CSV of a fabric's samples: time, each watched port's queue (KB) and pause
/// state, CNPs and pauses so far, and each flow's rate and goodput (Gbit/s).
pub fn samples_csv(f: &Fabric) -> String {
    let s = f.samples();
    let mut out = String::from("t_us");
    let (np, nf) = s.first().map_or((0, 0), |x| (x.ports.len(), x.flows.len()));
    for p in 0..np {
        let _ = write!(out, ",q{p}_kb,paused{p}");
    }
    out += ",cnps,pauses";
    for i in 0..nf {
        let _ = write!(out, ",rate{i}_gbps,goodput{i}_gbps");
    }
    out.push('\n');
    for x in s {
        let _ = write!(out, "{:.1}", x.t.as_nanos() as f64 / 1e3);
        for &(q, p) in &x.ports {
            let _ = write!(out, ",{:.1},{}", q as f64 / 1e3, p as u8);
        }
        let _ = write!(out, ",{},{}", x.cnps, x.pauses);
        for &(r, g) in &x.flows {
            let _ = write!(out, ",{r:.3},{g:.3}");
        }
        out.push('\n');
    }
    out
}

/// `v` with 1 decimal.
pub fn f1(v: f64) -> String {
    format!("{v:.1}")
}

/// `v` with 3 decimals.
pub fn f3(v: f64) -> String {
    format!("{v:.3}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_quantile_settings_and_tables() {
        assert_eq!(jain(&[1.0, 1.0, 1.0]), 1.0);
        assert_eq!(jain(&[4.0, 0.0, 0.0, 0.0]), 0.25);
        assert_eq!(quantile(&mut [5.0, 1.0, 3.0, 2.0, 4.0], 0.5), 3.0);
        let s = Settings::parse(&["n=8,16", "seed=3"]).unwrap();
        assert_eq!(s.nums("n", &[1.0], 1.0, 64.0).unwrap(), vec![8.0, 16.0]);
        assert_eq!(s.int("seed", 1, 0, 9).unwrap(), 3);
        assert!(s.only(&["n"]).unwrap_err().to_string().contains("unknown setting `seed` (known: n)"));
        assert!(matches!(s.int("n", 1, 0, 9), Err(SettingError::BadValue { .. })));
        let mut t = Table::new("T", &["a", "bb"]);
        t.row(vec!["100".into(), "2".into()]);
        assert_eq!(t.text(), "T\na    bb\n100  2\n");
        assert_eq!(t.csv(), "a,bb\n100,2\n");
    }
}
