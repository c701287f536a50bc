//! Tests of the max-min fair solver: rates against hand-worked cases and properties of any
//! allocation (no link over capacity, every flow bottlenecked). Split from `topology::maxmin`
//! so that the solver reads on its own.

use super::*;
use proptest::prelude::*;

fn solve(cap: &[f64], flows: &[(&[u32], f64)]) -> Vec<f64> {
    let mut m = MaxMin::new(cap.to_vec());
    let ids: Vec<u32> = flows.iter().map(|(p, c)| m.add(Path::new(p), *c)).collect();
    let mut changed = Vec::new();
    m.resolve(&mut changed);
    ids.iter().map(|&i| m.rate(i)).collect()
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0))
}

#[test]
fn equal_flows_split_a_link() {
    let r = solve(&[10.0], &[(&[0], f64::INFINITY), (&[0], f64::INFINITY)]);
    assert!(close(&r, &[5.0, 5.0]), "{r:?}");
}

#[test]
fn classic_water_filling_example() {
    // Links A (cap 10) and B (cap 4). f0 over A and B, f1 over A, f2 over B.
    // B is the bottleneck: f0 = f2 = 2; then f1 takes what A has left: 8.
    let r = solve(
        &[10.0, 4.0],
        &[
            (&[0, 1], f64::INFINITY),
            (&[0], f64::INFINITY),
            (&[1], f64::INFINITY),
        ],
    );
    assert!(close(&r, &[2.0, 8.0, 2.0]), "{r:?}");
}

#[test]
fn caps_release_capacity_to_others() {
    // Four cores, six ops each capped at one core: processor sharing gives 4/6 each.
    let flows: Vec<(&[u32], f64)> = (0..6).map(|_| (&[0u32][..], 1.0)).collect();
    let r = solve(&[4.0], &flows);
    assert!(close(&r, &[4.0 / 6.0; 6]), "{r:?}");
    // Three ops on four cores: each runs at its cap of one core.
    let r = solve(&[4.0], &flows[..3]);
    assert!(close(&r, &[1.0; 3]), "{r:?}");
    // A capped flow on a link: 1 for it, the rest (9) for the other.
    let r = solve(&[10.0], &[(&[0], 1.0), (&[0], f64::INFINITY)]);
    assert!(close(&r, &[1.0, 9.0]), "{r:?}");
}

/// [`solve`] with a weight per flow.
fn solve_weighted(cap: &[f64], flows: &[(&[u32], f64, f64)]) -> Vec<f64> {
    let mut m = MaxMin::new(cap.to_vec());
    let ids: Vec<u32> = flows
        .iter()
        .map(|(p, c, w)| m.add_weighted(Path::new(p), *c, *w))
        .collect();
    let mut changed = Vec::new();
    m.resolve(&mut changed);
    ids.iter().map(|&i| m.rate(i)).collect()
}

#[test]
fn weights_split_a_resource_in_proportion() {
    // A core shared by a weight-1 flow and a weight-3 one: a quarter and three quarters.
    let inf = f64::INFINITY;
    let r = solve_weighted(&[1.0], &[(&[0], inf, 1.0), (&[0], inf, 3.0)]);
    assert!(close(&r, &[0.25, 0.75]), "{r:?}");
    // Capped below its weighted share, the heavy flow releases the rest: 0.2 and 0.8.
    let r = solve_weighted(&[1.0], &[(&[0], inf, 1.0), (&[0], 0.2, 3.0)]);
    assert!(close(&r, &[0.8, 0.2]), "{r:?}");
    // Weight 1 everywhere is plain max-min, and a bad weight counts as 1.
    let r = solve_weighted(&[10.0], &[(&[0], inf, 1.0), (&[0], inf, f64::NAN)]);
    assert!(close(&r, &[5.0, 5.0]), "{r:?}");
    // Alone on its path, a flow's weight does not matter.
    let r = solve_weighted(&[4.0, 2.0], &[(&[0, 1], inf, 0.1)]);
    assert!(close(&r, &[2.0]), "{r:?}");
    // Two resources: f0 (weight 2) over A and B, f1 over A, f2 over B (caps 6 and 3).
    // On B, f0 gets 2/3 of 3 = 2 and f2 gets 1; on A, f1 takes the 4 that f0 leaves.
    let r = solve_weighted(
        &[6.0, 3.0],
        &[(&[0, 1], inf, 2.0), (&[0], inf, 1.0), (&[1], inf, 1.0)],
    );
    assert!(close(&r, &[2.0, 4.0, 1.0]), "{r:?}");
}

