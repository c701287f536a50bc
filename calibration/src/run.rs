//! The three calibrations end to end: `calibrate_host` (benchmarks, fits, profile text),
//! `calibrate_cuda` (GPU microbenchmarks over a base profile) and `from_nccl_tests` (network
//! tiers from nccl-tests logs over a base profile). The CLI (src/cmd/calibrate.rs) only parses
//! arguments, draws the progress bar and writes files.

use crate::bench::{self, Config, Counter, Mode, Progress, Samples};
use crate::fit::alpha_beta::{self, AlphaBeta, Point};

use crate::fit::Estimate;
use crate::gpu_base::Start;
use crate::host::{self, HostFits};
use crate::host_profile;
use crate::nccl_tests::{self, Log, LogFit, Tier};
use crate::write::{self, HostKeys, Provenance};
use crate::CalibError;
use serde::Serialize;
use std::time::Instant;
use twin_sim::profile::{LinkParams, Param, Profile, Source};
use twin_sim::schedule::Gemm;

/// What a host calibration is asked to do.
#[derive(Clone, Debug)]
pub struct HostOptions {
    pub mode: Mode,
    /// GEMM shapes of a scenario to time too.
    pub extra_shapes: Vec<Gemm>,
    /// Bytes a scenario's busiest rank touches per step ([`bench::compute::step_bytes`]): the
    /// eviction before each cold pass, when it is below the default (twice the
    /// last-level cache).
    pub step_bytes: Option<u64>,
    /// The GPU name the profile describes (host scenarios: "cpu-core").
    pub gpu_name: String,
    pub seed: u64,
    /// The command line, for provenance.
    pub command: String,
    /// File name of the samples beside the profile, for provenance.
    pub samples_file: String,
}

/// A finished host calibration.
#[derive(Clone, Debug, Serialize)]
pub struct HostRun {
    pub config: Config,
    pub fits: HostFits,
    pub profile: Profile,
    pub host: HostKeys,
    pub provenance: Provenance,
    /// Seconds the benchmarks took.
    pub elapsed_s: f64,
    /// [`HostOptions::step_bytes`]: the scenario's step traffic, when one was given.
    pub step_bytes: Option<u64>,
    /// The samples file a `--refit` fitted again; `None` for a calibration that measured.
    pub refit_of: Option<String>,
    #[serde(skip)]
    pub samples: Samples,
    #[serde(skip)]
    pub toml: String,
}

/// How many times the transfer benchmarks run again when their fit is poor.
const COMM_RETRIES: usize = 2;

/// `first`, or a better one from `again` (called with the best so far) while the best's
/// `quality` is below `threshold`, at most `retries` times. Returns the best and the quality
/// of each set that was found wanting.
fn best_of<T, E>(
    first: T,
    quality: impl Fn(&T) -> f64,
    threshold: f64,
    retries: usize,
    mut again: impl FnMut(&T) -> Result<T, E>,
) -> Result<(T, Vec<f64>), E> {
    let mut best = first;
    let mut wanting = Vec::new();
    while quality(&best) < threshold && wanting.len() < retries {
        wanting.push(quality(&best));
        let next = again(&best)?;
        if quality(&next) > quality(&best) {
            best = next;
        }
    }
    Ok((best, wanting))
}

