//! The published-run validation with the flow-level network model instead of the per-call
//! alpha-beta one, side by side: `cargo run --release -p twin-sim --example validate_flow
//! [TABLE]` (default data/validation/throughput.toml).

use twin_sim::profile::bundled::Pricing;
use twin_sim::scenario::NetworkModel;
use twin_sim::validate::{load_table, median_abs, row_cases, run_case};

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "data/validation/throughput.toml".to_string());
    let table = load_table(std::path::Path::new(&path)).expect("table");
    let (mut analytic, mut flow) = (Vec::new(), Vec::new());
    for row in &table.run {
        for mut case in row_cases(row).expect("cases") {
            let a = run_case(&case, &[], &Pricing::Defaults).expect("analytic");
            case.scenario.cluster.topology.model = NetworkModel::Flow;
            let f = run_case(&case, &[], &Pricing::Defaults).expect("flow");
            println!(
                "{:<28} {:<28} published {:>8.2} analytic {:>8.2} ({:+.1}%) flow {:>8.2} ({:+.1}%)",
                a.id,
                a.field,
                a.published,
                a.predicted,
                100.0 * a.error,
                f.predicted,
                100.0 * f.error
            );
            analytic.push(a.error);
            flow.push(f.error);
        }
    }
    println!(
        "median |error|: analytic {:.1}%, flow {:.1}%",
        100.0 * median_abs(&analytic),
        100.0 * median_abs(&flow)
    );
}
