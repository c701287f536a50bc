//! Fault injection for `twin run --inject`: a spec such as `kill rank=3 at=step:5` (also
//! `at=step:5,op:17`, `at=op:17` in the first step, `at=time:2.5` seconds after launch), or
//! `random` kills drawn from a seed. Step and op kills are carried out by the rank itself (a
//! real SIGKILL of its own process at that op); time kills by the launcher (SIGKILL of the
//! rank's process group). Each injection fires once, so a recovered run does not die again at
//! the same point.

use crate::error::RuntimeError;
use twin_sim::rng::Rng;

/// Variable through which the launcher hands a rank its pending step/op kills.
pub const INJECT_VAR: &str = "TWIN_INJECT";

const FORMS: &str = "allowed: `kill rank=R at=step:S`, `kill rank=R at=step:S,op:I`, `kill rank=R at=op:I`, `kill rank=R at=time:SECONDS` (0 to 86400), each part once, or `random` (with --inject-seed, --inject-count)";

/// Latest `at=time:` kill, in seconds after launch: a day, as `twin run --timeout-s`. Later
/// ones could never fire in a run that makes progress, and beyond what an `Instant` holds
/// could not even be scheduled.
pub const MAX_TIME_S: f64 = 86_400.0;

/// When a kill fires.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum At {
    /// At op `op` (default 0) of the rank's program in global step `step` (0-based).
    Step { step: u64, op: u32 },
    /// Seconds after the launch.
    Time { seconds: f64 },
}

/// One injected fault (today always a kill).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Injection {
    pub rank: u32,
    pub at: At,
}

/// A step/op kill as a rank sees it, with the launcher's id for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KillPoint {
    pub id: u32,
    pub rank: u32,
    pub step: u64,
    pub op: u32,
}

