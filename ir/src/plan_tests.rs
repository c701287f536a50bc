//! Tests of the plan: rank placement, groups and their members, and the errors a bad layout
//! gives. Split from `plan` so that the layout code reads on its own.

use super::*;
use crate::testing::small_scenario;

#[test]
fn coords_round_trip_and_megatron_order() {
    let s = small_scenario(2, 4, 2, 8);
    let plan = Plan::new(&s).unwrap();
    assert_eq!(plan.world, 16);
    for r in 0..plan.world {
        assert_eq!(plan.rank_of(plan.coords(r)), r);
    }
    // tp innermost: ranks 0 and 1 share everything but tp.
    assert_eq!(
        plan.coords(1),
        Coords {
            tp: 1,
            ..Coords::default()
        }
    );
    // then dp (cp = ep = 1), then pp.
    assert_eq!(plan.coords(2).dp, 1);
    assert_eq!(plan.coords(4).pp, 1);
}

#[test]
fn groups_partition_the_world() {
    let s = small_scenario(2, 2, 4, 8);
    let plan = Plan::new(&s).unwrap();
    for kind in GroupKind::ALL {
        let mut seen = vec![0u32; plan.world as usize];
        for g in plan.groups().iter().filter(|g| g.kind == kind) {
            for &m in &g.members {
                seen[m as usize] += 1;
                assert_eq!(
                    plan.group_of(m, kind),
                    plan.groups()
                        .iter()
                        .position(|x| std::ptr::eq(x, g))
                        .unwrap() as u32
                );
            }
        }
        assert!(
            seen.iter().all(|&c| c == 1),
            "{kind:?} groups must cover each rank once"
        );
    }
    let tp = plan.group(plan.group_of(0, GroupKind::Tp));
    assert_eq!(tp.members, vec![0, 1]);
    assert_eq!(tp.nodes, 1);
    let world = plan.group(plan.group_of(0, GroupKind::World));
    assert_eq!(world.members.len(), 16);
    assert_eq!(world.nodes, 2);
    assert_eq!(world.max_per_node, 8);
}

/// Members by definition: the ranks that agree with the group's rank on every axis the
/// kind does not vary, ascending; ids in order of each group's smallest member.
/// Plans of one tp 2, cp 2, pp 3, dp 2 scenario, each in a different placement order.
fn plans_in_three_orders() -> Vec<Plan> {
    plans_in_three_orders_of(small_scenario(2, 3, 2, 4))
}

/// The same, HSDP: dp 4 under FSDP in shard groups of 2.
fn hsdp_plans_in_three_orders() -> Vec<Plan> {
    let mut s = small_scenario(2, 3, 4, 4);
    s.parallel.fsdp = true;
    s.parallel.zero = 3;
    s.parallel.fsdp_degree = Some(2);
    plans_in_three_orders_of(s)
}

fn plans_in_three_orders_of(mut s: crate::scenario::Scenario) -> Vec<Plan> {
    use crate::scenario::Axis;
    s.parallel.cp = 2;
    s.cluster.gpus *= 2;
    [
        crate::scenario::Parallel::DEFAULT_ORDER,
        [Axis::Pp, Axis::Tp, Axis::Cp, Axis::Ep, Axis::Dp],
        [Axis::Dp, Axis::Pp, Axis::Cp, Axis::Tp, Axis::Ep],
    ]
    .into_iter()
    .map(|order| {
        s.parallel.order = order;
        Plan::new(&s).unwrap()
    })
    .collect()
}

