use super::*;
use crate::cost::Analytic;

const THROUGHPUT: &str = include_str!("../../../../shared/validation/throughput.toml");

fn table() -> Table {
    parse_table(THROUGHPUT, "throughput.toml").unwrap()
}

#[test]
fn explore() {
    let t = table();
    let timing = &t.layer_timing[0];
    let row = &t.run[5];
    let s = row_scenario(row, "none", false).unwrap();
    let cost = Analytic::new(&s);
    for c in &timing.rows {
        let p = layer_times(timing, c, &cost).unwrap();
        println!("{}: fwd {:.2} vs {} bwd {:.2} vs {}", c.case, p.forward_ns as f64*1e-6, c.forward_ms, p.backward_ns as f64*1e-6, c.backward_ms);
    }
    let fit = fit_gemm_curve(timing, &timing.rows, &cost).unwrap();
    println!("{fit:?}");
    let v = validate_table(&t, None).unwrap();
    println!("{}", v.to_text());
}

#[test]
fn explore_ops() {
    use crate::cost::CostModel;
    use crate::schedule::OpKind;
    let t = table();
    let row = &t.run[5];
    let s = row_scenario(row, "full", false).unwrap();
    let staged = crate::Staged::new(&s).unwrap();
    let prog = &staged.schedule.programs[0];
    for (i, op) in prog.ops.iter().enumerate() {
        let ns = match &op.kind {
            OpKind::Compute(c) => staged.cost.compute_ns(0, c),
            OpKind::Collective { kind, group, bytes, calls, .. } => {
                let g = staged.plan.group(staged.plan.group_of(0, *group));
                staged.cost.collective_ns(*kind, g, *bytes, *calls)
            }
            _ => 0,
        };
        println!("{i} {:?} {} {:.3} ms", op.stream, op.name(), ns as f64 * 1e-6);
    }
}
