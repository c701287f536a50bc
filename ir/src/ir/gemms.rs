//! A compute op's GEMM list ([`Gemms`]), shared instead of copied: every micro batch's
//! forward of a layer range carries the same shapes, so the ops of a schedule (and the
//! workload cache a sweep keeps) point at one list and cloning an op costs a reference count,
//! not an allocation and a copy. It reads as a `[Gemm]` slice and serializes exactly as a
//! `Vec<Gemm>` does, so schedule files are unchanged.

use super::Gemm;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::ops::Deref;
use std::sync::Arc;

/// An immutable, shared list of GEMM shapes. Build it from a vector or an array.
#[derive(Clone)]
pub struct Gemms(Arc<[Gemm]>);

impl Gemms {
    pub fn as_slice(&self) -> &[Gemm] {
        &self.0
    }
}

impl Default for Gemms {
    fn default() -> Gemms {
        Gemms(Arc::from(Vec::new()))
    }
}

impl Deref for Gemms {
    type Target = [Gemm];
    fn deref(&self) -> &[Gemm] {
        &self.0
    }
}

impl From<Vec<Gemm>> for Gemms {
    fn from(gemms: Vec<Gemm>) -> Gemms {
        Gemms(Arc::from(gemms))
    }
}

impl From<&[Gemm]> for Gemms {
    fn from(gemms: &[Gemm]) -> Gemms {
        Gemms(Arc::from(gemms))
    }
}

impl<const N: usize> From<[Gemm; N]> for Gemms {
    fn from(gemms: [Gemm; N]) -> Gemms {
        Gemms::from(&gemms[..])
    }
}

impl FromIterator<Gemm> for Gemms {
    fn from_iter<I: IntoIterator<Item = Gemm>>(iter: I) -> Gemms {
        Gemms(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a Gemms {
    type Item = &'a Gemm;
    type IntoIter = std::slice::Iter<'a, Gemm>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl PartialEq for Gemms {
    /// Equal lists: the same shared list, or the same shapes.
    fn eq(&self, other: &Gemms) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.as_slice() == other.as_slice()
    }
}

impl Eq for Gemms {}

impl PartialEq<Vec<Gemm>> for Gemms {
    fn eq(&self, other: &Vec<Gemm>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<const N: usize> PartialEq<[Gemm; N]> for Gemms {
    fn eq(&self, other: &[Gemm; N]) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl std::hash::Hash for Gemms {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl std::fmt::Debug for Gemms {
    /// As a `Vec<Gemm>` prints.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl Serialize for Gemms {
    /// A sequence of shapes, exactly as a `Vec<Gemm>` serializes.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.as_slice())
    }
}

impl<'de> Deserialize<'de> for Gemms {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Gemms, D::Error> {
        Vec::<Gemm>::deserialize(deserializer).map(Gemms::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared list reads, compares and serializes as the `Vec<Gemm>` it was made from, and
    /// deserializes from that vector's JSON.
    #[test]
    fn gemms_behave_as_a_vec() {
        for n in 0..4u64 {
            let v: Vec<Gemm> = (0..n)
                .map(|i| Gemm {
                    dtype: None,
                    m: i + 1,
                    n: 2 * i + 1,
                    k: 3,
                    count: 2,
                    batch: 1 + i as u32,
                })
                .collect();
            let g = Gemms::from(v.clone());
            assert_eq!(g.as_slice(), v.as_slice());
            assert_eq!(g, v);
            assert_eq!(g.clone(), g);
            assert_eq!(Gemms::from(v.as_slice()), g);
            let json = serde_json::to_string(&v).unwrap();
            assert_eq!(serde_json::to_string(&g).unwrap(), json);
            let back: Gemms = serde_json::from_str(&json).unwrap();
            assert_eq!(back, v);
            assert_eq!(format!("{g:?}"), format!("{v:?}"));
        }
        assert_ne!(
            Gemms::from(vec![Gemm::single(1, 2, 3, 1)]),
            Gemms::from(vec![Gemm::single(1, 2, 4, 1)])
        );
    }
}
