//! A host run that survives its ranks dying: launch, and when an attempt fails (a rank exits
//! or is killed, or the run stalls), tear everything down, start every rank again on a fresh
//! port and store, let them restore the newest complete checkpoint, and carry on until the
//! requested steps are done, at most `max_restarts` times. Injected kills are handed to the
//! ranks (step/op kills) or carried out here (time kills), each once. Every recovery is
//! accounted from the ranks' event files (see [`super::events`]): detection, restart, reload,
//! the steps and the wall time lost.

use super::events::{self, Event, EVENTS_VAR};
use super::inject::{encode_kills, At, Injection, KillPoint, INJECT_VAR};
use super::launcher::{launch_attempt, AttemptControl, AttemptInfo, LaunchError, LaunchOptions};
use super::launcher::{LaunchOutput, OpNamer};
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How a recovering run restarts.
#[derive(Clone, Debug)]
pub struct RecoveryOptions {
    /// Most restarts before the run fails (a crash loop ends with an error).
    pub max_restarts: u32,
    pub injections: Vec<Injection>,
    /// The first attempt also resumes from the checkpoint directory.
    pub resume_first: bool,
    /// Event files go to `events_dir/attempt-N/`.
    pub events_dir: PathBuf,
}

/// One recovery, in the report's terms. Times are wall-clock seconds; `None` when a later
/// failure cut the recovery short before it could be measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Recovery {
    pub failed_rank: Option<u32>,
    pub cause: String,
    /// The global step in progress when the fault hit (0-based; = steps completed).
    pub at_step: u64,
    /// Fault → the launcher noticed.
    pub detection_s: f64,
    /// Noticed → every rank started again and bootstrapped (teardown, spawn, store, mesh).
    pub restart_s: Option<f64>,
    /// Bootstrapped → checkpoint agreed on, read, verified and restored on every rank.
    pub reload_s: Option<f64>,
    /// The step the ranks resumed from (0: from scratch).
    pub resumed_from_step: Option<u64>,
    /// Completed steps that had to be computed again.
    pub steps_lost: Option<u64>,
    /// Recomputation: from the reload until the run was back where it was at the fault,
    /// plus the part of the interrupted step done before the fault.
    pub rework_s: Option<f64>,
    /// Wall time lost against no failure: detection + restart + reload + rework.
    pub lost_s: Option<f64>,
}

/// Checkpoints written during the run (all attempts).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CheckpointSummary {
    /// Complete checkpoints (manifest written).
    pub count: u64,
    /// Mean over every rank's writes: snapshot start to file durable.
    pub mean_write_s: f64,
    /// Mean time the step loop stood still for a checkpoint.
    pub mean_stall_s: f64,
    /// Bytes of one checkpoint, all ranks' files together.
    pub bytes: u64,
}

/// How the run's first attempt started.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Startup {
    /// Spawn of the first rank → every rank bootstrapped.
    pub bootstrap_s: Option<f64>,
    /// Bootstrapped → state restored (0 when starting from scratch).
    pub reload_s: Option<f64>,
    pub resumed_from_step: Option<u64>,
    /// Why each checkpoint file the ranks tried first was refused (damaged, torn, foreign),
    /// one line per file.
    pub rejected: Vec<String>,
}

/// A run that finished, and what it took.
pub struct Recovered {
    pub output: LaunchOutput,
    pub recoveries: Vec<Recovery>,
    pub checkpoints: CheckpointSummary,
    pub startup: Startup,
    /// Injections that had not fired when the run finished (a time after the run's end).
    pub unfired: Vec<Injection>,
}

