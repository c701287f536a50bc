//! Sweep tests on the small scenario: invalid layouts counted, rows equal to direct
//! predictions, shards merging (through JSON) into the whole sweep, CSV shape, and the
//! model-state prefilter never dropping a layout that fits.

use super::*;
use std::collections::BTreeSet;

fn source() -> ScenarioSource {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/small.toml");
    ScenarioSource::read(&path).unwrap()
}

fn numbered(layouts: Vec<Vec<String>>) -> Vec<(usize, Vec<String>)> {
    layouts.into_iter().enumerate().collect()
}

#[test]
fn vary_sweep_counts_invalid_layouts_and_ranks_the_rest() {
    let src = source();
    let axes = [
        parse_axis("parallel.tp=1,2,3").unwrap(),
        parse_axis("parallel.dp=2").unwrap(),
        parse_axis("training.micro_batch=1,2").unwrap(),
    ];
    let layouts = product(&axes);
    assert_eq!(layouts.len(), 6);
    let r = run(
        &src,
        "small",
        numbered(layouts),
        Objective::TokensPerS,
        &Pricing::Machine,
        &|| {},
    );
    // small.toml has 8 GPUs, pp 2: only tp = 2 makes tp*pp*dp = 8.
    assert_eq!(r.invalid, 4);
    assert_eq!(r.rows.len(), 2);
    assert!(r.rows.iter().all(|row| row.tp == 2));
    let ranked = r.ranked();
    for w in ranked.windows(2) {
        assert!(w[0].tokens_per_s >= w[1].tokens_per_s);
    }
    // Each row equals a direct collapsed prediction of its overrides.
    for row in &r.rows {
        let s = src.resolve(&row.override_strings()).unwrap();
        let full = crate::predict(&s, &crate::PredictOptions::default()).unwrap();
        assert_eq!(row.step_time_s, full.report.step_time_s);
        assert_eq!(row.peak_memory_bytes, full.report.peak_memory_bytes);
    }
}

#[test]
fn shards_merge_into_the_whole_sweep() {
    let src = source();
    let s = src.resolve(&[]).unwrap();
    let layouts = numbered(search(&s, &SearchSpace::layouts_only()));
    let whole = run(
        &src,
        "small",
        layouts.clone(),
        Objective::Mfu,
        &Pricing::Machine,
        &|| {},
    );
    let parts: Vec<SweepResult> = (0..3)
        .map(|i| {
            let shard = Shard { index: i, count: 3 };
            let mine = layouts
                .iter()
                .filter(|(p, _)| shard.holds(*p))
                .cloned()
                .collect();
            run(
                &src,
                "small",
                mine,
                Objective::Mfu,
                &Pricing::Machine,
                &|| {},
            )
        })
        .collect();
    // Through JSON, as the files a batch system would hand back.
    let parts = parts
        .iter()
        .map(|p| serde_json::from_str::<SweepResult>(&p.to_json().unwrap()).unwrap())
        .collect();
    let merged = SweepResult::merge(parts).unwrap();
    assert_eq!(
        (
            merged.layouts,
            merged.invalid,
            merged.failed,
            merged.rows.len()
        ),
        (whole.layouts, whole.invalid, whole.failed, whole.rows.len())
    );
    for (a, b) in merged.rows.iter().zip(&whole.rows) {
        assert_eq!(a, b);
    }
    assert_eq!(merged, whole);
    assert!(SweepResult::merge(vec![whole.clone(), whole.clone()]).is_err());
}

#[test]
fn csv_has_one_line_per_row_and_ranks_first() {
    let src = source();
    let layouts = product(&[parse_axis("training.micro_batch=1,2,4").unwrap()]);
    let r = run(
        &src,
        "small",
        numbered(layouts),
        Objective::StepTime,
        &Pricing::Machine,
        &|| {},
    );
    let csv = r.to_csv().unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], CSV_HEADER);
    assert_eq!(lines.len(), 1 + r.rows.len());
    let cols = CSV_HEADER.split(',').count();
    assert!(lines[1].starts_with("1,"));
    for l in &lines[1..] {
        // overrides hold no commas, so a plain split counts the columns.
        assert_eq!(l.split(',').count(), cols, "{l}");
    }
}