/// Measures this machine through the host backend and fits a profile.
pub fn calibrate_host(opts: &HostOptions, sink: &mut dyn Progress) -> Result<HostRun, CalibError> {
    let cores = crate::provenance::cores();
    let mut cfg = Config::new(opts.mode, cores);
    if let Some(b) = opts.step_bytes {
        cfg.step_evict_bytes = cfg.step_evict_bytes.min(b);
    }
    let extra: Vec<Gemm> = opts
        .extra_shapes
        .iter()
        .take(cfg.max_scenario_shapes)
        .copied()
        .collect();
    let total = cfg.sweep_shapes().len()
        + extra.len()
        + 3 * cfg.memory_bytes.len()
        + cfg.pass_large_bytes.len()
        + cfg.cold_pass_bytes.len()
        + 2 * (cfg.state_bytes.len() * cfg.state_evict_bytes.len()
            + cfg.state_gap_bytes.len() * cfg.state_gap_ns.len())
        + cfg.launch_ops.len()
        + 1
        + crate::rounds::rounds(cfg.mode) * bench::comm::measurement_count(&cfg)
        + bench::comm_busy::measurement_count(&cfg, cores)
        + bench::p2p_cpu::measurement_count(cores)
        + bench::memory_pair::measurement_count(&cfg, cores)
        + cfg.checkpoint_bytes.len()
        + 1
        + cfg.wake_idle_ns.len();
    let mut progress = Counter {
        sink,
        done: 0,
        total,
    };
    let started = Instant::now();
    use bench::memory;
    let mut samples = Samples {
        gemm: bench::compute::gemms(&cfg, &extra, opts.seed, &mut progress),
        memory_pass: memory::memory_pass(&cfg, &cfg.memory_bytes, 0, "memory pass", &mut progress),
        memory_pass_large: memory::memory_pass(
            &cfg,
            &cfg.pass_large_bytes,
            0,
            "memory pass",
            &mut progress,
        ),
        memory_pass_cold: memory::memory_pass(
            &cfg,
            &cfg.cold_pass_bytes,
            cfg.step_evict_bytes,
            "cold pass",
            &mut progress,
        ),
        state_update: memory::state_update(&cfg, &mut progress).map_err(CalibError::Bench)?,
        memcpy: bench::memory::memcpy(&cfg, &mut progress),
        alloc: bench::memory::alloc(&cfg, &mut progress),
        private_cache_bytes: cfg.private_cache_bytes,
        ..Samples::default()
    };
    (samples.launch, samples.handoff_gap) = bench::launch::launch(&cfg, &mut progress)?;
    // The transfer benchmarks' rounds: here, in the middle and at the end (`rounds`).
    let n_rounds = crate::rounds::rounds(cfg.mode);
    let mut rounds = vec![bench::comm::comm(&cfg, &mut progress)?];
    samples.comm_busy = bench::comm_busy::comm_busy(&cfg, cores, &mut progress)?;
    samples.p2p_cpu = bench::p2p_cpu::p2p_cpu(&cfg, cores, &mut progress)?;
    samples.memory_pair = bench::memory_pair::memory_pair(&cfg, cores, &mut progress)?;
    samples.checkpoint = bench::io::checkpoint(&cfg, &mut progress)?;
    if rounds.len() + 1 < n_rounds {
        rounds.push(bench::comm::comm(&cfg, &mut progress)?);
    }
    samples.interruptions = Some(bench::interrupt::interruptions(&cfg, &mut progress));
    samples.wake = bench::wake::wake(&cfg, &mut progress)?;
    // The state update again, at the end: the last-level cache this machine gets can change
    // within minutes (a VM's host shares it; docs/journal/2026-11-validation-history.md,
    // 2026-11-24), and the runs a profile is used for come after the calibration. Both sweeps go
    // into the fit.
    samples
        .state_update
        .extend(memory::state_update(&cfg, &mut progress).map_err(CalibError::Bench)?);
    while rounds.len() < n_rounds {
        rounds.push(bench::comm::comm(&cfg, &mut progress)?);
    }
    let (samples, mut fits, rounds_note) = crate::rounds::keep_fastest(samples, rounds, cores)?;
    fits.notes.extend(rounds_note);
    // Other work on the cores while the transfers were timed bends them off latency + bytes /
    // bandwidth, and one such spell set a p2p latency of 500 us where 42 us is right: the
    // transfer benchmarks run again, up to COMM_RETRIES times, while their fit stays poor, and
    // the best-fitting set is kept.
    let first = (samples, fits);
    let ((kept_samples, kept_fits), retried) = best_of(
        first,
        |(_, f): &(Samples, HostFits)| f.transfer_r2(),
        host::POOR_TRANSFER_R2,
        COMM_RETRIES,
        |kept: &(Samples, HostFits)| {
            progress.total += bench::comm::measurement_count(&cfg);
            let (comm, overlap) = bench::comm::comm(&cfg, &mut progress)?;
            let mut again = kept.0.clone();
            again.comm = comm;
            again.overlap = Some(overlap);
            let f = host::fit_all(&again, cores)?;
            Ok::<_, CalibError>((again, f))
        },
    )?;
    let (samples, mut fits) = (kept_samples, kept_fits);
    if !retried.is_empty() {
        let first: Vec<String> = retried.iter().map(|r| format!("{r:.2}")).collect();
        fits.notes.push(format!(
            "the transfer benchmarks ran {} times: their fit's R² was {} (below {}), \
             which usually means other work shared the cores; the profile keeps the best set \
             (R² {:.2})",
            retried.len() + 1,
            first.join(", then "),
            host::POOR_TRANSFER_R2,
            fits.transfer_r2()
        ));
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let mode = match opts.mode {
        Mode::Quick => "quick",
        Mode::Full => "full",
        Mode::Tiny => "tiny",
    };
    let provenance = crate::provenance::here("host", mode, &opts.command, &opts.samples_file);
    let run_ref = format!(
        "twin calibrate host ({mode}) on {} at {}",
        provenance.hostname, provenance.date_utc
    );
    let (profile, host_keys, toml) = host_profile_text(
        &fits,
        &opts.gpu_name,
        &run_ref,
        cfg.private_cache_bytes,
        &provenance,
    );
    Ok(HostRun {
        config: cfg,
        fits,
        profile,
        host: host_keys,
        provenance,
        elapsed_s,
        step_bytes: opts.step_bytes,
        refit_of: None,
        samples,
        toml,
    })
}

/// The profile of `fits`, its host keys, and its TOML text with the header every host profile
/// carries (what was fitted, the alpha-beta fits per algorithm).
pub(crate) fn host_profile_text(
    fits: &HostFits,
    gpu_name: &str,
    run_ref: &str,
    private_cache_bytes: u64,
    provenance: &Provenance,
) -> (Profile, HostKeys, String) {
    let (profile, host_keys) =
        host_profile::to_profile(fits, gpu_name, run_ref, private_cache_bytes);
    let mut header = vec![
        format!("Hardware profile of this machine for twin's host backend, written by {run_ref}."),
        "Every fitted number carries its 95% confidence interval; docs/calibration.md says how each was measured and fitted.".into(),
        format!("Raw samples: {}", provenance.samples_file),
        "Alpha-beta fits per algorithm (the tiers below use the ring collectives' fit):".into(),
    ];
    let ab = |name: &str, f: &AlphaBeta| {
        format!(
            "  {name}: latency {:.0} ns [{:.0}, {:.0}] per step, bandwidth {:.4e} B/s [{:.4e}, {:.4e}], R2 {:.3}, rms {:.1}%",
            f.latency_ns.value,
            f.latency_ns.ci95[0],
            f.latency_ns.ci95[1],
            f.bandwidth_bytes_per_s.value,
            f.bandwidth_bytes_per_s.ci95[0],
            f.bandwidth_bytes_per_s.ci95[1],
            f.quality.r2,
            f.quality.rms_relative_error * 100.0
        )
    };
    header.push(ab("p2p", &fits.p2p));
    for c in &fits.collectives {
        match &c.fit {
            Some(f) => header.push(ab(&c.name, f)),
            None => header.push(format!("  {}: not fitted", c.name)),
        }
    }
    header.push(ab("ring collectives", &fits.ring));
    let toml = write::profile_toml(&profile, Some(&host_keys), Some(provenance), &header);
    (profile, host_keys, toml)
}

/// What a GPU calibration is asked to do.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    pub quick: bool,
    /// A scenario's GEMM calls to time too (`cuda::scenario_calls`).
    pub scenario_calls: Vec<Gemm>,
    /// The command line, for provenance.
    pub command: String,
    /// File name of the samples beside the profile, for provenance.
    pub samples_file: String,
    /// `twin doctor`'s CUDA driver / cuBLAS / NCCL versions, for provenance.
    pub cuda_version: Option<String>,
    pub nccl_version: Option<String>,
}