impl Recovered {
    /// What the run's report must say loudly: a `--resume` that restored nothing from a
    /// directory with checkpoints in it (`resumed` says whether the first attempt resumed),
    /// and injected kills that never fired.
    pub fn warnings(&self, resumed: bool, checkpoint_dir: Option<&std::path::Path>) -> Vec<String> {
        let mut w = Vec::new();
        let had_checkpoints = checkpoint_dir.is_some_and(crate::checkpoint::dir::has_checkpoints);
        if resumed
            && self.startup.resumed_from_step.unwrap_or(0) == 0
            && (had_checkpoints || !self.startup.rejected.is_empty())
        {
            let why = if self.startup.rejected.is_empty() {
                "none is complete and of this job (same scenario, world and seed)".to_string()
            } else {
                format!(
                    "{} file(s) rejected: {}",
                    self.startup.rejected.len(),
                    self.startup.rejected.join("; ")
                )
            };
            w.push(format!(
                "--resume restored no checkpoint from {}: {why}; the run started again from step 0",
                checkpoint_dir.map_or_else(|| "?".into(), |d| d.display().to_string())
            ));
        }
        for i in &self.unfired {
            w.push(format!(
                "--inject {:?} never fired: the run had finished before it was due",
                i.describe()
            ));
        }
        w
    }
}

/// What one attempt left behind.
struct Attempt {
    info: AttemptInfo,
    events: Vec<Vec<Event>>,
    failure: Option<String>,
}

fn secs(from_ns: u64, to_ns: u64) -> f64 {
    to_ns.saturating_sub(from_ns) as f64 * 1e-9
}

