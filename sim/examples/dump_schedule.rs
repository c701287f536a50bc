//! Print the programs of a small uniform schedule, op by op (for eyeballing generators).
use twin_sim::plan::Plan;
use twin_sim::scenario::*;
use twin_sim::schedule::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let get = |i: usize, d: u32| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let mut s =
        twin_sim::testing::small_scenario(get(1, 2), get(2, 2), get(3, 2), u64::from(get(4, 4)));
    s.parallel.zero = get(5, 0) as u8;
    s.parallel.schedule = match get(6, 1) {
        0 => PipelineSchedule::Gpipe,
        1 => PipelineSchedule::OneFOneB,
        2 => PipelineSchedule::Interleaved1F1B,
        _ => PipelineSchedule::ZeroBubble,
    };
    s.training.grad_bucket_bytes = 1 << 20;
    s.model.layers = 4 * s.parallel.pp;
    let plan = Plan::new(&s)?;
    let sizes = UniformSizes::new(&s);
    let sched = generate_with(&s, &plan, &sizes, 0)?;
    for p in &sched.programs {
        println!("== stage {} ({} ops)", p.stage, p.ops.len());
        for (i, op) in p.ops.iter().enumerate() {
            println!(
                "{i:4} {:8} {:40} <- {:?}",
                op.stream.name(),
                op.name(),
                op.deps
            );
        }
    }
    println!("{:?}", sched.validate(&plan));
    Ok(())
}
