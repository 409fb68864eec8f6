//! Writing checkpoint files, through the page cache or past it.
//!
//! Past it ([`WriteMode::Direct`]), because a checkpoint is gigabytes (a CORY run on
//! SmolLM2-135M writes 3.2 GB: two copies' weights and Adam moments) that this process writes
//! once and does not read back. Through the page cache the kernel first finds a fresh page for
//! every 4 KiB of it, zeroes it and copies into it; on a virtual machine whose freed memory is
//! handed back to the host, finding those pages is itself the cost. Measured on a 2-core VM: a
//! buffered 3.4 GB write at 404 MB/s, the same with `O_DIRECT` at 1.9 GB/s; a SmolLM2-135M
//! `model.safetensors` (538 MB) in 0.28 s instead of 1.5 s (docs/benchmarks.md, "Checkpoints
//! past the page cache"). Elsewhere (a host that keeps its page cache warm, a file system that
//! emulates `O_DIRECT` slowly) ordinary writes are as fast, so the program chooses
//! ([`set_write_mode`]); the default is ordinary buffered writes.
//!
//! Linux's `O_DIRECT` moves the bytes from the process to the device, provided the buffer
//! address, the length and the file offset are multiples of the device's logical block. So the
//! bytes are staged through one reused buffer aligned to [`BLOCK`], written a whole number of
//! blocks at a time; the last block is padded with zeros and the file then cut to its length.
//! Where `O_DIRECT` is refused (tmpfs, other file systems or systems) the same writer writes
//! through the cache; the file's bytes are the same either way.
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{ModelError, Result};

/// How this process writes model and checkpoint files ([`set_write_mode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteMode {
    /// Ordinary writes through the page cache.
    #[default]
    Buffered,
    /// `O_DIRECT` where the file system accepts it (Linux), else buffered.
    Direct,
}

/// Whether files are written with [`WriteMode::Direct`]: one setting for the process, since
/// the saves that use it are spread over several crates' APIs.
static DIRECT: AtomicBool = AtomicBool::new(false);

/// Chooses how every later model and checkpoint file of this process is written. The default
/// is [`WriteMode::Buffered`]; the file's bytes are the same either way.
pub fn set_write_mode(mode: WriteMode) {
    DIRECT.store(mode == WriteMode::Direct, Ordering::Relaxed);
}

/// The mode [`set_write_mode`] chose.
pub fn write_mode() -> WriteMode {
    match DIRECT.load(Ordering::Relaxed) {
        true => WriteMode::Direct,
        false => WriteMode::Buffered,
    }
}

/// The alignment `O_DIRECT` asks of buffers, lengths and offsets: Linux wants the device's
/// logical block (512 B or 4 KiB), so 4 KiB serves both.
const BLOCK: usize = 4096;

/// Staging buffer of a writer: large enough that each `write` keeps the device busy (8 MiB
/// writes reached 1.9 GB/s), small enough to be nothing beside the file.
const STAGE_BLOCKS: usize = 2048;

/// One block of the staging buffer; the type carries the alignment.
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Block([u8; BLOCK]);

/// A file written sequentially, past the page cache where the system allows it.
pub(crate) struct FileWriter {
    file: File,
    path: PathBuf,
    stage: Vec<Block>,
    /// Bytes of `stage` holding data not yet written.
    filled: usize,
    /// Bytes handed to [`Self::write`] so far: the file's final length.
    len: u64,
    direct: bool,
    /// A fault the tests inject into the next writes.
    #[cfg(test)]
    fault: Fault,
}

/// What the tests make the next `write` calls do.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// Write only this many bytes, then fail the call after with `EINVAL`.
    Partial(usize),
    Einval,
}

impl FileWriter {
    /// Creates (or truncates) `path`, written as [`write_mode`] says.
    pub(crate) fn create(path: &Path) -> Result<Self> {
        Self::with_stage(path, STAGE_BLOCKS, write_mode())
    }

