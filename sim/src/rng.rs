//! A small seeded generator (xoshiro256** seeded by splitmix64) and inverse-CDF sampling, so
//! a horizon run or a routing draw is reproducible from its seed without a heavy statistics
//! dependency.

/// xoshiro256**: fast, 256 bits of state, good enough for Monte Carlo.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// The generator for Monte Carlo trial `index` of a run seeded with `seed`.
    pub fn new(seed: u64, index: u64) -> Rng {
        let mut x = seed ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03);
        Rng {
            s: [
                splitmix64(&mut x),
                splitmix64(&mut x),
                splitmix64(&mut x),
                splitmix64(&mut x),
            ],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in (0, 1]: never zero, so `ln` is finite.
    pub fn uniform_open(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller, one of the pair).
    pub fn standard_normal(&mut self) -> f64 {
        let r = (-2.0 * self.uniform_open().ln()).sqrt();
        r * (std::f64::consts::TAU * self.uniform_open()).cos()
    }

    /// Exponential with the given mean (inverse CDF).
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.uniform_open().ln()
    }

    /// Weibull with `shape` and the given mean (inverse CDF; scale = mean / Γ(1 + 1/shape)).
    pub fn weibull(&mut self, shape: f64, mean: f64) -> f64 {
        let scale = mean / gamma(1.0 + 1.0 / shape);
        scale * (-self.uniform_open().ln()).powf(1.0 / shape)
    }
}

/// Γ(x) for x > 0 (Lanczos, g = 7, nine coefficients; relative error ~1e-15).
pub fn gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        return std::f64::consts::PI / ((std::f64::consts::PI * x).sin() * gamma(1.0 - x));
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    (2.0 * std::f64::consts::PI).sqrt() * t.powf(x + 0.5) * (-t).exp() * a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gamma_matches_factorials() {
        for (n, f) in [(1.0, 1.0), (2.0, 1.0), (5.0, 24.0), (7.0, 720.0)] {
            assert!((gamma(n) - f).abs() / f < 1e-12, "Γ({n})");
        }
        assert!((gamma(0.5) - std::f64::consts::PI.sqrt()).abs() < 1e-12);
    }

    #[test]
    fn sample_means_match() {
        let mut r = Rng::new(7, 0);
        let n = 200_000;
        let e: f64 = (0..n).map(|_| r.exponential(3.0)).sum::<f64>() / n as f64;
        let w: f64 = (0..n).map(|_| r.weibull(0.7, 3.0)).sum::<f64>() / n as f64;
        assert!((e - 3.0).abs() < 0.05, "exponential mean {e}");
        assert!((w - 3.0).abs() < 0.08, "weibull mean {w}");
    }

    #[test]
    fn same_seed_same_stream() {
        let a: Vec<u64> = (0..4).map(|_| Rng::new(5, 2).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(Rng::new(5, 2).next_u64(), Rng::new(5, 3).next_u64());
    }
}
