//! The monitor's wait sets and its interrupt: epoll and an eventfd on Linux, where the
//! backends are. On another OS only the Disabled backend exists, so a wait set holds nothing
//! but the interrupt (and the per-CPU sets, which hold the interrupt too); there a small
//! emulation with `poll(2)` and a pipe gives the same calls and the same meaning: a wait
//! returns when the interrupt was written, or when its timeout passes.

#[cfg(target_os = "linux")]
pub(super) use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
#[cfg(target_os = "linux")]
pub(super) use nix::sys::eventfd::{EfdFlags, EventFd};

#[cfg(not(target_os = "linux"))]
pub(super) use emulated::{
    EfdFlags, Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout, EventFd,
};

// Built on Linux too when testing, so that its tests run where CI runs.
#[cfg(any(not(target_os = "linux"), test))]
#[cfg_attr(target_os = "linux", allow(dead_code))]
mod emulated {
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::sync::{Arc, Mutex};

    use nix::errno::Errno;
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

    /// What a descriptor is waited for; only readability exists here.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) struct EpollFlags(i16);

    impl EpollFlags {
        /// Readable.
        pub(crate) const EPOLLIN: EpollFlags = EpollFlags(libc::POLLIN);
    }

    /// Options of a new wait set; descriptors here are always close-on-exec.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct EpollCreateFlags;

    impl EpollCreateFlags {
        /// Close-on-exec (always, here).
        pub(crate) const EPOLL_CLOEXEC: EpollCreateFlags = EpollCreateFlags;
    }

    /// Options of a new interrupt; it is always close-on-exec and non-blocking here.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct EfdFlags;

    impl EfdFlags {
        /// Close-on-exec (always, here).
        pub(crate) const EFD_CLOEXEC: EfdFlags = EfdFlags;
        /// Non-blocking (always, here).
        pub(crate) const EFD_NONBLOCK: EfdFlags = EfdFlags;
    }

    impl std::ops::BitOr for EfdFlags {
        type Output = EfdFlags;
        fn bitor(self, _: EfdFlags) -> EfdFlags {
            EfdFlags
        }
    }

