//! The limits of the sizes, depths, counts and durations a user can type, in one place, and the
//! checks that apply them before anything is allocated (issue 12: `uroce demo -s 99999999999`
//! used to abort in the allocator and leave its namespaces behind).
//!
//! Each limit is one [`Limit`] value with the reason an RDMA engineer would recognise (perftest's
//! own bounds, rxe's device attributes, memory sanity). Flags parsed by clap use
//! [`Limit::parser`], so clap itself refuses the value with the limit's one-line message; values
//! whose limit depends on other flags are checked with [`Limit::check`] or [`fits_in_memory`].

use std::ops::RangeInclusive;

/// An inclusive range a flag's value must lie in, and why.
#[derive(Clone, Copy, Debug)]
pub struct Limit {
    /// What the value is, e.g. "the message size".
    pub what: &'static str,
    /// Smallest accepted value.
    pub min: u64,
    /// Largest accepted value.
    pub max: u64,
    /// Unit printed after the bounds, e.g. " bytes" (empty for counts).
    pub unit: &'static str,
    /// Where the bounds come from, printed in parentheses.
    pub why: &'static str,
}

impl Limit {
    /// The accepted range.
    pub fn range(&self) -> RangeInclusive<u64> {
        self.min..=self.max
    }

    /// `Ok(v)` when `v` is within the limit, else the one-line reason.
    pub fn check(&self, v: u64) -> Result<u64, String> {
        if self.range().contains(&v) {
            Ok(v)
        } else {
            Err(format!("{} must be between {} and {}{} ({})", self.what, self.min, self.max, self.unit, self.why))
        }
    }

    /// A clap value parser for a size as perftest's `-s` reads it: a number (decimal, `0x` hex
    /// or leading-`0` octal, as `strtol(.., 0)`) with an optional `K` or `M` suffix (x 1024,
    /// x 1024^2), within the limit.
    pub fn size_parser(&'static self) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
        move |s: &str| {
            let t = s.trim();
            let (digits, factor) = match (t.strip_suffix('K'), t.strip_suffix('M')) {
                (Some(d), _) => (d, 1024u64),
                (_, Some(d)) => (d, 1024 * 1024),
                _ => (t, 1),
            };
            let n = if let Some(h) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
                u64::from_str_radix(h, 16)
            } else if digits.len() > 1 && digits.starts_with('0') {
                u64::from_str_radix(&digits[1..], 8)
            } else {
                digits.parse::<u64>()
            }
            .map_err(|_| format!("`{s}` is not a size (a number, optionally with K or M)"))?;
            self.check(n.saturating_mul(factor))
        }
    }

    /// A clap value parser: a decimal number within the limit.
    pub fn parser(&'static self) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
        move |s: &str| {
            let v: u64 = s.trim().parse().map_err(|_| format!("`{s}` is not a non-negative integer"))?;
            self.check(v)
        }
    }
}

/// perftest's `-s`: `1 ..= UINT_MAX / 2` ("Message Size should be between 1 and 2147483647").
pub const PERFTEST_SIZE: Limit =
    Limit { what: "the message size", min: 1, max: u32::MAX as u64 / 2, unit: " bytes", why: "perftest's -s range" };

/// perftest's `-n` as `uroce perf` takes it (at least 5, as perftest's latency tests need).
pub const PERFTEST_ITERS: Limit =
    Limit { what: "the number of iterations", min: 5, max: 1 << 32, unit: "", why: "perftest's -n range" };

/// perftest's `-q` (`MAX_QP_NUM`).
pub const PERFTEST_QPS: Limit =
    Limit { what: "the number of QPs", min: 1, max: 16384, unit: "", why: "perftest's -q range" };

/// perftest's `-t` (`MIN_TX`..`MAX_TX`).
pub const PERFTEST_TX_DEPTH: Limit =
    Limit { what: "the TX depth", min: 1, max: 15000, unit: "", why: "perftest's -t range" };

/// perftest's `-r` (`MIN_RX`..`MAX_RX`).
pub const PERFTEST_RX_DEPTH: Limit =
    Limit { what: "the RX depth", min: 1, max: 16384, unit: "", why: "perftest's -r range" };

