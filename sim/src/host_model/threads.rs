//! How the host backend's threads share a CPU core, for the simulator's model of shared cores.
//! The runtime runs each rank's compute stream on a thread at a lower priority than its
//! communication threads (`twin_runtime`'s `backend::host::priority`), and Linux's scheduler
//! (CFS) gives runnable threads on a core CPU time in proportion to a weight fixed by their nice
//! value. The engine shares a core among the work on it in the same proportions (weighted
//! max-min, `topology::MaxMin::add_weighted`), so both sides read one constant,
//! [`crate::host_backend::COMPUTE_NICE`].

use crate::host_backend::COMPUTE_NICE;

/// CFS's weight per nice value, -20 to 19 (Linux `sched_prio_to_weight`, kernel/sched/core.c;
/// nice 0 is 1024 and each step is about 1.25x).
const CFS_WEIGHT: [u32; 40] = [
    88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916, 9548, 7620, 6100, 4904,
    3906, 3121, 2501, 1991, 1586, 1277, 1024, 820, 655, 526, 423, 335, 272, 215, 172, 137, 110, 87,
    70, 56, 45, 36, 29, 23, 18, 15,
];

/// The CPU share of a thread at `nice` relative to one at nice 0 when both are runnable on one
/// core (nice clamped to -20..=19, as the kernel clamps it).
pub fn cfs_relative_weight(nice: i32) -> f64 {
    let i = (nice.clamp(-20, 19) + 20) as usize;
    f64::from(CFS_WEIGHT[i]) / 1024.0
}

/// The weight of the host backend's compute-stream work against its other threads' work on a
/// shared core: 335 / 1024 at nice 5.
pub fn host_compute_weight() -> f64 {
    cfs_relative_weight(COMPUTE_NICE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_follow_the_kernel_table() {
        assert_eq!(cfs_relative_weight(0), 1.0);
        assert_eq!(cfs_relative_weight(5), 335.0 / 1024.0);
        assert_eq!(cfs_relative_weight(-20), 88761.0 / 1024.0);
        // Clamped as the kernel clamps.
        assert_eq!(cfs_relative_weight(40), cfs_relative_weight(19));
        assert_eq!(cfs_relative_weight(i32::MIN), cfs_relative_weight(-20));
        // Each nice step is about 1.25x (the table's design), and the table only falls.
        for n in -20..19 {
            let r = cfs_relative_weight(n) / cfs_relative_weight(n + 1);
            assert!((1.15..1.35).contains(&r), "nice {n}: {r}");
        }
        assert!(host_compute_weight() < 1.0);
    }
}
