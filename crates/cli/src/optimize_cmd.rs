//! `webpep optimize images`: runs the image transcoding presets (crate `webpep-optimize`,
//! module `transcode`) over image files, a directory tree, a webpep corpus or a WARC file, and
//! reports savings and SSIM per preset and input format.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use webpep_lab::peer_images::Ziproxy;
use webpep_optimize::transcode::{self, Outcome, Preset, Skip, TranscodeConfig};

use crate::BadInput;

/// Flags of `webpep optimize`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: OptimizeCommand,
}

#[derive(clap::Subcommand, Debug)]
enum OptimizeCommand {
    /// Transcode images with each preset and report bytes saved and SSIM per image format
    Images(ImagesArgs),
}

#[derive(clap::Args, Debug)]
struct ImagesArgs {
    /// Image files, directories (searched recursively for .jpg .jpeg .png .gif .webp), webpep
    /// corpus directories (with manifest.json) or WARC files (.warc, .warc.gz)
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Preset to run: lossless, balanced, aggressive, or all
    #[arg(long, default_value = "all", value_name = "PRESET")]
    preset: String,
    /// Print JSON instead of tables
    #[arg(long)]
    json: bool,
    /// Also list every image: its format, bytes in and out, SSIM, time, and what it became
    /// or why it was kept (in JSON: an `each` array)
    #[arg(long)]
    each: bool,
    /// The client's Accept header; WebP is produced only when it lists image/webp
    /// [default: none, as a 2003 browser]
    #[arg(long, value_name = "ACCEPT")]
    accept: Option<String>,
    /// Also run every image through a peer proxy (`ziproxy`: Debian's Ziproxy, stock
    /// settings, in inetd mode behind a loopback origin) and report its bytes and SSIM
    #[arg(long, value_name = "PEER")]
    peer: Option<String>,
}

/// Runs `webpep optimize`.
pub fn run(args: Args) -> anyhow::Result<u8> {
    match args.command {
        OptimizeCommand::Images(a) => images(a),
    }
}

/// One input image.
struct InputImage {
    /// File path or URL, for messages.
    name: String,
    body: Vec<u8>,
    content_type: Option<String>,
}

/// Totals for one preset and one input format.
#[derive(Default, Debug)]
struct Row {
    images: usize,
    input_bytes: u64,
    output_bytes: u64,
    transcoded: usize,
    kept: usize,
    /// Output content types of the transcoded images.
    outputs: BTreeMap<String, usize>,
    /// Why originals were kept.
    kept_reasons: BTreeMap<String, usize>,
    ssim_sum: f64,
    ssim_min: Option<f64>,
    millis: f64,
}

impl Row {
    fn add(&mut self, input_len: usize, outcome: &Outcome, millis: f64) {
        match outcome {
            Outcome::Transcoded {
                body,
                content_type,
                ssim,
            } => {
                self.images += 1;
                self.input_bytes += input_len as u64;
                self.millis += millis;
                self.transcoded += 1;
                self.output_bytes += body.len() as u64;
                *self.outputs.entry((*content_type).to_string()).or_default() += 1;
                let s = ssim.unwrap_or(1.0);
                self.ssim_sum += s;
                self.ssim_min = Some(self.ssim_min.map_or(s, |m| m.min(s)));
            }
            Outcome::Unchanged(skip) => self.keep(input_len, input_len, skip.label(), millis),
        }
    }

    /// Records an image some other encoder left as it was (or failed on), and why.
    fn keep(&mut self, input_len: usize, output_len: usize, why: &str, millis: f64) {
        self.images += 1;
        self.kept += 1;
        self.input_bytes += input_len as u64;
        self.output_bytes += output_len as u64;
        self.millis += millis;
        *self.kept_reasons.entry(why.to_string()).or_default() += 1;
    }