/// Carry out the kill of `kills` due at op `op` of global step `step`, if any: note it in
/// `events`, then SIGKILL this process. Every backend calls it where it reaches an op.
pub fn kill_if_due(
    kills: &[KillPoint],
    step: u64,
    op: u32,
    events: Option<&super::events::EventLog>,
) {
    if let Some(k) = kills.iter().find(|k| k.step == step && k.op == op) {
        if let Some(ev) = events {
            ev.record(&super::events::Event::Fault {
                t_ns: super::events::unix_ns(),
                id: k.id,
            });
        }
        crate::backend::host::fault::trigger(crate::backend::host::FaultKind::Kill);
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--inject {spec:?}: {problem}; {FORMS}")]
pub struct InjectError {
    pub spec: String,
    pub problem: String,
}

fn number<T: std::str::FromStr>(spec: &str, part: &str, text: &str) -> Result<T, InjectError> {
    text.parse().map_err(|_| InjectError {
        spec: spec.into(),
        problem: format!("bad part `{part}`: {text:?} is not a non-negative integer"),
    })
}

impl Injection {
    /// Parse one `--inject` value other than `random`.
    pub fn parse(spec: &str) -> Result<Injection, InjectError> {
        let err = |problem: String| InjectError {
            spec: spec.into(),
            problem,
        };
        let mut words = spec.split_whitespace();
        match words.next() {
            Some("kill") => {}
            Some(w) => {
                return Err(err(format!(
                    "bad part `{w}`: the only fault kind is `kill`"
                )))
            }
            None => return Err(err("empty".into())),
        }
        let (mut rank, mut at) = (None, None);
        for w in words {
            let slot_taken = match w.split_once('=') {
                Some(("rank", v)) => rank.replace(number(spec, w, v)?).is_some(),
                Some(("at", v)) => at.replace(Injection::parse_at(spec, w, v)?).is_some(),
                _ => return Err(err(format!("bad part `{w}`: expected rank=R or at=WHEN"))),
            };
            if slot_taken {
                let key = w.split_once('=').map_or(w, |(k, _)| k);
                return Err(err(format!(
                    "bad part `{w}`: {key}= is given twice (one kill per --inject; repeat --inject for more)"
                )));
            }
        }
        let rank = rank.ok_or_else(|| err("missing rank=R".into()))?;
        let at = at.ok_or_else(|| err("missing at=WHEN".into()))?;
        Ok(Injection { rank, at })
    }

    fn parse_at(spec: &str, part: &str, v: &str) -> Result<At, InjectError> {
        let err = |problem: &str| InjectError {
            spec: spec.into(),
            problem: format!("bad part `{part}`: {problem}"),
        };
        if let Some(t) = v.strip_prefix("time:") {
            let seconds: f64 = t
                .parse()
                .map_err(|_| err("time: takes seconds since launch"))?;
            if !(seconds.is_finite() && (0.0..=MAX_TIME_S).contains(&seconds)) {
                return Err(err(&format!(
                    "time: takes seconds since launch, 0 to {MAX_TIME_S} (a day)"
                )));
            }
            return Ok(At::Time { seconds });
        }
        if let Some(o) = v.strip_prefix("op:") {
            return Ok(At::Step {
                step: 0,
                op: number(spec, part, o)?,
            });
        }
        if let Some(rest) = v.strip_prefix("step:") {
            let (s, o) = match rest.split_once(",op:") {
                Some((s, o)) => (s, Some(o)),
                None => (rest, None),
            };
            return Ok(At::Step {
                step: number(spec, part, s)?,
                op: match o {
                    Some(o) => number(spec, part, o)?,
                    None => 0,
                },
            });
        }
        Err(err("expected step:S, step:S,op:I, op:I or time:SECONDS"))
    }

    /// Check the injection against the run: the rank exists, the step is run, the op is in
    /// the rank's program.
    pub fn check(
        &self,
        spec: &str,
        world: u32,
        steps: u64,
        ops_of: &dyn Fn(u32) -> u32,
    ) -> Result<(), InjectError> {
        let err = |problem: String| InjectError {
            spec: spec.into(),
            problem,
        };
        if self.rank >= world {
            return Err(err(format!(
                "rank {} does not exist (the run has {world} ranks)",
                self.rank
            )));
        }
        if let At::Step { step, op } = self.at {
            if step >= steps {
                return Err(err(format!(
                    "step {step} is not run (--steps {steps} runs steps 0 to {})",
                    steps.saturating_sub(1)
                )));
            }
            let n = ops_of(self.rank);
            if op >= n {
                return Err(err(format!(
                    "op {op} is not in rank {}'s program ({n} ops)",
                    self.rank
                )));
            }
        }
        Ok(())
    }

    /// Canonical text, as accepted by [`Injection::parse`].
    pub fn describe(&self) -> String {
        match self.at {
            At::Step { step, op } => format!("kill rank={} at=step:{step},op:{op}", self.rank),
            At::Time { seconds } => format!("kill rank={} at=time:{seconds}", self.rank),
        }
    }
}

/// `count` kills at uniformly drawn (rank, step, op), reproducible from `seed`. While
/// `count <= steps` the steps are distinct, so each kill is its own failure (two kills in one
/// step could both fire before the launcher tears the attempt down).
pub fn random(
    seed: u64,
    count: u32,
    world: u32,
    steps: u64,
    ops_of: &dyn Fn(u32) -> u32,
) -> Vec<Injection> {
    let mut rng = Rng::new(seed, 0x001A_7EC7);
    let mut below = |n: u64| rng.next_u64() % n.max(1);
    let mut used = std::collections::BTreeSet::new();
    (0..count)
        .map(|_| {
            let rank = below(u64::from(world)) as u32;
            let mut step = below(steps);
            if u64::from(count) <= steps {
                while !used.insert(step) {
                    step = (step + 1) % steps.max(1);
                }
            }
            let op = below(u64::from(ops_of(rank))) as u32;
            Injection {
                rank,
                at: At::Step { step, op },
            }
        })
        .collect()
}

/// `ID:RANK:STEP:OP` joined by commas, for [`INJECT_VAR`].
pub fn encode_kills(kills: &[KillPoint]) -> String {
    kills
        .iter()
        .map(|k| format!("{}:{}:{}:{}", k.id, k.rank, k.step, k.op))
        .collect::<Vec<_>>()
        .join(",")
}

/// Read [`INJECT_VAR`] as written by [`encode_kills`].
pub fn decode_kills(text: &str) -> Result<Vec<KillPoint>, RuntimeError> {
    let bad = || RuntimeError::Env {
        var: INJECT_VAR,
        message: format!("{text:?} is not a comma-separated list of ID:RANK:STEP:OP"),
    };
    text.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let v: Vec<&str> = p.split(':').collect();
            match v.as_slice() {
                [id, rank, step, op] => Ok(KillPoint {
                    id: id.parse().map_err(|_| bad())?,
                    rank: rank.parse().map_err(|_| bad())?,
                    step: step.parse().map_err(|_| bad())?,
                    op: op.parse().map_err(|_| bad())?,
                }),
                _ => Err(bad()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        let p = |s| Injection::parse(s).unwrap();
        assert_eq!(
            p("kill rank=3 at=step:5"),
            Injection {
                rank: 3,
                at: At::Step { step: 5, op: 0 }
            }
        );
        assert_eq!(
            p("kill rank=0 at=step:2,op:17").at,
            At::Step { step: 2, op: 17 }
        );
        assert_eq!(p("kill at=op:9 rank=1").at, At::Step { step: 0, op: 9 });
        assert_eq!(p("kill rank=1 at=time:2.5").at, At::Time { seconds: 2.5 });
        for s in ["kill rank=3 at=step:5,op:17", "kill rank=1 at=time:2.5"] {
            assert_eq!(p(s).describe(), s);
        }
    }

    #[test]
    fn errors_name_the_bad_part_and_the_allowed_forms() {
        let cases = [
            ("", "empty"),
            ("boom rank=1 at=step:1", "bad part `boom`"),
            ("kill rank=x at=step:1", "bad part `rank=x`"),
            ("kill rank=1 at=step:y", "bad part `at=step:y`"),
            ("kill rank=1 at=soon", "bad part `at=soon`"),
            ("kill rank=1 at=time:-3", "bad part `at=time:-3`"),
            (
                "kill rank=1 at=time:1e300",
                "bad part `at=time:1e300`: time: takes seconds since launch, 0 to 86400",
            ),
            ("kill rank=1 at=time:86400.5", "bad part `at=time:86400.5`"),
            (
                "kill rank=1 rank=2 at=step:3",
                "bad part `rank=2`: rank= is given twice",
            ),
            (
                "kill rank=1 at=step:3 at=step:4",
                "bad part `at=step:4`: at= is given twice",
            ),
            (
                "kill rank=1 at=step:3 at=step:3",
                "bad part `at=step:3`: at= is given twice",
            ),
            ("kill rank=1 when=now", "bad part `when=now`"),
            ("kill at=step:1", "missing rank=R"),
            ("kill rank=1", "missing at=WHEN"),
        ];
        for (spec, want) in cases {
            let e = Injection::parse(spec).unwrap_err().to_string();
            assert!(e.contains(want), "{spec}: {e}");
            assert!(e.contains("allowed: `kill rank=R at=step:S`"), "{e}");
        }
    }

    #[test]
    fn checks_against_the_run() {
        let ops = |r: u32| 10 + r;
        let ok = Injection::parse("kill rank=1 at=step:3,op:10").unwrap();
        assert!(ok.check("s", 2, 4, &ops).is_ok());
        let e = |s: &str| {
            Injection::parse(s)
                .unwrap()
                .check(s, 2, 4, &ops)
                .unwrap_err()
                .to_string()
        };
        assert!(e("kill rank=2 at=step:0").contains("rank 2 does not exist"));
        assert!(e("kill rank=0 at=step:4").contains("step 4 is not run"));
        assert!(e("kill rank=0 at=op:10").contains("op 10 is not in rank 0's program"));
    }

    #[test]
    fn random_kills_are_reproducible_and_in_range() {
        let ops = |r: u32| 5 + r;
        let a = random(7, 20, 3, 10, &ops);
        assert_eq!(a, random(7, 20, 3, 10, &ops));
        assert_ne!(a, random(8, 20, 3, 10, &ops));
        assert_eq!(a.len(), 20);
        for i in &a {
            assert!(i.check("r", 3, 10, &ops).is_ok(), "{i:?}");
        }
        // No more kills than steps: one kill per step.
        let steps: std::collections::BTreeSet<u64> = random(5, 10, 3, 10, &ops)
            .iter()
            .map(|i| match i.at {
                At::Step { step, .. } => step,
                At::Time { .. } => u64::MAX,
            })
            .collect();
        assert_eq!(steps.len(), 10);
        let kills = vec![
            KillPoint {
                id: 0,
                rank: 1,
                step: 2,
                op: 3,
            },
            KillPoint {
                id: 4,
                rank: 0,
                step: 9,
                op: 0,
            },
        ];
        assert_eq!(decode_kills(&encode_kills(&kills)).unwrap(), kills);
        assert!(decode_kills("1:2:3").is_err());
    }
}
