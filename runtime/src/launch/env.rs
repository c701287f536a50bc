//! Where a worker learns who it is: the variables torchrun and friends use (RANK, WORLD_SIZE,
//! LOCAL_RANK, MASTER_ADDR, MASTER_PORT), with Slurm's (SLURM_PROCID, SLURM_NTASKS,
//! SLURM_LOCALID) as fallbacks, so the same worker starts from `twin run`, by hand, or from
//! `srun`. Every bad value is an error naming the variable.

use crate::error::RuntimeError;
use twin_sim::plan::RankId;

/// A worker's place in the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankEnv {
    pub rank: RankId,
    pub world: u32,
    pub local_rank: u32,
    pub master_addr: String,
    pub master_port: u16,
}

fn first(
    get: &dyn Fn(&str) -> Option<String>,
    names: &[&'static str],
) -> Option<(&'static str, String)> {
    names
        .iter()
        .find_map(|&n| get(n).filter(|v| !v.is_empty()).map(|v| (n, v)))
}

fn number(var: &'static str, text: &str) -> Result<u32, RuntimeError> {
    text.trim().parse().map_err(|_| RuntimeError::Env {
        var,
        message: format!("{text:?} is not a non-negative integer"),
    })
}

impl RankEnv {
    /// Read the process environment.
    pub fn from_env() -> Result<RankEnv, RuntimeError> {
        RankEnv::from_lookup(&|k| std::env::var(k).ok())
    }

    /// Read from any lookup (tests pass a map).
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<RankEnv, RuntimeError> {
        let missing = |var: &'static str, also: &str| {
            RuntimeError::Env {
            var,
            message: format!("not set (nor {also}); start workers with `twin run`, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (see docs/runtime.md)"),
        }
        };
        let (rv, r) =
            first(get, &["RANK", "SLURM_PROCID"]).ok_or_else(|| missing("RANK", "SLURM_PROCID"))?;
        let rank = number(rv, &r)?;
        let (wv, w) = first(get, &["WORLD_SIZE", "SLURM_NTASKS"])
            .ok_or_else(|| missing("WORLD_SIZE", "SLURM_NTASKS"))?;
        let world = number(wv, &w)?;
        if world == 0 {
            return Err(RuntimeError::Env {
                var: wv,
                message: "must be at least 1".into(),
            });
        }
        if rank >= world {
            return Err(RuntimeError::Env {
                var: rv,
                message: format!("rank {rank} is not below the world size {world}"),
            });
        }
        let local_rank = match first(get, &["LOCAL_RANK", "SLURM_LOCALID"]) {
            Some((v, t)) => number(v, &t)?,
            None => 0,
        };
        let master_addr = get("MASTER_ADDR")
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "127.0.0.1".to_string());
        let port_text = get("MASTER_PORT").ok_or_else(|| RuntimeError::Env {
            var: "MASTER_PORT",
            message: "not set; pick a free TCP port, the same on every rank (e.g. 29500)".into(),
        })?;
        let master_port = match port_text.trim().parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => {
                return Err(RuntimeError::Env {
                    var: "MASTER_PORT",
                    message: format!("{port_text:?} is not a TCP port (1-65535)"),
                })
            }
        };
        Ok(RankEnv {
            rank,
            world,
            local_rank,
            master_addr,
            master_port,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn env(pairs: &[(&str, &str)]) -> Result<RankEnv, RuntimeError> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RankEnv::from_lookup(&|k| m.get(k).cloned())
    }

    #[test]
    fn torchrun_and_slurm_variables() {
        let e = env(&[
            ("RANK", "2"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "0"),
            ("MASTER_PORT", "29500"),
        ])
        .unwrap();
        assert_eq!(
            (e.rank, e.world, e.master_addr.as_str(), e.master_port),
            (2, 4, "127.0.0.1", 29500)
        );
        let e = env(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("MASTER_ADDR", "node01"),
            ("MASTER_PORT", "1234"),
        ])
        .unwrap();
        assert_eq!(
            (e.rank, e.world, e.local_rank, e.master_addr.as_str()),
            (5, 8, 1, "node01")
        );
    }

    #[test]
    fn bad_values_name_the_variable() {
        let cases: [(&[(&str, &str)], &str); 5] = [
            (
                &[("WORLD_SIZE", "2"), ("MASTER_PORT", "1")],
                "RANK: not set",
            ),
            (
                &[("RANK", "x"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "1")],
                "RANK: \"x\" is not",
            ),
            (
                &[("RANK", "2"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "1")],
                "not below the world size 2",
            ),
            (
                &[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "70000")],
                "MASTER_PORT: \"70000\" is not a TCP port",
            ),
            (
                &[("RANK", "0"), ("WORLD_SIZE", "2")],
                "MASTER_PORT: not set",
            ),
        ];
        for (pairs, want) in cases {
            let e = env(pairs).unwrap_err().to_string();
            assert!(e.contains(want), "{e} does not contain {want}");
        }
    }
}