    fn merge(&mut self, other: &Row) {
        self.images += other.images;
        self.input_bytes += other.input_bytes;
        self.output_bytes += other.output_bytes;
        self.transcoded += other.transcoded;
        self.kept += other.kept;
        for (k, v) in &other.outputs {
            *self.outputs.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &other.kept_reasons {
            *self.kept_reasons.entry(k.clone()).or_default() += v;
        }
        self.ssim_sum += other.ssim_sum;
        self.ssim_min = match (self.ssim_min, other.ssim_min) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.millis += other.millis;
    }

    fn saving_pct(&self) -> f64 {
        if self.input_bytes == 0 {
            0.0
        } else {
            100.0 * (1.0 - self.output_bytes as f64 / self.input_bytes as f64)
        }
    }

    /// Mean SSIM over transcoded images (kept originals are identical and not counted).
    fn ssim_mean(&self) -> Option<f64> {
        (self.transcoded > 0).then(|| self.ssim_sum / self.transcoded as f64)
    }
}

/// What became of one image under one preset (or peer), for `--each`.
#[derive(Debug)]
struct ImageResult {
    image: String,
    format: &'static str,
    input_bytes: usize,
    output_bytes: usize,
    /// The output's content type, when transcoded.
    output: Option<String>,
    /// Why the original was kept, when it was.
    kept: Option<String>,
    ssim: Option<f64>,
    millis: f64,
}

/// The per-format rows of one preset (or peer) and its per-image results.
#[derive(Default)]
struct Tally {
    rows: BTreeMap<String, Row>,
    each: Vec<ImageResult>,
}

impl Tally {
    fn add(&mut self, img: &InputImage, outcome: &Outcome, millis: f64) {
        let (body, content_type, ssim) = match outcome {
            Outcome::Unchanged(skip) => {
                return self.keep(img, img.body.len(), skip.label(), millis)
            }
            Outcome::Transcoded {
                body,
                content_type,
                ssim,
            } => (body, content_type, ssim),
        };
        let format = format_of(&img.body);
        self.rows
            .entry(format.to_string())
            .or_default()
            .add(img.body.len(), outcome, millis);
        self.each.push(ImageResult {
            image: img.name.clone(),
            format,
            input_bytes: img.body.len(),
            output_bytes: body.len(),
            output: Some(content_type.to_string()),
            kept: None,
            ssim: Some(ssim.unwrap_or(1.0)),
            millis,
        });
    }

    fn keep(&mut self, img: &InputImage, output_len: usize, why: &str, millis: f64) {
        let format = format_of(&img.body);
        self.rows.entry(format.to_string()).or_default().keep(
            img.body.len(),
            output_len,
            why,
            millis,
        );
        self.each.push(ImageResult {
            image: img.name.clone(),
            format,
            input_bytes: img.body.len(),
            output_bytes: output_len,
            output: None,
            kept: Some(why.to_string()),
            ssim: None,
            millis,
        });
    }

    /// The rows with the "all" row added: the sum of the per-format rows.
    fn with_total(mut self) -> Tally {
        let mut all = Row::default();
        for r in self.rows.values() {
            all.merge(r);
        }
        self.rows.insert("all".into(), all);
        self
    }
}

fn parse_presets(s: &str) -> Result<Vec<Preset>, BadInput> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(Preset::ALL.to_vec());
    }
    s.parse::<Preset>()
        .map(|p| vec![p])
        .map_err(|e| BadInput(format!("--preset: {e} or all")))
}

/// The format label of an image body ("other" for bodies that claim to be images but are not).
fn format_of(body: &[u8]) -> &'static str {
    transcode::sniff(body).map_or("other", |f| f.name())
}

/// The rows of one preset: every image transcoded as the edge proxy would.
fn preset_rows(preset: Preset, inputs: &[InputImage], accept: Option<&str>) -> Tally {
    let cfg = TranscodeConfig::with_preset(preset);
    let mut tally = Tally::default();
    for img in inputs {
        let started = Instant::now();
        let outcome = transcode::transcode(&img.body, img.content_type.as_deref(), accept, &cfg);
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        if let Outcome::Unchanged(Skip::Corrupt(m)) = &outcome {
            tracing::info!(image = %img.name, "corrupt: {m}");
        }
        tally.add(img, &outcome, ms);
    }
    tally.with_total()
}

/// The rows of a peer proxy: every image fetched through it, its output measured against the
/// original as the presets' are.
fn peer_rows(ziproxy: &Ziproxy, inputs: &[InputImage]) -> Tally {
    // The measuring limits are the lossless preset's (any preset's: they are shared).
    let cfg = TranscodeConfig::with_preset(Preset::Lossless);
    let mut tally = Tally::default();
    for img in inputs {
        let content_type = img
            .content_type
            .clone()
            .or_else(|| transcode::sniff(&img.body).map(|f| f.content_type().to_string()))
            .unwrap_or_else(|| "application/octet-stream".into());
        let started = Instant::now();
        let got = ziproxy.image(&img.body, &content_type);
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let n = img.body.len();
        match got {
            Err(e) => {
                tracing::warn!(image = %img.name, "ziproxy: {e}");
                tally.keep(img, n, "peer-failed", ms);
            }
            Ok(r) if r.status != 200 => tally.keep(img, n, &format!("status-{}", r.status), ms),
            Ok(r) if r.body == img.body => tally.keep(img, n, "unchanged", ms),
            Ok(r) => match transcode::compare(&img.body, &r.body, &cfg) {
                Ok(ssim) => {
                    let content_type =
                        transcode::sniff(&r.body).map_or("other", |f| f.content_type());
                    let out = Outcome::Transcoded {
                        body: r.body,
                        content_type,
                        ssim: Some(ssim),
                    };
                    tally.add(img, &out, ms);
                }
                Err(skip) => {
                    tracing::info!(image = %img.name, "ziproxy's output not measured: {skip}");
                    let why = format!("unmeasured-{}", skip.label());
                    tally.keep(img, r.body.len(), &why, ms);
                }
            },
        }
    }
    tally.with_total()
}

