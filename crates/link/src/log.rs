//! `--log FILE`: CSV logs of the emulated link, for plots.
//!
//! Two formats, both with times and delays UNSCALED (what the real link would show: emulator
//! time × time scale):
//! - per packet: `time_ms,direction,event,bytes,queue_bytes,delay_ms`, one row per model event
//!   (`+` arrival, `d` queue drop, `l` loss, `-` delivery); `queue_bytes` is the queue after the
//!   event; `delay_ms` is the packet's time in the link so far (0 for arrivals and drops);
//! - per interval: `t_ms,down_bytes,up_bytes,down_drops,up_drops,down_queue_delay_ms_mean,
//!   up_queue_delay_ms_mean`, one row per interval (starting at `t_ms`), every interval
//!   written, empty ones included; bytes are delivered bytes, drops count queue drops and
//!   losses, the queue delay is the mean wait before service of the packets whose service
//!   ended in the interval (empty when there were none).

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use webpep_link_model::{Event, EventKind, Side, SimTime};

use crate::{Error, Result};

/// What to log.
#[derive(Clone, Debug, PartialEq)]
pub enum LogFormat {
    /// One row per packet event.
    Packets,
    /// One row per interval of `interval_ms` (unscaled milliseconds).
    Interval { interval_ms: f64 },
}

/// Where and what to log.
#[derive(Clone, Debug, PartialEq)]
pub struct LogOptions {
    pub path: PathBuf,
    pub format: LogFormat,
}

impl LogOptions {
    pub fn packets(path: impl Into<PathBuf>) -> Self {
        LogOptions {
            path: path.into(),
            format: LogFormat::Packets,
        }
    }

