//! Presets on generated images: SSIM bounds, smaller output, content types, WebP only when
//! the client's Accept lists it, lossless output pixel-identical.

mod transcode_support;

use image::DynamicImage;
use transcode_support::*;
use webpep_optimize::transcode::{ssim, transcode, Outcome, Preset, Skip, TranscodeConfig};

const WEBP_ACCEPT: &str = "image/avif,image/webp,image/apng,image/*,*/*;q=0.8";

fn cfg(p: Preset) -> TranscodeConfig {
    TranscodeConfig::with_preset(p)
}

/// Unwraps a transcoded outcome, checking its claimed SSIM against an independent decode.
fn transcoded(out: Outcome, original: &DynamicImage) -> (Vec<u8>, &'static str, f64) {
    match out {
        Outcome::Transcoded {
            body,
            content_type,
            ssim: claimed,
        } => {
            let back = decode(&body);
            let real = ssim(original, &back);
            let claimed = claimed.expect("ssim reported");
            // The reported value is the worse of white/black backgrounds, so it never exceeds
            // the white-background measure.
            assert!(
                claimed <= real + 1e-9,
                "claimed {claimed} > measured {real}"
            );
            (body, content_type, real)
        }
        Outcome::Unchanged(skip) => panic!("kept the original: {skip}"),
    }
}

#[test]
fn ssim_is_one_for_identical_and_falls_with_noise() {
    let base = DynamicImage::ImageRgb8(photo_pixels(96, 64, 0));
    assert_eq!(ssim(&base, &base), 1.0);
    let mut last = 1.0;
    for amp in [4, 16, 48] {
        let noisy = DynamicImage::ImageRgb8(photo_pixels(96, 64, amp));
        let s = ssim(&base, &noisy);
        assert!(s < last, "noise {amp}: ssim {s} not below {last}");
        last = s;
    }
    assert!(last < 0.6, "heavy noise still scores {last}");
}

#[test]
fn balanced_photo_jpeg_is_smaller_and_near_lossless() {
    let orig_bytes = photo_jpeg(192, 128);
    let orig = decode(&orig_bytes);
    let (body, ct, s) = transcoded(
        transcode(
            &orig_bytes,
            Some("image/jpeg"),
            None,
            &cfg(Preset::Balanced),
        ),
        &orig,
    );
    assert_eq!(ct, "image/jpeg");
    assert!(s >= 0.95, "ssim {s}");
    assert!(
        body.len() < orig_bytes.len() * 3 / 4,
        "{} vs {}",
        body.len(),
        orig_bytes.len()
    );
}

#[test]
fn aggressive_is_smaller_than_balanced_within_its_bound() {
    let orig_bytes = photo_jpeg(192, 128);
    let orig = decode(&orig_bytes);
    let (bal, _, _) = transcoded(
        transcode(&orig_bytes, None, None, &cfg(Preset::Balanced)),
        &orig,
    );
    let (agg, _, s) = transcoded(
        transcode(&orig_bytes, None, None, &cfg(Preset::Aggressive)),
        &orig,
    );
    assert!(s >= 0.85, "ssim {s}");
    assert!(
        agg.len() < bal.len(),
        "aggressive {} >= balanced {}",
        agg.len(),
        bal.len()
    );
}

#[test]
fn webp_when_accepted_and_smaller_than_jpeg() {
    let orig_bytes = photo_jpeg(192, 128);
    let orig = decode(&orig_bytes);
    let (jpeg, _, _) = transcoded(
        transcode(
            &orig_bytes,
            None,
            Some("image/png,*/*"),
            &cfg(Preset::Balanced),
        ),
        &orig,
    );
    let (webp, ct, s) = transcoded(
        transcode(&orig_bytes, None, Some(WEBP_ACCEPT), &cfg(Preset::Balanced)),
        &orig,
    );
    assert_eq!(ct, "image/webp");
    assert!(webp.starts_with(b"RIFF") && &webp[8..12] == b"WEBP");
    assert!(s >= 0.95);
    assert!(webp.len() <= jpeg.len());
}

