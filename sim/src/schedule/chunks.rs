//! How each (stage, chunk) is cut into compute ops: one segment for the whole chunk at chunk
//! granularity, one per layer at layer granularity, and, for the backward that finalises a
//! chunk's gradients under overlapped bucketed reduction, one segment per gradient bucket so
//! that each bucket's collective can start as soon as its layers are done. Sizes are asked of
//! the [`Sizes`] provider once per segment here, never per micro batch.

use crate::plan::{ChunkLayout, Plan};
use crate::scenario::{Granularity, Scenario};
use crate::schedule::dp::{bucket_ends, DpPolicy, GRAD_ELEM_BYTES};
use crate::schedule::sizes::Sizes;
use crate::workload::routing::ExpertLoad;
use crate::workload::{ChunkWork, ParamCount};
use std::rc::Rc;

/// A run of consecutive layers of one chunk that becomes one compute op per pass.
#[derive(Clone, Debug)]
pub struct Seg {
    pub first_layer: u32,
    pub num_layers: u32,
    pub work: Rc<ChunkWork>,
    pub params: ParamCount,
}

impl Seg {
    pub fn elems(&self) -> u64 {
        self.params.dense.saturating_add(self.params.expert)
    }
}

/// The segments of one chunk.
#[derive(Clone, Debug)]
pub struct ChunkPlan {
    pub layout: ChunkLayout,
    /// Segments in model order, used by every pass of every micro batch...
    pub segs: Vec<Seg>,
    /// ...except the pass that finalises the gradients when it is cut into buckets.
    pub final_segs: Option<Vec<Seg>>,
    /// Parameters of the whole chunk.
    pub params: ParamCount,
    /// Bytes of the chunk's output activation (and of the gradient that comes back).
    pub boundary_bytes: u64,
}

impl ChunkPlan {
    /// The segments of a pass: the bucket cut when `finalising` and there is one.
    pub fn segs_for(&self, finalising: bool) -> &[Seg] {
        match (&self.final_segs, finalising) {
            (Some(f), true) => f,
            _ => &self.segs,
        }
    }

    /// Exclusive ends, counted in backward order (last segment first), of the gradient
    /// buckets over `segs`.
    pub fn bucket_ends_backward(segs: &[Seg], bucket_bytes: u64) -> Vec<usize> {
        let elems: Vec<u64> = segs.iter().rev().map(Seg::elems).collect();
        bucket_ends(&elems, (bucket_bytes / GRAD_ELEM_BYTES).max(1))
    }
}

/// The sizes provider and the routing load of the ranks the chunks are planned for.
#[derive(Clone, Copy)]
struct Src<'a> {
    sizes: &'a dyn Sizes,
    load: ExpertLoad,
}

fn seg(src: Src<'_>, layout: &ChunkLayout, first: u32, n: u32, emb: bool, head: bool) -> Seg {
    Seg {
        first_layer: first,
        num_layers: n,
        work: src.sizes.layers_work(layout, first, n, emb, head, src.load),
        params: src.sizes.layers_params(layout, first, n, emb, head),
    }
}

/// Segments of a layer range `[from, to)` of `layout`, with the embedding on the chunk's
/// first layer and the head on its last.
fn range_seg(src: Src<'_>, layout: &ChunkLayout, from: u32, to: u32) -> Seg {
    let end = layout.first_layer + layout.num_layers;
    seg(
        src,
        layout,
        from,
        to - from,
        layout.has_embedding && from == layout.first_layer,
        layout.has_head && to == end,
    )
}

fn whole(src: Src<'_>, layout: &ChunkLayout) -> Seg {
    seg(
        src,
        layout,
        layout.first_layer,
        layout.num_layers,
        layout.has_embedding,
        layout.has_head,
    )
}

fn per_layer(src: Src<'_>, layout: &ChunkLayout) -> Vec<Seg> {
    if layout.num_layers == 0 {
        return vec![whole(src, layout)];
    }
    let first = layout.first_layer;
    (first..first + layout.num_layers)
        .map(|l| range_seg(src, layout, l, l + 1))
        .collect()
}

/// Bucket-sized segments: layers grouped (from the last layer down) until their gradients
/// fill a bucket.
fn bucket_segs(src: Src<'_>, layout: &ChunkLayout, bucket_bytes: u64) -> Vec<Seg> {
    if layout.num_layers <= 1 {
        return vec![whole(src, layout)];
    }
    let first = layout.first_layer;
    let end = first + layout.num_layers;
    // Gradient elements per layer, last layer first.
    let elems: Vec<u64> = (first..end)
        .rev()
        .map(|l| {
            let p = src.sizes.layers_params(
                layout,
                l,
                1,
                layout.has_embedding && l == first,
                layout.has_head && l + 1 == end,
            );
            p.dense.saturating_add(p.expert)
        })
        .collect();
    let ends = bucket_ends(&elems, (bucket_bytes / GRAD_ELEM_BYTES).max(1));
    let mut segs = Vec::with_capacity(ends.len());
    let mut hi = end;
    for e in ends {
        let lo = end - e as u32;
        segs.push(range_seg(src, layout, lo, hi));
        hi = lo;
    }
    segs.reverse();
    segs
}

/// Plans for every chunk of every stage: `plans[stage][chunk]`.
pub fn plan_chunks(
    s: &Scenario,
    plan: &Plan,
    sizes: &dyn Sizes,
    load: ExpertLoad,
    dp: &DpPolicy,
    split_final: bool,
) -> Vec<Vec<ChunkPlan>> {
    let src = Src { sizes, load };
    plan.chunks
        .iter()
        .map(|row| {
            row.iter()
                .map(|layout| {
                    let whole_seg = whole(src, layout);
                    let by_layer = s.run.granularity == Granularity::Layer || dp.gather_per_layer;
                    let segs = if by_layer {
                        per_layer(src, layout)
                    } else {
                        vec![whole_seg.clone()]
                    };
                    let final_segs = (split_final && !by_layer)
                        .then(|| bucket_segs(src, layout, dp.bucket_bytes))
                        .filter(|f| f.len() > 1);
                    ChunkPlan {
                        layout: layout.clone(),
                        segs,
                        final_segs,
                        params: whole_seg.params,
                        boundary_bytes: whole_seg.work.boundary_bytes,
                    }
                })
                .collect()
        })
        .collect()
}