impl Attempt {
    /// Max over ranks of some event time; `None` unless every rank has one.
    fn all_ranks(&self, f: impl Fn(&Event) -> Option<u64>) -> Option<u64> {
        self.events
            .iter()
            .map(|evs| evs.iter().filter_map(&f).max())
            .collect::<Option<Vec<u64>>>()
            .and_then(|v| v.into_iter().max())
    }
    fn ready_ns(&self) -> Option<u64> {
        self.all_ranks(|e| match e {
            Event::Ready { t_ns } => Some(*t_ns),
            _ => None,
        })
    }
    fn loaded(&self) -> Option<(u64, u64)> {
        let t = self.all_ranks(|e| match e {
            Event::Loaded { t_ns, .. } => Some(*t_ns),
            _ => None,
        })?;
        let step = self.events.iter().flatten().find_map(|e| match e {
            Event::Loaded { step, .. } => Some(*step),
            _ => None,
        })?;
        Some((step, t))
    }
    /// When every rank had finished global step `step`.
    fn step_done_ns(&self, step: u64) -> Option<u64> {
        self.all_ranks(|e| match e {
            Event::Step { t_ns, step: s } if *s == step => Some(*t_ns),
            _ => None,
        })
    }
    /// Steps every rank completed by the end of the attempt.
    fn completed(&self) -> Option<u64> {
        let start = self.loaded()?.0;
        self.events
            .iter()
            .map(|evs| {
                evs.iter()
                    .filter_map(|e| match e {
                        Event::Step { step, .. } => Some(step + 1),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(start)
            })
            .min()
    }
    /// Ids of every injected fault that fired.
    fn fired(&self) -> Vec<u32> {
        self.faults().map(|f| f.0).collect()
    }

    /// The injected fault that fired first: (id, rank, when).
    fn fault(&self) -> Option<(u32, u32, u64)> {
        self.faults().min_by_key(|f| f.2)
    }

    fn faults(&self) -> impl Iterator<Item = (u32, u32, u64)> + '_ {
        let by_rank = self.events.iter().enumerate().flat_map(|(r, evs)| {
            evs.iter().filter_map(move |e| match e {
                Event::Fault { t_ns, id } => Some((*id, r as u32, *t_ns)),
                _ => None,
            })
        });
        by_rank.chain(self.info.fired.iter().copied())
    }
}

/// Launch `opts`, restarting from checkpoints on failure, until the run completes.
pub fn launch_with_recovery(
    opts: &LaunchOptions,
    rec: &RecoveryOptions,
    op_name: OpNamer,
) -> Result<Recovered, LaunchError> {
    let started = Instant::now();
    let mut pending: Vec<(u32, Injection)> = rec
        .injections
        .iter()
        .enumerate()
        .map(|(i, inj)| (i as u32, *inj))
        .collect();
    let mut attempts: Vec<Attempt> = Vec::new();
    let output = loop {
        let n = attempts.len();
        let dir = rec.events_dir.join(format!("attempt-{n}"));
        std::fs::create_dir_all(&dir)
            .map_err(|e| LaunchError::Failed(format!("cannot create {}: {e}", dir.display())))?;
        let kills: Vec<KillPoint> = pending
            .iter()
            .filter_map(|(id, inj)| match inj.at {
                At::Step { step, op } => Some(KillPoint {
                    id: *id,
                    rank: inj.rank,
                    step,
                    op,
                }),
                At::Time { .. } => None,
            })
            .collect();
        let ctl = AttemptControl {
            grace: Duration::ZERO,
            kills: pending
                .iter()
                .filter_map(|(id, inj)| match inj.at {
                    // A time beyond what an Instant can hold never comes.
                    At::Time { seconds } => Duration::try_from_secs_f64(seconds)
                        .ok()
                        .and_then(|d| started.checked_add(d))
                        .map(|at| (at, inj.rank, *id)),
                    At::Step { .. } => None,
                })
                .collect(),
        };
        let mut o = opts.clone();
        if n > 0 || rec.resume_first {
            o.args.push("--resume".into());
        }
        o.env.push((INJECT_VAR.into(), encode_kills(&kills)));
        o.env
            .push((EVENTS_VAR.into(), dir.to_string_lossy().into_owned()));
        let (out, info) = launch_attempt(&o, &ctl, op_name);
        let evs = (0..opts.world).map(|r| events::read(&dir, r)).collect();
        let mut a = Attempt {
            info,
            events: evs,
            failure: None,
        };
        let fired = a.fired();
        pending.retain(|(i, _)| !fired.contains(i));
        match out {
            Ok(out) => {
                attempts.push(a);
                break out;
            }
            Err(e @ LaunchError::Interrupted(_)) => return Err(e),
            Err(e) => {
                let text = e.to_string();
                if n as u32 >= rec.max_restarts {
                    return Err(LaunchError::Failed(format!(
                        "gave up after {n} restarts (--max-restarts {}); the last failure: {text}",
                        rec.max_restarts
                    )));
                }
                a.failure = Some(text);
                attempts.push(a);
            }
        }
    };
    let recoveries = attempts
        .windows(2)
        .filter_map(|w| match w {
            [failed, next] => Some(account(failed, next, &rec.injections)),
            _ => None,
        })
        .collect();
    let startup = attempts.first().map(|a| Startup {
        bootstrap_s: a.ready_ns().map(|t| secs(a.info.spawned_ns, t)),
        reload_s: a.ready_ns().zip(a.loaded()).map(|(r, (_, l))| secs(r, l)),
        resumed_from_step: a.loaded().map(|l| l.0),
        rejected: {
            let mut why: Vec<String> = a
                .events
                .iter()
                .flatten()
                .filter_map(|e| match e {
                    Event::Loaded { rejected, .. } => Some(rejected.iter().cloned()),
                    _ => None,
                })
                .flatten()
                .collect();
            why.sort();
            why.dedup();
            why
        },
    });
    Ok(Recovered {
        output,
        recoveries,
        checkpoints: summarize(&attempts),
        startup: startup.unwrap_or_default(),
        unfired: pending.into_iter().map(|(_, i)| i).collect(),
    })
}

/// The recovery from `failed`'s failure, measured up to `next` catching up.
fn account(failed: &Attempt, next: &Attempt, injections: &[Injection]) -> Recovery {
    let noticed = failed.info.noticed_ns.unwrap_or(failed.info.spawned_ns);
    let fault = failed.fault();
    let (failed_rank, cause, fault_ns) = match fault {
        Some((id, rank, t)) => (
            Some(rank),
            format!(
                "injected: {}",
                injections
                    .get(id as usize)
                    .map_or_else(|| "kill".into(), Injection::describe)
            ),
            t.min(noticed),
        ),
        None => {
            let text = failed.failure.clone().unwrap_or_default();
            let first = text.lines().next().unwrap_or_default().to_string();
            let rank = first
                .strip_prefix("rank ")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|r| r.parse().ok());
            (rank, first, noticed)
        }
    };
    let completed = failed.completed().unwrap_or(0);
    // The last moment before the fault at which the run was whole: its last completed step
    // (or, with none done in this attempt, the end of its reload).
    let whole_ns = match (failed.loaded(), completed.checked_sub(1)) {
        (Some((start, _)), Some(last)) if last >= start => failed.step_done_ns(last),
        (Some((_, t)), _) => Some(t),
        _ => None,
    }
    .map(|t| t.min(fault_ns));
    let ready = next.ready_ns();
    let loaded = next.loaded();
    let resumed = loaded.map(|l| l.0);
    let caught_up = match (loaded, completed.checked_sub(1)) {
        (Some((start, t)), _) if start >= completed => Some(t),
        (Some(_), Some(last)) => next.step_done_ns(last),
        _ => None,
    };
    let rework_s = caught_up
        .zip(loaded)
        .zip(whole_ns)
        .map(|((c, (_, l)), w)| secs(l, c) + secs(w, fault_ns));
    Recovery {
        failed_rank,
        cause,
        at_step: completed,
        detection_s: secs(fault_ns, noticed),
        restart_s: ready.map(|r| secs(noticed, r)),
        reload_s: ready.zip(loaded).map(|(r, (_, l))| secs(r, l)),
        resumed_from_step: resumed,
        steps_lost: resumed.map(|r| completed.saturating_sub(r)),
        rework_s,
        lost_s: caught_up.zip(whole_ns).map(|(c, w)| secs(w, c)),
    }
}