/// A GPU calibration: cuBLAS GEMM curve, memory-bound bandwidth and launch cost measured on
/// GPU 0, over `base`'s other sections (peaks, network).
#[derive(Clone, Debug, Serialize)]
pub struct CudaRun {
    /// What was measured; `None` for a `--refit`, which measured nothing.
    pub plan: Option<crate::cuda::Plan>,
    /// GPU 0 as the driver reported it, when it did.
    pub device: Option<crate::gpu_base::Device>,
    /// The samples file a `--refit` fitted again; `None` for a calibration that measured.
    pub refit_of: Option<String>,
    pub fits: crate::cuda::CudaFits,
    pub profile: Profile,
    pub provenance: Provenance,
    pub elapsed_s: f64,
    #[serde(skip)]
    pub samples: crate::cuda::CudaSamples,
    #[serde(skip)]
    pub toml: String,
}

/// Measures GPU 0 and fits; everything it does not measure comes from `start`.
pub fn calibrate_cuda(
    start: &Start,
    opts: &CudaOptions,
    sink: &mut dyn Progress,
) -> Result<CudaRun, CalibError> {
    crate::cuda::require_gpu()?;
    let plan = crate::cuda::Plan::new(opts.quick, &opts.scenario_calls);
    let fp8 = crate::cuda::fp8_available();
    let mut plan = match fp8 {
        Ok(()) => plan.with_fp8(),
        Err(_) => plan,
    };
    // The recipes with scales of their own are asked about only where FP8 runs at all; a
    // column left out says why.
    let mut scale_notes = Vec::new();
    if fp8.is_ok() {
        use crate::cuda::Plan;
        use twin_sim::scenario::Fp8Recipe;
        let columns = [
            (
                Fp8Recipe::Rowwise,
                Plan::with_fp8_rowwise as fn(Plan) -> Plan,
            ),
            (Fp8Recipe::Blockwise, Plan::with_fp8_blockwise),
        ];
        for (recipe, with) in columns {
            match crate::cuda::fp8_scales_available(recipe) {
                Ok(()) => plan = with(plan),
                Err(why) => scale_notes.push(format!(
                    "no {r} FP8 GEMM column ({why}): the profile keeps its base's \
                     [gemm.fp8_{r}], if any (without one, {r} FP8 is priced by [gemm.fp8])",
                    r = recipe.as_str()
                )),
            }
        }
    }
    let started = Instant::now();
    let (samples, measure_notes) = crate::cuda::measure(&plan, sink)?;
    let elapsed_s = started.elapsed().as_secs_f64();
    let mode = if opts.quick { "quick" } else { "full" };
    let mut prov = crate::provenance::here("cuda", mode, &opts.command, &opts.samples_file);
    prov.cuda_version = opts.cuda_version.clone();
    prov.nccl_version = opts.nccl_version.clone();
    let mut fits = crate::cuda::fit(&samples)?;
    if let Err(why) = fp8 {
        fits.notes.push(format!(
            "no FP8 GEMM columns ({why}): the profile keeps its base's [gemm.fp8], \
             [gemm.fp8_rowwise] and [gemm.fp8_blockwise], if any"
        ));
    }
    fits.notes.extend(scale_notes);
    fits.notes.extend(measure_notes);
    fits.notes.push(power_cap_note(&fits.sustained));
    let profile = cuda_profile(start, &fits, &prov);
    let toml = write::profile_toml(
        &profile,
        None,
        Some(&prov),
        &[format!(
            "Written by twin calibrate cuda ({mode}); raw samples in {}.",
            opts.samples_file
        )],
    );
    Ok(CudaRun {
        plan: Some(plan),
        device: start.device.clone(),
        refit_of: None,
        fits,
        profile,
        provenance: prov,
        elapsed_s,
        samples,
        toml,
    })
}

