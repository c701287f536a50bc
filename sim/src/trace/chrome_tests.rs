use super::*;
use crate::schedule::Peer;
use serde_json::Value;

/// `ns` as its exact decimal number of microseconds, trailing zeros dropped but one digit
/// kept after the point (how JSON writes a whole float): the text the export must hold.
fn exact_micros(ns: u64) -> String {
    let frac = format!("{:03}", ns % 1000);
    let frac = frac.trim_end_matches('0');
    format!("{}.{}", ns / 1000, if frac.is_empty() { "0" } else { frac })
}

#[test]
fn micros_are_the_exact_decimal_and_read_back_to_the_nanosecond() {
    let text = |ns| serde_json::to_string(&Micros(ns)).unwrap();
    assert_eq!(text(0), "0.0");
    assert_eq!(text(1), "0.001");
    assert_eq!(text(1_500), "1.5");
    assert_eq!(text(1_234_567), "1234.567");
    // Every nanosecond of the first 20 µs, around the 16,384-GPU step (9.5 s), around 100
    // hours and just below 2^51 ns (26 days): the text is the exact decimal, and a reader's
    // round(us * 1000) is the time.
    let samples = (0..20_000)
        .chain(9_518_497_000_000 - 2_000..9_518_497_000_000 + 2_000)
        .chain(360_000_000_000_000 - 1_000..360_000_000_000_000 + 1_000)
        .chain((1 << 51) - 20_000..1 << 51);
    for ns in samples {
        let t = text(ns);
        assert_eq!(t, exact_micros(ns), "{ns} ns");
        let us: f64 = t.parse().unwrap();
        assert_eq!(
            (us * 1000.0).round() as u64,
            ns,
            "{ns} ns read back from {t}"
        );
    }
}

/// A slice's start and end (µs) and name.
type Slice = (f64, f64, String);

/// What the structural check found.
#[derive(Debug, Default)]
struct Shape {
    pids: BTreeSet<u64>,
    slices: usize,
    flows: usize,
    /// (send's pid, receive's pid) of every flow.
    flow_ends: Vec<(u64, u64)>,
}

/// Checks a Chrome trace the way a viewer reads it: every event has `ph`, `pid`, `tid` and a
/// `ts` >= 0; an "X" event has a name, a category and `dur` >= 0; every "s" has exactly one
/// "f" of the same id, name and category and both lie inside an "X" slice of their own
/// pid and tid (a send's and a receive's); every pid is named by a "process_name" and every
/// (pid, tid) with a slice by a "thread_name"; ids are unique.
fn check_structure(json: &str) -> Result<Shape, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    if v["displayTimeUnit"] != "ns" {
        return Err("displayTimeUnit is not ns".into());
    }
    let events = v["traceEvents"].as_array().ok_or("no traceEvents")?;
    let mut shape = Shape::default();
    let mut named_pids = BTreeSet::new();
    let mut named_threads = BTreeSet::new();
    // (pid, tid) -> [(start, end, name)] in microseconds.
    let mut slices: BTreeMap<(u64, u64), Vec<Slice>> = BTreeMap::new();
    let mut starts: BTreeMap<u64, &Value> = BTreeMap::new();
    let mut ends: BTreeMap<u64, &Value> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let ph = e["ph"].as_str().ok_or(format!("event {i}: no ph"))?;
        let pid = e["pid"].as_u64().ok_or(format!("event {i}: no pid"))?;
        let tid = e["tid"].as_u64().ok_or(format!("event {i}: no tid"))?;
        let ts = e["ts"].as_f64().ok_or(format!("event {i}: no ts"))?;
        if ts < 0.0 {
            return Err(format!("event {i}: ts {ts} < 0"));
        }
        shape.pids.insert(pid);
        match ph {
            "M" => match e["name"].as_str() {
                Some("process_name") => {
                    named_pids.insert(pid);
                }
                Some("thread_name") => {
                    named_threads.insert((pid, tid));
                }
                Some("process_sort_index" | "thread_sort_index") => {}
                other => return Err(format!("event {i}: metadata {other:?}")),
            },
            "X" => {
                let dur = e["dur"].as_f64().ok_or(format!("event {i}: no dur"))?;
                if dur < 0.0 {
                    return Err(format!("event {i}: dur {dur} < 0"));
                }
                let name = e["name"].as_str().ok_or(format!("event {i}: no name"))?;
                e["cat"].as_str().ok_or(format!("event {i}: no cat"))?;
                slices
                    .entry((pid, tid))
                    .or_default()
                    .push((ts, ts + dur, name.to_string()));
                shape.slices += 1;
            }
            "s" | "f" => {
                let id = e["id"].as_u64().ok_or(format!("event {i}: no id"))?;
                let side = if ph == "s" { &mut starts } else { &mut ends };
                if side.insert(id, e).is_some() {
                    return Err(format!("event {i}: flow id {id} repeats its {ph}"));
                }
                if ph == "f" && e["bp"] != "e" {
                    return Err(format!(
                        "event {i}: flow end does not bind its enclosing slice"
                    ));
                }
            }
            "C" => {
                if e["args"].as_object().is_none_or(|a| a.is_empty()) {
                    return Err(format!("event {i}: counter without series"));
                }
            }
            other => return Err(format!("event {i}: unexpected ph {other}")),
        }
    }
    if let Some(pid) = shape.pids.difference(&named_pids).next() {
        return Err(format!("pid {pid} has no process_name"));
    }
    if let Some(t) = slices.keys().find(|t| !named_threads.contains(t)) {
        return Err(format!("thread {t:?} has no thread_name"));
    }
    if starts.keys().ne(ends.keys()) {
        return Err("flow starts and ends differ in their ids".into());
    }
    let enclosing = |e: &Value| -> Option<String> {
        let key = (e["pid"].as_u64()?, e["tid"].as_u64()?);
        let ts = e["ts"].as_f64()?;
        slices
            .get(&key)?
            .iter()
            .find(|(a, b, _)| *a <= ts && ts <= *b)
            .map(|s| s.2.clone())
    };
    for (id, s) in &starts {
        let f = ends[id];
        if s["name"] != f["name"] || s["cat"] != f["cat"] {
            return Err(format!("flow {id}: name or category differ"));
        }
        match (enclosing(s), enclosing(f)) {
            (Some(a), Some(b)) if a.starts_with("send") && b.starts_with("recv") => {}
            other => return Err(format!("flow {id} binds {other:?}, not a send and a recv")),
        }
        shape.flow_ends.push((
            s["pid"].as_u64().unwrap_or(0),
            f["pid"].as_u64().unwrap_or(0),
        ));
    }
    shape.flows = starts.len();
    Ok(shape)
}

