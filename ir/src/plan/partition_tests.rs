//! The split rule on the cases the module docs name: Llama 3.1 405B's 126 layers on the
//! pipelines published for it, the explicit Megatron keys, lighter ends, and refusals.

use super::*;

fn auto(layers: u32, pp: u32, vpp: u32) -> Result<Split, PartitionError> {
    automatic(layers, pp, vpp)
}

fn with_slots(layers: u32, pp: u32, vpp: u32, embedding: bool, loss: bool) -> Split {
    split(SplitInput {
        layers,
        pp,
        vpp,
        given: None,
        account_for_embedding: embedding,
        account_for_loss: loss,
    })
    .unwrap()
}

const AUTO_BOTH: PartitionRule = PartitionRule::Slots {
    embedding: true,
    loss: true,
    automatic: true,
};

#[test]
fn llama_405b_on_pp8_vpp8_takes_one_layer_off_each_end() {
    // 126 + 2 = 128 slots over 64 virtual stages: 2 each, the first and last give one up.
    let s = auto(126, 8, 8).unwrap();
    let mut want = vec![2u32; 64];
    want[0] = 1;
    want[63] = 1;
    assert_eq!(s.layers_per_virtual_stage, want);
    assert_eq!(s.rule, AUTO_BOTH);
}

#[test]
fn llama_405b_on_pp16_and_pp8_without_interleaving() {
    let s = auto(126, 16, 1).unwrap();
    assert_eq!(
        s.layers_per_virtual_stage,
        vec![7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7]
    );
    assert_eq!(s.rule, AUTO_BOTH);
    let s = auto(126, 8, 1).unwrap();
    assert_eq!(
        s.layers_per_virtual_stage,
        vec![15, 16, 16, 16, 16, 16, 16, 15]
    );
}

#[test]
fn an_even_split_is_kept_when_the_keys_are_unset() {
    let s = auto(128, 8, 2).unwrap();
    assert_eq!(s.layers_per_virtual_stage, vec![8; 16]);
    assert_eq!(s.rule, PartitionRule::Even);
}

#[test]
fn the_megatron_keys_apply_even_where_the_layers_divide() {
    // 30 + 2 = 32 over 4 stages (Megatron's get_num_layers_to_build: 8 each, one fewer at
    // each end).
    let s = with_slots(30, 4, 1, true, true);
    assert_eq!(s.layers_per_virtual_stage, vec![7, 8, 8, 7]);
    assert_eq!(
        s.rule,
        PartitionRule::Slots {
            embedding: true,
            loss: true,
            automatic: false
        }
    );
    // Loss only: 31 + 1 = 32 over pp 2 * vpp 2 = 8 each; the last virtual stage (stage 1,
    // chunk 1) holds 7.
    let s = with_slots(31, 2, 2, false, true);
    assert_eq!(s.layers_per_virtual_stage, vec![8, 8, 8, 7]);
    // Embedding only, on layers that divide without it: 8 + 1 = 9 over 3.
    let s = with_slots(8, 3, 1, true, false);
    assert_eq!(s.layers_per_virtual_stage, vec![2, 3, 3]);
}

#[test]
fn the_megatron_keys_refuse_what_megatron_refuses() {
    let e = split(SplitInput {
        layers: 32,
        pp: 4,
        vpp: 1,
        given: None,
        account_for_embedding: true,
        account_for_loss: false,
    })
    .unwrap_err();
    assert_eq!(
        e,
        PartitionError::SlotsUneven {
            layers: 32,
            slots: 1,
            total: 33,
            chunks: 4
        }
    );
    // 6 + 2 = 8 slots on 8 virtual stages: the ends would hold only the embedding and loss.
    let e = split(SplitInput {
        layers: 6,
        pp: 4,
        vpp: 2,
        given: None,
        account_for_embedding: true,
        account_for_loss: true,
    })
    .unwrap_err();
    assert!(matches!(e, PartitionError::SlotsEmpty { .. }), "{e}");
    let e = split(SplitInput {
        layers: 8,
        pp: 2,
        vpp: 1,
        given: Some(&[4, 4]),
        account_for_embedding: true,
        account_for_loss: false,
    })
    .unwrap_err();
    assert_eq!(e, PartitionError::GivenWithSlots);
}

