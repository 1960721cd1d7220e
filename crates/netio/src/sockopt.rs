//! Socket options set by number (those `libc` names but std does not).

use std::io;
use std::os::fd::RawFd;

/// `setsockopt(fd, level, opt, &v)` for an `int` option.
pub(crate) fn set_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a c_int that lives for the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
