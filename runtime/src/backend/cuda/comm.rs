//! Which NCCL communicators a rank needs, derived from the plan, and how ranks agree on each
//! communicator's unique id. One communicator per group kind the program uses (TP, DP, PP,
//! EP, CP, ...), so two streams never share one communicator. Every rank creates its
//! communicators in one global order (group kind, then members), which keeps the collective
//! `ncclCommInitRank` calls free of deadlock. Pure logic, tested without a GPU.

use crate::error::RuntimeError;
use std::collections::{BTreeMap, BTreeSet};
use twin_sim::plan::{GroupKind, Plan, RankId};
use twin_sim::schedule::{OpKind, Program};

/// One communicator this rank joins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommSpec {
    pub kind: GroupKind,
    /// Ranks in ring order; the communicator's rank i is `members[i]`.
    pub members: Vec<RankId>,
    /// This rank's index in `members`.
    pub my_index: u32,
    /// Rendezvous key under which `members[0]` publishes the unique id.
    pub key: String,
}

impl CommSpec {
    pub fn is_root(&self) -> bool {
        self.my_index == 0
    }
    /// Communicator rank of a global rank, if it is a member.
    pub fn index_of(&self, rank: RankId) -> Option<u32> {
        self.members
            .iter()
            .position(|&m| m == rank)
            .map(|i| i as u32)
    }
}

/// Group kinds a program communicates over: its collectives' groups and the groups that
/// carry its sends and receives.
pub fn used_group_kinds(program: &Program) -> BTreeSet<GroupKind> {
    program
        .ops
        .iter()
        .filter_map(|op| match &op.kind {
            OpKind::Collective { group, .. } => Some(*group),
            OpKind::Send { peer, .. } | OpKind::Recv { peer, .. } => Some(peer.group()),
            _ => None,
        })
        .collect()
}

/// The communicators `rank` creates, in creation order.
pub fn comm_specs(plan: &Plan, rank: RankId, kinds: &BTreeSet<GroupKind>) -> Vec<CommSpec> {
    let mut specs: Vec<CommSpec> = kinds
        .iter()
        .map(|&kind| {
            let members = plan.group(plan.group_of(rank, kind)).members.clone();
            let my_index = members.iter().position(|&m| m == rank).unwrap_or(0) as u32;
            let list: Vec<String> = members.iter().map(|m| m.to_string()).collect();
            CommSpec {
                kind,
                key: format!("nccl-id/{kind:?}/{}", list.join(",")),
                members,
                my_index,
            }
        })
        .collect();
    specs.sort_by(|a, b| a.kind.cmp(&b.kind).then_with(|| a.members.cmp(&b.members)));
    specs
}

/// Shares each communicator's NCCL unique id: its root publishes, the others fetch. The
/// launcher's TCP store implements this for multi-process runs.
pub trait Rendezvous {
    fn publish(&mut self, key: &str, value: &[u8]) -> Result<(), RuntimeError>;
    /// Blocks until `key` is published (or the implementation's timeout).
    fn fetch(&mut self, key: &str) -> Result<Vec<u8>, RuntimeError>;
}

/// In-process rendezvous for single-process runs: every communicator has one member, who is
/// its own root.
#[derive(Debug, Default)]
pub struct LocalRendezvous {
    values: BTreeMap<String, Vec<u8>>,
}

impl Rendezvous for LocalRendezvous {
    fn publish(&mut self, key: &str, value: &[u8]) -> Result<(), RuntimeError> {
        self.values.insert(key.to_string(), value.to_vec());
        Ok(())
    }
    fn fetch(&mut self, key: &str) -> Result<Vec<u8>, RuntimeError> {
        self.values.get(key).cloned().ok_or_else(|| {
            RuntimeError::Rendezvous(format!(
                "{key} was never published; a single-process rendezvous cannot wait for other ranks"
            ))
        })
    }
}

/// The launcher's TCP store as the rendezvous of a multi-process run: a communicator's root
/// publishes its unique id under the spec's key, every other member blocks on a GET of it
/// (bounded by the client's read timeout, so a root that died is an error, not a hang).
pub struct StoreRendezvous {
    client: crate::transport::store::StoreClient,
}

impl StoreRendezvous {
    pub fn new(client: crate::transport::store::StoreClient) -> StoreRendezvous {
        StoreRendezvous { client }
    }
}

