//! Kinds of job for which twin's prediction is known to lean one way against published runs
//! (docs/accuracy.md, "Known misses"). A report names each that applies to its scenario (a
//! note line), so that a user reads the step time with what the published runs showed.
//!
//! Each bias states a direction only, no size (a size would go stale as the model changes),
//! and `sim/tests/validation.rs` checks it: every published row of the validation tables
//! whose scenario a bias applies to misses in its direction, and every bias applies to at
//! least one row. A change that corrects a bias fails that test, and the bias goes.

use crate::cost::{scenario_backend, AttentionBackend};
use crate::scenario::{MoeRouting, Scenario};

/// Which way the published runs missed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// twin predicted a shorter step than every published run of this kind took.
    TooFast,
    /// twin predicted a longer step than every published run of this kind took.
    TooSlow,
}

/// One kind of job and how twin's predictions of it have missed.
#[derive(Clone, Copy, Debug)]
pub struct KnownBias {
    /// Short, stable name (in test messages).
    pub id: &'static str,
    pub direction: Direction,
    /// The report's note line.
    pub note: &'static str,
    /// Whether a scenario is of this kind.
    pub applies: fn(&Scenario) -> bool,
}

/// Dropless routing of Megatron-Core's mixture-of-experts layers.
pub const DROPLESS_MOE: KnownBias = KnownBias {
    id: "dropless-moe",
    direction: Direction::TooFast,
    applies: |s| {
        s.model.moe.is_some()
            && s.training.framework.name == "megatron-core"
            && matches!(
                s.training.moe_routing,
                MoeRouting::Balanced | MoeRouting::ForceBalanced
            )
    },
    note: "every published Megatron-Core mixture-of-experts run with dropless routing took \
           longer than twin predicts for it, by 14-55% (capacity-padded runs by 6-10%), NVIDIA's \
           own MoE report's run too; its host waits for the GPU in every MoE layer, which costs \
           time only with a host time per kernel, and the megatron-core file has none (twin \
           calibrate trace fits one from a trace of the run); see docs/accuracy.md, Known \
           misses",
};

/// Meta's Grand Teton H100 at 500 W (torchtitan's published runs).
pub const GRAND_TETON_500W: KnownBias = KnownBias {
    id: "h100-500w",
    direction: Direction::TooFast,
    applies: |s| s.cluster.gpu.name == GRAND_TETON_GPU,
    note: "this 500 W H100's tensor-core peak is unpublished, and every published run on it \
           took longer than twin predicts for it; see docs/accuracy.md, Known misses",
};

/// The 2022 Triton FlashAttention beyond the 16k tokens of its published figure.
pub const TRITON_LONG_SEQUENCES: KnownBias = KnownBias {
    id: "triton-attention-long",
    direction: Direction::TooSlow,
    applies: |s| {
        s.training.flash_attention
            && scenario_backend(s) == AttentionBackend::Triton
            && s.model.seq_len > TRITON_FIGURE_TOKENS
    },
    note: "the Triton FlashAttention kernel's speed beyond 16k tokens is extrapolated from its \
           published figure, and every published run past it was faster than twin predicts; \
           see docs/accuracy.md, Known misses",
};

/// Every bias, in the order a report lists them.
pub const ALL: [KnownBias; 3] = [DROPLESS_MOE, GRAND_TETON_500W, TRITON_LONG_SEQUENCES];

/// The GPU preset of Meta's 500 W Grand Teton H100.
const GRAND_TETON_GPU: &str = "h100-sxm-96gb-500w";

/// The sequence length up to which the Triton kernel's curve is the published figure's.
const TRITON_FIGURE_TOKENS: u64 = 16_384;

/// The biases that apply to `s`, in [`ALL`]'s order.
pub fn of(s: &Scenario) -> Vec<KnownBias> {
    ALL.iter().copied().filter(|b| (b.applies)(s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::parse_str;

    /// small.toml with `edit` applied (text replacements) and `sets` as `--set` overrides.
    fn scenario(edits: &[(&str, &str)], sets: &[&str]) -> Scenario {
        let mut text = include_str!("../../scenarios/small.toml").to_string();
        for (from, to) in edits {
            assert!(text.contains(from), "small.toml has no {from:?}");
            text = text.replacen(from, to, 1);
        }
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        parse_str(&text, "small.toml", &sets).unwrap()
    }

    fn ids(s: &Scenario) -> Vec<&'static str> {
        of(s).iter().map(|b| b.id).collect()
    }

    const MOE: (&str, &str) = ("vocab = 1024\n", "vocab = 1024\nexperts = 8\ntop_k = 2\n");

    #[test]
    fn dropless_routing_under_megatron_core_only() {
        assert!(ids(&scenario(&[], &[])).is_empty(), "a dense model");
        assert_eq!(ids(&scenario(&[MOE], &[])), ["dropless-moe"]);
        let forced = scenario(&[MOE], &["training.moe_routing=\"force-balanced\""]);
        assert_eq!(ids(&forced), ["dropless-moe"]);
        let padded = scenario(&[MOE], &["training.moe_routing={ capacity_factor = 1.0 }"]);
        assert!(ids(&padded).is_empty(), "capacity padding");
        let other = scenario(
            &[MOE],
            &["parallel.zero=3", "training.framework=\"torchtitan\""],
        );
        assert!(ids(&other).is_empty(), "another framework");
    }

    #[test]
    fn the_500w_part_by_its_preset() {
        let teton = scenario(
            &[],
            &[
                "cluster.gpu=\"h100-sxm-96gb-500w\"",
                "cluster.gpus_per_node=8",
            ],
        );
        assert_eq!(ids(&teton), ["h100-500w"]);
        let dgx = scenario(
            &[],
            &["cluster.gpu=\"h100-sxm-80gb\"", "cluster.gpus_per_node=8"],
        );
        assert!(ids(&dgx).is_empty());
    }

    #[test]
    fn triton_attention_past_its_figure() {
        let foundry = |seq: u64| {
            scenario(
                &[],
                &[
                    "parallel.tp=1",
                    "parallel.pp=1",
                    "parallel.dp=8",
                    "parallel.zero=3",
                    "parallel.sequence_parallel=false",
                    "training.framework=\"llm-foundry\"",
                    &format!("model.seq_len={seq}"),
                ],
            )
        };
        assert!(
            ids(&foundry(TRITON_FIGURE_TOKENS)).is_empty(),
            "within the figure"
        );
        assert_eq!(
            ids(&foundry(TRITON_FIGURE_TOKENS + 1)),
            ["triton-attention-long"]
        );
        let long_flash = scenario(
            &[],
            &[&format!("model.seq_len={}", 2 * TRITON_FIGURE_TOKENS)],
        );
        assert!(ids(&long_flash).is_empty(), "another kernel");
    }

    /// A report prints each applying bias as a note line, after the choices twin made.
    #[test]
    fn reports_carry_the_notes() {
        let s = scenario(&[MOE], &[]);
        let p = crate::predict(&s, &crate::PredictOptions::default()).unwrap();
        assert_eq!(
            p.report.notes.last().map(String::as_str),
            Some(DROPLESS_MOE.note)
        );
    }
}
