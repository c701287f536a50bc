//! Fault injection for the failure tests: `TWIN_FAULT=KIND:RANK:OP` makes one rank, when it
//! reaches op OP of its program in the first step, kill itself with SIGKILL (`kill`), stop
//! responding (`hang`), or send damaged messages for that op (`corrupt`). Never set in
//! normal runs; the variable exists so the tests can exercise real failures.

use crate::error::RuntimeError;
use twin_sim::plan::RankId;

pub const FAULT_VAR: &str = "TWIN_FAULT";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    Kill,
    Hang,
    Corrupt,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    pub rank: RankId,
    pub op: u32,
}

impl Fault {
    /// Parse `KIND:RANK:OP`.
    pub fn parse(text: &str) -> Result<Fault, RuntimeError> {
        let bad = || RuntimeError::Env {
            var: FAULT_VAR,
            message: format!("{text:?} is not KIND:RANK:OP with KIND one of kill, hang, corrupt"),
        };
        let mut parts = text.split(':');
        let kind = match parts.next() {
            Some("kill") => FaultKind::Kill,
            Some("hang") => FaultKind::Hang,
            Some("corrupt") => FaultKind::Corrupt,
            _ => return Err(bad()),
        };
        let rank = parts.next().and_then(|r| r.parse().ok()).ok_or_else(bad)?;
        let op = parts.next().and_then(|r| r.parse().ok()).ok_or_else(bad)?;
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Fault { kind, rank, op })
    }

    /// Read the variable; unset means no fault.
    pub fn from_env() -> Result<Option<Fault>, RuntimeError> {
        match std::env::var(FAULT_VAR) {
            Ok(v) if !v.is_empty() => Fault::parse(&v).map(Some),
            _ => Ok(None),
        }
    }
}

/// Carry out a kill or hang fault now (a corrupt fault is applied by the sender instead).
pub fn trigger(kind: FaultKind) {
    match kind {
        FaultKind::Kill => {
            // SAFETY: plain syscalls with no memory arguments.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
        FaultKind::Hang => loop {
            std::thread::park();
        },
        FaultKind::Corrupt => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_faults_and_rejects_junk() {
        assert_eq!(
            Fault::parse("kill:1:12").unwrap(),
            Fault {
                kind: FaultKind::Kill,
                rank: 1,
                op: 12
            }
        );
        assert_eq!(
            Fault::parse("corrupt:0:3").unwrap().kind,
            FaultKind::Corrupt
        );
        for bad in ["", "kill", "kill:x:1", "boom:1:1", "hang:1:2:3"] {
            let e = Fault::parse(bad).unwrap_err().to_string();
            assert!(e.contains("TWIN_FAULT"), "{e}");
        }
    }
}