/// The sends of `ranks`' programs whose peer is in `ranks` too: one flow each (every send
/// has exactly one receive), counted from the schedule, not from the trace.
fn sends_within(plan: &Plan, schedule: &Schedule, ranks: &[u32]) -> usize {
    ranks
        .iter()
        .flat_map(|&r| {
            let ops = schedule.get_program(r).map_or(&[][..], |p| &p.ops[..]);
            ops.iter().filter_map(move |o| match o.kind {
                OpKind::Send { peer, .. } => Some(peer.rank_for(plan, r)),
                _ => None,
            })
        })
        .filter(|peer| ranks.contains(peer))
        .count()
}

fn predicted(
    s: &crate::scenario::Scenario,
    collapse: bool,
    trace_ranks: Option<Vec<u32>>,
) -> crate::Prediction {
    crate::predict(
        s,
        &crate::PredictOptions {
            trace: true,
            trace_ranks,
            reproducible: true,
            collapse,
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn pipeline_sends_flow_to_their_receives_on_every_rank() {
    let s = crate::testing::small_scenario(2, 4, 2, 4);
    let p = predicted(&s, false, None);
    let (plan, schedule) = (&p.staged.plan, &p.staged.schedule);
    let json = p.trace_json().unwrap();
    let shape = check_structure(&json).unwrap();
    let all: Vec<u32> = (0..plan.world).collect();
    assert_eq!(shape.pids, all.iter().map(|&r| u64::from(r)).collect());
    let sends = sends_within(plan, schedule, &all);
    // 4 micro batches, forward and backward, over 3 stage boundaries, on 4 (tp, dp) columns.
    assert_eq!(sends, 4 * 2 * 3 * 4);
    assert_eq!(shape.flows, sends);
    // Each flow joins neighbouring stages of one (tp, dp) column.
    for (from, to) in shape.flow_ends {
        let (a, b) = (from as u32, to as u32);
        assert_eq!(plan.stage_of(a).abs_diff(plan.stage_of(b)), 1, "{a} -> {b}");
        assert!(plan.pp_next(a) == b || plan.pp_prev(a) == b, "{a} -> {b}");
    }
}

#[test]
fn context_parallel_ring_steps_get_flows() {
    let mut s = crate::testing::small_scenario(1, 2, 1, 2);
    s.parallel.cp = 2;
    s.parallel.cp_algorithm = crate::scenario::CpAlgorithm::Ring;
    s.cluster.gpus = 4;
    s.cluster.gpus_per_node = 4;
    let p = predicted(&s, false, None);
    let (plan, schedule) = (&p.staged.plan, &p.staged.schedule);
    let shape = check_structure(&p.trace_json().unwrap()).unwrap();
    let all: Vec<u32> = (0..plan.world).collect();
    let ring = all
        .iter()
        .flat_map(|&r| schedule.get_program(r).into_iter().flat_map(|p| &p.ops))
        .filter(|o| {
            matches!(
                o.kind,
                OpKind::Send {
                    peer: Peer::CpNext,
                    ..
                }
            )
        })
        .count();
    assert!(ring > 0, "the scenario has no ring steps");
    assert_eq!(shape.flows, sends_within(plan, schedule, &all));
    let cp_flows = shape
        .flow_ends
        .iter()
        .filter(|(a, b)| plan.stage_of(*a as u32) == plan.stage_of(*b as u32))
        .count();
    assert_eq!(cp_flows, ring);
}

#[test]
fn representative_ranks_trace_one_rank_per_stage_with_their_flows() {
    let s = crate::testing::small_scenario(2, 4, 2, 4);
    let plan = crate::plan::Plan::new(&s).unwrap();
    let reps = crate::trace::representative_ranks(&plan);
    assert_eq!(reps.len(), 4);
    for (stage, &r) in reps.iter().enumerate() {
        assert_eq!(plan.stage_of(r), stage as u32);
        let c = plan.coords(r);
        assert_eq!((c.tp, c.cp, c.ep, c.dp), (0, 0, 0, 0));
    }
    // Collapsed (the representatives are what runs) and every rank simulated but only the
    // representatives traced give the same trace.
    let collapsed = predicted(&s, true, Some(reps.clone()));
    assert!(collapsed.result.collapsed);
    let full = predicted(&s, false, Some(reps.clone()));
    assert!(!full.result.collapsed);
    let (a, b) = (collapsed.trace_json().unwrap(), full.trace_json().unwrap());
    assert_eq!(a, b);
    let shape = check_structure(&a).unwrap();
    assert_eq!(shape.pids, reps.iter().map(|&r| u64::from(r)).collect());
    let (plan, schedule) = (&full.staged.plan, &full.staged.schedule);
    assert_eq!(shape.flows, sends_within(plan, schedule, &reps));
    assert_eq!(shape.flows, 4 * 2 * 3);
}

#[test]
fn a_listed_rank_is_traced_alone_and_its_flows_need_both_ends() {
    let s = crate::testing::small_scenario(2, 4, 2, 4);
    let p = predicted(&s, false, Some(vec![3]));
    let trace = p.result.trace.as_ref().unwrap();
    assert!(trace.events.iter().all(|e| e.rank == 3));
    assert!(trace.memory.iter().all(|m| m.rank == 3));
    let ops = p.staged.schedule.get_program(3).unwrap().ops.len();
    assert_eq!(trace.events.len(), ops);
    let shape = check_structure(&p.trace_json().unwrap()).unwrap();
    assert_eq!(shape.flows, 0);
}

#[test]
fn the_structural_check_catches_a_flow_without_a_slice_and_a_missing_end() {
    let s = crate::testing::small_scenario(1, 2, 1, 2);
    let p = predicted(&s, false, None);
    let json = p.trace_json().unwrap();
    assert!(check_structure(&json).unwrap().flows > 0);
    let lines: Vec<&str> = json.lines().collect();
    let without_end: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.starts_with("{\"ph\":\"f\",\"name\":\"p2p\",\"cat\":\"p2p\",\"id\":1,"))
        .collect();
    assert_eq!(without_end.len() + 1, lines.len());
    // Every event's line but the last ends in its comma: still valid JSON.
    let err = check_structure(&without_end.join("\n")).unwrap_err();
    assert!(err.contains("flow starts and ends differ"), "{err}");
    // A flow start moved to the end of the step, where no slice of its thread is.
    let moved: Vec<String> = lines
        .iter()
        .map(|l| {
            if l.starts_with("{\"ph\":\"s\",\"name\":\"p2p\",\"cat\":\"p2p\",\"id\":1,") {
                let mut v: Value = serde_json::from_str(l.trim_end_matches(',')).unwrap();
                v["ts"] = Value::from(1e9);
                format!("{v},")
            } else {
                l.to_string()
            }
        })
        .collect();
    let err = check_structure(&moved.join("\n")).unwrap_err();
    assert!(err.contains("flow 1 binds"), "{err}");
}

#[test]
fn gzip_holds_exactly_the_plain_trace() {
    use std::io::Read;
    let s = crate::testing::small_scenario(2, 2, 1, 2);
    let p = predicted(&s, false, None);
    let trace = p.result.trace.as_ref().unwrap();
    let (plan, schedule) = (&p.staged.plan, &p.staged.schedule);
    let dir = std::env::temp_dir().join(format!("twin-chrome-gz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (plain, gz) = (dir.join("t.json"), dir.join("t.json.gz"));
    let wp = trace.write_chrome_file(&plain, plan, schedule).unwrap();
    let wg = trace.write_chrome_file(&gz, plan, schedule).unwrap();
    let plain_bytes = std::fs::read(&plain).unwrap();
    let gz_bytes = std::fs::read(&gz).unwrap();
    assert_eq!(
        plain_bytes,
        trace.to_chrome_json(plan, schedule).into_bytes()
    );
    assert_eq!(&gz_bytes[..2], &[0x1f, 0x8b], "gzip magic");
    let mut back = Vec::new();
    flate2::read::GzDecoder::new(&gz_bytes[..])
        .read_to_end(&mut back)
        .unwrap();
    assert_eq!(back, plain_bytes);
    assert_eq!(
        wp,
        Written {
            json_bytes: plain_bytes.len() as u64,
            file_bytes: plain_bytes.len() as u64
        }
    );
    assert_eq!(
        wg,
        Written {
            json_bytes: plain_bytes.len() as u64,
            file_bytes: gz_bytes.len() as u64
        }
    );
    assert!(
        gz_bytes.len() * 5 < plain_bytes.len(),
        "{} vs {}",
        gz_bytes.len(),
        plain_bytes.len()
    );
    // Written again: the same bytes (no time or name in the gzip header); no temporary
    // file left.
    trace.write_chrome_file(&gz, plan, schedule).unwrap();
    assert_eq!(std::fs::read(&gz).unwrap(), gz_bytes);
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(left.len(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A named pipe (as `/dev/stdout` or `/dev/null` would be) is written through, not replaced
/// by a renamed file.
#[cfg(unix)]
#[test]
fn a_pipe_is_written_in_place() {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;
    let s = crate::testing::small_scenario(1, 2, 1, 2);
    let p = predicted(&s, false, None);
    let trace = p.result.trace.as_ref().unwrap();
    let dir = std::env::temp_dir().join(format!("twin-chrome-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("trace.json");
    let _ = std::fs::remove_file(&fifo);
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            std::fs::File::open(&fifo)
                .unwrap()
                .read_to_end(&mut got)
                .unwrap();
            got
        })
    };
    let w = trace
        .write_chrome_file(&fifo, &p.staged.plan, &p.staged.schedule)
        .unwrap();
    // Checked before joining: had a renamed file replaced the pipe, the reader would wait on
    // the orphaned pipe for ever.
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    let got = reader.join().unwrap();
    assert_eq!(
        got,
        trace
            .to_chrome_json(&p.staged.plan, &p.staged.schedule)
            .into_bytes()
    );
    assert_eq!(w.json_bytes, got.len() as u64);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_trace_that_cannot_be_written_leaves_nothing_behind() {
    let s = crate::testing::small_scenario(1, 2, 1, 2);
    let p = predicted(&s, false, None);
    let trace = p.result.trace.as_ref().unwrap();
    let missing = std::env::temp_dir()
        .join(format!("twin-chrome-missing-{}", std::process::id()))
        .join("t.json");
    assert!(trace
        .write_chrome_file(&missing, &p.staged.plan, &p.staged.schedule)
        .is_err());
    assert!(!missing.exists());
}

#[test]
fn the_chrome_export_carries_issue_times_where_the_trace_has_them() {
    let s = crate::testing::small_scenario(1, 2, 1, 2);
    let p = crate::predict(
        &s,
        &crate::PredictOptions {
            trace: true,
            reproducible: true,
            ..Default::default()
        },
    )
    .unwrap();
    let mut trace = p.result.trace.clone().unwrap();
    let (plan, schedule) = (&p.staged.plan, &p.staged.schedule);
    let ops = |t: &Trace| -> Vec<serde_json::Value> {
        let v: serde_json::Value = serde_json::from_str(&t.to_chrome_json(plan, schedule)).unwrap();
        v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .cloned()
            .collect()
    };
    let with = ops(&trace);
    assert!(!with.is_empty());
    assert!(
        with.iter().all(|e| e["args"]["issued_us"].is_number()),
        "{with:?}"
    );
    for e in &mut trace.events {
        e.issued_ns = None;
    }
    let without = ops(&trace);
    assert_eq!(without.len(), with.len());
    assert!(without
        .iter()
        .all(|e| e["args"].get("issued_us").is_none() && e["args"]["op"].is_number()));
    // No op of this run shared a core, so none says how long it would have taken alone.
    assert!(with.iter().all(|e| e["args"].get("solo_us").is_none()));
    let e = trace
        .events
        .iter_mut()
        .find(|e| e.end_ns > e.start_ns)
        .unwrap();
    e.solo_ns = Some(1_500);
    let (rank, op) = (e.rank, e.op);
    let x = ops(&trace)
        .into_iter()
        .find(|x| x["pid"] == rank && x["args"]["op"] == op)
        .unwrap();
    assert_eq!(x["args"]["solo_us"], 1.5);
}
