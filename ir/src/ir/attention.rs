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
//!
//! A sliding window (`window`, on `windowed` of the `count` calls) limits each query to the
//! `window` keys ending at itself, as Transformer Engine's `window_size = (window - 1, 0)`
//! does; the kernel skips the tiles outside it, so its work and its curve follow the
//! windowed pairs ([`Attention::parts`] splits the calls into a windowed and a full kernel).
//! A learned sink logit per head (`sinks`, GPT-OSS's attention sinks, Transformer Engine's
//! `softmax_type = "learnable"`) adds one more term to each query's softmax denominator: 2
//! FLOPs per (query, head) forward (its exponential and its add) and 2 backward (the
//! gradient of the sink logit, a product and a sum per query).

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
    /// Keys a query sees at most on the windowed calls (itself and the `window - 1` before
    /// it); 0 = no window.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub window: u64,
    /// How many of the `count` calls (layers) attend over the window; the rest see every key.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub windowed: u32,
    /// A learned sink logit per head joins every query's softmax.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sinks: bool,
}

fn is_zero_u64(x: &u64) -> bool {
    *x == 0
}

fn is_zero_u32(x: &u32) -> bool {
    *x == 0
}

/// `n (n + 1) / 2` without overflow for every `n` that fits.
fn triangle(n: u64) -> u128 {
    let n = u128::from(n);
    n * (n + 1) / 2
}

impl Attention {
    /// Query-key pairs per (sequence, head) of one call of the full kernel (the calls outside
    /// the window); [`Attention::window_pairs`] for a windowed call.
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

    /// Query-key pairs per (sequence, head) of one windowed call. Causal: over a whole
    /// sequence of `kv_len` keys query `i` (from 0) sees `min(i + 1, window)` keys, in all
    /// `w (w + 1) / 2 + (kv_len - w) w` for `w = min(window, kv_len)`; `q_len < kv_len`
    /// queries spread evenly over that sequence (context parallelism's share) see that
    /// times `q_len / kv_len`, rounded down. Not causal: `window` keys each, at most `kv_len`.
    pub fn window_pairs(&self) -> u64 {
        if self.window == 0 {
            return self.pairs();
        }
        let w = self.window.min(self.kv_len);
        if !self.causal {
            return self.q_len.saturating_mul(w);
        }
        let whole = triangle(w) + u128::from(self.kv_len - w) * u128::from(w);
        if self.kv_len == 0 {
            return 0;
        }
        let share = whole * u128::from(self.q_len) / u128::from(self.kv_len);
        u64::try_from(share).unwrap_or(u64::MAX)
    }

    /// The calls split by what they attend over: the full calls and the windowed calls,
    /// each as a kernel of one kind (`window` 0 on the first, `windowed = count` on the
    /// second); empty parts are left out.
    pub fn parts(&self) -> impl Iterator<Item = Attention> {
        let windowed = if self.window > 0 {
            self.windowed.min(self.count)
        } else {
            0
        };
        let full = Attention {
            count: self.count - windowed,
            window: 0,
            windowed: 0,
            ..*self
        };
        let win = Attention {
            count: windowed,
            windowed,
            ..*self
        };
        [full, win].into_iter().filter(|a| a.count > 0)
    }

