//! Generation and validation cost of uniform schedules at 512 and 16,384 GPUs (not a
//! benchmark harness; prints wall times and op counts for a quick look).
use std::time::Instant;
use twin_sim::plan::Plan;
use twin_sim::schedule::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for (tp, pp, dp, m) in [(8u32, 8u32, 8u32, 64u64), (8, 16, 128, 32)] {
        let mut s = twin_sim::testing::small_scenario(tp, pp, dp, m);
        s.training.recompute = twin_sim::scenario::Recompute::Selective;
        let t = Instant::now();
        let plan = Plan::new(&s)?;
        let t_plan = t.elapsed();
        let t = Instant::now();
        let sizes = UniformSizes::new(&s);
        let sched = generate_with(&s, &plan, &sizes, 0)?;
        let t_gen = t.elapsed();
        let t = Instant::now();
        let rep = sched.validate(&plan)?;
        let t_val = t.elapsed();
        let max_ops = sched
            .programs
            .iter()
            .map(|p| p.ops.len())
            .max()
            .unwrap_or(0);
        println!(
            "{} GPUs: plan {:?}, generate {:?}, validate {:?}; {} ops/program max, {} ops total, {} p2p pairs, {} collectives",
            plan.world, t_plan, t_gen, t_val, max_ops, rep.ops, rep.p2p_pairs, rep.collectives
        );
    }
    Ok(())
}