#[test]
fn layouts_skipped_for_model_state_really_do_not_fit() {
    let mut src = source();
    assert!(src.text.contains("hbm_bytes = 16_000_000_000"));
    // 24 MB of HBM: some layouts' model state alone is larger, some fit, some not.
    src.text = src
        .text
        .replace("hbm_bytes = 16_000_000_000", "hbm_bytes = 24_000_000");
    // No framework reserve, so that model state decides what fits at this tiny HBM.
    assert!(!src.text.contains("[memory]"));
    src.text.push_str("\n[memory]\nreserved_bytes = 0\n");
    let s = src.resolve(&[]).unwrap();
    let r = run(
        &src,
        "small",
        numbered(search(&s, &SearchSpace::layouts_only())),
        Objective::TokensPerS,
        &Pricing::Machine,
        &|| {},
    );
    let skipped: Vec<&SweepRow> = r.rows.iter().filter(|x| !x.simulated).collect();
    assert!(!skipped.is_empty());
    assert!(r.rows.iter().any(|x| x.simulated && x.fits));
    assert!(r.rows.iter().any(|x| x.simulated && !x.fits));
    for row in skipped {
        assert!(!row.fits);
        let s = src.resolve(&row.override_strings()).unwrap();
        let full = crate::predict(&s, &crate::PredictOptions::default()).unwrap();
        assert!(!full.report.fits, "{:?}", row.overrides);
        assert!(full.report.peak_memory_bytes >= row.peak_memory_bytes);
    }
}

/// Compiled programs' buffers are reused across runs on a thread (`engine::compile`): every
/// layout of a search, each simulated after the others on one thread, gives exactly the row
/// it gives simulated first on a fresh thread.
#[test]
fn a_layout_simulated_after_others_equals_one_simulated_fresh() {
    let src = source();
    let s = src.resolve(&[]).unwrap();
    let layouts = numbered(search(&s, &SearchSpace::layouts_only()));
    assert!(layouts.len() > 4);
    let parsed = src.parse().unwrap();
    let row = |o: Outcome| match o {
        Outcome::Row(r) => Some(*r),
        Outcome::Invalid | Outcome::Failed(_) => None,
    };
    // One thread, every layout in turn (largest programs first, so later ones reuse bigger
    // buffers than they need, then the reverse order too).
    let mut reused: Vec<Option<SweepRow>> = layouts
        .iter()
        .rev()
        .map(|(i, o)| row(evaluate(&parsed, &Pricing::Machine, *i, o.clone())))
        .collect();
    reused.reverse();
    let again: Vec<Option<SweepRow>> = layouts
        .iter()
        .map(|(i, o)| row(evaluate(&parsed, &Pricing::Machine, *i, o.clone())))
        .collect();
    let mut simulated = 0;
    for ((i, o), (a, b)) in layouts.iter().zip(reused.iter().zip(&again)) {
        let fresh = std::thread::scope(|sc| {
            sc.spawn(|| row(evaluate(&parsed, &Pricing::Machine, *i, o.clone())))
                .join()
                .unwrap()
        });
        assert_eq!(a, &fresh, "layout {i}");
        assert_eq!(b, &fresh, "layout {i}");
        simulated += usize::from(fresh.as_ref().is_some_and(|r| r.simulated));
    }
    assert!(simulated > 4, "only {simulated} layouts were simulated");
}

