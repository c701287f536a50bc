//! The reports in a real browser: headless Chromium loads each report `twin` writes (a
//! scenario, one with faults, a sweep, a step verification) from a file:// URL with no
//! network, with no console message, and with every section's SVG in the DOM it built; it
//! renders each page and each section to PNG. With TWIN_BLESS=1 the section screenshots
//! replace docs/images/report-SECTION.png (the pictures the README shows).
//!
//! Without Chromium (`chromium` or `chromium-browser` on PATH) the test prints a skip line
//! and passes, except under CI=true, where it fails: CI installs it (.ci/run).
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

mod common;
use common::{scratch_dir, text, twin};
use std::path::{Path, PathBuf};
use std::process::Command;

const WIDTH: u32 = 1100;
/// Smallest PNG of a page with plots: a blank page compresses to a few KiB.
const MIN_PNG_BYTES: u64 = 12_000;

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

struct Browser {
    bin: PathBuf,
    profile: PathBuf,
}

impl Browser {
    /// Runs Chromium headless on `page` with `extra` flags: (stdout, console lines).
    fn run(&self, page: &Path, extra: &[String]) -> (String, Vec<String>) {
        let url = format!("file://{}", page.canonicalize().unwrap().display());
        let o = Command::new(&self.bin)
            .args([
                "--headless=new",
                "--disable-gpu",
                "--no-sandbox",
                "--no-first-run",
                "--hide-scrollbars",
                "--force-device-scale-factor=1",
                "--disable-extensions",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!("--user-data-dir={}", self.profile.display()))
            .args(extra)
            .arg(&url)
            .output()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        assert!(
            o.status.success(),
            "chromium failed on {url}: {}",
            text(&o.stderr)
        );
        let console = text(&o.stderr)
            .lines()
            .filter(|l| l.contains("CONSOLE"))
            .map(String::from)
            .collect();
        (text(&o.stdout), console)
    }

    /// The DOM Chromium built from `page`, and what the page logged to its console.
    fn dom(&self, page: &Path) -> (String, Vec<String>) {
        self.run(page, &["--dump-dom".to_string()])
    }

    /// Renders `page` at WIDTH x `height` into `png` and checks the image.
    fn screenshot(&self, page: &Path, height: u32, png: &Path) {
        let _ = std::fs::remove_file(png);
        let (_, console) = self.run(
            page,
            &[
                format!("--screenshot={}", png.display()),
                format!("--window-size={WIDTH},{height}"),
            ],
        );
        assert!(console.is_empty(), "{}: {console:?}", page.display());
        check_png(png, WIDTH, height);
    }
}

/// A PNG of `w` x `h` pixels, larger than a blank page.
fn check_png(png: &Path, w: u32, h: u32) {
    let bytes = std::fs::read(png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is no PNG",
        png.display()
    );
    let be = |i: usize| u32::from_be_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    assert_eq!(&bytes[12..16], b"IHDR");
    assert_eq!((be(16), be(20)), (w, h), "{}", png.display());
    assert!(
        bytes.len() as u64 > MIN_PNG_BYTES,
        "{} has {} bytes: a blank page?",
        png.display(),
        bytes.len()
    );
}

/// The page cut down to its head and one section.
fn section_page(html: &str, id: &str) -> String {
    let open = format!("<section id=\"{id}\">");
    let start = html
        .find(&open)
        .unwrap_or_else(|| panic!("no section {id}"));
    let end = start + html[start..].find("</section>").unwrap() + "</section>".len();
    let body = html.find("<body>").unwrap() + "<body>".len();
    format!(
        "{}\n{}\n</body>\n</html>\n",
        &html[..body],
        &html[start..end]
    )
}

/// Every section `ids` of the DOM holds an SVG with text (axes, labels) and shapes (data).
fn check_dom(dom: &str, ids: &[&str], page: &str) {
    for id in ids {
        let section = section_page(dom, id);
        if *id == "headline" {
            assert!(section.contains("<table>"), "{page}: headline has no table");
            continue;
        }
        let svg = section
            .find("<svg")
            .map(|i| &section[i..])
            .unwrap_or_else(|| panic!("{page}: section {id} has no svg"));
        assert!(svg.contains("<text"), "{page}: {id} has no text");
        assert!(
            ["<rect", "<polygon", "<circle"]
                .iter()
                .any(|t| svg.contains(t)),
            "{page}: {id} has no data"
        );
    }
}

/// Window heights that show each section whole (its heading, caption and plot).
fn section_height(id: &str) -> u32 {
    match id {
        "headline" => 420,
        "timeline" => 560,
        "memory" => 1180,
        "goodput" => 720,
        "sweep" => 800,
        "variability" => 720,
        _ => 820,
    }
}

fn twin_ok(args: &[&str]) {
    let o = twin(args);
    assert!(o.status.success(), "twin {args:?}: {}", text(&o.stderr));
}

#[test]
fn reports_load_in_chromium_without_console_messages_and_render() {
    let Some(bin) = chromium() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but no chromium on PATH: .ci/run installs it"
        );
        println!("skipped: no chromium on PATH (apt-get install chromium)");
        return;
    };
    let dir = scratch_dir("browser");
    let browser = Browser {
        bin,
        profile: dir.join("chromium-profile"),
    };
    // The console check can fail: a page that logs is caught.
    let noisy = dir.join("noisy.html");
    std::fs::write(
        &noisy,
        "<!DOCTYPE html><html><body><script>console.error('x')</script></body></html>",
    )
    .unwrap();
    assert!(!browser.dom(&noisy).1.is_empty(), "console not captured");

    let path = |n: &str| dir.join(n).display().to_string();
    twin_ok(&[
        "report",
        "scenarios/512xA100.toml",
        "-o",
        &path("scenario.html"),
    ]);
    twin_ok(&[
        "report",
        "scenarios/512xA100-faults.toml",
        "--set",
        "faults.seeds=20",
        "-o",
        &path("faults.html"),
    ]);
    twin_ok(&[
        "sweep",
        "scenarios/512xA100.toml",
        "--vary",
        "parallel.tp=2,4,8",
        "--vary",
        "parallel.pp=2,4,8,16",
        "--quiet",
        "--report",
        &path("sweep.html"),
    ]);
    twin_ok(&[
        "verify",
        "step",
        "scenarios/host/pp.toml",
        "--profile",
        "scenarios/profiles/host-example.toml",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--report",
        &path("verify.html"),
    ]);
    twin_ok(&[
        "report",
        "scenarios/variability.toml",
        "--samples",
        "32",
        "-o",
        &path("variability.html"),
    ]);
    // Each page: its sections, and those whose screenshot docs/images keeps (each once).
    type Page<'a> = (&'a str, &'a [&'a str], &'a [&'a str]);
    let pages: [Page; 5] = [
        ("scenario.html", &["headline", "timeline", "memory"], &[]),
        (
            "faults.html",
            &["headline", "timeline", "memory", "goodput"],
            &["headline", "timeline", "memory", "goodput"],
        ),
        ("sweep.html", &["headline", "sweep"], &["sweep"]),
        ("verify.html", &["headline", "verify"], &["verify"]),
        (
            "variability.html",
            &["headline", "timeline", "memory", "variability"],
            &["variability"],
        ),
    ];
    let bless = std::env::var("TWIN_BLESS").is_ok_and(|v| v == "1");
    let images = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/images");
    for (name, ids, shots) in pages {
        let page = dir.join(name);
        let (dom, console) = browser.dom(&page);
        assert!(console.is_empty(), "{name} logged: {console:?}");
        check_dom(&dom, ids, name);
        browser.screenshot(&page, 1600, &dir.join(format!("{name}.png")));
        let html = std::fs::read_to_string(&page).unwrap();
        for id in shots {
            let one = dir.join(format!("{name}-{id}.html"));
            std::fs::write(&one, section_page(&html, id)).unwrap();
            let png = dir.join(format!("report-{id}.png"));
            browser.screenshot(&one, section_height(id), &png);
            if bless {
                std::fs::create_dir_all(&images).unwrap();
                std::fs::copy(&png, images.join(format!("report-{id}.png"))).unwrap();
            }
        }
    }
}