#[test]
fn groups_match_their_coordinate_definition_in_any_order() {
    for plan in plans_in_three_orders()
        .into_iter()
        .chain(hsdp_plans_in_three_orders())
        .chain(plans_in_three_orders_of(small_scenario(2, 4, 2, 4)))
    {
        let order = plan.order;
        let mut next_id = 0u32;
        for kind in GroupKind::ALL {
            // The coordinates a group's members share: every axis the kind does not vary,
            // and along dp the shard block (dp / fsdp_degree) for the shard groups or the
            // place in the block (dp % fsdp_degree) for the replica group.
            let f = plan.fsdp_degree;
            let fixed = |c: Coords| {
                let (mut out, dp) = (c, c.dp);
                for &a in kind.varied_axes() {
                    out.set(a, 0);
                }
                let pp = plan.sizes.pp;
                match kind {
                    GroupKind::DenseDp | GroupKind::ExpertDp => out.dp = dp / f,
                    GroupKind::DpReplica => out.dp = dp % f,
                    // Stages s and pp - 1 - s share a group when pp is even.
                    GroupKind::PpMirror if pp % 2 == 0 => out.pp = c.pp.min(pp - 1 - c.pp),
                    GroupKind::PpMirror => out.pp = c.pp,
                    _ => {}
                }
                out
            };
            for r in 0..plan.world {
                let want: Vec<RankId> = (0..plan.world)
                    .filter(|&m| fixed(plan.coords(m)) == fixed(plan.coords(r)))
                    .collect();
                let g = plan.group(plan.group_of(r, kind));
                assert_eq!(g.kind, kind);
                assert_eq!(g.members, want, "{order:?} {kind:?} rank {r}");
                let mut nodes: Vec<u32> = want.iter().map(|&m| plan.node_of(m)).collect();
                nodes.dedup();
                assert_eq!(g.nodes as usize, nodes.len());
                let most = nodes
                    .iter()
                    .map(|&n| want.iter().filter(|&&m| plan.node_of(m) == n).count())
                    .max()
                    .unwrap();
                assert_eq!(g.max_per_node as usize, most);
                if want[0] == r {
                    assert_eq!(plan.group_of(r, kind), next_id, "{order:?} {kind:?}");
                    next_id += 1;
                }
            }
        }
        assert_eq!(next_id as usize, plan.groups().len());
    }
}

/// HSDP over dp 8 in shard groups of 4, tp 2 inside: the shard groups take the inner dp
/// coordinates (one node of 8 GPUs each), the replica groups join the two nodes.
#[test]
fn hsdp_splits_the_dp_axis_into_inner_shard_and_outer_replica_groups() {
    let mut s = small_scenario(2, 1, 8, 4);
    s.parallel.fsdp = true;
    s.parallel.zero = 3;
    s.parallel.fsdp_degree = Some(4);
    let plan = Plan::new(&s).unwrap();
    assert_eq!(
        (plan.world, plan.gpus_per_node, plan.fsdp_degree),
        (16, 8, 4)
    );
    let members = |r: RankId, k: GroupKind| plan.group(plan.group_of(r, k)).members.clone();
    assert_eq!(members(0, GroupKind::DenseDp), vec![0, 2, 4, 6]);
    assert_eq!(members(9, GroupKind::DenseDp), vec![9, 11, 13, 15]);
    assert_eq!(members(0, GroupKind::ExpertDp), vec![0, 2, 4, 6]);
    assert_eq!(members(0, GroupKind::DpReplica), vec![0, 8]);
    assert_eq!(members(7, GroupKind::DpReplica), vec![7, 15]);
    assert_eq!(
        members(0, GroupKind::Dp),
        (0..16).step_by(2).collect::<Vec<_>>()
    );
    let shard = plan.group(plan.group_of(0, GroupKind::DenseDp));
    assert_eq!((shard.nodes, shard.max_per_node), (1, 4));
    let replica = plan.group(plan.group_of(0, GroupKind::DpReplica));
    assert_eq!((replica.nodes, replica.max_per_node), (2, 1));
    assert_eq!(
        [
            GroupKind::DenseDp,
            GroupKind::ExpertDp,
            GroupKind::DpReplica,
            GroupKind::Dp
        ]
        .map(|k| plan.group_size(k)),
        [4, 4, 2, 8]
    );
    // Without HSDP the shard group is the whole dp axis and each rank its own replica.
    s.parallel.fsdp_degree = None;
    let plain = Plan::new(&s).unwrap();
    let members = |r: RankId, k: GroupKind| plain.group(plain.group_of(r, k)).members.clone();
    assert_eq!(members(0, GroupKind::DenseDp), members(0, GroupKind::Dp));
    assert_eq!(members(5, GroupKind::DpReplica), vec![5]);
    // A degree that does not divide dp is an error, not a wrong plan.
    s.parallel.fsdp_degree = Some(3);
    assert_eq!(
        Plan::new(&s).unwrap_err(),
        PlanError::FsdpDegree {
            fsdp_degree: 3,
            dp: 8
        }
    );
}