/// `--search` proposes only layouts the framework can launch: on the 512-GPU scenario,
/// megatron-core's search includes ZeRO-3 with pipeline parallelism, DeepSpeed's (whose
/// pipeline engine refuses ZeRO-2 and -3) none of ZeRO 2-3 with pp > 1, and it drops nothing
/// else. Every layout it keeps resolves under deepspeed.
#[test]
fn search_proposes_only_layouts_the_framework_can_launch() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/512xA100.toml");
    let layouts = |overrides: &[String]| -> Vec<Vec<String>> {
        let base = ScenarioSource::read(&path)
            .unwrap()
            .resolve(overrides)
            .unwrap();
        search(&base, &SearchSpace::layouts_only())
    };
    let get = |l: &[String], k: &str| -> u64 {
        l.iter()
            .find_map(|o| o.strip_prefix(&format!("parallel.{k}=")))
            .unwrap()
            .parse()
            .unwrap()
    };
    let zero_with_pp = |l: &Vec<String>| get(l, "zero") >= 2 && get(l, "pp") > 1;
    let megatron = layouts(&[]);
    let deepspeed = layouts(&["training.framework=\"deepspeed\"".to_string()]);
    assert!(megatron
        .iter()
        .any(|l| get(l, "zero") == 3 && get(l, "pp") > 1));
    assert!(!deepspeed.is_empty());
    assert!(!deepspeed.iter().any(zero_with_pp));
    // Only the refused layouts are dropped: deepspeed's search is megatron-core's without
    // them (the schedule limit does not bite: the search's vpp = 1 layouts keep 1f1b, and
    // vpp > 1 layouts all have pp > 1 and interleaved-1f1b, which deepspeed refuses too).
    let expected: Vec<&Vec<String>> = megatron
        .iter()
        .filter(|l| !zero_with_pp(l) && get(l, "vpp") == 1)
        .collect();
    assert_eq!(deepspeed.iter().collect::<Vec<_>>(), expected);
    let src = ScenarioSource::read(&path).unwrap();
    for l in deepspeed.iter().step_by(97) {
        let mut o = vec!["training.framework=\"deepspeed\"".to_string()];
        o.extend(l.iter().cloned());
        if let Err(e) = src.resolve(&o) {
            assert!(!e.to_string().contains("cannot launch"), "{e}");
        }
    }
}

/// small.toml as a mixture of experts: 8 experts, top 2.
fn moe_source() -> ScenarioSource {
    let mut src = source();
    assert!(src.text.contains("vocab = 1024\n"));
    src.text = src
        .text
        .replace("vocab = 1024\n", "vocab = 1024\nexperts = 8\ntop_k = 2\n");
    src
}

