//! Binding a host rank to one CPU core, as a GPU rank owns its device. Without it the
//! scheduler's wake-affine placement pulls two ranks that wake each other (the members of a
//! tensor-parallel pair, in lockstep) onto one core while the other idles: a `tp-pp.toml` trace
//! showed one rank busy for half the step on a 2-core machine. With it, rank `local_rank` runs
//! on the `local_rank % n`-th of the `n` cores the process may use, and the simulator's host
//! model (`[host] cores`) places ranks the same way. `TWIN_HOST_PIN=off` leaves placement to
//! the scheduler.

/// Pin the calling thread (and every thread it starts afterwards) to the core of
/// `local_rank`. Returns the core, or `None` when pinning is off or not possible.
pub fn pin_rank(local_rank: u32) -> Option<usize> {
    if std::env::var("TWIN_HOST_PIN").is_ok_and(|v| v == "off" || v == "0") {
        return None;
    }
    let allowed = allowed_cpus()?;
    let n = allowed.len();
    let cpu = *allowed.get(local_rank as usize % n.max(1))?;
    // SAFETY: `set` is a zeroed cpu_set_t that CPU_SET fills within its bounds (cpu is below
    // CPU_SETSIZE: it came from the allowed set); sched_setaffinity reads it for the call.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return None;
        }
    }
    Some(cpu)
}

/// The position among the allowed cores of the core `local_rank` is pinned to (ranks with
/// the same position share a core). Call before pinning: afterwards one core is allowed.
pub fn core_slot(local_rank: u32) -> Option<u32> {
    let n = allowed_cpus()?.len().max(1) as u32;
    Some(local_rank % n)
}

/// The CPUs this thread may run on, in order.
fn allowed_cpus() -> Option<Vec<usize>> {
    // SAFETY: `set` is a zeroed cpu_set_t the kernel fills; CPU_ISSET reads within its bounds.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect();
        (!cpus.is_empty()).then_some(cpus)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_only_on_its_core() {
        let before = allowed_cpus().unwrap();
        // In a thread of its own, so the test runner's other threads keep their placement.
        let (cpu, after) = std::thread::spawn(|| (pin_rank(1), allowed_cpus().unwrap()))
            .join()
            .unwrap();
        let cpu = cpu.unwrap();
        assert_eq!(cpu, before[1 % before.len()]);
        assert_eq!(after, vec![cpu]);
    }
}