    fn with_stage(path: &Path, blocks: usize, mode: WriteMode) -> Result<Self> {
        let (file, direct) = open(path, mode).map_err(|source| write_err(path, source))?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
            stage: vec![Block([0; BLOCK]); blocks.max(1)],
            filled: 0,
            len: 0,
            direct,
            #[cfg(test)]
            fault: Fault::None,
        })
    }

    /// Appends `bytes`.
    pub(crate) fn write(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let stage = stage_bytes(&mut self.stage);
            let n = bytes.len().min(stage.len() - self.filled);
            stage[self.filled..self.filled + n].copy_from_slice(&bytes[..n]);
            self.filled += n;
            self.len += n as u64;
            bytes = &bytes[n..];
            if self.filled == stage.len() {
                self.write_stage(self.filled)?;
            }
        }
        Ok(())
    }

    /// Writes what is staged, cuts the file to the bytes written and flushes it to the device,
    /// so that a rename after it never exposes a file whose data is still in flight.
    pub(crate) fn finish(mut self) -> Result<()> {
        if self.filled > 0 {
            let padded = match self.direct {
                true => self.filled.next_multiple_of(BLOCK),
                false => self.filled,
            };
            stage_bytes(&mut self.stage)[self.filled..padded].fill(0);
            self.write_stage(padded)?;
        }
        let io = |source| write_err(&self.path, source);
        self.file.set_len(self.len).map_err(io)?;
        self.file.sync_all().map_err(io)
    }

    /// Writes the first `n` staged bytes. A file system that opened the file for direct I/O
    /// but refuses an aligned write of it (`EINVAL`) gets the rest of this stage and every
    /// later write through the cache instead. The rest starts where the refused call would
    /// have: the bytes earlier calls wrote are in place and the file offset is past them, so
    /// nothing is written twice (rewriting the stage from its start at the advanced offset
    /// would shift the file's bytes, and `set_len` would hide it).
    fn write_stage(&mut self, n: usize) -> Result<()> {
        let mut end = n;
        let mut done = 0;
        let result = loop {
            if done >= end {
                break Ok(());
            }
            match self.write_some(done, end) {
                Ok(0) => break Err(std::io::ErrorKind::WriteZero.into()),
                Ok(k) => done += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if self.direct && is_invalid_argument(&e) => {
                    self.direct = false;
                    if let Err(e) = drop_direct(&self.file) {
                        break Err(e);
                    }
                    // Through the cache the zero padding of a last block is not needed.
                    end = n.min(self.filled).max(done);
                }
                Err(e) => break Err(e),
            }
        };
        self.filled = 0;
        result.map_err(|source| write_err(&self.path, source))
    }

    /// One `write` of staged bytes `from..to`; returns how many were written.
    fn write_some(&mut self, from: usize, to: usize) -> std::io::Result<usize> {
        #[cfg(test)]
        match self.fault {
            Fault::None => {}
            Fault::Partial(k) => {
                self.fault = Fault::Einval;
                let to = to.min(from + k);
                return self.file.write(&stage_bytes(&mut self.stage)[from..to]);
            }
            Fault::Einval => {
                self.fault = Fault::None;
                return Err(std::io::ErrorKind::InvalidInput.into()); // EINVAL
            }
        }
        self.file.write(&stage_bytes(&mut self.stage)[from..to])
    }
}

fn stage_bytes(stage: &mut [Block]) -> &mut [u8] {
    // SAFETY: `Block` is a `repr(C)` array of bytes with no padding, so `stage` is
    // `stage.len() · BLOCK` initialised bytes; the borrow of `stage` covers the slice.
    unsafe { std::slice::from_raw_parts_mut(stage.as_mut_ptr().cast(), stage.len() * BLOCK) }
}

fn write_err(path: &Path, source: std::io::Error) -> ModelError {
    ModelError::Write {
        path: path.to_path_buf(),
        source,
    }
}

fn is_invalid_argument(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::InvalidInput
}

