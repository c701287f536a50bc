//! `twin calibrate refit`: a host or GPU calibration's raw samples (PROFILE.samples.json)
//! fitted again, measuring nothing. The machine's speed drifts by several percent between
//! calibrations, so the same measurements through two versions of the fits or the model are
//! how a change to either is judged (docs/calibration.md).

use crate::bench::{Config, Mode, Samples};
use crate::host;
use crate::run::{host_profile_text, CudaRun, HostRun};
use crate::write::Provenance;
use crate::CalibError;

/// A samples file as `twin calibrate host` writes it (PROFILE.samples.json).
#[derive(serde::Deserialize)]
struct SamplesFile {
    provenance: Provenance,
    #[serde(default)]
    config: serde_json::Value,
    samples: Samples,
}

/// Fits a profile again from a host calibration's raw samples (`text`, the JSON of
/// PROFILE.samples.json from `origin`), measuring nothing: what the samples were taken on and
/// when stays in the provenance, beside the refit's command. Lets a changed fit or model be
/// judged on the same measurements (docs/calibration.md). `gpu_name` names the GPU the
/// profile describes.
pub fn refit_host(
    text: &str,
    origin: &str,
    gpu_name: &str,
    command: &str,
) -> Result<HostRun, CalibError> {
    let file: SamplesFile = serde_json::from_str(text).map_err(|e| {
        CalibError::Profile(format!(
            "{origin}: not a host calibration's samples file ({e}); give the \
             PROFILE.samples.json that twin calibrate host wrote"
        ))
    })?;
    if file.provenance.backend != "host" {
        return Err(CalibError::Profile(format!(
            "{origin}: samples of the {} backend; twin calibrate refit reads the host backend's",
            file.provenance.backend
        )));
    }
    if file.samples.gemm.is_empty() {
        return Err(CalibError::Profile(format!(
            "{origin}: no GEMM samples (samples.gemm is empty); twin calibrate refit needs the samples file \
             of a whole host calibration"
        )));
    }
    let cores = file.provenance.cores.max(1);
    // A file written before a Config field existed does not read back: its mode's sweep,
    // with what the file recorded of the two sizes the report shows.
    let mode = match file.provenance.mode.as_str() {
        "quick" => Mode::Quick,
        "tiny" => Mode::Tiny,
        _ => Mode::Full,
    };
    let config = serde_json::from_value::<Config>(file.config.clone()).unwrap_or_else(|_| {
        let mut c = Config::new(mode, cores);
        if let Some(b) = file.config.get("step_evict_bytes").and_then(|v| v.as_u64()) {
            c.step_evict_bytes = b;
        }
        c
    });
    let mut samples = file.samples;
    if samples.private_cache_bytes == 0 {
        samples.private_cache_bytes = config.private_cache_bytes;
    }
    let fits = host::fit_all(&samples, cores)?;
    let mut provenance = file.provenance;
    let measured = format!(
        "the samples twin calibrate host ({}) took on {} at {}",
        provenance.mode, provenance.hostname, provenance.date_utc
    );
    let now = crate::provenance::here("host", "refit", command, "");
    let run_ref = format!("twin calibrate refit at {} of {measured}", now.date_utc);
    provenance.command = format!(
        "{command} (refit at {}; measured by: {})",
        now.date_utc, provenance.command
    );
    provenance.twin_version = now.twin_version;
    provenance.samples_file = origin.to_string();
    let (profile, host_keys, toml) = host_profile_text(
        &fits,
        gpu_name,
        &run_ref,
        samples.private_cache_bytes,
        &provenance,
    );
    Ok(HostRun {
        config,
        fits,
        profile,
        host: host_keys,
        provenance,
        elapsed_s: 0.0,
        step_bytes: None,
        refit_of: Some(origin.to_string()),
        samples,
        toml,
    })
}

/// The backend whose samples a samples file holds (`provenance.backend`).
pub fn samples_backend(text: &str, origin: &str) -> Result<String, CalibError> {
    #[derive(serde::Deserialize)]
    struct Head {
        provenance: Provenance,
    }
    serde_json::from_str::<Head>(text)
        .map(|h| h.provenance.backend)
        .map_err(|e| {
            CalibError::Profile(format!(
                "{origin}: not a calibration's samples file ({e}); give the PROFILE.samples.json \
                 that twin calibrate wrote"
            ))
        })
}