/// perftest's `-Q` (`MIN_CQ_MOD`..`MAX_CQ_MOD`).
pub const PERFTEST_CQ_MOD: Limit =
    Limit { what: "the CQ moderation", min: 1, max: 1024, unit: "", why: "perftest's -Q range" };

/// perftest 25.01's `-I` (`MAX_INLINE`; 912 in 4.5).
pub const PERFTEST_INLINE: Limit =
    Limit { what: "the inline size", min: 0, max: 1024, unit: " bytes", why: "perftest's -I range" };

/// perftest's `-o`: outstanding READs/atomics, at most what `max_rd_atomic` can hold.
pub const PERFTEST_OUTS: Limit =
    Limit { what: "the outstanding reads", min: 1, max: 255, unit: "", why: "an 8-bit max_rd_atomic" };

/// perftest's `-l`: a post list no longer than the TX depth's maximum.
pub const PERFTEST_POST_LIST: Limit =
    Limit { what: "the post list size", min: 1, max: 15000, unit: "", why: "perftest's -t range" };

/// perftest's `-D`.
pub const PERFTEST_DURATION: Limit =
    Limit { what: "the duration", min: 1, max: 86_400, unit: " seconds", why: "at most a day" };

/// perftest's `-x` (`MAX_GID_IX`).
pub const PERFTEST_GID_INDEX: Limit =
    Limit { what: "the GID index", min: 0, max: 64, unit: "", why: "perftest's -x range" };

/// perftest's `-u`: the local ACK timeout exponent, 5 bits in the QP attribute.
pub const PERFTEST_QP_TIMEOUT: Limit =
    Limit { what: "the QP timeout", min: 0, max: 31, unit: "", why: "a 5-bit exponent" };

/// `uroce tool tcp-pingpong --size`: a latency baseline's message, sent and echoed whole.
pub const TCP_PINGPONG_SIZE: Limit =
    Limit { what: "the message size", min: 1, max: 16 << 20, unit: " bytes", why: "a ping-pong message up to 16 MiB" };

/// `uroce tool tcp-pingpong --iters`: every round trip's time is kept (8 bytes each).
pub const TCP_PINGPONG_ITERS: Limit =
    Limit { what: "the number of round trips", min: 1, max: 100_000_000, unit: "", why: "800 MB of samples at most" };

/// `uroce tool tcp-pingpong --warmup`.
pub const TCP_PINGPONG_WARMUP: Limit =
    Limit { what: "the number of warm-up round trips", min: 0, max: 100_000_000, unit: "", why: "as --iters" };

/// The veth pair's link MTU in `uroce demo`: IPv6 (the GID table's link-local and ULA addresses)
/// needs 1280; 9000 already gives the largest RoCE path MTU, 4096.
pub const DEMO_LINK_MTU: Limit = Limit {
    what: "the link MTU",
    min: 1280,
    max: 9000,
    unit: " bytes",
    why: "IPv6 needs 1280; 9000 carries RoCE's largest path MTU, 4096",
};

/// rc_pingpong's `-s`: one SEND per exchange, at most the RC maximum message of 2^31 bytes
/// (rxe's `max_msg_sz`); a zero-length exchange would only time the ACKs.
pub const PINGPONG_SIZE: Limit =
    Limit { what: "the message size", min: 1, max: 1 << 31, unit: " bytes", why: "RC's 2^31-byte maximum message" };

/// rc_pingpong's `-r`: receive WRs kept posted, at most rxe's `max_qp_wr`.
pub const PINGPONG_RX_DEPTH: Limit =
    Limit { what: "the receive depth", min: 1, max: 16384, unit: "", why: "rxe's max_qp_wr" };

/// rc_pingpong's `-n`.
pub const PINGPONG_ITERS: Limit =
    Limit { what: "the number of exchanges", min: 1, max: u32::MAX as u64, unit: "", why: "a 32-bit count" };

/// The TCP port of an out-of-band exchange.
pub const TCP_PORT: Limit = Limit { what: "the TCP port", min: 1, max: 65535, unit: "", why: "a TCP port number" };

/// `--connect-timeout`: how long a client retries its TCP connection.
pub const CONNECT_TIMEOUT: Limit =
    Limit { what: "the connect timeout", min: 0, max: 86_400, unit: " seconds", why: "at most a day" };

