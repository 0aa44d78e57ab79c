//! `uroce sim SCENARIO [--set key=value ...] [--out DIR]`: a datacenter scenario on the
//! simulator (`uroce_sim::scenario`), its summary on stdout, its CSV series, tables and SVG
//! plots in DIR.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use uroce_sim::scenario::{self, Settings};

/// Arguments of a scenario.
#[derive(clap::Args, Debug)]
pub struct ScenarioArgs {
    /// Change a setting of the scenario (e.g. `n=8,16`); repeatable. An unknown key is an
    /// error that lists the known ones.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Write the summary (`summary.txt`), the CSV files and the plots (SVG) here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub fn run(name: &str, a: &ScenarioArgs) -> Result<ExitCode> {
    let settings = Settings::parse(&a.set)?;
    let t = std::time::Instant::now();
    let r = scenario::run(name, &settings)?;
    let wall = t.elapsed();
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let write = |file: &str, body: &str| {
            let p = dir.join(file);
            std::fs::write(&p, body).with_context(|| format!("write {}", p.display()))
        };
        write("summary.txt", &r.summary)?;
        for (f, body) in r.csv.iter().chain(&r.plots) {
            write(f, body)?;
        }
    }
    let mut out = std::io::stdout().lock();
    write!(out, "{}", r.summary)?;
    out.flush()?;
    let files = r.csv.len() + r.plots.len() + 1;
    match &a.out {
        Some(d) => eprintln!("{name}: {:.1} s wall; {files} files in {}", wall.as_secs_f64(), d.display()),
        None => eprintln!("{name}: {:.1} s wall (--out DIR writes the CSV series and plots)", wall.as_secs_f64()),
    }
    Ok(ExitCode::SUCCESS)
}