    /// A descriptor's interest and the tag a wait hands back.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct EpollEvent {
        flags: EpollFlags,
        data: u64,
    }

    impl EpollEvent {
        pub(crate) fn new(flags: EpollFlags, data: u64) -> EpollEvent {
            EpollEvent { flags, data }
        }

        pub(crate) fn empty() -> EpollEvent {
            EpollEvent::new(EpollFlags(0), 0)
        }

        /// The tag given to [`EpollEvent::new`].
        pub(crate) fn data(&self) -> u64 {
            self.data
        }
    }

    /// How long a wait may last, in milliseconds; `NONE`: no limit.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct EpollTimeout(Option<u32>);

    impl EpollTimeout {
        pub(crate) const NONE: EpollTimeout = EpollTimeout(None);
        /// The longest `poll(2)` takes: `i32::MAX` milliseconds, as epoll's.
        pub(crate) const MAX: EpollTimeout = EpollTimeout(Some(i32::MAX as u32));
    }

    impl TryFrom<u128> for EpollTimeout {
        type Error = ();
        fn try_from(ms: u128) -> Result<EpollTimeout, ()> {
            match i32::try_from(ms) {
                Ok(ms) => Ok(EpollTimeout(Some(ms as u32))),
                Err(_) => Err(()),
            }
        }
    }

    /// A pipe, both ends close-on-exec and non-blocking. (No `pipe2` on every OS: a fork and
    /// exec in another thread between the two calls may inherit it, which costs that child
    /// two descriptors and nothing else.)
    fn pipe() -> Result<(OwnedFd, OwnedFd), Errno> {
        use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
        let (read, write) = nix::unistd::pipe()?;
        for fd in [&read, &write] {
            fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
            fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
        }
        Ok((read, write))
    }

    /// A pipe standing in for an eventfd: readable once written, never read.
    pub(crate) struct EventFd {
        read: OwnedFd,
        write: OwnedFd,
    }

    impl EventFd {
        pub(crate) fn from_value_and_flags(
            _value: u32,
            _flags: EfdFlags,
        ) -> Result<EventFd, Errno> {
            let (read, write) = pipe()?;
            Ok(EventFd { read, write })
        }

        /// Makes the read end readable (a byte down the pipe).
        pub(crate) fn write(&self, _value: u64) -> Result<usize, Errno> {
            nix::unistd::write(&self.write, &[1])
        }
    }

    impl AsFd for EventFd {
        fn as_fd(&self) -> BorrowedFd<'_> {
            self.read.as_fd()
        }
    }

    /// A wait set: the descriptors added, waited on with `poll(2)`. Its own descriptor (for
    /// a set put in another set, or in a caller's) is the first one added: the interrupt.
    /// Several threads may wait at once, and add meanwhile, as with epoll.
    pub(crate) struct Epoll(pub(crate) FirstFd, Mutex<Vec<(Arc<OwnedFd>, EpollEvent)>>);

    /// The descriptor of a wait set: a copy of the first descriptor added to it (or, before
    /// any, the read end of a pipe nothing writes to, its write end kept open so that it
    /// never reads as hung up).
    pub(crate) struct FirstFd(std::sync::OnceLock<OwnedFd>, (OwnedFd, OwnedFd));

    impl AsFd for FirstFd {
        fn as_fd(&self) -> BorrowedFd<'_> {
            self.0.get().unwrap_or(&self.1.0).as_fd()
        }
    }

    impl Epoll {
        pub(crate) fn new(_flags: EpollCreateFlags) -> Result<Epoll, Errno> {
            Ok(Epoll(
                FirstFd(std::sync::OnceLock::new(), pipe()?),
                Mutex::new(Vec::new()),
            ))
        }

        pub(crate) fn add<F: AsFd>(&self, fd: F, event: EpollEvent) -> Result<(), Errno> {
            let errno = |e: std::io::Error| Errno::from_raw(e.raw_os_error().unwrap_or(0));
            let own = fd.as_fd().try_clone_to_owned().map_err(errno)?;
            if self.0.0.get().is_none() {
                let _ = self.0.0.set(own.try_clone().map_err(errno)?);
            }
            self.1
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((Arc::new(own), event));
            Ok(())
        }

        /// Waits until a descriptor of the set is readable: fills `events` with the tags of
        /// the readable ones, and returns how many. The set is copied first, so no lock is
        /// held while it waits.
        pub(crate) fn wait(
            &self,
            events: &mut [EpollEvent],
            timeout: EpollTimeout,
        ) -> Result<usize, Errno> {
            let set = self
                .1
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            let timeout = match timeout.0 {
                None => PollTimeout::NONE,
                Some(ms) => PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
            };
            let mut fds: Vec<PollFd<'_>> = set
                .iter()
                .map(|(fd, ev)| PollFd::new(fd.as_fd(), PollFlags::from_bits_truncate(ev.flags.0)))
                .collect();
            // An empty set waits out its timeout (or, with none, for good), as epoll does.
            poll(&mut fds, timeout)?;
            let mut n = 0;
            for (pfd, (_, ev)) in fds.iter().zip(set.iter()) {
                if n < events.len() && pfd.revents().is_some_and(|r| !r.is_empty()) {
                    events[n] = *ev;
                    n += 1;
                }
            }
            Ok(n)
        }
    }
}

/// The emulation's meaning, checked on Linux (where CI runs) as on the OS that uses it: a
/// wait returns the interrupt's tag once it was written, in a set and in a set that holds that
/// set, and returns nothing when its timeout passes first.
#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::emulated::{
        EfdFlags, Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout, EventFd,
    };

    #[test]
    fn a_wait_returns_once_interrupted_and_times_out_before() {
        let interrupt =
            EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
                .unwrap();
        let set = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap();
        set.add(interrupt.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, 7))
            .unwrap();
        let outer = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap();
        outer
            .add(set.0.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, 9))
            .unwrap();
        let mut events = [EpollEvent::empty(); 2];
        let ms = EpollTimeout::try_from(5u128).unwrap();
        std::thread::scope(|t| {
            // A wait with no timeout does not hold up another wait on the same set.
            let forever = t.spawn(|| set.wait(&mut [EpollEvent::empty(); 1], EpollTimeout::NONE));
            assert_eq!(set.wait(&mut events, ms).unwrap(), 0);
            assert_eq!(outer.wait(&mut events, ms).unwrap(), 0);
            assert!(!forever.is_finished());
            interrupt.write(1).unwrap();
            assert_eq!(forever.join().unwrap().unwrap(), 1);
        });
        assert_eq!(set.wait(&mut events, EpollTimeout::NONE).unwrap(), 1);
        assert_eq!(events[0].data(), 7);
        // Stays readable: every later wait returns at once, in the outer set too.
        assert_eq!(set.wait(&mut events, EpollTimeout::NONE).unwrap(), 1);
        assert_eq!(outer.wait(&mut events, EpollTimeout::NONE).unwrap(), 1);
        assert_eq!(events[0].data(), 9);
    }
}