#[test]
fn group_kind_index_is_position_in_all() {
    for (i, k) in GroupKind::ALL.iter().enumerate() {
        assert_eq!(k.index(), i);
    }
}

/// Stage and pipeline neighbours (computed from the pp stride) agree with their
/// coordinate definition in any placement order.
#[test]
fn stage_and_pipeline_neighbours_follow_coordinates_in_any_order() {
    for plan in plans_in_three_orders() {
        let order = plan.order;
        for r in 0..plan.world {
            let c = plan.coords(r);
            assert_eq!(plan.stage_of(r), c.pp, "{order:?} {r}");
            let next = Coords {
                pp: (c.pp + 1) % 3,
                ..c
            };
            let prev = Coords {
                pp: (c.pp + 2) % 3,
                ..c
            };
            assert_eq!(plan.pp_next(r), plan.rank_of(next), "{order:?} {r}");
            assert_eq!(plan.pp_prev(r), plan.rank_of(prev), "{order:?} {r}");
        }
    }
}

#[test]
fn pipeline_neighbours_wrap() {
    let s = small_scenario(1, 4, 1, 4);
    let plan = Plan::new(&s).unwrap();
    assert_eq!(plan.pp_next(3), 0);
    assert_eq!(plan.pp_prev(0), 3);
    assert_eq!(plan.pp_next(1), 2);
}

#[test]
fn interleaved_chunks_hold_virtual_stages() {
    let mut s = small_scenario(1, 2, 1, 4);
    s.parallel.vpp = 2;
    let plan = Plan::new(&s).unwrap();
    // 16 layers, 4 virtual stages of 4. Stage 0 holds virtual stages 0 and 2.
    assert_eq!(plan.chunks[0][1].virtual_stage, 2);
    assert_eq!(plan.chunks[0][1].first_layer, 8);
    assert!(plan.chunks[0][0].has_embedding);
    assert!(plan.chunks[1][1].has_head);
}

#[test]
fn invalid_meshes_are_errors_not_panics() {
    let mut s = small_scenario(2, 2, 2, 4);
    s.cluster.gpus = 7;
    assert!(matches!(Plan::new(&s), Err(PlanError::MeshMismatch { .. })));
    // 2 layers on 3 stages: not evenly, not as 4 slots, and no layer left for a last stage.
    let mut s = small_scenario(1, 3, 1, 4);
    s.model.layers = 2;
    assert!(matches!(
        Plan::new(&s),
        Err(PlanError::Partition(PartitionError::Automatic { .. }))
    ));
    s.model.layers = 10;
    s.parallel.layer_partition = Some(vec![4, 3, 3]);
    let plan = Plan::new(&s).unwrap();
    assert_eq!(plan.partition, PartitionRule::Given);
    assert_eq!(plan.layers_per_virtual_stage(), vec![4, 3, 3]);
}

