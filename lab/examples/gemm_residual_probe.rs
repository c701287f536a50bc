//! The GEMM curve's residual on every shape of a host calibration's raw samples: the fit
//! `twin calibrate` makes (`host::fit_all`), then per shape the median evicted and
//! back-to-back call against the curve's price for each
//! (docs/journal/2026-11-validation-history.md, 2026-11-24). Sorted by the evicted residual;
//! `PROBE_SHAPES=m,n,k;...` adds shapes to price alone.
//!
//!   cargo run --release --manifest-path lab/Cargo.toml --example gemm_residual_probe -- profile.samples.json

use std::error::Error;
use twin_calibration::bench::Samples;
use twin_calibration::host::{fit_all, gemm_predict_ns};
use twin_calibration::sample::median;

/// Evicted error, back-to-back error, the shape's label, (evicted measured and priced,
/// back-to-back measured and priced).
type Row = (f64, f64, String, (f64, f64, f64, f64));

fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: gemm_residual_probe SAMPLES_JSON")?;
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let cores = v["provenance"]["cores"].as_u64().unwrap_or(2) as u32;
    let s: Samples = serde_json::from_value(v["samples"].clone())?;
    let f = fit_all(&s, cores)?;
    let g = &f.gemm;
    let cache = s.private_cache_bytes;
    let mut rows: Vec<Row> = Vec::new();
    for x in &s.gemm {
        let cold_pred = gemm_predict_ns(g, x.m, x.n, x.k, x.batch, true);
        let ws = 4 * (x.m * x.k + x.k * x.n + x.m * x.n);
        let warm_pred = gemm_predict_ns(g, x.m, x.n, x.k, x.batch, cache > 0 && ws > cache);
        let (Some(e), Some(w)) = (median(&x.kept_ns), median(&x.warm_kept_ns)) else {
            continue;
        };
        rows.push((
            (e - cold_pred) / e,
            (w - warm_pred) / w,
            format!(
                "{:>5}x{:<5}x{:<5} {:>9} {:>5}",
                x.m,
                x.n,
                x.k,
                x.origin,
                if x.holdout { "held" } else { "" }
            ),
            (e, cold_pred, w, warm_pred),
        ));
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let rms = |get: fn(&Row) -> f64, scen: Option<bool>| {
        let v: Vec<f64> = rows
            .iter()
            .filter(|r| scen.is_none_or(|s| r.2.contains("scenario") == s))
            .map(get)
            .collect();
        (v.iter().map(|x| x * x).sum::<f64>() / v.len().max(1) as f64).sqrt() * 100.0
    };
    eprintln!(
        "rms over shapes: evicted {:.1}% back to back {:.1}%; scenario shapes {:.1}% / {:.1}%; fit rms {:.1}% R2 {:.4}",
        rms(|r| r.0, None),
        rms(|r| r.1, None),
        rms(|r| r.0, Some(true)),
        rms(|r| r.1, Some(true)),
        g.quality.rms_relative_error * 100.0,
        g.quality.r2
    );
    println!("shape (m x n x k)    origin              evicted us: meas  pred   err |  b2b us: meas  pred   err");
    for (ee, we, name, (e, cp, w, wp)) in &rows {
        println!(
            "{name}   {:>9.1} {:>7.1} {:>+6.1}% | {:>9.1} {:>7.1} {:>+6.1}%",
            e / 1e3,
            cp / 1e3,
            ee * 100.0,
            w / 1e3,
            wp / 1e3,
            we * 100.0
        );
    }
    Ok(())
}