#[test]
fn three_level_chain() {
    // Links 0 (cap 3), 1 (cap 6), 2 (cap 12). f0 on 0,1,2; f1 on 1,2; f2 on 2.
    // Level 1: link 0 share 3 → f0 = 3. Link 1: (6-3)/1 = 3 → f1 = 3. Link 2: 12-6 = 6.
    let r = solve(
        &[3.0, 6.0, 12.0],
        &[
            (&[0, 1, 2], f64::INFINITY),
            (&[1, 2], f64::INFINITY),
            (&[2], f64::INFINITY),
        ],
    );
    assert!(close(&r, &[3.0, 3.0, 6.0]), "{r:?}");
}

#[test]
fn removing_a_flow_gives_its_share_back_and_reports_changes() {
    let mut m = MaxMin::new(vec![10.0, 10.0]);
    let a = m.add(Path::new(&[0]), f64::INFINITY);
    let b = m.add(Path::new(&[0]), f64::INFINITY);
    let c = m.add(Path::new(&[1]), f64::INFINITY);
    let mut changed = Vec::new();
    m.resolve(&mut changed);
    assert_eq!(changed.len(), 3);
    m.remove(a);
    changed.clear();
    m.resolve(&mut changed);
    // Only b's component was touched; c keeps its rate and is not reported.
    assert_eq!(changed, vec![b]);
    assert_eq!(m.rate(b), 10.0);
    assert_eq!(m.rate(c), 10.0);
    assert_eq!(m.rate(a), 0.0);
}

#[derive(Clone, Debug)]
enum Step {
    Add(Vec<u32>, Option<u8>),
    Remove(usize),
    Cap(usize, u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (
            prop::collection::vec(0u32..6, 0..4),
            prop::option::of(1u8..20)
        )
            .prop_map(|(p, c)| Step::Add(p, c)),
        (0usize..64).prop_map(Step::Remove),
        (0usize..64, 1u8..20).prop_map(|(i, c)| Step::Cap(i, c)),
    ]
}

proptest! {
    /// A resource's flow list (in place up to `INLINE`, spilled beyond) keeps insertion
    /// order through any adds and removals, as a plain list would.
    #[test]
    fn flow_lists_keep_insertion_order(ops in prop::collection::vec((any::<bool>(), 0u32..8), 1..60)) {
        let mut m = MaxMin::new(vec![1.0, 1.0]);
        let mut model: Vec<u32> = Vec::new();
        for (add, k) in ops {
            if add {
                let id = m.add(Path::new(&[1]), f64::INFINITY);
                model.push(id);
            } else if !model.is_empty() {
                let id = model.remove(k as usize % model.len());
                m.remove(id);
            }
            prop_assert_eq!(flows_on(&m.on, &m.spill, 1), &model[..]);
            prop_assert_eq!(m.on[1].len as usize, model.len());
            prop_assert!(flows_on(&m.on, &m.spill, 0).is_empty());
        }
    }
}

