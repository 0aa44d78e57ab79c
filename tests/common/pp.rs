//! Helpers of the `uroce pingpong` tests (`tests/pingpong_e2e.rs`, `tests/interop_pingpong.rs`):
//! parsing `ibv_rc_pingpong`'s output (stock or ours) and checking a server/client pair of it.
//!
//! Use with `#[path = "common/pp.rs"] mod pp;` (independent of `common/mod.rs`).
#![allow(dead_code)]

/// One `local address:` / `remote address:` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dest {
    /// LID.
    pub lid: u32,
    /// QPN.
    pub qpn: u32,
    /// PSN.
    pub psn: u32,
    /// GID as printed (`inet_ntop`).
    pub gid: String,
}

/// What one side printed.
#[derive(Clone, Debug)]
pub struct PpOut {
    /// Its address.
    pub local: Dest,
    /// The peer's address as it understood it.
    pub remote: Dest,
    /// `<bytes> bytes in <s> seconds = <r> Mbit/sec`.
    pub bytes: u64,
    /// Seconds (both result lines agree).
    pub secs: f64,
    /// Mbit/sec.
    pub mbit: f64,
    /// `<iters> iters in ...`.
    pub iters: u32,
    /// usec/iter.
    pub usec_per_iter: f64,
    /// Every line mentioning invalid data (stock `invalid data in page N`, ours too).
    pub invalid: Vec<String>,
}

fn hex_after(line: &str, key: &str) -> Result<u32, String> {
    let i = line.find(key).ok_or_else(|| format!("no {key:?} in {line:?}"))? + key.len();
    let h: String = line[i..].chars().take_while(|c| c.is_ascii_hexdigit()).collect();
    u32::from_str_radix(&h, 16).map_err(|e| format!("{key:?} in {line:?}: {e}"))
}

fn dest(line: &str) -> Result<Dest, String> {
    let gid = line.split("GID ").nth(1).ok_or_else(|| format!("no GID in {line:?}"))?.trim().to_string();
    Ok(Dest { lid: hex_after(line, "LID 0x")?, qpn: hex_after(line, "QPN 0x")?, psn: hex_after(line, "PSN 0x")?, gid })
}

/// Parses one side's output (stdout, or a guest console section; `\r` and noise lines are
/// ignored). Fails if a line is missing or malformed.
pub fn parse(text: &str) -> Result<PpOut, String> {
    let lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
    let find = |p: &dyn Fn(&str) -> bool, what: &str| {
        lines.iter().copied().find(|l| p(l)).ok_or_else(|| format!("no {what} line in:\n{text}"))
    };
    let local = dest(find(&|l| l.starts_with("  local address:  LID 0x"), "local address")?)?;
    let remote = dest(find(&|l| l.starts_with("  remote address: LID 0x"), "remote address")?)?;
    let b = find(&|l| l.contains(" bytes in ") && l.ends_with(" Mbit/sec"), "bytes")?;
    let i = find(&|l| l.contains(" iters in ") && l.ends_with(" usec/iter"), "iters")?;
    let w = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
    let (bw, iw) = (w(b), w(i));
    // "<bytes> bytes in <s> seconds = <r> Mbit/sec", "<n> iters in <s> seconds = <t> usec/iter"
    if bw.len() != 8 || iw.len() != 8 {
        return Err(format!("malformed result lines {b:?} / {i:?}"));
    }
    let num = |s: &str| s.parse::<f64>().map_err(|e| format!("{s:?}: {e}"));
    let out = PpOut {
        local,
        remote,
        bytes: bw[0].parse().map_err(|e| format!("{b:?}: {e}"))?,
        secs: num(&bw[3])?,
        mbit: num(&bw[6])?,
        iters: iw[0].parse().map_err(|e| format!("{i:?}: {e}"))?,
        usec_per_iter: num(&iw[6])?,
        invalid: lines.iter().filter(|l| l.contains("invalid data")).map(|l| l.to_string()).collect(),
    };
    if iw[3] != bw[3] {
        return Err(format!("the two result lines disagree on the time: {b:?} / {i:?}"));
    }
    Ok(out)
}

/// Checks a run: both outputs parse, each side's `remote` is the other's `local`, the result
/// lines carry `size * iters * 2` bytes and `iters`, figures are finite and positive, and no
/// side reported invalid data.
pub fn check_pair(server: &str, client: &str, size: u64, iters: u32) -> Result<(PpOut, PpOut), String> {
    let s = parse(server).map_err(|e| format!("server: {e}"))?;
    let c = parse(client).map_err(|e| format!("client: {e}"))?;
    if s.remote != c.local {
        return Err(format!("server saw remote {:?}, client is {:?}", s.remote, c.local));
    }
    if c.remote != s.local {
        return Err(format!("client saw remote {:?}, server is {:?}", c.remote, s.local));
    }
    for (who, o) in [("server", &s), ("client", &c)] {
        if o.bytes != size * iters as u64 * 2 || o.iters != iters {
            return Err(format!(
                "{who}: {} bytes / {} iters, want {} / {iters}",
                o.bytes,
                o.iters,
                size * iters as u64 * 2
            ));
        }
        if !(o.mbit.is_finite() && o.usec_per_iter.is_finite() && o.usec_per_iter > 0.0 && o.mbit >= 0.0) {
            return Err(format!("{who}: bad figures {o:?}"));
        }
        // (Mbit/sec may print as 0.00 for tiny messages: "%.2f".)
        if size >= 4096 && o.mbit <= 0.0 {
            return Err(format!("{who}: zero bandwidth {o:?}"));
        }
        if !o.invalid.is_empty() {
            return Err(format!("{who} reported invalid data: {:?}", o.invalid));
        }
    }
    Ok((s, c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stock_output() {
        let t = "  local address:  LID 0x0000, QPN 0x000011, PSN 0x59dfd7, GID ::ffff:10.77.0.21\r\n\
                 [  12.3] random kernel line\n\
                 \x20 remote address: LID 0x0000, QPN 0xabcdef, PSN 0x000001, GID ::ffff:10.77.0.6\n\
                 8192000 bytes in 0.50 seconds = 131.07 Mbit/sec\n\
                 1000 iters in 0.50 seconds = 500.00 usec/iter\n";
        let o = parse(t).unwrap();
        assert_eq!(o.local, Dest { lid: 0, qpn: 0x11, psn: 0x59dfd7, gid: "::ffff:10.77.0.21".into() });
        assert_eq!(o.remote.qpn, 0xabcdef);
        assert_eq!((o.bytes, o.iters), (8_192_000, 1000));
        assert!(o.invalid.is_empty());
        assert!(parse(&t.replace("iters in", "iterations in")).is_err());
    }
}