/// The peer `--peer` names, ready to run (checked before any work starts).
fn open_peer(peer: &str) -> anyhow::Result<Ziproxy> {
    if peer != "ziproxy" {
        return Err(BadInput(format!("--peer: unknown peer {peer:?} (ziproxy)")).into());
    }
    Ok(Ziproxy::new().map_err(|e| BadInput(e.to_string()))?)
}

fn images(a: ImagesArgs) -> anyhow::Result<u8> {
    let presets = parse_presets(&a.preset)?;
    let peer = a.peer.as_deref().map(open_peer).transpose()?;
    let inputs = collect_inputs(&a.paths)?;
    if inputs.is_empty() {
        return Err(
            BadInput("no JPEG, PNG, GIF or WebP images found in the given paths".into()).into(),
        );
    }
    // preset (or peer) -> format -> row, and the per-image results.
    let mut table: Vec<(String, Tally)> = presets
        .iter()
        .map(|&p| (p.to_string(), preset_rows(p, &inputs, a.accept.as_deref())))
        .collect();
    if let (Some(name), Some(ziproxy)) = (&a.peer, &peer) {
        table.push((name.clone(), peer_rows(ziproxy, &inputs)));
    }
    if a.json {
        let out: Vec<serde_json::Value> = table
            .iter()
            .flat_map(|(preset, tally)| {
                tally.rows.iter().map(move |(format, r)| {
                    serde_json::json!({
                        "preset": preset,
                        "format": format,
                        "images": r.images,
                        "input_bytes": r.input_bytes,
                        "output_bytes": r.output_bytes,
                        "saving_pct": r.saving_pct(),
                        "ssim_mean": r.ssim_mean(),
                        "ssim_min": r.ssim_min,
                        "transcoded": r.transcoded,
                        "kept": r.kept,
                        "outputs": r.outputs,
                        "kept_reasons": r.kept_reasons,
                        "millis": r.millis,
                    })
                })
            })
            .collect();
        let mut doc = serde_json::json!({
            "accept": a.accept,
            "images": inputs.len(),
            "rows": out,
        });
        if a.each {
            let each: Vec<serde_json::Value> = table
                .iter()
                .flat_map(|(preset, tally)| {
                    tally.each.iter().map(move |e| {
                        serde_json::json!({
                            "preset": preset,
                            "image": e.image,
                            "format": e.format,
                            "input_bytes": e.input_bytes,
                            "output_bytes": e.output_bytes,
                            "output": e.output,
                            "kept": e.kept,
                            "ssim": e.ssim,
                            "millis": e.millis,
                        })
                    })
                })
                .collect();
            doc["each"] = serde_json::Value::Array(each);
        }
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!(
            "{} images; Accept: {}; SSIM over transcoded images (kept ones are identical)",
            inputs.len(),
            a.accept.as_deref().unwrap_or("(none)")
        );
        println!(
            "{:<10} {:<6} {:>6} {:>11} {:>11} {:>7} {:>7} {:>7} {:>6} {:>5} {:>8}  outputs / kept because",
            "preset", "format", "images", "in bytes", "out bytes", "saving", "mean", "min", "trans", "kept", "ms"
        );
        for (preset, tally) in &table {
            for (format, r) in &tally.rows {
                let fmt_ssim = |v: Option<f64>| v.map_or("-".to_string(), |s| format!("{s:.4}"));
                let detail: Vec<String> = r
                    .outputs
                    .iter()
                    .map(|(k, v)| format!("{}:{v}", k.trim_start_matches("image/")))
                    .chain(r.kept_reasons.iter().map(|(k, v)| format!("{k}:{v}")))
                    .collect();
                println!(
                    "{:<10} {:<6} {:>6} {:>11} {:>11} {:>6.1}% {:>7} {:>7} {:>6} {:>5} {:>8.0}  {}",
                    preset,
                    format,
                    r.images,
                    r.input_bytes,
                    r.output_bytes,
                    r.saving_pct(),
                    fmt_ssim(r.ssim_mean()),
                    fmt_ssim(r.ssim_min),
                    r.transcoded,
                    r.kept,
                    r.millis,
                    detail.join(" ")
                );
            }
        }
        if a.each {
            print_each(&table);
        }
    }
    Ok(0)
}

