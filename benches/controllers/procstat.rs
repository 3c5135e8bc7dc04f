//! Peak RSS and CPU time of a process, read from /proc.

use std::sync::OnceLock;
use std::time::Duration;

/// What a process has used so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// VmHWM: the peak resident set size, in bytes.
    pub peak_rss: u64,
    /// utime + stime, all threads.
    pub cpu: Duration,
}

/// The usage of process `pid`, or None when it is gone.
pub fn usage(pid: u32) -> Option<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let peak_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields are counted after its ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Usage {
        peak_rss: peak_kb * 1024,
        cpu: Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64),
    })
}

/// CPU time of several processes together (those that are gone count as zero).
pub fn cpu_of(pids: &[u32]) -> Duration {
    pids.iter().filter_map(|&p| usage(p)).map(|u| u.cpu).sum()
}

/// USER_HZ; 100 on every common Linux, but asked rather than assumed.
fn clock_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
            .unwrap_or(100)
    })
}