/// 126 layers on pp 4 with vpp 2 (Llama 3.1 405B's depth): 128 slots over 8 virtual stages,
/// the first and last one layer lighter, laid out along the model in virtual-stage order.
#[test]
fn an_uneven_model_is_split_automatically_and_laid_out_in_order() {
    let mut s = small_scenario(1, 4, 1, 8);
    s.model.layers = 126;
    s.parallel.vpp = 2;
    s.parallel.schedule = crate::scenario::PipelineSchedule::Interleaved1F1B;
    let plan = Plan::new(&s).unwrap();
    assert_eq!(
        plan.layers_per_virtual_stage(),
        vec![15, 16, 16, 16, 16, 16, 16, 15]
    );
    assert!(plan.partition.is_derived());
    // stage 0 holds virtual stages 0 (layers 0..15) and 4 (layers 15 + 3 * 16 = 63 ..);
    // stage 3 holds 3 (47..63) and 7, the last, with the head (111..126).
    let (c0, c4) = (&plan.chunks[0][0], &plan.chunks[0][1]);
    assert_eq!(
        (c0.first_layer, c0.num_layers, c0.has_embedding),
        (0, 15, true)
    );
    assert_eq!(
        (c4.virtual_stage, c4.first_layer, c4.num_layers),
        (4, 63, 16)
    );
    let (c3, c7) = (&plan.chunks[3][0], &plan.chunks[3][1]);
    assert_eq!((c3.first_layer, c3.num_layers), (47, 16));
    assert_eq!(
        (c7.first_layer, c7.num_layers, c7.has_head),
        (111, 15, true)
    );
}

/// A plan takes a recycled plan's groups only when its mesh is the same, and they are
/// the groups it would have built.
#[test]
fn recycled_groups_serve_only_the_same_mesh() {
    let groups = |p: &Plan| {
        let of: Vec<GroupId> = (0..p.world)
            .flat_map(|r| GroupKind::ALL.map(|k| p.group_of(r, k)))
            .collect();
        (format!("{:?}", p.groups()), of)
    };
    let (tp2, other_mesh) = (small_scenario(2, 2, 2, 8), small_scenario(4, 2, 1, 8));
    let mut other_batch = tp2.clone();
    other_batch.training.micro_batch = 2;
    let first = Plan::new(&tp2).unwrap();
    let recycled = first.groups().as_ptr();
    first.recycle();
    let mismatched = Plan::new(&other_mesh).unwrap();
    assert_ne!(mismatched.groups().as_ptr(), recycled);
    let fresh_other =
        std::thread::scope(|t| t.spawn(|| Plan::new(&other_mesh).unwrap()).join().unwrap());
    assert_eq!(groups(&mismatched), groups(&fresh_other));
    let reused = Plan::new(&other_batch).unwrap();
    assert_eq!(
        reused.groups().as_ptr(),
        recycled,
        "the same mesh takes the spare groups"
    );
    let fresh =
        std::thread::scope(|t| t.spawn(|| Plan::new(&other_batch).unwrap()).join().unwrap());
    assert_eq!(groups(&reused), groups(&fresh));
    assert_eq!(reused.microbatches, fresh.microbatches);
}

/// Expert parallelism folds into data parallelism, as Megatron-Core's mesh does: tp 2, pp 1,
/// dp 8, ep 4 is 16 GPUs (not 64). The dense layers' data-parallel group is the 8 dp ranks of
/// a tp coordinate; the expert layers split those into ep groups of 4 consecutive dp ranks
/// (tp ranks apart) and expert data-parallel groups of the dp / ep = 2 ranks that hold the
/// same experts.
#[test]
fn expert_parallelism_groups_ranks_of_the_data_parallel_dimension() {
    let mut s = small_scenario(2, 1, 8, 4);
    s.parallel.ep = 4;
    let plan = Plan::new(&s).unwrap();
    assert_eq!(plan.world, 16);
    assert_eq!((plan.sizes.ep, plan.sizes.dp), (4, 2));
    let members = |r: RankId, k: GroupKind| plan.group(plan.group_of(r, k)).members.clone();
    assert_eq!(
        members(0, GroupKind::DenseDp),
        (0..16).step_by(2).collect::<Vec<_>>()
    );
    assert_eq!(members(0, GroupKind::Ep), vec![0, 2, 4, 6]);
    assert_eq!(members(1, GroupKind::Ep), vec![1, 3, 5, 7]);
    assert_eq!(members(0, GroupKind::ExpertDp), vec![0, 8]);
    assert_eq!(plan.group_size(GroupKind::DenseDp), 8);
    assert_eq!(plan.group_size(GroupKind::ExpertDp), 2);
    // ep must divide dp.
    s.parallel.ep = 3;
    assert_eq!(Plan::new(&s).unwrap_err(), PlanError::EpDp { ep: 3, dp: 8 });
}