/// `--search` on a mixture of experts proposes `moe_a2a_overlap` off on every layout and on
/// exactly where Megatron-Core runs it (ep > 1, no pipeline or an interleaved one, no full
/// recomputation), each on layout next to its twin with the flag off. Over micro batches of 1
/// and 2 every layout it proposes validates; over the default space, which leaves some
/// layouts to validation (a micro batch that leaves too few per pipeline), the flag never
/// decides whether a layout validates.
#[test]
fn search_varies_moe_a2a_overlap_where_validation_accepts_it() {
    use crate::scenario::Recompute;
    let src = moe_source();
    let base = src.resolve(&[]).unwrap();
    let flag = |l: &[String]| -> bool {
        let v: Vec<&str> = l
            .iter()
            .filter_map(|o| o.strip_prefix("training.moe_a2a_overlap="))
            .collect();
        assert_eq!(v.len(), 1, "{l:?}");
        v[0].parse().unwrap()
    };
    let with_flag = |l: &[String], on: bool| -> Vec<String> {
        let mut l = l.to_vec();
        assert!(flag(&l) != on);
        *l.last_mut().unwrap() = format!("training.moe_a2a_overlap={on}");
        l
    };
    let accepted = |s: &Scenario| {
        let (p, t) = (&s.parallel, &s.training);
        p.ep > 1
            && (p.pp == 1 || p.vpp > 1 || p.schedule == crate::scenario::PipelineSchedule::DualPipe)
            && t.recompute != Recompute::Full
    };

    let small = SearchSpace {
        micro_batches: vec![1, 2],
        ..SearchSpace::layouts_only()
    };
    let layouts = search(&base, &small);
    let mut on = 0;
    for (i, l) in layouts.iter().enumerate() {
        let s = src
            .resolve(l)
            .unwrap_or_else(|e| panic!("{l:?} does not validate: {e}"));
        assert_eq!(s.training.moe_a2a_overlap, flag(l), "{l:?}");
        if flag(l) {
            on += 1;
            assert!(accepted(&s), "{l:?}");
            assert_eq!(layouts[i - 1], with_flag(l, false), "{l:?}");
        } else {
            let next = layouts.get(i + 1).filter(|n| flag(n));
            assert_eq!(next.is_some(), accepted(&s), "{l:?}");
            if let Some(n) = next {
                assert_eq!(n, &with_flag(l, true));
            }
        }
    }
    let off = layouts.len() - on;
    assert!(on > 0 && off > on, "{on} on, {off} off");
    // Some layouts leave the flag off for each reason: ep = 1, a 1F1B pipeline, full
    // recomputation.
    let off_where = |pred: &dyn Fn(&Scenario) -> bool| {
        layouts
            .iter()
            .filter(|l| !flag(l))
            .any(|l| pred(&src.resolve(l).unwrap()))
    };
    assert!(off_where(&|s| s.parallel.ep == 1));
    assert!(off_where(&|s| s.parallel.ep > 1
        && s.parallel.pp > 1
        && s.parallel.vpp == 1));
    assert!(off_where(&|s| s.parallel.ep > 1
        && s.parallel.pp == 1
        && s.training.recompute == Recompute::Full));

    // The layout space: a layout validates with the flag on exactly when it does with it off.
    let all = search(&base, &SearchSpace::layouts_only());
    let mut invalid = 0;
    for l in all.iter().filter(|l| flag(l)) {
        let off = src
            .resolve(&with_flag(l, false))
            .map(|_| ())
            .map_err(|e| e.to_string());
        let on = src.resolve(l).map(|_| ()).map_err(|e| e.to_string());
        assert_eq!(on, off, "{l:?}");
        invalid += usize::from(on.is_err());
    }
    assert!(invalid > 0);

    // A base that sets the flag searches the same layouts: each writes the flag out.
    let on_base = src
        .resolve(&[
            "training.moe_a2a_overlap=true".to_string(),
            "parallel.ep=2".to_string(),
            "parallel.pp=1".to_string(),
            "parallel.dp=4".to_string(),
        ])
        .unwrap();
    assert!(on_base.training.moe_a2a_overlap);
    assert_eq!(search(&on_base, &small), layouts);

    // Under a framework that cannot overlap, the flag stays off.
    let tt = src
        .resolve(&[
            "training.framework=\"torchtitan\"".to_string(),
            "parallel.zero=3".to_string(),
        ])
        .unwrap();
    let tt_layouts = search(&tt, &small);
    assert!(!tt_layouts.is_empty());
    assert!(tt_layouts.iter().all(|l| !flag(l)));
}