/// Fits a profile again from a GPU calibration's raw samples (`text`, the JSON of
/// PROFILE.samples.json from `origin`), measuring nothing, over what `req` starts from (its
/// device, when not given, is the one the file recorded). Returns the run and its start.
pub fn refit_cuda(
    text: &str,
    origin: &str,
    mut req: crate::gpu_base::Request,
    command: &str,
) -> Result<(CudaRun, crate::gpu_base::Start), CalibError> {
    #[derive(serde::Deserialize)]
    struct CudaSamplesFile {
        provenance: Provenance,
        #[serde(default)]
        device: Option<crate::gpu_base::Device>,
        samples: crate::cuda::CudaSamples,
    }
    let file: CudaSamplesFile = serde_json::from_str(text).map_err(|e| {
        CalibError::Profile(format!(
            "{origin}: not a GPU calibration's samples file ({e}); give the \
             PROFILE.samples.json that twin calibrate cuda wrote"
        ))
    })?;
    if file.provenance.backend != "cuda" {
        return Err(CalibError::Profile(format!(
            "{origin}: samples of the {} backend, not cuda",
            file.provenance.backend
        )));
    }
    if req.device.is_none() {
        req.device = file.device;
    }
    let start = crate::gpu_base::start(req)?;
    let fits = crate::cuda::fit(&file.samples)?;
    let mut provenance = file.provenance;
    let now = crate::provenance::here("cuda", "refit", command, "");
    provenance.command = format!(
        "{command} (refit at {}; measured by: {})",
        now.date_utc, provenance.command
    );
    provenance.twin_version = now.twin_version;
    provenance.samples_file = origin.to_string();
    let profile = crate::run::cuda_profile(&start, &fits, &provenance);
    let toml = crate::write::profile_toml(
        &profile,
        None,
        Some(&provenance),
        &[format!(
            "Written by twin calibrate refit of the GPU samples in {origin}, measured by twin \
             calibrate cuda ({}) on {} at {}.",
            provenance.mode, provenance.hostname, provenance.date_utc
        )],
    );
    let run = CudaRun {
        plan: None,
        device: start.device.clone(),
        refit_of: Some(origin.to_string()),
        fits,
        profile,
        provenance,
        elapsed_s: 0.0,
        samples: file.samples,
        toml,
    };
    Ok((run, start))
}

#[cfg(test)]
mod tests {
    use crate::bench::Samples;

    #[test]
    fn an_older_samples_file_reads_back_with_what_it_lacks_left_empty() {
        // A GEMM sample without `batch` or back-to-back calls, a state sample without the gap
        // and the elapsed time, and no other benchmark at all.
        let old = r#"{
            "gemm": [{"m": 64, "n": 64, "k": 64, "origin": "sweep", "holdout": false,
                      "kept_ns": [1000.0], "dropped_ns": []}],
            "state_update": [{"state_bytes": 4194304, "evict_bytes": 0, "moved_bytes": 8388608,
                              "kept_ns": [150000.0], "dropped_ns": []},
                             {"state_bytes": 4194304, "evict_bytes": 0, "gap_ns": 2000000,
                              "elapsed_ns": null, "moved_bytes": 8388608,
                              "kept_ns": [150000.0], "dropped_ns": []}]
        }"#;
        let s: Samples = serde_json::from_str(old).unwrap();
        assert_eq!(s.gemm[0].batch, 1);
        assert!(s.gemm[0].warm_kept_ns.is_empty());
        assert_eq!(s.state_update[0].gap_ns, 0);
        assert!(s.state_update[0].elapsed_ns.is_nan());
        assert!(
            s.state_update[1].elapsed_ns.is_nan(),
            "JSON writes a NaN as null"
        );
        assert!(s.comm.is_empty() && s.interruptions.is_none());
        // And what this twin writes reads back as it was.
        let again: Samples = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(again.gemm, s.gemm);
    }
}