fn summarize(attempts: &[Attempt]) -> CheckpointSummary {
    let writes: Vec<(usize, u64, f64, f64, u64)> = attempts
        .iter()
        .flat_map(|a| a.events.iter().enumerate())
        .flat_map(|(r, evs)| {
            evs.iter().filter_map(move |e| match e {
                Event::Checkpoint {
                    step,
                    write_s,
                    stall_s,
                    bytes,
                    ..
                } => Some((r, *step, *write_s, *stall_s, *bytes)),
                _ => None,
            })
        })
        .collect();
    let n = writes.len().max(1) as f64;
    let rank0: Vec<_> = writes.iter().filter(|w| w.0 == 0).collect();
    let last_step = rank0.last().map(|w| w.1);
    CheckpointSummary {
        count: rank0.len() as u64,
        mean_write_s: writes.iter().map(|w| w.2).sum::<f64>() / n,
        mean_stall_s: writes.iter().map(|w| w.3).sum::<f64>() / n,
        bytes: last_step.map_or(0, |s| {
            let mut seen = std::collections::BTreeSet::new();
            writes
                .iter()
                .filter(|w| w.1 == s && seen.insert(w.0))
                .map(|w| w.4)
                .sum()
        }),
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |s| format!("{:.3} s", s))
}

/// The recovery lines of a run's text report.
pub fn to_text(r: &Recovered) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let c = &r.checkpoints;
    if c.count > 0 {
        let _ = writeln!(
            o,
            "checkpoints     {} of {:.2} MiB, write {:.3} s mean, stall {:.3} s mean",
            c.count,
            c.bytes as f64 / (1u64 << 20) as f64,
            c.mean_write_s,
            c.mean_stall_s
        );
    }
    if let Some(s) = r.startup.resumed_from_step.filter(|&s| s > 0) {
        let _ = writeln!(
            o,
            "resumed         from step {s} (reload {})",
            opt(r.startup.reload_s)
        );
    }
    let _ = writeln!(o, "recoveries      {}", r.recoveries.len());
    for (i, x) in r.recoveries.iter().enumerate() {
        let _ = writeln!(
            o,
            "  {:>2}. step {} rank {}: {}\n      detection {}, restart {}, reload {}, {} steps lost, lost {}",
            i + 1,
            x.at_step,
            x.failed_rank.map_or_else(|| "?".into(), |r| r.to_string()),
            x.cause,
            opt(Some(x.detection_s)),
            opt(x.restart_s),
            opt(x.reload_s),
            x.steps_lost.map_or_else(|| "?".into(), |s| s.to_string()),
            opt(x.lost_s)
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(events: Vec<Vec<Event>>, noticed: Option<u64>) -> Attempt {
        Attempt {
            info: AttemptInfo {
                spawned_ns: 0,
                noticed_ns: noticed,
                fired: vec![],
            },
            events,
            failure: Some("rank 1 failed: killed by signal 9 (SIGKILL)".into()),
        }
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_recovery_is_accounted_from_the_event_files() {
        use Event::*;
        let loaded = |t, step| Loaded {
            t_ns: t,
            step,
            read_s: 0.0,
            bytes: 0,
            rejected: vec![],
        };
        // Attempt 0: both ranks do steps 0..=2 (done at 3 s, 4 s, 5 s); rank 1 is killed at
        // 5.5 s during step 3; the launcher notices at 5.6 s.
        let a0 = attempt(
            (0..2)
                .map(|r| {
                    let mut v = vec![Ready { t_ns: S }, loaded(2 * S, 0)];
                    v.extend((0..3).map(|k| Step {
                        t_ns: (3 + k) * S,
                        step: k,
                    }));
                    if r == 1 {
                        v.push(Fault {
                            t_ns: 5 * S + S / 2,
                            id: 0,
                        });
                    }
                    v
                })
                .collect(),
            Some(5 * S + 6 * S / 10),
        );
        // Attempt 1: ready at 7 s, restored step 2 at 8 s, finishes step 2 again at 9 s.
        let a1 = attempt(
            (0..2)
                .map(|_| {
                    vec![
                        Ready { t_ns: 7 * S },
                        loaded(8 * S, 2),
                        Step {
                            t_ns: 9 * S,
                            step: 2,
                        },
                    ]
                })
                .collect(),
            None,
        );
        let inj = Injection::parse("kill rank=1 at=step:3").unwrap();
        let r = account(&a0, &a1, &[inj]);
        assert_eq!(r.failed_rank, Some(1));
        assert_eq!(r.cause, "injected: kill rank=1 at=step:3,op:0");
        assert_eq!(r.at_step, 3);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(r.detection_s, 0.1));
        assert!(close(r.restart_s.unwrap(), 1.4));
        assert!(close(r.reload_s.unwrap(), 1.0));
        assert_eq!(r.steps_lost, Some(1));
        // Rework: 1 s redoing step 2, plus 0.5 s of step 3 lost before the fault.
        assert!(close(r.rework_s.unwrap(), 1.5));
        assert!(close(r.lost_s.unwrap(), 4.0));
        assert!(close(
            r.lost_s.unwrap(),
            r.detection_s + r.restart_s.unwrap() + r.reload_s.unwrap() + r.rework_s.unwrap()
        ));
        // Without an injection the cause is the launcher's description.
        let mut plain = a0;
        for evs in &mut plain.events {
            evs.retain(|e| !matches!(e, Fault { .. }));
        }
        let r = account(&plain, &a1, &[]);
        assert_eq!(r.failed_rank, Some(1));
        assert!(r.cause.contains("SIGKILL"), "{}", r.cause);
        assert!(close(r.detection_s, 0.0));
    }
}