#[test]
fn lighter_ends_when_the_slots_do_not_divide_either() {
    // 125 on pp 8: neither 125 nor 127 divides 8. Middle stages hold ceil(125 / 8) = 16;
    // 125 - 6 * 16 = 29 are left: 15 first, 14 last.
    let s = auto(125, 8, 1).unwrap();
    assert_eq!(
        s.layers_per_virtual_stage,
        vec![15, 16, 16, 16, 16, 16, 16, 14]
    );
    assert_eq!(
        s.rule,
        PartitionRule::LighterEnds {
            first_stage_layers: 15,
            middle_stage_layers: 16,
            last_stage_layers: 14
        }
    );
    // With vpp 2: 60 layers on pp 4 (60 % 8 = 4, 62 % 8 = 6). Middle stages hold 16 (the
    // multiple of 2 at least 15); 60 - 32 = 28 left: 14 first, 14 last; each stage's count
    // halves over its two chunks, virtual stage v = chunk * 4 + stage.
    let s = auto(60, 4, 2).unwrap();
    assert_eq!(s.layers_per_virtual_stage, vec![7, 8, 8, 7, 7, 8, 8, 7]);
    // pp 2: no middle stage; the first takes the larger half.
    let s = auto(7, 2, 1).unwrap();
    assert_eq!(s.layers_per_virtual_stage, vec![4, 3]);
}

#[test]
fn an_odd_layer_count_on_interleaved_stages_cannot_be_split() {
    // 127 % 16 = 15, 129 % 16 = 1, and 127 is no multiple of vpp = 2.
    let e = auto(127, 8, 2).unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(
            e,
            PartitionError::Automatic {
                rem: 15,
                rem2: 1,
                ..
            }
        ),
        "{text}"
    );
    assert!(text.contains("multiple of vpp = 2"), "{text}");
    // 99 on pp 16: middle stages of 7 leave 99 - 98 = 1 for both ends.
    let e = auto(99, 16, 1).unwrap_err();
    assert!(e.to_string().contains("1 are left"), "{e}");
}

#[test]
fn a_given_partition_is_used_as_written() {
    let s = split(SplitInput {
        layers: 10,
        pp: 3,
        vpp: 1,
        given: Some(&[4, 3, 3]),
        account_for_embedding: false,
        account_for_loss: false,
    })
    .unwrap();
    assert_eq!(s.layers_per_virtual_stage, vec![4, 3, 3]);
    assert_eq!(s.rule, PartitionRule::Given);
    let sum = split(SplitInput {
        layers: 11,
        pp: 3,
        vpp: 1,
        given: Some(&[4, 3, 3]),
        account_for_embedding: false,
        account_for_loss: false,
    });
    assert_eq!(sum, Err(PartitionError::Sum { got: 10, want: 11 }));
}

/// A given split may leave the first or the last virtual stage without layers (Megatron-Core
/// layouts such as DeepSeek-V3's `Et|(tt|)*30mL`, whose last stage holds only the multi-token
/// prediction module and the loss), but no stage in between.
#[test]
fn only_the_end_stages_may_hold_no_layer() {
    let given = |part: &[u32]| {
        split(SplitInput {
            layers: part.iter().sum(),
            pp: 2,
            vpp: 2,
            given: Some(part),
            account_for_embedding: false,
            account_for_loss: false,
        })
    };
    assert_eq!(
        given(&[1, 2, 2, 0]).unwrap().layers_per_virtual_stage,
        vec![1, 2, 2, 0]
    );
    assert!(given(&[0, 2, 2, 1]).is_ok());
    assert_eq!(
        given(&[1, 0, 2, 2]).unwrap_err(),
        PartitionError::EmptyChunk
    );
}