/// The start's base with the GPU asked for, and the GEMM curve, memory-bound bandwidth and
/// launch cost replaced by the fits. The sustained GEMM rate and the memory-bound bandwidth
/// are stored as the absolute numbers fitted, with their intervals, never clipped against a
/// datasheet; the fractions of the datasheet are derived from them.
pub fn cuda_profile(start: &Start, f: &crate::cuda::CudaFits, prov: &Provenance) -> Profile {
    let run = format!(
        "twin calibrate cuda ({}) on {} at {}",
        prov.mode, prov.hostname, prov.date_utc
    );
    let fitted = |e: Estimate, what: &str| e.fitted_param(format!("{what}; {run}"));
    let g = &f.gemm;
    let rate = fitted(
        g.rate_flops_per_s.clamp(f64::MIN_POSITIVE, f64::MAX),
        "cuBLAS bf16 GEMM curve: rate of a large GEMM in short timed batches (below a power \
         cap's throttle)",
    );
    let bandwidth = fitted(
        f.memory_bound
            .bandwidth_bytes_per_s
            .clamp(f64::MIN_POSITIVE, f64::MAX),
        "memory-bound device copies: bytes read + written per second",
    );
    let mut p = start.base.clone();
    if start.replace_gpu {
        set_gpu(&mut p, start, &rate, &bandwidth, &run);
    }
    p.gpu = start.gpu.clone();
    p.name = format!("{}-calibrated", start.gpu);
    p.description = format!(
        "{} over {}; GEMM curve, memory-bound bandwidth and launch cost fitted by {run}",
        start.gpu, start.origin
    );
    p.set_gemm_bf16_flops_per_s(rate);
    p.set_memory_bandwidth_bytes_per_s(bandwidth);
    p.gemm_k_half = fitted(g.k_half.clamp(0.0, f64::MAX), "cuBLAS bf16 GEMM curve");
    p.gemm_ramp_ns = fitted(
        g.ramp_ns.clamp(0.0, f64::MAX),
        "cuBLAS bf16 GEMM curve: fixed time per (batched) call",
    );
    let tile = |v: u64, ci: [u64; 2], what: &str| {
        Param {
        value: v as f64,
        source: Source::Fitted,
        reference: format!("cuBLAS bf16 GEMM curve, grid over tiles ({what}: tiles an F-test does not reject); {run}"),
        ci95: Some([ci[0] as f64, ci[1] as f64]),
    }
    };
    p.gemm_tile_m = tile(g.tile_m, g.tile_m_ci95, "interval");
    p.gemm_tile_n = tile(g.tile_n, g.tile_n_ci95, "interval");
    // For a GPU with no datasheet figure whose section is replaced, the fastest fitted FP8
    // rate stands in for the FP8 peak, so each FP8 curve's efficiency is at most 1.
    let fp8_rates = [&f.gemm_fp8, &f.gemm_fp8_rowwise, &f.gemm_fp8_blockwise].map(|c| {
        c.as_ref()
            .map(|c| c.rate_flops_per_s.value)
            .filter(|r| r.is_finite() && *r > 0.0)
    });
    if let Some(fastest) = fp8_rates.into_iter().flatten().reduce(f64::max) {
        if start.replace_gpu && start.figures.is_none() {
            p.peak_fp8_flops_per_s = Param {
                value: fastest,
                source: Source::Fitted,
                reference: format!(
                    "no datasheet figure is known for '{}': the fastest fitted FP8 rate; {run}",
                    start.gpu
                ),
                ci95: None,
            };
        }
    }
    if let Some(f8) = &f.gemm_fp8 {
        p.gemm_fp8 = Some(fp8_curve(
            &p,
            f8,
            "cuBLASLt FP8 GEMM curve (e4m3, tensorwise scales, forward fast accumulation)",
            &run,
        ));
        // This column is timed as the backend runs forward GEMMs, with fast accumulation: it
        // prices the forward and the backward alike, and a base's fast-accumulation curve
        // (of another rate: the bundled profiles' is under the power cap) must not price the
        // forward alone.
        p.gemm_fp8_fast_accum = None;
    }
    if let Some(f8) = &f.gemm_fp8_rowwise {
        p.gemm_fp8_rowwise = Some(fp8_curve(
            &p,
            f8,
            "cuBLASLt FP8 GEMM curve (e4m3, rowwise outer-vector scales, forward fast accumulation)",
            &run,
        ));
    }
    if let Some(f8) = &f.gemm_fp8_blockwise {
        p.gemm_fp8_blockwise = Some(fp8_curve(
            &p,
            f8,
            "cuBLASLt FP8 GEMM curve (e4m3, 128 x 128 weight and 1 x 128 activation block scales, split accumulation)",
            &run,
        ));
    }
    p.gemm_ramp_per_product = false;
    p.launch_per_op = false;
    p.launch_ns = fitted(
        f.launch_ns.clamp(0.0, f64::MAX),
        "slope of GPU time over chains of back-to-back 256-byte copies",
    );
    p.fit = Some(twin_sim::profile::FitQuality {
        method: "relative-error least squares; GEMM curve linear per tile (a batched call pays the ramp once), grid over tiles; alpha-beta per copy benchmark; 95% intervals from Student t (statrs) and the delta method".into(),
        data: format!("GPU microbenchmarks ({run}); raw samples beside the profile"),
        samples: g.quality.samples as u64,
        rms_relative_error: g.quality.rms_relative_error,
        max_relative_error: g.quality.max_relative_error,
        holdout_samples: f.gemm_holdout_samples as u64,
        holdout_max_relative_error: f.gemm_holdout_max_relative_error,
    });
    p
}

