//! Cache-hit throughput with several threads sharing one cache (4 KB bodies, in-memory copies),
//! as the proxy's connection tasks would: `cargo run --release -p webpep-cache --example
//! hit_throughput -- [threads] [seconds]`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::{Request, Response};
use webpep_cache::{CacheConfig, HttpCache, Lookup};

const OBJECTS: usize = 1000;

fn uri(i: usize) -> String {
    format!("http://bench{}.example/static/object-{i}.js", i % 8)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().map_or(Ok(2), |a| a.parse())?;
    let seconds: u64 = args.next().map_or(Ok(3), |a| a.parse())?;
    let dir = tempfile::tempdir()?;
    let cache = Arc::new(HttpCache::open(CacheConfig::new(dir.path()))?);
    let now = SystemTime::now();
    let resp = Response::builder()
        .status(200)
        .header("cache-control", "max-age=86400")
        .header("content-type", "application/javascript")
        .body(())?
        .into_parts()
        .0;
    for i in 0..OBJECTS {
        let req = Request::get(uri(i)).body(())?.into_parts().0;
        let mut body = vec![b'x'; 4096];
        body[..8].copy_from_slice(&(i as u64).to_le_bytes());
        cache.store(&req, &resp, &body, "", now, now)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..threads)
        .map(|tid| {
            let (cache, stop, total) = (cache.clone(), stop.clone(), total.clone());
            std::thread::spawn(move || {
                let requests: Vec<_> = (0..OBJECTS)
                    .filter_map(|i| Request::get(uri(i)).body(()).ok())
                    .map(|r| r.into_parts().0)
                    .collect();
                let mut n = 0u64;
                let mut i = tid * 97;
                while !stop.load(Ordering::Relaxed) {
                    i = (i + 1) % requests.len();
                    if let Lookup::Fresh(r) = cache.lookup(&requests[i], "", now) {
                        n += r.body.len() as u64 / 4096;
                    }
                }
                total.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let hits = total.load(Ordering::Relaxed);
    println!(
        "threads={threads} hits={hits} seconds={elapsed:.2} lookups_per_s={:.0}",
        hits as f64 / elapsed
    );
    Ok(())
}