proptest! {
    /// Weighted max-min fairness holds for any flows: no resource is over capacity, and
    /// every flow is at its cap or crosses a full resource on which no flow has a larger
    /// rate per unit of weight (so it could only grow by taking from a flow with no more
    /// per weight than itself).
    #[test]
    fn weighted_rates_are_weighted_max_min_fair(
        caps in prop::collection::vec(1u8..50, 4),
        flows in prop::collection::vec(
            (prop::collection::vec(0u32..4, 1..4), prop::option::of(1u8..20), 1u8..8),
            1..12,
        ),
    ) {
        let caps: Vec<f64> = caps.into_iter().map(f64::from).collect();
        let flows: Vec<(Vec<u32>, f64, f64)> = flows
            .into_iter()
            .map(|(mut p, c, w)| {
                p.sort_unstable();
                p.dedup();
                (p, c.map_or(f64::INFINITY, f64::from), f64::from(w) / 4.0)
            })
            .collect();
        let args: Vec<(&[u32], f64, f64)> =
            flows.iter().map(|(p, c, w)| (p.as_slice(), *c, *w)).collect();
        let rates = solve_weighted(&caps, &args);
        let tol = 1e-9;
        let used = |r: usize| -> f64 {
            flows
                .iter()
                .zip(&rates)
                .filter(|((p, _, _), _)| p.contains(&(r as u32)))
                .map(|(_, x)| x)
                .sum()
        };
        for (r, &c) in caps.iter().enumerate() {
            prop_assert!(used(r) <= c * (1.0 + tol), "resource {} uses {} of {}", r, used(r), c);
        }
        for (i, ((p, cap, w), &x)) in flows.iter().zip(&rates).enumerate() {
            let at_cap = x >= cap * (1.0 - tol);
            let bottleneck = p.iter().any(|&r| {
                let r = r as usize;
                let full = used(r) >= caps[r] * (1.0 - tol);
                let top = flows.iter().zip(&rates).all(|((q, _, v), &y)| {
                    !q.contains(&(r as u32)) || y / v <= x / w * (1.0 + tol)
                });
                full && top
            });
            prop_assert!(at_cap || bottleneck, "flow {} ({:?}, rate {}) is neither capped nor bottlenecked: {:?}", i, p, x, rates);
        }
    }
}

proptest! {
    /// After any sequence of changes, the incrementally maintained rates equal a fresh
    /// solve of the same flows from scratch.
    #[test]
    fn incremental_equals_full_recompute(
        caps in prop::collection::vec(1u8..50, 6),
        steps in prop::collection::vec(step(), 1..40),
    ) {
        let caps: Vec<f64> = caps.into_iter().map(f64::from).collect();
        let mut m = MaxMin::new(caps.clone());
        let mut live: Vec<(u32, Vec<u32>, f64)> = Vec::new();
        let mut changed = Vec::new();
        for (i, s) in steps.iter().enumerate() {
            match s {
                Step::Add(p, c) => {
                    let mut p = p.clone();
                    p.sort_unstable();
                    p.dedup();
                    let cap = c.map_or(f64::INFINITY, f64::from);
                    let id = m.add(Path::new(&p), cap);
                    live.push((id, p, cap));
                }
                Step::Remove(k) if !live.is_empty() => {
                    let (id, _, _) = live.remove(k % live.len());
                    m.remove(id);
                }
                Step::Cap(k, c) if !live.is_empty() => {
                    let k = k % live.len();
                    live[k].2 = f64::from(*c);
                    m.set_cap(live[k].0, f64::from(*c));
                }
                _ => {}
            }
            // Resolve after some steps only, so batches of changes are exercised too.
            if i % 3 != 1 {
                changed.clear();
                m.resolve(&mut changed);
            }
        }
        changed.clear();
        m.resolve(&mut changed);
        let flows: Vec<(&[u32], f64)> =
            live.iter().map(|(_, p, c)| (p.as_slice(), *c)).collect();
        let full = solve(&caps, &flows);
        let inc: Vec<f64> = live.iter().map(|(id, _, _)| m.rate(*id)).collect();
        // Flows over no resource and without a cap are unbounded in both.
        prop_assert!(close(&inc, &full), "{:?} vs {:?}", inc, full);
        // Max-min feasibility: no resource over capacity.
        for (r, &c) in caps.iter().enumerate() {
            let used: f64 = live
                .iter()
                .filter(|(_, p, _)| p.contains(&(r as u32)))
                .map(|(id, _, _)| m.rate(*id))
                .sum();
            prop_assert!(used <= c * (1.0 + 1e-9), "resource {} uses {} of {}", r, used, c);
        }
    }
}
