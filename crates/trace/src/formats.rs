//! What both capture formats share: the largest record read, the errors
//! that name the byte offset of a problem, a writer that counts.

use std::io::Write;
use std::path::{Path, PathBuf};

use pcap_file::DataLink;

/// Largest record accepted when the file's snaplen is 0 or absurd (256 KiB, as libpcap).
pub const MAX_RECORD_LEN: u32 = 262_144;

/// Why a pcap file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PcapReadError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file ends in the middle of a header or a record.
    #[error("{path}: truncated at byte offset {offset}: {what} needs {need} bytes, {have} left")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Where the incomplete part starts.
        offset: u64,
        /// What was being read.
        what: &'static str,
        /// Bytes it needs.
        need: u64,
        /// Bytes left in the file.
        have: u64,
    },
    /// A header or record field is impossible.
    #[error("{path}: corrupt at byte offset {offset}: {what}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the bad header or record starts.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// A link type other than Ethernet.
    #[error("{path}: link type {linktype:?} is not supported (flowshift reads Ethernet captures)")]
    LinkType {
        /// The file.
        path: PathBuf,
        /// The file's link type.
        linktype: DataLink,
    },
}

/// A writer that counts the packets it was given.
pub struct Counted<W> {
    inner: W,
    /// Packets written.
    pub count: u64,
}

impl<W: Write> Counted<W> {
    pub(crate) fn new(inner: W, count: u64) -> Counted<W> {
        Counted { inner, count }
    }

    pub(crate) fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }

    /// The writer.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

/// A read error before the path is attached.
#[derive(Debug)]
pub enum ParseError {
    /// See [`PcapReadError::Io`].
    Io(std::io::Error),
    /// See [`PcapReadError::Truncated`].
    Truncated(u64, &'static str, u64, u64),
    /// See [`PcapReadError::Corrupt`].
    Corrupt(u64, String),
    /// See [`PcapReadError::LinkType`].
    LinkType(DataLink),
}

impl ParseError {
    pub(crate) fn at(self, path: &Path) -> PcapReadError {
        let path = path.to_path_buf();
        match self {
            ParseError::Io(source) => PcapReadError::Io { path, source },
            ParseError::Truncated(offset, what, need, have) => PcapReadError::Truncated {
                path,
                offset,
                what,
                need,
                have,
            },
            ParseError::Corrupt(offset, what) => PcapReadError::Corrupt { path, offset, what },
            ParseError::LinkType(linktype) => PcapReadError::LinkType { path, linktype },
        }
    }
}
