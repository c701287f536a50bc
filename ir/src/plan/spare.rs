//! The groups of the last plan handed back on this thread ([`super::Plan::recycle`]), kept
//! for the next plan of the same mesh: a layout search plans runs of layouts that differ
//! only in micro batch, recompute or ZeRO stage, whose groups are identical.

use super::{Coords, Group, GroupId};
use crate::scenario::Axis;
use std::cell::RefCell;

/// The inputs of `Plan::build_groups`: plans equal in these have equal groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupsKey {
    pub world: u32,
    pub sizes: Coords,
    pub order: [Axis; 5],
    pub fsdp_degree: u32,
    pub gpus_per_node: u32,
    pub expert_fold: Option<super::ExpertFold>,
}

/// The groups of a recycled plan, with what they were built from.
struct SpareGroups {
    key: GroupsKey,
    groups: Vec<Group>,
    group_of: Vec<Vec<GroupId>>,
}

thread_local! {
    static SPARE_GROUPS: RefCell<Option<SpareGroups>> = const { RefCell::new(None) };
}

/// Keeps a plan's groups for the next plan built on this thread (replacing older ones).
pub(super) fn keep(key: GroupsKey, groups: Vec<Group>, group_of: Vec<Vec<GroupId>>) {
    let _ = SPARE_GROUPS.try_with(|spare| {
        if let Ok(mut spare) = spare.try_borrow_mut() {
            *spare = Some(SpareGroups {
                key,
                groups,
                group_of,
            });
        }
    });
}

/// This thread's kept groups when they were built for `key`; otherwise they stay kept.
pub(super) fn take(key: GroupsKey) -> Option<(Vec<Group>, Vec<Vec<GroupId>>)> {
    SPARE_GROUPS
        .try_with(|spare| {
            let mut spare = spare.try_borrow_mut().ok()?;
            if spare.as_ref()?.key != key {
                return None;
            }
            spare.take().map(|s| (s.groups, s.group_of))
        })
        .ok()
        .flatten()
}
