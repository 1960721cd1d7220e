//! A capture file as a stream of bytes: plain, or compressed with gzip or
//! zstd (told apart by their first bytes, whatever the file's name), so a
//! compressed capture is read as it goes like a plain one — public traces
//! are often shipped compressed, and a replay need not unpack them to disk
//! first. A compressed capture is read again from its first byte by opening
//! it again (its decoder cannot seek).

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use flate2::bufread::MultiGzDecoder;

/// How a capture file is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Not at all: the capture's bytes are the file's.
    None,
    /// gzip (RFC 1952), one member or several.
    Gzip,
    /// zstd (RFC 8878), one frame or several.
    Zstd,
}

impl Compression {
    const GZIP: [u8; 2] = [0x1f, 0x8b];
    const ZSTD: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

    /// The compression whose magic number `head` starts with.
    pub fn of(head: &[u8]) -> Compression {
        if head.starts_with(&Self::ZSTD) {
            Compression::Zstd
        } else if head.starts_with(&Self::GZIP) {
            Compression::Gzip
        } else {
            Compression::None
        }
    }

    /// Its name in messages ("" for none).
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }
}

enum Inner {
    Plain(File),
    Gzip(Box<MultiGzDecoder<BufReader<File>>>),
    Zstd(Box<zstd::stream::read::Decoder<'static, BufReader<File>>>),
}

/// A capture file's bytes, decompressed when it is compressed.
pub struct CaptureFile {
    path: PathBuf,
    compression: Compression,
    inner: Inner,
    /// Decompressed bytes handed out so far (this pass).
    read: u64,
}

impl CaptureFile {
    /// Opens `path` and looks at its first bytes to tell its compression.
    pub fn open(path: &Path) -> io::Result<CaptureFile> {
        let mut f = File::open(path)?;
        let mut head = [0u8; 4];
        let mut got = 0;
        while got < head.len() {
            match f.read(&mut head[got..])? {
                0 => break,
                n => got += n,
            }
        }
        f.seek(SeekFrom::Start(0))?;
        let compression = Compression::of(&head[..got]);
        Ok(CaptureFile {
            path: path.to_path_buf(),
            compression,
            inner: Self::decoder(f, compression)?,
            read: 0,
        })
    }

    fn decoder(f: File, compression: Compression) -> io::Result<Inner> {
        Ok(match compression {
            Compression::None => Inner::Plain(f),
            Compression::Gzip => Inner::Gzip(Box::new(MultiGzDecoder::new(
                BufReader::with_capacity(1 << 20, f),
            ))),
            Compression::Zstd => Inner::Zstd(Box::new(zstd::stream::read::Decoder::with_buffer(
                BufReader::with_capacity(1 << 20, f),
            )?)),
        })
    }

    /// How the file is compressed.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Back to the capture's first byte.
    pub fn rewind(&mut self) -> io::Result<()> {
        self.read = 0;
        match &mut self.inner {
            Inner::Plain(f) => f.seek(SeekFrom::Start(0)).map(drop),
            _ => {
                let f = File::open(&self.path)?;
                self.inner = Self::decoder(f, self.compression)?;
                Ok(())
            }
        }
    }

    /// The capture's length in bytes: a plain file's length, a compressed
    /// one's counted by decompressing it through once (gzip's trailer has
    /// the length modulo 4 GiB of its last member only, and a zstd frame
    /// need not record its size).
    pub fn len(path: &Path) -> io::Result<u64> {
        let mut f = CaptureFile::open(path)?;
        if f.compression == Compression::None {
            return std::fs::metadata(path).map(|m| m.len());
        }
        io::copy(&mut f, &mut io::sink())
    }
}

impl Read for CaptureFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let r = match &mut self.inner {
            Inner::Plain(f) => f.read(buf),
            Inner::Gzip(d) => d.read(buf),
            Inner::Zstd(d) => d.read(buf),
        };
        match r {
            Ok(n) => {
                self.read += n as u64;
                Ok(n)
            }
            // a compressed file that is corrupt or cut short: say which
            // compression and where in the capture it broke
            Err(e) if self.compression != Compression::None => Err(io::Error::new(
                e.kind(),
                format!(
                    "its {} compression broke after {} bytes of capture: {e}",
                    self.compression.name(),
                    self.read
                ),
            )),
            Err(e) => Err(e),
        }
    }
}