/// A layout that was not simulated has null figures in JSON (and reads back as before), empty
/// cells in CSV; a field holding commas or quotes is quoted so that the record still parses.
#[test]
fn unsimulated_figures_are_null_in_json_and_empty_in_csv() {
    let s = crate::testing::small_scenario(1, 2, 4, 8);
    let mut skipped = SweepRow::unsimulated(3, vec!["a=\"x,y\"".into()], &s, 7);
    skipped.fits = false;
    let mut fitting = SweepRow::fill(4, vec![], &s);
    fitting.simulated = true;
    fitting.fits = true;
    fitting.step_time_s = 0.5;
    fitting.tokens_per_s = 10.0;
    let result = SweepResult {
        scenario: "s,1".into(),
        objective: Objective::StepTime,
        layouts: 2,
        invalid: 0,
        failed: 0,
        first_failure: None,
        pruned: 0,
        rows: vec![skipped.clone(), fitting.clone()],
        pareto: vec![fitting.index],
    };
    let text = result.to_json().unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["schema"], "twin.sweep/1");
    assert_eq!(v["objective"], "step-time");
    let rows = v["rows"].as_array().unwrap();
    for key in [
        "step_time_s",
        "tokens_per_s",
        "mfu",
        "bubble_fraction",
        "exposed_comm_fraction",
    ] {
        assert!(rows[0][key].is_null(), "{key}: {}", rows[0]);
        assert!(rows[1][key].is_number(), "{key}: {}", rows[1]);
    }
    assert_eq!(rows[0]["peak_memory_bytes"], 7);
    let back: SweepResult = serde_json::from_str(&text).unwrap();
    assert_eq!(back, result);

    let csv = result.to_csv().unwrap();
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(header.join(","), CSV_HEADER);
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(records.len(), 2);
    // Ranked first: the fitting layout, rank 1; then the skipped one, unranked.
    assert_eq!(&records[0][col("rank")], "1");
    assert_eq!(&records[0][col("step_time_s")], "0.500000000");
    assert_eq!(&records[1][col("rank")], "");
    assert_eq!(&records[1][col("step_time_s")], "");
    assert_eq!(&records[1][col("tokens_per_s")], "");
    assert_eq!(&records[1][col("overrides")], "a=\"x,y\"");
    assert_eq!(&records[1][col("scenario")], "s,1");
}

#[test]
fn objectives_are_named_as_the_flag_takes_them_and_old_names_still_read() {
    for (o, name) in [
        (Objective::TokensPerS, "tokens-per-s"),
        (Objective::Mfu, "mfu"),
        (Objective::StepTime, "step-time"),
        (Objective::Memory, "memory"),
    ] {
        assert_eq!(o.name(), name);
        assert_eq!(serde_json::to_value(o).unwrap(), name);
    }
    let old: Objective = serde_json::from_str("\"tokens_per_s\"").unwrap();
    assert_eq!(old, Objective::TokensPerS);
}

/// The FP8 recipes a search tries are those the framework and the GPU can run: on H100s,
/// megatron-core's (Transformer Engine: delayed and current scaling, no rowwise) and
/// torchtitan's (torchao: tensorwise and rowwise, no delayed); on B200s MXFP8 besides.
#[test]
fn search_tries_the_fp8_recipes_the_framework_runs() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/512xA100.toml");
    let recipes = |framework: &str, gpu: &str| -> BTreeSet<String> {
        let overrides = vec![
            format!("cluster.gpu=\"{gpu}\""),
            format!("training.framework=\"{framework}\""),
            "parallel.zero=3".to_string(),
        ];
        let base = ScenarioSource::read(&path)
            .unwrap()
            .resolve(&overrides)
            .unwrap();
        search(&base, &SearchSpace::default())
            .iter()
            .flatten()
            .filter_map(|o| o.strip_prefix("training.fp8_recipe="))
            .map(|r| r.trim_matches('"').to_string())
            .collect()
    };
    let set = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<BTreeSet<_>>();
    let h100 = "h100-sxm-80gb";
    assert_eq!(
        recipes("megatron-core", h100),
        set(&["delayed", "tensorwise"])
    );
    assert_eq!(recipes("torchtitan", h100), set(&["rowwise", "tensorwise"]));
    // MXFP8 on Blackwell only.
    let b200 = "b200-sxm-180gb";
    assert_eq!(
        recipes("megatron-core", b200),
        set(&["delayed", "mxfp8", "tensorwise"])
    );
    assert_eq!(
        recipes("torchtitan", b200),
        set(&["mxfp8", "rowwise", "tensorwise"])
    );
}