/// Expert layers with `etp = 1` under `tp = 2` refold a stage's `tp * dp` ranks as Megatron-Core
/// does (expert tp innermost, then ep, then expert dp): tp 2, dp 8, ep 4 on 16 GPUs gives ep
/// groups of 4 consecutive ranks and expert data-parallel groups of the 4 ranks 4 apart; the
/// dense groups are unchanged.
#[test]
fn expert_layers_with_etp_1_refold_the_tensor_parallel_ranks() {
    let mut s = small_scenario(2, 1, 8, 4);
    s.parallel.ep = 4;
    s.parallel.etp = Some(1);
    let plan = Plan::new(&s).unwrap();
    assert_eq!(plan.world, 16);
    assert_eq!(
        plan.expert_fold,
        Some(ExpertFold {
            etp: 1,
            ep: 4,
            edp: 4
        })
    );
    let members = |r: RankId, k: GroupKind| plan.group(plan.group_of(r, k)).members.clone();
    assert_eq!(members(0, GroupKind::Tp), vec![0, 1]);
    assert_eq!(
        members(0, GroupKind::DenseDp),
        (0..16).step_by(2).collect::<Vec<_>>()
    );
    assert_eq!(members(0, GroupKind::Ep), vec![0, 1, 2, 3]);
    assert_eq!(members(5, GroupKind::Ep), vec![4, 5, 6, 7]);
    assert_eq!(members(1, GroupKind::ExpertDp), vec![1, 5, 9, 13]);
    assert_eq!(plan.group_size(GroupKind::ExpertDp), 4);
    // ep 32 over 2 stages of tp 2 x dp 16: more expert-parallel ranks than dp (Qwen3-235B's
    // layout on 256 GPUs at pp 4).
    let mut s = small_scenario(2, 4, 16, 4);
    s.parallel.ep = 32;
    s.parallel.etp = Some(1);
    let plan = Plan::new(&s).unwrap();
    let ep = plan.group(plan.group_of(64, GroupKind::Ep));
    assert_eq!(ep.members, (64..96).collect::<Vec<_>>());
    assert_eq!(plan.group_size(GroupKind::ExpertDp), 1);
}