/// `--each` as a table: one line per image and preset (or peer).
fn print_each(table: &[(String, Tally)]) {
    println!(
        "\n{:<10} {:<6} {:>11} {:>11} {:>7} {:>7} {:>8}  {:<16} image",
        "preset", "format", "in bytes", "out bytes", "saving", "ssim", "ms", "output / kept"
    );
    for (preset, tally) in table {
        for e in &tally.each {
            let saving = if e.input_bytes == 0 {
                0.0
            } else {
                100.0 * (1.0 - e.output_bytes as f64 / e.input_bytes as f64)
            };
            let what = match (&e.output, &e.kept) {
                (Some(o), _) => o.trim_start_matches("image/").to_string(),
                (None, Some(k)) => format!("kept: {k}"),
                (None, None) => "-".to_string(),
            };
            println!(
                "{:<10} {:<6} {:>11} {:>11} {:>6.1}% {:>7} {:>8.0}  {:<16} {}",
                preset,
                e.format,
                e.input_bytes,
                e.output_bytes,
                saving,
                e.ssim.map_or("-".to_string(), |s| format!("{s:.4}")),
                e.millis,
                what,
                e.image
            );
        }
    }
}

fn is_image_file(p: &Path) -> bool {
    let ext = p
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    matches!(
        ext.as_deref(),
        Some("jpg" | "jpeg" | "png" | "gif" | "webp")
    )
}

fn is_warc(p: &Path) -> bool {
    let name = p
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    name.ends_with(".warc") || name.ends_with(".warc.gz")
}

/// Reads every input image, each distinct body once (corpora repeat images across pages).
fn collect_inputs(paths: &[PathBuf]) -> anyhow::Result<Vec<InputImage>> {
    let mut out = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut push = |img: InputImage, out: &mut Vec<InputImage>| {
        if seen.insert(webpep_corpus::body_hash(&img.body)) {
            out.push(img);
        }
    };
    for path in paths {
        let meta =
            std::fs::metadata(path).map_err(|e| BadInput(format!("{}: {e}", path.display())))?;
        if meta.is_dir() && path.join("manifest.json").is_file() {
            let corpus = webpep_corpus::Corpus::open(path)
                .map_err(|e| BadInput(format!("{}: {e}", path.display())))?;
            for img in corpus_images(&corpus)? {
                push(img, &mut out);
            }
        } else if meta.is_dir() {
            let mut files = Vec::new();
            walk(path, &mut files)?;
            files.sort();
            for f in files {
                let body = std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?;
                push(
                    InputImage {
                        name: f.display().to_string(),
                        body,
                        content_type: None,
                    },
                    &mut out,
                );
            }
        } else if is_warc(path) {
            for img in warc_images(path)? {
                push(img, &mut out);
            }
        } else {
            let body =
                std::fs::read(path).map_err(|e| BadInput(format!("{}: {e}", path.display())))?;
            push(
                InputImage {
                    name: path.display().to_string(),
                    body,
                    content_type: None,
                },
                &mut out,
            );
        }
    }
    Ok(out)
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let p = entry.path();
        let ft = entry.file_type()?;
        if ft.is_dir() {
            walk(&p, files)?;
        } else if ft.is_file() && is_image_file(&p) {
            files.push(p);
        }
    }
    Ok(())
}

/// Every version of every object whose content type is an image, or whose bytes sniff as one.
fn corpus_images(corpus: &webpep_corpus::Corpus) -> anyhow::Result<Vec<InputImage>> {
    let mut out = Vec::new();
    let mut hashes: HashSet<&str> = HashSet::new();
    for page in &corpus.manifest.pages {
        for obj in &page.objects {
            let typed_image = obj.content_type.to_ascii_lowercase().starts_with("image/");
            for v in &obj.versions {
                if !hashes.insert(v.body.as_str()) {
                    continue;
                }
                let body = corpus
                    .body(&v.body)
                    .with_context(|| format!("body of {}", obj.url))?;
                if typed_image || transcode::sniff(&body).is_some() {
                    out.push(InputImage {
                        name: obj.url.clone(),
                        body,
                        content_type: Some(obj.content_type.clone()),
                    });
                }
            }
        }
    }
    Ok(out)
}