/// Opens `path` for writing, in `Direct` mode with `O_DIRECT` unless that is refused; says
/// whether it has `O_DIRECT`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn open(path: &Path, mode: WriteMode) -> std::io::Result<(File, bool)> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = File::options();
    options.write(true).create(true).truncate(true);
    if mode == WriteMode::Buffered {
        return Ok((options.open(path)?, false));
    }
    match options.clone().custom_flags(libc::O_DIRECT).open(path) {
        Ok(file) => Ok((file, true)),
        Err(e) if is_invalid_argument(&e) => Ok((options.open(path)?, false)),
        Err(e) => Err(e),
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn open(path: &Path, _mode: WriteMode) -> std::io::Result<(File, bool)> {
    Ok((File::create(path)?, false))
}

/// Clears `O_DIRECT` on an open file.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn drop_direct(file: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL on a descriptor this process owns only change its status flags.
    let ok = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_DIRECT) == 0
    };
    match ok {
        true => Ok(()),
        false => Err(std::io::Error::last_os_error()),
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn drop_direct(_file: &File) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes that differ at every offset, so a misplaced block cannot go unnoticed.
    fn pattern(n: usize, seed: u32) -> Vec<u8> {
        (0..n as u32)
            .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 13) as u8)
            .collect()
    }

    fn written(dir: &Path, parts: &[Vec<u8>], stage_blocks: usize) -> Vec<u8> {
        written_as(dir, parts, stage_blocks, WriteMode::Direct)
    }

    fn written_as(dir: &Path, parts: &[Vec<u8>], stage_blocks: usize, mode: WriteMode) -> Vec<u8> {
        let path = dir.join("out.bin");
        let mut w = FileWriter::with_stage(&path, stage_blocks, mode).expect("create");
        for p in parts {
            w.write(p).expect("write");
        }
        w.finish().expect("finish");
        std::fs::read(&path).expect("read back")
    }

    #[test]
    fn the_file_holds_exactly_the_bytes_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Parts that start and end mid-block and span the two-block stage several times,
        // an empty part, and a tail that is not a whole block.
        let sizes = [8usize, 1000, 0, 3 * BLOCK + 17, 2 * BLOCK, 5, 9 * BLOCK - 3];
        let parts: Vec<Vec<u8>> = sizes.iter().zip(1..).map(|(&n, s)| pattern(n, s)).collect();
        let expected: Vec<u8> = parts.concat();
        assert_eq!(written(dir.path(), &parts, 2), expected);
        assert_eq!(written(dir.path(), &parts, STAGE_BLOCKS), expected);
        let buffered = WriteMode::Buffered;
        assert_eq!(written_as(dir.path(), &parts, 2, buffered), expected);
    }

    /// The descriptor's own flags, read back from the kernel: `O_DIRECT` exactly in `Direct`
    /// mode on a file system that takes it (ext4 or xfs under the temporary directory; where it
    /// is refused the writer must not claim it).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn only_the_direct_mode_opens_past_the_cache() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.bin");
        for mode in [WriteMode::Buffered, WriteMode::Direct] {
            let w = FileWriter::with_stage(&path, 1, mode).expect("create");
            // SAFETY: F_GETFL on a descriptor this test owns reads its flags only.
            let flags = unsafe { libc::fcntl(w.file.as_raw_fd(), libc::F_GETFL) };
            assert!(flags >= 0);
            let has_direct = flags & libc::O_DIRECT != 0;
            assert_eq!(has_direct, w.direct, "{mode:?}");
            if mode == WriteMode::Buffered {
                assert!(!has_direct);
            }
        }
    }

    #[test]
    fn an_existing_longer_file_is_cut_to_the_new_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("out.bin"), pattern(5 * BLOCK, 9)).expect("seed file");
        let parts = vec![pattern(BLOCK + 1, 3)];
        assert_eq!(written(dir.path(), &parts, 1), parts[0]);
    }

    #[test]
    fn whole_blocks_and_an_empty_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let parts = vec![pattern(4 * BLOCK, 4)];
        assert_eq!(written(dir.path(), &parts, 2), parts[0]);
        assert!(written(dir.path(), &[], 2).is_empty());
    }

    #[test]
    fn a_file_system_without_direct_io_gets_the_same_bytes() {
        // tmpfs refuses O_DIRECT at open on kernels before 6.6; the writer then falls back to
        // the cache.
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            return;
        }
        let dir = tempfile::tempdir_in(shm).expect("tempdir in /dev/shm");
        let parts = vec![pattern(3 * BLOCK + 5, 6), pattern(77, 7)];
        assert_eq!(written(dir.path(), &parts, 1), parts.concat());
    }

    /// A direct write that makes partial progress and then fails with `EINVAL` (a file system
    /// that takes some direct writes and refuses others) goes on through the cache from where
    /// it stopped: no byte written twice, none missing. (Rewriting the stage from its start,
    /// as the writer used to, puts `partial` bytes twice into the file.)
    #[test]
    fn a_partial_direct_write_then_einval_continues_where_it_stopped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = pattern(7 * BLOCK + 123, 11);
        for (partial, first_stage_at) in [(BLOCK, 0), (BLOCK, 2 * BLOCK), (100, 4 * BLOCK)] {
            let path = dir.path().join("out.bin");
            let mut w = FileWriter::with_stage(&path, 2, WriteMode::Direct).expect("create");
            // The file written through the cache, so that the injected EINVAL is the only one,
            // and the writer as if the file system had accepted O_DIRECT.
            drop_direct(&w.file).expect("clear O_DIRECT");
            w.direct = true;
            w.write(&data[..first_stage_at]).expect("write");
            w.fault = Fault::Partial(partial);
            w.write(&data[first_stage_at..]).expect("write");
            assert!(!w.direct, "the writer went through the cache after EINVAL");
            w.finish().expect("finish");
            let got = std::fs::read(&path).expect("read back");
            assert_eq!(
                got.len(),
                data.len(),
                "partial {partial} at {first_stage_at}"
            );
            assert!(
                got == data,
                "partial {partial} at {first_stage_at}: bytes differ"
            );
        }
    }

    /// The last, padded block refused: the tail is written unpadded and the file is exact.
    #[test]
    fn einval_on_the_padded_last_block_writes_the_tail_unpadded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = pattern(3 * BLOCK + 77, 12);
        let path = dir.path().join("out.bin");
        let mut w = FileWriter::with_stage(&path, 4, WriteMode::Direct).expect("create");
        drop_direct(&w.file).expect("clear O_DIRECT");
        w.direct = true;
        w.write(&data).expect("write");
        w.fault = Fault::Partial(2 * BLOCK);
        w.finish().expect("finish");
        assert!(std::fs::read(&path).expect("read back") == data);
    }

    #[test]
    fn an_unwritable_path_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("missing").join("out.bin");
        let err = FileWriter::create(&path).err().expect("no such directory");
        assert!(err.to_string().contains("missing/out.bin"), "{err}");
        assert!(err.to_string().starts_with("cannot write"), "{err}");
    }
}