/// An FP8 curve section (`[gemm.fp8]`, `[gemm.fp8_rowwise]`) from its fit (`what` names the
/// measurement in each key's reference): the efficiency is the fitted sustained rate over
/// `p`'s FP8 peak, with its interval.
fn fp8_curve(
    p: &Profile,
    f8: &crate::fit::gemm::GemmFit,
    what: &str,
    run: &str,
) -> twin_sim::profile::GemmParams {
    let rate = f8.rate_flops_per_s.clamp(f64::MIN_POSITIVE, f64::MAX);
    let peak = p.peak_fp8_flops_per_s.value;
    let fitted = |e: Estimate, detail: &str| e.fitted_param(format!("{what}{detail}; {run}"));
    let tile = |v: u64, ci: [u64; 2]| Param {
        value: v as f64,
        source: Source::Fitted,
        reference: format!(
            "{what}, grid over tiles (interval: tiles an F-test does not reject); {run}"
        ),
        ci95: Some([ci[0] as f64, ci[1] as f64]),
    };
    twin_sim::profile::GemmParams {
        max_efficiency: Param {
            value: rate.value / peak,
            source: Source::Fitted,
            reference: format!(
                "{:.0} TFLOP/s (short timed batches) of the {:.0} TFLOP/s FP8 peak; {what}; {run}",
                rate.value / 1e12,
                peak / 1e12
            ),
            ci95: (rate.ci95[0].is_finite() && rate.ci95[1].is_finite())
                .then(|| [rate.ci95[0] / peak, rate.ci95[1] / peak]),
        },
        k_half: fitted(f8.k_half.clamp(0.0, f64::MAX), ""),
        tile_m: tile(f8.tile_m, f8.tile_m_ci95),
        tile_n: tile(f8.tile_n, f8.tile_n_ci95),
        ramp_ns: fitted(f8.ramp_ns.clamp(0.0, f64::MAX), ": fixed time per call"),
    }
}