/// Expert parallelism under context parallelism refolds a stage's `tp * cp * dp` ranks as
/// Megatron-Core's expert rank generator does: with tp 1, cp 2, dp 4 and ep 4 the ep group of
/// rank 0 is its cp partner and the next dp replica's two cp ranks (0-3, the ranks `etp = tp`
/// apart), where the dense mesh would have put it along dp (0, 2, 4, 6); the experts' data
/// parallelism is the `cp * dp / ep = 2` ranks 4 apart. With tp 2 and `etp = 1` the ep group is
/// the consecutive ranks of the stage's tp, cp and dp block.
#[test]
fn expert_layers_under_context_parallelism_refold_the_context_parallel_ranks() {
    let mut s = small_scenario(1, 1, 4, 4);
    s.parallel.cp = 2;
    s.cluster.gpus = 8;
    s.parallel.ep = 4;
    let plan = Plan::new(&s).unwrap();
    assert_eq!(plan.world, 8);
    assert_eq!(
        plan.expert_fold,
        Some(ExpertFold {
            etp: 1,
            ep: 4,
            edp: 2
        })
    );
    let members =
        |plan: &Plan, r: RankId, k: GroupKind| plan.group(plan.group_of(r, k)).members.clone();
    assert_eq!(members(&plan, 0, GroupKind::Cp), vec![0, 1]);
    assert_eq!(members(&plan, 0, GroupKind::Ep), vec![0, 1, 2, 3]);
    assert_eq!(members(&plan, 6, GroupKind::Ep), vec![4, 5, 6, 7]);
    assert_eq!(members(&plan, 1, GroupKind::ExpertDp), vec![1, 5]);
    // The dense layers' gradients still reduce over cp and dp: every rank of the stage.
    assert_eq!(
        members(&plan, 0, GroupKind::DenseDp),
        (0..8).collect::<Vec<_>>()
    );

    // tp 2 (etp = 1), cp 2, dp 2, ep 8 over two stages: each stage's 8 ranks are one ep group.
    let mut s = small_scenario(2, 2, 2, 4);
    s.parallel.cp = 2;
    s.cluster.gpus = 16;
    s.parallel.ep = 8;
    s.parallel.etp = Some(1);
    s.parallel.sequence_parallel = true;
    let plan = Plan::new(&s).unwrap();
    assert_eq!(
        members(&plan, 9, GroupKind::Ep),
        (8..16).collect::<Vec<_>>()
    );
    assert_eq!(members(&plan, 9, GroupKind::Tp), vec![8, 9]);
    assert_eq!(plan.group_size(GroupKind::ExpertDp), 1);
}

/// Expert tensor parallelism between 1 and tp: with tp 4, etp 2, ep 4 and dp 2 the expert layers
/// refold each stage's 8 ranks as etp groups of 2 consecutive ranks, ep groups of 4 ranks 2
/// apart, and no expert data parallelism; the dense groups keep the tp of 4. Without a refold
/// (etp = tp) the expert-tensor-parallel group is the tensor-parallel one.
#[test]
fn expert_tensor_parallelism_between_one_and_tp_groups_consecutive_ranks() {
    let mut s = small_scenario(4, 1, 2, 4);
    s.parallel.ep = 4;
    s.parallel.etp = Some(2);
    let plan = Plan::new(&s).unwrap();
    assert_eq!(
        plan.expert_fold,
        Some(ExpertFold {
            etp: 2,
            ep: 4,
            edp: 1
        })
    );
    let members =
        |plan: &Plan, r: RankId, k: GroupKind| plan.group(plan.group_of(r, k)).members.clone();
    assert_eq!(members(&plan, 5, GroupKind::Etp), vec![4, 5]);
    assert_eq!(members(&plan, 5, GroupKind::Ep), vec![1, 3, 5, 7]);
    assert_eq!(members(&plan, 5, GroupKind::Tp), vec![4, 5, 6, 7]);
    assert_eq!(plan.group_size(GroupKind::ExpertDp), 1);
    let mut s = small_scenario(4, 1, 4, 4);
    s.parallel.ep = 2;
    let plan = Plan::new(&s).unwrap();
    assert_eq!(plan.expert_fold, None);
    assert_eq!(
        members(&plan, 5, GroupKind::Etp),
        members(&plan, 5, GroupKind::Tp)
    );
}

/// DualPipe: stage s holds model stage s (chunk 0) and model stage pp - 1 - s (chunk 1), both
/// ends hold the embedding and the head, and the split is still the pp stages'.
#[test]
fn dualpipe_stages_hold_a_stage_and_its_mirror() {
    let mut s = small_scenario(1, 4, 1, 8);
    s.model.layers = 8;
    s.parallel.schedule = crate::scenario::PipelineSchedule::DualPipe;
    let plan = Plan::new(&s).unwrap();
    assert_eq!(plan.vpp(), 2);
    let got: Vec<Vec<(u32, u32, u32)>> = plan
        .chunks
        .iter()
        .map(|row| {
            row.iter()
                .map(|c| (c.chunk, c.virtual_stage, c.first_layer))
                .collect()
        })
        .collect();
    assert_eq!(
        got,
        vec![
            vec![(0, 0, 0), (1, 3, 6)],
            vec![(0, 1, 2), (1, 2, 4)],
            vec![(0, 2, 4), (1, 1, 2)],
            vec![(0, 3, 6), (1, 0, 0)],
        ]
    );
    assert!(plan.chunks[0][0].has_embedding && plan.chunks[0][1].has_head);
    assert!(plan.chunks[3][1].has_embedding && plan.chunks[3][0].has_head);
    assert_eq!(plan.layers_per_virtual_stage(), vec![2, 2, 2, 2]);
}

