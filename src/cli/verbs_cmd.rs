//! `uroce verbs`: where uroce's drop-in `libibverbs.so.1` is, as the environment a verbs
//! program needs to load it: `env $(uroce verbs) ib_write_bw ...`.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Print the library's environment.
#[derive(clap::Args, Debug)]
pub struct VerbsArgs {
    /// Print only the directory that holds `libibverbs.so.1`.
    #[arg(long)]
    pub dir: bool,
}

/// Where the library is: `$UROCE_VERBS_DIR`, else `verbs/` beside the directory of this binary
/// (`target/verbs` for `target/release/uroce`, where `scripts/build-verbs` puts it), else
/// `lib/uroce` beside it (an installed layout: `bin/uroce`, `lib/uroce/libibverbs.so.1`).
pub fn find(exe: &Path, env: Option<PathBuf>) -> Result<PathBuf> {
    let has = |d: &Path| d.join("libibverbs.so.1").exists();
    if let Some(d) = env {
        if has(&d) {
            return Ok(d);
        }
        bail!("UROCE_VERBS_DIR={} holds no libibverbs.so.1", d.display());
    }
    let up = exe.parent().and_then(Path::parent);
    let tried: Vec<PathBuf> = up.into_iter().flat_map(|u| [u.join("verbs"), u.join("lib/uroce")]).collect();
    match tried.iter().find(|d| has(d)) {
        Some(d) => Ok(d.canonicalize().unwrap_or_else(|_| d.clone())),
        None => bail!(
            "uroce's libibverbs.so.1 is not built (looked in {}): run scripts/build-verbs",
            tried.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// `uroce verbs [--dir]`.
pub fn run(a: &VerbsArgs) -> Result<ExitCode> {
    let exe = std::env::current_exe()?;
    let dir = find(&exe, std::env::var_os("UROCE_VERBS_DIR").map(PathBuf::from))?;
    if a.dir {
        println!("{}", dir.display());
    } else {
        // ahead of what the caller already has, so this libibverbs.so.1 is the one loaded
        match std::env::var("LD_LIBRARY_PATH") {
            Ok(p) if !p.is_empty() => println!("LD_LIBRARY_PATH={}:{p}", dir.display()),
            _ => println!("LD_LIBRARY_PATH={}", dir.display()),
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_beside_the_binary_then_in_an_installed_layout() {
        let root = std::env::temp_dir().join(format!("uroce-verbs-find-{}", std::process::id()));
        let exe = root.join("release/uroce");
        assert!(find(&exe, None).is_err(), "nothing built yet");
        std::fs::create_dir_all(root.join("lib/uroce")).unwrap();
        std::fs::write(root.join("lib/uroce/libibverbs.so.1"), b"").unwrap();
        assert!(find(&exe, None).unwrap().ends_with("lib/uroce"));
        std::fs::create_dir_all(root.join("verbs")).unwrap();
        std::fs::write(root.join("verbs/libibverbs.so.1"), b"").unwrap();
        assert!(find(&exe, None).unwrap().ends_with("verbs"), "target/verbs first");
        assert!(find(&exe, Some(root.join("nowhere"))).is_err(), "UROCE_VERBS_DIR must hold it");
        assert!(find(&exe, Some(root.join("lib/uroce"))).unwrap().ends_with("lib/uroce"));
        let _ = std::fs::remove_dir_all(&root);
    }
}