    /// Pairs per (sequence, head) of one call of a kernel of one kind (see [`Attention::parts`]).
    fn kind_pairs(&self) -> u64 {
        if self.window > 0 && self.windowed > 0 {
            self.window_pairs()
        } else {
            self.pairs()
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

    /// FLOPs the kernel computes over all `count` calls: the pairs the mask and the window
    /// leave, and the sink logits' softmax terms.
    pub fn work_flops(&self) -> u64 {
        self.parts()
            .map(|a| {
                let products = [
                    2,
                    u64::from(a.batch),
                    u64::from(a.heads),
                    a.head_dim,
                    a.kind_pairs(),
                    a.products(),
                    u64::from(a.count),
                ]
                .iter()
                .fold(1u64, |acc, &x| acc.saturating_mul(x));
                products.saturating_add(a.sink_flops())
            })
            .fold(0u64, u64::saturating_add)
    }

    /// Megatron's FLOP count of the pairs the mask and the window leave, over all `count`
    /// calls: 2 FLOPs per multiply-add of the two products (`QK^T`, `PV`) forward, twice that
    /// backward (Megatron counts the backward as two forwards, not the kernel's 2.5), no sinks.
    /// A causal call over a whole sequence of `s` counts `s (s + 1) / 2` pairs where
    /// Megatron-LM's formula counts `s^2 / 2`, and a windowed one `s w - w (w - 1) / 2`, the
    /// average causal window context Megatron-Bridge counts; load-balanced context-parallel
    /// shards and ring blocks sum to their whole sequence's pairs.
    pub fn masked_model_flops(&self) -> u64 {
        let per_pair_products = if self.backward { 4 } else { 2 };
        self.parts()
            .map(|a| {
                [
                    2,
                    u64::from(a.batch),
                    u64::from(a.heads),
                    a.head_dim,
                    a.kind_pairs(),
                    per_pair_products,
                    u64::from(a.count),
                ]
                .iter()
                .fold(1u64, |acc, &x| acc.saturating_mul(x))
            })
            .fold(0u64, u64::saturating_add)
    }

    /// FLOPs of the sink logits over all calls: 2 per (sequence, head, query) and call.
    pub fn sink_flops(&self) -> u64 {
        if !self.sinks {
            return 0;
        }
        [
            2,
            u64::from(self.batch),
            u64::from(self.heads),
            self.q_len,
            u64::from(self.count),
        ]
        .iter()
        .fold(1u64, |acc, &x| acc.saturating_mul(x))
    }

    /// Keys a query sees on average over one call of a kernel of one kind (see
    /// [`Attention::parts`]): the length of the kernel's inner loop, which sets how well it
    /// amortises its per-tile prologue and epilogue.
    pub fn keys_per_query(&self) -> f64 {
        if self.q_len == 0 {
            return 0.0;
        }
        self.kind_pairs() as f64 / self.q_len as f64
    }

    /// GEMMs of the same FLOPs, for backends that run attention as GEMMs (the host backend's
    /// sgemm, the CUDA backend's cuBLAS): per (sequence, head) `products` products of
    /// `q_len x head_dim` by `head_dim x keys`, `keys` the mean keys per query rounded up,
    /// one strided-batched call per product and layer.
    /// A kernel of one kind (see [`Attention::parts`]); a mixed one is taken as its full calls'
    /// kind.
    pub fn equivalent_gemm(&self) -> Gemm {
        let keys = if self.q_len == 0 {
            0
        } else {
            self.kind_pairs().div_ceil(self.q_len)
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
            window: 0,
            windowed: 0,
            sinks: false,
        }
    }

    /// Pairs of a causal window counted one query at a time: query `i` sees keys
    /// `max(0, i + 1 - w) ..= i`.
    fn brute_window_pairs(s: u64, w: u64) -> u64 {
        (0..s).map(|i| i + 1 - (i + 1).saturating_sub(w)).sum()
    }

    #[test]
    fn window_pairs_count_each_query_once() {
        // s = 6, window 3: 1 + 2 + 3 + 3 + 3 + 3.
        let a = Attention {
            window: 3,
            windowed: 4,
            ..attn(6, 6, true, false)
        };
        assert_eq!(a.window_pairs(), 15);
        for (s, w) in [
            (1, 1),
            (7, 1),
            (7, 3),
            (8, 8),
            (8, 20),
            (4096, 128),
            (129, 128),
        ] {
            let a = Attention {
                window: w,
                windowed: 1,
                ..attn(s, s, true, false)
            };
            assert_eq!(a.window_pairs(), brute_window_pairs(s, w), "s {s} w {w}");
        }
        // A window as long as the sequence is the causal triangle.
        let a = Attention {
            window: 8,
            windowed: 1,
            ..attn(8, 8, true, false)
        };
        assert_eq!(a.window_pairs(), a.pairs());
        // Unmasked: window keys per query.
        let a = Attention {
            window: 3,
            windowed: 1,
            ..attn(5, 8, false, false)
        };
        assert_eq!(a.window_pairs(), 15);
    }

    #[test]
    fn windowed_calls_are_priced_apart_from_the_full_ones() {
        // 4 calls of s = 6, one windowed at 3: 3 x 21 + 15 pairs per (sequence, head).
        let a = Attention {
            window: 3,
            windowed: 1,
            ..attn(6, 6, true, false)
        };
        let parts: Vec<Attention> = a.parts().collect();
        assert_eq!(parts.len(), 2);
        assert_eq!((parts[0].count, parts[0].window), (3, 0));
        assert_eq!((parts[1].count, parts[1].windowed), (1, 1));
        assert_eq!(a.work_flops(), 2 * 2 * 3 * 64 * (3 * 21 + 15) * 2);
        assert_eq!(parts[1].keys_per_query(), 2.5);
        // No window: one part, the whole kernel.
        let plain = attn(6, 6, true, false);
        assert_eq!(plain.parts().collect::<Vec<_>>(), vec![plain]);
    }

    #[test]
    fn sinks_add_two_flops_per_query_and_head() {
        let a = attn(6, 6, true, true);
        let with = Attention { sinks: true, ..a };
        // batch 2, heads 3, 6 queries, 4 calls.
        assert_eq!(with.work_flops() - a.work_flops(), 2 * 2 * 3 * 6 * 4);
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
    fn masked_model_flops_count_the_pairs_megatron_style() {
        // s = 4, causal: 10 pairs per (sequence, head), 2 x 2 FLOPs each forward, over
        // batch 2, 3 heads of 64 and 4 calls; backward twice that.
        let f = attn(4, 4, true, false);
        assert_eq!(f.masked_model_flops(), 2 * 2 * 3 * 64 * 10 * 2 * 4);
        let b = attn(4, 4, true, true);
        assert_eq!(b.masked_model_flops(), 2 * f.masked_model_flops());
        // Unmasked: the whole square, Megatron's full count.
        assert_eq!(
            attn(4, 4, false, false).masked_model_flops(),
            2 * 2 * 3 * 64 * 16 * 2 * 4
        );
        // Sinks add no model FLOPs; a window counts its pairs (s = 6, window 3: 15).
        let w = Attention {
            window: 3,
            windowed: 4,
            sinks: true,
            ..attn(6, 6, true, false)
        };
        assert_eq!(w.masked_model_flops(), 2 * 2 * 3 * 64 * 15 * 2 * 4);
        // Megatron-Bridge's average causal window context w - w (w - 1) / (2 s), times s.
        let (s, win) = (4096u64, 128u64);
        let a = Attention {
            window: win,
            windowed: 1,
            count: 1,
            ..attn(s, s, true, false)
        };
        assert_eq!(a.window_pairs(), s * win - win * (win - 1) / 2);
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