/// `--stall-timeout`: how long a run waits for a completion.
pub const STALL_TIMEOUT: Limit =
    Limit { what: "the stall timeout", min: 1, max: 86_400, unit: " seconds", why: "at most a day" };

/// `uroce sim soak --ops`.
pub const SOAK_OPS: Limit = Limit {
    what: "the number of work requests",
    min: 1,
    max: 1_000_000_000,
    unit: "",
    why: "a billion simulated WRs take hours already",
};

/// `uroce sim soak --qps`.
pub const SOAK_QPS: Limit =
    Limit { what: "the number of QP pairs", min: 1, max: 1024, unit: "", why: "a soak's sanity" };

/// `uroce sim soak --max-size`: bounded so that a soak's regions fit in memory (see
/// `uroce_transport::sim::soak::SoakConfig::check`, which also bounds `--qps` × `--max-size`).
pub const SOAK_MAX_SIZE: Limit = Limit {
    what: "the largest message",
    min: 0,
    max: uroce_transport::sim::soak::MAX_MESSAGE as u64,
    unit: " bytes",
    why: "each QP pair keeps 3 x 16 slots of this size in memory",
};

/// `MemAvailable` from `/proc/meminfo`, in bytes (`None` where it cannot be read).
pub fn mem_available() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = m.lines().find(|l| l.starts_with("MemAvailable:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb.saturating_mul(1024))
}

/// `bytes` for people: GiB, MiB or bytes.
pub fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b => format!("{b} B"),
    }
}

/// Refuses a run whose buffers (`bytes`, described by `what`) would not fit in the memory this
/// machine has available: better a clear error than the allocator's abort.
pub fn fits_in_memory(what: &str, bytes: u64) -> Result<(), String> {
    fits_in(what, bytes, mem_available())
}

fn fits_in(what: &str, bytes: u64, available: Option<u64>) -> Result<(), String> {
    match available {
        Some(a) if bytes > a => Err(format!(
            "{what} would take {}, more than the {} this machine has available",
            human_bytes(bytes),
            human_bytes(a)
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_accept_their_bounds_and_refuse_one_past() {
        for l in [PERFTEST_SIZE, PERFTEST_ITERS, DEMO_LINK_MTU, PINGPONG_SIZE, PINGPONG_RX_DEPTH, SOAK_MAX_SIZE] {
            assert_eq!(l.check(l.min), Ok(l.min));
            assert_eq!(l.check(l.max), Ok(l.max));
            assert!(l.check(l.max + 1).is_err());
            if l.min > 0 {
                assert!(l.check(l.min - 1).is_err());
            }
        }
        assert_eq!(
            PERFTEST_SIZE.check(99_999_999_999).unwrap_err(),
            "the message size must be between 1 and 2147483647 bytes (perftest's -s range)"
        );
    }

    #[test]
    fn the_parser_refuses_junk_and_out_of_range() {
        let p = PERFTEST_SIZE.parser();
        assert_eq!(p("65536"), Ok(65536));
        assert!(p("0").unwrap_err().contains("between 1 and 2147483647"));
        assert!(p("-1").unwrap_err().contains("not a non-negative integer"));
        assert!(p("99999999999999999999999").unwrap_err().contains("not a non-negative integer"));
        let s = PERFTEST_SIZE.size_parser();
        assert_eq!((s("64K"), s("2M"), s("0x10"), s("010"), s("7")), (Ok(65536), Ok(2 << 20), Ok(16), Ok(8), Ok(7)));
        assert!(s("3G").unwrap_err().contains("is not a size"));
        assert!(s("4096M").unwrap_err().contains("between 1 and 2147483647"));
        assert!(s("0").unwrap_err().contains("between 1 and 2147483647"));
        assert!(s("99999999999999M").unwrap_err().contains("between 1 and 2147483647"), "no overflow");
    }

    #[test]
    fn memory_check() {
        assert!(fits_in("x", 10, Some(10)).is_ok());
        assert!(fits_in("x", 10, None).is_ok());
        assert_eq!(
            fits_in("the buffers", 3 << 30, Some(1 << 30)).unwrap_err(),
            "the buffers would take 3.0 GiB, more than the 1.0 GiB this machine has available"
        );
    }
}
