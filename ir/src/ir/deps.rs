//! An op's dependency list ([`Deps`]): a few op indices held inline, so that building a
//! schedule does not allocate one vector per op (a layout search generates millions of ops,
//! almost all with at most five deps). It reads as a `[u32]` slice and serializes exactly as
//! a `Vec<u32>` does (a sequence of integers), so schedule files are unchanged.
//!
//! The small methods are `#[inline]`: the schedule generators in twin-sim call them once per op,
//! across the crate boundary, where they are not inlined otherwise.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::ops::{Deref, DerefMut};

/// Deps held without allocating: with the length and the enum tag this keeps [`Deps`] the
/// size of a `Vec<u32>` (24 bytes).
const INLINE: usize = 5;

/// Indices of earlier ops of the same program that must finish first (see
/// [`crate::ir::Op::deps`]). Derefs to `[u32]`; build it from an array, a vector, an
/// iterator, or with [`Deps::push`].
#[derive(Clone)]
pub struct Deps(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, items: [u32; INLINE] },
    Heap(Box<[u32]>),
}

impl Deps {
    /// No deps.
    pub const fn new() -> Deps {
        Deps(Repr::Inline {
            len: 0,
            items: [0; INLINE],
        })
    }

    #[inline]
    pub fn as_slice(&self) -> &[u32] {
        match &self.0 {
            Repr::Inline { len, items } => items.get(..usize::from(*len)).unwrap_or(&[]),
            Repr::Heap(v) => v,
        }
    }

    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u32] {
        match &mut self.0 {
            Repr::Inline { len, items } => items.get_mut(..usize::from(*len)).unwrap_or(&mut []),
            Repr::Heap(v) => v,
        }
    }

    /// Appends `dep` (moving to the heap past the inline capacity).
    #[inline]
    pub fn push(&mut self, dep: u32) {
        match &mut self.0 {
            Repr::Inline { len, items } if usize::from(*len) < INLINE => {
                if let Some(slot) = items.get_mut(usize::from(*len)) {
                    *slot = dep;
                }
                *len += 1;
            }
            _ => {
                let mut v = self.as_slice().to_vec();
                v.push(dep);
                self.0 = Repr::Heap(v.into_boxed_slice());
            }
        }
    }

    /// Sorts the deps and drops repeated ones.
    #[inline]
    pub fn sort_dedup(&mut self) {
        // Most ops have at most two deps, mostly in order already: settle those here.
        if let Repr::Inline { len, items } = &mut self.0 {
            match (*len, *items) {
                (0 | 1, _) => return,
                (2, [a, b, ..]) if a < b => return,
                (2, [a, b, ..]) if a == b => {
                    *len = 1;
                    return;
                }
                (2, [a, b, ..]) => {
                    items[0] = b;
                    items[1] = a;
                    return;
                }
                _ => {}
            }
        }
        self.sort_dedup_slow();
    }

    #[inline(never)]
    fn sort_dedup_slow(&mut self) {
        let s = self.as_mut_slice();
        s.sort_unstable();
        let mut kept = 0usize;
        for i in 0..s.len() {
            if kept == 0 || s.get(i) != s.get(kept - 1) {
                s.swap(kept, i);
                kept += 1;
            }
        }
        match &mut self.0 {
            Repr::Inline { len, .. } => *len = kept.min(INLINE) as u8,
            Repr::Heap(v) => *self = Deps::from(v.get(..kept).unwrap_or(&[])),
        }
    }
}

impl Default for Deps {
    #[inline]
    fn default() -> Deps {
        Deps::new()
    }
}

impl Deref for Deps {
    type Target = [u32];
    #[inline]
    fn deref(&self) -> &[u32] {
        self.as_slice()
    }
}

impl DerefMut for Deps {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u32] {
        self.as_mut_slice()
    }
}

impl From<&[u32]> for Deps {
    #[inline]
    fn from(deps: &[u32]) -> Deps {
        if deps.len() <= INLINE {
            let mut items = [0; INLINE];
            if let Some(head) = items.get_mut(..deps.len()) {
                head.copy_from_slice(deps);
            }
            Deps(Repr::Inline {
                len: deps.len() as u8,
                items,
            })
        } else {
            Deps(Repr::Heap(deps.into()))
        }
    }
}

impl From<Vec<u32>> for Deps {
    #[inline]
    fn from(deps: Vec<u32>) -> Deps {
        if deps.len() <= INLINE {
            Deps::from(deps.as_slice())
        } else {
            Deps(Repr::Heap(deps.into_boxed_slice()))
        }
    }
}

impl<const N: usize> From<[u32; N]> for Deps {
    fn from(deps: [u32; N]) -> Deps {
        Deps::from(&deps[..])
    }
}

impl FromIterator<u32> for Deps {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Deps {
        let mut d = Deps::new();
        d.extend(iter);
        d
    }
}

impl Extend<u32> for Deps {
    fn extend<I: IntoIterator<Item = u32>>(&mut self, iter: I) {
        for dep in iter {
            self.push(dep);
        }
    }
}

impl<'a> IntoIterator for &'a Deps {
    type Item = &'a u32;
    type IntoIter = std::slice::Iter<'a, u32>;
    #[inline]
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl PartialEq for Deps {
    #[inline]
    fn eq(&self, other: &Deps) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Deps {}

impl PartialEq<Vec<u32>> for Deps {
    fn eq(&self, other: &Vec<u32>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialEq<[u32]> for Deps {
    fn eq(&self, other: &[u32]) -> bool {
        self.as_slice() == other
    }
}

impl std::hash::Hash for Deps {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl std::fmt::Debug for Deps {
    /// As a `Vec<u32>` prints: `[1, 2]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl Serialize for Deps {
    /// A sequence of op indices, exactly as a `Vec<u32>` serializes.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.as_slice())
    }
}

impl<'de> Deserialize<'de> for Deps {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Deps, D::Error> {
        Vec::<u32>::deserialize(deserializer).map(Deps::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inline and spilled lists read, compare, sort and serialize as the same `Vec<u32>`.
    #[test]
    fn deps_behave_as_a_vec() {
        let patterns: [fn(u32) -> u32; 3] = [|i| (i * 7 + 3) % 5, |i| 20 - i, |i| i / 2];
        for (n, f) in (0..12u32).flat_map(|n| patterns.map(|f| (n, f))) {
            let v: Vec<u32> = (0..n).map(f).collect();
            let mut d = Deps::from(v.clone());
            assert_eq!(d.as_slice(), v.as_slice(), "{n}");
            let pushed: Deps = v.iter().copied().collect();
            assert_eq!(pushed, d, "{n}");
            assert_eq!(
                serde_json::to_string(&d).unwrap(),
                serde_json::to_string(&v).unwrap()
            );
            let back: Deps = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
            assert_eq!(back, v);
            assert_eq!(format!("{d:?}"), format!("{v:?}"));
            let mut want = v.clone();
            want.sort_unstable();
            want.dedup();
            d.sort_dedup();
            assert_eq!(d, want, "{n}");
        }
        assert_eq!(std::mem::size_of::<Deps>(), std::mem::size_of::<Vec<u32>>());
    }
}
