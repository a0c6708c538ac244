//! Transcoding cost per image: each preset on a generated 512×384 photo-like JPEG, and SSIM
//! alone. Run with `cargo bench -p webpep-optimize --bench transcode`.

#[path = "../tests/transcode_support/mod.rs"]
mod transcode_support;

use criterion::{criterion_group, criterion_main, Criterion};
use webpep_optimize::transcode::{ssim, transcode, Preset, TranscodeConfig};

fn bench(c: &mut Criterion) {
    let photo = transcode_support::photo_jpeg(512, 384);
    for preset in Preset::ALL {
        let cfg = TranscodeConfig::with_preset(preset);
        c.bench_function(&format!("transcode_{preset}_jpeg_512x384"), |b| {
            b.iter(|| transcode(&photo, Some("image/jpeg"), None, &cfg))
        });
    }
    let a = transcode_support::decode(&photo);
    let other = transcode_support::decode(&transcode_support::jpeg_of(&a.to_rgb8(), 50));
    c.bench_function("ssim_512x384", |b| b.iter(|| ssim(&a, &other)));
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
