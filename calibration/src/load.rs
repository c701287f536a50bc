//! How busy the machine was with other work while a measurement ran: CPU time that processes
//! outside this one (and its waited-for children, the rank workers) used, and time the
//! hypervisor stole. A host verification on a shared machine can be off by tens of percent for
//! reasons the model does not cover; this says when that happened. Linux only (`/proc`); other
//! systems get `None`.

use serde::Serialize;

/// Cumulative CPU times at one instant, in clock ticks (`USER_HZ`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Every CPU's non-idle, non-steal time (user, nice, system, irq, softirq).
    pub busy_ticks: u64,
    /// Every CPU's stolen time (a virtual machine's CPU given to others by the hypervisor).
    pub steal_ticks: u64,
    /// This process's own user + system time, and that of its waited-for children.
    pub own_ticks: u64,
    /// Wall clock, nanoseconds since an arbitrary origin.
    pub wall_ns: u64,
    /// CPUs the machine has (`cpuN` lines of `/proc/stat`): the busy and steal times cover
    /// them all.
    pub cpus: u32,
}

/// What other work did to the machine between two [`CpuTimes`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CpuLoad {
    pub wall_s: f64,
    /// CPU time of processes other than this run, as a fraction of `cores x wall`.
    pub other_fraction: f64,
    /// Stolen time, as a fraction of `cores x wall`.
    pub steal_fraction: f64,
}

/// Clock ticks per second of `/proc` times (`USER_HZ`): 100 on every Linux architecture
/// that twin builds for.
const TICKS_PER_S: f64 = 100.0;

/// `/proc/stat`: its first line ("cpu  user nice system idle iowait irq softirq steal ...")
/// gives busy and steal ticks, and its `cpuN` lines count the CPUs. `None` on a malformed
/// first line.
pub fn parse_proc_stat(text: &str) -> Option<(u64, u64, u32)> {
    let cpus = text
        .lines()
        .filter(|l| {
            l.strip_prefix("cpu")
                .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count();
    let line = text.lines().next()?;
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields.map(|f| f.parse().ok()).collect::<Option<_>>()?;
    let at = |i: usize| v.get(i).copied();
    let busy = at(0)? + at(1)? + at(2)? + at(5).unwrap_or(0) + at(6).unwrap_or(0);
    Some((
        busy,
        at(7).unwrap_or(0),
        u32::try_from(cpus).unwrap_or(u32::MAX).max(1),
    ))
}

/// Fields 14-17 of `/proc/self/stat` (utime, stime, cutime, cstime), summed. The second field
/// (the command name) may hold spaces and parentheses, so fields are counted after the last ')'.
pub fn parse_self_stat(text: &str) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    // After ')' come field 3 (state) onwards: utime is field 14, i.e. the 12th here.
    let f: Vec<&str> = rest.split_whitespace().collect();
    (11..15).try_fold(0u64, |sum, i| Some(sum + f.get(i)?.parse::<u64>().ok()?))
}

/// The machine's and this process's CPU times now. `None` where `/proc` is not readable.
pub fn cpu_times(clock: &twin_runtime::transport::store::Clock) -> Option<CpuTimes> {
    let (busy_ticks, steal_ticks, cpus) =
        parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let own_ticks = parse_self_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    Some(CpuTimes {
        busy_ticks,
        steal_ticks,
        own_ticks,
        wall_ns: clock.local_ns(),
        cpus,
    })
}

/// The load between `before` and `after`. `None` when no time passed or the counters went
/// backwards.
pub fn load_between(before: &CpuTimes, after: &CpuTimes) -> Option<CpuLoad> {
    let wall_s = after.wall_ns.checked_sub(before.wall_ns)? as f64 * 1e-9;
    let capacity_s = wall_s * f64::from(after.cpus.max(1));
    if capacity_s <= 0.0 {
        return None;
    }
    let busy = after.busy_ticks.checked_sub(before.busy_ticks)?;
    let own = after.own_ticks.checked_sub(before.own_ticks)?;
    let steal = after.steal_ticks.checked_sub(before.steal_ticks)?;
    let other_s = busy.saturating_sub(own) as f64 / TICKS_PER_S;
    Some(CpuLoad {
        wall_s,
        other_fraction: (other_s / capacity_s).min(1.0),
        steal_fraction: (steal as f64 / TICKS_PER_S / capacity_s).min(1.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_sums_busy_fields_and_reads_steal() {
        let t = "cpu  100 20 30 1000 5 1 2 7 0 0\ncpu0 50 10 15 500 2 0 1 3 0 0\n";
        assert_eq!(parse_proc_stat(t), Some((100 + 20 + 30 + 1 + 2, 7, 1)));
        let two = format!("{t}cpu1 1 1 1 1 1 1 1 1 0 0\nintr 5\n");
        assert_eq!(parse_proc_stat(&two).map(|p| p.2), Some(2));
        assert_eq!(parse_proc_stat("cpu0 1 2 3\n"), None);
        assert_eq!(parse_proc_stat("cpu  1 x 3 4\n"), None);
        assert_eq!(parse_proc_stat(""), None);
    }

    #[test]
    fn self_stat_counts_fields_after_the_command_name() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime ...
        let t = "42 (a (b) c) S 1 42 42 0 -1 4194560 10 0 0 0 11 22 33 44 20 0 1 0";
        assert_eq!(parse_self_stat(t), Some(11 + 22 + 33 + 44));
        assert_eq!(parse_self_stat("42 (x) S 1 2"), None);
        assert_eq!(parse_self_stat("no parenthesis"), None);
    }

    #[test]
    fn load_is_other_busy_time_over_capacity() {
        let before = CpuTimes {
            busy_ticks: 1000,
            steal_ticks: 10,
            own_ticks: 300,
            wall_ns: 0,
            cpus: 2,
        };
        // 2 s on 2 cores = 400 ticks of capacity: 250 busy, 150 of them ours, 20 stolen.
        let after = CpuTimes {
            busy_ticks: 1250,
            steal_ticks: 30,
            own_ticks: 450,
            wall_ns: 2_000_000_000,
            cpus: 2,
        };
        let l = load_between(&before, &after).unwrap();
        assert!((l.wall_s - 2.0).abs() < 1e-12);
        assert!((l.other_fraction - 100.0 / 400.0).abs() < 1e-12);
        assert!((l.steal_fraction - 20.0 / 400.0).abs() < 1e-12);
        // Counters that went backwards (a different boot, a bad read) give nothing.
        assert_eq!(load_between(&after, &before), None);
    }

    #[test]
    fn this_machine_reports_a_load_in_range() {
        let clock = twin_runtime::transport::store::Clock::new();
        let Some(a) = cpu_times(&clock) else {
            return; // not Linux
        };
        let mut x = 0u64;
        for i in 0..3_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert_ne!(x, 1);
        let b = cpu_times(&clock).unwrap();
        assert!(b.busy_ticks >= a.busy_ticks && b.own_ticks >= a.own_ticks);
        if let Some(l) = load_between(&a, &b) {
            assert!((0.0..=1.0).contains(&l.other_fraction));
            assert!((0.0..=1.0).contains(&l.steal_fraction));
        }
    }
}