/// Imports a WARC into a temporary corpus (removed afterwards) and takes its images.
fn warc_images(path: &Path) -> anyhow::Result<Vec<InputImage>> {
    let tmp = std::env::temp_dir().join(format!("webpep-optimize-warc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let result = webpep_corpus::import::import_warc(path, &tmp, "warc-images")
        .map_err(|e| anyhow::Error::from(BadInput(format!("{}: {e}", path.display()))))
        .and_then(|c| corpus_images(&c));
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(paths: &[&str], preset: &str) -> Args {
        Args {
            command: OptimizeCommand::Images(ImagesArgs {
                paths: paths.iter().map(PathBuf::from).collect(),
                preset: preset.into(),
                json: false,
                each: false,
                accept: None,
                peer: None,
            }),
        }
    }

    fn is_bad_input(r: anyhow::Result<u8>) -> Option<String> {
        r.err()
            .and_then(|e| e.downcast_ref::<BadInput>().map(|b| b.0.clone()))
    }

    #[test]
    fn missing_path_is_bad_input() {
        let msg =
            is_bad_input(run(args(&["/nonexistent/webpep/images"], "all"))).expect("bad input");
        assert!(msg.contains("/nonexistent/webpep/images"), "{msg}");
    }

    #[test]
    fn unknown_preset_is_bad_input() {
        let msg = is_bad_input(run(args(&["."], "medium"))).expect("bad input");
        assert!(msg.contains("medium"), "{msg}");
    }

    #[test]
    fn unknown_peer_is_bad_input_before_any_work() {
        let mut a = args(&["/nonexistent"], "all");
        let OptimizeCommand::Images(i) = &mut a.command;
        i.peer = Some("squid".into());
        // The peer is checked first: the missing path is not what is reported.
        let msg = is_bad_input(run(a)).expect("bad input");
        assert!(msg.contains("--peer") && msg.contains("squid"), "{msg}");
    }

    #[test]
    fn a_directory_without_images_is_bad_input() {
        let dir =
            std::env::temp_dir().join(format!("webpep-optimize-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("notes.txt"), b"no images here").unwrap();
        let r = run(args(&[dir.to_str().unwrap()], "balanced"));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(is_bad_input(r).is_some());
    }

    #[test]
    fn each_image_is_listed_beside_the_rows() {
        let img = |name: &str, body: Vec<u8>| InputImage {
            name: name.into(),
            body,
            content_type: None,
        };
        // A real PNG graphic and bytes that only claim to be a JPEG.
        let png = webpep_corpus::images::fit(webpep_corpus::images::ImageKind::Png, 3, 600)
            .unwrap()
            .bytes;
        let inputs = [
            img("a.png", png.clone()),
            img("b.jpg", b"\xff\xd8\xff\xe0 not really".to_vec()),
        ];
        let t = preset_rows(Preset::Balanced, &inputs, None);
        assert_eq!(t.each.len(), 2);
        let a = &t.each[0];
        assert_eq!(
            (a.image.as_str(), a.format, a.input_bytes),
            ("a.png", "png", png.len())
        );
        // Either transcoded (with an output type and SSIM) or kept (with a reason).
        assert!(a.output.is_some() == a.ssim.is_some() && a.output.is_some() != a.kept.is_some());
        let b = &t.each[1];
        assert_eq!((b.format, b.output_bytes), ("jpeg", b.input_bytes));
        assert_eq!(b.kept.as_deref(), Some("corrupt"));
        // The per-image results add up to the "all" row.
        let all = &t.rows["all"];
        let out: usize = t.each.iter().map(|e| e.output_bytes).sum();
        assert_eq!((all.images, all.output_bytes), (2, out as u64));
    }

    #[test]
    fn rows_add_up() {
        let mut r = Row::default();
        r.add(
            1000,
            &Outcome::Transcoded {
                body: vec![0; 400],
                content_type: "image/jpeg",
                ssim: Some(0.96),
            },
            1.0,
        );
        r.add(500, &Outcome::Unchanged(Skip::NotSmaller), 1.0);
        assert_eq!((r.images, r.input_bytes, r.output_bytes), (2, 1500, 900));
        assert!((r.saving_pct() - 40.0).abs() < 1e-9);
        assert_eq!(r.ssim_mean(), Some(0.96));
        assert_eq!(r.kept_reasons.get("not-smaller"), Some(&1));
    }
}