impl Rendezvous for StoreRendezvous {
    fn publish(&mut self, key: &str, value: &[u8]) -> Result<(), RuntimeError> {
        self.client.set(key, value)
    }
    fn fetch(&mut self, key: &str) -> Result<Vec<u8>, RuntimeError> {
        self.client.get(key).map_err(|e| {
            RuntimeError::Rendezvous(format!(
                "waiting for the NCCL unique id {key} from the communicator's first member: {e}"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use twin_sim::plan::Plan;
    use twin_sim::schedule::{Label, Op, Peer, Stream};
    use twin_sim::testing::small_scenario;

    fn op(kind: OpKind) -> Op {
        Op {
            stream: Stream::Tp,
            kind,
            deps: vec![].into(),
            label: Label::default(),
        }
    }

    #[test]
    fn program_kinds_include_p2p_carriers() {
        let program = Program {
            stage: 0,
            ops: vec![
                op(OpKind::Collective {
                    kind: twin_sim::schedule::CollectiveKind::AllReduce,
                    group: GroupKind::Tp,
                    bytes: 8,
                    calls: 1,
                }),
                op(OpKind::Send {
                    peer: Peer::PpNext,
                    bytes: 8,
                    tag: 0,
                }),
                op(OpKind::Recv {
                    peer: Peer::CpPrev,
                    bytes: 8,
                    tag: 1,
                }),
                op(OpKind::Free { tag: 3 }),
            ],
        };
        let kinds: Vec<_> = used_group_kinds(&program).into_iter().collect();
        assert_eq!(kinds, vec![GroupKind::Tp, GroupKind::Cp, GroupKind::Pp]);
    }

    #[test]
    fn specs_follow_the_plan_groups() {
        // tp=2, pp=2, dp=2: rank 5 has coords tp 1, dp 0, pp 1.
        let plan = Plan::new(&small_scenario(2, 2, 2, 4)).unwrap();
        let kinds: BTreeSet<_> = [GroupKind::Pp, GroupKind::Tp, GroupKind::Dp].into();
        let specs = comm_specs(&plan, 5, &kinds);
        let got: Vec<_> = specs
            .iter()
            .map(|s| (s.kind, s.members.clone(), s.my_index))
            .collect();
        assert_eq!(
            got,
            vec![
                (GroupKind::Tp, vec![4, 5], 1),
                (GroupKind::Dp, vec![5, 7], 0),
                (GroupKind::Pp, vec![1, 5], 1),
            ]
        );
        assert!(specs[1].is_root());
        assert_eq!(specs[2].key, "nccl-id/Pp/1,5");
        // The key is the same for every member, so they find one id.
        let other = comm_specs(&plan, 1, &kinds);
        assert_eq!(other[2].key, specs[2].key);
        assert_eq!(specs[2].index_of(plan.pp_next(5)), Some(0));
    }

    #[test]
    fn single_gpu_communicators_have_one_member() {
        let plan = Plan::new(&small_scenario(1, 1, 1, 4)).unwrap();
        let kinds: BTreeSet<_> = GroupKind::ALL.into_iter().collect();
        let specs = comm_specs(&plan, 0, &kinds);
        assert_eq!(specs.len(), GroupKind::ALL.len());
        assert!(specs.iter().all(|s| s.members == vec![0] && s.is_root()));
    }

    #[test]
    fn local_rendezvous_round_trips_and_refuses_unpublished_keys() {
        let mut r = LocalRendezvous::default();
        r.publish("a", b"id").unwrap();
        assert_eq!(r.fetch("a").unwrap(), b"id");
        let e = r.fetch("b").unwrap_err().to_string();
        assert!(e.contains("b was never published"), "{e}");
    }

    #[test]
    fn store_rendezvous_hands_the_root_id_to_every_member_across_threads() {
        use crate::transport::store::{Clock, StoreClient, StoreServer};
        use std::time::Duration;
        let server = StoreServer::start("127.0.0.1", 0, Clock::new()).unwrap();
        let port = server.addr.port();
        let plan = Plan::new(&small_scenario(2, 2, 2, 4)).unwrap();
        let kinds: BTreeSet<_> = [GroupKind::Dp].into();
        let id: Vec<u8> = (0..128u8).collect();
        // Non-roots start first and must wait for the root's publish.
        let waiters: Vec<_> = (0..plan.world)
            .map(|rank| {
                let spec = comm_specs(&plan, rank, &kinds).remove(0);
                let id = id.clone();
                std::thread::spawn(move || {
                    let c =
                        StoreClient::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
                    c.set_timeout(Some(Duration::from_secs(5)));
                    let mut r = StoreRendezvous::new(c);
                    if spec.is_root() {
                        std::thread::sleep(Duration::from_millis(20));
                        r.publish(&spec.key, &id).unwrap();
                        id
                    } else {
                        r.fetch(&spec.key).unwrap()
                    }
                })
            })
            .collect();
        for w in waiters {
            assert_eq!(w.join().unwrap(), id);
        }
        // A root that never publishes: the member's fetch ends with an error naming the key.
        let c = StoreClient::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        c.set_timeout(Some(Duration::from_millis(100)));
        let e = StoreRendezvous::new(c)
            .fetch("nccl-id/Tp/0,1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("nccl-id/Tp/0,1"), "{e}");
    }
}
