//! Transcoding on real images: the Debian `apache2-doc` manual's GIFs and PNGs (installed by
//! `.ci/run`). Every preset keeps its promise on every image (lossless is pixel-identical,
//! balanced SSIM ≥ 0.95, never larger than the original), and balanced saves bytes overall.

use std::path::Path;

use image::GenericImageView;
use webpep_optimize::transcode::{ssim, transcode, Outcome, Preset, TranscodeConfig};

const MANUAL_IMAGES: &str = "/usr/share/doc/apache2-doc/manual/images";

fn images() -> Vec<(String, Vec<u8>, &'static str)> {
    let mut out = Vec::new();
    let dir = Path::new(MANUAL_IMAGES);
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| {
        panic!("{MANUAL_IMAGES}: {e} (apt-get install apache2-doc; .ci/run installs it)")
    });
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let ct = match name.rsplit('.').next() {
            Some("png") => "image/png",
            Some("gif") => "image/gif",
            Some("jpg") | Some("jpeg") => "image/jpeg",
            _ => continue,
        };
        out.push((name, std::fs::read(e.path()).unwrap(), ct));
    }
    out.sort();
    assert!(
        out.len() >= 20,
        "the manual has dozens of images, found {}",
        out.len()
    );
    out
}

#[test]
fn presets_keep_their_promises_on_the_apache_manual() {
    let imgs = images();
    for preset in [Preset::Lossless, Preset::Balanced] {
        let cfg = TranscodeConfig::with_preset(preset);
        let (mut before, mut after) = (0usize, 0usize);
        for (name, body, ct) in &imgs {
            before += body.len();
            match transcode(body, Some(ct), None, &cfg) {
                Outcome::Transcoded {
                    body: out,
                    ssim: s,
                    content_type,
                } => {
                    assert!(out.len() < body.len(), "{preset} {name}: not smaller");
                    let a = image::load_from_memory(body).unwrap();
                    let b = image::load_from_memory(&out)
                        .unwrap_or_else(|e| panic!("{preset} {name} → {content_type}: {e}"));
                    assert_eq!(a.dimensions(), b.dimensions(), "{name}");
                    let measured = ssim(&a, &b);
                    match preset {
                        Preset::Lossless => assert_eq!(
                            a.to_rgba8().as_raw(),
                            b.to_rgba8().as_raw(),
                            "{name}: lossless is pixel-identical"
                        ),
                        _ => assert!(
                            measured >= 0.95 - 1e-6,
                            "{preset} {name}: SSIM {measured} (reported {s:?})"
                        ),
                    }
                    after += out.len();
                }
                Outcome::Unchanged(_) => after += body.len(),
            }
        }
        let saving = 1.0 - after as f64 / before as f64;
        eprintln!(
            "{preset}: {} images, {before} → {after} bytes ({:.1} % saved)",
            imgs.len(),
            saving * 100.0
        );
        if preset == Preset::Balanced {
            assert!(saving > 0.3, "balanced saves {:.1} %", saving * 100.0);
        }
    }
}