#[test]
fn no_webp_without_an_explicit_accept() {
    let inputs = [
        photo_jpeg(128, 96),
        careless_png(&logo_pixels(120, 60)),
        gif_of(&logo_pixels(120, 60)),
        careless_png(&alpha_pixels(96, 96)),
    ];
    for accept in [
        None,
        Some("*/*"),
        Some("image/*,*/*;q=0.8"),
        Some("image/webp;q=0, */*"),
    ] {
        for preset in Preset::ALL {
            for input in &inputs {
                if let Outcome::Transcoded { content_type, .. } =
                    transcode(input, None, accept, &cfg(preset))
                {
                    assert_ne!(
                        content_type, "image/webp",
                        "accept {accept:?}, preset {preset}"
                    );
                }
            }
        }
    }
}

#[test]
fn lossless_png_logo_is_pixel_identical_and_smaller() {
    let pixels = logo_pixels(160, 80);
    let orig_bytes = careless_png(&pixels);
    for accept in [None, Some(WEBP_ACCEPT)] {
        let out = transcode(
            &orig_bytes,
            Some("image/png"),
            accept,
            &cfg(Preset::Lossless),
        );
        let (body, ct, s) = transcoded(out, &decode(&orig_bytes));
        assert_eq!(s, 1.0);
        assert!(
            body.len() < orig_bytes.len() / 4,
            "{} vs {}",
            body.len(),
            orig_bytes.len()
        );
        assert_eq!(decode(&body).to_rgba8(), pixels, "{ct}");
    }
}

#[test]
fn lossless_gif_becomes_identical_png() {
    let pixels = logo_pixels(160, 80);
    let orig_bytes = gif_of(&pixels);
    let (body, ct, _) = transcoded(
        transcode(&orig_bytes, Some("image/gif"), None, &cfg(Preset::Lossless)),
        &decode(&orig_bytes),
    );
    assert_eq!(ct, "image/png");
    assert!(body.len() < orig_bytes.len());
    assert_eq!(decode(&body).to_rgba8(), decode(&orig_bytes).to_rgba8());
}

#[test]
fn lossless_jpeg_strips_metadata_only() {
    let plain = photo_jpeg(128, 96);
    let fat = with_metadata(&plain);
    let (body, ct, _) = transcoded(
        transcode(&fat, Some("image/jpeg"), None, &cfg(Preset::Lossless)),
        &decode(&fat),
    );
    assert_eq!(ct, "image/jpeg");
    assert_eq!(body, plain, "stripping should give back the plain file");
    // Nothing to strip: the original is kept.
    assert_eq!(
        transcode(&plain, Some("image/jpeg"), None, &cfg(Preset::Lossless)),
        Outcome::Unchanged(Skip::NotSmaller)
    );
}

#[test]
fn lossless_alpha_png_is_pixel_identical() {
    let pixels = alpha_pixels(96, 96);
    let orig_bytes = careless_png(&pixels);
    for accept in [None, Some(WEBP_ACCEPT)] {
        let (body, _, _) = transcoded(
            transcode(&orig_bytes, None, accept, &cfg(Preset::Lossless)),
            &decode(&orig_bytes),
        );
        assert_eq!(decode(&body).to_rgba8(), pixels);
    }
}

#[test]
fn balanced_alpha_png_keeps_transparency() {
    let pixels = alpha_pixels(128, 128);
    let orig_bytes = careless_png(&pixels);
    let orig = decode(&orig_bytes);
    for accept in [None, Some(WEBP_ACCEPT)] {
        let (body, ct, s) = transcoded(
            transcode(&orig_bytes, None, accept, &cfg(Preset::Balanced)),
            &orig,
        );
        assert_ne!(ct, "image/jpeg", "JPEG has no alpha");
        assert!(s >= 0.95);
        assert!(body.len() < orig_bytes.len());
        let back = decode(&body).to_rgba8();
        // Fully transparent corners stay transparent, the opaque centre stays opaque.
        assert!(back.get_pixel(0, 0).0[3] < 16);
        assert!(back.get_pixel(64, 64).0[3] > 240);
    }
}