/// Replaces `p`'s GPU section with the GPU `start` asks for: its figures (or, with none known,
/// the fitted bf16 rate as the peak and the fitted memory-bound bandwidth as the HBM
/// bandwidth) and the device's SM count.
fn set_gpu(p: &mut Profile, start: &Start, rate: &Param, bandwidth: &Param, run: &str) {
    if let Some(d) = &start.device {
        p.sm_count = Param {
            value: f64::from(d.sm_count.max(1)),
            source: Source::Datasheet,
            reference: format!(
                "multiprocessor count the CUDA driver reports for {} ({} bytes of memory); {run}",
                d.name, d.memory_bytes
            ),
            ci95: None,
        };
    }
    let (peak, hbm, source, reference) = match &start.figures {
        Some(f) => (
            f.peak.clone(),
            f.hbm_bandwidth_bytes_per_s,
            f.source,
            f.reference.clone(),
        ),
        None => (
            crate::gpu_base::peaks_from_bf16(rate.value),
            bandwidth.value,
            Source::Fitted,
            format!(
                "no datasheet figure is known for '{}': the fitted rate (bf16; fp16 \
                 and fp8 at it, tf32 at half, fp32 at 1/16) and memory-bound bandwidth; {run}",
                start.gpu
            ),
        ),
    };
    let param = |value: f64, what: &str| Param {
        value,
        source,
        reference: format!("{reference}: {what}"),
        ci95: None,
    };
    p.peak_fp32_flops_per_s = param(peak.fp32_flops_per_s, "fp32 peak");
    p.peak_tf32_flops_per_s = param(peak.tf32_flops_per_s, "tf32 dense peak");
    p.peak_fp16_flops_per_s = param(peak.fp16_flops_per_s, "fp16 dense peak");
    p.peak_bf16_flops_per_s = param(peak.bf16_flops_per_s, "bf16 dense peak");
    p.peak_fp8_flops_per_s = param(peak.fp8_flops_per_s, "fp8 dense peak");
    p.hbm_bandwidth_bytes_per_s = param(hbm, "HBM bandwidth");
}