    pub fn interval(path: impl Into<PathBuf>, interval_ms: f64) -> Self {
        LogOptions {
            path: path.into(),
            format: LogFormat::Interval { interval_ms },
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Acc {
    bytes: u64,
    drops: u64,
    delay_sum_us: u128,
    delay_n: u64,
}

#[derive(Debug)]
enum State {
    Packets,
    Interval {
        /// The interval in emulator (scaled) microseconds.
        sim_interval_us: f64,
        interval_ms: f64,
        index: u64,
        acc: [Acc; 2],
    },
}

/// A CSV log being written (by the pump thread).
#[derive(Debug)]
pub struct LinkLog {
    out: BufWriter<File>,
    path: PathBuf,
    time_scale: f64,
    state: State,
    line: String,
    error: Option<std::io::Error>,
}

fn slot(side: Side) -> usize {
    match side {
        Side::Down => 0,
        Side::Up => 1,
    }
}

fn side_name(side: Side) -> &'static str {
    match side {
        Side::Down => "down",
        Side::Up => "up",
    }
}

impl LinkLog {
    /// Creates (truncates) the file and writes the header.
    pub fn create(options: &LogOptions, time_scale: f64) -> Result<LinkLog> {
        if !(time_scale.is_finite() && time_scale > 0.0) {
            return Err(Error::Other(format!(
                "invalid time scale {time_scale} for the log (must be > 0)"
            )));
        }
        let state = match options.format {
            LogFormat::Packets => State::Packets,
            LogFormat::Interval { interval_ms } => {
                if !(interval_ms.is_finite() && interval_ms > 0.0) {
                    return Err(Error::Other(format!(
                        "invalid log interval {interval_ms} ms (must be > 0)"
                    )));
                }
                State::Interval {
                    sim_interval_us: interval_ms * 1000.0 / time_scale,
                    interval_ms,
                    index: 0,
                    acc: [Acc::default(); 2],
                }
            }
        };
        let file = File::create(&options.path)
            .map_err(|e| Error::io(format!("creating log file {}", options.path.display()), e))?;
        let mut log = LinkLog {
            out: BufWriter::with_capacity(64 * 1024, file),
            path: options.path.clone(),
            time_scale,
            state,
            line: String::with_capacity(128),
            error: None,
        };
        let header = match log.state {
            State::Packets => "time_ms,direction,event,bytes,queue_bytes,delay_ms\n",
            State::Interval { .. } => {
                "t_ms,down_bytes,up_bytes,down_drops,up_drops,\
                 down_queue_delay_ms_mean,up_queue_delay_ms_mean\n"
            }
        };
        log.write_line(header.to_string());
        log.check()?;
        Ok(log)
    }

    fn check(&mut self) -> Result<()> {
        match self.error.take() {
            Some(e) => Err(Error::io(
                format!("writing log file {}", self.path.display()),
                e,
            )),
            None => Ok(()),
        }
    }

    fn write_line(&mut self, line: String) {
        if self.error.is_none() {
            if let Err(e) = self.out.write_all(line.as_bytes()) {
                self.error = Some(e);
            }
        }
        self.line = line;
        self.line.clear();
    }

    fn unscaled_ms(&self, sim_us: u64) -> f64 {
        sim_us as f64 * self.time_scale / 1000.0
    }

    /// Records the model events of one pump iteration (each list in time order).
    pub fn events(&mut self, down: &[Event], up: &[Event]) {
        // Merge the two directions by time.
        let (mut i, mut j) = (0, 0);
        while i < down.len() || j < up.len() {
            let take_down = match (down.get(i), up.get(j)) {
                (Some(d), Some(u)) => d.time <= u.time,
                (Some(_), None) => true,
                _ => false,
            };
            if take_down {
                self.event(Side::Down, &down[i]);
                i += 1;
            } else {
                self.event(Side::Up, &up[j]);
                j += 1;
            }
        }
    }

    fn event(&mut self, side: Side, ev: &Event) {
        match self.state {
            State::Packets => {
                let mut line = std::mem::take(&mut self.line);
                let _ = writeln!(
                    line,
                    "{:.3},{},{},{},{},{:.3}",
                    self.unscaled_ms(ev.time.as_micros()),
                    side_name(side),
                    ev.kind,
                    ev.bytes,
                    ev.queue_bytes,
                    self.unscaled_ms(ev.delay_us),
                );
                self.write_line(line);
            }
            State::Interval { .. } => {
                self.advance(ev.time);
                if let State::Interval { acc, .. } = &mut self.state {
                    let a = &mut acc[slot(side)];
                    match ev.kind {
                        EventKind::Delivery => a.bytes += ev.bytes as u64,
                        EventKind::Drop | EventKind::Loss => a.drops += 1,
                        EventKind::Arrival => {}
                    }
                }
            }
        }
    }

    /// Records queue-delay samples (emulator microseconds) taken by `now`.
    pub fn queue_delays(&mut self, now: SimTime, side: Side, samples_us: &[u64]) {
        if samples_us.is_empty() || matches!(self.state, State::Packets) {
            return;
        }
        self.advance(now);
        if let State::Interval { acc, .. } = &mut self.state {
            let a = &mut acc[slot(side)];
            a.delay_n += samples_us.len() as u64;
            a.delay_sum_us += samples_us.iter().map(|&s| s as u128).sum::<u128>();
        }
    }

    /// Writes the rows of the intervals that ended by `now`.
    pub fn advance(&mut self, now: SimTime) {
        let State::Interval {
            sim_interval_us, ..
        } = self.state
        else {
            return;
        };
        let target = (now.as_micros() as f64 / sim_interval_us).floor() as u64;
        while let State::Interval { index, .. } = self.state {
            if index >= target {
                break;
            }
            self.emit_interval();
        }
    }

    /// Writes the current interval's row and starts the next one.
    fn emit_interval(&mut self) {
        let time_scale = self.time_scale;
        let State::Interval {
            interval_ms,
            index,
            acc,
            ..
        } = &mut self.state
        else {
            return;
        };
        let t_ms = *index as f64 * *interval_ms;
        let [d, u] = std::mem::take(acc);
        *index += 1;
        let mean = |a: &Acc| -> String {
            if a.delay_n == 0 {
                String::new()
            } else {
                format!(
                    "{:.3}",
                    a.delay_sum_us as f64 / a.delay_n as f64 * time_scale / 1000.0
                )
            }
        };
        let mut line = std::mem::take(&mut self.line);
        let _ = writeln!(
            line,
            "{:.3},{},{},{},{},{},{}",
            t_ms,
            d.bytes,
            u.bytes,
            d.drops,
            u.drops,
            mean(&d),
            mean(&u)
        );
        self.write_line(line);
    }

    /// Writes what is pending (the current, partial interval included) and flushes the file.
    pub fn finish(mut self, now: SimTime) -> Result<()> {
        if matches!(self.state, State::Interval { .. }) {
            self.advance(now);
            self.emit_interval();
        }
        if self.error.is_none() {
            if let Err(e) = self.out.flush() {
                self.error = Some(e);
            }
        }
        self.check()
    }
}
