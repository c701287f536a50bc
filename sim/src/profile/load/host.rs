//! The host profiles' structured keys: `gemm.shape_factors` (rows, not parameters) and the
//! `memory.state_*` family, whose keys come in groups. Split from `profile::load`, which reads
//! every other key one by one.

use super::{Checker, Range, RawMemory, Result};
use crate::scenario::ErrorKind;

impl Checker<'_> {
    /// `gemm.shape_factors` (see `host_model::shape_factors`): rows of `[m, n, k, factor]`,
    /// whole positive dimensions and a positive factor.
    pub(super) fn shape_factors(
        &self,
        raw: Option<toml::Spanned<Vec<Vec<f64>>>>,
    ) -> Result<Vec<crate::profile::ShapeFactor>> {
        let Some(raw) = raw else {
            return Ok(Vec::new());
        };
        let span = raw.span();
        let allowed = "rows [m, n, k, factor]: m, n and k whole numbers from 1 to 2^31, factor \
                       above 0 and at most 100";
        let dim =
            |v: f64| ((1.0..=2_147_483_648.0).contains(&v) && v.fract() == 0.0).then_some(v as u64);
        raw.into_inner()
            .iter()
            .enumerate()
            .map(|(i, r)| match r.as_slice() {
                &[m, n, k, f] if f > 0.0 && f <= 100.0 => match (dim(m), dim(n), dim(k)) {
                    (Some(m), Some(n), Some(k)) => {
                        Ok(crate::profile::ShapeFactor { m, n, k, factor: f })
                    }
                    _ => Err((i, r)),
                },
                _ => Err((i, r)),
            })
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|(i, r)| {
                self.invalid(
                    span.clone(),
                    "gemm.shape_factors",
                    format!("{r:?}"),
                    &format!("row {} is not a shape and its factor", i + 1),
                    allowed,
                )
            })
    }

    /// `memory.state_*` (see [`crate::cost::StateCache`]): the two sizes and two efficiencies
    /// or none of them, the resident size below the evicted one; `state_weight` (default 1)
    /// with them.
    pub(super) fn state_cache(
        &self,
        m: &mut RawMemory,
    ) -> Result<Option<crate::profile::StateParams>> {
        let (resident_bytes, evicted_bytes) = self.pair(
            (
                "memory.state_resident_bytes",
                m.state_resident_bytes.take(),
                Range::NonNegative,
            ),
            (
                "memory.state_evicted_bytes",
                m.state_evicted_bytes.take(),
                Range::Positive,
            ),
        )?;
        let (resident_eff, evicted_eff) = self.pair(
            (
                "memory.state_resident_efficiency",
                m.state_resident_efficiency.take(),
                Range::Positive,
            ),
            (
                "memory.state_evicted_efficiency",
                m.state_evicted_efficiency.take(),
                Range::Positive,
            ),
        )?;
        let all = "all four of memory.state_resident_bytes, state_evicted_bytes, \
                   state_resident_efficiency and state_evicted_efficiency, or none";
        let (decay_after, lifetime) = (m.state_decay_after_ns.take(), m.state_lifetime_ns.take());
        match (resident_bytes, evicted_bytes, resident_eff, evicted_eff) {
            (None, None, None, None) => {
                // A weight or a decay alone would be read and then silently not used.
                let alone = [
                    ("memory.state_weight", m.state_weight.take()),
                    ("memory.state_decay_after_ns", decay_after),
                    ("memory.state_lifetime_ns", lifetime),
                ];
                match alone.into_iter().find_map(|(k, v)| v.map(|v| (k, v))) {
                    Some((key, w)) => Err(self.invalid(
                        w.value.span(),
                        key,
                        w.value.get_ref().to_string(),
                        "the other state keys are missing",
                        all,
                    )),
                    None => Ok(None),
                }
            }
            (Some(rb), Some(eb), Some(re), Some(ee)) => {
                if rb.value >= eb.value {
                    return Err(self.ctx.error(
                        ErrorKind::Invalid,
                        None,
                        "memory.state_evicted_bytes",
                        &eb.value.to_string(),
                        format!("not above memory.state_resident_bytes ({})", rb.value),
                        "a size above memory.state_resident_bytes",
                    ));
                }
                let (decay_after_ns, lifetime_ns) = self.pair(
                    (
                        "memory.state_decay_after_ns",
                        decay_after,
                        Range::NonNegative,
                    ),
                    ("memory.state_lifetime_ns", lifetime, Range::Positive),
                )?;
                let weight = m
                    .state_weight
                    .take()
                    .map(|w| self.param("memory.state_weight", w, Range::Positive))
                    .transpose()?;
                Ok(Some(crate::profile::StateParams {
                    weight,
                    decay_after_ns,
                    lifetime_ns,
                    resident_bytes: rb,
                    evicted_bytes: eb,
                    resident_efficiency: re,
                    evicted_efficiency: ee,
                }))
            }
            (rb, _, _, _) => Err(self.ctx.error(
                ErrorKind::Invalid,
                None,
                if rb.is_some() {
                    "memory.state_resident_efficiency"
                } else {
                    "memory.state_resident_bytes"
                },
                "(missing)",
                "the state keys come together",
                all,
            )),
        }
    }
}