/// The result of importing nccl-tests logs.
#[derive(Clone, Debug, Serialize)]
pub struct NcclImport {
    pub logs: Vec<Log>,
    pub fits: Vec<LogFit>,
    /// One fit per tier over every log of that tier (bytes per rail for the inter tier).
    pub tiers: Vec<(Tier, AlphaBeta)>,
    pub profile: Profile,
    #[serde(skip)]
    pub toml: String,
}

/// Fits the network tiers of `base` to nccl-tests logs (`(origin, text)` pairs); rows below
/// `min_bytes` are left out of the fits.
pub fn from_nccl_tests(
    logs: &[(String, String)],
    base: &Profile,
    base_origin: &str,
    min_bytes: u64,
) -> Result<NcclImport, CalibError> {
    let parsed: Vec<Log> = logs
        .iter()
        .map(|(o, t)| nccl_tests::parse(t, o))
        .collect::<Result<_, _>>()?;
    let fits: Vec<LogFit> = parsed
        .iter()
        .map(|l| {
            l.fit(min_bytes)
                .map_err(|e| CalibError::Profile(format!("{}: {e}", l.origin)))
        })
        .collect::<Result<_, _>>()?;
    let mut p = base.clone();
    let mut tiers = Vec::new();
    let names: Vec<String> = parsed.iter().map(|l| l.origin.clone()).collect();
    for tier in [Tier::Intra, Tier::Inter] {
        let pts: Vec<Point> = parsed
            .iter()
            .filter(|l| l.tier() == tier)
            .flat_map(|l| {
                let rails = if tier == Tier::Inter {
                    f64::from(l.max_per_node.max(1))
                } else {
                    1.0
                };
                let rows: Vec<Point> = Log {
                    rows: l
                        .rows
                        .iter()
                        .filter(|r| r.size_bytes >= min_bytes)
                        .cloned()
                        .collect(),
                    ..l.clone()
                }
                .points();
                rows.into_iter().map(move |q| Point {
                    bytes: q.bytes / rails,
                    ..q
                })
            })
            .collect();
        if pts.is_empty() {
            continue;
        }
        let f = alpha_beta::fit(&pts)?;
        let what = format!(
            "alpha-beta fit to nccl-tests logs ({}), ring step counts",
            names.join(", ")
        );
        let link = match tier {
            Tier::Intra => &mut p.intra,
            Tier::Inter => &mut p.inter,
        };
        set_link(link, &f, &what);
        tiers.push((tier, f));
    }
    p.name = format!("{}-nccl-tests", base.name);
    p.description = format!(
        "{}; network tiers fitted to nccl-tests logs",
        base.description
    );
    let toml = write::profile_toml(
        &p,
        None,
        None,
        &[
            format!("Written by twin calibrate nccl-tests over the base profile {base_origin}."),
            format!("Logs: {}", names.join(", ")),
        ],
    );
    Ok(NcclImport {
        logs: parsed,
        fits,
        tiers,
        profile: p,
        toml,
    })
}

