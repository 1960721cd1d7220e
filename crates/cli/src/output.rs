//! Files a command writes: checked before the work starts, written whole under a
//! temporary name in the same directory and renamed into place — a reader never
//! sees half a file, an interrupted write leaves none, and two runs writing one
//! path never interleave (the last one to finish wins).

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The temporary name `path` is written under (same directory, same extension,
/// so the format chosen by extension is kept).
fn temporary(path: &Path) -> PathBuf {
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