/// One group built alone equals the group of the whole table, for every rank and kind, in
/// any placement order, under HSDP and with expert layers refolding the tensor-parallel
/// ranks; and building it leaves the table unbuilt.
#[test]
fn a_group_built_alone_equals_the_tables() {
    let mut plans = plans_in_three_orders();
    plans.extend(hsdp_plans_in_three_orders());
    for (ep, etp) in [(4, None), (4, Some(1))] {
        let mut s = small_scenario(2, 2, 8, 4);
        s.parallel.ep = ep;
        s.parallel.etp = etp;
        plans.push(Plan::new(&s).unwrap());
    }
    for plan in plans {
        let alone: Vec<Group> = (0..plan.world)
            .flat_map(|r| GroupKind::ALL.map(|k| plan.group_containing(r, k)))
            .collect();
        assert!(plan.table.get().is_none(), "{:?}", plan.order);
        let mut alone = alone.into_iter();
        for r in 0..plan.world {
            for k in GroupKind::ALL {
                let (a, t) = (alone.next().unwrap(), plan.group(plan.group_of(r, k)));
                assert_eq!(
                    (a.kind, &a.members, a.nodes, a.max_per_node),
                    (t.kind, &t.members, t.nodes, t.max_per_node),
                    "{:?} rank {r} {k:?}",
                    plan.order
                );
            }
        }
    }
}

/// DualPipe's copies: with pp 4, ranks at stages 0 and 3 pair up, and 1 and 2; the pairs
/// cross nodes where the stages do. With pp odd every rank is alone.
#[test]
fn pp_mirror_pairs_stage_s_with_stage_pp_minus_1_minus_s() {
    // tp 2, pp 4, dp 1 on 8 GPUs per node: stage s is ranks 2s and 2s + 1, one node.
    let plan = Plan::new(&small_scenario(2, 4, 1, 8)).unwrap();
    assert_eq!(plan.group_size(GroupKind::PpMirror), 2);
    let members = |r| {
        plan.group(plan.group_of(r, GroupKind::PpMirror))
            .members
            .clone()
    };
    assert_eq!(members(0), vec![0, 6]);
    assert_eq!(members(7), vec![1, 7]);
    assert_eq!(members(2), vec![2, 4]);
    assert_eq!(members(5), vec![3, 5]);
    assert_eq!(plan.pp_mirror(3), 5);
    let g = plan.group(plan.group_of(0, GroupKind::PpMirror));
    assert_eq!((g.nodes, g.max_per_node), (1, 2));
    // tp 4, pp 4 on 8 GPUs per node: stages 0 and 3 are on nodes 0 and 1.
    let plan = Plan::new(&small_scenario(4, 4, 1, 8)).unwrap();
    let g = plan.group(plan.group_of(1, GroupKind::PpMirror));
    assert_eq!(g.members, vec![1, 13]);
    assert_eq!((g.nodes, g.max_per_node), (2, 1));
    let plan = Plan::new(&small_scenario(1, 3, 1, 8)).unwrap();
    assert_eq!(plan.group_size(GroupKind::PpMirror), 1);
    assert_eq!(
        plan.group(plan.group_of(1, GroupKind::PpMirror)).members,
        vec![1]
    );
}