/// Sets a tier from a fit: the line rate stays (unless the fit beats it), the efficiency is
/// fitted bandwidth / line rate, the latency is the fitted per-step latency.
fn set_link(link: &mut LinkParams, f: &AlphaBeta, what: &str) {
    let bw = f.bandwidth_bytes_per_s;
    if bw.value > link.bandwidth_bytes_per_s.value {
        link.bandwidth_bytes_per_s = Param {
            value: bw.value,
            source: Source::Fitted,
            reference: format!("{what}: the fitted bandwidth exceeds the base line rate"),
            ci95: None,
        };
    }
    let line = link.bandwidth_bytes_per_s.value;
    let eff = bw.map_monotone(|b| b / line).clamp(1e-6, 1.0);
    link.efficiency = Param {
        value: eff.value,
        source: Source::Fitted,
        reference: format!("{what}: effective bandwidth / line rate"),
        ci95: Some(eff.ci95),
    };
    let lat = f.latency_ns.clamp(0.0, f64::MAX);
    link.latency_ns = Param {
        value: lat.value,
        source: Source::Fitted,
        reference: format!("{what}: per-step latency"),
        ci95: Some(lat.ci95),
    };
}

/// What the profile's GEMM rates are, beside what GEMMs back to back ran at.
pub(crate) fn power_cap_note(sustained: &[crate::cuda::Sustained]) -> String {
    let measured: Vec<String> = sustained
        .iter()
        .map(|b| format!("{} {:.2}", b.column, b.late_fraction))
        .collect();
    let what = if measured.is_empty() {
        "a GPU at its power cap runs them slower after tens of milliseconds (an H200 at 700 W: \
         0.83-0.86 of these rates)"
            .to_string()
    } else {
        format!(
            "back to back here they fell to {} of the rate they started at (the power cap)",
            measured.join(", ")
        )
    };
    format!(
        "GEMM rates are timed in short batches, the GPU below its power cap's throttle; {what}; \
         the profile keeps the short-batch rates (docs/measurements/2026-11-30-h200-fp8-and-power.md)"
    )
}

#[cfg(test)]
mod tests {
    use super::best_of;

    /// `best_of` over a scripted sequence of measurement qualities.
    fn run(first: f64, then: &[f64], retries: usize) -> (f64, Vec<f64>, usize) {
        let mut next = then.iter().copied();
        let mut calls = 0;
        let (best, wanting) = best_of(
            first,
            |q| *q,
            0.5,
            retries,
            |_| {
                calls += 1;
                next.next().ok_or("no more")
            },
        )
        .unwrap();
        (best, wanting, calls)
    }

    #[test]
    fn a_good_first_set_is_kept_without_measuring_again() {
        assert_eq!(run(0.9, &[], 2), (0.9, vec![], 0));
    }

    #[test]
    fn a_poor_set_is_measured_again_until_one_fits() {
        assert_eq!(run(0.3, &[0.4, 0.8, 0.99], 5), (0.8, vec![0.3, 0.4], 2));
    }

    #[test]
    fn retries_are_bounded_and_the_best_set_is_kept() {
        assert_eq!(run(0.3, &[0.2, 0.45, 0.1], 2), (0.45, vec![0.3, 0.3], 2));
        assert_eq!(run(0.3, &[0.2], 0), (0.3, vec![], 0));
    }

    #[test]
    fn a_failed_measurement_is_an_error() {
        let r: Result<(f64, Vec<f64>), &str> = best_of(0.1, |q| *q, 0.5, 2, |_| Err("broke"));
        assert_eq!(r.unwrap_err(), "broke");
    }
}
