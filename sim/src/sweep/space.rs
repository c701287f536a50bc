//! The layouts a sweep visits, as lists of `--set` overrides: the cartesian product of
//! `--vary KEY=VALUES` axes, or (`--search`) every way to lay the scenario's GPUs out as
//! tp x pp x dp with a virtual-pipeline depth, micro batch, recompute mode and ZeRO stage.
//! Enumeration is cheap and deterministic; whether a layout is valid is left to scenario
//! validation, which explains nothing here but counts what it rejects.

use crate::scenario::{moe_a2a_overlap_blocker, PipelineSchedule, Recompute, Scenario};

fn u32_of(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// One `--vary` axis: a scenario key and the values it takes (TOML value syntax).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Axis {
    pub key: String,
    pub values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--vary {text}: {message}; allowed: KEY=V1,V2,... or KEY=A..B (integers A to B inclusive), e.g. parallel.tp=1,2,4,8 or parallel.pp=1..16")]
pub struct AxisError {
    pub text: String,
    pub message: String,
}

/// Most values one `A..B` range may expand to.
pub const MAX_RANGE: u64 = 4096;

/// Parses `KEY=V1,V2,...` or `KEY=A..B`.
pub fn parse_axis(text: &str) -> Result<Axis, AxisError> {
    let fail = |message: &str| AxisError {
        text: text.to_string(),
        message: message.to_string(),
    };
    let (key, values) = text
        .split_once('=')
        .ok_or_else(|| fail("expected KEY=VALUES"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(fail("empty key"));
    }
    let values = values.trim();
    let list: Vec<String> = match values.split_once("..") {
        Some((a, b)) if !values.contains(',') => {
            let (a, b) = match (a.trim().parse::<u64>(), b.trim().parse::<u64>()) {
                (Ok(a), Ok(b)) => (a, b),
                _ => return Err(fail("a range needs two non-negative integers")),
            };
            if a > b || b - a >= MAX_RANGE {
                return Err(fail(
                    "a range goes from a smaller to a larger integer, at most 4096 values",
                ));
            }
            (a..=b).map(|v| v.to_string()).collect()
        }
        _ => values
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    };
    if list.is_empty() {
        return Err(fail("no values"));
    }
    Ok(Axis {
        key: key.to_string(),
        values: list,
    })
}

/// Every combination of the axes' values (the first axis varies slowest), as overrides.
pub fn product(axes: &[Axis]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = vec![Vec::new()];
    for axis in axes {
        let mut next = Vec::with_capacity(out.len() * axis.values.len());
        for prefix in &out {
            for v in &axis.values {
                let mut o = prefix.clone();
                o.push(format!("{}={}", axis.key, v));
                next.push(o);
            }
        }
        out = next;
    }
    out
}

/// When a layout sets tp, pp or cp but not dp, appends `parallel.dp=` the GPU count over
/// tp*pp*cp (values the layout does not set come from `base`), so that `--vary
/// parallel.pp=1..16` alone moves GPUs between pipeline and data parallelism. A layout whose
/// product does not divide the GPU count is left alone (validation then rejects it).
pub fn derive_dp(base: &Scenario, layouts: &mut [Vec<String>]) {
    let p = &base.parallel;
    for l in layouts.iter_mut() {
        let get = |key: &str| -> Option<Option<u64>> {
            l.iter()
                .rev()
                .find_map(|o| o.strip_prefix(&format!("parallel.{key}=")))
                .map(|v| v.trim().parse::<u64>().ok())
        };
        if get("dp").is_some() {
            continue;
        }
        let axes = [("tp", p.tp), ("pp", p.pp), ("cp", p.cp)];
        if axes.iter().all(|(k, _)| get(k).is_none()) {
            continue;
        }
        let mut product = 1u64;
        for (key, default) in axes {
            match get(key) {
                Some(Some(v)) => product = product.saturating_mul(v),
                Some(None) => product = 0,
                None => product = product.saturating_mul(u64::from(default)),
            }
        }
        let gpus = u64::from(base.cluster.gpus);
        if product > 0 && gpus % product == 0 {
            l.push(format!("parallel.dp={}", gpus / product));
        }
    }
}

fn divisors(n: u64) -> Vec<u64> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

/// What `--search` varies, with its defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchSpace {
    pub micro_batches: Vec<u64>,
    pub recompute: Vec<&'static str>,
    pub zero: Vec<u8>,
    /// Virtual pipeline depths tried (> 1 uses the interleaved-1f1b schedule).
    pub vpp: Vec<u32>,
}

impl Default for SearchSpace {
    fn default() -> Self {
        SearchSpace {
            micro_batches: vec![1, 2, 4, 8],
            recompute: vec!["none", "selective", "full"],
            zero: vec![0, 1, 2, 3],
            vpp: vec![1, 2, 4, 8],
        }
    }
}

/// Every layout of `base`'s GPU count (cp kept as it is): tp dividing the heads, pp dividing the
/// layers, dp the rest; for a mixture of experts each expert layout ([`expert_layouts`]); then
/// each vpp (with vpp 1 on an even pp also DualPipe, [`schedules`]), micro batch (for
/// DualPipe those leaving an even count of at least `2 pp`), recompute and ZeRO stage; for a mixture of experts, then
/// `moe_a2a_overlap` off, and on where validation accepts it
/// ([`moe_a2a_overlap_blocker`]: ep > 1, no pipeline, an interleaved one or DualPipe, no full
/// recomputation, a framework that can).
/// Combinations that cannot work for arithmetic reasons (pp*vpp not dividing the layers, a
/// micro batch that does not divide the per-replica batch) and layouts `base`'s framework
/// cannot launch (its file's `cannot_run` limits) are not generated; the rest are left to
/// scenario validation.
pub fn search(base: &Scenario, space: &SearchSpace) -> Vec<Vec<String>> {
    let p = &base.parallel;
    let m = &base.model;
    let gpus = u64::from(base.cluster.gpus);
    let fixed = u64::from(p.cp);
    if fixed == 0 || gpus % fixed != 0 {
        return Vec::new();
    }
    let rest = gpus / fixed;
    let non_interleaved = match p.schedule {
        PipelineSchedule::Interleaved1F1B => PipelineSchedule::OneFOneB,
        other => other,
    };
    let limits = !base.training.framework.cannot_run.is_empty();
    let moe = base.model.moe.is_some();
    let mut candidate = base.clone();
    let mut out = Vec::new();
    for tp in divisors(rest) {
        if u64::from(m.heads) % tp != 0 {
            continue;
        }
        for pp in divisors(rest / tp) {
            let dp = rest / tp / pp;
            for (ep, etp) in expert_layouts(base, tp, dp) {
                for (vpp, schedule) in schedules(space, pp, non_interleaved) {
                    let chunks = pp * u64::from(vpp);
                    if u64::from(m.layers) % chunks != 0 || (vpp > 1 && pp == 1) {
                        continue;
                    }
                    for &mb in &space.micro_batches {
                        if !base.training.global_batch.is_multiple_of(mb * dp)
                            || !fits(schedule, base.training.global_batch / (mb * dp), pp)
                        {
                            continue;
                        }
                        for rc in &space.recompute {
                            for &zero in &space.zero {
                                if limits || moe {
                                    let c = &mut candidate.parallel;
                                    (c.tp, c.pp, c.dp, c.vpp) =
                                        (u32_of(tp), u32_of(pp), u32_of(dp), vpp);
                                    (c.ep, c.etp) = (ep, Some(etp));
                                    (c.schedule, c.zero, c.fsdp) = (schedule, zero, false);
                                    c.sequence_parallel = tp > 1;
                                    c.fsdp_degree = c.fsdp_degree.map(|_| u32_of(dp));
                                    candidate.training.micro_batch = mb;
                                    candidate.training.recompute = recompute_of(rc);
                                }
                                if limits && base.training.framework.refusal(&candidate).is_some() {
                                    continue;
                                }
                                let mut layout = vec![
                                    format!("parallel.tp={tp}"),
                                    format!("parallel.pp={pp}"),
                                    format!("parallel.dp={dp}"),
                                    format!("parallel.vpp={vpp}"),
                                    format!("parallel.schedule=\"{}\"", schedule.as_str()),
                                    format!("parallel.zero={zero}"),
                                    "parallel.fsdp=false".to_string(),
                                    format!("parallel.sequence_parallel={}", tp > 1),
                                    format!("training.micro_batch={mb}"),
                                    format!("training.recompute=\"{rc}\""),
                                ];
                                if moe {
                                    layout.push(format!("parallel.ep={ep}"));
                                    layout.push(format!("parallel.etp={etp}"));
                                }
                                // The search proposes plain FSDP only: a base's HSDP degree
                                // becomes the whole dp of each layout.
                                if p.fsdp_degree.is_some() {
                                    layout.push(format!("parallel.fsdp_degree={dp}"));
                                }
                                if !moe {
                                    out.push(layout);
                                    continue;
                                }
                                // Both settings of the all-to-all overlap, each written out so
                                // that a base's own setting does not carry over.
                                let overlap = moe_a2a_overlap_blocker(&candidate).is_none();
                                for on in [false, true] {
                                    if on && !overlap {
                                        continue;
                                    }
                                    let mut l = layout.clone();
                                    l.push(format!("training.moe_a2a_overlap={on}"));
                                    out.push(l);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// The (vpp, schedule) pairs tried for a pipeline of `pp` stages: each vpp of the space (> 1:
/// interleaved-1f1b, 1: `plain`), and with vpp 1 on an even pp also DualPipe.
fn schedules(
    space: &SearchSpace,
    pp: u64,
    plain: PipelineSchedule,
) -> Vec<(u32, PipelineSchedule)> {
    let mut out = Vec::with_capacity(space.vpp.len() + 1);
    for &vpp in &space.vpp {
        if vpp > 1 {
            out.push((vpp, PipelineSchedule::Interleaved1F1B));
            continue;
        }
        out.push((vpp, plain));
        if pp >= 2 && pp.is_multiple_of(2) && plain != PipelineSchedule::DualPipe {
            out.push((vpp, PipelineSchedule::DualPipe));
        }
    }
    out
}

/// Whether `m` micro batches per pipeline of `pp` stages suit `schedule`: DualPipe needs them
/// even and at least `2 pp`; the others take any count here.
fn fits(schedule: PipelineSchedule, m: u64, pp: u64) -> bool {
    schedule != PipelineSchedule::DualPipe || (m.is_multiple_of(2) && m >= 2 * pp)
}

/// A recompute name of the search space as the scenario's value (a name that is none of
/// these is left to validation, which refuses it; it counts as no recomputation here).
fn recompute_of(name: &str) -> Recompute {
    match name {
        "full" => Recompute::Full,
        "selective" => Recompute::Selective,
        _ => Recompute::None,
    }
}

/// The expert layouts `--search` tries for one tp and dp, as (ep, etp): the base's ep for a
/// dense model (it stays 1); for a mixture of experts every ep dividing both dp and the
/// experts with the experts split like the MLP (etp = tp), and, under tensor parallelism,
/// every ep dividing both tp*dp and the experts with whole experts (etp = 1, which refolds the
/// tensor-parallel ranks and needs cp = 1).
fn expert_layouts(base: &Scenario, tp: u64, dp: u64) -> Vec<(u32, u32)> {
    let Some(moe) = &base.model.moe else {
        return vec![(base.parallel.ep, u32_of(tp))];
    };
    let experts = u64::from(moe.experts);
    let mut out: Vec<(u32, u32)> = divisors(dp)
        .into_iter()
        .filter(|ep| experts.is_multiple_of(*ep))
        .map(|ep| (u32_of(ep), u32_of(tp)))
        .collect();
    if tp > 1 && base.parallel.cp == 1 {
        out.extend(
            divisors(tp * dp)
                .into_iter()
                .filter(|ep| experts.is_multiple_of(*ep))
                .map(|ep| (u32_of(ep), 1)),
        );
    }
    out
}

/// A shard `i/n` (0-based): the layouts whose index is `i` modulo `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--shard {0}: expected I/N with 0 <= I < N, e.g. 0/4 .. 3/4")]
pub struct ShardError(pub String);

impl Shard {
    pub fn parse(text: &str) -> Result<Shard, ShardError> {
        let bad = || ShardError(text.to_string());
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count) = match (i.trim().parse::<u32>(), n.trim().parse::<u32>()) {
            (Ok(i), Ok(n)) if n > 0 && i < n => (i, n),
            _ => return Err(bad()),
        };
        Ok(Shard { index, count })
    }

    /// Whether the layout at `position` belongs to this shard.
    pub fn holds(&self, position: usize) -> bool {
        position % self.count as usize == self.index as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::small_scenario;

    #[test]
    fn axes_parse_lists_and_ranges() {
        assert_eq!(
            parse_axis("parallel.tp=1,2,4").unwrap().values,
            vec!["1", "2", "4"]
        );
        assert_eq!(parse_axis("parallel.pp=1..4").unwrap().values.len(), 4);
        assert_eq!(
            parse_axis("training.recompute=none,\"full\"")
                .unwrap()
                .values,
            vec!["none", "\"full\""]
        );
        for bad in ["parallel.tp", "=1", "parallel.pp=4..1", "x=", "x=1..99999"] {
            assert!(parse_axis(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn product_is_cartesian_first_axis_slowest() {
        let a = parse_axis("a=1,2").unwrap();
        let b = parse_axis("b=x,y,z").unwrap();
        let p = product(&[a, b]);
        assert_eq!(p.len(), 6);
        assert_eq!(p[0], vec!["a=1", "b=x"]);
        assert_eq!(p[1], vec!["a=1", "b=y"]);
        assert_eq!(p[5], vec!["a=2", "b=z"]);
        assert_eq!(product(&[]), vec![Vec::<String>::new()]);
    }

    #[test]
    fn dp_follows_the_other_axes_unless_varied() {
        let s = small_scenario(2, 2, 4, 8); // 16 GPUs
        let mut l = product(&[
            parse_axis("parallel.pp=1,2,3").unwrap(),
            parse_axis("training.micro_batch=1").unwrap(),
        ]);
        derive_dp(&s, &mut l);
        assert_eq!(l[0].last().unwrap(), "parallel.dp=8"); // 16 / (tp 2 * pp 1)
        assert_eq!(l[1].last().unwrap(), "parallel.dp=4");
        assert_eq!(l[2].last().unwrap(), "training.micro_batch=1"); // 3 does not divide
        let mut given = product(&[
            parse_axis("parallel.dp=2").unwrap(),
            parse_axis("parallel.tp=1").unwrap(),
        ]);
        derive_dp(&s, &mut given);
        assert_eq!(given[0].len(), 2, "an explicit dp is kept");
        let mut other = product(&[parse_axis("training.micro_batch=1,2").unwrap()]);
        derive_dp(&s, &mut other);
        assert!(other.iter().all(|o| o.len() == 1), "no mesh axis varied");
    }

    #[test]
    fn search_layouts_cover_the_gpus_exactly() {
        let s = small_scenario(2, 2, 4, 8);
        let layouts = search(&s, &SearchSpace::default());
        assert!(!layouts.is_empty());
        for l in &layouts {
            let get = |k: &str| -> u64 {
                l.iter()
                    .find_map(|o| o.strip_prefix(&format!("parallel.{k}=")))
                    .unwrap()
                    .parse()
                    .unwrap()
            };
            assert_eq!(get("tp") * get("pp") * get("dp"), 16);
            assert_eq!(u64::from(s.model.layers) % (get("pp") * get("vpp")), 0);
        }
        let mut sorted = layouts.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), layouts.len(), "no duplicates");
        assert!(layouts.iter().flatten().all(|o| !o.contains("fsdp_degree")));
    }

    /// From an HSDP base the search proposes plain FSDP: fsdp_degree = each layout's dp.
    #[test]
    fn search_from_hsdp_sets_fsdp_degree_to_dp() {
        let mut s = small_scenario(2, 2, 4, 8);
        s.parallel.fsdp = true;
        s.parallel.zero = 3;
        s.parallel.fsdp_degree = Some(2);
        let layouts = search(&s, &SearchSpace::default());
        assert!(!layouts.is_empty());
        for l in &layouts {
            let dp = l
                .iter()
                .find_map(|o| o.strip_prefix("parallel.dp="))
                .unwrap();
            assert_eq!(l.last().unwrap(), &format!("parallel.fsdp_degree={dp}"));
        }
    }

    /// A mixture of experts: the search varies ep (dividing dp and the experts) with the experts
    /// split like the MLP, and, under tensor parallelism, ep over tp*dp with whole experts.
    #[test]
    fn search_varies_expert_parallelism_for_a_mixture_of_experts() {
        let mut s = small_scenario(2, 1, 8, 8);
        let f = s.model.ffn_hidden;
        s.model.moe = Some(crate::scenario::Moe::uniform(8, 2, 1, f));
        let layouts = search(&s, &SearchSpace::default());
        let get = |l: &Vec<String>, k: &str| -> u64 {
            l.iter()
                .find_map(|o| o.strip_prefix(&format!("parallel.{k}=")))
                .unwrap()
                .parse()
                .unwrap()
        };
        let mut seen = std::collections::BTreeSet::new();
        for l in &layouts {
            let (tp, dp, ep, etp) = (get(l, "tp"), get(l, "dp"), get(l, "ep"), get(l, "etp"));
            assert_eq!(8 % ep, 0, "{l:?}");
            if etp == tp {
                assert_eq!(dp % ep, 0, "{l:?}");
            } else {
                assert_eq!((etp, (tp * dp) % ep), (1, 0), "{l:?}");
            }
            seen.insert((tp, ep, etp));
        }
        assert!(seen.contains(&(2, 4, 2)));
        assert!(seen.contains(&(2, 8, 1)));
        assert!(seen.contains(&(1, 8, 1)));
        // A dense model's layouts do not name ep, etp or moe_a2a_overlap.
        let dense = search(&small_scenario(2, 1, 8, 8), &SearchSpace::default());
        assert!(dense.iter().flatten().all(|o| !o.starts_with("parallel.ep")
            && !o.starts_with("parallel.etp")
            && !o.starts_with("training.moe_a2a_overlap")));
    }

    /// DualPipe is proposed with vpp 1 on every even pipeline, never on an odd one or
    /// beside vpp > 1; for a mixture of experts with the all-to-all overlap too.
    #[test]
    fn search_proposes_dualpipe_on_even_pipelines() {
        let s = small_scenario(2, 2, 4, 8);
        let layouts = search(&s, &SearchSpace::default());
        let has = |l: &Vec<String>, o: &str| l.iter().any(|x| x == o);
        let dual: Vec<&Vec<String>> = layouts
            .iter()
            .filter(|l| has(l, "parallel.schedule=\"dualpipe\""))
            .collect();
        assert!(!dual.is_empty());
        for l in &dual {
            assert!(has(l, "parallel.vpp=1"), "{l:?}");
            let pp: u64 = l
                .iter()
                .find_map(|o| o.strip_prefix("parallel.pp="))
                .unwrap()
                .parse()
                .unwrap();
            assert!(pp >= 2 && pp.is_multiple_of(2), "{l:?}");
        }
        let mut moe = small_scenario(1, 2, 4, 8);
        let f = moe.model.ffn_hidden;
        moe.model.moe = Some(crate::scenario::Moe::uniform(8, 2, 1, f));
        let layouts = search(&moe, &SearchSpace::default());
        assert!(layouts
            .iter()
            .any(|l| has(l, "parallel.schedule=\"dualpipe\"")
                && has(l, "parallel.ep=2")
                && has(l, "training.moe_a2a_overlap=true")));
    }

    #[test]
    fn shards_partition_the_layouts() {
        let shards: Vec<Shard> = (0..3)
            .map(|i| Shard::parse(&format!("{i}/3")).unwrap())
            .collect();
        for pos in 0..20 {
            assert_eq!(shards.iter().filter(|s| s.holds(pos)).count(), 1);
        }
        for bad in ["3/3", "1", "a/b", "0/0"] {
            assert!(Shard::parse(bad).is_err());
        }
    }
}