#[test]
fn balanced_png_photo_goes_to_jpeg_without_alpha() {
    let pixels = photo_pixels(160, 120, 4);
    let rgba = DynamicImage::ImageRgb8(pixels).to_rgba8();
    let orig_bytes = careless_png(&rgba);
    let (body, ct, s) = transcoded(
        transcode(&orig_bytes, Some("image/png"), None, &cfg(Preset::Balanced)),
        &decode(&orig_bytes),
    );
    assert_eq!(ct, "image/jpeg");
    assert!(s >= 0.95);
    assert!(body.len() * 3 < orig_bytes.len());
}

#[test]
fn animations_are_kept_unless_configured() {
    let a = logo_pixels(64, 32);
    let mut b = a.clone();
    for p in b.pixels_mut().take(500) {
        p.0 = [0, 0, 0, 255];
    }
    let anim = gif_frames(&[a.clone(), b]);
    for preset in Preset::ALL {
        assert_eq!(
            transcode(&anim, Some("image/gif"), None, &cfg(preset)),
            Outcome::Unchanged(Skip::Animated)
        );
    }
    let still = TranscodeConfig {
        keep_animations: false,
        ..cfg(Preset::Balanced)
    };
    match transcode(&anim, Some("image/gif"), None, &still) {
        Outcome::Transcoded {
            body, content_type, ..
        } => {
            assert_eq!(content_type, "image/png");
            assert_eq!(decode(&body).to_rgba8(), a, "first frame");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn strict_bound_never_accepts_a_worse_result() {
    let orig_bytes = photo_jpeg(128, 96);
    let strict = TranscodeConfig {
        min_ssim: Some(0.9999),
        ..cfg(Preset::Aggressive)
    };
    match transcode(&orig_bytes, None, Some(WEBP_ACCEPT), &strict) {
        Outcome::Transcoded { ssim, .. } => assert!(ssim.unwrap_or(0.0) >= 0.9999),
        Outcome::Unchanged(skip) => assert!(
            matches!(skip, Skip::NotSmaller | Skip::BelowSsim(_)),
            "{skip}"
        ),
    }
}

#[test]
fn presets_parse_and_display() {
    for p in Preset::ALL {
        assert_eq!(p.to_string().parse::<Preset>().unwrap(), p);
    }
    assert!("medium".parse::<Preset>().is_err());
    assert_eq!(TranscodeConfig::default().preset, Preset::Balanced);
}

#[test]
fn compare_measures_another_encoders_output_as_transcode_measures_its_own() {
    use webpep_optimize::transcode::compare;
    let orig_bytes = photo_jpeg(192, 128);
    let c = cfg(Preset::Aggressive);
    assert_eq!(compare(&orig_bytes, &orig_bytes, &c), Ok(1.0));
    // What transcode claims for its own output is what compare measures of it.
    let Outcome::Transcoded {
        body,
        ssim: Some(claimed),
        ..
    } = transcode(&orig_bytes, Some("image/jpeg"), None, &c)
    else {
        panic!("not transcoded")
    };
    let measured = compare(&orig_bytes, &body, &c).unwrap();
    assert!((measured - claimed).abs() < 1e-9, "{measured} vs {claimed}");
    assert!(measured < 1.0);
    // A broken output is named as the output's fault; a broken original as corrupt.
    match compare(&orig_bytes, b"not an image", &c) {
        Err(Skip::Corrupt(m)) => assert!(m.starts_with("output"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        compare(&orig_bytes[..40], &body, &c),
        Err(Skip::Corrupt(_))
    ));
}