/// A base's `overlap_p2p_comm` (interleaved schedules only) is written off where a layout's
/// schedule is not interleaved: over the default space of such a base no layout is refused
/// for it (nor for HSDP, nor for its layer split), and layouts with a pipeline and no
/// interleaving are proposed.
#[test]
fn search_writes_off_what_a_layout_cannot_carry() {
    let mut src = moe_source();
    src.text = src.text.replace(
        "schedule = \"1f1b\"\n",
        "schedule = \"interleaved-1f1b\"\nvpp = 2\n",
    );
    src.text = src.text.replace(
        "recompute = \"none\"\n",
        "recompute = \"none\"\noverlap_p2p_comm = true\n",
    );
    let base = src.resolve(&[]).unwrap();
    assert!(base.training.overlap_p2p_comm && base.parallel.vpp == 2);
    let layouts = search(&base, &SearchSpace::default());
    let mut piped = 0;
    for l in &layouts {
        match src.resolve(l) {
            Ok(s) => {
                assert!(
                    !s.training.overlap_p2p_comm
                        || s.parallel.schedule
                            == crate::scenario::PipelineSchedule::Interleaved1F1B,
                    "{l:?}"
                );
                piped += usize::from(s.parallel.pp > 1 && s.parallel.vpp == 1);
            }
            Err(e) => {
                let e = e.to_string();
                for word in ["overlap_p2p_comm", "HSDP", "do not split"] {
                    assert!(!e.contains(word), "{l:?}: {e}");
                }
            }
        }
    }
    assert!(
        piped > 0,
        "no pipeline without interleaving among {}",
        layouts.len()
    );
}

/// A sweep with `--set` overrides (or a search that drops the base's layer split) folds them
/// into the text every layout starts from; what the base leaves to a default that follows the
/// layout must stay a default there. On the 512-GPU scenario with an override, each searched
/// layout resolves from the folded text exactly as from the file with the override and the
/// layout's own: the gradient bucket follows each layout's dp (it was the base's 160 MB on
/// every layout, where dp 512 defaults to 2 GB), and `overlap_p2p_comm` each layout's
/// schedule (it was false, the 1F1B base's, on every interleaved layout).
#[test]
fn folded_overrides_leave_the_layouts_defaults_to_each_layout() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/512xA100.toml");
    let src = ScenarioSource::read(&path).unwrap();
    let overrides = ["training.micro_batch=1".to_string()];
    let req = SweepRequest {
        overrides: &overrides,
        search: true,
        space: Some(SearchSpace::layouts_only()),
        ..SweepRequest::default()
    };
    let plan = SweepPlan::new(src.clone(), &req).unwrap();
    let parsed = plan.source.parse().unwrap();
    let (mut buckets, mut p2p_overlaps) = (BTreeSet::new(), BTreeSet::new());
    let mut compared = 0;
    for i in plan.layouts.positions().step_by(7) {
        let layout = plan.layouts.overrides(i);
        let Ok(folded) = parsed.resolve(&layout) else {
            continue;
        };
        let all: Vec<String> = overrides.iter().chain(&layout).cloned().collect();
        let direct = src.resolve(&all).unwrap();
        assert_eq!(folded, direct, "layout {i}: {layout:?}");
        buckets.insert(folded.training.grad_bucket_bytes);
        p2p_overlaps.insert(folded.training.overlap_p2p_comm);
        compared += 1;
    }
    assert!(compared > 50, "only {compared} layouts compared");
    assert!(
        buckets.len() > 1,
        "one bucket size for every dp: {buckets:?}"
    );
    assert_eq!(p2p_overlaps.len(), 2);
}

/// A layout that fails keeps its reason: the result holds the failure of the lowest index
/// (whatever order threads and shards finish in, through JSON as shards travel), and the text
/// report prints it under the counts.
#[test]
fn the_first_failure_is_kept_with_its_reason() {
    let failure = |index: usize, reason: &str| {
        Outcome::Failed(FailedLayout {
            index,
            overrides: vec![format!("parallel.pp={index}")],
            reason: reason.to_string(),
        })
    };
    let mut a = SweepResult::empty("s", Objective::TokensPerS, 5);
    a.add(vec![failure(7, "deadlock at t = 5 ns"), Outcome::Invalid]);
    let mut b = SweepResult::empty("s", Objective::TokensPerS, 5);
    b.add(vec![failure(3, "too many events"), failure(9, "later")]);
    let through_json =
        |r: &SweepResult| serde_json::from_str::<SweepResult>(&r.to_json().unwrap()).unwrap();
    for parts in [vec![a.clone(), b.clone()], vec![b, a]] {
        let merged = SweepResult::merge(parts.iter().map(through_json).collect()).unwrap();
        assert_eq!(merged.failed, 3);
        let first = merged.first_failure.as_ref().unwrap();
        assert_eq!((first.index, first.reason.as_str()), (3, "too many events"));
        let text = merged.top_text(5);
        assert!(
            text.contains(
                "failed: layout 3 (--set parallel.pp=3): too many events (the first of 3)"
            ),
            "{text}"
        );
    }
    // None failed: no field in the JSON, no line in the text.
    let ok = SweepResult::empty("s", Objective::TokensPerS, 0);
    assert!(!ok.to_json().unwrap().contains("first_failure"));
    assert!(!ok.top_text(5).contains("failed:"));
}

