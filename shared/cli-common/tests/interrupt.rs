//! The interrupt flag is up as soon as the signal has been delivered: a process whose child
//! dies of the same SIGTERM (a process group signalled) must not see the child's end first and
//! take it for a failure.

#[test]
fn the_flag_is_up_when_the_signal_has_been_delivered() {
    cli_common::interrupt::install();
    assert!(!cli_common::interrupt::requested());
    // SAFETY: raising a signal this process handles; raise returns once it has been delivered
    // to this thread.
    assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
    assert!(
        cli_common::interrupt::requested(),
        "SIGTERM delivered, the flag not yet up"
    );
    // The checkpoint signal likewise.
    cli_common::interrupt::install_checkpoint_signal(libc::SIGUSR2).unwrap();
    // SAFETY: as above, a signal this process now handles.
    assert_eq!(unsafe { libc::raise(libc::SIGUSR2) }, 0);
    assert!(cli_common::interrupt::checkpoint_requested());
}
