//! Files a command writes: checked before the work starts, written whole under a
//! temporary name in the same directory and renamed into place — a reader never
//! sees half a file, an interrupted write leaves none, and two runs writing one
//! path never interleave (the last one to finish wins). A path that is there
//! and is no regular file — `/dev/null`, `/dev/stdout`, a FIFO — is written
//! as it is: renaming a file over it would replace the device.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// True when `path` is there and is no regular file (a device, a FIFO): it is
/// written in place.
fn special(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// The name `path` is written under: a temporary one (same directory, same
/// extension, so the format chosen by extension is kept), or `path` itself
/// when it is [`special`].
fn temporary(path: &Path) -> PathBuf {
    if special(path) {
        return path.to_path_buf();
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".flowshift-{}-{name}", std::process::id()))
}

/// Fails now, naming the path, if `path` could not be written later.
pub fn check(path: &Path) -> anyhow::Result<()> {
    if path.is_dir() {
        anyhow::bail!("{} is a directory, not a file", path.display());
    }
    if special(path) {
        // (not opened now: opening a FIFO waits for its reader, and closing
        // it would end what the reader reads)
        let m = std::fs::metadata(path)?;
        if m.permissions().readonly() {
            anyhow::bail!("{} cannot be written", path.display());
        }
        return Ok(());
    }
    let t = temporary(path);
    std::fs::File::create(&t).with_context(|| format!("{} cannot be written", path.display()))?;
    let _ = std::fs::remove_file(&t);
    Ok(())
}

/// Writes `path` through `write` (given the temporary path), then renames it
/// into place; on an error the temporary file is removed.
pub fn atomically<T>(
    path: &Path,
    write: impl FnOnce(&Path) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let t = temporary(path);
    if t == path {
        return write(path).map_err(|e| e.context(format!("writing {}", path.display())));
    }
    match write(&t) {
        Ok(v) => {
            std::fs::rename(&t, path).with_context(|| format!("writing {}", path.display()))?;
            Ok(v)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&t);
            Err(e.context(format!("writing {}", path.display())))
        }
    }
}

/// Writes `value` as pretty JSON to `path`, atomically.
pub fn json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    atomically(path, |t| {
        let text = serde_json::to_string_pretty(value)?;
        std::fs::write(t, text)?;
        Ok(())
    })
}

/// Writes a capture (pcap, or pcapng by extension) to `path`, atomically;
/// returns the packets written.
pub fn capture<B: AsRef<[u8]>>(
    path: &Path,
    packets: impl IntoIterator<Item = (u64, B)>,
) -> anyhow::Result<u64> {
    atomically(path, |t| Ok(trace::write_capture(t, packets)?))
}

/// A capture written while a run goes: forwarded packets are handed to a
/// writer thread through a bounded channel (a core waits when the disk falls
/// behind, so nothing is lost), written under the temporary name and renamed
/// into place by [`finish`](Self::finish). Memory stays flat however long the
/// run; the packets are in the order they left the cores.
pub struct StreamedCapture {
    tx: Option<crossbeam_channel::Sender<(u64, Vec<u8>)>>,
    writer: Option<std::thread::JoinHandle<anyhow::Result<u64>>>,
    tmp: PathBuf,
    path: PathBuf,
}

impl StreamedCapture {
    /// Starts the writer for `path` (pcap, or pcapng by extension).
    pub fn start(path: &Path) -> anyhow::Result<StreamedCapture> {
        let tmp = temporary(path);
        let (tx, rx) = crossbeam_channel::bounded::<(u64, Vec<u8>)>(1 << 16);
        let t = tmp.clone();
        let writer = std::thread::Builder::new()
            .name("output".into())
            .spawn(move || Ok(trace::write_capture(&t, rx.iter())?))?;
        Ok(StreamedCapture {
            tx: Some(tx),
            writer: Some(writer),
            tmp,
            path: path.to_path_buf(),
        })
    }

    /// What the cores call with each forwarded packet.
    pub fn tap(&self) -> runtime::OutputTap {
        let tx = self.tx.clone().expect("running");
        runtime::OutputTap(std::sync::Arc::new(move |ts, frame: &[u8]| {
            // a writer that failed has said why; finish() reports it
            let _ = tx.send((ts, frame.to_vec()));
        }))
    }

    /// Waits for the writer (every tap must be gone), then renames the file
    /// into place; returns the packets written.
    pub fn finish(mut self) -> anyhow::Result<u64> {
        drop(self.tx.take());
        let written = self
            .writer
            .take()
            .expect("finished once")
            .join()
            .map_err(|_| anyhow::anyhow!("the output writer panicked"))?;
        let in_place = self.tmp == self.path;
        match written {
            Ok(n) if in_place => Ok(n),
            Ok(n) => {
                std::fs::rename(&self.tmp, &self.path)
                    .with_context(|| format!("writing {}", self.path.display()))?;
                Ok(n)
            }
            Err(e) => {
                if !in_place {
                    let _ = std::fs::remove_file(&self.tmp);
                }
                Err(e.context(format!("writing {}", self.path.display())))
            }
        }
    }
}

impl Drop for StreamedCapture {
    /// A run that failed leaves no file (not even the temporary one).
    fn drop(&mut self) {
        if let Some(w) = self.writer.take() {
            drop(self.tx.take());
            let _ = w.join();
            if self.tmp != self.path {
                let _ = std::fs::remove_file(&self.tmp);
            }
        }
    }
}