/// The table's last column names what tells its rows apart beyond the columns (here the
/// offload and the data-parallel overlap), and nothing where the columns already do.
#[test]
fn the_table_names_what_the_columns_do_not_show() {
    let row = |index: usize, tp: u32, extra: &[&str]| {
        let mut overrides = vec![
            format!("parallel.tp={tp}"),
            format!("parallel.sequence_parallel={}", tp > 1),
            "parallel.zero=1".to_string(),
        ];
        overrides.extend(extra.iter().map(|s| s.to_string()));
        SweepRow {
            index,
            overrides: super::interned(overrides),
            tp,
            pp: 1,
            dp: 8 / tp,
            cp: 1,
            ep: 1,
            vpp: 1,
            micro_batch: 1,
            recompute: "none".into(),
            zero: 1,
            schedule: "1f1b".into(),
            precision: "bf16".into(),
            step_time_s: 1.0,
            tokens_per_s: 1.0,
            mfu: 0.5,
            peak_memory_bytes: 1 << 30,
            peak_memory_fraction: 0.1,
            bubble_fraction: 0.0,
            exposed_comm_fraction: 0.0,
            fits: true,
            simulated: true,
        }
    };
    let a = row(
        0,
        2,
        &[
            "training.offload=\"none\"",
            "training.overlap_grad_reduce=true",
        ],
    );
    let b = row(
        1,
        2,
        &[
            "training.offload=\"optimizer\"",
            "training.overlap_grad_reduce=true",
        ],
    );
    let c = row(
        2,
        4,
        &[
            "training.offload=\"none\"",
            "training.overlap_grad_reduce=false",
        ],
    );
    assert_eq!(
        super::distinctions(&[&a, &b, &c]),
        [
            "offload=none overlap_grad_reduce=true",
            "offload=optimizer overlap_grad_reduce=true",
            "offload=none overlap_grad_reduce=false"
        ]
    );
    assert_eq!(
        super::distinctions(&[&a, &c]),
        ["overlap_grad_reduce=true", "overlap_grad_reduce=false"]
    );
    // The columns tell a from a copy with another tp apart: nothing more to say.
    let mut d = a.clone();
    d.tp = 4;
    d.overrides[0] = "parallel.tp=4".into();
    d.overrides[1] = "parallel.sequence_parallel=true".into();
    assert_eq!(super::distinctions(&[&a, &d]), ["", ""]);
}

/// Rows made on one thread share each `--set` string they have in common (a search's rows
/// hold a few hundred distinct strings between millions of rows), and keep their text.
#[test]
fn rows_share_their_override_strings() {
    let a = super::interned(vec!["parallel.tp=2".into(), "parallel.pp=4".into()]);
    let b = super::interned(vec!["parallel.tp=2".into(), "parallel.pp=8".into()]);
    assert!(std::sync::Arc::ptr_eq(&a[0], &b[0]));
    assert!(!std::sync::Arc::ptr_eq(&a[1], &b[1]));
    assert_eq!(
        b.iter().map(|o| &**o).collect::<Vec<_>>(),
        ["parallel.tp=2", "parallel.pp=8"]
    );
}
