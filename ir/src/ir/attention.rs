//! The attention core of a compute op as one kind of work of its own ([`Attention`]): the
//! fused flash-attention kernel runs the scores and the weighted sum of values tile by tile,
//! skipping the tiles a causal mask removes, so its time follows the causal work and its own
//! efficiency curve rather than the GEMM curve. Megatron-LM's FLOP convention (full `s*s`
//! score matrices, Narayanan et al. 2021) is kept for reported model FLOPs by the op's
//! `flops`; [`Attention::work_flops`] is what the kernel computes.
//!
//! Work of one call, per (sequence, head): `pairs` query-key products of `head_dim`, two
//! matrix products forward (`S = QK^T`, `O = PV`) and five backward (S recomputed, dV, dP, dQ,
//! dK), so backward = 2.5x forward, as the FlashAttention papers count it (Dao 2023,
//! FlashAttention-2, section 4.1; Shah et al. 2024, FlashAttention-3, section 4.1).

use super::Gemm;
use serde::{Deserialize, Serialize};

/// One fused attention kernel shape, run `count` times (layers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Attention {
    /// Sequences of the micro batch.
    pub batch: u32,
    /// Query heads on this rank.
    pub heads: u32,
    pub head_dim: u64,
    /// Query positions this rank computes.
    pub q_len: u64,
    /// Key positions each query may see at most.
    pub kv_len: u64,
    /// Causal mask: the `q_len` queries are spread evenly over a causal sequence of `kv_len`
    /// keys and see `(kv_len + 1) / 2` keys on average. That is exact for a whole sequence
    /// (`q_len = kv_len`) and for the load-balanced shard context parallelism gives each
    /// rank (`2*cp` chunks, rank `r` holding chunks `r` and `2cp-1-r`: Megatron-Core and
    /// Transformer Engine's `get_batch_on_this_cp_rank`). Without it every query sees all
    /// `kv_len` keys.
    pub causal: bool,
    /// The backward kernel (five products per pair instead of two).
    pub backward: bool,
    /// Calls (one per layer).
    pub count: u32,
}

impl Attention {
    /// Query-key pairs per (sequence, head) of one call.
    pub fn pairs(&self) -> u64 {
        if self.causal {
            // q_len * (kv_len + 1) / 2, exact in integers for every q_len, kv_len.
            let (q, k1) = (self.q_len, self.kv_len.saturating_add(1));
            if q % 2 == 0 {
                (q / 2).saturating_mul(k1)
            } else {
                q.saturating_mul(k1 / 2)
                    .saturating_add(if k1 % 2 == 1 { q / 2 } else { 0 })
            }
        } else {
            self.q_len.saturating_mul(self.kv_len)
        }
    }

    /// Matrix products per pair: 2 forward, 5 backward.
    pub fn products(&self) -> u64 {
        if self.backward {
            5
        } else {
            2
        }
    }

    /// FLOPs the kernel computes over all `count` calls (causal work only).
    pub fn work_flops(&self) -> u64 {
        [
            2,
            u64::from(self.batch),
            u64::from(self.heads),
            self.head_dim,
            self.pairs(),
            self.products(),
            u64::from(self.count),
        ]
        .iter()
        .fold(1u64, |acc, &x| acc.saturating_mul(x))
    }

    /// Keys a query sees on average: the length of the kernel's inner loop, which sets how
    /// well it amortises its per-tile prologue and epilogue.
    pub fn keys_per_query(&self) -> f64 {
        if self.q_len == 0 {
            return 0.0;
        }
        self.pairs() as f64 / self.q_len as f64
    }

    /// GEMMs of the same FLOPs, for backends that run attention as GEMMs (the host backend's
    /// sgemm, the CUDA backend's cuBLAS): per (sequence, head) `products` products of
    /// `q_len x head_dim` by `head_dim x keys`, `keys` the mean keys per query rounded up,
    /// one strided-batched call per product and layer.
    pub fn equivalent_gemm(&self) -> Gemm {
        let keys = if self.q_len == 0 {
            0
        } else {
            self.pairs().div_ceil(self.q_len)
        };
        let batch = self.batch.saturating_mul(self.heads);
        let calls = (self.products() as u32).saturating_mul(self.count);
        Gemm {
            dtype: None,
            m: self.q_len,
            n: keys,
            k: self.head_dim,
            count: batch.saturating_mul(calls),
            batch: batch.max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attn(q: u64, k: u64, causal: bool, backward: bool) -> Attention {
        Attention {
            batch: 2,
            heads: 3,
            head_dim: 64,
            q_len: q,
            kv_len: k,
            causal,
            backward,
            count: 4,
        }
    }

    #[test]
    fn causal_pairs_are_the_lower_triangle() {
        assert_eq!(attn(4, 4, true, false).pairs(), 10);
        assert_eq!(attn(5, 5, true, false).pairs(), 15);
        assert_eq!(attn(4, 4, false, false).pairs(), 16);
        // A load-balanced cp shard: s = 8, cp = 2, chunks of 2; rank 0 holds chunks 0 and 3:
        // 3 + (6 + 3) = 12 pairs = 4 * 9 / 2.
        assert_eq!(attn(4, 8, true, false).pairs(), 18);
        assert_eq!(attn(3, 8, true, false).pairs(), 13);
        assert_eq!(attn(3, 7, true, false).pairs(), 12);
    }

    #[test]
    fn backward_is_two_and_a_half_forwards() {
        let f = attn(1024, 1024, true, false).work_flops();
        let b = attn(1024, 1024, true, true).work_flops();
        assert_eq!(f, 2 * 2 * 3 * 64 * (1024 * 1025 / 2) * 2 * 4);
        assert_eq!(2 * b, 5 * f);
    }

    #[test]
    fn equivalent_gemm_has_the_work_flops_when_keys_divide() {
        let a = attn(4, 7, true, true);
        let g = a.equivalent_gemm();
        assert_eq!((g.m, g.n, g.k, g.batch), (4, 4, 64, 6));
        assert_eq!(g.count, 6 * 5 * 4);
        assert_eq!(g.flops(), a.work_flops());
    }
}
